//! Typed values: path elements of associative lists and schema validation,
//! as structured-merge-diff v6 `typed` and `fieldpath` implement them
//! (`typed/validate.go`, `typed/helpers.go`, `fieldpath/element.go`).

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::model::{
    Atom, FastHash, ListView, Relationship, Resolved, Scalar, SchemaData, TypeSpec,
};
use crate::gofmt;

/// Values nested deeper than this are rejected rather than walked.
pub(crate) const MAX_DEPTH: usize = 256;

/// One schema violation: a field path (SMD path-element notation, e.g.
/// `.spec.containers[name="c"].image`) and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    /// Path of the offending value; empty for the root.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A list of violations, displayed like SMD `ValidationErrors.Error()`:
/// one error alone, several as `errors:` followed by indented lines.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() == 1 {
            return write!(f, "{}", self.0[0]);
        }
        f.write_str("errors:")?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

pub(crate) fn error(message: impl Into<String>) -> ValidationError {
    ValidationError {
        path: String::new(),
        message: message.into(),
    }
}

/// Adds `child`, the errors of field `key`, to `errs` under the field's
/// path. The path is formatted only when there are errors: walks call this
/// for every field they visit.
#[inline(always)]
pub(crate) fn extend_under_field(
    errs: &mut Vec<ValidationError>,
    child: Vec<ValidationError>,
    key: &str,
) {
    if !child.is_empty() {
        extend_prefixed(errs, child, key);
    }
}

#[cold]
fn extend_prefixed(errs: &mut Vec<ValidationError>, child: Vec<ValidationError>, key: &str) {
    errs.extend(with_prefix(child, &format!(".{key}")));
}

/// Prepends `prefix` to the paths of `errs` (SMD `WithPrefix`).
pub(crate) fn with_prefix(mut errs: Vec<ValidationError>, prefix: &str) -> Vec<ValidationError> {
    for e in &mut errs {
        e.path.insert_str(0, prefix);
    }
    errs
}

/// A path element (SMD `fieldpath.PathElement`).
#[derive(Clone, Debug)]
pub(crate) enum PathElement {
    /// Key fields of an associative-list item, sorted by name.
    Key(Vec<(String, Value)>),
    /// Value of a set item.
    Value(Value),
    Index(usize),
}

impl PathElement {
    /// SMD `PathElement.String()`.
    pub(crate) fn render(&self) -> String {
        match self {
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(n, v)| format!("{}={}", n, gofmt::to_string(v)))
                    .collect();
                format!("[{}]", parts.join(","))
            }
            PathElement::Value(v) => format!("[={}]", gofmt::to_string(v)),
            PathElement::Index(i) => format!("[{i}]"),
        }
    }
}

/// A number as SMD's `value.Equals` compares it: integers, and floats of
/// integral value that fit an `int64`, as integers; other floats as floats.
#[derive(PartialEq)]
enum NumberKey {
    Int(i128),
    Float(f64),
}

fn number_key(n: &serde_json::Number) -> NumberKey {
    if let Some(i) = n.as_i64() {
        NumberKey::Int(i.into())
    } else if let Some(u) = n.as_u64() {
        NumberKey::Int(u.into())
    } else {
        let f = n.as_f64().unwrap_or(0.0);
        if f.fract() == 0.0 && f.abs() < 9.2e18 {
            NumberKey::Int((f as i64).into())
        } else {
            NumberKey::Float(f)
        }
    }
}

/// SMD `value.Equals`: numbers compared numerically, maps by content.
fn smd_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(a), Value::Bool(b)) => a == b,
        (Value::Number(a), Value::Number(b)) => number_key(a) == number_key(b),
        (Value::String(a), Value::String(b)) => a == b,
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| smd_equal(a, b))
        }
        // Both iterate in key order (serde_json's map is sorted).
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, va), (kb, vb))| ka == kb && smd_equal(va, vb))
        }
        _ => false,
    }
}

