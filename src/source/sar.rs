//! CEL `authorizer` checks answered by the API server's
//! SubjectAccessReviews, for the user the check names (the request's
//! `userInfo`, or the service account of `authorizer.serviceAccount`),
//! cached briefly across requests.
//!
//! Upstream kube-apiserver asks its own authorizer chain; a webhook asks
//! the same chain through `authorization.k8s.io/v1` SubjectAccessReviews.
//! A failed review is a no-opinion decision carrying the error, as
//! upstream's webhook authorizer answers.

use crate::authorizer::{
    AuthorizationAttributes, AuthorizationTarget, Authorizer, Decision, DecisionKind,
};
use k8s_openapi::api::authorization::v1 as authz;
use kube::api::{Api, PostParams};
use kube::Client;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a decision is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);

/// Longest wait for one review.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Most decisions cached (the cache is emptied past it).
const CACHE_LIMIT: usize = 10_000;

/// Asks the API server, caching each answer for [`CACHE_TTL`].
pub struct SubjectAccessReviewAuthorizer {
    client: Client,
    runtime: tokio::runtime::Handle,
    cache: Mutex<HashMap<String, (Instant, Decision)>>,
}

impl std::fmt::Debug for SubjectAccessReviewAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubjectAccessReviewAuthorizer")
            .finish_non_exhaustive()
    }
}

impl SubjectAccessReviewAuthorizer {
    /// An authorizer posting through `client` on `runtime` (checks run on
    /// the evaluation threads, outside the runtime).
    pub fn new(client: Client, runtime: tokio::runtime::Handle) -> Self {
        SubjectAccessReviewAuthorizer {
            client,
            runtime,
            cache: Mutex::new(HashMap::new()),
        }
    }

