//! The rules a MutatingWebhookConfiguration needs for kube-apiserver to
//! call kmutate for every request a loaded binding can match, and for
//! little else: the union over bindings of their policy's
//! `matchConstraints.resourceRules` intersected with the binding's own
//! `matchResources.resourceRules`, in as few rules as express it.
//!
//! What webhook rules cannot say is left out, so the rules match a
//! superset: resource names, `excludeResourceRules` and selectors are
//! decided by kmutate itself. Versions are always `*`: a request through a
//! version the rules did not name would reach kmutate converted by the
//! webhook's `matchPolicy: Equivalent`, so that a policy with `matchPolicy:
//! Exact` would see the version it names instead of the request's own;
//! sent in every version, each request comes as it was made, and kmutate
//! matches it as upstream does. Requests through an equivalent resource of
//! another group still need the configuration's `matchPolicy: Equivalent`.

use crate::api::{Binding, NamedRule, Policy, RuleScope};
use std::collections::{BTreeMap, BTreeSet};

/// The operations a mutating policy can act on (a DELETE has no object).
const MUTATING_OPERATIONS: [&str; 3] = ["CONNECT", "CREATE", "UPDATE"];

/// One rule of a webhook configuration (`RuleWithOperations`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookRule {
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `apiVersions`.
    pub api_versions: Vec<String>,
    /// `operations`.
    pub operations: Vec<String>,
    /// `resources`, with subresources.
    pub resources: Vec<String>,
    /// `scope`: `*`, `Cluster` or `Namespaced` (the API's default: `*`).
    #[serde(default = "any_scope")]
    pub scope: String,
}

fn any_scope() -> String {
    "*".into()
}

/// One request shape a rule allows: group, version, resource, operation,
/// scope (each possibly `*`).
type Atom = (String, String, String, String, &'static str);

/// The rules that send kmutate every request the bindings of `bindings`
/// (with their policy among `policies`) can match.
pub fn webhook_rules<'a>(
    policies: impl IntoIterator<Item = &'a Policy>,
    bindings: impl IntoIterator<Item = &'a Binding>,
) -> Vec<WebhookRule> {
    let policies: BTreeMap<&str, &Policy> =
        policies.into_iter().map(|p| (p.name.as_str(), p)).collect();
    let mut atoms = BTreeSet::new();
    for binding in bindings {
        let Some(policy) = policies.get(binding.policy_name.as_str()) else {
            continue;
        };
        let narrowing = binding
            .match_resources
            .as_ref()
            .map(|m| m.resource_rules.as_slice())
            .filter(|rules| !rules.is_empty());
        for rule in &policy.match_constraints.resource_rules {
            match narrowing {
                None => atoms.extend(atoms_of(rule)),
                Some(rules) => {
                    let own: BTreeSet<Atom> = atoms_of(rule).collect();
                    for narrow in rules {
                        for b in atoms_of(narrow) {
                            atoms.extend(own.iter().filter_map(|a| intersect(a, &b)));
                        }
                    }
                }
            }
        }
    }
    let atoms = atoms
        .into_iter()
        .map(|(g, _, r, o, s)| (g, "*".to_string(), r, o, s));
    merge(without_covered(atoms.collect()))
}

/// Whether every request `inner` sends is sent by `outer` too.
pub fn covers(outer: &[WebhookRule], inner: &[WebhookRule]) -> bool {
    let outer: Vec<Atom> = outer.iter().flat_map(atoms_of_webhook_rule).collect();
    inner
        .iter()
        .flat_map(atoms_of_webhook_rule)
        .all(|a| outer.iter().any(|b| intersect(&a, b).as_ref() == Some(&a)))
}

/// The requests both `rules` and `ceiling` send, as few rules.
pub fn within(rules: &[WebhookRule], ceiling: &[WebhookRule]) -> Vec<WebhookRule> {
    let ceiling: Vec<Atom> = ceiling.iter().flat_map(atoms_of_webhook_rule).collect();
    let atoms: BTreeSet<Atom> = rules
        .iter()
        .flat_map(atoms_of_webhook_rule)
        .flat_map(|a| ceiling.iter().filter_map(move |b| intersect(&a, b)))
        .collect();
    merge(without_covered(atoms))
}

/// The requests either `a` or `b` sends, as few rules.
pub fn union(a: &[WebhookRule], b: &[WebhookRule]) -> Vec<WebhookRule> {
    let atoms: BTreeSet<Atom> = a.iter().chain(b).flat_map(atoms_of_webhook_rule).collect();
    merge(without_covered(atoms))
}

