//! Issue 49's first part on the real kube-apiserver v1.36.2: the rules
//! `kmutate check --webhook-rules` computes for the policy library, used as
//! a MutatingWebhookConfiguration's rules, are accepted by the apiserver,
//! still send kmutate a Pod create (mutated as the library's seccomp policy
//! says), and send it no ConfigMap, Lease or Event write at all (its
//! request counter does not move).

mod support;

use kmutate::engine::EngineSources;
use kmutate::matching::webhook_rules::webhook_rules;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::kas::{self, Kas};
use support::{config, eventually, run, scratch, started};

const NS: &str = "rules-test";

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `examples/pod.yaml` in [`NS`], once a dry-run create of it comes back
/// mutated by the library's seccomp policy (the webhook is in force).
async fn mutated_pod(client: &kube::Client) -> Value {
    let mut pod: Value = kmutate::api::load::parse_documents(
        &std::fs::read_to_string(repo("examples/pod.yaml")).unwrap(),
    )
    .unwrap()
    .remove(0);
    pod["metadata"]["namespace"] = json!(NS);
    eventually(Duration::from_secs(30), || async {
        let o = kas::dry_run_create(client, &pod).await.ok()?;
        (o["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault").then_some(())
    })
    .await
    .expect("the webhook never mutated a Pod");
    pod
}

#[test]
fn computed_rules_send_what_the_library_matches_and_nothing_else() {
    let Some(kas) = Kas::start("webhook-rules") else {
        return;
    };
    let dir = scratch("webhook_rules", "library");
    // The Namespace, as the library's policies read it.
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"team": "shop", "example.com/cost-center": "cc-1",
            "kubernetes.io/metadata.name": NS}}});
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(dir.join("resources/namespace.json"), namespace.to_string()).unwrap();
    let sources = EngineSources {
        policies: vec![repo("policies")],
        bindings: vec![repo("bindings")],
        resources: vec![dir.join("resources")],
    };
    let loaded = kmutate::api::load::load_paths(&[repo("policies"), repo("bindings")]);
    let rules = webhook_rules(&loaded.policies, &loaded.bindings);
    assert!(!rules.is_empty());
    run(Duration::from_secs(300), async {
        let client = kas.client().await;
        kas::create(&client, &namespace).await.unwrap();
        kas::namespace_with_service_account(&client, NS).await;
        let server = started(config(&dir, sources)).await;
        let ca = std::fs::read(server.ca_bundle().expect("self-signed CA")).unwrap();
        use base64::Engine as _;
        let webhook = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "kmutate"},
            "webhooks": [{"name": "mutate.kmutate.dev",
                "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate", server.addr().port()),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
                "rules": serde_json::to_value(&rules).unwrap(),
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
                "matchPolicy": "Equivalent", "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
                "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]});
        kas::create(&client, &webhook).await.unwrap();

        let pod = mutated_pod(&client).await;

        let before = server.requests_received();
        let writes = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}, "data": {"k": "v"}}),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "namespace": NS},
                "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40}}),
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": NS},
                "involvedObject": {"kind": "Pod", "name": "debug", "namespace": NS}, "reason": "Test", "message": "m"}),
        ];
        for write in &writes {
            kas::create(&client, write).await.unwrap();
        }
        assert_eq!(
            server.requests_received(),
            before,
            "kmutate was called for writes no policy matches"
        );
        kas::dry_run_create(&client, &pod).await.unwrap();
        assert_eq!(
            server.requests_received(),
            before + 1,
            "a Pod create reaches kmutate"
        );
        server.shutdown().await;
    });
}

/// A policy for ConfigMaps, added and removed while kmutate serves.
const CONFIGMAP_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: configmaps-checked}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"checked": "yes"}}}'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: configmaps-checked}
spec:
  policyName: configmaps-checked
"#;