/// Hashes `v` so that values [`smd_equal`] calls equal hash equally.
fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => h.write_u8(1 + u8::from(*b)),
        Value::Number(n) => match number_key(n) {
            NumberKey::Int(i) => {
                h.write_u8(3);
                h.write_i128(i);
            }
            // Never -0.0 (integral) nor NaN (not JSON): equal floats have
            // equal bits.
            NumberKey::Float(f) => {
                h.write_u8(4);
                h.write_u64(f.to_bits());
            }
        },
        Value::String(s) => {
            h.write_u8(5);
            s.hash(h);
        }
        Value::Array(items) => {
            h.write_u8(6);
            h.write_usize(items.len());
            for i in items {
                hash_value(i, h);
            }
        }
        Value::Object(m) => {
            h.write_u8(7);
            h.write_usize(m.len());
            for (k, v) in m {
                k.hash(h);
                hash_value(v, h);
            }
        }
    }
}

/// The fields that identify an associative-list item, borrowed from it (or
/// from the schema's defaults): copied into a [`PathElement`] only for a
/// message, compared directly to match items.
pub(crate) enum ItemKey<'a> {
    /// Key fields, sorted by name (a default is copied from the schema);
    /// kept inline up to two, as every built-in list's key is.
    Key(KeyFields<'a>),
    /// The item itself (a set item).
    Value(&'a Value),
}

/// The fields of an [`ItemKey::Key`].
pub(crate) type KeyFields<'a> = SmallVec<[(&'a str, Cow<'a, Value>); 2]>;

/// SMD `listItemToPathElement`, borrowing: the key of an associative-list item.
pub(crate) fn item_key<'a>(
    schema: &'a SchemaData,
    list: &'a ListView,
    child: &'a Value,
) -> Result<ItemKey<'a>, String> {
    let mut fields = KeyFields::new();
    match key_fields(schema, list, child, |name, v| fields.push((name, v)))? {
        Some(v) => Ok(ItemKey::Value(v)),
        None => {
            fields.sort_by(|a, b| a.0.cmp(b.0));
            Ok(ItemKey::Key(fields))
        }
    }
}

/// Whether [`item_key`] finds a key for `child`, without building it.
fn check_item_key(schema: &SchemaData, list: &ListView, child: &Value) -> Result<(), String> {
    key_fields(schema, list, child, |_, _| {}).map(|_| ())
}

/// The checks of [`item_key`]: `field` gets each key field of `child` (or
/// its default), in the schema's order; the item itself is the answer when
/// it is a set item (a list without keys).
fn key_fields<'a>(
    schema: &'a SchemaData,
    list: &'a ListView,
    child: &'a Value,
    mut field: impl FnMut(&'a str, Cow<'a, Value>),
) -> Result<Option<&'a Value>, String> {
    if list.relationship != Some(Relationship::Associative) {
        return Err("invalid indexing of non-associative list".into());
    }
    if list.def.keys.is_empty() {
        return match child {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => {
                Err("associative list without keys has an element that's an explicit null".into())
            }
            v => Ok(Some(v)),
        };
    }
    let m: &Map<String, Value> = match child {
        Value::Null => return Err("associative list with keys may not have a null element".into()),
        Value::Object(m) => m,
        _ => return Err("associative list with keys may not have non-map elements".into()),
    };
    let mut found = 0;
    for key in &list.def.keys {
        if let Some(v) = m.get(key) {
            field(key.as_str(), Cow::Borrowed(v));
            found += 1;
            continue;
        }
        // SMD getAssociativeKeyDefault.
        let atom = schema.resolve(&list.def.element).ok_or_else(|| {
            format!("couldn't find default value for {key}: invalid elementType for list")
        })?;
        let map = atom.map.ok_or_else(|| {
            format!("couldn't find default value for {key}: associative list may not have non-map types")
        })?;
        if let Some(default) = map.def.field(key).and_then(|f| f.default.as_ref()) {
            field(key.as_str(), Cow::Borrowed(default));
            found += 1;
        }
    }
    if found == 0 {
        let keys: Vec<String> = list.def.keys.iter().map(|k| gofmt::quote(k)).collect();
        return Err(format!(
            "associative list with keys has an element that omits all key fields [{}] (and doesn't have default values for any key fields)",
            keys.join(" ")
        ));
    }
    Ok(None)
}

