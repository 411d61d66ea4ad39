//! How a live apiserver's answer is held against a case's expectation.
//!
//! The apiserver does more to an object than admission: it defaults it
//! (before admission and after each mutation), runs its own admission
//! plugins (a Pod's service-account token mount), validates it, applies
//! the rules of the update (a status update keeps the stored metadata, a
//! Pod update may change little) and sets metadata; no case states any of
//! that. So the case's expected object is put through the same apiserver
//! first: the *normalised expectation* is the apiserver's answer to the
//! case's request carrying the expected object instead of its object, sent
//! with no policy in force (a dry run). Then:
//!
//! - the answer with the policies in force must equal the normalised
//!   expectation, field for field (after [`without_volatile_metadata`] and
//!   [`normalize`] on both), or its second form: the apiserver's answer to
//!   the baseline changed as the case changes its object
//!   ([`changed_baseline`]), for defaults fixed before a policy's change;
//! - when the case expects a change but its normalised expectation equals
//!   the *baseline* (the request with its own object, no policy), the
//!   apiserver discards the change by itself (metadata in a status update):
//!   a mutation that did not happen would look the same, so the case cannot
//!   pass; it is skipped when the answer agrees, and fails when it does not.
//!
//! A mutation that did not happen leaves the answer equal to the baseline,
//! which differs from the normalised expectation: it fails.

use crate::conformance::normalize;
use serde_json::Value as Json;

/// One step of a path into a JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A map's key.
    Key(String),
    /// A list's index.
    Index(usize),
}

/// A path into a JSON value.
pub type JsonPath = Vec<Step>;

/// A change: where, and the new value (`None`: removed).
pub type Change = (JsonPath, Option<Json>);

