//! The fields a mutation writes, read from the mutation itself rather than
//! from a comparison of the object before and after it: an admission
//! attributes each change to its binding ([`super::BindingChange`]) without
//! walking the whole object once per binding.
//!
//! An apply configuration writes each leaf of its patch, and a list as a
//! whole (merged by key or replaced, which only the schema tells); a JSON
//! patch writes each operation's path. Field paths are written as kubectl
//! and upstream's messages write them: `spec.containers[0].resources`,
//! `metadata.labels["app.kubernetes.io/name"]`.

use crate::mutation::json_patch::PatchOperation;
use serde_json::Value as Json;

/// The fields `value` sets and removes, on `object` as it is before it.
pub(super) fn of_mutation(
    value: &super::MutationValue,
    object: &Json,
) -> (Vec<String>, Vec<String>) {
    let (mut set, mut removed) = (Vec::new(), Vec::new());
    match value {
        super::MutationValue::Apply(applied) => of_apply_configuration(&applied.patch, &mut set),
        super::MutationValue::Patch(ops) => of_json_patch(ops, object, &mut set, &mut removed),
    }
    (set, removed)
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
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
    } else {
        path.push('[');
        path.push_str(&Json::from(key).to_string());
        path.push(']');
    }
}

/// The field path of the JSON pointer `pointer`, with `document` telling
/// list indexes from map keys (a token under a list is an index, `-` the
/// end).
pub fn field_path(pointer: &str, document: &Json) -> String {
    let mut out = String::new();
    let mut node = Some(document);
    for token in pointer.split('/').skip(1) {
        let key = token.replace("~1", "/").replace("~0", "~");
        match node {
            Some(Json::Array(items)) => {
                out.push('[');
                out.push_str(&key);
                out.push(']');
                node = key.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            _ => {
                push_key(&mut out, &key);
                node = node.and_then(|n| n.get(&key));
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