/// Every (group, version, resource, operation, scope) a webhook rule
/// allows; an operation `*` stands for those a mutating policy can act on,
/// an unknown scope for none.
fn atoms_of_webhook_rule(rule: &WebhookRule) -> Vec<Atom> {
    let scope = match rule.scope.as_str() {
        "*" => "*",
        "Cluster" => "Cluster",
        "Namespaced" => "Namespaced",
        _ => return Vec::new(),
    };
    let operations = expand_operations(&rule.operations);
    let mut out = Vec::new();
    for g in &rule.api_groups {
        for v in &rule.api_versions {
            for r in &rule.resources {
                for o in &operations {
                    out.push((g.clone(), v.clone(), r.clone(), o.to_string(), scope));
                }
            }
        }
    }
    out
}

/// `operations` with `*` spelled out, those no mutating policy acts on left out.
fn expand_operations(operations: &[String]) -> Vec<&str> {
    if operations.iter().any(|o| o == "*") {
        MUTATING_OPERATIONS.to_vec()
    } else {
        operations
            .iter()
            .map(String::as_str)
            .filter(|o| MUTATING_OPERATIONS.contains(o))
            .collect()
    }
}

/// Every (group, version, resource, operation, scope) `rule` allows.
fn atoms_of(rule: &NamedRule) -> impl Iterator<Item = Atom> + '_ {
    let scope = match rule.scope {
        RuleScope::All => "*",
        RuleScope::Cluster => "Cluster",
        RuleScope::Namespaced => "Namespaced",
    };
    let operations = expand_operations(&rule.operations);
    rule.api_groups.iter().flat_map(move |g| {
        let operations = operations.clone();
        rule.api_versions.iter().flat_map(move |v| {
            let operations = operations.clone();
            rule.resources.iter().flat_map(move |r| {
                operations
                    .clone()
                    .into_iter()
                    .map(move |o| (g.clone(), v.clone(), r.clone(), o.to_string(), scope))
            })
        })
    })
}

/// What two name patterns (`*` or a name) both allow.
fn meet<'a>(a: &'a str, b: &'a str) -> Option<&'a str> {
    match (a, b) {
        ("*", x) | (x, "*") => Some(x),
        (x, y) if x == y => Some(x),
        _ => None,
    }
}

/// What two resource patterns (`pods`, `pods/status`, `*`, `*/*`,
/// `pods/*`, `*/scale`) both allow. As upstream's rule matcher has it, a
/// subresource `*` also allows the resource itself (`*/*` is everything,
/// `pods/*` pods and its subresources), while a bare resource allows no
/// subresource.
fn meet_resources(a: &str, b: &str) -> Option<String> {
    let split = |r: &str| match r.split_once('/') {
        Some((res, sub)) => (res.to_string(), sub.to_string()),
        None => (r.to_string(), String::new()),
    };
    let ((ra, sa), (rb, sb)) = (split(a), split(b));
    let resource = meet(&ra, &rb)?;
    match meet(&sa, &sb)? {
        "" => Some(resource.to_string()),
        sub => Some(format!("{resource}/{sub}")),
    }
}

fn meet_scope(a: &'static str, b: &'static str) -> Option<&'static str> {
    match (a, b) {
        ("*", x) | (x, "*") => Some(x),
        (x, y) if x == y => Some(x),
        _ => None,
    }
}

/// What two atoms both allow.
fn intersect(a: &Atom, b: &Atom) -> Option<Atom> {
    Some((
        meet(&a.0, &b.0)?.to_string(),
        meet(&a.1, &b.1)?.to_string(),
        meet_resources(&a.2, &b.2)?,
        meet(&a.3, &b.3)?.to_string(),
        meet_scope(a.4, b.4)?,
    ))
}

/// The atoms no other atom already allows.
fn without_covered(atoms: BTreeSet<Atom>) -> Vec<Atom> {
    let all: Vec<Atom> = atoms.into_iter().collect();
    all.iter()
        .filter(|a| {
            !all.iter()
                .any(|b| b != *a && intersect(a, b).as_ref() == Some(*a))
        })
        .cloned()
        .collect()
}

