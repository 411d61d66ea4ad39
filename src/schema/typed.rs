//! Typed values: path elements of associative lists and schema validation,
//! as structured-merge-diff v6 `typed` and `fieldpath` implement them
//! (`typed/validate.go`, `typed/helpers.go`, `fieldpath/element.go`).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Value};

use super::model::{FastHash, ListView, Relationship, Resolved, Scalar, SchemaData, TypeSpec};
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

/// Canonical encoding for SMD value equality (`value.Equals`): equal for
/// equal values (numbers compared numerically), and prefix-free, since
/// strings carry their length.
fn canonical(v: &Value, out: &mut String) {
    use std::fmt::Write;
    match v {
        Value::Null => out.push('n'),
        Value::Bool(true) => out.push('t'),
        Value::Bool(false) => out.push('f'),
        Value::Number(n) => {
            let mut digits = itoa::Buffer::new();
            if let Some(i) = n.as_i64() {
                out.push('i');
                out.push_str(digits.format(i));
            } else if let Some(u) = n.as_u64() {
                out.push('i');
                out.push_str(digits.format(u));
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    out.push('i');
                    out.push_str(digits.format(f as i64));
                } else {
                    // Writing to a String cannot fail.
                    let _ = write!(out, "d{f:e}");
                }
            }
        }
        Value::String(s) => canonical_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for i in items {
                canonical(i, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (k, v) in entries {
                canonical_str(k, out);
                out.push(':');
                canonical(v, out);
                out.push(',');
            }
            out.push('}');
        }
    }
}

/// A string in [`canonical`]'s encoding: `s`, its length, `:`, its text.
fn canonical_str(s: &str, out: &mut String) {
    out.push('s');
    out.push_str(itoa::Buffer::new().format(s.len()));
    out.push(':');
    out.push_str(s);
}

/// The fields that identify an associative-list item, borrowed from it (or
/// from the schema's defaults): copied into a [`PathElement`] only for a
/// message, encoded directly as an identity to match items.
pub(crate) enum ItemKey<'a> {
    /// Key fields, sorted by name (a default is copied from the schema).
    Key(Vec<(&'a str, Cow<'a, Value>)>),
    /// The item itself (a set item).
    Value(&'a Value),
}

/// SMD `listItemToPathElement`, borrowing: the key of an associative-list item.
pub(crate) fn item_key<'a>(
    schema: &'a SchemaData,
    list: &'a ListView,
    child: &'a Value,
) -> Result<ItemKey<'a>, String> {
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
            v => Ok(ItemKey::Value(v)),
        };
    }
    let m: &Map<String, Value> = match child {
        Value::Null => return Err("associative list with keys may not have a null element".into()),
        Value::Object(m) => m,
        _ => return Err("associative list with keys may not have non-map elements".into()),
    };
    let mut fields = Vec::with_capacity(list.def.keys.len());
    for key in &list.def.keys {
        if let Some(v) = m.get(key) {
            fields.push((key.as_str(), Cow::Borrowed(v)));
            continue;
        }
        // SMD getAssociativeKeyDefault.
        let atom = schema.resolve(&list.def.element).ok_or_else(|| {
            format!("couldn't find default value for {key}: invalid elementType for list")
        })?;
        let map = atom.map.ok_or_else(|| {
            format!("couldn't find default value for {key}: associative list may not have non-map types")
        })?;
        if let Some(default) = map.def.field(key).and_then(|f| f.default.clone()) {
            fields.push((key.as_str(), Cow::Owned(default)));
        }
    }
    if fields.is_empty() {
        let keys: Vec<String> = list.def.keys.iter().map(|k| gofmt::quote(k)).collect();
        return Err(format!(
            "associative list with keys has an element that omits all key fields [{}] (and doesn't have default values for any key fields)",
            keys.join(" ")
        ));
    }
    fields.sort_by(|a, b| a.0.cmp(b.0));
    Ok(ItemKey::Key(fields))
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

    /// A string equal for the path elements SMD considers equal
    /// (`PathElement.Equals`, numbers compared numerically).
    pub(crate) fn identity(&self) -> String {
        // Room for a typical key (`name` and a short value) at once: an
        // identity grown from empty is reallocated three or four times.
        let mut out = String::with_capacity(64);
        match self {
            ItemKey::Key(fields) => {
                out.push('K');
                for (n, v) in fields {
                    canonical_str(n, &mut out);
                    out.push('=');
                    canonical(v, &mut out);
                    out.push(';');
                }
            }
            ItemKey::Value(v) => {
                out.push('V');
                canonical(v, &mut out);
            }
        }
        out
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
    let validator = Validator {
        schema,
        allow_duplicates,
    };
    validator.validate(spec, v, 0)
}