/// What changed from `before` to `after`. Maps are compared key by key,
/// lists of the same length item by item; a list whose length changed, or a
/// value whose type changed, is one change of the whole.
pub fn changes(before: &Json, after: &Json) -> Vec<Change> {
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
pub fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The value at `path` in `v`, if there is one.
pub fn at<'v>(v: &'v Json, path: &[Step]) -> Option<&'v Json> {
    path.iter().try_fold(v, |v, s| match s {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

/// Whether `actual` holds `expected`: every key of a map (recursively),
/// every item of a list of the same length, equal scalars; defaults the
/// apiserver filled in inside are the only extra allowed, and list items
/// `extra` says the apiserver adds by itself (unless `expected` has them).
pub fn holds(actual: &Json, expected: &Json, extra: &dyn Fn(&Json) -> bool) -> bool {
    match (actual, expected) {
        (Json::Object(a), Json::Object(e)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| holds(av, ev, extra))),
        (Json::Array(a), Json::Array(e)) => {
            let a: Vec<&Json> = a
                .iter()
                .filter(|av| !extra(av) || e.iter().any(|ev| same(av, ev)))
                .collect();
            a.len() == e.len() && a.iter().zip(e).all(|(av, ev)| holds(av, ev, extra))
        }
        _ => same(actual, expected),
    }
}

/// `path` as `.spec.containers[0].image` (`.` for the whole).
pub fn show(path: &[Step]) -> String {
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

/// What the apiserver computes on create from what a policy changed (a
/// Pod's QoS class from its resources), not a mutation.
pub fn derived(path: &[Step]) -> bool {
    path == [Step::Key("status".into()), Step::Key("qosClass".into())]
}

/// `base` with `changes` made to it (a change whose parent is not there
/// is made with the maps it needs; one into a list index not there is
/// dropped).
pub fn apply_changes(base: &Json, changes: &[Change]) -> Json {
    let mut out = base.clone();
    for (path, value) in changes {
        set_at(&mut out, path, value.as_ref());
    }
    out
}

fn set_at(v: &mut Json, path: &[Step], value: Option<&Json>) {
    let Some((first, rest)) = path.split_first() else {
        *v = value.cloned().unwrap_or(Json::Null);
        return;
    };
    match first {
        Step::Key(k) => {
            if !v.is_object() {
                *v = Json::Object(Default::default());
            }
            let Json::Object(m) = v else { return };
            match (rest.is_empty(), value) {
                (true, None) => {
                    m.remove(k);
                }
                _ => set_at(m.entry(k.clone()).or_insert(Json::Null), rest, value),
            }
        }
        Step::Index(i) => {
            let Json::Array(items) = v else { return };
            match (rest.is_empty(), value) {
                (true, None) if *i < items.len() => {
                    items.remove(*i);
                }
                _ => {
                    if let Some(item) = items.get_mut(*i) {
                        set_at(item, rest, value);
                    }
                }
            }
        }
    }
}

/// The other defaulting path: the apiserver's answer to the case's own
/// object (`baseline`, defaulted before admission) changed as the case
/// changes `object` into `expected`, for the apiserver to default again.
///
/// The apiserver defaults the incoming object before admission and the
/// mutated object after each mutation. A default that depends on a field a
/// mutation changes is fixed before the change when the mutation merges
/// (an image's pull policy: `nginx:1.27` is `IfNotPresent`, and stays so
/// when a policy makes the image `busybox`) and after it when the mutation
/// replaces the whole (`busybox` alone is `Always`). The expected object
/// sent by itself takes the second path; this takes the first.
///
/// Likewise a list whose items keep their places is changed item by item,
/// and what the case appends goes after what the apiserver has: its own
/// admission plugins run before the policies (a Pod's
/// DefaultTolerationSeconds tolerations come first, a policy's appended
/// toleration after them; a container changed in place keeps its pull
/// policy when the policy also appends a container).
pub fn changed_baseline(baseline: &Json, object: &Json, expected: &Json) -> Json {
    let (before, after) = (normalize(object), normalize(expected));
    let mut changed = rebase(baseline, &before, &after);
    // What the apiserver sets on each request (the token mounts stay: a
    // Pod update may not drop them).
    drop_request_metadata(&mut changed);
    changed
}

/// `base` changed as `prior` changes into `new`: maps key by key, a list
/// whose items keep their place item by item (its items the apiserver
/// added after `prior`'s kept, and `new`'s extra items after them), any
/// other change taken as `new` has it.
fn rebase(base: &Json, prior: &Json, new: &Json) -> Json {
    if same(prior, new) {
        return base.clone();
    }
    match (base, prior, new) {
        (Json::Object(b), Json::Object(p), Json::Object(n)) => {
            let mut out = b.clone();
            for k in p.keys().filter(|k| !n.contains_key(*k)) {
                out.remove(k);
            }
            for (k, nv) in n {
                let value = match (b.get(k), p.get(k)) {
                    (Some(bv), Some(pv)) => rebase(bv, pv, nv),
                    // What the case adds where the apiserver made a list
                    // or a map already (a default, an admission plugin's).
                    (Some(bv), None) => rebase(bv, &empty_like(nv), nv),
                    (None, _) => nv.clone(),
                };
                out.insert(k.clone(), value);
            }
            Json::Object(out)
        }
        (Json::Array(b), Json::Array(p), Json::Array(n))
            if n.len() >= p.len() && b.len() >= p.len() && keeps_places(p, n) =>
        {
            let mut out: Vec<Json> = (0..p.len()).map(|i| rebase(&b[i], &p[i], &n[i])).collect();
            out.extend(b[p.len()..].iter().cloned());
            out.extend(n[p.len()..].iter().cloned());
            Json::Array(out)
        }
        _ => new.clone(),
    }
}

/// An empty list or map where `v` is one, else null.
fn empty_like(v: &Json) -> Json {
    match v {
        Json::Array(_) => Json::Array(Vec::new()),
        Json::Object(_) => Json::Object(Default::default()),
        _ => Json::Null,
    }
}

/// Whether `new` keeps `prior`'s items in their places: no item named
/// otherwise (`name`, the key of most keyed lists) than the one it
/// replaces.
fn keeps_places(prior: &[Json], new: &[Json]) -> bool {
    prior
        .iter()
        .zip(new)
        .all(|(p, n)| p.get("name").is_none() || p.get("name") == n.get("name"))
}

/// `baseline` without what the apiserver allocated for a Service the case
/// left to it (cluster IPs, node ports): a dry run answers placeholders
/// (`10.0.0.0`) that it refuses when sent back, so the second form leaves
/// them to be allocated again.
pub fn without_service_allocations(baseline: &Json, object: &Json) -> Json {
    let mut out = baseline.clone();
    if object["kind"] != "Service" || object["apiVersion"] != "v1" {
        return out;
    }
    let Some(spec) = out.get_mut("spec").and_then(Json::as_object_mut) else {
        return out;
    };
    for field in ["clusterIP", "clusterIPs", "healthCheckNodePort"] {
        if object["spec"].get(field).is_none() {
            spec.remove(field);
        }
    }
    let given_ports = object["spec"]["ports"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = spec.get_mut("ports").and_then(Json::as_array_mut) {
        for (i, port) in ports.iter_mut().enumerate() {
            let given = given_ports.get(i).and_then(|p| p.get("nodePort")).is_some();
            if let (Some(port), false) = (port.as_object_mut(), given) {
                port.remove("nodePort");
            }
        }
    }
    out
}

/// The metadata the apiserver sets anew on each request.
const REQUEST_METADATA: [&str; 5] = [
    "uid",
    "creationTimestamp",
    "managedFields",
    "resourceVersion",
    "generation",
];

fn drop_request_metadata(o: &mut Json) {
    if let Some(m) = o.get_mut("metadata").and_then(Json::as_object_mut) {
        for k in REQUEST_METADATA {
            m.remove(k);
        }
    }
}

/// The ServiceAccount plugin's token volume ends in 5 random characters.
const TOKEN_VOLUME: &str = "kube-api-access-";

/// `object` without the metadata the apiserver sets anew on each request
/// (uid, resourceVersion, creationTimestamp, managedFields, generation;
/// the uid also wherever the apiserver copied it) and without the
/// ServiceAccount plugin's token volume and mounts.
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
    drop_request_metadata(&mut o);
    without_token_mounts(&mut o);
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
/// `kube-api-access-` and 5 random characters): the plugin adds them
/// before admission to the containers there are then, so a container a
/// policy adds lacks the mount the same container sent by itself gets,
/// and no case states them.
fn without_token_mounts(v: &mut Json) {
    match v {
        Json::Array(items) => {
            items.retain(|i| {
                !(i["name"].as_str().is_some_and(|n| {
                    n.starts_with(TOKEN_VOLUME) && n.len() == TOKEN_VOLUME.len() + 5
                }))
            });
            items.iter_mut().for_each(without_token_mounts)
        }
        Json::Object(m) => m.values_mut().for_each(without_token_mounts),
        _ => {}
    }
}

/// `value` as the comparison sees it: without volatile metadata, nulls,
/// empty maps and lists.
pub fn comparable(value: &Json) -> Json {
    normalize(&without_volatile_metadata(value))
}

/// The verdict on an answer that is an object.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The answer is the normalised expectation.
    Pass,
    /// Where they differ.
    Fail(Vec<String>),
    /// The answer is the normalised expectation, but that is also the
    /// baseline while the case expects a change: the apiserver discards it
    /// by itself, and a mutation that did not happen would look the same.
    Unobservable,
}

/// The answer with the policies in force against the normalised
/// expectation (`normalised`, the apiserver's answer to the expected
/// object with no policy). `object` and `expected` are the case's (to know
/// whether it expects a change), `baseline` the apiserver's answer to its
/// object with no policy.
pub fn compare(
    object: &Json,
    expected: &Json,
    baseline: &Json,
    normalised: &Json,
    answer: &Json,
) -> Verdict {
    let normalised = comparable(normalised);
    let answer = comparable(answer);
    let problems: Vec<String> = changes(&normalised, &answer)
        .into_iter()
        .map(|(path, got)| {
            format!(
                "{}: expected {}, the apiserver gave {}",
                show(&path),
                at(&normalised, &path).map_or("nothing".into(), Json::to_string),
                got.map_or("nothing".into(), |g| g.to_string())
            )
        })
        .collect();
    if !problems.is_empty() {
        return Verdict::Fail(problems);
    }
    let expects_change = comparable(object) != comparable(expected);
    if expects_change && normalised == comparable(baseline) {
        return Verdict::Unobservable;
    }
    Verdict::Pass
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
        let normalised = json!({"metadata": {"name": "c", "uid": "w"}, "data": {"a": "2"}});
        let Verdict::Fail(problems) =
            compare(&object, &expected, &baseline, &normalised, &baseline)
        else {
            panic!("an answer without the change passed");
        };
        assert_eq!(
            problems,
            [".data.a: expected \"2\", the apiserver gave \"1\""]
        );
        let answer = json!({"metadata": {"name": "c", "uid": "v"}, "data": {"a": "2"}});
        assert_eq!(
            compare(&object, &expected, &baseline, &normalised, &answer),
            Verdict::Pass
        );
    }

    #[test]
    fn the_apiserver_s_own_work_on_the_expected_object_is_not_held_against_the_policies() {
        // A removed field the apiserver defaults again.
        let object = json!({"spec": {"replicas": 3}});
        let expected = json!({"spec": {}});
        let defaulted = json!({"spec": {"replicas": 1}});
        assert_eq!(
            compare(&object, &expected, &object, &defaulted, &defaulted),
            Verdict::Pass
        );
        // ... but the value before the removal is no pass.
        assert!(matches!(
            compare(&object, &expected, &object, &defaulted, &object),
            Verdict::Fail(_)
        ));
        // A token mount on the containers there were before admission.
        let normalised = json!({"spec": {"containers": [
            {"name": "a", "volumeMounts": [{"name": "kube-api-access-x1y2z"}]},
            {"name": "b", "volumeMounts": [{"name": "kube-api-access-x1y2z"}]}]}});
        let answer = json!({"spec": {"containers": [
            {"name": "a", "volumeMounts": [{"name": "kube-api-access-q7r8s"}]},
            {"name": "b"}]}});
        let object = json!({"spec": {"containers": [{"name": "a"}]}});
        let expected = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(
            compare(&object, &expected, &object, &normalised, &answer),
            Verdict::Pass
        );
    }

    #[test]
    fn a_change_the_apiserver_discards_by_itself_cannot_pass() {
        let object = json!({"metadata": {"name": "c"}, "status": {"s": 1}});
        let expected = json!({"metadata": {"name": "c", "labels": {"a": "b"}}, "status": {"s": 1}});
        // A status update keeps the stored metadata: the label never shows.
        assert_eq!(
            compare(&object, &expected, &object, &object, &object),
            Verdict::Unobservable
        );
        // A policy that changed something else there still fails.
        let other = json!({"metadata": {"name": "c"}, "status": {"s": 2}});
        assert!(matches!(
            compare(&object, &expected, &object, &object, &other),
            Verdict::Fail(_)
        ));
    }

    #[test]
    fn the_merge_path_keeps_the_defaults_fixed_before_the_change() {
        // kube-apiserver's SetDefaults_Container: a tagged image pulls
        // IfNotPresent, an untagged one Always; defaulted before admission,
        // the first stays when a policy changes the image in place.
        let object = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]}});
        let expected = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "busybox"}]}});
        let baseline = json!({"metadata": {"name": "p", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "2026-12-04T00:00:00Z", "managedFields": []},
            "spec": {"containers": [{"name": "a", "image": "nginx:1.27",
                "imagePullPolicy": "IfNotPresent"}]}});
        assert_eq!(
            changed_baseline(&baseline, &object, &expected),
            json!({"metadata": {"name": "p"},
                "spec": {"containers": [{"name": "a", "image": "busybox",
                    "imagePullPolicy": "IfNotPresent"}]}})
        );
        // An appended container goes after the ones the apiserver has.
        let added = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "nginx:1.27"}, {"name": "b", "image": "busybox"}]}});
        assert_eq!(
            changed_baseline(&baseline, &object, &added)["spec"]["containers"],
            json!([{"name": "a", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent"},
                {"name": "b", "image": "busybox"}])
        );
        // A list replaced, not appended to, is taken as the case has it.
        let replaced = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "b", "image": "busybox"}, {"name": "a", "image": "nginx:1.27"}]}});
        assert_eq!(
            changed_baseline(&baseline, &object, &replaced)["spec"]["containers"],
            replaced["spec"]["containers"]
        );
    }

    #[test]
    fn a_service_s_allocations_are_left_to_the_apiserver_unless_the_case_gave_them() {
        // kube-apiserver v1.36.2's dry-run answer to a NodePort Service.
        let baseline = json!({"apiVersion": "v1", "kind": "Service", "spec": {
            "ports": [{"port": 80, "nodePort": 32769}], "clusterIP": "10.0.0.0",
            "clusterIPs": ["10.0.0.0"], "type": "NodePort", "externalTrafficPolicy": "Cluster"}});
        let object = json!({"apiVersion": "v1", "kind": "Service",
            "spec": {"ports": [{"port": 80}], "type": "NodePort"}});
        assert_eq!(
            without_service_allocations(&baseline, &object)["spec"],
            json!({"ports": [{"port": 80}], "type": "NodePort", "externalTrafficPolicy": "Cluster"})
        );
        let given = json!({"apiVersion": "v1", "kind": "Service",
            "spec": {"ports": [{"port": 80, "nodePort": 32769}], "clusterIP": "10.0.0.0"}});
        assert_eq!(
            without_service_allocations(&baseline, &given)["spec"]["ports"],
            baseline["spec"]["ports"]
        );
        assert_eq!(
            without_service_allocations(&baseline, &given)["spec"]["clusterIP"],
            "10.0.0.0"
        );
    }

    #[test]
    fn an_item_changed_in_place_keeps_its_defaults_when_the_list_also_grows() {
        // One policy changes container a's image in place, another appends
        // container b: a keeps the pull policy defaulted for its image
        // before admission, b is defaulted after (absent here).
        let object = json!({"spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]}});
        let expected = json!({"spec": {"containers": [
            {"name": "a", "image": "busybox", "ports": [{"containerPort": 9090}]},
            {"name": "b", "image": "busybox"}]}});
        let baseline = json!({"spec": {"containers": [{"name": "a", "image": "nginx:1.27",
            "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log"}]}});
        assert_eq!(
            changed_baseline(&baseline, &object, &expected)["spec"]["containers"],
            json!([{"name": "a", "image": "busybox", "ports": [{"containerPort": 9090}],
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log"},
                {"name": "b", "image": "busybox"}])
        );
    }

    #[test]
    fn a_list_the_case_appends_to_keeps_what_admission_added_first() {
        // DefaultTolerationSeconds (an admission plugin before the policies)
        // gives a Pod its not-ready toleration; the case's policy appends.
        let object = json!({"spec": {"containers": [{"name": "a"}]}});
        let expected = json!({"spec": {"containers": [{"name": "a"}],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]}});
        let baseline = json!({"spec": {"containers": [{"name": "a"}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300}]}});
        assert_eq!(
            changed_baseline(&baseline, &object, &expected)["spec"]["tolerations"],
            json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "dedicated", "operator": "Exists"}])
        );
    }

    #[test]
    fn holds_allows_defaults_inside_and_the_extra_items_named() {
        let expected = json!({"c": [{"n": "a"}]});
        let defaulted = json!({"c": [{"n": "a", "d": 1}]});
        assert!(holds(&defaulted, &expected, &|_| false));
        assert!(!holds(&expected, &defaulted, &|_| false));
        let mounted = json!({"c": [{"n": "a"}, {"n": "token"}]});
        assert!(!holds(&mounted, &expected, &|_| false));
        assert!(holds(&mounted, &expected, &|v| v["n"] == "token"));
    }

    #[test]
    fn no_change_expected_and_none_made_passes_and_an_extra_change_fails() {
        let object = json!({"data": {"a": "1"}});
        let baseline = json!({"data": {"a": "1"}, "metadata": {"resourceVersion": "1"}});
        assert_eq!(
            compare(&object, &object, &baseline, &baseline, &baseline),
            Verdict::Pass
        );
        let extra = json!({"data": {"a": "1", "b": null, "c": "2"}});
        let Verdict::Fail(problems) = compare(&object, &object, &baseline, &baseline, &extra)
        else {
            panic!("an extra change passed");
        };
        assert_eq!(
            problems,
            [".data.c: expected nothing, the apiserver gave \"2\""]
        );
    }
}
