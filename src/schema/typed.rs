//! Typed values: path elements of associative lists and schema validation,
//! as structured-merge-diff v6 `typed` and `fieldpath` implement them
//! (`typed/validate.go`, `typed/helpers.go`, `fieldpath/element.go`).

use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Value};

use super::model::{ListView, Relationship, Resolved, Scalar, SchemaData, TypeSpec};
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

    /// A string equal for path elements SMD considers equal
    /// (`PathElement.Equals`, numbers compared numerically).
    pub(crate) fn identity(&self) -> String {
        let mut out = String::new();
        match self {
            PathElement::Key(fields) => {
                out.push('K');
                for (n, v) in fields {
                    canonical(&Value::String(n.clone()), &mut out);
                    out.push('=');
                    canonical(v, &mut out);
                    out.push(';');
                }
            }
            PathElement::Value(v) => {
                out.push('V');
                canonical(v, &mut out);
            }
            PathElement::Index(i) => {
                out.push('I');
                out.push_str(&i.to_string());
            }
        }
        out
    }
}

/// Canonical encoding for SMD value equality (`value.Equals`).
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push('n'),
        Value::Bool(true) => out.push('t'),
        Value::Bool(false) => out.push('f'),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&format!("i{i}"));
            } else if let Some(u) = n.as_u64() {
                out.push_str(&format!("i{u}"));
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 9.2e18 {
                    out.push_str(&format!("i{}", f as i64));
                } else {
                    out.push_str(&format!("d{:e}", f));
                }
            }
        }
        Value::String(s) => {
            out.push('s');
            out.push_str(&Value::String(s.clone()).to_string());
        }
        Value::Array(items) => {
            out.push('[');
            for i in items {
                canonical(i, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                canonical(&Value::String(k.clone()), out);
                out.push(':');
                canonical(&m[k.as_str()], out);
                out.push(',');
            }
            out.push('}');
        }
    }
}

/// SMD `listItemToPathElement`: the identity of an associative-list item.
pub(crate) fn list_item_to_path_element(
    schema: &SchemaData,
    list: &ListView,
    child: &Value,
) -> Result<PathElement, String> {
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
            v => Ok(PathElement::Value(v.clone())),
        };
    }
    let m: &Map<String, Value> = match child {
        Value::Null => return Err("associative list with keys may not have a null element".into()),
        Value::Object(m) => m,
        _ => return Err("associative list with keys may not have non-map elements".into()),
    };
    let mut fields = Vec::new();
    for key in &list.def.keys {
        if let Some(v) = m.get(key) {
            fields.push((key.clone(), v.clone()));
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
            fields.push((key.clone(), default));
        }
    }
    if fields.is_empty() {
        let keys: Vec<String> = list.def.keys.iter().map(|k| gofmt::quote(k)).collect();
        return Err(format!(
            "associative list with keys has an element that omits all key fields [{}] (and doesn't have default values for any key fields)",
            keys.join(" ")
        ));
    }
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(PathElement::Key(fields))
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
                if !child.is_empty() {
                    errs.extend(with_prefix(child, &format!(".{key}")));
                }
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
            let mut seen = HashSet::new();
            for (i, child) in items.iter().enumerate() {
                let pe = if list.relationship != Some(Relationship::Associative) {
                    PathElement::Index(i)
                } else {
                    match list_item_to_path_element(self.schema, list, child) {
                        Ok(pe) => pe,
                        Err(e) => {
                            errs.push(error(format!("element {i}: {e}")));
                            return errs;
                        }
                    }
                };
                let indexed = matches!(pe, PathElement::Index(_));
                // With duplicates allowed no identity is needed.
                if !self.allow_duplicates && !indexed && !seen.insert(pe.identity()) {
                    errs.push(error(format!("duplicate entries for key {}", pe.render())));
                }
                let errors = self.validate(&list.def.element, child, depth + 1);
                if !errors.is_empty() {
                    errs.extend(with_prefix(errors, &pe.render()));
                }
            }
            return errs;
        }
        vec![invalid_atom(spec)]
    }
}
