//! What a built-in kind's Go types make of a mutation's result.
//!
//! Upstream decodes every mutation's result into the kind's Go type and
//! encodes it again (k8s.io/apiserver `mutating/dispatcher.go` converts the
//! patched object into the request's typed object; `patch/json_patch.go`
//! decodes the patched JSON, `patch/smd.go` converts the merged object from
//! unstructured). What encoding/json does on the way shows in the object:
//! - a field tagged `omitempty` that is not a pointer loses a zero value
//!   (`minReadySeconds: 0`, `paused: false`, an env var's `value: ""`),
//!   and a list or map tagged `omitempty` loses an empty value (a
//!   ConfigMap's `data: {}` once a patch removed its last key, `labels: {}`);
//! - a null becomes the zero value of what it is decoded into: kept in a
//!   map or list of scalars (`data: {"k": null}` is `data: {"k": ""}`) and
//!   in a field without `omitempty` that is not a pointer (a container's
//!   `name: null` is `name: ""`); a null item of a list of structs is the
//!   zero struct, with those fields.
//!
//! The OpenAPI documents carry neither the tags nor the pointers:
//! `go_zero_fields.json` is upstream's own answer (tools/probe_go_omitempty.py
//! runs every built-in kind with zero and null fields through maporacle),
//! with the kinds that go through the round trip at all (maporacle keeps
//! CustomResourceDefinition and APIService unstructured). Custom kinds are
//! unstructured upstream: they are left as they are.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::go_decode::{self, table, within_items, within_value, GoType, Kind, Table, Within};
use super::model::{FastHash, Relationship, SchemaData, TypeSpec};
use super::typed::MAX_DEPTH;

/// What the round trip does to one field of a struct.
#[derive(Debug)]
struct FieldRule {
    ty: &'static GoType,
    /// `omitempty` and no pointer: a zero value is left out.
    omit: bool,
    /// No `omitempty` and no pointer: null becomes the zero value.
    zero: bool,
    /// A list or map with `omitempty`: an empty one is left out.
    omit_empty: bool,
    /// Neither, and of a type whose value the walk never changes: the
    /// field is passed over.
    inert: bool,
    /// The keys of an associative list of structs, by which a merge
    /// matches its items (from the built-in schema).
    list_keys: Option<Box<[String]>>,
}

/// Per struct (by its place in the Go types table), its fields' rules,
/// found with one lookup per field of the object.
#[derive(Debug, Default)]
struct StructRules {
    fields: HashMap<String, FieldRule, FastHash>,
    /// The struct fields encoding/json writes even when absent (no
    /// pointer, or a pointer the conversion sets), each with its struct.
    fills: Box<[(String, usize)]>,
}

#[cfg(test)]
impl StructRules {
    fn omits(&self, field: &str) -> bool {
        self.fields.get(field).is_some_and(|r| r.omit)
    }
}

#[derive(Debug, Default)]
struct Rules {
    /// The kinds whose objects go through the round trip.
    roots: HashSet<usize, FastHash>,
    structs: Vec<StructRules>,
}

fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        parse_rules(
            include_str!("go_zero_fields.json"),
            include_str!("go_struct_fills.json"),
            table(),
        )
    })
}

