//! Schema checks limited to the parts of an object a JSON patch wrote.
//!
//! Kube-apiserver checks the whole object after each mutation (strict
//! decoding after a JSON patch, a typed conversion of the live object before
//! each apply configuration). When the object was known to pass before a
//! patch, only what the patch wrote can fail, so the dispatcher checks those
//! subtrees first and runs the whole-object check, for its exact messages,
//! only when they fail.

use serde_json::Value;

use super::model::{SchemaData, TypeSpec};
use super::{typed, unknown, TypeRef};
use std::borrow::Cow;

/// JSON pointers (as lists of unescaped keys) to the subtrees that hold
/// everything the patch operations writing at `dests` may have put in
/// `result`. A destination is cut before its first list, since inserting
/// into or removing from a list moves its other items; a destination that no
/// longer exists is cut at its deepest existing parent.
pub fn written_roots<'p>(
    result: &Value,
    dests: impl IntoIterator<Item = &'p str>,
) -> Vec<Vec<String>> {
    let mut roots: Vec<Vec<String>> = Vec::new();
    for dest in dests {
        let mut node = result;
        let mut root = Vec::new();
        for raw in dest.split('/').skip(1) {
            let Value::Object(map) = node else { break };
            let key = decode_key(raw);
            match map.get(key.as_ref()) {
                Some(child) => {
                    node = child;
                    root.push(key.into_owned());
                }
                None => break,
            }
        }
        roots.push(root);
    }
    // A root under another is covered by it.
    roots.sort();
    roots.dedup_by(|later, earlier| later.starts_with(earlier));
    roots
}

/// The subtrees under some roots of an object, each with its type, found
/// once for the checks below.
pub struct WrittenSubtrees<'v> {
    /// The object's type.
    ty: &'v TypeRef,
    /// (type, whether it is the object's root, value); `None` when a
    /// root's type cannot be found, which fails every check.
    subtrees: Option<Vec<(TypeSpec, bool, &'v Value)>>,
}

impl<'v> WrittenSubtrees<'v> {
    /// The subtrees of `value`, of type `ty`, under `roots`.
    pub fn at(value: &'v Value, ty: &'v TypeRef, roots: &[Vec<String>]) -> Self {
        let subtrees = roots
            .iter()
            .map(|root| {
                at(&ty.schema, &ty.spec, value, root).map(|(spec, v)| (spec, root.is_empty(), v))
            })
            .collect();
        WrittenSubtrees { ty, subtrees }
    }

    /// Whether every subtree passes strict decoding (no field its type does
    /// not declare).
    pub fn strict_clean(&self) -> bool {
        self.subtrees.as_ref().is_some_and(|subtrees| {
            subtrees.iter().all(|(spec, root, v)| {
                unknown::collect_at(&self.ty.schema, spec, v, *root).is_empty()
            })
        })
    }

    /// Whether every subtree passes SMD's typed validation (with duplicates
    /// allowed, as for a live object).
    pub fn typed_valid(&self) -> bool {
        self.subtrees.as_ref().is_some_and(|subtrees| {
            subtrees
                .iter()
                .all(|(spec, _, v)| typed::validate(&self.ty.schema, spec, v, true).is_empty())
        })
    }
}

/// The value at `path` (object keys only) and its type.
fn at<'v>(
    schema: &SchemaData,
    spec: &TypeSpec,
    value: &'v Value,
    path: &[String],
) -> Option<(TypeSpec, &'v Value)> {
    let mut spec = spec.clone();
    let mut node = value;
    for key in path {
        let child = node.get(key.as_str())?;
        let atom = schema.resolve(&spec)?.deduce(Some(node));
        let map = atom.map?;
        spec = match map.def.field(key) {
            Some(f) => f.ty.clone(),
            None => map.def.element.clone()?,
        };
        node = child;
    }
    Some((spec, node))
}

/// A JSON pointer token decoded as json-patch's `decodePatchKey` does:
/// `~1` → `/`, then `~0` → `~`, in one pass.
pub(crate) fn decode_key(s: &str) -> Cow<'_, str> {
    if !s.contains('~') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('~') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('1') {
            out.push('/');
            rest = r;
        } else if let Some(r) = after.strip_prefix('0') {
            out.push('~');
            rest = r;
        } else {
            out.push('~');
            rest = after;
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SchemaStore;
    use serde_json::json;

    fn pod() -> TypeRef {
        SchemaStore::builtin()
            .lookup("", "v1", "Pod")
            .expect("Pod schema")
    }

    fn strict_clean_under(obj: &Value, ty: &TypeRef, roots: &[Vec<String>]) -> bool {
        WrittenSubtrees::at(obj, ty, roots).strict_clean()
    }

    fn typed_valid_under(obj: &Value, ty: &TypeRef, roots: &[Vec<String>]) -> bool {
        WrittenSubtrees::at(obj, ty, roots).typed_valid()
    }

    #[test]
    fn roots_stop_before_lists_and_at_missing_keys() {
        let obj =
            json!({"metadata": {"labels": {"a/b": "x"}}, "spec": {"containers": [{"name": "c"}]}});
        let roots = written_roots(
            &obj,
            [
                "/metadata/labels/a~1b",
                "/spec/containers/0/image",
                "/spec/containers/-",
                "/spec/gone/deeper",
            ],
        );
        assert_eq!(
            roots,
            vec![
                vec!["metadata".to_string(), "labels".into(), "a/b".into()],
                vec!["spec".to_string()],
            ],
            "/spec/gone/deeper is cut at /spec, which covers /spec/containers"
        );
    }

    #[test]
    fn unknown_field_in_a_written_subtree_is_found() {
        let ty = pod();
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "imagez": "x"}]}});
        let roots = written_roots(&obj, ["/spec/containers/0/imagez"]);
        assert!(!strict_clean_under(&obj, &ty, &roots));
        let clean = written_roots(&obj, ["/metadata/name"]);
        assert!(strict_clean_under(&obj, &ty, &clean));
    }

    #[test]
    fn type_error_in_a_written_subtree_is_found() {
        let ty = pod();
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": 1}},
            "spec": {"containers": [{"name": "c"}]}});
        assert!(!typed_valid_under(
            &obj,
            &ty,
            &written_roots(&obj, ["/metadata/labels/a"])
        ));
        assert!(typed_valid_under(
            &obj,
            &ty,
            &written_roots(&obj, ["/spec/containers/0/name"])
        ));
    }

    #[test]
    fn duplicate_list_map_keys_are_seen_through_the_list_root() {
        let ty = pod();
        let obj = json!({"spec": {"containers": [{"name": "c"}, {"name": "c"}]}});
        // Validation allows duplicates in a live object, as SMD's AllowDuplicates.
        assert!(typed_valid_under(
            &obj,
            &ty,
            &written_roots(&obj, ["/spec/containers/1"])
        ));
    }
}