    fn ask(
        &self,
        review: authz::SubjectAccessReview,
    ) -> Result<authz::SubjectAccessReviewStatus, String> {
        let api: Api<authz::SubjectAccessReview> = Api::all(self.client.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        self.runtime.spawn(async move {
            let answer = api.create(&PostParams::default(), &review).await;
            let _ = tx.send(answer);
        });
        match rx.recv_timeout(REVIEW_TIMEOUT) {
            Ok(Ok(r)) => r
                .status
                .ok_or_else(|| "SubjectAccessReview without status".into()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("SubjectAccessReview timed out".into()),
        }
    }
}

/// The SubjectAccessReview of a check.
pub fn review_of(a: &AuthorizationAttributes) -> authz::SubjectAccessReview {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let mut spec = authz::SubjectAccessReviewSpec {
        user: non_empty(&a.user.username),
        uid: non_empty(&a.user.uid),
        groups: (!a.user.groups.is_empty()).then(|| a.user.groups.clone()),
        extra: (!a.user.extra.is_empty()).then(|| {
            a.user
                .extra
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }),
        ..Default::default()
    };
    match &a.target {
        AuthorizationTarget::Resource(r) => {
            spec.resource_attributes = Some(authz::ResourceAttributes {
                group: Some(r.api_group.clone()),
                version: non_empty(&r.api_version),
                resource: non_empty(&r.resource),
                subresource: non_empty(&r.subresource),
                namespace: non_empty(&r.namespace),
                name: non_empty(&r.name),
                verb: Some(a.verb.clone()),
                field_selector: non_empty(&r.field_selector).map(|raw| {
                    authz::FieldSelectorAttributes {
                        raw_selector: Some(raw),
                        requirements: None,
                    }
                }),
                label_selector: non_empty(&r.label_selector).map(|raw| {
                    authz::LabelSelectorAttributes {
                        raw_selector: Some(raw),
                        requirements: None,
                    }
                }),
            });
        }
        AuthorizationTarget::NonResource { path } => {
            spec.non_resource_attributes = Some(authz::NonResourceAttributes {
                path: Some(path.clone()),
                verb: Some(a.verb.clone()),
            });
        }
    }
    authz::SubjectAccessReview {
        spec,
        ..Default::default()
    }
}

/// The decision a review's status gives.
pub fn decision_of(status: &authz::SubjectAccessReviewStatus) -> Decision {
    let kind = if status.allowed {
        DecisionKind::Allow
    } else if status.denied == Some(true) {
        DecisionKind::Deny
    } else {
        DecisionKind::NoOpinion
    };
    Decision {
        kind,
        reason: status.reason.clone().unwrap_or_default(),
        error: status
            .evaluation_error
            .as_deref()
            .map(authorizer_error)
            .filter(|e| !e.is_empty()),
    }
}

/// What the SubjectAccessReview API appends to the authorizer's error when
/// it could not parse a selector (upstream `BuildEvaluationError`). The
/// built-in plugin hands the parse error to the authorizer, which ignores
/// it: `.error()` there is the authorizer's error alone.
const SELECTOR_PARSE_NOTES: [&str; 4] = [
    "spec.resourceAttributes.fieldSelector ignored due to parse error",
    "spec.resourceAttributes.fieldSelector partially ignored due to parse error",
    "spec.resourceAttributes.labelSelector ignored due to parse error",
    "spec.resourceAttributes.labelSelector partially ignored due to parse error",
];

/// The authorizer's own error in a review's `evaluationError`.
fn authorizer_error(evaluation_error: &str) -> String {
    let mut rest = evaluation_error;
    while let Some(note) = SELECTOR_PARSE_NOTES.iter().find(|n| rest.ends_with(*n)) {
        rest = rest[..rest.len() - note.len()].trim_end_matches("; ");
    }
    rest.to_string()
}

impl Authorizer for SubjectAccessReviewAuthorizer {
    fn may_block(&self) -> bool {
        true
    }

    fn authorize(&self, attributes: &AuthorizationAttributes) -> Decision {
        let review = review_of(attributes);
        // The review's JSON is the cache key: same user, groups, verb, target.
        let key = serde_json::to_string(&review.spec).unwrap_or_default();
        let now = Instant::now();
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, d)) = cache.get(&key) {
                if now.duration_since(*at) < CACHE_TTL {
                    return d.clone();
                }
            }
        }
        let decision = match self.ask(review) {
            Ok(status) => decision_of(&status),
            Err(e) => {
                tracing::warn!(error = %e, "SubjectAccessReview failed");
                return Decision {
                    kind: DecisionKind::NoOpinion,
                    reason: String::new(),
                    error: Some(e),
                };
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, (now, decision.clone()));
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authorizer::ResourceAttributes;
    use crate::request::UserInfo;
    use serde_json::json;

    #[test]
    fn a_check_becomes_the_review_upstream_sends() {
        // Upstream webhook authorizer: resourceAttributes / nonResourceAttributes
        // with the user's name, uid, groups and extra.
        let user = UserInfo {
            username: "alice".into(),
            uid: "u1".into(),
            groups: vec!["dev".into()],
            extra: [("scopes".to_string(), vec!["x".to_string()])].into(),
        };
        let check = AuthorizationAttributes {
            user: user.clone(),
            verb: "get".into(),
            target: AuthorizationTarget::Resource(ResourceAttributes {
                api_group: "apps".into(),
                api_version: "*".into(),
                resource: "deployments".into(),
                subresource: "scale".into(),
                namespace: "ns".into(),
                name: "web".into(),
                label_selector: "app=web".into(),
                ..Default::default()
            }),
        };
        let review = serde_json::to_value(review_of(&check)).unwrap();
        assert_eq!(
            review["spec"],
            json!({"user": "alice", "uid": "u1", "groups": ["dev"], "extra": {"scopes": ["x"]},
                "resourceAttributes": {"group": "apps", "version": "*", "resource": "deployments",
                    "subresource": "scale", "namespace": "ns", "name": "web", "verb": "get",
                    "labelSelector": {"rawSelector": "app=web"}}})
        );
        let path = AuthorizationAttributes {
            user,
            verb: "get".into(),
            target: AuthorizationTarget::NonResource {
                path: "/healthz".into(),
            },
        };
        let review = serde_json::to_value(review_of(&path)).unwrap();
        assert_eq!(
            review["spec"]["nonResourceAttributes"],
            json!({"path": "/healthz", "verb": "get"})
        );
    }

    #[test]
    fn statuses_become_decisions() {
        let status = |v: serde_json::Value| -> authz::SubjectAccessReviewStatus {
            serde_json::from_value(v).unwrap()
        };
        let d = decision_of(&status(json!({"allowed": true, "reason": "rbac"})));
        assert_eq!(d, Decision::allow("rbac"));
        let d = decision_of(&status(
            json!({"allowed": false, "denied": true, "reason": "no"}),
        ));
        assert_eq!(d, Decision::deny("no"));
        let d = decision_of(&status(
            json!({"allowed": false, "evaluationError": "boom"}),
        ));
        assert_eq!(d.kind, DecisionKind::NoOpinion);
        assert_eq!(d.error.as_deref(), Some("boom"));
        // What the API appends for a selector it cannot parse (upstream
        // BuildEvaluationError) is not the authorizer's error.
        let d = decision_of(&status(json!({"allowed": false, "evaluationError":
            "spec.resourceAttributes.labelSelector ignored due to parse error"})));
        assert_eq!(d.error, None);
        let d = decision_of(&status(json!({"allowed": false, "evaluationError":
            "boom; spec.resourceAttributes.fieldSelector partially ignored due to parse error; \
             spec.resourceAttributes.labelSelector ignored due to parse error"})));
        assert_eq!(d.error.as_deref(), Some("boom"));
    }
}
