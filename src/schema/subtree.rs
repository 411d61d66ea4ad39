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

/// JSON pointers (as lists of unescaped keys, an item of a list by its
/// index) to the subtrees that hold everything the patch operations
/// changing `dests` (see `json_patch::changed_paths`: the written paths and
/// the parents of removed values) may have put in `result`.
///
/// A destination goes into a list's item only through an index that is not
/// its last segment: an operation whose destination ends at an index (an
/// add, copy or move there) may have inserted, and a removal's destination,
/// its parent, ends at the list itself, so every operation that moved a
/// list's items cuts that list whole, which covers the items the others
/// name. An index that is not plain digits naming an item of `result` is
/// cut at its list too, and a destination that no longer exists at its
/// deepest existing parent.
pub fn written_roots<'p>(
    result: &Value,
    dests: impl IntoIterator<Item = &'p str>,
) -> Vec<Vec<String>> {
    let mut roots: Vec<Vec<String>> = Vec::new();
    for dest in dests {
        let mut node = result;
        let mut root = Vec::new();
        let mut segments = dest.split('/').skip(1).peekable();
        while let Some(raw) = segments.next() {
            let child = match node {
                Value::Object(map) => {
                    let key = decode_key(raw);
                    map.get(key.as_ref()).map(|child| (child, key.into_owned()))
                }
                Value::Array(items) if segments.peek().is_some() => {
                    item_index(raw).and_then(|i| Some((items.get(i)?, raw.to_string())))
                }
                _ => None,
            };
            let Some((child, key)) = child else { break };
            node = child;
            root.push(key);
        }
        roots.push(root);
    }
    // A root under another is covered by it.
    roots.sort();
    roots.dedup_by(|later, earlier| later.starts_with(earlier));
    roots
}

/// A list index written as json-patch reads it only in its plain form
/// (digits, no leading zero): any other is left to the whole list.
fn item_index(raw: &str) -> Option<usize> {
    let plain = raw.bytes().all(|b| b.is_ascii_digit()) && (raw == "0" || !raw.starts_with('0'));
    plain.then(|| raw.parse().ok()).flatten()
}

/// The subtrees under some roots of an object, each with its type, found
/// once for the checks below.
pub struct WrittenSubtrees<'v> {
    /// The object's type.
    ty: &'v TypeRef,
    /// `None` when a root's type cannot be found, which fails every check.
    subtrees: Option<Vec<Subtree<'v>>>,
}

/// One root's subtree, and the whole list it is in, if any.
struct Subtree<'v> {
    spec: TypeSpec,
    /// Whether it is the object's root.
    root: bool,
    value: &'v Value,
    /// The outermost list the root goes into an item of: SMD validates an
    /// associative list's keys across its items, so the typed check looks
    /// at the whole list.
    list: Option<(TypeSpec, &'v Value)>,
}

impl<'v> WrittenSubtrees<'v> {
    /// The subtrees of `value`, of type `ty`, under `roots`.
    pub fn at(value: &'v Value, ty: &'v TypeRef, roots: &[Vec<String>]) -> Self {
        let subtrees = roots
            .iter()
            .map(|root| at(&ty.schema, &ty.spec, value, root, root.is_empty()))
            .collect();
        WrittenSubtrees { ty, subtrees }
    }

    /// Whether every subtree passes strict decoding (no field its type does
    /// not declare).
    pub fn strict_clean(&self) -> bool {
        self.subtrees.as_ref().is_some_and(|subtrees| {
            subtrees
                .iter()
                .all(|t| unknown::collect_at(&self.ty.schema, &t.spec, t.value, t.root).is_empty())
        })
    }

    /// Whether every subtree, or the whole list it is an item's part of,
    /// passes SMD's typed validation (with duplicates allowed, as for a live
    /// object).
    pub fn typed_valid(&self) -> bool {
        let Some(subtrees) = &self.subtrees else {
            return false;
        };
        let mut lists_seen: Vec<*const Value> = Vec::new();
        subtrees.iter().all(|t| {
            let (spec, value) = match &t.list {
                Some((spec, list)) => {
                    let seen = *list as *const Value;
                    if lists_seen.contains(&seen) {
                        return true;
                    }
                    lists_seen.push(seen);
                    (spec, *list)
                }
                None => (&t.spec, t.value),
            };
            typed::validate(&self.ty.schema, spec, value, true).is_empty()
        })
    }
}

