//! Authorization checks made by CEL expressions through the `authorizer`
//! variable: the attributes of a check, the decision, and the authorizers
//! kmutate offers (fixed decisions from a list, allow-all, deny-all) plus the
//! per-request cache the dispatcher wraps them in.
//!
//! Upstream: `k8s.io/apiserver/pkg/authorization/authorizer` (`Attributes`,
//! `Decision`) and `k8s.io/apiserver/pkg/admission/plugin/authorizer`
//! (`NewCachingAuthorizer`).

use crate::request::UserInfo;
use serde::Deserialize;
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// What a check asks about: an API resource, or a non-resource URL path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AuthorizationTarget {
    /// A resource request (`authorizer.group(g).resource(r)...check(verb)`).
    Resource(ResourceAttributes),
    /// A non-resource request (`authorizer.path(p).check(verb)`).
    NonResource {
        /// The URL path, as the expression gave it.
        path: String,
    },
}

/// The resource attributes of a check (upstream `AttributesRecord` with
/// `ResourceRequest: true`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ResourceAttributes {
    /// API group ("" for the core group).
    pub api_group: String,
    /// API version: `*` for every check the CEL library makes.
    pub api_version: String,
    /// Resource (plural, lower case).
    pub resource: String,
    /// Subresource ("" when unset).
    pub subresource: String,
    /// Namespace ("" for the cluster scope).
    pub namespace: String,
    /// Object name ("" when unset).
    pub name: String,
    /// `fieldSelector(...)`, as written ("" when unset). Upstream hands the
    /// parsed requirements (or the parse error) to the authorizer.
    pub field_selector: String,
    /// `labelSelector(...)`, as written ("" when unset).
    pub label_selector: String,
}

/// Everything an authorizer is asked: who, which verb, on what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizationAttributes {
    /// The principal: the request's user, or the service account of
    /// `authorizer.serviceAccount(ns, name)`.
    pub user: UserInfo,
    /// The API verb (resource checks) or HTTP verb (path checks).
    pub verb: String,
    /// The resource or path.
    pub target: AuthorizationTarget,
}

impl AuthorizationAttributes {
    /// The resource attributes, for a resource check.
    pub fn resource(&self) -> Option<&ResourceAttributes> {
        match &self.target {
            AuthorizationTarget::Resource(r) => Some(r),
            AuthorizationTarget::NonResource { .. } => None,
        }
    }

    /// The path, for a non-resource check.
    pub fn path(&self) -> Option<&str> {
        match &self.target {
            AuthorizationTarget::Resource(_) => None,
            AuthorizationTarget::NonResource { path } => Some(path),
        }
    }
}

/// The kind of an authorization decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecisionKind {
    /// The check is allowed: `allowed()` is true.
    Allow,
    /// The check is denied.
    Deny,
    /// The authorizer has no opinion; `allowed()` is false.
    NoOpinion,
}

/// An authorizer's answer to one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allow, deny or no opinion.
    pub kind: DecisionKind,
    /// Why (`reason()`), possibly empty.
    pub reason: String,
    /// The error the check ran into (`errored()`, `error()`), if any.
    pub error: Option<String>,
}

impl Decision {
    /// An allow decision.
    pub fn allow(reason: impl Into<String>) -> Decision {
        Decision {
            kind: DecisionKind::Allow,
            reason: reason.into(),
            error: None,
        }
    }

    /// A deny decision.
    pub fn deny(reason: impl Into<String>) -> Decision {
        Decision {
            kind: DecisionKind::Deny,
            reason: reason.into(),
            error: None,
        }
    }

    /// A no-opinion decision.
    pub fn no_opinion(reason: impl Into<String>) -> Decision {
        Decision {
            kind: DecisionKind::NoOpinion,
            reason: reason.into(),
            error: None,
        }
    }

    /// Whether the decision is allow.
    pub fn is_allowed(&self) -> bool {
        self.kind == DecisionKind::Allow
    }
}

/// Decides authorization checks.
pub trait Authorizer: Send + Sync {
    /// The decision for `attributes`.
    fn authorize(&self, attributes: &AuthorizationAttributes) -> Decision;

    /// Whether a decision may wait on the network (a SubjectAccessReview):
    /// the webhook then evaluates on a thread that may block.
    fn may_block(&self) -> bool {
        false
    }
}

/// Denies every check (the default of `kmutate apply`).
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysDeny;

impl Authorizer for AlwaysDeny {
    fn authorize(&self, _: &AuthorizationAttributes) -> Decision {
        Decision::deny("")
    }
}

/// Allows every check (`kmutate apply --authorizer-allow-all`).
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysAllow;

impl Authorizer for AlwaysAllow {
    fn authorize(&self, _: &AuthorizationAttributes) -> Decision {
        Decision::allow("")
    }
}

