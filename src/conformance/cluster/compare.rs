//! How a live apiserver's answer is held against a case's expectation.
//!
//! The apiserver defaults an object before admission and after each
//! mutation, runs its own admission plugins (a Pod's service-account token
//! mount) and sets metadata, none of which a case states. So the runner
//! compares changes, not objects:
//!
//! - the case's change is from its `object` to its `expect.object`;
//! - the policies' change is from the *baseline* (the same dry-run request,
//!   sent before the case's policies exist) to the answer with them;
//! - every change the case expects must be in the answer (a value the
//!   policies added may carry the apiserver's defaults inside it, and a
//!   list may carry the token mount the ServiceAccount plugin adds on
//!   reinvocation), and every change the policies made must be one the case
//!   expects (or lie inside one). A case that expects a change the answer
//!   lacks fails, so a mutation that did not happen cannot pass;
//! - what the apiserver makes of the expected object by itself (the same
//!   request with the expected object, sent with no policy) is not held
//!   against the policies: defaults filled in again after a mutation.
//!
//! Both sides are first normalised as the in-process runner compares
//! (nulls, empty maps and lists dropped) and stripped of what the apiserver
//! sets anew on each request (uid, resourceVersion, creationTimestamp,
//! managedFields, generation).

use crate::conformance::normalize;
use serde_json::Value as Json;

/// One step of a path into a JSON value.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

type JsonPath = Vec<Step>;

/// A change: where, and the new value (`None`: removed).
type Change = (JsonPath, Option<Json>);

/// What changed from `before` to `after`. Maps are compared key by key,
/// lists of the same length item by item; a list whose length changed, or a
/// value whose type changed, is one change of the whole.
fn changes(before: &Json, after: &Json) -> Vec<Change> {
    let mut out = Vec::new();
    walk(before, after, &mut Vec::new(), &mut out);
    out
}

fn walk(before: &Json, after: &Json, at: &mut JsonPath, out: &mut Vec<Change>) {
    match (before, after) {
        (Json::Object(b), Json::Object(a)) => {
            for (k, bv) in b {
                at.push(Step::Key(k.clone()));
                match a.get(k) {
                    Some(av) => walk(bv, av, at, out),
                    None => out.push((at.clone(), None)),
                }
                at.pop();
            }
            for (k, av) in a {
                if !b.contains_key(k) {
                    at.push(Step::Key(k.clone()));
                    out.push((at.clone(), Some(av.clone())));
                    at.pop();
                }
            }
        }
        (Json::Array(b), Json::Array(a)) if b.len() == a.len() => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                at.push(Step::Index(i));
                walk(bv, av, at, out);
                at.pop();
            }
        }
        _ if same(before, after) => {}
        _ => out.push((at.clone(), Some(after.clone()))),
    }
}