fn parse_rules(text: &str, fills_text: &str, table: &'static Table) -> Rules {
    let doc: Value = serde_json::from_str(text).unwrap_or_default();
    // Per struct, the struct fields written when absent
    // (tools/probe_go_struct_fills.py).
    let fills_doc: Value = serde_json::from_str(fills_text).unwrap_or_default();
    let fills_of = |def_name: &str| -> Names<'_> { names(fills_doc.get(def_name)) };
    // Per struct, the fields that lose a zero value, those where null
    // becomes a kept zero value, and the lists and maps that lose an empty
    // value.
    let mut zero_fields: Vec<(Names<'_>, Names<'_>, Names<'_>)> =
        (0..table.defs.len()).map(|_| Default::default()).collect();
    if let Some(types) = doc.get("types").and_then(Value::as_object) {
        for (name, def) in types {
            let Some(slot) = table.index.get(name).and_then(|&i| zero_fields.get_mut(i)) else {
                continue;
            };
            *slot = (
                names(def.get("omit")),
                names(def.get("zero")),
                names(def.get("empty")),
            );
        }
    }
    let mut def_names = vec![""; table.defs.len()];
    for (name, &i) in &table.index {
        if let Some(slot) = def_names.get_mut(i) {
            *slot = name.as_str();
        }
    }
    let schema = &super::SchemaStore::builtin().schema;
    let structs = table
        .defs
        .iter()
        .zip(&zero_fields)
        .zip(def_names)
        .map(|((sdef, (omit, zero, empty)), def_name)| StructRules {
            fills: {
                let filled = fills_of(def_name);
                sdef.fields
                    .iter()
                    .filter(|(field, _)| filled.contains(field.as_str()))
                    .filter_map(|(field, (ty, _))| match ty.kind {
                        Kind::Struct(def) => Some((field.clone(), def)),
                        _ => None,
                    })
                    .collect()
            },
            fields: sdef
                .fields
                .iter()
                .map(|(field, (ty, _))| {
                    let (omit, zero, omit_empty) = (
                        omit.contains(field.as_str()),
                        zero.contains(field.as_str()),
                        empty.contains(field.as_str()),
                    );
                    let list_keys = match &ty.kind {
                        Kind::List(elem) if matches!(elem.kind, Kind::Struct(_)) => {
                            associative_keys(schema, def_name, field)
                        }
                        _ => None,
                    };
                    let rule = FieldRule {
                        ty,
                        omit,
                        zero,
                        omit_empty,
                        inert: !omit && !zero && !omit_empty && never_changes(&ty.kind),
                        list_keys,
                    };
                    (field.clone(), rule)
                })
                .collect(),
        })
        .collect();
    Rules {
        roots: names(doc.get("roots"))
            .iter()
            .filter_map(|name| table.index.get(*name).copied())
            .collect(),
        structs,
    }
}

/// The keys of the field `field` of the built-in type `def_name` when it is
/// an associative list with keys.
fn associative_keys(schema: &SchemaData, def_name: &str, field: &str) -> Option<Box<[String]>> {
    let owner_type = TypeSpec::named(def_name);
    let owner = schema.resolve(&owner_type)?.map?;
    let list = schema.resolve(&owner.def.field(field)?.ty)?.list?;
    (list.relationship == Some(Relationship::Associative) && !list.def.keys.is_empty())
        .then(|| list.def.keys.clone().into_boxed_slice())
}

/// Field names, borrowed from the rules' JSON.
type Names<'t> = HashSet<&'t str, FastHash>;

/// The strings of a JSON list.
fn names(v: Option<&Value>) -> Names<'_> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether the walk leaves any value of this kind as it is (see
/// `Walk::value`): scalars other than int32s, quantities and times.
fn never_changes(kind: &Kind) -> bool {
    !matches!(
        kind,
        Kind::Struct(_)
            | Kind::List(_)
            | Kind::Map(_)
            | Kind::Int32
            | Kind::Quantity
            | Kind::Time
            | Kind::MicroTime
    )
}

/// Whether objects of the type named `type_name` are decoded into Go types
/// upstream: the built-in kinds, but for those kube-apiserver's admission
/// keeps unstructured (CustomResourceDefinition, APIService).
pub fn go_typed(type_name: Option<&str>) -> bool {
    type_name
        .and_then(|name| table().index.get(name))
        .is_some_and(|root| rules().roots.contains(root))
}

/// Rewrites `object`, a mutation's result of the type named `type_name`, as
/// the kind's Go types encode it again; whether anything changed. Kinds
/// without a round trip are left alone.
pub fn go_round_trip(object: &mut Value, type_name: Option<&str>) -> bool {
    round_trip(object, type_name, None)
}

/// [`go_round_trip`] of only what `written` reaches, for an object that was
/// as the Go types encode it before a mutation wrote it: `written` has the
/// shape of what the mutation wrote (an applied configuration, or the paths
/// of a JSON patch as nested objects). Its keys name the fields of a struct,
/// the entries of a map, or the items of a list by their positions, to
/// visit, each with what to visit of it. A list of an associative list's
/// items names the object's items with the same keys, each visited where its
/// item wrote: a merge leaves the other items as they were. Any other value
/// of `written`, and any other list, stands for the whole value.
pub fn go_round_trip_within(
    object: &mut Value,
    type_name: Option<&str>,
    written: &Map<String, Value>,
) -> bool {
    round_trip(object, type_name, Some(written))
}

fn round_trip(object: &mut Value, type_name: Option<&str>, within: Within<'_>) -> bool {
    let table = table();
    let rules = rules();
    let Some(&root) = type_name.and_then(|name| table.index.get(name)) else {
        return false;
    };
    if !rules.roots.contains(&root) {
        return false;
    }
    let walk = Walk { rules };
    walk.structure(root, object, within, 0)
}

struct Walk<'a> {
    rules: &'a Rules,
}

