//! Matching a request against a policy's `matchConstraints` or a binding's
//! `matchResources`, as kube-apiserver's `matching.Matcher.Matches` does
//! (namespaceSelector, objectSelector, excludeResourceRules, resourceRules,
//! matchPolicy), plus the resource table the rules are resolved with and
//! the completion of requests a conformance case leaves partial.

mod complete;
pub mod index;
mod selector;
mod table;
pub mod webhook_rules;

pub use complete::complete_request;
pub use table::{CrdError, ResourceInfo, ResourceTable, Scope};

use crate::api::{LabelSelector, MatchPolicy, MatchResources, NamedRule, RuleScope};
use crate::request::{
    labels_of, AdmissionRequest, ClusterObjects, GroupVersionKind, GroupVersionResource,
};
use serde_json::{json, Value};

/// The label every Namespace carries with its own name (set by defaulting).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Namespaces every cluster has, even when a case does not list them.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The version a request matched as: the kind and resource the policy sees
/// (the request's own for an exact match, an equivalent one otherwise).
/// An exact match copies nothing: every binding of every request is
/// matched, twice when policies are reinvoked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchedAs {
    /// As requested: the request's own kind and resource.
    Exact,
    /// As an equivalent resource (another version or group).
    Equivalent {
        /// The kind to convert the object to.
        gvk: GroupVersionKind,
        /// The resource that matched.
        gvr: GroupVersionResource,
    },
}

impl MatchedAs {
    /// The kind to convert the object of `req` to.
    pub fn gvk<'a>(&'a self, req: &'a AdmissionRequest) -> &'a GroupVersionKind {
        match self {
            MatchedAs::Exact => &req.kind,
            MatchedAs::Equivalent { gvk, .. } => gvk,
        }
    }

    /// The resource that matched `req`.
    pub fn gvr<'a>(&'a self, req: &'a AdmissionRequest) -> &'a GroupVersionResource {
        match self {
            MatchedAs::Exact => &req.resource,
            MatchedAs::Equivalent { gvr, .. } => gvr,
        }
    }
}

/// Why matching could not decide (upstream: a configuration error of the
/// policy or binding, subject to its failure policy).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// The request's namespace is not among the cluster objects.
    #[error("namespaces {0:?} not found")]
    NamespaceNotFound(String),
    /// A Namespace create/update without an object to read its labels from.
    #[error("Internal error occurred: object does not implement the Object interfaces")]
    MissingNamespaceObject,
    /// The namespaceSelector or objectSelector does not parse.
    #[error("Internal error occurred: {0}")]
    InvalidSelector(String),
    /// An equivalent resource matched but its kind is unknown.
    #[error("unable to convert to {}/{}, Resource={}: unknown kind", .0.group, .0.version, .0.resource)]
    UnknownKind(GroupVersionResource),
}

/// Whether MutatingAdmissionPolicies run for `operation` at all (CREATE,
/// UPDATE and CONNECT; never DELETE).
pub fn handles_operation(operation: &str) -> bool {
    matches!(operation, "CREATE" | "UPDATE" | "CONNECT")
}

/// Whether requests for `gvr` skip admission policies entirely: the policy
/// resources themselves (generic `Plugin.Dispatch`), kmutate's own policy
/// resources likewise (a policy for every resource must not rewrite the
/// kmutate.dev policies a cluster serves through kmutate, as it cannot
/// rewrite the built-in ones), and the non-persisted review resources
/// (kube-apiserver's excluded admission resources).
pub fn is_exempt_resource(gvr: &GroupVersionResource) -> bool {
    match gvr.group.as_str() {
        "kmutate.dev" => matches!(
            gvr.resource.as_str(),
            "mutatingadmissionpolicies" | "mutatingadmissionpolicybindings"
        ),
        "admissionregistration.k8s.io" => matches!(
            gvr.resource.as_str(),
            "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        ),
        "authentication.k8s.io" => {
            matches!(gvr.resource.as_str(), "selfsubjectreviews" | "tokenreviews")
        }
        "authorization.k8s.io" => matches!(
            gvr.resource.as_str(),
            "localsubjectaccessreviews"
                | "selfsubjectaccessreviews"
                | "selfsubjectrulesreviews"
                | "subjectaccessreviews"
        ),
        _ => false,
    }
}

/// The Namespace object called `name` as the API server holds it: the one in
/// `cluster`, or a bare one for the four system namespaces every cluster has;
/// with the `kubernetes.io/metadata.name` label set as defaulting sets it.
pub fn namespace_object(cluster: &ClusterObjects, name: &str) -> Option<Value> {
    let mut ns = match cluster.namespace(name) {
        Some(ns) => ns.clone(),
        None if SYSTEM_NAMESPACES.contains(&name) => json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }),
        None => return None,
    };
    if let Some(meta) = ns.as_object_mut().and_then(|o| {
        o.entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
    }) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(
                NAMESPACE_NAME_LABEL.to_string(),
                Value::String(name.to_string()),
            );
        }
    }
    Some(ns)
}