struct Validator<'a> {
    schema: &'a SchemaData,
    allow_duplicates: bool,
}

impl Validator<'_> {
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
                let child = self.validate(ty, val, depth + 1);
                extend_under_field(&mut errs, child, key);
            }
            return errs;
        }
        if let Some(t) = atom.scalar {
            return validate_scalar(t, Some(v), "").into_iter().collect();
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
            let mut errs = Vec::new();
            let mut seen: HashSet<String, FastHash> = HashSet::default();
            for (i, child) in items.iter().enumerate() {
                // The item's key; its path element is built only for a message.
                let key = if list.relationship != Some(Relationship::Associative) {
                    None
                } else {
                    match item_key(self.schema, list, child) {
                        Ok(key) => Some(key),
                        Err(e) => {
                            errs.push(error(format!("element {i}: {e}")));
                            return errs;
                        }
                    }
                };
                let render = |key: &Option<ItemKey<'_>>| match key {
                    Some(key) => key.to_path_element().render(),
                    None => PathElement::Index(i).render(),
                };
                // With duplicates allowed no identity is needed.
                if let (false, Some(k)) = (self.allow_duplicates, &key) {
                    if !seen.insert(k.identity()) {
                        errs.push(error(format!("duplicate entries for key {}", render(&key))));
                    }
                }
                let errors = self.validate(&list.def.element, child, depth + 1);
                if !errors.is_empty() {
                    errs.extend(with_prefix(errors, &render(&key)));
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

    fn key<'a>(fields: &'a [(&'a str, Value)]) -> String {
        ItemKey::Key(fields.iter().map(|(n, v)| (*n, Cow::Borrowed(v))).collect()).identity()
    }

    fn item(v: &Value) -> String {
        ItemKey::Value(v).identity()
    }

    #[test]
    fn identities_are_equal_for_values_smd_calls_equal() {
        // SMD's value.Equals compares numbers numerically and maps by content.
        assert_eq!(item(&json!(1)), item(&json!(1.0)));
        assert_eq!(
            item(&json!({"a": 1, "b": [true, null]})),
            item(&json!({"b": [true, null], "a": 1}))
        );
        assert_eq!(
            key(&[("name", json!("x")), ("port", json!(80))]),
            key(&[("name", json!("x")), ("port", json!(80.0))])
        );
    }

    #[test]
    fn identities_differ_for_values_smd_calls_different() {
        let distinct = [
            item(&json!(1)),
            item(&json!(1.5)),
            item(&json!("1")),
            item(&json!(true)),
            item(&json!(null)),
            item(&json!([1])),
            item(&json!({"a": 1})),
            item(&json!("a,b")),
            item(&json!(["a", "b"])),
            key(&[("a", json!("x")), ("b", json!("y"))]),
            // A key value holding what would be the next field's encoding.
            key(&[("a", json!("x;s1:b=s1:y"))]),
            key(&[("a", json!("x")), ("b", json!("z"))]),
            key(&[("a", json!("xs1:b"))]),
            key(&[("a", json!(1))]),
            key(&[("a", json!("1"))]),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