impl Walk<'_> {
    fn structure(&self, def: usize, v: &mut Value, within: Within<'_>, depth: usize) -> bool {
        let (Some(rules), Value::Object(m)) = (self.rules.structs.get(def), v) else {
            return false;
        };
        if depth > MAX_DEPTH {
            return false;
        }
        let mut changed = false;
        // Fields left out are rare: found first, removed after.
        let mut omitted: SmallVec<[String; 2]> = SmallVec::new();
        let mut visit = |key: &String, child: &mut Value, written: Option<&Value>| {
            let Some(rule) = rules.fields.get(key.as_str()) else {
                return;
            };
            let (field_changed, omit) = self.field(rule, child, written, depth);
            changed |= field_changed;
            if omit {
                omitted.push(key.clone());
            }
        };
        match within {
            None => m
                .iter_mut()
                .for_each(|(key, child)| visit(key, child, None)),
            Some(written) => {
                for (key, written) in written {
                    if let Some(child) = m.get_mut(key) {
                        visit(key, child, Some(written));
                    }
                }
            }
        }
        for key in &omitted {
            m.remove(key);
        }
        for (field, def) in rules.fills.iter() {
            if m.get(field).is_none_or(Value::is_null) {
                let mut filled = Value::Object(Map::new());
                self.structure(*def, &mut filled, None, depth + 1);
                m.insert(field.clone(), filled);
                changed = true;
            }
        }
        changed || !omitted.is_empty()
    }

    /// One field of a struct, of which `written` was written (`None`: all of
    /// it): whether it changed, and whether it is left out.
    fn field(
        &self,
        rule: &FieldRule,
        child: &mut Value,
        written: Option<&Value>,
        depth: usize,
    ) -> (bool, bool) {
        if rule.inert {
            return (false, false);
        }
        if rule.zero && child.is_null() {
            return match zero_scalar(&rule.ty.kind) {
                Some(z) => {
                    *child = z;
                    (true, false)
                }
                None => (false, false),
            };
        }
        let keyed = match (&rule.list_keys, &rule.ty.kind, written, &mut *child) {
            (Some(keys), Kind::List(elem), Some(Value::Array(written)), Value::Array(items)) => {
                self.keyed_items(elem, items, keys, written, depth + 1)
            }
            _ => None,
        };
        // A time comes back in UTC, the zero time as null.
        let changed = match keyed {
            Some(changed) => changed,
            None => self.value(rule.ty, child, written.and_then(within_value), depth + 1),
        };
        // A scalar that is null or zero in an `omitempty` field is left
        // out, and a zero time in an `omitzero` one; so is an empty list or
        // map in an `omitempty` field (a remove of its last entry).
        let omitted = (rule.omit && (child.is_null() || is_zero(child)))
            || (rule.omit_empty && is_empty(child));
        (changed, omitted)
    }

    fn value(&self, ty: &GoType, v: &mut Value, within: Within<'_>, depth: usize) -> bool {
        match (&ty.kind, v) {
            (Kind::Struct(def), v @ Value::Object(_)) => self.structure(*def, v, within, depth),
            (Kind::List(elem), Value::Array(items)) => {
                let mut changed = false;
                match within {
                    None => {
                        for item in items {
                            changed |= self.element(elem, item, None, depth + 1);
                        }
                    }
                    Some(written) => {
                        for (i, within) in within_items(written, items.len()) {
                            changed |= self.element(elem, &mut items[i], within, depth + 1);
                        }
                    }
                }
                changed
            }
            (Kind::Map(elem), Value::Object(m)) => {
                let mut changed = false;
                match within {
                    None => {
                        for child in m.values_mut() {
                            changed |= self.element(elem, child, None, depth + 1);
                        }
                    }
                    Some(written) => {
                        for (key, written) in written {
                            if let Some(child) = m.get_mut(key) {
                                changed |=
                                    self.element(elem, child, within_value(written), depth + 1);
                            }
                        }
                    }
                }
                changed
            }
            // Only an ApplyConfiguration's result gets here out of range
            // (JSON decoding refuses it): FromUnstructured sets the int64
            // into the int32, which wraps.
            (Kind::Int32, Value::Number(n)) => match n.as_i64() {
                Some(i) if i32::try_from(i).is_err() => {
                    *n = (i as i32).into();
                    true
                }
                _ => false,
            },
            (Kind::Quantity, v) => match go_decode::quantity_round_trip(v) {
                Some(text) if v.as_str() != Some(text.as_str()) => {
                    *v = Value::String(text);
                    true
                }
                _ => false,
            },
            (Kind::Time | Kind::MicroTime, v) => {
                let Some(encoded) = v
                    .as_str()
                    .and_then(|s| go_decode::time_round_trip(&ty.kind, s))
                else {
                    return false;
                };
                let changed = *v != encoded;
                *v = encoded;
                changed
            }
            _ => false,
        }
    }

    /// The items of an associative list that the items of an applied
    /// configuration (`written`) name by their keys, each visited where its
    /// item wrote; whether any changed. `None`, to visit the whole list, when
    /// an item on either side cannot be told by its keys (a key missing or
    /// not a string, integer or bool, an item not an object): the merge may
    /// have matched it by a key's default. (The merge's own
    /// [`super::typed::item_key`] fills defaults in from the schema's list
    /// view, which these rules, built once from the Go types, do not hold;
    /// only the rare item that needs a default is visited with its list.)
    fn keyed_items(
        &self,
        elem: &GoType,
        items: &mut [Value],
        keys: &[String],
        written: &[Value],
        depth: usize,
    ) -> Option<bool> {
        fn key_of<'v>(keys: &[String], item: &'v Value) -> Option<SmallVec<[&'v Value; 2]>> {
            let item = item.as_object()?;
            keys.iter()
                .map(|k| item.get(k).filter(|v| is_plain_key(v)))
                .collect()
        }
        let written: Vec<_> = written
            .iter()
            .map(|w| Some((key_of(keys, w)?, w.as_object()?)))
            .collect::<Option<_>>()?;
        let matched: Vec<Option<&Map<String, Value>>> = items
            .iter()
            .map(|item| {
                let key = key_of(keys, item)?;
                Some(written.iter().find(|(k, _)| *k == key).map(|(_, w)| *w))
            })
            .collect::<Option<_>>()?;
        let mut changed = false;
        for (item, within) in items.iter_mut().zip(matched) {
            if let Some(within) = within {
                changed |= self.element(elem, item, Some(within), depth + 1);
            }
        }
        Some(changed)
    }

    /// An item of a list or a value of a map: a null is its type's zero.
    fn element(&self, ty: &GoType, v: &mut Value, within: Within<'_>, depth: usize) -> bool {
        if !v.is_null() {
            return self.value(ty, v, within, depth);
        }
        let zero = match &ty.kind {
            Kind::Struct(def) => self.zero_struct(*def),
            kind => zero_scalar(kind),
        };
        match zero {
            Some(z) => {
                *v = z;
                true
            }
            None => false,
        }
    }

    /// The zero value of a struct as encoding/json writes it: the scalar
    /// fields without `omitempty` that are not pointers.
    fn zero_struct(&self, def: usize) -> Option<Value> {
        let rules = self.rules.structs.get(def)?;
        let mut m = Map::new();
        for (field, rule) in rules.fields.iter().filter(|(_, r)| r.zero) {
            if let Some(z) = zero_scalar(&rule.ty.kind) {
                m.insert(field.clone(), z);
            }
        }
        Some(Value::Object(m))
    }
}