/// Matches `req` against `constraints`: upstream `Matcher.Matches`. Call it
/// with a policy's matchConstraints and, separately, with a binding's
/// matchResources (a binding without matchResources matches everything; one
/// with empty resourceRules too). `Ok(None)` is "does not apply"; `Some`
/// tells which version matched. `resources` should be built from `cluster`
/// (`ResourceTable::new(cluster.crds())`); CRDs it lacks are looked up in
/// `cluster`.
pub fn matches(
    constraints: &MatchResources,
    req: &AdmissionRequest,
    cluster: &ClusterObjects,
    resources: &ResourceTable,
) -> Result<Option<MatchedAs>, MatchError> {
    matches_given(constraints, req, cluster, resources, ObjectSeen::Yes)
}

/// Whether a match may read the request's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectSeen {
    /// It reads them (they are in the request).
    Yes,
    /// They are not known (and not in the request): the object selector
    /// is taken to select the request. (A namespace selector on a
    /// Namespace, which reads its labels, fails without the object, which
    /// counts as a match when the rules apply.)
    No,
}

/// [`matches()`], with the request's objects unknown when `object` says so.
/// With them unknown, an answer of `Ok(None)` holds whatever they are: the
/// selectors that read them only ever narrow a match down, and their
/// errors count only when the rules apply.
pub fn matches_given(
    constraints: &MatchResources,
    req: &AdmissionRequest,
    cluster: &ClusterObjects,
    resources: &ResourceTable,
    object: ObjectSeen,
) -> Result<Option<MatchedAs>, MatchError> {
    // The plugin never dispatches these (Handles / Dispatch), so nothing matches.
    if !handles_operation(&req.operation) || is_exempt_resource(&req.resource) {
        return Ok(None);
    }
    // Selector errors only count when the rules would apply.
    let ns_match = match_namespace_selector(&constraints.namespace_selector, req, cluster);
    if let Ok(false) = ns_match {
        return Ok(None);
    }
    let obj_match = if object == ObjectSeen::No {
        Ok(true)
    } else {
        match_object_selector(&constraints.object_selector, req)
    };
    if let Ok(false) = obj_match {
        return Ok(None);
    }
    let policy = constraints.match_policy;
    if matches_rules(
        &constraints.exclude_resource_rules,
        policy,
        req,
        cluster,
        resources,
    )?
    .is_some()
    {
        return Ok(None);
    }
    let matched = if constraints.resource_rules.is_empty() {
        MatchedAs::Exact
    } else {
        match matches_rules(&constraints.resource_rules, policy, req, cluster, resources)? {
            Some(m) => m,
            None => return Ok(None),
        }
    };
    ns_match?;
    obj_match?;
    Ok(Some(matched))
}

/// Whether [`matches()`] reads the request's object (or old object) under
/// `constraints`: through an object selector, or through a namespace
/// selector on a Namespace, which selects by its own labels. When it does
/// not, its answer and its errors stay the same however the object changes.
pub fn reads_object(constraints: &MatchResources, req: &AdmissionRequest) -> bool {
    !constraints.object_selector.is_empty()
        || (req.resource.resource == "namespaces" && !constraints.namespace_selector.is_empty())
}

/// Upstream `namespace.Matcher.MatchNamespaceSelector`.
fn match_namespace_selector(
    selector: &LabelSelector,
    req: &AdmissionRequest,
    cluster: &ClusterObjects,
) -> Result<bool, MatchError> {
    // Cluster-scoped objects other than Namespaces are never excluded.
    if req.namespace.is_empty() && req.resource.resource != "namespaces" {
        return Ok(true);
    }
    selector::validate(selector).map_err(MatchError::InvalidSelector)?;
    if selector.is_empty() {
        return Ok(true);
    }
    let creating_or_updating = matches!(req.operation.as_str(), "CREATE" | "UPDATE");
    let labels = if req.resource.resource == "namespaces"
        && req.sub_resource.is_empty()
        && creating_or_updating
    {
        // The Namespace being written: its own (new) labels.
        match req.object.as_ref().filter(|o| o.is_object()) {
            // The labels it carries: its own `kubernetes.io/metadata.name`
            // label is the apiserver's defaulting (`SetDefaults_Namespace`,
            // before admission), not the matcher's, so a Namespace given
            // without it is matched without it, as upstream's plugin does
            // (maporacle). Namespaces read from the cluster carry it
            // ([`namespace_object`]).
            Some(obj) => labels_of(obj),
            None => return Err(MatchError::MissingNamespaceObject),
        }
    } else {
        match namespace_object(cluster, &req.namespace) {
            Some(ns) => labels_of(&ns),
            None => return Err(MatchError::NamespaceNotFound(req.namespace.clone())),
        }
    };
    Ok(selector.matches(&labels))
}