/// One entry of a conformance case's `authorizer` list: the fields it gives
/// must all equal the check's for the entry to decide it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedDecision {
    /// The principal's user name.
    pub user: Option<String>,
    /// The API group of a resource check.
    pub group: Option<String>,
    /// The resource.
    pub resource: Option<String>,
    /// The subresource.
    pub subresource: Option<String>,
    /// The namespace.
    pub namespace: Option<String>,
    /// The object name.
    pub name: Option<String>,
    /// The verb (required).
    pub verb: String,
    /// The path of a non-resource check.
    pub path: Option<String>,
    /// Allow (true) or deny (false).
    pub allowed: bool,
    /// The decision's reason.
    pub reason: Option<String>,
}

impl FixedDecision {
    /// Whether every field the entry gives equals the check's. A resource
    /// check has path ""; a path check has group, resource, subresource,
    /// namespace and name "".
    pub fn matches(&self, a: &AuthorizationAttributes) -> bool {
        let empty = ResourceAttributes::default();
        let r = a.resource().unwrap_or(&empty);
        let path = a.path().unwrap_or("");
        let eq = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        self.verb == a.verb
            && eq(&self.user, &a.user.username)
            && eq(&self.group, &r.api_group)
            && eq(&self.resource, &r.resource)
            && eq(&self.subresource, &r.subresource)
            && eq(&self.namespace, &r.namespace)
            && eq(&self.name, &r.name)
            && eq(&self.path, path)
    }

    /// The decision the entry gives.
    pub fn decision(&self) -> Decision {
        let reason = self.reason.clone().unwrap_or_default();
        if self.allowed {
            Decision::allow(reason)
        } else {
            Decision::deny(reason)
        }
    }
}

/// Fixed decisions (FORMAT.md's `authorizer` list): the first matching entry
/// decides; a check no entry matches is denied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FixedAuthorizer {
    entries: Vec<FixedDecision>,
}

impl FixedAuthorizer {
    /// An authorizer over `entries`, tried in order.
    pub fn new(entries: Vec<FixedDecision>) -> FixedAuthorizer {
        FixedAuthorizer { entries }
    }

    /// Reads the list format of FORMAT.md; `null` (an absent list) gives an
    /// authorizer that denies every check.
    pub fn from_json(list: &Json) -> Result<FixedAuthorizer, String> {
        let items = match list {
            Json::Null => return Ok(FixedAuthorizer::default()),
            Json::Array(items) => items,
            other => return Err(format!("expected a list of decisions, got {other}")),
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                FixedDecision::deserialize(item).map_err(|e| format!("entry {i}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(FixedAuthorizer::new)
    }

    /// The entries.
    pub fn entries(&self) -> &[FixedDecision] {
        &self.entries
    }
}

impl Authorizer for FixedAuthorizer {
    fn authorize(&self, attributes: &AuthorizationAttributes) -> Decision {
        self.entries
            .iter()
            .find(|e| e.matches(attributes))
            .map(FixedDecision::decision)
            .unwrap_or_else(|| Decision::deny(""))
    }
}

/// The cache key of a check: the attributes with the user's groups and extra
/// values sorted, as upstream's `cachingAuthorizer` builds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CacheKey {
    username: String,
    uid: String,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
    verb: String,
    target: AuthorizationTarget,
}

impl CacheKey {
    fn new(a: &AuthorizationAttributes) -> CacheKey {
        let mut groups = a.user.groups.clone();
        groups.sort();
        let extra = a
            .user
            .extra
            .iter()
            .map(|(k, v)| {
                let mut v = v.clone();
                v.sort();
                (k.clone(), v)
            })
            .collect();
        CacheKey {
            username: a.user.username.clone(),
            uid: a.user.uid.clone(),
            groups,
            extra,
            verb: a.verb.clone(),
            target: a.target.clone(),
        }
    }
}

/// Remembers the decisions of another authorizer, for the duration of one
/// dispatch (upstream `NewCachingAuthorizer`, one per `dispatchInvocations`):
/// an equivalent check is asked of the inner authorizer once.
pub struct CachingAuthorizer<'a> {
    inner: &'a dyn Authorizer,
    decisions: Mutex<HashMap<CacheKey, Decision>>,
}

impl std::fmt::Debug for CachingAuthorizer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachingAuthorizer").finish_non_exhaustive()
    }
}

