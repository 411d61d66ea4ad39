//! Which resources of the cluster a scan lists: those the loaded bindings
//! can match (their webhook rules, subresources left out) for the scan's
//! operation, as the server's discovery serves them, at each group's
//! preferred version.

use crate::matching::webhook_rules::WebhookRule;
use kube::discovery::{verbs, ApiResource, Discovery, Scope};

/// One resource to list.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Its group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

impl Target {
    /// `plural.group` (`pods`, `deployments.apps`), as kubectl names it.
    pub fn name(&self) -> String {
        match self.resource.group.as_str() {
            "" => self.resource.plural.clone(),
            group => format!("{}.{group}", self.resource.plural),
        }
    }

    /// Its group, version and resource, as an admission request names them.
    pub fn gvr(&self) -> crate::request::GroupVersionResource {
        crate::request::GroupVersionResource {
            group: self.resource.group.clone(),
            version: self.resource.version.clone(),
            resource: self.resource.plural.clone(),
        }
    }
}

/// The resources among `served` (listable, at their preferred version)
/// some rule of `rules` sends for `operation`, narrowed to `only`
/// (`plural` or `plural.group`; empty: all).
pub fn select(
    rules: &[WebhookRule],
    operation: &str,
    served: &[Target],
    only: &[String],
) -> Vec<Target> {
    served
        .iter()
        .filter(|t| rules.iter().any(|r| sends(r, operation, t)))
        .filter(|t| only.is_empty() || only.iter().any(|o| named(o, t)))
        .cloned()
        .collect()
}

/// Whether `rule` sends `operation` on the main resource of `target`.
fn sends(rule: &WebhookRule, operation: &str, target: &Target) -> bool {
    let any_or = |list: &[String], value: &str| list.iter().any(|v| v == "*" || v == value);
    let plural = target.resource.plural.as_str();
    // `*/*` and `pods/*` send the resource as well as its subresources.
    let resource = rule
        .resources
        .iter()
        .any(|r| r == "*" || r == plural || r == "*/*" || r.strip_suffix("/*") == Some(plural));
    let scope = match rule.scope.as_str() {
        "Namespaced" => target.namespaced,
        "Cluster" => !target.namespaced,
        _ => true,
    };
    resource
        && scope
        && any_or(&rule.api_groups, &target.resource.group)
        && any_or(&rule.api_versions, &target.resource.version)
        && any_or(&rule.operations, operation)
}

/// Whether `--resource` value `name` names `target`: `plural`,
/// `plural.group`, or the kind (any case).
fn named(name: &str, target: &Target) -> bool {
    let r = &target.resource;
    let name = name.to_ascii_lowercase();
    name == r.plural || name == target.name() || name == r.kind.to_ascii_lowercase()
}

/// The listable resources the server serves, at each group's preferred
/// version.
pub async fn served(client: &kube::Client) -> Result<Vec<Target>, kube::Error> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) || resource.plural.contains('/') {
                continue;
            }
            out.push(Target {
                resource,
                namespaced: caps.scope == Scope::Namespaced,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Target {
        Target {
            resource: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: match group {
                    "" => version.into(),
                    g => format!("{g}/{version}"),
                },
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced,
        }
    }

    fn rule(groups: &[&str], resources: &[&str], operations: &[&str], scope: &str) -> WebhookRule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        WebhookRule {
            api_groups: strings(groups),
            api_versions: vec!["*".into()],
            operations: strings(operations),
            resources: strings(resources),
            scope: scope.into(),
        }
    }

    fn served() -> Vec<Target> {
        vec![
            target("", "v1", "Pod", "pods", true),
            target("", "v1", "Namespace", "namespaces", false),
            target("apps", "v1", "Deployment", "deployments", true),
            target("batch", "v1", "Job", "jobs", true),
        ]
    }

    fn names(targets: &[Target]) -> Vec<String> {
        targets.iter().map(Target::name).collect()
    }

    #[test]
    fn rules_select_main_resources_by_group_resource_operation_and_scope() {
        let pods = [rule(&[""], &["pods"], &["CREATE"], "*")];
        assert_eq!(names(&select(&pods, "CREATE", &served(), &[])), ["pods"]);
        assert!(select(&pods, "UPDATE", &served(), &[]).is_empty());
        // A subresource alone sends no main resource; `pods/*` does.
        let status = [rule(&[""], &["pods/status"], &["*"], "*")];
        assert!(select(&status, "CREATE", &served(), &[]).is_empty());
        let all_of_pods = [rule(&[""], &["pods/*"], &["*"], "*")];
        assert_eq!(
            names(&select(&all_of_pods, "UPDATE", &served(), &[])),
            ["pods"]
        );
        let everything = [rule(&["*"], &["*/*"], &["*"], "Namespaced")];
        assert_eq!(
            names(&select(&everything, "CREATE", &served(), &[])),
            ["pods", "deployments.apps", "jobs.batch"]
        );
        let cluster = [rule(&["*"], &["*"], &["*"], "Cluster")];
        assert_eq!(
            names(&select(&cluster, "CREATE", &served(), &[])),
            ["namespaces"]
        );
    }

    #[test]
    fn resource_names_narrow_by_plural_group_or_kind() {
        let everything = [rule(&["*"], &["*"], &["*"], "*")];
        let only = |o: &[&str]| {
            let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
            names(&select(&everything, "CREATE", &served(), &o))
        };
        assert_eq!(only(&["deployments"]), ["deployments.apps"]);
        assert_eq!(
            only(&["deployments.apps", "Pod"]),
            ["pods", "deployments.apps"]
        );
        assert!(only(&["deployments.extensions"]).is_empty());
    }
}
