//! Fields a strict JSON decoding into the Go types would reject
//! (sigs.k8s.io/json `UnmarshalStrict` with `DisallowUnknownFields`, as
//! kube-apiserver's strict serializer uses it).

use serde_json::Value;

use super::model::{SchemaData, TypeSpec};
use super::typed::MAX_DEPTH;

/// sigs.k8s.io/json keeps at most this many strict errors.
const MAX_ERRORS: usize = 100;

pub(crate) fn collect(schema: &SchemaData, spec: &TypeSpec, value: &Value) -> Vec<String> {
    collect_at(schema, spec, value, true)
}

/// [`collect`] for a subtree of type `spec`; `root` tells whether it is the
/// whole object (where `apiVersion` and `kind` are always known). Paths are
/// relative to the subtree.
pub(crate) fn collect_at(
    schema: &SchemaData,
    spec: &TypeSpec,
    value: &Value,
    root: bool,
) -> Vec<String> {
    // Nearly every object is clean: find that out without building a path
    // per field, and build the paths (in decoding order) only for the rest.
    if !any(schema, spec, value, root, 0) {
        return Vec::new();
    }
    let mut out = Vec::new();
    walk(schema, spec, value, "", root, 0, &mut out);
    out
}

/// Whether [`walk`] would find anything, without paths or ordering.
fn any(schema: &SchemaData, spec: &TypeSpec, v: &Value, root: bool, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let Some(atom) = schema.resolve(spec) else {
        return false;
    };
    let atom = atom.deduce(Some(v));
    match v {
        Value::Object(m) => {
            let Some(map) = &atom.map else {
                return false;
            };
            m.iter().any(|(key, child)| {
                if root && (key == "apiVersion" || key == "kind") {
                    return false;
                }
                match map.def.field(key) {
                    Some(f) => any(schema, &f.ty, child, false, depth + 1),
                    None => match &map.def.element {
                        Some(e) => any(schema, e, child, false, depth + 1),
                        None => true,
                    },
                }
            })
        }
        Value::Array(items) => match &atom.list {
            Some(list) => items
                .iter()
                .any(|item| any(schema, &list.def.element, item, false, depth + 1)),
            None => false,
        },
        _ => false,
    }
}

fn walk(
    schema: &SchemaData,
    spec: &TypeSpec,
    v: &Value,
    path: &str,
    root: bool,
    depth: usize,
    out: &mut Vec<String>,
) {
    if depth > MAX_DEPTH || out.len() >= MAX_ERRORS {
        return;
    }
    let Some(atom) = schema.resolve(spec) else {
        return;
    };
    let atom = atom.deduce(Some(v));
    match v {
        Value::Object(m) => {
            let Some(map) = &atom.map else {
                return;
            };
            // The decoder meets the keys in document order; the documents
            // kube-apiserver decodes here are re-encoded Go maps, whose keys
            // are sorted.
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for key in keys {
                if root && (key == "apiVersion" || key == "kind") {
                    continue;
                }
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let ty = match map.def.field(key) {
                    Some(f) => &f.ty,
                    None => match &map.def.element {
                        Some(e) => e,
                        None => {
                            if out.len() < MAX_ERRORS {
                                out.push(child);
                            }
                            continue;
                        }
                    },
                };
                walk(schema, ty, &m[key.as_str()], &child, false, depth + 1, out);
            }
        }
        Value::Array(items) => {
            let Some(list) = &atom.list else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                let child = format!("{path}[{i}]");
                walk(
                    schema,
                    &list.def.element,
                    item,
                    &child,
                    false,
                    depth + 1,
                    out,
                );
            }
        }
        _ => {}
    }
}
