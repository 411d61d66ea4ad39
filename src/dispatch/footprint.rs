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
use crate::mutation::apply_configuration::MergedPositions;
use crate::mutation::json_patch::PatchOperation;
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
    /// The fields set and removed, given the mutation `value`, once merged.
    pub(super) fn resolve(self, value: &super::MutationValue) -> (Vec<String>, Vec<String>) {
        match (self, value) {
            (Written::Known(set, removed), _) => (set, removed),
            (Written::AfterMerge, super::MutationValue::Apply(applied)) => {
                let mut set = Vec::new();
                match &applied.positions {
                    Some(placed) => of_merged_apply_configuration(&applied.patch, placed, &mut set),
                    // Not merged with positions noted: its lists whole.
                    None => of_apply_configuration(&applied.patch, &mut set),
                }
                (set, Vec::new())
            }
            (Written::AfterMerge, super::MutationValue::Patch(_)) => (Vec::new(), Vec::new()),
        }
    }
}

/// What `value` writes, on `object` as it is before it. An apply
/// configuration with lists is told after its merge, which is asked to
/// note where their items land.
pub(super) fn of_mutation(value: &mut super::MutationValue, object: &Json) -> Written {
    let (mut set, mut removed) = (Vec::new(), Vec::new());
    match value {
        super::MutationValue::Apply(applied) if has_list(&applied.patch) => {
            applied.positions = Some(MergedPositions::default());
            return Written::AfterMerge;
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

/// The fields `patch` (an apply configuration) set, as its merge placed
/// them (`placed`): an item of a map list is named by its index in the
/// merged object (`spec.containers[1].resources`), or as a whole when only
/// its keys are given; other lists are written whole.
pub(crate) fn of_merged_apply_configuration(
    patch: &Json,
    placed: &MergedPositions,
    set: &mut Vec<String>,
) {
    let Json::Object(members) = patch else {
        return;
    };
    for (key, value) in members {
        if key == "apiVersion" || key == "kind" {
            continue;
        }
        let mut path = String::new();
        push_key(&mut path, key);
        placed_leaves(value, placed, &mut path, set);
    }
}

/// [`leaves`], the items of the map lists the merge placed named by their
/// merged index.
fn placed_leaves(value: &Json, placed: &MergedPositions, path: &mut String, out: &mut Vec<String>) {
    match value {
        Json::Object(members) if !members.is_empty() => {
            for (key, value) in members {
                let len = path.len();
                push_key(path, key);
                placed_leaves(value, placed, path, out);
                path.truncate(len);
            }
        }
        Json::Array(items) => match placed.of(items) {
            Some((landed, keys)) => map_list_items(items, landed, keys, placed, path, out),
            None => out.push(path.clone()),
        },
        _ => out.push(path.clone()),
    }
}

/// The fields the items of a map list (with these key fields) set, each
/// under the index it `landed` at.
fn map_list_items(
    items: &[Json],
    landed: &[Option<usize>],
    keys: &[String],
    placed: &MergedPositions,
    path: &mut String,
    out: &mut Vec<String>,
) {
    for (item, index) in items.iter().zip(landed) {
        let (Some(index), Json::Object(members)) = (index, item) else {
            // Left out of the merged list: the whole list.
            out.push(path.clone());
            return;
        };
        let len = path.len();
        push_index(path, *index);
        let mut fields = members.iter().filter(|(k, _)| !keys.contains(k)).peekable();
        if fields.peek().is_none() {
            out.push(path.clone());
        }
        for (key, value) in fields {
            let at = path.len();
            push_key(path, key);
            placed_leaves(value, placed, path, out);
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

/// Appends `[index]` to a field path (without the formatting machinery:
/// this runs for every item a mutation writes).
fn push_index(path: &mut String, index: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = index;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    path.push('[');
    path.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
    path.push(']');
}

/// The bytes of a plain name in a field path (`.name`).
static NAME_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let c = byte as u8;
        table[byte] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
        byte += 1;
    }
    table
};

/// Appends `key` to a field path: `.key` for a plain name, `["key"]` else.
fn push_key(path: &mut String, key: &str) {
    let plain = key.bytes().all(|c| NAME_BYTE[usize::from(c)])
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
        let key = unescape_token(token);
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

/// A JSON pointer token's text: `~1` is `/`, `~0` is `~` (RFC 6901).
fn unescape_token(token: &str) -> std::borrow::Cow<'_, str> {
    if !token.as_bytes().contains(&b'~') {
        return token.into();
    }
    let mut key = String::with_capacity(token.len());
    let mut rest = token;
    while let Some(at) = rest.find('~') {
        key.push_str(&rest[..at]);
        match rest.as_bytes().get(at + 1) {
            Some(b'1') => key.push('/'),
            Some(b'0') => key.push('~'),
            // Not an escape: kept as it is, as `replace` kept it.
            _ => {
                key.push('~');
                rest = &rest[at + 1..];
                continue;
            }
        }
        rest = &rest[at + 2..];
    }
    key.push_str(rest);
    key.into()
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

    // The merge places the existing container `b` where it was and the new
    // `sidecar` after the object's items; the set `finalizers` has no keys.
    #[test]
    fn a_map_list_item_is_named_by_its_index_in_the_merged_object() {
        let pod = crate::schema::builtin_type("", "v1", "Pod");
        let patch = json!({"metadata": {"finalizers": ["example.com/f"]}, "spec": {
            "containers": [
                {"name": "b", "resources": {"limits": {"cpu": "1"}},
                    "ports": [{"containerPort": 80}]},
                {"name": "sidecar"}]}});
        let mut applied = super::super::MutationValue::Apply(super::super::AppliedConfiguration {
            patch,
            passed: Default::default(),
            positions: None,
        });
        let Written::AfterMerge = of_mutation(&mut applied, &json!({})) else {
            panic!("an apply configuration with lists is told after its merge");
        };
        let mut object = json!({"apiVersion": "v1", "kind": "Pod", "spec": {
            "containers": [
                {"name": "a"},
                {"name": "b", "ports": [{"containerPort": 53, "protocol": "UDP"},
                    {"containerPort": 80, "protocol": "TCP"}]}]}});
        let super::super::MutationValue::Apply(config) = &mut applied else {
            unreachable!()
        };
        crate::mutation::apply_configuration::apply_configuration_in_place(
            &mut object,
            crate::mutation::apply_configuration::LiveObject::Unchecked,
            &mut config.patch,
            crate::mutation::apply_configuration::PatchChecks::Unchecked,
            &pod,
            crate::mutation::apply_configuration::MergeTold {
                before_write: None,
                positions: config.positions.as_mut(),
            },
        )
        .unwrap();
        let names: Vec<&Json> = object["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["name"])
            .collect();
        assert_eq!(names, ["a", "b", "sidecar"]);
        let (set, removed) = Written::AfterMerge.resolve(&applied);
        assert_eq!(
            set,
            [
                // A set is written whole.
                "metadata.finalizers",
                // A port's key is its number and protocol (TCP by default):
                // given whole.
                "spec.containers[1].ports[1]",
                "spec.containers[1].resources.limits.cpu",
                "spec.containers[2]",
            ]
        );
        assert!(removed.is_empty());
    }

    #[test]
    fn indexes_and_keys_are_written_as_kubectl_writes_them() {
        let mut path = String::from("spec.containers");
        for index in [0, 7, 10, 12345, usize::MAX] {
            let len = path.len();
            push_index(&mut path, index);
            assert_eq!(path[len..], format!("[{index}]"));
            path.truncate(len);
        }
        for (key, written) in [
            ("team", ".team"),
            ("app_name-2", ".app_name-2"),
            ("app.kubernetes.io/name", r#"["app.kubernetes.io/name"]"#),
            ("2fa", r#"["2fa"]"#),
            ("ünï", r#"["ünï"]"#),
            ("", r#"[""]"#),
        ] {
            let mut path = String::from("metadata");
            push_key(&mut path, key);
            assert_eq!(path, format!("metadata{written}"), "{key}");
        }
    }

    #[test]
    fn pointer_tokens_are_unescaped_as_rfc_6901_says() {
        for (token, key) in [
            ("plain", "plain"),
            ("a~1b", "a/b"),
            ("a~0b", "a~b"),
            // `~01` is `~1`, not `/`: `~0` first becomes `~`.
            ("~01", "~1"),
            ("~10", "/0"),
            ("end~", "end~"),
            ("~2", "~2"),
        ] {
            assert_eq!(unescape_token(token), key, "{token}");
        }
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