/// `deploy/webhook.yaml`, calling the in-process `server` on loopback.
fn deploy_webhook_calling(server: &kmutate::webhook::Server) -> Value {
    let mut webhook: Value = kmutate::api::load::parse_documents(
        &std::fs::read_to_string(repo("deploy/webhook.yaml")).unwrap(),
    )
    .unwrap()
    .remove(0);
    let ca = std::fs::read(server.ca_bundle().expect("self-signed CA")).unwrap();
    use base64::Engine as _;
    webhook["webhooks"][0]["clientConfig"] = json!({
        "url": format!("https://127.0.0.1:{}/mutate", server.addr().port()),
        "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)});
    webhook
}

async fn rules_of(client: &kube::Client, name: &str) -> Value {
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let api: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(client.clone());
    let o = api.get(name).await.unwrap();
    serde_json::to_value(&o).unwrap()["webhooks"][0]["rules"].clone()
}

#[test]
fn managed_rules_follow_the_policies_kmutate_serves() {
    let Some(kas) = Kas::start("webhook-rules-managed") else {
        return;
    };
    let dir = scratch("webhook_rules", "managed");
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"team": "shop", "example.com/cost-center": "cc-1",
            "kubernetes.io/metadata.name": NS}}});
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::create_dir_all(dir.join("extra")).unwrap();
    std::fs::write(dir.join("resources/namespace.json"), namespace.to_string()).unwrap();
    let sources = EngineSources {
        policies: vec![repo("policies"), dir.join("extra")],
        bindings: vec![repo("bindings")],
        resources: vec![dir.join("resources")],
    };
    let loaded = kmutate::api::load::load_paths(&[repo("policies"), repo("bindings")]);
    let library_rules =
        serde_json::to_value(webhook_rules(&loaded.policies, &loaded.bindings)).unwrap();
    run(Duration::from_secs(300), async {
        let client = kas.client().await;
        kas::create(&client, &namespace).await.unwrap();
        kas::namespace_with_service_account(&client, NS).await;
        let mut serve = config(&dir, sources);
        serve.api.kube = Some(kas.config().await);
        serve.manage_webhook = Some(kmutate::webhook::ManagedWebhook {
            name: "kmutate".into(),
            lease_namespace: Some("default".into()),
        });
        let server = started(serve).await;
        // Registered as deploy/ has it: every CREATE and UPDATE at first.
        kas::create(&client, &deploy_webhook_calling(&server))
            .await
            .unwrap();
        // kmutate narrows it to what the library matches.
        let narrowed = eventually(Duration::from_secs(20), || async {
            let rules = rules_of(&client, "kmutate").await;
            (rules == library_rules).then_some(())
        })
        .await;
        assert!(
            narrowed.is_some(),
            "the rules became {}, not the library's {library_rules}",
            rules_of(&client, "kmutate").await
        );
        // The Lease names this replica.
        let lease: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(client.clone(), "default");
        let held = serde_json::to_value(lease.get("kmutate-webhook-rules").await.unwrap()).unwrap();
        assert!(held["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| !h.is_empty()));

        mutated_pod(&client).await;

        // Lease updates, Events and ConfigMaps never reach kmutate.
        let before = server.requests_received();
        let lease_object = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "node-1", "namespace": NS},
            "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40}});
        kas::create(&client, &lease_object).await.unwrap();
        let mut renewed = lease_object.clone();
        renewed["spec"]["leaseDurationSeconds"] = json!(41);
        kas::apply(&client, &renewed).await;
        kas::create(
            &client,
            &json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": NS},
            "involvedObject": {"kind": "Pod", "name": "debug", "namespace": NS},
            "reason": "Test", "message": "m"}),
        )
        .await
        .unwrap();
        let configmap = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS}, "data": {"k": "v"}})
        };
        let plain = kas::create(&client, &configmap("before")).await.unwrap();
        assert_eq!(plain["metadata"]["labels"]["checked"], Value::Null);
        assert_eq!(
            server.requests_received(),
            before,
            "kmutate was called for writes no policy matches"
        );

        // A policy for ConfigMaps: the next ConfigMap is mutated within 2 s.
        std::fs::write(dir.join("extra/configmaps.yaml"), CONFIGMAP_POLICY).unwrap();
        let (_, took) = eventually(Duration::from_secs(10), || async {
            let o = kas::dry_run_create(&client, &configmap("after"))
                .await
                .ok()?;
            (o["metadata"]["labels"]["checked"] == "yes").then_some(())
        })
        .await
        .expect("a ConfigMap policy added never took effect");
        assert!(
            took < Duration::from_secs(2),
            "the ConfigMap policy took {took:?}"
        );
        let rules = rules_of(&client, "kmutate").await;
        assert!(
            rules.to_string().contains("configmaps"),
            "the rules did not widen to ConfigMaps: {rules}"
        );

        // Removed: the rules narrow back, and ConfigMaps stop reaching kmutate.
        std::fs::remove_file(dir.join("extra/configmaps.yaml")).unwrap();
        eventually(Duration::from_secs(20), || async {
            (rules_of(&client, "kmutate").await == library_rules).then_some(())
        })
        .await
        .expect("the rules never narrowed back");
        let before = server.requests_received();
        let o = kas::dry_run_create(&client, &configmap("removed"))
            .await
            .unwrap();
        assert_eq!(o["metadata"]["labels"]["checked"], Value::Null);
        assert_eq!(
            server.requests_received(),
            before,
            "a ConfigMap reached kmutate after its policy went"
        );

        // The Lease is given up at shutdown, for another replica to take.
        server.shutdown().await;
        let released =
            serde_json::to_value(lease.get("kmutate-webhook-rules").await.unwrap()).unwrap();
        assert!(
            released["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{released}"
        );
    });
}