impl ItemKey<'_> {
    /// The path element, owning copies of the fields.
    pub(crate) fn to_path_element(&self) -> PathElement {
        match self {
            ItemKey::Key(fields) => PathElement::Key(
                fields
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone().into_owned()))
                    .collect(),
            ),
            ItemKey::Value(v) => PathElement::Value((*v).clone()),
        }
    }
}

/// Equal for the path elements SMD considers equal (`PathElement.Equals`,
/// numbers compared numerically): how list items are matched up.
impl PartialEq for ItemKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ItemKey::Key(a), ItemKey::Key(b)) => {
                // The names come from the list's schema: one list's keys
                // are the same strings, compared by address first.
                a.len() == b.len()
                    && a.iter().zip(b).all(|((na, va), (nb, vb))| {
                        (std::ptr::eq(*na, *nb) || na == nb) && smd_equal(va, vb)
                    })
            }
            (ItemKey::Value(a), ItemKey::Value(b)) => smd_equal(a, b),
            _ => false,
        }
    }
}

impl Eq for ItemKey<'_> {}

impl Hash for ItemKey<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            ItemKey::Key(fields) => {
                h.write_u8(b'K');
                h.write_usize(fields.len());
                for (name, v) in fields {
                    name.hash(h);
                    hash_value(v, h);
                }
            }
            ItemKey::Value(v) => {
                h.write_u8(b'V');
                hash_value(v, h);
            }
        }
    }
}

/// Up to this many items, a list's keys are compared one by one rather
/// than hashed: hashing a key costs more than comparing a few.
const FEW_KEYS: usize = 16;

/// A map from list-item keys (or references to them), sized for the list
/// up front: scanned while short, as most lists are, hashed when long.
pub(crate) enum KeyMap<K, V> {
    Few(Vec<(K, V)>),
    Many(HashMap<K, V, FastHash>),
}

