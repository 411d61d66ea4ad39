//! The binding index is exact: over random resource rules on policies and
//! bindings (wildcards, subresources, excludes, scopes, matchPolicy,
//! operations) and random requests, the bindings a request's candidates
//! select are those a scan of every binding selects, in the same order.

use super::*;
use crate::api::{binding_from_json, policy_from_json, SourceRef};
use crate::matching::ResourceTable;
use crate::schema::SchemaStore;
use serde_json::json;

/// splitmix64: a small deterministic generator, so that a failing draw
/// can be found again from its number.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// One to `most` distinct items of `items`.
    fn some<T: Clone + PartialEq>(&mut self, items: &[T], most: usize) -> Vec<T> {
        let mut out = Vec::new();
        for _ in 0..1 + self.below(most) {
            let item = self.pick(items).clone();
            if !out.contains(&item) {
                out.push(item);
            }
        }
        out
    }
}

const GROUPS: &[&str] = &["", "apps", "extensions", "example.com", "*"];
const VERSIONS: &[&str] = &["v1", "v1beta1", "*"];
const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "CONNECT", "*"];
const RESOURCES: &[&str] = &[
    "pods",
    "pods/status",
    "pods/exec",
    "pods/*",
    "*",
    "*/*",
    "*/status",
    "*/scale",
    "deployments",
    "deployments/scale",
    "replicasets",
    "configmaps",
    "namespaces",
    "secrets",
    "widgets",
];
const SCOPES: &[Option<&str>] = &[None, Some("*"), Some("Cluster"), Some("Namespaced")];
const MATCH_POLICIES: &[Option<&str>] = &[None, Some("Exact"), Some("Equivalent")];

/// A request: group, version, resource, subresource, kind, namespaced.
pub(super) type RequestShape = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
);

const REQUESTS: &[RequestShape] = &[
    ("", "v1", "pods", "", "Pod", true),
    ("", "v1", "pods", "status", "Pod", true),
    ("", "v1", "pods", "exec", "PodExecOptions", true),
    ("apps", "v1", "deployments", "", "Deployment", true),
    ("apps", "v1", "deployments", "scale", "Scale", true),
    ("apps", "v1", "replicasets", "", "ReplicaSet", true),
    ("", "v1", "configmaps", "", "ConfigMap", true),
    ("", "v1", "namespaces", "", "Namespace", false),
    ("", "v1", "secrets", "", "Secret", true),
    ("example.com", "v1", "widgets", "", "Widget", true),
];

fn rules(draws: &mut Draws, most: usize) -> Vec<Json> {
    (0..draws.below(most + 1))
        .map(|_| {
            let mut rule = json!({
                "apiGroups": draws.some(GROUPS, 2),
                "apiVersions": draws.some(VERSIONS, 2),
                "operations": draws.some(OPERATIONS, 2),
                "resources": draws.some(RESOURCES, 2),
            });
            if let Some(scope) = draws.pick(SCOPES) {
                rule["scope"] = json!(scope);
            }
            rule
        })
        .collect()
}

fn match_resources(draws: &mut Draws) -> Json {
    let mut resources = json!({
        "resourceRules": rules(draws, 2),
        "excludeResourceRules": rules(draws, 1),
    });
    if let Some(policy) = draws.pick(MATCH_POLICIES) {
        resources["matchPolicy"] = json!(policy);
    }
    resources
}

/// A set of up to eight policies, each with one or two bindings that
/// may narrow it further.
fn policy_set(draws: &mut Draws) -> PolicySet {
    let mut policies = Vec::new();
    let mut bindings = Vec::new();
    for p in 0..1 + draws.below(8) {
        let doc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy", "metadata": {"name": format!("p{p}")},
            "spec": {"matchConstraints": match_resources(draws),
                "mutations": [{"patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": "Object{}"}}]}});
        policies.push(policy_from_json(&doc, SourceRef::default()).expect("valid policy"));
        for b in 0..1 + draws.below(2) {
            let mut spec = json!({"policyName": format!("p{p}")});
            if draws.below(2) == 0 {
                spec["matchResources"] = match_resources(draws);
            }
            let doc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": format!("p{p}-b{b}")}, "spec": spec});
            bindings.push(binding_from_json(&doc, SourceRef::default()).expect("valid binding"));
        }
    }
    let (set, errors) = PolicySet::new(policies, bindings);
    assert!(errors.is_empty(), "{errors:?}");
    set
}

fn request(draws: &mut Draws) -> AdmissionRequest {
    let shape = *draws.pick(REQUESTS);
    let operation = *draws.pick(&OPERATIONS[..4]);
    request_for(operation, shape)
}

/// A request of `operation` for a resource of `shape`, its object a
/// minimal one of the kind.
pub(super) fn request_for(operation: &str, shape: RequestShape) -> AdmissionRequest {
    let (group, version, resource, sub, kind, namespaced) = shape;
    let mut request = AdmissionRequest {
        operation: operation.into(),
        namespace: if namespaced {
            "default".into()
        } else {
            String::new()
        },
        sub_resource: sub.into(),
        object: Some(json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "x"}})),
        ..Default::default()
    };
    request.kind.group = group.into();
    request.kind.version = version.into();
    request.kind.kind = kind.into();
    request.resource.group = group.into();
    request.resource.version = version.into();
    request.resource.resource = resource.into();
    request
}

#[test]
fn indexed_and_unindexed_matching_select_the_same_bindings_in_order() {
    const SETS: usize = 400;
    const REQUESTS_PER_SET: usize = 250;
    let resources = ResourceTable::builtin();
    let cluster = ClusterObjects::default();
    let schemas = SchemaStore::builtin();
    let ctx = AdmissionContext {
        cluster: &cluster,
        schemas: &schemas,
        resources: &resources,
        authorizer: &crate::authorizer::AlwaysDeny,
    };
    let mut draws = Draws(0x006b_6d75_7461_7465);
    let (mut draws_made, mut selected, mut skipped) = (0usize, 0usize, 0usize);
    for set_number in 0..SETS {
        let set = policy_set(&mut draws);
        for _ in 0..REQUESTS_PER_SET {
            let request = request(&mut draws);
            let acts = |i: usize| {
                let (binding, pi) = &set.bindings[i];
                BindingMatch::of(&set.policies[*pi].policy, binding, &request, &ctx).acts()
            };
            let candidates = set.index.candidates(&request.resource.resource);
            let indexed: Vec<usize> = candidates.iter().copied().filter(|&i| acts(i)).collect();
            let scanned: Vec<usize> = (0..set.bindings.len()).filter(|&i| acts(i)).collect();
            assert_eq!(
                indexed,
                scanned,
                "set {set_number}: {} {}/{} {}/{} {}",
                request.operation,
                request.resource.group,
                request.resource.version,
                request.resource.resource,
                request.sub_resource,
                set.bindings
                    .iter()
                    .map(|(b, pi)| format!(
                        "{}: {:?} / {:?}",
                        b.name, set.policies[*pi].policy.match_constraints, b.match_resources
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            draws_made += 1;
            selected += scanned.len();
            skipped += set.bindings.len() - candidates.len();
        }
    }
    assert_eq!(draws_made, SETS * REQUESTS_PER_SET);
    // The draws must exercise both sides: bindings selected, and bindings
    // the index let the request skip.
    assert!(
        selected > draws_made / 10,
        "only {selected} bindings selected"
    );
    assert!(skipped > draws_made, "only {skipped} bindings skipped");
}