/// Equal JSON, numbers compared by value (`1` and `1.0`).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn at<'v>(v: &'v Json, path: &[Step]) -> Option<&'v Json> {
    path.iter().try_fold(v, |v, s| match s {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

/// Whether `actual` holds `expected`: every key of a map (recursively),
/// every item of a list of the same length, equal scalars; the apiserver's
/// defaults inside are the only extra allowed.
fn holds(actual: &Json, expected: &Json) -> bool {
    match (actual, expected) {
        (Json::Object(a), Json::Object(e)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| holds(av, ev))),
        (Json::Array(a), Json::Array(e)) => {
            let a: Vec<&Json> = a
                .iter()
                .filter(|av| !is_token_mount(av) || e.iter().any(|ev| same(av, ev)))
                .collect();
            a.len() == e.len() && a.iter().zip(e).all(|(av, ev)| holds(av, ev))
        }
        _ => same(actual, expected),
    }
}

/// `found` (a list), without the items the apiserver added before
/// admission: those of the baseline's list at `path` that the case's own
/// object does not have (the DefaultTolerationSeconds plugin's
/// tolerations, for one). Anything else is `found` itself.
fn without_added_items(found: &Json, path: &[Step], object: &Json, baseline: &Json) -> Json {
    let (Json::Array(items), Some(Json::Array(before))) = (found, at(baseline, path)) else {
        return found.clone();
    };
    let own: &[Json] = at(object, path)
        .and_then(Json::as_array)
        .map_or(&[], Vec::as_slice);
    let added: Vec<&Json> = before
        .iter()
        .filter(|b| !own.iter().any(|o| holds(b, o)))
        .collect();
    Json::Array(
        items
            .iter()
            .filter(|i| !added.iter().any(|a| same(a, i)))
            .cloned()
            .collect(),
    )
}

/// The ServiceAccount plugin's token mount (or volume), `kube-api-access-*`.
fn is_token_mount(v: &Json) -> bool {
    v["name"]
        .as_str()
        .is_some_and(|n| n.starts_with(TOKEN_VOLUME))
}

/// The ServiceAccount plugin's token volume ends in 5 random characters.
const TOKEN_VOLUME: &str = "kube-api-access-";

fn show(path: &[Step]) -> String {
    let s: String = path
        .iter()
        .map(|s| match s {
            Step::Key(k) => format!(".{k}"),
            Step::Index(i) => format!("[{i}]"),
        })
        .collect();
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
}

/// What the apiserver computes from what the policy changed (a Pod's QoS
/// class from its resources), not a mutation.
fn derived(path: &[Step]) -> bool {
    path == [Step::Key("status".into()), Step::Key("qosClass".into())]
}

/// `object` without the metadata the apiserver sets anew on each request.
pub fn without_volatile_metadata(object: &Json) -> Json {
    let mut o = object.clone();
    // The uid, wherever the apiserver copied it (a Job's controller-uid).
    if let Some(uid) = o["metadata"]["uid"]
        .as_str()
        .filter(|u| !u.is_empty())
        .map(str::to_string)
    {
        replace_uid(&mut o, &uid);
    }
    if let Some(m) = o.get_mut("metadata").and_then(Json::as_object_mut) {
        for k in [
            "uid",
            "creationTimestamp",
            "managedFields",
            "resourceVersion",
            "generation",
        ] {
            m.remove(k);
        }
    }
    stable_token_names(&mut o);
    o
}

fn replace_uid(v: &mut Json, uid: &str) {
    match v {
        Json::String(s) if s.contains(uid) => *s = s.replace(uid, "<uid>"),
        Json::Array(items) => items.iter_mut().for_each(|i| replace_uid(i, uid)),
        Json::Object(m) => m.values_mut().for_each(|i| replace_uid(i, uid)),
        _ => {}
    }
}

/// Drops the ServiceAccount plugin's token volume and mounts (named
/// `kube-api-access-` and 5 random characters): the plugin adds them, or
/// not, from what the policies set (`automountServiceAccountToken`), and
/// no case states them.
fn stable_token_names(v: &mut Json) {
    match v {
        Json::Array(items) => {
            items.retain(|i| {
                !(i["name"].as_str().is_some_and(|n| {
                    n.starts_with(TOKEN_VOLUME) && n.len() == TOKEN_VOLUME.len() + 5
                }))
            });
            items.iter_mut().for_each(stable_token_names)
        }
        Json::Object(m) => m.values_mut().for_each(stable_token_names),
        _ => {}
    }
}

/// The differences between what the case expects the policies to change
/// (`object` to `expected`) and what they changed (`baseline` to
/// `answer`); empty when they agree.
///
/// `defaulted` is the apiserver's answer to the expected object itself,
/// sent with no policy: where the answer holds what the apiserver makes of
/// the expected object on its own (defaults filled in again after the
/// mutation, a request set from a limit), it is not the policies' doing.
pub fn compare(
    object: &Json,
    expected: &Json,
    baseline: &Json,
    answer: &Json,
    defaulted: Option<&Json>,
) -> Vec<String> {
    let object = normalize(&without_volatile_metadata(object));
    let expected = normalize(&without_volatile_metadata(expected));
    let baseline = normalize(&without_volatile_metadata(baseline));
    let answer = normalize(&without_volatile_metadata(answer));
    let defaulted = defaulted.map(|d| normalize(&without_volatile_metadata(d)));
    let by_itself = |path: &[Step]| {
        defaulted
            .as_ref()
            .is_some_and(|d| match (at(d, path), at(&answer, path)) {
                (Some(a), Some(b)) => same(a, b),
                (None, None) => true,
                _ => false,
            })
    };
    let wanted = changes(&object, &expected);
    let made: Vec<Change> = changes(&baseline, &answer)
        .into_iter()
        .filter(|(path, _)| !derived(path))
        .collect();
    let mut problems = Vec::new();
    for (path, value) in &wanted {
        let found = at(&answer, path).map(|f| without_added_items(f, path, &object, &baseline));
        // The expected object sent alone must show the change (it differs
        // from the baseline there), or the change is not observable and the
        // case cannot pass by it.
        let observable =
            defaulted
                .as_ref()
                .is_some_and(|d| match (at(d, path), at(&baseline, path)) {
                    (Some(a), Some(b)) => !same(a, b),
                    (None, None) => false,
                    _ => true,
                });
        let ok = (observable && by_itself(path))
            || match (value, &found) {
                (None, None) => true,
                (None, Some(Json::Array(rest))) => rest.is_empty(),
                (Some(v), Some(f)) => holds(f, v),
                _ => false,
            };
        if !ok {
            problems.push(format!(
                "{}: expected {}, the apiserver gave {}",
                show(path),
                value.as_ref().map_or("it removed".into(), Json::to_string),
                found.as_ref().map_or("nothing".into(), Json::to_string)
            ));
        }
    }
    for (path, value) in &made {
        let covered = wanted
            .iter()
            .any(|(p, _)| path.starts_with(p) || p.starts_with(path));
        if !covered && !by_itself(path) {
            problems.push(format!(
                "{}: the policies made it {}, the case expects no change there",
                show(path),
                value.as_ref().map_or("absent".into(), Json::to_string)
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_mutation_that_did_not_happen_fails() {
        let object = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        let expected = json!({"metadata": {"name": "c"}, "data": {"a": "2"}});
        let baseline = json!({"metadata": {"name": "c", "uid": "u"}, "data": {"a": "1"}});
        assert_eq!(
            compare(&object, &expected, &baseline, &baseline, None).len(),
            1
        );
        let answer = json!({"metadata": {"name": "c", "uid": "v"}, "data": {"a": "2"}});
        assert!(compare(&object, &expected, &baseline, &answer, None).is_empty());
    }

    #[test]
    fn defaults_inside_an_added_value_are_allowed_and_extra_changes_are_not() {
        let object = json!({"spec": {"containers": [{"name": "a"}]}});
        let expected = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let baseline =
            json!({"spec": {"containers": [{"name": "a", "imagePullPolicy": "Always"}]}});
        let answer = json!({"spec": {"containers": [
            {"name": "a", "imagePullPolicy": "Always"},
            {"name": "b", "imagePullPolicy": "Always"}]}});
        assert!(compare(&object, &expected, &baseline, &answer, None).is_empty());
        let extra = json!({"spec": {"containers": [
            {"name": "a", "imagePullPolicy": "Always"},
            {"name": "b", "imagePullPolicy": "Always"}], "x": 1}});
        assert_eq!(
            compare(&object, &expected, &baseline, &extra, None).len(),
            1
        );
    }

    #[test]
    fn a_change_the_apiserver_drops_even_alone_does_not_pass() {
        let object = json!({"metadata": {"name": "c"}});
        let expected = json!({"metadata": {"name": "c", "labels": {"a": "b"}}});
        let baseline = object.clone();
        // A status update keeps the stored metadata: the label never shows.
        let dropped = compare(&object, &expected, &baseline, &baseline, Some(&baseline));
        assert_eq!(dropped.len(), 1);
        // Defaults the apiserver fills in again are not the policies' doing.
        let object = json!({"spec": {"replicas": 3}});
        let expected = json!({"spec": {}});
        let defaulted = json!({"spec": {"replicas": 1}});
        assert!(compare(&object, &expected, &object, &defaulted, Some(&defaulted)).is_empty());
        assert_eq!(
            compare(&object, &expected, &object, &object, Some(&defaulted)).len(),
            1
        );
    }

    #[test]
    fn no_change_expected_and_none_made_passes() {
        let object = json!({"data": {"a": "1"}});
        let baseline = json!({"data": {"a": "1"}, "metadata": {"resourceVersion": "1"}});
        assert!(compare(&object, &object, &baseline, &baseline, None).is_empty());
    }
}