/// Few rules for `atoms`: those that differ in one field only become one,
/// field by field (groups, then versions, resources, operations).
fn merge(atoms: Vec<Atom>) -> Vec<WebhookRule> {
    // [groups, versions, resources, operations] as sets, and the scope.
    type Shape = ([BTreeSet<String>; 4], &'static str);
    let mut shapes: Vec<Shape> = atoms
        .into_iter()
        .map(|(g, v, r, o, s)| ([g, v, r, o].map(|x| BTreeSet::from([x])), s))
        .collect();
    for field in 0..4 {
        let mut merged: BTreeMap<Shape, BTreeSet<String>> = BTreeMap::new();
        for mut shape in shapes {
            let taken = std::mem::take(&mut shape.0[field]);
            merged.entry(shape).or_default().extend(taken);
        }
        shapes = merged
            .into_iter()
            .map(|(mut shape, values)| {
                shape.0[field] = values;
                shape
            })
            .collect();
    }
    let mut rules: Vec<WebhookRule> = shapes
        .into_iter()
        .map(|([g, v, r, o], s)| WebhookRule {
            api_groups: g.into_iter().collect(),
            api_versions: v.into_iter().collect(),
            operations: o.into_iter().collect(),
            resources: r.into_iter().collect(),
            scope: s.to_string(),
        })
        .collect();
    rules.sort();
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MatchResources, SourceRef};

    fn rule(groups: &[&str], versions: &[&str], resources: &[&str], ops: &[&str]) -> NamedRule {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect();
        NamedRule {
            resource_names: Vec::new(),
            operations: v(ops),
            api_groups: v(groups),
            api_versions: v(versions),
            resources: v(resources),
            scope: RuleScope::All,
        }
    }

    fn policy(name: &str, rules: Vec<NamedRule>) -> Policy {
        Policy {
            name: name.into(),
            param_kind: None,
            match_constraints: MatchResources {
                resource_rules: rules,
                ..Default::default()
            },
            variables: Vec::new(),
            mutations: Vec::new(),
            failure_policy: crate::api::FailurePolicy::Fail,
            match_conditions: Vec::new(),
            reinvocation_policy: crate::api::ReinvocationPolicy::Never,
            source: SourceRef::default(),
        }
    }

    fn binding(policy: &str, narrowing: Option<Vec<NamedRule>>) -> Binding {
        Binding {
            name: format!("{policy}-binding"),
            policy_name: policy.into(),
            param_ref: None,
            match_resources: narrowing.map(|rules| MatchResources {
                resource_rules: rules,
                ..Default::default()
            }),
            monitor: false,
            source: SourceRef::default(),
        }
    }

    fn shown(rules: &[WebhookRule]) -> Vec<String> {
        rules
            .iter()
            .map(|r| {
                format!(
                    "{:?} {:?} {:?} {:?} {}",
                    r.api_groups, r.api_versions, r.resources, r.operations, r.scope
                )
            })
            .collect()
    }

    #[test]
    fn policies_are_merged_into_few_rules_and_unbound_ones_need_none() {
        let policies = [
            policy("pods", vec![rule(&[""], &["v1"], &["pods"], &["CREATE"])]),
            policy(
                "deployments",
                vec![rule(
                    &["apps"],
                    &["v1"],
                    &["deployments"],
                    &["CREATE", "UPDATE"],
                )],
            ),
            policy(
                "statefulsets",
                vec![rule(
                    &["apps"],
                    &["v1"],
                    &["statefulsets"],
                    &["CREATE", "UPDATE"],
                )],
            ),
            policy(
                "unbound",
                vec![rule(&["batch"], &["v1"], &["jobs"], &["CREATE"])],
            ),
        ];
        let bindings = [
            binding("pods", None),
            binding("deployments", None),
            binding("statefulsets", None),
            binding("missing", None),
        ];
        assert_eq!(
            shown(&webhook_rules(&policies, &bindings)),
            [
                r#"[""] ["*"] ["pods"] ["CREATE"] *"#,
                r#"["apps"] ["*"] ["deployments", "statefulsets"] ["CREATE", "UPDATE"] *"#,
            ]
        );
    }

    #[test]
    fn a_binding_narrows_its_policy_and_wildcards_meet() {
        let policies = [policy(
            "broad",
            vec![rule(&["*"], &["*"], &["*", "*/scale"], &["*"])],
        )];
        let bindings = [binding(
            "broad",
            Some(vec![rule(
                &["apps"],
                &["v1"],
                &["deployments", "deployments/scale", "deployments/status"],
                &["UPDATE", "DELETE"],
            )]),
        )];
        // `*` allows no subresource, `*/scale` only scale; DELETE is never
        // a mutating policy's; every version comes as it was made.
        assert_eq!(
            shown(&webhook_rules(&policies, &bindings)),
            [r#"["apps"] ["*"] ["deployments", "deployments/scale"] ["UPDATE"] *"#]
        );
    }

    #[test]
    fn a_broader_rule_covers_a_narrower_one() {
        let policies = [
            policy("all-pods", vec![rule(&[""], &["*"], &["pods"], &["*"])]),
            policy(
                "pod-creates",
                vec![rule(&[""], &["v1"], &["pods"], &["CREATE"])],
            ),
        ];
        let bindings = [binding("all-pods", None), binding("pod-creates", None)];
        assert_eq!(
            shown(&webhook_rules(&policies, &bindings)),
            [r#"[""] ["*"] ["pods"] ["CONNECT", "CREATE", "UPDATE"] *"#]
        );
        assert!(webhook_rules(&policies, &[]).is_empty());
    }

    fn webhook_rule(groups: &[&str], resources: &[&str], ops: &[&str], scope: &str) -> WebhookRule {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect();
        WebhookRule {
            api_groups: v(groups),
            api_versions: v(&["*"]),
            operations: v(ops),
            resources: v(resources),
            scope: scope.into(),
        }
    }

    #[test]
    fn coverage_knows_that_star_leaves_subresources_out() {
        let everything = [webhook_rule(&["*"], &["*"], &["CREATE", "UPDATE"], "*")];
        let pods = [webhook_rule(&[""], &["pods"], &["CREATE"], "Namespaced")];
        let exec = [webhook_rule(&[""], &["pods/exec"], &["CONNECT"], "*")];
        let ephemeral = [webhook_rule(
            &[""],
            &["pods/ephemeralcontainers"],
            &["UPDATE"],
            "*",
        )];
        assert!(covers(&everything, &pods));
        assert!(!covers(&pods, &everything));
        assert!(!covers(&everything, &ephemeral));
        assert!(
            !covers(&everything, &exec),
            "CONNECT is not among the ceiling's"
        );
        assert!(covers(&everything, &[]));
        assert!(!covers(&[], &pods));
        let with_sub = [webhook_rule(&["*"], &["*/*"], &["*"], "*")];
        assert!(covers(&with_sub, &ephemeral) && covers(&with_sub, &exec));
        // `*/*` and `pods/*` allow the resource itself too.
        assert!(covers(&with_sub, &pods));
        let pods_and_subresources = [webhook_rule(&[""], &["pods/*"], &["CREATE"], "*")];
        assert!(covers(&pods_and_subresources, &pods));
        assert!(!covers(&pods, &pods_and_subresources));
    }

    #[test]
    fn a_ceiling_cuts_what_rules_may_send_and_a_union_merges() {
        let ceiling = [webhook_rule(
            &["*"],
            &["*", "*/*"],
            &["CREATE", "UPDATE"],
            "*",
        )];
        let wanted = [
            webhook_rule(&[""], &["pods", "pods/exec"], &["*"], "*"),
            webhook_rule(&["apps"], &["deployments"], &["CREATE"], "Namespaced"),
        ];
        assert_eq!(
            shown(&within(&wanted, &ceiling)),
            [
                r#"[""] ["*"] ["pods", "pods/exec"] ["CREATE", "UPDATE"] *"#,
                r#"["apps"] ["*"] ["deployments"] ["CREATE"] Namespaced"#,
            ]
        );
        assert!(within(&wanted, &[]).is_empty());
        let configmaps = [webhook_rule(
            &[""],
            &["configmaps"],
            &["CREATE", "UPDATE"],
            "*",
        )];
        let pods = [webhook_rule(&[""], &["pods"], &["CREATE", "UPDATE"], "*")];
        assert_eq!(
            shown(&union(&pods, &configmaps)),
            [r#"[""] ["*"] ["configmaps", "pods"] ["CREATE", "UPDATE"] *"#]
        );
        assert_eq!(union(&pods, &pods), pods);
    }

    #[test]
    fn a_rule_read_from_the_api_defaults_its_scope() {
        let read: WebhookRule = serde_json::from_value(serde_json::json!({
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]
        }))
        .unwrap();
        assert_eq!(read.scope, "*");
    }
}
