//! The fields a mutation writes, read from the mutation itself rather than
//! from a comparison of the object before and after it: an admission
//! attributes each change to its binding ([`super::BindingChange`]) without
//! walking the whole object once per binding.
//!
//! An apply configuration writes each leaf of its patch; an item of a map
//! list (`listType: map`, such as a Pod's containers) is named by its index
//! in the merged object, and other lists are written whole. A JSON patch
//! writes each operation's path. Field paths are written as kubectl
//! and upstream's messages write them: `spec.containers[0].resources`,
//! `metadata.labels["app.kubernetes.io/name"]`.

use crate::json_text::push_quoted;
use crate::mutation::json_patch::PatchOperation;
use crate::schema::{TypeCursor, TypeRef};
use serde_json::Value as Json;

/// What a mutation writes, as far as it is known before it is applied.
pub(super) enum Written {
    /// The fields set and removed.
    Known(Vec<String>, Vec<String>),
    /// An apply configuration with lists: which item of a map list each of
    /// its items merges into is known only in the merged object.
    AfterMerge,
}

impl Written {
    /// The fields set and removed, given the mutation `value` and the
    /// object it made.
    pub(super) fn resolve(
        self,
        value: &super::MutationValue,
        merged: &Json,
        ty: &TypeRef,
    ) -> (Vec<String>, Vec<String>) {
        match (self, value) {
            (Written::Known(set, removed), _) => (set, removed),
            (Written::AfterMerge, super::MutationValue::Apply(applied)) => {
                let mut set = Vec::new();
                of_merged_apply_configuration(&applied.patch, merged, ty, &mut set);
                (set, Vec::new())
            }
            (Written::AfterMerge, super::MutationValue::Patch(_)) => (Vec::new(), Vec::new()),
        }
    }
}

/// What `value` writes, on `object` as it is before it.
pub(super) fn of_mutation(value: &super::MutationValue, object: &Json) -> Written {
    let (mut set, mut removed) = (Vec::new(), Vec::new());
    match value {
        super::MutationValue::Apply(applied) if has_list(&applied.patch) => {
            return Written::AfterMerge
        }
        super::MutationValue::Apply(applied) => of_apply_configuration(&applied.patch, &mut set),
        super::MutationValue::Patch(ops) => of_json_patch(ops, object, &mut set, &mut removed),
    }
    Written::Known(set, removed)
}

fn has_list(value: &Json) -> bool {
    match value {
        Json::Array(items) => !items.is_empty(),
        Json::Object(members) => members.values().any(has_list),
        _ => false,
    }
}