/// Whether `obj` has metadata upstream can read labels from: connect option
/// kinds (PodExecOptions, ...) and DeleteOptions have none.
fn has_object_meta(obj: &Value) -> bool {
    if !obj.is_object() {
        return false;
    }
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    !(matches!(api_version, "v1" | "meta.k8s.io/v1") && kind.ends_with("Options"))
}

/// Upstream `object.Matcher.MatchObjectSelector`: the new or the old object.
fn match_object_selector(
    selector: &LabelSelector,
    req: &AdmissionRequest,
) -> Result<bool, MatchError> {
    selector::validate(selector).map_err(MatchError::InvalidSelector)?;
    if selector.is_empty() {
        return Ok(true);
    }
    let selects = |o: &Option<Value>| {
        o.as_ref()
            .filter(|o| has_object_meta(o))
            .is_some_and(|o| selector.matches(&labels_of(o)))
    };
    Ok(selects(&req.object) || selects(&req.old_object))
}

fn is_namespaces_resource(gvr: &GroupVersionResource) -> bool {
    gvr.group.is_empty() && gvr.version == "v1" && gvr.resource == "namespaces"
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || same(i, requested))
}

/// String equality compared in place: every binding's rules are matched on
/// every request, and their words ("CREATE", "v1", "pods") are short, so
/// a call into libc's memcmp costs more than the comparison.
#[inline]
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Upstream `rules.Matcher.Matches` for `rule` with the request's resource
/// replaced by `gvr`.
fn rule_matches(rule: &NamedRule, req: &AdmissionRequest, gvr: &GroupVersionResource) -> bool {
    // attr.GetNamespace() is the Namespace's own name for Namespace requests.
    let scope = match rule.scope {
        RuleScope::All => true,
        RuleScope::Namespaced => !is_namespaces_resource(gvr) && !req.namespace.is_empty(),
        RuleScope::Cluster => is_namespaces_resource(gvr) || req.namespace.is_empty(),
    };
    let resource = || {
        rule.resources.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
            (res == "*" || same(res, &gvr.resource)) && (sub == "*" || same(sub, &req.sub_resource))
        })
    };
    scope
        && operation_matches(rule, req)
        && exact_or_wildcard(&rule.api_groups, &gvr.group)
        && exact_or_wildcard(&rule.api_versions, &gvr.version)
        && resource()
}

/// Whether `rule` lists the request's operation: the one part of
/// [`rule_matches`] that no equivalent resource changes.
fn operation_matches(rule: &NamedRule, req: &AdmissionRequest) -> bool {
    rule.operations
        .iter()
        .any(|op| op == "*" || same(op, &req.operation))
}

/// An empty name list always matches (a generated name is "" and matches no
/// listed name).
fn name_matches(rule: &NamedRule, name: &str) -> bool {
    rule.resource_names.is_empty() || rule.resource_names.iter().any(|n| n == name)
}

/// Upstream `matchesResourceRules`: the request as it is, then (Equivalent)
/// each rule against each equivalent resource.
fn matches_rules(
    rules: &[NamedRule],
    policy: MatchPolicy,
    req: &AdmissionRequest,
    cluster: &ClusterObjects,
    resources: &ResourceTable,
) -> Result<Option<MatchedAs>, MatchError> {
    for rule in rules {
        if rule_matches(rule, req, &req.resource) && name_matches(rule, &req.name) {
            return Ok(Some(MatchedAs::Exact));
        }
    }
    // Equivalent resources are looked up only for rules they could match.
    if policy == MatchPolicy::Exact || !rules.iter().any(|r| operation_matches(r, req)) {
        return Ok(None);
    }
    let crd_table;
    let table = if resources.resource(&req.resource).is_some() {
        resources
    } else {
        crd_table = ResourceTable::crds_for(cluster, &req.resource.group, &req.resource.resource);
        &crd_table
    };
    let equivalents = table.equivalents(&req.resource, &req.sub_resource);
    for rule in rules {
        for eq in &equivalents {
            if eq.gvr == req.resource {
                continue; // already checked as requested
            }
            if !rule_matches(rule, req, &eq.gvr) {
                continue;
            }
            let Some(kind) = eq
                .subresource_kind(&req.sub_resource)
                .filter(|k| !k.kind.is_empty())
            else {
                return Err(MatchError::UnknownKind(eq.gvr.clone()));
            };
            if name_matches(rule, &req.name) {
                return Ok(Some(MatchedAs::Equivalent {
                    gvk: kind.clone(),
                    gvr: eq.gvr.clone(),
                }));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