/// Whether a list key's value is compared as the merge compares it.
fn is_plain_key(v: &Value) -> bool {
    match v {
        Value::String(_) | Value::Bool(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// The JSON of a Go scalar's zero value; `None` for other types.
fn zero_scalar(kind: &Kind) -> Option<Value> {
    match kind {
        Kind::String => Some(Value::String(String::new())),
        // `Quantity{}.MarshalJSON`.
        Kind::Quantity => Some(Value::String("0".into())),
        Kind::Int32 | Kind::Int64 | Kind::Float64 => Some(Value::from(0)),
        Kind::Bool => Some(Value::Bool(false)),
        _ => None,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.is_empty(),
        Value::Object(entries) => entries.is_empty(),
        _ => false,
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(mut object: Value, ty: &str) -> (Value, bool) {
        let changed = go_round_trip(&mut object, Some(ty));
        (without_fills(object), changed)
    }

    /// `v` without the empty structs the round trip fills in (`status: {}`,
    /// a container's `resources: {}`), for the tests of its other rules.
    fn without_fills(mut v: Value) -> Value {
        fn only_empty(v: &Value) -> bool {
            v.as_object().is_some_and(|m| m.values().all(only_empty))
        }
        fn strip(v: &mut Value, fill_names: &HashSet<&str>) {
            match v {
                Value::Object(m) => {
                    m.retain(|k, v| !(fill_names.contains(k.as_str()) && only_empty(v)));
                    m.values_mut().for_each(|v| strip(v, fill_names));
                }
                Value::Array(items) => items.iter_mut().for_each(|v| strip(v, fill_names)),
                _ => {}
            }
        }
        let fill_names: HashSet<&str> = rules()
            .structs
            .iter()
            .flat_map(|s| s.fills.iter().map(|(name, _)| name.as_str()))
            .collect();
        strip(&mut v, &fill_names);
        v
    }

    #[test]
    fn absent_structs_are_filled_as_go_writes_them() {
        // maporacle (tools/probe_go_struct_fills.py): a Pod written without
        // them comes back with metadata, status, the conversion's
        // spec.securityContext and each container's resources, all empty;
        // a Deployment with its strategy and its template's metadata too.
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "i"}]}});
        assert!(go_round_trip(&mut pod, Some("io.k8s.api.core.v1.Pod")));
        assert_eq!(
            pod,
            json!({"metadata": {}, "status": {}, "spec": {"securityContext": {},
                   "containers": [{"name": "a", "image": "i", "resources": {}}]}})
        );
        let mut deployment =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}});
        assert!(go_round_trip(
            &mut deployment,
            Some("io.k8s.api.apps.v1.Deployment")
        ));
        assert_eq!(
            deployment,
            json!({"metadata": {}, "status": {}, "spec": {"strategy": {}, "template": {
                   "metadata": {}, "spec": {"securityContext": {},
                   "containers": [{"name": "a", "resources": {}}]}}}})
        );
        // A null struct is filled as an absent one; one present stays.
        let mut pod = json!({"metadata": {"name": "p"}, "status": null, "spec": {"securityContext": {"runAsUser": 1}}});
        assert!(go_round_trip(&mut pod, Some("io.k8s.api.core.v1.Pod")));
        assert_eq!(
            pod,
            json!({"metadata": {"name": "p"}, "status": {}, "spec": {"securityContext": {"runAsUser": 1}}})
        );
        // Filled again, nothing changes.
        assert!(!go_round_trip(&mut pod, Some("io.k8s.api.core.v1.Pod")));
    }

    #[test]
    fn omitempty_lists_and_maps_lose_empty_values() {
        // maporacle: ObjectMeta's labels and finalizers, a ConfigMap's data
        // and a container's args are `omitempty`; a PodSpec's containers
        // is not.
        let (object, changed) = round_trip(
            json!({"metadata": {"name": "p", "labels": {}, "finalizers": []},
                   "spec": {"containers": [{"name": "a", "args": []}]}}),
            "io.k8s.api.core.v1.Pod",
        );
        assert!(changed);
        assert_eq!(
            without_fills(object.clone()),
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}})
        );
        let (object, _) = round_trip(
            json!({"metadata": {"name": "c"}, "data": {}, "binaryData": {}}),
            "io.k8s.api.core.v1.ConfigMap",
        );
        assert_eq!(object, json!({"metadata": {"name": "c"}}));
        let pod = json!({"metadata": {}, "status": {},
                         "spec": {"containers": [], "securityContext": {}}});
        let mut object = pod.clone();
        assert!(!go_round_trip(&mut object, Some("io.k8s.api.core.v1.Pod")));
        assert_eq!(object, pod);
    }

    #[test]
    fn omitempty_scalars_lose_zero_values() {
        let (object, changed) = round_trip(
            json!({"spec": {"minReadySeconds": 0, "paused": false, "replicas": 0,
                   "template": {"spec": {"containers": [{"name": "a", "image": "", "env": [{"name": "A", "value": ""}]}]}}}}),
            "io.k8s.api.apps.v1.Deployment",
        );
        assert!(changed);
        assert_eq!(
            without_fills(object.clone()),
            json!({"spec": {"replicas": 0,
                   "template": {"spec": {"containers": [{"name": "a", "env": [{"name": "A"}]}]}}}})
        );
    }

    #[test]
    fn a_round_trip_within_what_was_written_visits_only_that() {
        // Outside what was written the object is left as it is (there it
        // was already as Go encodes it); inside, the rules are the whole
        // round trip's: the written struct loses its zero `paused`, the
        // map's null entry becomes "", the written list is visited whole.
        let mut object = json!({
            "metadata": {"labels": {"a": null, "b": null}, "annotations": {"c": null}},
            "spec": {"minReadySeconds": 0, "paused": false,
                     "template": {"spec": {"containers": [{"name": "a", "image": ""}, {"name": "b", "image": ""}]}}}});
        let written = json!({"metadata": {"labels": {"a": "x"}},
                             "spec": {"paused": false, "template": {"spec": {"containers": null}}}});
        let changed = go_round_trip_within(
            &mut object,
            Some("io.k8s.api.apps.v1.Deployment"),
            written.as_object().unwrap(),
        );
        assert!(changed);
        assert_eq!(
            without_fills(object.clone()),
            json!({
                "metadata": {"labels": {"a": "", "b": null}, "annotations": {"c": null}},
                "spec": {"minReadySeconds": 0,
                         "template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}}}})
        );
        // Nothing written, nothing visited.
        let before = object.clone();
        assert!(!go_round_trip_within(
            &mut object,
            Some("io.k8s.api.apps.v1.Deployment"),
            &Map::new()
        ));
        assert_eq!(object, before);
    }

    #[test]
    fn a_list_written_through_by_a_json_patch_is_visited_at_the_positions_it_names() {
        let pod = || {
            json!({"spec": {"containers": [
                {"name": "a", "image": ""}, {"name": "b", "image": ""}, {"name": "c", "image": ""}]}})
        };
        let mut object = pod();
        let written = json!({"spec": {"containers": {"2": null, "0": {"name": null}}}});
        assert!(go_round_trip_within(
            &mut object,
            Some("io.k8s.api.core.v1.Pod"),
            written.as_object().unwrap()
        ));
        // Item 2 whole loses its empty image; of item 0 only `name` is
        // visited; item 1 is not.
        assert_eq!(
            without_fills(object.clone()),
            json!({"spec": {"containers": [
                {"name": "a", "image": ""}, {"name": "b", "image": ""}, {"name": "c"}]}})
        );
    }

    #[test]
    fn an_associative_list_written_by_a_merge_is_visited_at_the_items_it_names() {
        let pod = |cpu_a: &str, cpu_b: &str| {
            json!({"metadata": {}, "status": {}, "spec": {"securityContext": {}, "containers": [
                {"name": "a", "resources": {"requests": {"cpu": cpu_a}}},
                {"name": "b", "resources": {"requests": {"cpu": cpu_b}}}]}})
        };
        let within = |object: &mut Value, written: Value| {
            go_round_trip_within(
                object,
                Some("io.k8s.api.core.v1.Pod"),
                written.as_object().unwrap(),
            )
        };
        // Only `b` is named: `a` was as the Go types encode it before the
        // merge, which left it alone.
        let mut object = pod("1000m", "1000m");
        let written = json!({"spec": {"containers": [
            {"name": "b", "resources": {"requests": {"cpu": "1000m"}}}]}});
        assert!(within(&mut object, written));
        assert_eq!(object, pod("1000m", "1"));
        // Within `b`, only what its item wrote.
        let mut object = pod("1000m", "1000m");
        let written = json!({"spec": {"containers": [{"name": "b", "image": "x"}]}});
        assert!(!within(&mut object, written));
        assert_eq!(object, pod("1000m", "1000m"));
        // An item the keys cannot tell (a key missing, on either side): the
        // list is visited whole.
        for (mut object, written) in [
            (
                pod("1000m", "1000m"),
                json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1000m"}}}]}}),
            ),
            (
                json!({"spec": {"containers": [
                    {"resources": {"requests": {"cpu": "1000m"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1000m"}}}]}}),
                json!({"spec": {"containers": [{"name": "b", "image": "x"}]}}),
            ),
        ] {
            let mut whole = object.clone();
            go_round_trip(&mut whole, Some("io.k8s.api.core.v1.Pod"));
            assert!(within(&mut object, written));
            assert_eq!(object, whole);
        }
        // A list that is not associative (`args`, atomic) stays whole, and
        // the keys are the schema's: a list of structs keyed by two fields.
        let rules = rules();
        let table = table();
        let container = &rules.structs[table.index["io.k8s.api.core.v1.Container"]];
        assert_eq!(container.fields["args"].list_keys, None);
        assert_eq!(
            container.fields["ports"].list_keys.as_deref(),
            Some(&["containerPort".to_string(), "protocol".to_string()][..])
        );
        let spec = &rules.structs[table.index["io.k8s.api.core.v1.PodSpec"]];
        assert_eq!(
            spec.fields["containers"].list_keys.as_deref(),
            Some(&["name".to_string()][..])
        );
    }

    #[test]
    fn nulls_become_zero_values_where_go_keeps_them() {
        let (object, changed) = round_trip(
            json!({"metadata": {"labels": {"a": null}, "finalizers": [null], "generateName": null},
                   "data": {"k": null, "v": "x"}}),
            "io.k8s.api.core.v1.ConfigMap",
        );
        assert!(changed);
        assert_eq!(
            without_fills(object.clone()),
            json!({"metadata": {"labels": {"a": ""}, "finalizers": [""]}, "data": {"k": "", "v": "x"}})
        );
        let (object, _) = round_trip(
            json!({"spec": {"containers": [{"name": null}, null]}}),
            "io.k8s.api.core.v1.Pod",
        );
        assert_eq!(
            without_fills(object.clone()),
            json!({"spec": {"containers": [{"name": ""}, {"name": ""}]}})
        );
    }

    /// maporacle's answers (k8s.io/apiserver v0.36.2) for a JSONPatch
    /// writing these quantities and times.
    #[test]
    fn quantities_and_times_encode_in_their_own_form() {
        let (object, changed) = round_trip(
            json!({"metadata": {"creationTimestamp": "2020-01-02T03:04:05.123+02:00",
                                "deletionTimestamp": "0001-01-01T01:00:00+01:00"},
                   "spec": {"overhead": {"cpu": 2.5, "memory": "1.5Gi", "a": "012", "b": null, "c": 1000},
                            "containers": [{"name": "c", "resources": {"limits": {"cpu": "1000m"}}}]}}),
            "io.k8s.api.core.v1.Pod",
        );
        assert!(changed);
        assert_eq!(
            without_fills(object.clone()),
            json!({"metadata": {"creationTimestamp": "2020-01-02T01:04:05Z", "deletionTimestamp": null},
                   "spec": {"overhead": {"cpu": "2500m", "memory": "1536Mi", "a": "012", "b": "0", "c": "1k"},
                            "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}})
        );
        let canonical = json!({"spec": {"overhead": {"cpu": "2e3"}, "securityContext": {}}, "status": {},
                               "metadata": {"creationTimestamp": "2020-01-02T01:04:05Z"}});
        assert_eq!(
            round_trip(canonical.clone(), "io.k8s.api.core.v1.Pod"),
            (without_fills(canonical), false)
        );
        // A time whose UTC year kube-apiserver could not read back stays
        // as written (go_decode::time_round_trip).
        let far = json!({"metadata": {"creationTimestamp": "9999-12-31T23:59:59-05:00"},
                         "spec": {"securityContext": {}}, "status": {}});
        assert_eq!(
            round_trip(far.clone(), "io.k8s.api.core.v1.Pod"),
            (without_fills(far), false)
        );
        // An int32 out of range wraps (FromUnstructured).
        let (object, changed) = round_trip(
            json!({"spec": {"replicas": 3_000_000_000_i64, "minReadySeconds": -2_147_483_649_i64, "revisionHistoryLimit": 7}}),
            "io.k8s.api.apps.v1.Deployment",
        );
        assert!(changed);
        assert_eq!(
            without_fills(object.clone()),
            json!({"spec": {"replicas": -1_294_967_296, "minReadySeconds": 2_147_483_647, "revisionHistoryLimit": 7}})
        );
        // Values that do not decode are the decoder's to report.
        let bad = json!({"spec": {"overhead": {"cpu": "lots"}, "securityContext": {}}, "status": {},
                         "metadata": {"creationTimestamp": "today"}});
        assert_eq!(
            round_trip(bad.clone(), "io.k8s.api.core.v1.Pod"),
            (without_fills(bad), false)
        );
    }

    #[test]
    fn kinds_without_a_round_trip_are_left_alone() {
        let object = json!({"spec": {"group": "", "names": {"plural": ""}}, "x": null});
        for ty in [
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
            "example.com.v1.Widget",
        ] {
            assert_eq!(round_trip(object.clone(), ty), (object.clone(), false));
        }
        let unchanged = json!({"data": {"k": "v"}, "metadata": {"name": "a"}});
        assert_eq!(
            round_trip(unchanged.clone(), "io.k8s.api.core.v1.ConfigMap"),
            (unchanged, false)
        );
    }

    #[test]
    fn the_rules_parse_and_name_known_kinds() {
        let rules = rules();
        assert!(rules.roots.len() > 50);
        let table = table();
        let spec = table.index["io.k8s.api.apps.v1.DeploymentSpec"];
        assert!(rules.structs[spec].omits("minReadySeconds"));
        assert!(!rules.structs[spec].omits("replicas"));
    }

    /// Every type in the table, with the types of its elements.
    fn all_types(table: &Table) -> Vec<&GoType> {
        fn with_elements<'t>(ty: &'t GoType, out: &mut Vec<&'t GoType>) {
            out.push(ty);
            if let Kind::List(elem) | Kind::Map(elem) = &ty.kind {
                with_elements(elem, out);
            }
        }
        let mut out = Vec::new();
        for def in &table.defs {
            for (ty, _) in def.fields.values() {
                with_elements(ty, &mut out);
            }
        }
        out
    }

    /// `never_changes` marks fields the walk skips: it must hold of every
    /// kind `Walk::value` leaves alone, and of no kind it rewrites, or the
    /// skipped fields would miss a rewrite.
    #[test]
    fn never_changes_agrees_with_the_walk() {
        // Values that one rewrite or another applies to.
        let samples = [
            json!(null),
            json!(""),
            json!("2024-01-02T03:04:05+02:00"),
            json!("2024-01-02T03:04:05.123456+02:00"),
            json!("1000m"),
            json!("0.5Gi"),
            json!(3_000_000_000_i64),
            json!(1.5),
            json!(true),
            json!([null, 3_000_000_000_i64, "1000m"]),
            json!({"a": null, "b": "2024-01-02T03:04:05+02:00"}),
        ];
        let walk = Walk { rules: rules() };
        let mut rewritten_kinds = HashSet::new();
        for ty in all_types(table()) {
            for sample in &samples {
                let mut v = sample.clone();
                let changed = walk.value(ty, &mut v, None, 0);
                assert_eq!(changed, v != *sample, "{:?} on {sample}", ty.kind);
                if never_changes(&ty.kind) {
                    assert!(!changed, "{:?} rewrote {sample} to {v}", ty.kind);
                } else if changed {
                    rewritten_kinds.insert(walked_label(&ty.kind));
                }
            }
        }
        // Each kind that is walked was seen rewriting a sample (a struct
        // only through its fields, which the samples do not name).
        for kind in ["int32", "quantity", "time", "microtime", "list", "map"] {
            assert!(
                rewritten_kinds.contains(kind),
                "{kind} never rewrote a sample"
            );
        }
    }

    /// The kinds `Walk::value` rewrites, by name.
    fn walked_label(kind: &Kind) -> &'static str {
        match kind {
            Kind::Int32 => "int32",
            Kind::Quantity => "quantity",
            Kind::Time => "time",
            Kind::MicroTime => "microtime",
            Kind::List(_) => "list",
            Kind::Map(_) => "map",
            Kind::Struct(_) => "struct",
            _ => "other",
        }
    }
}