impl<K: Eq + Hash, V> KeyMap<K, V> {
    /// An empty map for a list of `items` items.
    pub(crate) fn for_items(items: usize) -> Self {
        if items <= FEW_KEYS {
            KeyMap::Few(Vec::with_capacity(items))
        } else {
            KeyMap::Many(HashMap::with_capacity_and_hasher(
                items,
                FastHash::default(),
            ))
        }
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        match self {
            KeyMap::Few(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            KeyMap::Many(map) => map.get(key),
        }
    }

    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match self {
            KeyMap::Few(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            KeyMap::Many(map) => map.get_mut(key),
        }
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Adds `key`, which the map does not have yet.
    pub(crate) fn insert_new(&mut self, key: K, value: V) {
        match self {
            KeyMap::Few(entries) => entries.push((key, value)),
            KeyMap::Many(map) => {
                map.insert(key, value);
            }
        }
    }
}

/// SMD `validateScalar`; `prefix` is prepended to the message.
pub(crate) fn validate_scalar(
    t: Scalar,
    v: Option<&Value>,
    prefix: &str,
) -> Option<ValidationError> {
    let v = v?;
    let ok = matches!(
        (t, v),
        (_, Value::Null)
            | (Scalar::Numeric, Value::Number(_))
            | (Scalar::String, Value::String(_))
            | (Scalar::Boolean, Value::Bool(_))
            | (
                Scalar::Untyped,
                Value::Number(_) | Value::String(_) | Value::Bool(_)
            )
    );
    if ok {
        return None;
    }
    Some(error(match t {
        Scalar::Numeric => format!(
            "{prefix}expected numeric (int or float), got {}",
            gofmt::type_name(v)
        ),
        Scalar::String => format!("{prefix}expected string, got {}", gofmt::value_sharp_v(v)),
        Scalar::Boolean => format!("{prefix}expected boolean, got {}", gofmt::value_v(v)),
        Scalar::Untyped => format!("{prefix}expected any scalar, got {}", gofmt::value_v(v)),
    }))
}

/// The "invalid atom" schema error of SMD `handleAtom`.
pub(crate) fn invalid_atom(spec: &TypeSpec) -> ValidationError {
    match spec {
        TypeSpec::Named { name, .. } => {
            error(format!("schema error: invalid atom: named type: {name}"))
        }
        TypeSpec::Inline(_) => error("schema error: invalid atom: inlined"),
    }
}

/// The error of a scalar check as a list. A plain match: collecting the
/// `Option` goes through the generic iterator path on every leaf.
#[inline(always)]
fn errors_of(error: Option<ValidationError>) -> Vec<ValidationError> {
    match error {
        None => Vec::new(),
        Some(e) => vec![e],
    }
}

pub(crate) fn too_deep() -> ValidationError {
    error(format!("exceeded maximum nesting depth of {MAX_DEPTH}"))
}

/// SMD `TypedValue.Validate` (`AsTyped`): checks `v` against `spec`.
/// `allow_duplicates` is SMD's `AllowDuplicates` option.
pub(crate) fn validate(
    schema: &SchemaData,
    spec: &TypeSpec,
    v: &Value,
    allow_duplicates: bool,
) -> Vec<ValidationError> {
    validate_noting_atomics(schema, spec, v, allow_duplicates).0
}

/// [`validate`], and whether the walk met a map or list that its type
/// marks atomic. When `v` is valid, the walk met every map and list that
/// has a type, so `false` means none of them is atomic.
pub(crate) fn validate_noting_atomics(
    schema: &SchemaData,
    spec: &TypeSpec,
    v: &Value,
    allow_duplicates: bool,
) -> (Vec<ValidationError>, bool) {
    validate_with(schema, spec, v, allow_duplicates, false)
}

/// [`validate_noting_atomics`] of an ApplyConfiguration's patch, whose
/// nulls are not JSON's: cel-go converts a CEL `null` to protobuf's
/// `structpb.NullValue` (an enum, 0), which SMD finds to be no map, list
/// or scalar of any type (see [`null_value_error`]).
pub(crate) fn validate_apply_patch(
    schema: &SchemaData,
    spec: &TypeSpec,
    v: &Value,
) -> (Vec<ValidationError>, bool) {
    validate_with(schema, spec, v, false, true)
}

fn validate_with(
    schema: &SchemaData,
    spec: &TypeSpec,
    v: &Value,
    allow_duplicates: bool,
    null_is_null_value: bool,
) -> (Vec<ValidationError>, bool) {
    let validator = Validator {
        schema,
        allow_duplicates,
        null_is_null_value,
        met_atomic: Cell::new(false),
    };
    let errs = validator.validate(spec, v, 0);
    (errs, validator.met_atomic.get())
}

/// SMD's error for a `structpb.NullValue` where `expected` (a map, a list
/// or a scalar) is: Go's `%v` of it is `&{NULL_VALUE}`, its `%#v` in a
/// value `&value.valueUnstructured{Value:0}`, its `%T` `structpb.NullValue`,
/// as each message formats its value (maporacle's answers).
fn null_value_error(expected: Option<Scalar>, container: &str) -> ValidationError {
    error(match expected {
        Some(Scalar::String) => {
            "expected string, got &value.valueUnstructured{Value:0}".to_string()
        }
        Some(Scalar::Numeric) => {
            "expected numeric (int or float), got structpb.NullValue".to_string()
        }
        Some(Scalar::Boolean) => "expected boolean, got &{NULL_VALUE}".to_string(),
        Some(Scalar::Untyped) => "expected any scalar, got &{NULL_VALUE}".to_string(),
        None => format!("expected {container}, got &{{NULL_VALUE}}"),
    })
}

struct Validator<'a> {
    schema: &'a SchemaData,
    allow_duplicates: bool,
    /// A null is `structpb.NullValue` (an ApplyConfiguration's patch).
    null_is_null_value: bool,
    met_atomic: Cell<bool>,
}

impl Validator<'_> {
    /// [`Validator::validate`] of a field or item. An inline scalar type,
    /// the type of most leaves, is checked here: resolving and deducing it
    /// would only find the scalar again.
    #[inline(always)]
    fn validate_child(&self, spec: &TypeSpec, v: &Value, depth: usize) -> Vec<ValidationError> {
        match spec {
            TypeSpec::Inline(Atom {
                scalar: Some(t),
                list: None,
                map: None,
            }) if depth <= MAX_DEPTH => {
                if self.null_is_null_value && v.is_null() {
                    return vec![null_value_error(Some(*t), "")];
                }
                errors_of(validate_scalar(*t, Some(v), ""))
            }
            _ => self.validate(spec, v, depth),
        }
    }

