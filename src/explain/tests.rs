//! Field paths against the built-in schemas (merge keys from the Kubernetes
//! OpenAPI `x-kubernetes-list-map-keys`), and explanations of admissions
//! through the dispatcher.

use super::*;
use crate::api::load::{parse_documents, Loaded};
use crate::api::SourceRef;
use crate::authorizer::AlwaysDeny;
use crate::dispatch::{AdmissionContext, PolicySet};
use crate::matching::{complete_request, ResourceTable};
use crate::request::{AdmissionRequest, ClusterObjects};
use crate::schema::SchemaStore;
use serde_json::json;

fn yaml(text: &str) -> Json {
    parse_documents(text).expect("test YAML").remove(0)
}

fn paths(changes: &[FieldChange]) -> Vec<String> {
    changes.iter().map(FieldChange::text).collect()
}

fn pod_schema() -> TypeRef {
    crate::schema::builtin_type("", "v1", "Pod")
}

#[test]
fn containers_are_named_by_their_merge_key() {
    let before = yaml("spec: {containers: [{name: shell, image: busybox}, {name: app, image: nginx, imagePullPolicy: IfNotPresent}]}");
    let after = yaml("spec: {containers: [{name: shell, image: busybox}, {name: app, image: nginx, imagePullPolicy: Always}]}");
    let changes = field_changes(&before, &after, Some(&pod_schema()));
    assert_eq!(
        paths(&changes),
        [r#"spec.containers[name=app].imagePullPolicy: "IfNotPresent" -> "Always""#]
    );
}

#[test]
fn ports_use_both_keys_and_lists_without_keys_use_indices() {
    let before = yaml(
        "spec: {containers: [{name: app, args: [a, b], ports: [{containerPort: 80, protocol: TCP}]}]}",
    );
    let after = yaml("spec: {containers: [{name: app, args: [a, c, d], ports: [{containerPort: 80, protocol: TCP, name: http}, {containerPort: 53, protocol: UDP}]}]}");
    let changes = field_changes(&before, &after, Some(&pod_schema()));
    assert_eq!(
        paths(&changes),
        [
            r#"spec.containers[name=app].args[1]: "b" -> "c""#,
            r#"spec.containers[name=app].args[2]: added "d""#,
            r#"spec.containers[name=app].ports[containerPort=80,protocol=TCP].name: added "http""#,
            r#"spec.containers[name=app].ports[containerPort=53,protocol=UDP]: added {"containerPort":53,"protocol":"UDP"}"#,
        ]
    );
}

#[test]
fn map_keys_that_are_not_identifiers_are_quoted_and_removals_reported() {
    let before = yaml("metadata: {labels: {team: a}, annotations: {note: x}}");
    let after = yaml("metadata: {labels: {team: a, app.kubernetes.io/name: web}}");
    let changes = field_changes(&before, &after, Some(&pod_schema()));
    assert_eq!(
        paths(&changes),
        [
            r#"metadata.annotations.note: removed "x""#,
            r#"metadata.labels["app.kubernetes.io/name"]: added "web""#,
        ]
    );
}

#[test]
fn without_a_schema_lists_are_compared_by_index() {
    let before = json!({"items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}]});
    let after = json!({"items": [{"name": "b", "v": 2}]});
    let changes = field_changes(&before, &after, None);
    assert_eq!(
        paths(&changes),
        [
            r#"items[0].name: "a" -> "b""#,
            r#"items[0].v: 1 -> 2"#,
            r#"items[1]: removed {"name":"b","v":2}"#,
        ]
    );
}

/// Runs an admission of `object` (CREATE) through `docs` and explains it.
fn explain(docs: &str, object: &str) -> Explanation {
    let mut loaded = Loaded::default();
    for (i, doc) in parse_documents(docs)
        .expect("test YAML")
        .into_iter()
        .enumerate()
    {
        loaded.add_document(
            doc,
            SourceRef {
                file: "test".into(),
                document: i,
            },
        );
    }
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let object = yaml(object);
    let cluster = ClusterObjects::new(loaded.resources.clone());
    let table = ResourceTable::new(cluster.crds());
    let schemas = SchemaStore::with_crds(cluster.crds());
    let mut request = AdmissionRequest {
        operation: "CREATE".into(),
        object: Some(object.clone()),
        ..Default::default()
    };
    complete_request(&mut request, &table);
    let observer = ExplainObserver::new(&loaded.policies, &loaded.bindings);
    let (set, errors) = PolicySet::new(loaded.policies, loaded.bindings);
    assert!(errors.is_empty(), "{errors:?}");
    let ctx = AdmissionContext {
        cluster: &cluster,
        schemas: &schemas,
        resources: &table,
        authorizer: &AlwaysDeny,
    };
    let outcome = set.admit_with(&request, &ctx, &observer);
    observer.finish(Vec::new(), &object, &outcome)
}

/// A policy on Pods and its binding (same name).
fn policy(name: &str, extra: &str, mutations: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}
{extra}
  mutations:
{mutations}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec: {{policyName: {name}}}
---
"#
    )
}

const POD: &str = "{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: default}, spec: {containers: [{name: app, image: nginx}]}}";

fn label(key: &str, value: &str) -> String {
    format!(
        r#"  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{{metadata: Object.metadata{{labels: {{"{key}": "{value}"}}}}}}'"#
    )
}

#[test]
fn explains_changes_skips_and_the_reinvocation_pass_in_dispatch_order() {
    let docs = [
        policy(
            "a-label",
            "  reinvocationPolicy: IfNeeded",
            &label("a", "1"),
        ),
        policy("b-label", "  reinvocationPolicy: Never", &label("b", "2")),
        policy(
            "c-skipped",
            "  matchConditions:\n  - {name: never, expression: 'false'}",
            &label("c", "3"),
        ),
        policy("d-not-matched", "", &label("d", "4"))
            .replace("resources: [pods]", "resources: [services]"),
    ]
    .concat();
    let e = explain(&docs, POD);
    let text = e.to_text();
    assert_eq!(
        text,
        r#"pass 1:
  policy a-label, binding a-label
    spec.mutations[0] (ApplyConfiguration):
      metadata.labels.a: added "1"
  policy b-label, binding b-label
    spec.mutations[0] (ApplyConfiguration):
      metadata.labels.b: added "2"
  policy c-skipped, binding c-skipped: skipped, match condition "never" is false
reinvocation pass (policies with reinvocationPolicy IfNeeded, after later ones changed the object):
  policy a-label, binding a-label
    spec.mutations[0] (ApplyConfiguration): no change
not matched:
  policy d-not-matched, binding d-not-matched
result: admitted, mutated
"#,
        "{text}"
    );
}

#[test]
fn errors_carry_their_failure_policy_and_the_denial_ends_the_report() {
    let failing = r#"  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "replace", path: "/missing/x", value: 1}]'"#;
    // A runtime error: the Pod has no spec.nodeName.
    let no_such_key = r#"  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{spec: Object.spec{nodeName: object.spec.nodeName + "-x"}}'"#;
    let docs = [
        policy("a-ignored", "  failurePolicy: Ignore", failing),
        policy(
            "b-param",
            "  paramKind: {apiVersion: v1, kind: ConfigMap}",
            &label("b", "2"),
        )
        .replace(
            "spec: {policyName: b-param}",
            "spec: {policyName: b-param, paramRef: {name: missing, parameterNotFoundAction: Allow}}",
        ),
        policy("c-denied", "  failurePolicy: Fail", no_such_key),
    ]
    .concat();
    let e = explain(&docs, POD);
    let Verdict::Denied { code, message } = &e.outcome else {
        panic!("not denied: {e:?}");
    };
    assert_eq!(*code, 403);
    assert!(
        message.starts_with("policy 'c-denied' with binding 'c-denied' denied request: "),
        "{message}"
    );
    let pass = &e.passes[0];
    assert_eq!(pass.invocations.len(), 3, "{e:?}");
    let ignored = pass.invocations[0].mutations[0]
        .error
        .as_ref()
        .expect("error");
    assert_eq!(ignored.failure_policy, "Ignore");
    assert_eq!(pass.invocations[1].skipped, Some(Skip::ParamNotFound));
    let denied = pass.invocations[2].mutations[0]
        .error
        .as_ref()
        .expect("error");
    assert_eq!(denied.failure_policy, "Fail");
    assert!(message.ends_with(&denied.message), "{message} / {denied:?}");
    let text = e.to_text();
    assert!(
        text.contains("  policy b-param, binding b-param: skipped, no param found (parameterNotFoundAction Allow)\n"),
        "{text}"
    );
    assert!(text.contains("(failurePolicy Ignore, ignored): "), "{text}");
}

#[test]
fn binding_errors_and_match_condition_errors_are_reported_once() {
    let docs = [
        policy(
            "a-condition",
            "  failurePolicy: Ignore\n  matchConditions:\n  - {name: broken, expression: 'object.spec.nodeName == \"x\"'}",
            &label("a", "1"),
        ),
        policy(
            "b-deny",
            "  failurePolicy: Ignore\n  paramKind: {apiVersion: v1, kind: ConfigMap}",
            &label("b", "2"),
        )
        .replace(
            "spec: {policyName: b-deny}",
            "spec: {policyName: b-deny, paramRef: {name: missing, parameterNotFoundAction: Deny}}",
        ),
    ]
    .concat();
    let e = explain(&docs, POD);
    assert_eq!(e.outcome, Verdict::Admitted { changed: false });
    let pass = &e.passes[0];
    assert_eq!(pass.invocations.len(), 2, "{e:?}");
    let Some(Skip::ConditionError { error }) = &pass.invocations[0].skipped else {
        panic!("no condition error: {e:?}");
    };
    assert_eq!(error.failure_policy, "Ignore");
    assert!(error.message.contains("nodeName"), "{error:?}");
    // Upstream's message for a missing param under Deny (CollectParams).
    assert_eq!(
        pass.invocations[1].errors,
        [PolicyError {
            message: "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction".into(),
            failure_policy: "Ignore",
            ended_admission: false,
        }]
    );
}

#[test]
fn each_param_object_is_its_own_invocation() {
    let docs = policy(
        "a-params",
        "  paramKind: {apiVersion: v1, kind: ConfigMap}",
        r#"  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {params.metadata.name: params.data.v}}}'"#,
    )
    .replace(
        "spec: {policyName: a-params}",
        "spec: {policyName: a-params, paramRef: {namespace: default, selector: {matchLabels: {use: \"yes\"}}, parameterNotFoundAction: Deny}}",
    ) + r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: one, namespace: default, labels: {use: "yes"}}
data: {v: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: two, namespace: default, labels: {use: "yes"}}
data: {v: "2"}
"#;
    let e = explain(&docs, POD);
    let text = e.to_text();
    assert!(
        text.starts_with(
            r#"pass 1:
  policy a-params, binding a-params, param default/one
    spec.mutations[0] (ApplyConfiguration):
      metadata.labels.one: added "1"
  policy a-params, binding a-params, param default/two
    spec.mutations[0] (ApplyConfiguration):
      metadata.labels.two: added "2"
"#
        ),
        "{text}"
    );
}

