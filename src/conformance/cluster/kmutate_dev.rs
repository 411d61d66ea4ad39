//! `--implementation kmutate.dev`: the cases' policies and bindings are
//! created as `kmutate.dev/v1` objects (kmutate's own CRDs, installed by
//! the run when the cluster lacks them, and kept), and kmutate's webhook answers:
//! the server of `kmutate serve --source api --policy-api-version
//! kmutate.dev/v1`, started by the runner in its own process on a free
//! port of 127.0.0.1 with a self-signed certificate, and registered with
//! the apiserver by a MutatingWebhookConfiguration whose `caBundle` is that
//! certificate's CA (so the apiserver must run on the same machine). The
//! CEL `authorizer` is answered by the apiserver's RBAC through
//! SubjectAccessReviews, as the builtin plugin answers it.

use super::apiserver::Collection;
use super::plan::Plan;
use crate::webhook::{ServeConfig, Server, TlsSource};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The label of the policy objects the run creates, which the webhook
/// registration leaves out: upstream never admits policy objects through
/// policies, and a policy of one case matching every resource would
/// otherwise act on the (cluster-scoped) policies another case creates.
pub const OWN_OBJECT_LABEL: &str = "kmutate.dev/conformance-policy";

/// The API version of kmutate's policy objects.
pub const API_VERSION: &str = "kmutate.dev/v1";

/// kmutate's CustomResourceDefinitions (`deploy/crds/`), by name.
pub fn crds() -> Result<BTreeMap<String, Json>, String> {
    let mut out = BTreeMap::new();
    for text in [
        include_str!("../../../deploy/crds/mutatingadmissionpolicies.yaml"),
        include_str!("../../../deploy/crds/mutatingadmissionpolicybindings.yaml"),
    ] {
        for crd in crate::api::load::parse_documents(text)? {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            out.insert(name, crd);
        }
    }
    Ok(out)
}

/// The collection of kmutate.dev policies (or bindings, `resource`).
pub fn collection(resource: &str) -> Collection {
    Collection {
        group: "kmutate.dev".into(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: None,
    }
}

/// `plan` with its policies and bindings as kmutate.dev/v1 objects.
pub fn as_kmutate_dev(plan: &mut Plan) {
    for o in &mut plan.policies {
        o.collection = collection(&o.collection.resource);
        o.object["apiVersion"] = Json::from(API_VERSION);
        label_own(&mut o.object);
    }
}

/// Gives `object` the [`OWN_OBJECT_LABEL`].
pub fn label_own(object: &mut Json) {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    if !object["metadata"]["labels"].is_object() {
        object["metadata"]["labels"] = json!({});
    }
    object["metadata"]["labels"][OWN_OBJECT_LABEL] = Json::from("true");
}

/// Starts kmutate's webhook reading kmutate.dev policies from the cluster
/// of `kube`, its certificate in `tls_dir`; waits (at most 60 s) until it
/// has read them.
/// With `managed`, the server keeps that webhook configuration's rules
/// (`--manage-webhook`, its Lease [`lease_name`] in `default`).
pub async fn start_webhook(
    kube: kube::Config,
    tls_dir: &std::path::Path,
    managed: Option<&str>,
) -> Result<Server, String> {
    let config = ServeConfig {
        source: crate::source::SourceKind::Api,
        api: crate::source::api::ApiConfig {
            kube: Some(kube),
            policy_api_version: Some(API_VERSION.into()),
            subject_access_review: true,
        },
        sources: crate::engine::EngineSources::default(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        metrics_listen: None,
        tls: TlsSource::SelfSigned {
            dir: tls_dir.to_path_buf(),
            names: Vec::new(),
        },
        manage_webhook: managed.map(|name| crate::webhook::ManagedWebhook {
            name: name.into(),
            lease_namespace: Some(LEASE_NAMESPACE.into()),
        }),
        ..ServeConfig::new()
    };
    let server = crate::webhook::start(config)
        .await
        .map_err(|e| format!("starting kmutate's webhook: {e}"))?;
    if !server.wait_ready(Duration::from_secs(60)).await {
        return Err("kmutate's webhook is not ready after 60 s".into());
    }
    Ok(server)
}

/// Where the Lease of a managed webhook configuration is.
pub const LEASE_NAMESPACE: &str = "default";

/// The Lease of the managed webhook configuration `name`.
pub fn lease_name(name: &str) -> String {
    format!("{name}-webhook-rules")
}

/// The MutatingWebhookConfiguration `name` sending every request to
/// `server`: every resource and subresource, every operation, cluster-scoped
/// ones too, but the run's own policy objects ([`OWN_OBJECT_LABEL`]); failurePolicy Fail (an unanswered request is a failure, not a
/// pass), reinvocation IfNeeded as the policies' own, sideEffects None (the
/// runner's requests are dry runs). `managed`: those rules are also the
/// ceiling of the rules kmutate keeps.
pub fn webhook_configuration(name: &str, server: &Server, managed: bool) -> Result<Json, String> {
    let ca_path = server
        .ca_bundle()
        .ok_or("kmutate's webhook has no self-signed CA")?;
    let ca = std::fs::read(ca_path).map_err(|e| format!("{}: {e}", ca_path.display()))?;
    use base64::Engine as _;
    let rules = json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"],
        "resources": ["*/*"], "scope": "*"}]);
    let mut metadata = json!({"name": name});
    if managed {
        metadata["annotations"] = json!({
            crate::registration::configuration::CEILING_ANNOTATION: rules.to_string()});
    }
    Ok(json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration", "metadata": metadata,
        "webhooks": [{"name": "mutate.kmutate.dev",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate", server.addr().port()),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
            "rules": rules,
            "objectSelector": {"matchExpressions": [
                {"key": OWN_OBJECT_LABEL, "operator": "DoesNotExist"}]},
            "matchPolicy": "Equivalent", "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 15}]}))
}

/// Where MutatingWebhookConfigurations live.
pub fn webhook_collection() -> Collection {
    Collection {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        resource: "mutatingwebhookconfigurations".into(),
        namespace: None,
    }
}