    fn validate(&self, spec: &TypeSpec, v: &Value, depth: usize) -> Vec<ValidationError> {
        if depth > MAX_DEPTH {
            return vec![too_deep()];
        }
        let Some(atom) = self.schema.resolve(spec) else {
            return vec![error(format!(
                "schema error: no type found matching: {}",
                spec.display_name()
            ))];
        };
        let atom: Resolved = atom.deduce(Some(v));
        if self.null_is_null_value && v.is_null() {
            // SMD tries the map, then the scalar, then the list.
            let expected = if atom.map.is_some() {
                None
            } else {
                atom.scalar
            };
            let container = if atom.map.is_some() { "map" } else { "list" };
            if atom.map.is_some() || atom.scalar.is_some() || atom.list.is_some() {
                return vec![null_value_error(expected, container)];
            }
        }
        if let Some(map) = &atom.map {
            let m = match v {
                Value::Null => return Vec::new(),
                Value::Object(m) => m,
                other => {
                    return vec![error(format!(
                        "expected map, got {}",
                        gofmt::value_v(other)
                    ))]
                }
            };
            if map.relationship == Some(Relationship::Atomic) {
                self.met_atomic.set(true);
            }
            let mut errs = Vec::new();
            for (key, val) in m {
                let ty = match map.def.field(key) {
                    Some(f) => &f.ty,
                    None => match &map.def.element {
                        Some(e) => e,
                        None => {
                            errs.push(ValidationError {
                                path: format!(".{key}"),
                                message: "field not declared in schema".into(),
                            });
                            return errs;
                        }
                    },
                };
                // Paths are only rendered for errors: this walk is on the hot path.
                let child = self.validate_child(ty, val, depth + 1);
                extend_under_field(&mut errs, child, key);
            }
            return errs;
        }
        if let Some(t) = atom.scalar {
            return errors_of(validate_scalar(t, Some(v), ""));
        }
        if let Some(list) = &atom.list {
            let items = match v {
                Value::Null => return Vec::new(),
                Value::Array(items) => items,
                other => {
                    return vec![error(format!(
                        "expected list, got {}",
                        gofmt::value_v(other)
                    ))]
                }
            };
            if list.relationship == Some(Relationship::Atomic) {
                self.met_atomic.set(true);
            }
            let mut errs = Vec::new();
            let mut seen: KeyMap<ItemKey<'_>, ()> = KeyMap::for_items(if self.allow_duplicates {
                0
            } else {
                items.len()
            });
            let associative = list.relationship == Some(Relationship::Associative);
            for (i, child) in items.iter().enumerate() {
                // The item's key, built only to look for duplicates (its
                // path element only for a message); checked in any case.
                let checked = match (associative, self.allow_duplicates) {
                    (false, _) => Ok(None),
                    (true, true) => check_item_key(self.schema, list, child).map(|()| None),
                    (true, false) => item_key(self.schema, list, child).map(Some),
                };
                let key = match checked {
                    Ok(key) => key,
                    Err(e) => {
                        errs.push(error(format!("element {i}: {e}")));
                        return errs;
                    }
                };
                let render = |key: &Option<ItemKey<'_>>| match key {
                    Some(key) => key.to_path_element().render(),
                    // Checked above: the key of an associative item is found.
                    None if associative => item_key(self.schema, list, child).map_or_else(
                        |_| PathElement::Index(i).render(),
                        |key| key.to_path_element().render(),
                    ),
                    None => PathElement::Index(i).render(),
                };
                // With duplicates allowed no key is kept.
                let duplicate = match (self.allow_duplicates, &key) {
                    (false, Some(k)) => seen.contains_key(k),
                    _ => false,
                };
                if duplicate {
                    errs.push(error(format!("duplicate entries for key {}", render(&key))));
                }
                let errors = self.validate_child(&list.def.element, child, depth + 1);
                if !errors.is_empty() {
                    errs.extend(with_prefix(errors, &render(&key)));
                }
                if let (false, Some(k)) = (self.allow_duplicates || duplicate, key) {
                    seen.insert_new(k, ());
                }
            }
            return errs;
        }
        vec![invalid_atom(spec)]
    }
}

