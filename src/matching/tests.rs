//! Tests of `matches`. Expectations come from upstream
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/matching/matching_test.go`
//! (`TestMatcher`), `webhook/predicates/rules/rules.go`,
//! `webhook/predicates/namespace/matcher.go` and
//! `webhook/predicates/object/matcher.go`, as cited per test. Upstream cases
//! that leave matchPolicy unset match exactly (nil is Exact in
//! `matchesResourceRules`; the API defaults it to Equivalent), so they use
//! `exact(..)` here where it makes a difference.

use super::*;
use crate::api::{LabelSelectorRequirement, SelectorOperator};
use serde_json::json;

fn gvr(g: &str, v: &str, r: &str) -> GroupVersionResource {
    GroupVersionResource {
        group: g.into(),
        version: v.into(),
        resource: r.into(),
    }
}
fn gvk(g: &str, v: &str, k: &str) -> GroupVersionKind {
    GroupVersionKind {
        group: g.into(),
        version: v.into(),
        kind: k.into(),
    }
}
fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A rule with all operations, `*` scope.
fn rule(groups: &[&str], versions: &[&str], resources: &[&str]) -> NamedRule {
    NamedRule {
        resource_names: vec![],
        operations: strs(&["*"]),
        api_groups: strs(groups),
        api_versions: strs(versions),
        resources: strs(resources),
        scope: RuleScope::All,
    }
}
fn named(mut r: NamedRule, names: &[&str]) -> NamedRule {
    r.resource_names = strs(names);
    r
}
fn scoped(mut r: NamedRule, scope: RuleScope) -> NamedRule {
    r.scope = scope;
    r
}
fn ops(mut r: NamedRule, o: &[&str]) -> NamedRule {
    r.operations = strs(o);
    r
}
fn constraints(rules: Vec<NamedRule>) -> MatchResources {
    MatchResources {
        resource_rules: rules,
        ..Default::default()
    }
}
fn exact(mut c: MatchResources) -> MatchResources {
    c.match_policy = MatchPolicy::Exact;
    c
}
fn exclude(mut c: MatchResources, rules: Vec<NamedRule>) -> MatchResources {
    c.exclude_resource_rules = rules;
    c
}
fn selector(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        match_expressions: vec![],
    }
}

/// `admission.NewAttributesRecord(nil, nil, kind, "ns", "name", resource, sub, Create, ...)`.
fn attrs(kind: GroupVersionKind, resource: GroupVersionResource, sub: &str) -> AdmissionRequest {
    AdmissionRequest {
        kind,
        resource,
        sub_resource: sub.into(),
        name: "name".into(),
        namespace: "ns".into(),
        operation: "CREATE".into(),
        ..Default::default()
    }
}
fn deployment() -> AdmissionRequest {
    attrs(
        gvk("apps", "v1", "Deployment"),
        gvr("apps", "v1", "deployments"),
        "",
    )
}
fn deployment_scale() -> AdmissionRequest {
    attrs(
        gvk("autoscaling", "v1", "Scale"),
        gvr("apps", "v1", "deployments"),
        "scale",
    )
}

/// The mapper of `TestMatcher`: deployments co-located across API groups, in
/// its registration order, plus kind-less widgets to trigger errors.
fn upstream_mapper() -> ResourceTable {
    let mut t = ResourceTable::empty();
    for (g, v, scale_kind) in [
        (
            "extensions",
            "v1beta1",
            gvk("extensions", "v1beta1", "Scale"),
        ),
        ("apps", "v1", gvk("autoscaling", "v1", "Scale")),
        ("apps", "v1beta1", gvk("apps", "v1beta1", "Scale")),
        ("apps", "v1alpha1", gvk("apps", "v1alpha1", "Scale")),
    ] {
        t.register(
            gvr(g, v, "deployments"),
            gvk(g, v, "Deployment"),
            vec![("scale".into(), scale_kind)],
            "/deployments",
        );
    }
    t.register(
        gvr("example.com", "v1", "widgets"),
        gvk("", "", ""),
        vec![],
        "widgets",
    );
    t.register(
        gvr("example.com", "v2", "widgets"),
        gvk("", "", ""),
        vec![],
        "widgets",
    );
    t
}

/// The kind and resource a request matched as, or none.
type Resolved = Option<(GroupVersionKind, GroupVersionResource)>;

fn run(
    c: &MatchResources,
    r: &AdmissionRequest,
    t: &ResourceTable,
) -> Result<Resolved, MatchError> {
    run_in(c, r, &ClusterObjects::default(), t)
}
/// [`matches`], with what the request matched as resolved.
fn run_in(
    c: &MatchResources,
    r: &AdmissionRequest,
    cluster: &ClusterObjects,
    t: &ResourceTable,
) -> Result<Resolved, MatchError> {
    matches(c, r, cluster, t).map(|m| m.map(|m| (m.gvk(r).clone(), m.gvr(r).clone())))
}
fn exact_match(r: &AdmissionRequest) -> Resolved {
    as_(r.kind.clone(), r.resource.clone())
}
fn as_(k: GroupVersionKind, r: GroupVersionResource) -> Resolved {
    Some((k, r))
}

// --- TestMatcher cases -----------------------------------------------------

#[test]
fn upstream_wildcard_rule_match_as_requested() {
    let t = upstream_mapper();
    let r = deployment();
    assert_eq!(
        run(&constraints(vec![rule(&["*"], &["*"], &["*"])]), &r, &t),
        Ok(exact_match(&r))
    );
}

#[test]
fn upstream_specific_rules_prefer_exact_match() {
    let t = upstream_mapper();
    let r = deployment();
    let c = constraints(vec![
        rule(&["extensions"], &["v1"], &["deployments"]),
        rule(&["apps"], &["v1beta1"], &["deployments"]),
        rule(&["apps"], &["v1"], &["deployments"]),
    ]);
    assert_eq!(run(&c, &r, &t), Ok(exact_match(&r)));
}

#[test]
fn upstream_specific_rules_match_miss() {
    // "specific rules, match miss" (matchPolicy unset: exact there) and
    // "specific rules, exact match miss"; Equivalent with no equivalents
    // registered misses too.
    let r = deployment();
    let c = constraints(vec![
        rule(&["extensions"], &["v1beta1"], &["deployments"]),
        rule(&["apps"], &["v1beta1"], &["deployments"]),
    ]);
    assert_eq!(run(&exact(c.clone()), &r, &upstream_mapper()), Ok(None));
    assert_eq!(run(&c, &r, &ResourceTable::empty()), Ok(None));
}

#[test]
fn upstream_equivalent_match_prefers_rule_order() {
    let t = upstream_mapper();
    let r = deployment();
    let ext = rule(&["extensions"], &["v1beta1"], &["deployments"]);
    let apps = rule(&["apps"], &["v1beta1"], &["deployments"]);
    assert_eq!(
        run(&constraints(vec![ext.clone(), apps.clone()]), &r, &t),
        Ok(as_(
            gvk("extensions", "v1beta1", "Deployment"),
            gvr("extensions", "v1beta1", "deployments")
        ))
    );
    assert_eq!(
        run(&constraints(vec![apps, ext]), &r, &t),
        Ok(as_(
            gvk("apps", "v1beta1", "Deployment"),
            gvr("apps", "v1beta1", "deployments")
        ))
    );
}

#[test]
fn upstream_subresource_cases() {
    let t = upstream_mapper();
    let r = deployment_scale();
    let ext = rule(
        &["extensions"],
        &["v1beta1"],
        &["deployments", "deployments/scale"],
    );
    let apps_b1 = rule(
        &["apps"],
        &["v1beta1"],
        &["deployments", "deployments/scale"],
    );
    let apps_v1 = rule(&["apps"], &["v1"], &["deployments", "deployments/scale"]);
    // prefer exact match
    assert_eq!(
        run(
            &constraints(vec![ext.clone(), apps_b1.clone(), apps_v1]),
            &r,
            &t
        ),
        Ok(as_(
            gvk("autoscaling", "v1", "Scale"),
            gvr("apps", "v1", "deployments")
        ))
    );
    // exact match miss
    assert_eq!(
        run(
            &exact(constraints(vec![ext.clone(), apps_b1.clone()])),
            &r,
            &t
        ),
        Ok(None)
    );
    // equivalent match, prefer extensions / apps: the subresource's kind
    assert_eq!(
        run(&constraints(vec![ext.clone(), apps_b1.clone()]), &r, &t),
        Ok(as_(
            gvk("extensions", "v1beta1", "Scale"),
            gvr("extensions", "v1beta1", "deployments")
        ))
    );
    assert_eq!(
        run(&constraints(vec![apps_b1, ext]), &r, &t),
        Ok(as_(
            gvk("apps", "v1beta1", "Scale"),
            gvr("apps", "v1beta1", "deployments")
        ))
    );
}

#[test]
fn upstream_resource_names() {
    let t = upstream_mapper();
    let apps_v1 = rule(&["apps"], &["v1"], &["deployments"]);
    let r = attrs(
        gvk("autoscaling", "v1", "Scale"),
        gvr("apps", "v1", "deployments"),
        "",
    );
    // prefer exact match and name match / miss
    assert_eq!(
        run(
            &constraints(vec![named(apps_v1.clone(), &["name"])]),
            &r,
            &t
        ),
        Ok(exact_match(&r))
    );
    assert_eq!(
        run(&constraints(vec![named(apps_v1, &["wrong-name"])]), &r, &t),
        Ok(None)
    );
    // subresource equivalent match and name match / miss
    let r = attrs(
        gvk("autoscaling", "v1", "Scale"),
        gvr("extensions", "v1beta1", "deployments"),
        "scale",
    );
    let apps_v1 = rule(&["apps"], &["v1"], &["deployments", "deployments/scale"]);
    assert_eq!(
        run(
            &constraints(vec![named(apps_v1.clone(), &["name"])]),
            &r,
            &t
        ),
        Ok(as_(
            gvk("autoscaling", "v1", "Scale"),
            gvr("apps", "v1", "deployments")
        ))
    );
    assert_eq!(
        run(&constraints(vec![named(apps_v1, &["wrong-name"])]), &r, &t),
        Ok(None)
    );
}

#[test]
fn upstream_exclude_rules() {
    let t = upstream_mapper();
    let all = vec![rule(&["*"], &["*"], &["*"])];
    let ext = rule(&["extensions"], &["v1beta1"], &["deployments"]);
    // exclude resource match on miss
    let r = attrs(
        gvk("autoscaling", "v1", "Scale"),
        gvr("apps", "v1", "deployments"),
        "",
    );
    let c = exact(exclude(constraints(all.clone()), vec![ext.clone()]));
    assert_eq!(run(&c, &r, &t), Ok(exact_match(&r)));
    // exclude resource miss on match
    let r = attrs(
        gvk("autoscaling", "v1", "Scale"),
        gvr("extensions", "v1beta1", "deployments"),
        "",
    );
    assert_eq!(run(&c, &r, &t), Ok(None));
    // exclude resource with name match / miss
    let r = deployment();
    let apps_v1 = rule(&["apps"], &["v1"], &["deployments"]);
    let c = exclude(
        constraints(all.clone()),
        vec![named(apps_v1.clone(), &["name"])],
    );
    assert_eq!(run(&c, &r, &t), Ok(None));
    let c = exclude(
        constraints(all.clone()),
        vec![named(apps_v1, &["other-name"])],
    );
    assert_eq!(run(&c, &r, &t), Ok(exact_match(&r)));
    // exclude equivalent resource match / with name miss
    let c = exclude(constraints(all.clone()), vec![ext.clone()]);
    assert_eq!(run(&c, &r, &t), Ok(None));
    let c = exclude(constraints(all), vec![named(ext, &["other-name"])]);
    assert_eq!(run(&c, &r, &t), Ok(exact_match(&r)));
}

#[test]
fn upstream_empty_resource_rules() {
    let t = upstream_mapper();
    let r = attrs(
        gvk("autoscaling", "v1", "Scale"),
        gvr("apps", "v1", "deployments"),
        "",
    );
    // treat empty ResourceRules as match (what a binding without rules does);
    // upstream leaves matchPolicy unset there, which matches exactly.
    let c = exclude(
        constraints(vec![]),
        vec![rule(&["extensions"], &["v1beta1"], &["deployments"])],
    );
    assert_eq!(run(&exact(c.clone()), &r, &t), Ok(exact_match(&r)));
    // With Equivalent the exclusion reaches extensions/v1beta1.
    assert_eq!(run(&c, &r, &t), Ok(None));
    // treat non-empty ResourceRules as no match: one empty rule
    assert_eq!(
        run(&constraints(vec![NamedRule::default()]), &r, &t),
        Ok(None)
    );
}

#[test]
fn upstream_unknown_equivalent_kind_errors() {
    // "unable to convert to %v: unknown kind" for a registered kind-less equivalent.
    let t = upstream_mapper();
    let r = attrs(
        gvk("example.com", "v2", "Widget"),
        gvr("example.com", "v2", "widgets"),
        "",
    );
    let e = run(
        &constraints(vec![rule(&["example.com"], &["v1"], &["widgets"])]),
        &r,
        &t,
    )
    .unwrap_err();
    assert_eq!(
        e,
        MatchError::UnknownKind(gvr("example.com", "v1", "widgets"))
    );
    assert_eq!(
        e.to_string(),
        "unable to convert to example.com/v1, Resource=widgets: unknown kind"
    );
}

#[test]
fn upstream_erroring_selectors_only_error_when_rules_match() {
    let t = ResourceTable::builtin();
    let pod = attrs(gvk("", "v1", "Pod"), gvr("", "v1", "pods"), "");
    let bad = LabelSelector {
        match_labels: Default::default(),
        match_expressions: vec![LabelSelectorRequirement {
            key: "key".into(),
            operator: SelectorOperator::In,
            values: strs(&["bad value"]),
        }],
    };
    let cluster = ClusterObjects::new(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
    ]);
    for ns_side in [true, false] {
        let mk = |resources: &[&str]| {
            let mut c = constraints(vec![rule(&["*"], &["*"], resources)]);
            if ns_side {
                c.namespace_selector = bad.clone();
            } else {
                c.object_selector = bad.clone();
            }
            c
        };
        assert_eq!(run_in(&mk(&["deployments"]), &pod, &cluster, &t), Ok(None));
        let e = run_in(&mk(&["pods"]), &pod, &cluster, &t).unwrap_err();
        assert!(matches!(e, MatchError::InvalidSelector(_)));
        assert!(e.to_string().contains("bad value"), "{e}");
    }
}

// --- rules.go --------------------------------------------------------------

fn pod_sub(sub: &str) -> AdmissionRequest {
    let mut r = attrs(gvk("", "v1", "Pod"), gvr("", "v1", "pods"), sub);
    r.operation = "UPDATE".into();
    r
}

#[test]
fn resource_wildcards_and_subresources() {
    // rules.go resource(): "res/sub" split once; "*" matches any resource but
    // only the main one (sub ""), "*/*" anything, "pods/*" pods and any of its
    // subresources.
    let t = ResourceTable::builtin();
    let cases: &[(&str, &str, bool)] = &[
        ("*", "", true),
        ("*", "status", false),
        ("*/*", "", true),
        ("*/*", "status", true),
        ("pods", "", true),
        ("pods", "status", false),
        ("pods/*", "status", true),
        // sub "*" also matches the main resource (sub == "*" || sub == opSub)
        ("pods/*", "", true),
        ("pods/status", "status", true),
        ("pods/status", "", false),
        ("pods/status", "ephemeralcontainers", false),
        ("*/status", "status", true),
        ("*/status", "resize", false),
        ("*/status", "", false),
        ("deployments", "", false),
        ("deployments/status", "status", false),
    ];
    for (res, sub, want) in cases {
        let r = pod_sub(sub);
        let got = run(&constraints(vec![rule(&[""], &["v1"], &[res])]), &r, &t).unwrap();
        assert_eq!(got.is_some(), *want, "rule {res} vs pods/{sub}");
    }
}

#[test]
fn groups_versions_and_operations() {
    let t = ResourceTable::builtin();
    let r = deployment();
    let check =
        |c: MatchResources, want: bool| assert_eq!(run(&exact(c), &r, &t).unwrap().is_some(), want);
    check(
        constraints(vec![rule(&["apps"], &["*"], &["deployments"])]),
        true,
    );
    check(
        constraints(vec![rule(&["*"], &["v1"], &["deployments"])]),
        true,
    );
    check(
        constraints(vec![rule(&[""], &["v1"], &["deployments"])]),
        false,
    );
    check(
        constraints(vec![rule(&["apps"], &["v1beta1"], &["deployments"])]),
        false,
    );
    check(
        constraints(vec![rule(&[], &["v1"], &["deployments"])]),
        false,
    );
    check(
        constraints(vec![ops(
            rule(&["apps"], &["v1"], &["deployments"]),
            &["CREATE"],
        )]),
        true,
    );
    check(
        constraints(vec![ops(
            rule(&["apps"], &["v1"], &["deployments"]),
            &["UPDATE", "CONNECT"],
        )]),
        false,
    );
    check(
        constraints(vec![ops(rule(&["apps"], &["v1"], &["deployments"]), &[])]),
        false,
    );
    let mut u = deployment();
    u.operation = "UPDATE".into();
    let c = constraints(vec![ops(
        rule(&["apps"], &["v1"], &["deployments"]),
        &["UPDATE"],
    )]);
    assert!(run(&c, &u, &t).unwrap().is_some());
}

#[test]
fn delete_and_exempt_resources_never_match() {
    let t = ResourceTable::builtin();
    let c = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    let mut r = deployment();
    r.operation = "DELETE".into();
    assert_eq!(run(&c, &r, &t), Ok(None));
    let mut r = attrs(
        gvk(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingAdmissionPolicy",
        ),
        gvr(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingadmissionpolicies",
        ),
        "",
    );
    r.namespace.clear();
    assert_eq!(run(&c, &r, &t), Ok(None));
    let mut r = attrs(
        gvk("kmutate.dev", "v1", "MutatingAdmissionPolicyBinding"),
        gvr("kmutate.dev", "v1", "mutatingadmissionpolicybindings"),
        "",
    );
    r.namespace.clear();
    assert_eq!(run(&c, &r, &t), Ok(None));
    let mut r = attrs(
        gvk("authentication.k8s.io", "v1", "TokenReview"),
        gvr("authentication.k8s.io", "v1", "tokenreviews"),
        "",
    );
    r.namespace.clear();
    assert_eq!(run(&c, &r, &t), Ok(None));
    // Webhook configurations are not exempt from policies.
    let mut r = attrs(
        gvk(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
        ),
        gvr(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
        ),
        "",
    );
    r.namespace.clear();
    assert!(run(&c, &r, &t).unwrap().is_some());
    // CONNECT is dispatched.
    let mut r = pod_sub("exec");
    r.operation = "CONNECT".into();
    r.kind = gvk("", "v1", "PodExecOptions");
    assert!(run(
        &constraints(vec![rule(&[""], &["v1"], &["pods/exec"])]),
        &r,
        &t
    )
    .unwrap()
    .is_some());
}

#[test]
fn rule_scope() {
    // rules.go scope(): Namespaced needs a namespace and not the namespaces
    // resource; Cluster takes namespaces or no namespace.
    let t = ResourceTable::builtin();
    let pod = deployment();
    let mut role = attrs(
        gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        gvr("rbac.authorization.k8s.io", "v1", "clusterroles"),
        "",
    );
    role.namespace.clear();
    // A Namespace request carries its own name as namespace.
    let mut ns = attrs(gvk("", "v1", "Namespace"), gvr("", "v1", "namespaces"), "");
    ns.name = "team".into();
    ns.namespace = "team".into();
    ns.object =
        Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}));
    let c = |s| constraints(vec![scoped(rule(&["*"], &["*"], &["*"]), s)]);
    for (req, all, namespaced, cluster) in [
        (&pod, true, true, false),
        (&role, true, false, true),
        (&ns, true, false, true),
    ] {
        assert_eq!(run(&c(RuleScope::All), req, &t).unwrap().is_some(), all);
        assert_eq!(
            run(&c(RuleScope::Namespaced), req, &t).unwrap().is_some(),
            namespaced
        );
        assert_eq!(
            run(&c(RuleScope::Cluster), req, &t).unwrap().is_some(),
            cluster
        );
    }
}

// --- namespace selector ---------------------------------------------------

fn ns_obj(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

#[test]
fn namespace_selector_uses_the_request_namespace() {
    let t = ResourceTable::builtin();
    let cluster = ClusterObjects::new(vec![ns_obj("ns", json!({"env": "prod"}))]);
    let mut c = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    c.namespace_selector = selector(&[("env", "prod")]);
    let r = deployment();
    assert!(run_in(&c, &r, &cluster, &t).unwrap().is_some());
    c.namespace_selector = selector(&[("env", "dev")]);
    assert_eq!(run_in(&c, &r, &cluster, &t), Ok(None));
    // Every Namespace carries kubernetes.io/metadata.name.
    c.namespace_selector = selector(&[(NAMESPACE_NAME_LABEL, "ns")]);
    assert!(run_in(&c, &r, &cluster, &t).unwrap().is_some());
}

// `reads_object` says when `matches` may answer (or fail) differently for
// another object: for each constraint, two objects that differ only in
// their labels (and a missing namespace, whose error an object selector
// hides) must match alike whenever it says no, and do not when it says yes.
#[test]
fn matching_reads_the_object_only_where_reads_object_says() {
    let t = ResourceTable::builtin();
    let cluster = ClusterObjects::new(vec![ns_obj("ns", json!({"env": "prod"}))]);
    let object = |kind: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": "ns", "namespace": "ns", "labels": labels}})
    };
    let with = |mut r: AdmissionRequest, namespace: &str, o: Value| {
        r.namespace = namespace.into();
        r.object = Some(o);
        r
    };
    let pod = attrs(gvk("", "v1", "Pod"), gvr("", "v1", "pods"), "");
    let mut namespace = attrs(gvk("", "v1", "Namespace"), gvr("", "v1", "namespaces"), "");
    namespace.namespace.clear();
    let everything = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    let mut by_object = everything.clone();
    by_object.object_selector = selector(&[("env", "prod")]);
    let mut by_namespace = everything.clone();
    by_namespace.namespace_selector = selector(&[("env", "prod")]);
    let mut by_both = by_object.clone();
    by_both.namespace_selector = selector(&[("env", "prod")]);
    let cases = [
        (&everything, &pod, "ns", false),
        (&by_object, &pod, "ns", true),
        (&by_namespace, &pod, "ns", false),
        (&by_namespace, &pod, "missing", false),
        (&by_both, &pod, "missing", true),
        (&everything, &namespace, "", false),
        (&by_object, &namespace, "", true),
        (&by_namespace, &namespace, "", true),
    ];
    for (c, r, ns, reads) in cases {
        let kind = &r.kind.kind;
        let prod = with(r.clone(), ns, object(kind, json!({"env": "prod"})));
        let dev = with(r.clone(), ns, object(kind, json!({"env": "dev"})));
        assert_eq!(reads_object(c, &prod), reads, "{c:?} {kind} {ns}");
        let alike = run_in(c, &prod, &cluster, &t) == run_in(c, &dev, &cluster, &t);
        assert_eq!(alike, !reads, "{c:?} {kind} {ns}");
    }
}

#[test]
fn namespace_not_found_is_an_error_only_when_rules_match() {
    // namespace/matcher.go: a missing namespace is a 404 error; matching.go
    // returns it only once the rules matched.
    let t = ResourceTable::builtin();
    let mut r = deployment();
    r.namespace = "missing".into();
    let mut c = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    c.namespace_selector = selector(&[("env", "prod")]);
    let e = run_in(&c, &r, &ClusterObjects::default(), &t).unwrap_err();
    assert_eq!(e, MatchError::NamespaceNotFound("missing".into()));
    assert_eq!(e.to_string(), r#"namespaces "missing" not found"#);
    let mut c2 = constraints(vec![rule(&["batch"], &["*"], &["jobs"])]);
    c2.namespace_selector = selector(&[("env", "prod")]);
    assert_eq!(run_in(&c2, &r, &ClusterObjects::default(), &t), Ok(None));
    // An empty selector never looks the namespace up.
    let c3 = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    assert!(run_in(&c3, &r, &ClusterObjects::default(), &t)
        .unwrap()
        .is_some());
    // System namespaces exist even when the case does not list them.
    r.namespace = "default".into();
    let mut c4 = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    c4.namespace_selector = selector(&[(NAMESPACE_NAME_LABEL, "default")]);
    assert!(run_in(&c4, &r, &ClusterObjects::default(), &t)
        .unwrap()
        .is_some());
}

#[test]
fn namespace_selector_never_excludes_cluster_scoped_objects() {
    // namespace/matcher.go: "If the request is about a cluster scoped resource,
    // and it is not a namespace, it is never exempted."
    let t = ResourceTable::builtin();
    let mut r = attrs(
        gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        gvr("rbac.authorization.k8s.io", "v1", "clusterroles"),
        "",
    );
    r.namespace.clear();
    let mut c = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    c.namespace_selector = selector(&[("never", "there")]);
    assert!(run_in(&c, &r, &ClusterObjects::default(), &t)
        .unwrap()
        .is_some());
}

#[test]
fn namespace_selector_on_namespace_objects_uses_their_own_labels() {
    // namespace/matcher.go GetNamespaceLabels: CREATE/UPDATE of namespaces
    // (no subresource) reads the object's labels, not the stored Namespace.
    let t = ResourceTable::builtin();
    let cluster = ClusterObjects::new(vec![ns_obj("team", json!({"env": "old"}))]);
    let mut r = attrs(gvk("", "v1", "Namespace"), gvr("", "v1", "namespaces"), "");
    r.name = "team".into();
    r.namespace = "team".into();
    r.operation = "UPDATE".into();
    r.object = Some(ns_obj("team", json!({"env": "new"})));
    r.old_object = Some(ns_obj("team", json!({"env": "old"})));
    let mut c = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    c.namespace_selector = selector(&[("env", "new")]);
    assert!(run_in(&c, &r, &cluster, &t).unwrap().is_some());
    c.namespace_selector = selector(&[("env", "old")]);
    assert_eq!(run_in(&c, &r, &cluster, &t), Ok(None));
    // CREATE of a namespace the cluster does not hold yet: its labels as
    // given (the own-name label is the apiserver's defaulting, upstream's
    // matcher does not add it).
    r.operation = "CREATE".into();
    r.old_object = None;
    c.namespace_selector = selector(&[("env", "new"), (NAMESPACE_NAME_LABEL, "team")]);
    assert_eq!(run_in(&c, &r, &ClusterObjects::default(), &t), Ok(None));
    r.object = Some(ns_obj(
        "team",
        json!({"env": "new", NAMESPACE_NAME_LABEL: "team"}),
    ));
    assert!(run_in(&c, &r, &ClusterObjects::default(), &t)
        .unwrap()
        .is_some());
    // namespaces/status reads the stored Namespace.
    r.operation = "UPDATE".into();
    r.sub_resource = "status".into();
    c = constraints(vec![rule(&["*"], &["*"], &["*/*"])]);
    c.namespace_selector = selector(&[("env", "old")]);
    assert!(run_in(&c, &r, &cluster, &t).unwrap().is_some());
    // No object to read: an internal error.
    r.sub_resource.clear();
    r.object = None;
    c = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    c.namespace_selector = selector(&[("env", "new")]);
    assert_eq!(
        run_in(&c, &r, &cluster, &t),
        Err(MatchError::MissingNamespaceObject)
    );
}

// --- object selector -------------------------------------------------------

#[test]
fn object_selector_matches_new_or_old_object() {
    // object/matcher.go: matchObject(new) || matchObject(old).
    let t = ResourceTable::builtin();
    let pod = |labels: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "name", "labels": labels}});
    let mut r = attrs(gvk("", "v1", "Pod"), gvr("", "v1", "pods"), "");
    r.namespace.clear(); // avoid the namespace lookup; selector is on objects only
    r.operation = "UPDATE".into();
    r.object = Some(pod(json!({"app": "new"})));
    r.old_object = Some(pod(json!({"app": "web"})));
    let mut c = constraints(vec![rule(&["*"], &["*"], &["*"])]);
    c.object_selector = selector(&[("app", "web")]);
    // Only the old object matches: still a match.
    assert!(run(&c, &r, &t).unwrap().is_some());
    c.object_selector = selector(&[("app", "new")]);
    assert!(run(&c, &r, &t).unwrap().is_some());
    c.object_selector = selector(&[("app", "other")]);
    assert_eq!(run(&c, &r, &t), Ok(None));
    // No object: no labels to match.
    r.object = None;
    r.old_object = None;
    c.object_selector = LabelSelector {
        match_labels: Default::default(),
        match_expressions: vec![LabelSelectorRequirement {
            key: "app".into(),
            operator: SelectorOperator::DoesNotExist,
            values: vec![],
        }],
    };
    assert_eq!(run(&c, &r, &t), Ok(None));
    // An options object (CONNECT) has no metadata to read.
    r.operation = "CONNECT".into();
    r.sub_resource = "exec".into();
    r.object = Some(json!({"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"]}));
    c.resource_rules = vec![rule(&["*"], &["*"], &["*/*"])];
    assert_eq!(run(&c, &r, &t), Ok(None));
    // A plain object without labels matches DoesNotExist.
    r.operation = "CREATE".into();
    r.sub_resource.clear();
    r.object = Some(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}));
    assert!(run(&c, &r, &t).unwrap().is_some());
}

// --- match policy with a two-version CRD ------------------------------------

fn widget_cluster() -> ClusterObjects {
    ClusterObjects::new(vec![json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                {"name": "v2", "served": true, "storage": false, "subresources": {"status": {}}}
            ]
        }
    })])
}

#[test]
fn exact_vs_equivalent_with_a_two_version_crd() {
    let cluster = widget_cluster();
    let t = ResourceTable::new(cluster.crds());
    let r = attrs(
        gvk("example.com", "v2", "Widget"),
        gvr("example.com", "v2", "widgets"),
        "",
    );
    let v1_rule = rule(&["example.com"], &["v1"], &["widgets"]);
    // Exact: only v2 would do.
    assert_eq!(
        run_in(&exact(constraints(vec![v1_rule.clone()])), &r, &cluster, &t),
        Ok(None)
    );
    // Equivalent: matched as v1, to be converted.
    assert_eq!(
        run_in(&constraints(vec![v1_rule.clone()]), &r, &cluster, &t),
        Ok(as_(
            gvk("example.com", "v1", "Widget"),
            gvr("example.com", "v1", "widgets")
        ))
    );
    // A rule for the requested version matches exactly either way.
    let v2_rule = rule(&["example.com"], &["v2"], &["widgets"]);
    assert_eq!(
        run_in(&exact(constraints(vec![v2_rule])), &r, &cluster, &t),
        Ok(exact_match(&r))
    );
    // Subresources convert too (status exists in both versions).
    let s = attrs(
        gvk("example.com", "v2", "Widget"),
        gvr("example.com", "v2", "widgets"),
        "status",
    );
    assert_eq!(
        run_in(
            &constraints(vec![rule(&["example.com"], &["v1"], &["widgets/status"])]),
            &s,
            &cluster,
            &t
        ),
        Ok(as_(
            gvk("example.com", "v1", "Widget"),
            gvr("example.com", "v1", "widgets")
        ))
    );
    // The table need not know the CRD: it is looked up in the cluster.
    assert_eq!(
        run_in(
            &constraints(vec![v1_rule.clone()]),
            &r,
            &cluster,
            &ResourceTable::builtin()
        ),
        Ok(as_(
            gvk("example.com", "v1", "Widget"),
            gvr("example.com", "v1", "widgets")
        ))
    );
    // Exclusion works across versions too.
    let c = exclude(
        constraints(vec![rule(&["*"], &["*"], &["*"])]),
        vec![v1_rule],
    );
    assert_eq!(run_in(&c, &r, &cluster, &t), Ok(None));
}

#[test]
fn builtin_equivalents() {
    let t = ResourceTable::builtin();
    let cluster = ClusterObjects::new(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}),
    ]);
    // autoscaling/v2 HPA request, rule for v1.
    let r = attrs(
        gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
        gvr("autoscaling", "v2", "horizontalpodautoscalers"),
        "",
    );
    assert_eq!(
        run_in(
            &constraints(vec![rule(
                &["autoscaling"],
                &["v1"],
                &["horizontalpodautoscalers"]
            )]),
            &r,
            &cluster,
            &t
        ),
        Ok(as_(
            gvk("autoscaling", "v1", "HorizontalPodAutoscaler"),
            gvr("autoscaling", "v1", "horizontalpodautoscalers")
        ))
    );
    // core events request, rule for events.k8s.io.
    let r = attrs(gvk("", "v1", "Event"), gvr("", "v1", "events"), "");
    assert_eq!(
        run_in(
            &constraints(vec![rule(&["events.k8s.io"], &["*"], &["events"])]),
            &r,
            &cluster,
            &t
        ),
        Ok(as_(
            gvk("events.k8s.io", "v1", "Event"),
            gvr("events.k8s.io", "v1", "events")
        ))
    );
    // Not equivalent: pods in another group.
    let r = attrs(gvk("", "v1", "Pod"), gvr("", "v1", "pods"), "");
    assert_eq!(
        run_in(
            &constraints(vec![rule(&["apps"], &["*"], &["pods"])]),
            &r,
            &cluster,
            &t
        ),
        Ok(None)
    );
}

#[test]
fn binding_without_rules_matches_everything_selected() {
    let t = ResourceTable::builtin();
    let cluster = ClusterObjects::new(vec![ns_obj("ns", json!({"team": "a"}))]);
    let r = deployment();
    assert_eq!(
        run_in(&MatchResources::default(), &r, &cluster, &t),
        Ok(exact_match(&r))
    );
    let c = MatchResources {
        namespace_selector: selector(&[("team", "b")]),
        ..Default::default()
    };
    assert_eq!(run_in(&c, &r, &cluster, &t), Ok(None));
}

#[test]
fn generated_names_only_match_rules_without_names() {
    let t = ResourceTable::builtin();
    let mut r = deployment();
    r.name.clear();
    let c = constraints(vec![named(
        rule(&["apps"], &["v1"], &["deployments"]),
        &["x"],
    )]);
    assert_eq!(run(&c, &r, &t), Ok(None));
    let c = constraints(vec![rule(&["apps"], &["v1"], &["deployments"])]);
    assert!(run(&c, &r, &t).unwrap().is_some());
}

#[test]
fn namespace_object_helper() {
    let cluster = ClusterObjects::new(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": 5}}),
    ]);
    let a = namespace_object(&cluster, "a").unwrap();
    assert_eq!(
        a.pointer("/metadata/labels/kubernetes.io~1metadata.name"),
        Some(&json!("a"))
    );
    let sys = namespace_object(&cluster, "kube-system").unwrap();
    assert_eq!(sys.pointer("/metadata/name"), Some(&json!("kube-system")));
    assert!(namespace_object(&cluster, "nope").is_none());
}
