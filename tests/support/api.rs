//! Helpers of the API source tests: the kinds the fake serves, a fake
//! with the `default` Namespace, a server configuration reading from it.

use super::fake_api::{FakeApi, Kind};
use super::{config, until_labels};
use kmutate::engine::EngineSources;
use kmutate::source::api::ApiConfig;
use kmutate::source::SourceKind;
use kmutate::webhook::client::Connection;
use kmutate::webhook::ServeConfig;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub const V1: &str = "admissionregistration.k8s.io/v1";

pub fn namespaces() -> Kind {
    Kind::new("", "v1", "namespaces", "Namespace", false)
}

pub fn config_maps() -> Kind {
    Kind::new("", "v1", "configmaps", "ConfigMap", true)
}

pub fn policy_kinds(group_version: &str) -> (Kind, Kind) {
    let (group, version) = group_version.split_once('/').unwrap();
    (
        Kind::new(
            group,
            version,
            "mutatingadmissionpolicies",
            "MutatingAdmissionPolicy",
            false,
        ),
        Kind::new(
            group,
            version,
            "mutatingadmissionpolicybindings",
            "MutatingAdmissionPolicyBinding",
            false,
        ),
    )
}

/// A fake serving Namespaces, ConfigMaps and the policy API `group_version`,
/// with Namespace `default` (label env=prod).
pub async fn fake_with(group_version: &str) -> (Arc<FakeApi>, Kind, Kind) {
    let (policies, bindings) = policy_kinds(group_version);
    let fake = FakeApi::start(vec![
        namespaces(),
        config_maps(),
        policies.clone(),
        bindings.clone(),
    ])
    .await;
    fake.put(
        &namespaces(),
        json!({"metadata": {"name": "default", "labels": {"env": "prod"}}}),
    );
    (fake, policies, bindings)
}

pub fn api_config(dir: &Path, fake: &FakeApi) -> ServeConfig {
    ServeConfig {
        source: SourceKind::Api,
        api: ApiConfig {
            kube: Some(fake.kube_config()),
            ..ApiConfig::default()
        },
        ..config(dir, EngineSources::default())
    }
}

pub async fn wait_labels(conn: &mut Connection, want: Value) -> Duration {
    until_labels(conn, "default", Duration::from_secs(30), |l| *l == want)
        .await
        .unwrap_or_else(|a| panic!("labels never became {want}: last answer {a:?}"))
}
