//! A walk down a type by field names and list items, for readers outside
//! the schema that must know what a path designates: which fields identify
//! the items of a list, and where an item with a given identity stands.

use serde_json::Value;

use super::model::{Relationship, Resolved, SchemaData, TypeSpec};
use super::typed::item_key;
use super::TypeRef;

/// A position in a type; a position the type does not declare is unknown
/// (every question about it answers "nothing").
#[derive(Clone, Copy, Debug)]
pub struct TypeCursor<'s> {
    schema: &'s SchemaData,
    resolved: Option<Resolved<'s>>,
}

impl TypeRef {
    /// The cursor at the root of this type.
    pub fn cursor(&self) -> TypeCursor<'_> {
        TypeCursor::at(&self.schema, &self.spec)
    }
}

impl<'s> TypeCursor<'s> {
    fn at(schema: &'s SchemaData, spec: &'s TypeSpec) -> TypeCursor<'s> {
        TypeCursor {
            schema,
            resolved: schema.resolve(spec),
        }
    }

    fn unknown(&self) -> TypeCursor<'s> {
        TypeCursor {
            schema: self.schema,
            resolved: None,
        }
    }

    /// The type of the map field `name` (a declared field, else the map's
    /// element type).
    pub fn field(&self, name: &str) -> TypeCursor<'s> {
        let Some(map) = self.resolved.and_then(|r| r.map) else {
            return self.unknown();
        };
        match map.def.field(name) {
            Some(field) => TypeCursor::at(self.schema, &field.ty),
            None => match &map.def.element {
                Some(element) => TypeCursor::at(self.schema, element),
                None => self.unknown(),
            },
        }
    }

    /// The type of the items of a list.
    pub fn item(&self) -> TypeCursor<'s> {
        match self.resolved.and_then(|r| r.list) {
            Some(list) => TypeCursor::at(self.schema, &list.def.element),
            None => self.unknown(),
        }
    }

    /// The fields that identify an item of this list when it is a map list
    /// (`listType: map`); empty for any other type.
    pub fn key_fields(&self) -> &'s [String] {
        match self.resolved.and_then(|r| r.list) {
            Some(list) if list.relationship == Some(Relationship::Associative) => &list.def.keys,
            _ => &[],
        }
    }

    /// Where in `items` (this map list's items) the item identified as
    /// `wanted` is (its key fields, defaults counted, compared as a merge
    /// compares them); `None` for other types and for items with no valid
    /// key.
    pub fn position_of(&self, items: &[Value], wanted: &Value) -> Option<usize> {
        if self.key_fields().is_empty() {
            return None;
        }
        let list = self.resolved?.list?;
        let key = item_key(self.schema, &list, wanted).ok()?;
        items
            .iter()
            .position(|item| item_key(self.schema, &list, item).is_ok_and(|k| k == key))
    }

    /// [`TypeCursor::position_of`] for each of `wanted`, the key of each of
    /// `items` built once.
    pub fn positions_of(&self, items: &[Value], wanted: &[Value]) -> Vec<Option<usize>> {
        let Some(list) = self
            .resolved
            .and_then(|r| r.list)
            .filter(|_| !self.key_fields().is_empty())
        else {
            return vec![None; wanted.len()];
        };
        let keys: Vec<_> = items
            .iter()
            .map(|item| item_key(self.schema, &list, item).ok())
            .collect();
        wanted
            .iter()
            .map(|w| {
                let key = item_key(self.schema, &list, w).ok()?;
                keys.iter().position(|k| k.as_ref() == Some(&key))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::SchemaStore;
    use serde_json::json;

    #[test]
    fn positions_of_many_items_are_their_positions_one_by_one() {
        let pod = SchemaStore::builtin().lookup("", "v1", "Pod").unwrap();
        let ports = pod
            .cursor()
            .field("spec")
            .field("containers")
            .item()
            .field("ports");
        let items = [
            json!({"containerPort": 53, "protocol": "UDP"}),
            json!({"containerPort": 53}),
            json!({"containerPort": 80, "protocol": "TCP"}),
        ];
        let wanted = [
            json!({"containerPort": 80}),
            json!({"containerPort": 53, "protocol": "UDP"}),
            json!({"containerPort": 53, "protocol": "TCP"}),
            json!({"containerPort": 9}),
            json!({"name": "no key"}),
        ];
        let one_by_one: Vec<_> = wanted
            .iter()
            .map(|w| ports.position_of(&items, w))
            .collect();
        assert_eq!(one_by_one, [Some(2), Some(0), Some(1), None, None]);
        assert_eq!(ports.positions_of(&items, &wanted), one_by_one);
        let not_a_map_list = pod.cursor().field("spec").field("tolerations");
        assert_eq!(
            not_a_map_list.positions_of(&items, &wanted[..2]),
            [None, None]
        );
    }

    #[test]
    fn pod_containers_are_identified_by_name_and_ports_by_port_and_protocol() {
        let pod = SchemaStore::builtin().lookup("", "v1", "Pod").unwrap();
        let spec = pod.cursor().field("spec");
        let containers = spec.field("containers");
        assert_eq!(containers.key_fields(), ["name"]);
        let ports = containers.item().field("ports");
        assert_eq!(ports.key_fields(), ["containerPort", "protocol"]);
        // A list of scalars and an unknown field have no keys.
        assert!(containers.item().field("args").key_fields().is_empty());
        assert!(spec.field("nonsense").key_fields().is_empty());

        let items = [json!({"name": "a"}), json!({"name": "b", "image": "x"})];
        assert_eq!(
            containers.position_of(&items, &json!({"name": "b"})),
            Some(1)
        );
        assert_eq!(containers.position_of(&items, &json!({"name": "c"})), None);
        // protocol defaults to TCP in the key, as in a merge.
        let open = [
            json!({"containerPort": 80, "protocol": "UDP"}),
            json!({"containerPort": 80}),
        ];
        let wanted = json!({"containerPort": 80, "protocol": "TCP"});
        assert_eq!(ports.position_of(&open, &wanted), Some(1));
    }
}