/// Appends the paths of `more` that `paths` lacks.
pub(super) fn extend_unique(paths: &mut Vec<String>, more: Vec<String>) {
    for p in more {
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
}

/// The fields `patch` (an apply configuration) sets.
pub(crate) fn of_apply_configuration(patch: &Json, set: &mut Vec<String>) {
    let Json::Object(members) = patch else {
        return;
    };
    for (key, value) in members {
        // The root's type fields only say what the patch is.
        if key == "apiVersion" || key == "kind" {
            continue;
        }
        let mut path = String::new();
        push_key(&mut path, key);
        leaves(value, &mut path, set);
    }
}

fn leaves(value: &Json, path: &mut String, out: &mut Vec<String>) {
    match value {
        Json::Object(members) if !members.is_empty() => {
            for (key, value) in members {
                let len = path.len();
                push_key(path, key);
                leaves(value, path, out);
                path.truncate(len);
            }
        }
        _ => out.push(path.clone()),
    }
}

/// The fields `patch` (an apply configuration) set in `merged`, the object
/// it was merged into, whose type is `ty`: an item of a map list is named by
/// its index in `merged` (`spec.containers[1].resources`), or as a whole
/// when only its keys are given; other lists are written whole.
pub(crate) fn of_merged_apply_configuration(
    patch: &Json,
    merged: &Json,
    ty: &TypeRef,
    set: &mut Vec<String>,
) {
    let Json::Object(members) = patch else {
        return;
    };
    let root = ty.cursor();
    for (key, value) in members {
        if key == "apiVersion" || key == "kind" {
            continue;
        }
        let mut path = String::new();
        push_key(&mut path, key);
        typed_member(value, Some(merged), root, key, &mut path, set);
    }
}

/// The fields the member `key` of a map (`value` in the patch, under
/// `merged` in the merged object, of type `ty`) sets, `path` naming it.
/// The type is followed only down to the lists that need it: a subtree
/// without one names its leaves as they are.
fn typed_member(
    value: &Json,
    merged: Option<&Json>,
    ty: TypeCursor<'_>,
    key: &str,
    path: &mut String,
    out: &mut Vec<String>,
) {
    match has_list(value) {
        true => typed_leaves(
            value,
            merged.and_then(|m| m.get(key)),
            ty.field(key),
            path,
            out,
        ),
        false => leaves(value, path, out),
    }
}

fn typed_leaves(
    value: &Json,
    merged: Option<&Json>,
    ty: TypeCursor<'_>,
    path: &mut String,
    out: &mut Vec<String>,
) {
    match (value, merged) {
        (Json::Object(members), _) if !members.is_empty() => {
            for (key, value) in members {
                let len = path.len();
                push_key(path, key);
                typed_member(value, merged, ty, key, path, out);
                path.truncate(len);
            }
        }
        (Json::Array(items), Some(Json::Array(merged_items)))
            if !items.is_empty() && !ty.key_fields().is_empty() =>
        {
            map_list_items(items, merged_items, ty, path, out)
        }
        _ => out.push(path.clone()),
    }
}

/// The fields the items of a map list set, each under its merged index.
fn map_list_items(
    items: &[Json],
    merged: &[Json],
    ty: TypeCursor<'_>,
    path: &mut String,
    out: &mut Vec<String>,
) {
    let keys = ty.key_fields();
    let element = ty.item();
    for (item, index) in items.iter().zip(ty.positions_of(merged, items)) {
        let (Some(index), Json::Object(members)) = (index, item) else {
            // Not found again (a merge would have failed): the whole list.
            out.push(path.clone());
            return;
        };
        let len = path.len();
        use std::fmt::Write as _;
        let _ = write!(path, "[{index}]");
        let mut fields = members.iter().filter(|(k, _)| !keys.contains(k)).peekable();
        if fields.peek().is_none() {
            out.push(path.clone());
        }
        for (key, value) in fields {
            let at = path.len();
            push_key(path, key);
            typed_member(value, Some(&merged[index]), element, key, path, out);
            path.truncate(at);
        }
        path.truncate(len);
    }
}

/// The fields `ops` (a JSON patch, to be applied to `object`) set and remove.
pub(crate) fn of_json_patch(
    ops: &[PatchOperation],
    object: &Json,
    set: &mut Vec<String>,
    removed: &mut Vec<String>,
) {
    for op in ops {
        match op.op.as_str() {
            "remove" => removed.push(field_path(&op.path, object)),
            "move" => {
                if let Some(from) = op.from.as_deref().filter(|f| !f.is_empty()) {
                    removed.push(field_path(from, object));
                }
                set.push(field_path(&op.path, object));
            }
            "add" | "replace" | "copy" => set.push(field_path(&op.path, object)),
            _ => {}
        }
    }
}

/// Appends `key` to a field path: `.key` for a plain name, `["key"]` else.
fn push_key(path: &mut String, key: &str) {
    let plain = key
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        && key.bytes().next().is_some_and(|c| !c.is_ascii_digit());
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push('[');
        push_quoted(path, key);
        path.push(']');
    }
}