#[cfg(test)]
mod tests {
    use super::ItemKey;
    use serde_json::{json, Value};
    use std::borrow::Cow;
    use std::hash::BuildHasher;

    fn key<'a>(fields: &'a [(&'a str, Value)]) -> ItemKey<'a> {
        ItemKey::Key(fields.iter().map(|(n, v)| (*n, Cow::Borrowed(v))).collect())
    }

    /// Whether `a` and `b` are equal; equal keys must hash equally.
    fn equal<'a>(a: &ItemKey<'a>, b: &ItemKey<'a>) -> bool {
        let hash = |k: &ItemKey| foldhash::fast::FixedState::with_seed(7).hash_one(k);
        let eq = a == b;
        if eq {
            assert_eq!(hash(a), hash(b));
        }
        eq
    }

    #[test]
    fn keys_are_equal_for_values_smd_calls_equal() {
        // SMD's value.Equals compares numbers numerically and maps by content.
        let pairs = [
            (json!(1), json!(1.0)),
            (json!(-3), json!(-3.0)),
            (json!(0.0), json!(-0.0)),
            (json!(2.5), json!(2.5)),
            (json!(1e20), json!(100000000000000000000.0)),
            (
                json!({"a": 1, "b": [true, null]}),
                json!({"b": [true, null], "a": 1.0}),
            ),
            (json!(["x", {"k": "v"}]), json!(["x", {"k": "v"}])),
        ];
        for (a, b) in &pairs {
            assert!(equal(&ItemKey::Value(a), &ItemKey::Value(b)), "{a} = {b}");
        }
        let port = [("name", json!("x")), ("port", json!(80))];
        let port_float = [("name", json!("x")), ("port", json!(80.0))];
        assert!(equal(&key(&port), &key(&port_float)));
    }

    #[test]
    fn keys_differ_for_values_smd_calls_different() {
        let values = [
            json!(1),
            json!(1.5),
            json!("1"),
            json!(true),
            json!(false),
            json!(null),
            json!([1]),
            json!([1, 1]),
            json!({"a": 1}),
            json!({"a": 1, "b": 1}),
            json!({"b": 1}),
            json!("a,b"),
            json!(["a", "b"]),
            // An integer past int64 and the float nearest it: SMD keeps the
            // one an integer and the other a float.
            json!(10000000000000000000u64),
            json!(1e19),
        ];
        let fields: [&[(&str, Value)]; 6] = [
            &[("a", json!("x")), ("b", json!("y"))],
            &[("a", json!("x;s1:b=s1:y"))],
            &[("a", json!("x")), ("b", json!("z"))],
            &[("a", json!("xs1:b"))],
            &[("a", json!(1))],
            &[("a", json!("1"))],
        ];
        let distinct: Vec<ItemKey> = values
            .iter()
            .map(ItemKey::Value)
            .chain(fields.iter().map(|f| key(f)))
            .collect();
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert!(!equal(a, b));
            }
        }
    }
}