/// The value at `path` (object keys, and list indices) and its type, with
/// the outermost list on the way.
fn at<'v>(
    schema: &SchemaData,
    spec: &TypeSpec,
    value: &'v Value,
    path: &[String],
    root: bool,
) -> Option<Subtree<'v>> {
    let mut spec = spec.clone();
    let mut node = value;
    let mut list = None;
    for key in path {
        let atom = schema.resolve(&spec)?.deduce(Some(node));
        let (child, child_spec) = match node {
            Value::Array(items) => {
                list.get_or_insert_with(|| (spec.clone(), node));
                let item = items.get(item_index(key)?)?;
                (item, atom.list?.def.element.clone())
            }
            _ => {
                let child = node.get(key.as_str())?;
                let map = atom.map?;
                let child_spec = match map.def.field(key) {
                    Some(f) => f.ty.clone(),
                    None => map.def.element.clone()?,
                };
                (child, child_spec)
            }
        };
        spec = child_spec;
        node = child;
    }
    Some(Subtree {
        spec,
        root,
        value: node,
        list,
    })
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
    use serde_json::json;

    fn pod() -> TypeRef {
        crate::schema::builtin_type("", "v1", "Pod")
    }

    fn strict_clean_under(obj: &Value, ty: &TypeRef, roots: &[Vec<String>]) -> bool {
        WrittenSubtrees::at(obj, ty, roots).strict_clean()
    }

    fn typed_valid_under(obj: &Value, ty: &TypeRef, roots: &[Vec<String>]) -> bool {
        WrittenSubtrees::at(obj, ty, roots).typed_valid()
    }

    #[test]
    fn roots_stop_at_missing_keys_and_at_lists_an_operation_may_have_moved() {
        let obj =
            json!({"metadata": {"labels": {"a/b": "x"}}, "spec": {"containers": [{"name": "c"}]}});
        let roots = written_roots(
            &obj,
            [
                "/metadata/labels/a~1b",
                "/spec/containers/0/image",
                "/spec/gone/deeper",
            ],
        );
        assert_eq!(
            roots,
            vec![
                vec!["metadata".to_string(), "labels".into(), "a/b".into()],
                vec!["spec".to_string()],
            ],
            "/spec/gone/deeper is cut at /spec, which covers /spec/containers/0"
        );
        let containers = || vec!["spec".to_string(), "containers".into()];
        // Through an item, the root goes into it.
        assert_eq!(
            written_roots(&obj, ["/spec/containers/0/name"]),
            vec![[containers(), vec!["0".into(), "name".into()]].concat()]
        );
        // An index that may have inserted, one out of range and one not
        // written plainly: the whole list.
        for dest in [
            "/spec/containers/0",
            "/spec/containers/-",
            "/spec/containers/1/image",
            "/spec/containers/00/image",
            "/spec/containers/+0/image",
        ] {
            assert_eq!(written_roots(&obj, [dest]), vec![containers()], "{dest}");
        }
    }

    #[test]
    fn checks_of_an_item_are_its_own_and_the_typed_one_its_lists() {
        let ty = pod();
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "imagez": "x"}, {"name": "b", "image": 5}]}});
        // A field the item lacks: the root is the item.
        let item = |i: &str| written_roots(&obj, [format!("/spec/containers/{i}/ports").as_str()]);
        // Strict decoding: only the item named.
        assert!(strict_clean_under(&obj, &ty, &item("1")));
        assert!(!strict_clean_under(&obj, &ty, &item("0")));
        // SMD's validation: the whole list the item is in.
        assert!(!typed_valid_under(&obj, &ty, &item("0")));
        let valid = json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "image": "i"}]}});
        let roots = written_roots(&valid, ["/spec/containers/1/image"]);
        assert!(typed_valid_under(&valid, &ty, &roots));
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