impl<'a> CachingAuthorizer<'a> {
    /// A cache in front of `inner`.
    pub fn new(inner: &'a dyn Authorizer) -> CachingAuthorizer<'a> {
        CachingAuthorizer {
            inner,
            decisions: Mutex::new(HashMap::new()),
        }
    }
}

impl Authorizer for CachingAuthorizer<'_> {
    fn authorize(&self, attributes: &AuthorizationAttributes) -> Decision {
        let key = CacheKey::new(attributes);
        if let Some(d) = self
            .decisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return d.clone();
        }
        // Not held across the call: an authorizer may be slow.
        let decision = self.inner.authorize(attributes);
        self.decisions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, decision.clone());
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: name.into(),
            ..Default::default()
        }
    }

    fn resource_check(
        username: &str,
        group: &str,
        resource: &str,
        namespace: &str,
        verb: &str,
    ) -> AuthorizationAttributes {
        AuthorizationAttributes {
            user: user(username),
            verb: verb.into(),
            target: AuthorizationTarget::Resource(ResourceAttributes {
                api_group: group.into(),
                api_version: "*".into(),
                resource: resource.into(),
                namespace: namespace.into(),
                ..Default::default()
            }),
        }
    }

    fn path_check(username: &str, path: &str, verb: &str) -> AuthorizationAttributes {
        AuthorizationAttributes {
            user: user(username),
            verb: verb.into(),
            target: AuthorizationTarget::NonResource { path: path.into() },
        }
    }

    #[test]
    fn fixed_entries_match_on_the_fields_they_give() {
        // FORMAT.md: an entry matches when every field it gives equals the check's.
        let a = FixedAuthorizer::from_json(&json!([
            {"user": "alice", "resource": "secrets", "namespace": "default", "verb": "create", "allowed": true, "reason": "alice may"},
            {"resource": "endpoints", "verb": "create", "allowed": true},
            {"path": "/healthz", "verb": "get", "allowed": true},
            {"group": "apps", "resource": "deployments", "verb": "delete", "allowed": false, "reason": "no"},
        ]))
        .unwrap();
        let d = a.authorize(&resource_check("alice", "", "secrets", "default", "create"));
        assert_eq!(d, Decision::allow("alice may"));
        assert!(!a
            .authorize(&resource_check("bob", "", "secrets", "default", "create"))
            .is_allowed());
        assert!(!a
            .authorize(&resource_check("alice", "", "secrets", "other", "create"))
            .is_allowed());
        assert!(a
            .authorize(&resource_check("bob", "", "endpoints", "x", "create"))
            .is_allowed());
        assert!(a
            .authorize(&path_check("bob", "/healthz", "get"))
            .is_allowed());
        assert!(!a
            .authorize(&path_check("bob", "/healthz", "post"))
            .is_allowed());
        // a path entry does not decide a resource check, nor the reverse
        assert!(!a
            .authorize(&resource_check("bob", "", "healthz", "", "get"))
            .is_allowed());
        assert!(!a
            .authorize(&path_check("bob", "endpoints", "create"))
            .is_allowed());
        assert_eq!(
            a.authorize(&resource_check("x", "apps", "deployments", "", "delete")),
            Decision::deny("no")
        );
    }

    #[test]
    fn first_matching_entry_decides() {
        let a = FixedAuthorizer::from_json(&json!([
            {"resource": "pods", "verb": "get", "allowed": false, "reason": "first"},
            {"resource": "pods", "verb": "get", "allowed": true, "reason": "second"},
        ]))
        .unwrap();
        assert_eq!(
            a.authorize(&resource_check("u", "", "pods", "", "get")),
            Decision::deny("first")
        );
    }

    #[test]
    fn absent_list_denies_everything() {
        let a = FixedAuthorizer::from_json(&Json::Null).unwrap();
        assert!(!a
            .authorize(&resource_check("u", "", "pods", "", "get"))
            .is_allowed());
    }

    #[test]
    fn malformed_lists_are_reported() {
        let e = FixedAuthorizer::from_json(&json!([{"resource": "pods", "allowed": true}]))
            .unwrap_err();
        assert!(e.contains("entry 0") && e.contains("verb"), "{e}");
        let e = FixedAuthorizer::from_json(&json!([{"verb": "get", "allowed": true, "colour": 1}]))
            .unwrap_err();
        assert!(e.contains("colour"), "{e}");
        assert!(FixedAuthorizer::from_json(&json!({"verb": "get"})).is_err());
    }

    struct Counting(AtomicUsize);

    impl Authorizer for Counting {
        fn authorize(&self, _: &AuthorizationAttributes) -> Decision {
            self.0.fetch_add(1, Ordering::SeqCst);
            Decision::allow("")
        }
    }

    #[test]
    fn caching_asks_once_per_equivalent_check() {
        // Upstream caching_authorizer.go: group and extra order do not make checks distinct.
        let inner = Counting(AtomicUsize::new(0));
        let cache = CachingAuthorizer::new(&inner);
        let mut a = resource_check("u", "", "pods", "", "get");
        a.user.groups = vec!["b".into(), "a".into()];
        let mut b = a.clone();
        b.user.groups = vec!["a".into(), "b".into()];
        assert!(cache.authorize(&a).is_allowed());
        assert!(cache.authorize(&b).is_allowed());
        assert_eq!(inner.0.load(Ordering::SeqCst), 1);
        cache.authorize(&resource_check("u", "", "pods", "", "list"));
        assert_eq!(inner.0.load(Ordering::SeqCst), 2);
    }
}
