//! Conversions between JSON (the objects of admission) and CEL values.
//!
//! JSON to CEL borrows every string from the JSON document rather than
//! copying it: only the containers are allocated. CEL to JSON is used on a
//! mutation's result, which is small.

use super::access::Access;
use cel::common::traits::{Container, Indexer, Sizer};
use cel::common::types::{self as cel_types, Type};
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelOptional,
    CelString, CelUInt,
};
use cel::common::value::{CowVal, Val};
use cel::ExecutionError;
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};

/// The hasher of every map converted from JSON: one per process, so that
/// the maps converted from one JSON object iterate in one order. A
/// [`SelectedFields`] converts a field each time it is selected, and an
/// expression that reads a map twice should not see two orders.
fn map_hasher() -> std::hash::RandomState {
    static KEYS: std::sync::LazyLock<std::hash::RandomState> =
        std::sync::LazyLock::new(std::hash::RandomState::new);
    KEYS.clone()
}

/// Converts a JSON value into a CEL value that borrows its strings.
///
/// Integers become `int` (or `uint` above `i64::MAX`), other numbers `double`.
pub fn json_to_val<'a>(value: &'a Json) -> Box<dyn Val + 'a> {
    match value {
        Json::Null => Box::new(NullInput),
        Json::Bool(b) => Box::new(CelBool::from(*b)),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Json::String(s) => Box::new(CelString::from(s.as_str())),
        Json::Array(items) => Box::new(CelList::from(
            items.iter().map(json_to_val).collect::<Vec<_>>(),
        )),
        Json::Object(map) => {
            let mut out: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> =
                HashMap::with_capacity_and_hasher(map.len(), map_hasher());
            for (k, v) in map {
                out.insert(CelMapKey::from(k.as_str()), json_to_val(v));
            }
            Box::new(CelMap::from(out))
        }
    }
}

/// A JSON null of an input (`oldObject` on a CREATE, `namespaceObject` of a
/// cluster-scoped request, a null field of an object): CEL's `null` in every
/// way (its type, equality, conversions: it downcasts to `null`), except
/// that a field selected or a key indexed on it is cel-go's answer for a
/// qualifier on null, `no such key: metadata`, and `has()` of a field of it
/// is false, where the `cel` crate reports the `_._` overload on `null_type`.
#[derive(Clone, Copy, Debug)]
struct NullInput;

/// What [`NullInput`] downcasts to.
static NULL: CelNull = CelNull;
static NULL_TYPE: Type = cel_types::NULL_TYPE;

impl Val for NullInput {
    fn get_type(&self) -> &Type {
        &NULL_TYPE
    }

    fn cel_type() -> &'static Type {
        &NULL_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<CelNull>().is_some()
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(NullInput)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(&NULL)
    }
}

impl Indexer for NullInput {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = if let Some(s) = idx.downcast_ref::<CelString>() {
            s.inner().to_string()
        } else if let Some(i) = idx.downcast_ref::<CelInt>() {
            i.inner().to_string()
        } else {
            idx.get_type().name().to_string()
        };
        Err(ExecutionError::NoSuchKey(std::sync::Arc::new(key)))
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// Converts the part of `value` that `access` says can be observed (see
/// [`Access`]): a JSON object read only through selections becomes a map of
/// the selected fields it has; anything else is converted whole.
pub fn json_to_val_for<'a>(value: &'a Json, access: &'a Access) -> Box<dyn Val + 'a> {
    match (value, access.selected(), access.items()) {
        (Json::Object(map), Some(fields), _) => Box::new(SelectedFields { map, fields }),
        (Json::Array(items), _, Some(inner)) => Box::new(CelList::from(
            items
                .iter()
                .map(|item| json_to_val_for(item, inner))
                .collect::<Vec<_>>(),
        )),
        _ => json_to_val(value),
    }
}

/// The part of `value` that [`json_to_val_for`] converts under `access`, as
/// JSON: two values with equal projections convert to equal CEL values, so
/// an expression reading the input as `access` says cannot tell them apart.
pub fn project(value: &Json, access: &Access) -> Json {
    match (value, access.selected(), access.items()) {
        (Json::Object(map), Some(fields), _) => Json::Object(
            fields
                .iter()
                .filter_map(|(field, inner)| {
                    let (k, v) = map.get_key_value(field.as_str())?;
                    Some((k.clone(), project(v, inner)))
                })
                .collect(),
        ),
        (Json::Array(items), _, Some(inner)) => {
            Json::Array(items.iter().map(|item| project(item, inner)).collect())
        }
        _ => value.clone(),
    }
}

/// Whether `project(value, access) == *projected`, without building the
/// projection.
pub fn projection_matches(projected: &Json, value: &Json, access: &Access) -> bool {
    match (value, access.selected(), access.items()) {
        (Json::Object(map), Some(fields), _) => {
            let Json::Object(projected) = projected else {
                return false;
            };
            let mut present = 0;
            for (field, inner) in fields {
                match (map.get(field.as_str()), projected.get(field.as_str())) {
                    (None, None) => {}
                    (Some(v), Some(p)) if projection_matches(p, v, inner) => present += 1,
                    _ => return false,
                }
            }
            present == projected.len()
        }
        (Json::Array(items), _, Some(inner)) => {
            let Json::Array(projected) = projected else {
                return false;
            };
            items.len() == projected.len()
                && items
                    .iter()
                    .zip(projected)
                    .all(|(v, p)| projection_matches(p, v, inner))
        }
        _ => value == projected,
    }
}

/// A JSON object that the expressions read only by selecting `fields` (see
/// [`Access::Fields`]): a CEL map whose selected fields are converted when
/// they are selected.
///
/// The expressions cannot tell it from the map of its selected fields
/// (`field.test`, `has()`, the `size` of the cost model); anything else that
/// inspects a value (copies, JSON, the allocation guard) sees that map
/// through [`as_selected_fields`] and [`SelectedFields::to_map`]. It saves
/// building a map per object and, more, copying one per element that a
/// comprehension binds.
#[derive(Clone, Copy)]
pub struct SelectedFields<'a> {
    map: &'a serde_json::Map<String, Json>,
    fields: &'a BTreeMap<String, Access>,
}