#[test]
fn a_status_error_leaves_later_bindings_not_reached() {
    // Upstream: a JSON patch adding a field the schema does not declare fails
    // strict decoding with a 500 status, which ends the admission whatever
    // the failure policy.
    let unknown_field = r#"  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/spec/bogus", value: 1}]'"#;
    let docs = [
        policy("a-first", "", &label("a", "1")),
        policy("b-unknown-field", "  failurePolicy: Ignore", unknown_field),
        policy("c-later", "", &label("c", "3")),
        policy("d-services", "", &label("d", "4"))
            .replace("resources: [pods]", "resources: [services]"),
    ]
    .concat();
    let e = explain(&docs, POD);
    assert_eq!(
        e.outcome,
        Verdict::Denied {
            code: 500,
            message:
                r#"Internal error occurred: strict decoding error: unknown field "spec.bogus""#
                    .into()
        }
    );
    let names =
        |list: &[BindingName]| -> Vec<String> { list.iter().map(|b| b.binding.clone()).collect() };
    assert_eq!(names(&e.not_reached), ["c-later", "d-services"]);
    assert_eq!(names(&e.not_matched), Vec::<String>::new());
    let text = e.to_text();
    assert!(
        text.contains(
            "not reached (the admission ended before them):\n  policy c-later, binding c-later\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("    spec.mutations[0] (JSONPatch): error (ends the admission whatever the failurePolicy): Internal error occurred: "),
        "{text}"
    );
}

#[test]
fn a_monitored_binding_is_told_apart_not_as_unmatched() {
    let resources = r#"  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", resources: Object.spec.containers.resources{limits: {"cpu": "1"}}}]}}'"#;
    let docs = [
        policy("a-applied", "", &label("a", "1")),
        policy("b-watched", "", resources).replace(
            "kind: MutatingAdmissionPolicyBinding\nmetadata: {name: b-watched}",
            "kind: MutatingAdmissionPolicyBinding\nmetadata: {name: b-watched, annotations: {kmutate.dev/mode: monitor}}",
        ),
    ]
    .concat();
    let e = explain(&docs, POD);
    assert_eq!(e.outcome, Verdict::Admitted { changed: true });
    assert!(e.not_matched.is_empty(), "{:?}", e.not_matched);
    assert_eq!(
        e.monitored,
        ["kmutate: policy b-watched (binding b-watched) would have set spec.containers[0].resources.limits.cpu (monitor mode: not applied)"]
    );
    let text = e.to_text();
    assert!(
        text.contains("monitored (changes not applied):\n  kmutate: policy b-watched"),
        "{text}"
    );
}
