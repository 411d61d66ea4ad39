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

        let mut pod: Value = kmutate::api::load::parse_documents(
            &std::fs::read_to_string(repo("examples/pod.yaml")).unwrap(),
        )
        .unwrap()
        .remove(0);
        pod["metadata"]["namespace"] = json!(NS);
        // In force once a Pod comes back mutated.
        let (created, _) = eventually(Duration::from_secs(30), || async {
            let o = kas::dry_run_create(&client, &pod).await.ok()?;
            (o["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault")
                .then_some(o)
        })
        .await
        .expect("the webhook never mutated a Pod");
        assert_eq!(
            created["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );

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