/// The type of every [`SelectedFields`], `map(dyn, dyn)`; its address tells
/// a `SelectedFields` from any other value. A plain static of the same
/// bytes as `MAP_TYPE` may share its address with the map's own type (the
/// compiler merges identical constant data); one behind a lock, which is
/// writable memory, has an address of its own.
static SELECTED_FIELDS_TYPE: std::sync::LazyLock<Type> =
    std::sync::LazyLock::new(|| cel_types::MAP_TYPE);

/// `value` as a [`SelectedFields`], if it is one.
pub fn as_selected_fields<'b, 'v>(value: &'b (dyn Val + 'v)) -> Option<&'b SelectedFields<'v>> {
    if std::ptr::eq(value.get_type(), &*SELECTED_FIELDS_TYPE) {
        // SAFETY: only `SelectedFields` returns this private static from
        // `get_type`, so the value is a `SelectedFields<'v>` (its lifetime
        // bound is the trait object's).
        Some(unsafe { &*(value as *const (dyn Val + 'v) as *const SelectedFields<'v>) })
    } else {
        None
    }
}

impl<'a> SelectedFields<'a> {
    /// The object `map`, read by selecting `fields`.
    pub fn new(
        map: &'a serde_json::Map<String, Json>,
        fields: &'a BTreeMap<String, Access>,
    ) -> Self {
        SelectedFields { map, fields }
    }

    /// The selected fields the object has, with what is read of each.
    pub fn present(&self) -> impl Iterator<Item = (&'a String, &'a Json, &'a Access)> + 'a {
        let map = self.map;
        self.fields.iter().filter_map(move |(field, inner)| {
            let (k, v) = map.get_key_value(field.as_str())?;
            Some((k, v, inner))
        })
    }

    /// The map of the selected fields the object has, converted.
    pub fn to_map(&self) -> CelMap<'a> {
        let mut out: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> =
            HashMap::with_capacity_and_hasher(self.fields.len(), map_hasher());
        for (k, v, inner) in self.present() {
            out.insert(CelMapKey::from(k.as_str()), json_to_val_for(v, inner));
        }
        CelMap::from(out)
    }
}

impl std::fmt::Debug for SelectedFields<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.present().map(|(k, v, _)| (k, v)))
            .finish()
    }
}

impl Val for SelectedFields<'_> {
    fn get_type(&self) -> &Type {
        &SELECTED_FIELDS_TYPE
    }

    fn cel_type() -> &'static Type {
        &SELECTED_FIELDS_TYPE
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn into_indexer<'w>(self: Box<Self>) -> Option<Box<dyn Indexer + 'w>>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        match as_selected_fields(other) {
            Some(other) => self.to_map().equals(&other.to_map()),
            None => self.to_map().equals(other),
        }
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(*self)
    }
}

impl Indexer for SelectedFields<'_> {
    fn get<'b, 'w>(&'b self, key: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        let Some(name) = key.downcast_ref::<CelString>() else {
            // Not a selection: answered as the map of the selected fields would.
            return self
                .to_map()
                .get(key)
                .map(|v| CowVal::Owned(v.into_owned()));
        };
        let name = name.inner();
        match (self.fields.get_key_value(name), self.map.get(name)) {
            (Some((_, inner)), Some(value)) => Ok(CowVal::Owned(json_to_val_for(value, inner))),
            _ => Err(ExecutionError::no_such_key(name)),
        }
    }

    fn steal<'w>(self: Box<Self>, key: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        self.get(key).map(CowVal::into_owned)
    }
}