/// The field path of the JSON pointer `pointer`, with `document` telling
/// list indexes from map keys (a token under a list is an index, `-` the
/// end).
pub fn field_path(pointer: &str, document: &Json) -> String {
    let mut out = String::with_capacity(pointer.len() + 8);
    let mut node = Some(document);
    for token in pointer.split('/').skip(1) {
        let key: std::borrow::Cow<str> = match token.contains('~') {
            true => token.replace("~1", "/").replace("~0", "~").into(),
            false => token.into(),
        };
        match node {
            Some(Json::Array(items)) => {
                out.push('[');
                out.push_str(&key);
                out.push(']');
                node = key.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            _ => {
                push_key(&mut out, &key);
                node = node.and_then(|n| n.get(key.as_ref()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_apply_configuration_sets_its_leaves_and_lists_whole() {
        let mut set = Vec::new();
        of_apply_configuration(
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"labels": {"app.kubernetes.io/name": "x", "team": "t"}},
                "spec": {"containers": [{"name": "a"}], "securityContext": {}}}),
            &mut set,
        );
        assert_eq!(
            set,
            [
                r#"metadata.labels["app.kubernetes.io/name"]"#,
                "metadata.labels.team",
                "spec.containers",
                "spec.securityContext",
            ]
        );
    }

    // The merged object as the merge leaves it: the existing container `b`
    // keeps its place, the new `sidecar` comes after the object's items.
    #[test]
    fn a_map_list_item_is_named_by_its_index_in_the_merged_object() {
        let pod = crate::schema::SchemaStore::builtin()
            .lookup("", "v1", "Pod")
            .unwrap();
        let patch = json!({"spec": {
            "containers": [
                {"name": "b", "resources": {"limits": {"cpu": "1"}},
                    "ports": [{"containerPort": 80}]},
                {"name": "sidecar"}],
            "tolerations": [{"key": "k"}]}});
        let merged = json!({"spec": {
            "containers": [
                {"name": "a"},
                {"name": "b", "resources": {"limits": {"cpu": "1"}},
                    "ports": [{"containerPort": 53, "protocol": "UDP"},
                        {"containerPort": 80, "protocol": "TCP"}]},
                {"name": "sidecar"}],
            "tolerations": [{"key": "k"}]}});
        let mut set = Vec::new();
        of_merged_apply_configuration(&patch, &merged, &pod, &mut set);
        assert_eq!(
            set,
            [
                // A port's key is its number and protocol (TCP by default):
                // given whole.
                "spec.containers[1].ports[1]",
                "spec.containers[1].resources.limits.cpu",
                "spec.containers[2]",
                // An atomic list is written whole.
                "spec.tolerations",
            ]
        );
        let applied = super::super::MutationValue::Apply(super::super::AppliedConfiguration {
            patch,
            passed: Default::default(),
        });
        let Written::AfterMerge = of_mutation(&applied, &json!({})) else {
            panic!("an apply configuration with lists is told after its merge");
        };
    }

    #[test]
    fn a_json_patch_writes_its_paths_with_list_indexes() {
        let after = json!({"spec": {"containers": [{"name": "a", "resources": {}}]},
            "metadata": {"labels": {"app.kubernetes.io/name": "x"}}});
        let op = |op: &str, path: &str, from: Option<&str>| PatchOperation {
            op: op.into(),
            path: path.into(),
            from: from.map(Into::into),
            value: None,
        };
        let (mut set, mut removed) = (Vec::new(), Vec::new());
        of_json_patch(
            &[
                op("add", "/spec/containers/0/resources", None),
                op("replace", "/metadata/labels/app.kubernetes.io~1name", None),
                op("remove", "/spec/containers/1", None),
                op("test", "/spec", None),
                op("move", "/metadata/labels/b", Some("/metadata/labels/a")),
            ],
            &after,
            &mut set,
            &mut removed,
        );
        assert_eq!(
            set,
            [
                "spec.containers[0].resources",
                r#"metadata.labels["app.kubernetes.io/name"]"#,
                "metadata.labels.b",
            ]
        );
        assert_eq!(removed, ["spec.containers[1]", "metadata.labels.a"]);
    }
}
