//! The MutatingWebhookConfiguration kmutate manages, as far as kmutate
//! reads and writes it: each webhook's `rules`, and the ceiling the
//! operator puts on them in an annotation. Everything else in it (the
//! selectors, the client configuration, the failure policy) is the
//! operator's and is never written.

use crate::matching::webhook_rules::{covers, within, WebhookRule};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// The annotation holding the most the managed rules may send (a JSON or
/// YAML list of rules). Without it, anything a policy matches.
pub const CEILING_ANNOTATION: &str = "kmutate.dev/allowed-rules";

/// The field manager of kmutate's writes (shown in `managedFields`).
pub const FIELD_MANAGER: &str = "kmutate-webhook-rules";

/// What kmutate reads of the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// The object's resourceVersion (a write is refused if it changed).
    pub resource_version: String,
    /// Each webhook's name and rules.
    pub webhooks: Vec<(String, Vec<WebhookRule>)>,
    /// The operator's ceiling (none: no limit).
    pub ceiling: Option<Vec<WebhookRule>>,
}

/// A configuration kmutate cannot manage.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The API refused or failed a request.
    #[error("MutatingWebhookConfiguration {name}: {source}")]
    Api {
        /// The configuration.
        name: String,
        /// What the API said.
        source: kube::Error,
    },
    /// The ceiling annotation does not hold rules.
    #[error("MutatingWebhookConfiguration {name}: annotation {CEILING_ANNOTATION}: {problem}")]
    Ceiling {
        /// The configuration.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl Registration {
    /// The configuration `name` (none when it does not exist).
    pub async fn read(
        api: &Api<MutatingWebhookConfiguration>,
        name: &str,
    ) -> Result<Option<Registration>, RegistrationError> {
        let found = api
            .get_opt(name)
            .await
            .map_err(|source| RegistrationError::Api {
                name: name.into(),
                source,
            })?;
        found.map(|c| Registration::of(name, &c)).transpose()
    }

    fn of(name: &str, c: &MutatingWebhookConfiguration) -> Result<Registration, RegistrationError> {
        let ceiling = c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CEILING_ANNOTATION))
            .map(|text| parse_ceiling(text))
            .transpose()
            .map_err(|problem| RegistrationError::Ceiling {
                name: name.into(),
                problem,
            })?;
        let webhooks = c
            .webhooks
            .iter()
            .flatten()
            .map(|w| {
                let rules = serde_json::to_value(w.rules.as_deref().unwrap_or_default())
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
                    .unwrap_or_default();
                (w.name.clone(), rules)
            })
            .collect();
        Ok(Registration {
            resource_version: c.metadata.resource_version.clone().unwrap_or_default(),
            webhooks,
            ceiling,
        })
    }

    /// `rules` as far as the ceiling lets them be written.
    pub fn bounded(&self, rules: &[WebhookRule]) -> Vec<WebhookRule> {
        match &self.ceiling {
            Some(ceiling) => within(rules, ceiling),
            None => rules.to_vec(),
        }
    }

    /// Whether every webhook sends what `rules` (bounded) send.
    pub fn sends(&self, rules: &[WebhookRule]) -> bool {
        let wanted = self.bounded(rules);
        self.webhooks.iter().all(|(_, have)| covers(have, &wanted))
    }

    /// Whether every webhook sends exactly what `rules` (bounded) send.
    pub fn sends_exactly(&self, rules: &[WebhookRule]) -> bool {
        let wanted = self.bounded(rules);
        self.webhooks
            .iter()
            .all(|(_, have)| covers(have, &wanted) && covers(&wanted, have))
    }

    /// Writes `rules` (bounded) as every webhook's rules, unless the
    /// configuration changed since it was read; returns it as written.
    pub async fn write(
        &self,
        api: &Api<MutatingWebhookConfiguration>,
        name: &str,
        rules: &[WebhookRule],
    ) -> Result<Registration, RegistrationError> {
        let wanted = self.bounded(rules);
        // A strategic merge patch: webhooks merge by name, so only their
        // rules change, and the resourceVersion makes it conditional.
        let patch = json!({
            "metadata": {"resourceVersion": self.resource_version},
            "webhooks": self.webhooks.iter()
                .map(|(webhook, _)| json!({"name": webhook, "rules": wanted}))
                .collect::<Vec<_>>(),
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let written = api
            .patch(name, &params, &Patch::Strategic(&patch))
            .await
            .map_err(|source| RegistrationError::Api {
                name: name.into(),
                source,
            })?;
        Registration::of(name, &written)
    }
}

/// The rules of the ceiling annotation's text (JSON or YAML).
fn parse_ceiling(text: &str) -> Result<Vec<WebhookRule>, String> {
    let value: serde_json::Value = crate::api::load::parse_documents(text)?
        .into_iter()
        .next()
        .ok_or("empty: expected a list of rules")?;
    serde_json::from_value(value).map_err(|e| format!("expected a list of rules: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configuration(
        annotation: Option<&str>,
        rules: serde_json::Value,
    ) -> MutatingWebhookConfiguration {
        let mut c = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kmutate", "resourceVersion": "7"},
            "webhooks": [{"name": "mutate.kmutate.dev", "rules": rules,
                "clientConfig": {"url": "https://127.0.0.1/mutate"},
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
        });
        if let Some(a) = annotation {
            c["metadata"]["annotations"] = json!({CEILING_ANNOTATION: a});
        }
        serde_json::from_value(c).unwrap()
    }

    fn rules(v: serde_json::Value) -> Vec<WebhookRule> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_ceiling_bounds_what_is_wanted() {
        let ceiling = "- {apiGroups: ['*'], apiVersions: ['*'], operations: [CREATE, UPDATE], resources: ['*']}";
        let read = Registration::of("kmutate", &configuration(Some(ceiling), json!([]))).unwrap();
        let wanted = rules(json!([
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "CONNECT"], "resources": ["pods", "pods/exec"]}
        ]));
        assert_eq!(
            read.bounded(&wanted),
            rules(
                json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "*"}])
            )
        );
        // Nothing is sent yet: the rules are empty.
        assert!(!read.sends(&wanted));
        assert!(read.sends(&[]) && read.sends_exactly(&[]));
    }

    #[test]
    fn written_rules_that_cover_more_send_but_not_exactly() {
        let read = Registration::of(
            "kmutate",
            &configuration(
                None,
                json!([{"apiGroups": ["*"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["*"]}]),
            ),
        )
        .unwrap();
        assert_eq!(read.resource_version, "7");
        let pods = rules(
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]),
        );
        assert!(read.sends(&pods));
        assert!(!read.sends_exactly(&pods));
    }

    #[test]
    fn a_ceiling_that_is_not_rules_is_named() {
        let err =
            Registration::of("kmutate", &configuration(Some("{a: 1}"), json!([]))).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "MutatingWebhookConfiguration kmutate: annotation kmutate.dev/allowed-rules: expected a list of rules"
            ),
            "{err}"
        );
    }
}