/// `'f' in object`, for a selected `f` (see [`Access::Present`]).
impl Container for SelectedFields<'_> {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        match key.downcast_ref::<CelString>() {
            Some(name) if self.fields.contains_key(name.inner()) => {
                Ok(self.map.contains_key(name.inner()))
            }
            // Not a selection: answered as the map of the selected fields would.
            _ => self.to_map().contains(key),
        }
    }
}

impl Sizer for SelectedFields<'_> {
    fn size(&self) -> CelInt {
        CelInt::from(self.present().count() as i64)
    }
}

/// Why a CEL value has no JSON form.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct ToJsonError(pub String);

/// Converts a CEL value (a mutation's result) to JSON.
///
/// Struct values (`Object{...}`, `JSONPatch{...}`) become objects of their
/// fields; map keys are sorted so that the output is deterministic.
pub fn val_to_json(value: &dyn Val) -> Result<Json, ToJsonError> {
    if let Some(fields) = as_selected_fields(value) {
        return val_to_json(&fields.to_map());
    }
    if value.downcast_ref::<CelNull>().is_some() {
        return Ok(Json::Null);
    }
    if let Some(b) = value.downcast_ref::<CelBool>() {
        return Ok(Json::Bool(*b.inner()));
    }
    if let Some(i) = value.downcast_ref::<CelInt>() {
        return Ok(Json::from(*i.inner()));
    }
    if let Some(u) = value.downcast_ref::<CelUInt>() {
        return Ok(Json::from(*u.inner()));
    }
    if let Some(d) = value.downcast_ref::<CelDouble>() {
        let f = *d.inner();
        return serde_json::Number::from_f64(f)
            .map(Json::Number)
            .ok_or_else(|| ToJsonError(format!("cannot represent {f} in JSON")));
    }
    if let Some(s) = value.downcast_ref::<CelString>() {
        return Ok(Json::String(s.inner().to_string()));
    }
    if let Some(b) = value.downcast_ref::<CelBytes>() {
        use base64::Engine;
        return Ok(Json::String(
            base64::engine::general_purpose::STANDARD.encode(b.inner()),
        ));
    }
    if let Some(list) = value.downcast_ref::<CelList>() {
        return list
            .inner()
            .iter()
            .map(|v| val_to_json(v.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Json::Array);
    }
    if let Some(map) = value.downcast_ref::<CelMap>() {
        let mut entries: Vec<(String, Json)> = Vec::with_capacity(map.inner().len());
        for (k, v) in map.inner() {
            let key = k.inner();
            let key = if let Some(s) = key.downcast_ref::<CelString>() {
                s.inner().to_string()
            } else if let Some(i) = key.downcast_ref::<CelInt>() {
                i.inner().to_string()
            } else if let Some(u) = key.downcast_ref::<CelUInt>() {
                u.inner().to_string()
            } else if let Some(b) = key.downcast_ref::<CelBool>() {
                b.inner().to_string()
            } else {
                return Err(ToJsonError(format!(
                    "unsupported map key type {}",
                    key.get_type().name()
                )));
            };
            entries.push((key, val_to_json(v.as_ref())?));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        return Ok(Json::Object(entries.into_iter().collect()));
    }
    if let Some(st) = super::object_types::as_struct(value) {
        let mut out = serde_json::Map::new();
        for (k, v) in st.fields() {
            out.insert(k.to_string(), val_to_json(v)?);
        }
        return Ok(Json::Object(out));
    }
    if let Some(opt) = value.downcast_ref::<CelOptional>() {
        return match opt.inner() {
            Some(v) => val_to_json(v),
            None => Ok(Json::Null),
        };
    }
    Err(ToJsonError(format!(
        "unsupported type {} in JSON conversion",
        value.get_type().name()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_keeps_values_and_number_kinds() {
        let doc = json!({"s": "x", "i": 3, "f": 1.5, "b": true, "n": null, "l": [1, "a"], "m": {"k": "v"}});
        let val = json_to_val(&doc);
        assert_eq!(val_to_json(val.as_ref()).unwrap(), doc);
        let i = json_to_val(&doc["i"]);
        assert_eq!(i.get_type().name(), "int");
        let f = json_to_val(&doc["f"]);
        assert_eq!(f.get_type().name(), "double");
    }

    #[test]
    fn large_unsigned_becomes_uint() {
        let doc = json!(18446744073709551615u64);
        assert_eq!(json_to_val(&doc).get_type().name(), "uint");
    }

    /// Documents and ways of reading them, from a Pod's shape: selections
    /// that hit and miss, elements, and accesses that do not fit the value.
    fn documents_and_accesses() -> (Vec<Json>, Vec<Access>) {
        let docs = vec![
            json!({"spec": {"containers": [{"name": "a", "image": "x:latest", "ports": [1]}, {"name": "b"}]}, "metadata": {"labels": {"k": "v"}}}),
            json!({"spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b"}]}, "metadata": {}}),
            json!({"spec": {"containers": [{"name": "a", "image": "x:latest", "ports": [2]}, {"name": "b"}]}}),
            json!({"spec": {"containers": [{"name": "a", "image": "x:latest"}]}, "metadata": {"labels": {"k": "v"}}}),
            json!({"spec": {"containers": {"name": "a"}}}),
            json!({"spec": 3, "metadata": {"labels": {"k": "w"}}}),
            json!([{"spec": 1}, {"spec": 2}]),
            json!(null),
        ];
        let container = Access::fields(&[("name", Access::Full), ("image", Access::Full)]);
        let accesses = vec![
            Access::Full,
            Access::fields(&[(
                "spec",
                Access::fields(&[("containers", Access::Elements(Box::new(container.clone())))]),
            )]),
            Access::fields(&[("spec", Access::fields(&[("containers", Access::Full)]))]),
            Access::fields(&[("metadata", Access::fields(&[("labels", Access::None)]))]),
            Access::fields(&[
                (
                    "metadata",
                    Access::fields(&[("labels", Access::fields(&[("k", Access::Full)]))]),
                ),
                ("spec", Access::Full),
            ]),
            Access::Elements(Box::new(Access::fields(&[("spec", Access::Full)]))),
            Access::Present,
            Access::fields(&[
                ("metadata", Access::fields(&[("labels", Access::Present)])),
                ("spec", Access::fields(&[("containers", Access::Present)])),
            ]),
        ];
        (docs, accesses)
    }

    #[test]
    fn a_projection_is_what_the_conversion_sees() {
        let (docs, accesses) = documents_and_accesses();
        for doc in &docs {
            for access in &accesses {
                let seen = val_to_json(json_to_val_for(doc, access).as_ref()).unwrap();
                assert_eq!(seen, project(doc, access), "{doc} read as {access:?}");
            }
        }
    }

    #[test]
    fn matching_a_projection_is_comparing_projections() {
        let (docs, accesses) = documents_and_accesses();
        for access in &accesses {
            for earlier in &docs {
                let projected = project(earlier, access);
                for later in &docs {
                    assert_eq!(
                        projection_matches(&projected, later, access),
                        project(later, access) == projected,
                        "{earlier} then {later} read as {access:?}"
                    );
                }
            }
        }
        // Changes outside what is read do not count; changes inside do.
        let access = &accesses[1];
        let projected = project(&docs[0], access);
        assert!(projection_matches(&projected, &docs[2], access));
        assert!(!projection_matches(&projected, &docs[1], access));
        assert!(!projection_matches(&projected, &docs[3], access));
    }

    #[test]
    fn selected_fields_answer_as_the_map_of_those_fields() {
        use cel::common::traits::Indexer;
        let (docs, accesses) = documents_and_accesses();
        for doc in &docs {
            for access in &accesses {
                let (Json::Object(map), Access::Fields(fields)) = (doc, access) else {
                    continue;
                };
                let view = SelectedFields::new(map, fields);
                let whole = view.to_map();
                // Told apart from the map it stands for, by its type's address.
                assert!(as_selected_fields(&view).is_some());
                assert!(as_selected_fields(&whole).is_none());
                assert_eq!(view.get_type(), whole.get_type(), "{doc}");
                assert_eq!(view.size(), whole.size(), "{doc} read as {access:?}");
                assert!(view.equals(&whole) && whole.equals(&view.to_map()));
                for key in ["spec", "metadata", "containers", "absent"] {
                    let key = CelString::from(key);
                    let mine = view.get(&key).map(|v| val_to_json(v.as_ref()).unwrap());
                    let theirs = whole.get(&key).map(|v| val_to_json(v.as_ref()).unwrap());
                    match (mine, theirs) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "{doc} [{key:?}]"),
                        (Err(a), Err(b)) => assert_eq!(a, b, "{doc} [{key:?}]"),
                        other => panic!("{doc} [{key:?}] read as {access:?}: {other:?}"),
                    }
                }
                let index = CelInt::from(0);
                assert_eq!(view.get(&index).err(), whole.get(&index).err());
                for key in ["spec", "metadata", "absent"] {
                    let key = CelString::from(key);
                    assert_eq!(view.contains(&key), whole.contains(&key), "{doc} {key:?}");
                }
            }
        }
    }
}
