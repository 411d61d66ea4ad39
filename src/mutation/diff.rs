//! The RFC 6902 patch a webhook answers with: from the request's object to
//! the mutated one.
//!
//! The operations are those of `json_patch::diff` (json-patch 4, the
//! crate kube uses), which this replaces for speed only: subtrees the
//! mutations left equal are skipped after one comparison, instead of being
//! walked key by key while building a JSON pointer for each.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

/// The patch that turns `left` into `right`, as `json_patch::diff` makes it.
pub fn diff(left: &Value, right: &Value) -> Patch {
    let mut patch = Vec::new();
    if !equal(left, right) {
        diff_value(left, right, &mut PointerBuf::new(), &mut patch);
    }
    Patch(patch)
}

/// The operations for `left` and `right`, which differ. Equal subtrees give
/// no operation: callers skip them after one comparison.
fn diff_value(
    left: &Value,
    right: &Value,
    pointer: &mut PointerBuf,
    patch: &mut Vec<PatchOperation>,
) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => diff_object(l, r, pointer, patch),
        (Value::Array(l), Value::Array(r)) => diff_array(l, r, pointer, patch),
        _ => patch.push(PatchOperation::Replace(ReplaceOperation {
            path: pointer.clone(),
            value: right.clone(),
        })),
    }
}

/// Items compared by index; extra items of `left` are removed from the end
/// inward at the index they then have, extra items of `right` appended.
fn diff_array(
    left: &[Value],
    right: &[Value],
    pointer: &mut PointerBuf,
    patch: &mut Vec<PatchOperation>,
) {
    let mut removed = 0usize;
    for index in 0..left.len().max(right.len()) {
        match (left.get(index), right.get(index)) {
            (Some(l), Some(r)) => {
                if !equal(l, r) {
                    pointer.push_back(index);
                    diff_value(l, r, pointer, patch);
                    pointer.pop_back();
                }
            }
            (Some(_), None) => {
                pointer.push_back(index - removed);
                patch.push(PatchOperation::Remove(RemoveOperation {
                    path: pointer.clone(),
                }));
                pointer.pop_back();
                removed += 1;
            }
            (None, Some(r)) => {
                pointer.push_back(index);
                patch.push(PatchOperation::Add(AddOperation {
                    path: pointer.clone(),
                    value: r.clone(),
                }));
                pointer.pop_back();
            }
            (None, None) => {}
        }
    }
}

/// `right`'s keys in its order (changed or added), then `left`'s keys
/// that `right` lacks (removed).
fn diff_object(
    left: &Map<String, Value>,
    right: &Map<String, Value>,
    pointer: &mut PointerBuf,
    patch: &mut Vec<PatchOperation>,
) {
    // Objects keep their keys sorted, so most keys pair up in step; the
    // others are looked up.
    let mut in_step = left.iter().peekable();
    let mut found = 0usize;
    for (key, r) in right {
        let l = match in_step.next_if(|(k, _)| *k == key) {
            Some((_, l)) => Some(l),
            None => left.get(key),
        };
        match l {
            Some(l) => {
                found += 1;
                if !equal(l, r) {
                    pointer.push_back(key);
                    diff_value(l, r, pointer, patch);
                    pointer.pop_back();
                }
            }
            None => {
                pointer.push_back(key);
                patch.push(PatchOperation::Add(AddOperation {
                    path: pointer.clone(),
                    value: r.clone(),
                }));
                pointer.pop_back();
            }
        }
    }
    if found == left.len() {
        return;
    }
    for key in left.keys() {
        if !right.contains_key(key) {
            pointer.push_back(key);
            patch.push(PatchOperation::Remove(RemoveOperation {
                path: pointer.clone(),
            }));
            pointer.pop_back();
        }
    }
}

/// `left == right`, pairing the keys of maps in step while they come in
/// the same order, before falling back to lookups.
fn equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            if l.len() != r.len() {
                return false;
            }
            let mut pairs = l.iter().zip(r.iter());
            for ((lk, lv), (rk, rv)) in pairs.by_ref() {
                if lk != rk {
                    // Out of step: the rest by lookup.
                    return l.iter().all(|(k, v)| r.get(k).is_some_and(|w| equal(v, w)));
                }
                if !equal(lv, rv) {
                    return false;
                }
            }
            true
        }
        (Value::Array(l), Value::Array(r)) => {
            l.len() == r.len() && l.iter().zip(r).all(|(a, b)| equal(a, b))
        }
        _ => left == right,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The same operations as `json_patch::diff`, the implementation this
    /// replaces, and a patch that turns `left` into `right`.
    #[track_caller]
    fn same_as_json_patch(left: Value, right: Value) {
        let ours = diff(&left, &right);
        assert_eq!(ours, json_patch::diff(&left, &right), "{left} -> {right}");
        let mut patched = left.clone();
        json_patch::patch(&mut patched, &ours).expect("applies");
        assert_eq!(patched, right);
    }

    // json-patch 4.2 `src/diff.rs` tests, and the shapes the webhook meets.
    #[test]
    fn operations_match_json_patch_diff() {
        same_as_json_patch(json!({"title": "Hello!"}), Value::Null);
        same_as_json_patch(
            json!({"title": "Something", "": "Hello!"}),
            json!({"title": "Something", "": "Bye!"}),
        );
        same_as_json_patch(Value::Null, json!({"title": "Hello!"}));
        same_as_json_patch(
            json!({"a": [1, 2, 3, 4], "b": {"c": 1, "d/e~f": 2}}),
            json!({"a": [1, 5], "b": {"d/e~f": 3, "g": [true]}}),
        );
        same_as_json_patch(json!({"a": [1]}), json!({"a": [1, 2, {"x": null}]}));
        same_as_json_patch(json!([{"a": 1}, {"b": 2}]), json!([{"a": 1}, {"b": 3}, 4]));
        same_as_json_patch(
            json!({"a": {"b": {"c": [1, 2]}}}),
            json!({"a": {"b": {"c": [1, 2]}}}),
        );
        same_as_json_patch(json!({"a": 1}), json!({"a": "1"}));
        let pod = json!({"metadata": {"name": "p", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}});
        let mut mutated = pod.clone();
        mutated["metadata"]["labels"]["team"] = json!("t");
        mutated["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        mutated["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "2"}, {"name": "B"}]);
        mutated["spec"]["securityContext"] = json!({"runAsNonRoot": true});
        same_as_json_patch(pod, mutated);
    }

    #[test]
    fn keys_out_of_order_pair_by_name() {
        // Reordered only: equal, no operation.
        same_as_json_patch(
            json!({"a": 1, "b": {"x": 1, "y": 2}, "c": 3}),
            json!({"c": 3, "b": {"y": 2, "x": 1}, "a": 1}),
        );
        // Reordered, with a change, an addition and a removal.
        same_as_json_patch(
            json!({"a": 1, "b": 2, "c": 3, "e": 5}),
            json!({"c": 3, "a": 1, "b": 5, "d": 4}),
        );
        // A key removed early puts the rest out of step.
        same_as_json_patch(
            json!({"a": 1, "b": 2, "c": {"x": 1}, "d": 4}),
            json!({"a": 1, "c": {"x": 2}, "d": 4}),
        );
        // Same keys and length, in another order, one value differing.
        same_as_json_patch(json!({"a": 1, "b": 2}), json!({"b": 2, "a": 3}));
    }
}
