//! The rules a MutatingWebhookConfiguration needs for kube-apiserver to
//! call kmutate for every request a loaded binding can match, and for
//! little else: the union over bindings of their policy's
//! `matchConstraints.resourceRules` intersected with the binding's own
//! `matchResources.resourceRules`, in as few rules as express it.
//!
//! What webhook rules cannot say is left out, so the rules match a
//! superset: resource names, `excludeResourceRules` and selectors are
//! decided by kmutate itself. Requests through other versions of a
//! matched resource need the configuration's `matchPolicy: Equivalent`.

use crate::api::{Binding, NamedRule, Policy, RuleScope};
use std::collections::{BTreeMap, BTreeSet};

/// The operations a mutating policy can act on (a DELETE has no object).
const MUTATING_OPERATIONS: [&str; 3] = ["CONNECT", "CREATE", "UPDATE"];

/// One rule of a webhook configuration (`RuleWithOperations`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
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
    /// `scope`: `*`, `Cluster` or `Namespaced`.
    pub scope: String,
}

/// One request shape a rule allows: group, version, resource, operation,
/// scope (each possibly `*`).
type Atom = (String, String, String, String, &'static str);

/// The rules that send kmutate every request the bindings of `bindings`
/// (with their policy among `policies`) can match.
pub fn webhook_rules(policies: &[Policy], bindings: &[Binding]) -> Vec<WebhookRule> {
    let mut atoms = BTreeSet::new();
    for binding in bindings {
        let Some(policy) = policies.iter().find(|p| p.name == binding.policy_name) else {
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
    merge(without_covered(atoms))
}

/// Every (group, version, resource, operation, scope) `rule` allows.
fn atoms_of(rule: &NamedRule) -> impl Iterator<Item = Atom> + '_ {
    let scope = match rule.scope {
        RuleScope::All => "*",
        RuleScope::Cluster => "Cluster",
        RuleScope::Namespaced => "Namespaced",
    };
    let operations: Vec<&str> = if rule.operations.iter().any(|o| o == "*") {
        MUTATING_OPERATIONS.to_vec()
    } else {
        rule.operations
            .iter()
            .map(String::as_str)
            .filter(|o| MUTATING_OPERATIONS.contains(o))
            .collect()
    };
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
/// `pods/*`, `*/scale`) both allow.
fn meet_resources(a: &str, b: &str) -> Option<String> {
    let split = |r: &str| match r.split_once('/') {
        Some((res, sub)) => (res.to_string(), Some(sub.to_string())),
        None => (r.to_string(), None),
    };
    let ((ra, sa), (rb, sb)) = (split(a), split(b));
    let resource = meet(&ra, &rb)?.to_string();
    match (sa, sb) {
        (None, None) => Some(resource),
        (Some(x), Some(y)) => Some(format!("{resource}/{}", meet(&x, &y)?)),
        _ => None,
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
                r#"[""] ["v1"] ["pods"] ["CREATE"] *"#,
                r#"["apps"] ["v1"] ["deployments", "statefulsets"] ["CREATE", "UPDATE"] *"#,
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
        // a mutating policy's.
        assert_eq!(
            shown(&webhook_rules(&policies, &bindings)),
            [r#"["apps"] ["v1"] ["deployments", "deployments/scale"] ["UPDATE"] *"#]
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
}
