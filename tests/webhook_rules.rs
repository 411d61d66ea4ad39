//! Issue 49's first part on the real kube-apiserver v1.36.2: the rules
//! `kmutate check --webhook-rules` computes for the policy library, used as
//! a MutatingWebhookConfiguration's rules, are accepted by the apiserver,
//! still send kmutate a Pod create (mutated as the library's seccomp policy
//! says), and send it no ConfigMap, Lease or Event write at all (its
//! request counter does not move).

mod support;

use kmutate::engine::EngineSources;
use kmutate::matching::webhook_rules::webhook_rules;
use kmutate::registration::lease::LeaseLock;
use serde_json::{json, Value};
use std::collections::BTreeMap;
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

/// The Namespace `NS` as the library's policies read it, written to
/// `dir/resources` for kmutate to read too.
fn library_namespace(dir: &std::path::Path) -> Value {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NS, "labels": {"team": "shop", "example.com/cost-center": "cc-1",
            "kubernetes.io/metadata.name": NS}}});
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(dir.join("resources/namespace.json"), namespace.to_string()).unwrap();
    namespace
}

#[test]
fn computed_rules_send_what_the_library_matches_and_nothing_else() {
    let Some(kas) = Kas::start("webhook-rules") else {
        return;
    };
    let dir = scratch("webhook_rules", "library");
    let namespace = library_namespace(&dir);
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
    let namespace = library_namespace(&dir);
    std::fs::create_dir_all(dir.join("extra")).unwrap();
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
        // Another replica does not take it while it is renewed.
        let mut other = LeaseLock::new(client.clone(), "default", "kmutate-webhook-rules", "other");
        assert!(!other.hold().await.unwrap());

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

        // The Lease is given up at shutdown: another replica takes it at once.
        assert!(!other.hold().await.unwrap());
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
        assert!(other.hold().await.unwrap());
        let taken =
            serde_json::to_value(lease.get("kmutate-webhook-rules").await.unwrap()).unwrap();
        assert_eq!(taken["spec"]["holderIdentity"], "other");
        assert_eq!(taken["spec"]["leaseTransitions"], 1);
    });
}

/// Benchmark (by hand; issue 49's figures): writes no policy matches, side
/// by side in one kube-apiserver, in three namespaces written in turn:
/// `none` is matched by no webhook configuration (the baseline), `managed`
/// by the configuration kmutate keeps (`--manage-webhook`, the library
/// loaded), `all` by one with deploy/'s unmanaged rules (every CREATE and
/// UPDATE) calling the same kmutate. Per namespace and round: a dry-run
/// ConfigMap create, Event create and Lease update; prints the median and
/// 90th percentile of each and how many calls kmutate received.
///
/// `KMUTATE_REQUIRE_UPSTREAM=1 cargo test --release --test webhook_rules -- --ignored --nocapture`
#[test]
#[ignore = "benchmark: run by hand"]
fn writes_no_policy_matches_cost_what_they_cost_without_a_webhook() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{ConfigMap, Event};
    use kube::api::{Api, PostParams};
    let rounds: usize = std::env::var("KMUTATE_RULES_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let Some(kas) = Kas::start("webhook-rules-bench") else {
        return;
    };
    let dir = scratch("webhook_rules", "bench");
    let sources = EngineSources {
        policies: vec![repo("policies")],
        bindings: vec![repo("bindings")],
        resources: vec![repo("examples/namespace.yaml")],
    };
    let modes = ["none", "managed", "all"];
    run(Duration::from_secs(1800), async {
        let client = kas.client().await;
        for mode in modes {
            kas::create(
                &client,
                &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": format!("bench-{mode}")}}),
            )
            .await
            .unwrap();
            kas::create(
                &client,
                &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "node-1", "namespace": format!("bench-{mode}")},
                "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40}}),
            )
            .await
            .unwrap();
        }
        let mut serve = config(&dir, sources);
        serve.api.kube = Some(kas.config().await);
        serve.manage_webhook = Some(kmutate::webhook::ManagedWebhook {
            name: "kmutate".into(),
            lease_namespace: Some("default".into()),
        });
        let server = started(serve).await;
        let only = |mode: &str| json!({"matchLabels": {"kubernetes.io/metadata.name": format!("bench-{mode}")}});
        let mut managed = deploy_webhook_calling(&server);
        managed["webhooks"][0]["namespaceSelector"] = only("managed");
        kas::create(&client, &managed).await.unwrap();
        let mut all = deploy_webhook_calling(&server);
        all["metadata"] = json!({"name": "kmutate-all"});
        all["webhooks"][0]["namespaceSelector"] = only("all");
        kas::create(&client, &all).await.unwrap();
        let loaded = kmutate::api::load::load_paths(&[repo("policies"), repo("bindings")]);
        let library =
            serde_json::to_value(webhook_rules(&loaded.policies, &loaded.bindings)).unwrap();
        eventually(Duration::from_secs(20), || async {
            (rules_of(&client, "kmutate").await == library).then_some(())
        })
        .await
        .expect("the managed rules never narrowed");
        tokio::time::sleep(Duration::from_secs(2)).await;

        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let mut took: BTreeMap<(&str, &str), Vec<Duration>> = BTreeMap::new();
        let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
        for round in 0..rounds + 30 {
            for mode in modes {
                let ns = format!("bench-{mode}");
                let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
                let events: Api<Event> = Api::namespaced(client.clone(), &ns);
                let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
                let configmap: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("c-{round}")}, "data": {"k": "v"}}))
                .unwrap();
                let event: Event = serde_json::from_value(json!({
                    "metadata": {"name": format!("e-{round}")},
                    "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
                    "reason": "Bench", "message": "m"}))
                .unwrap();
                let mut lease = leases.get("node-1").await.unwrap();
                lease.spec.as_mut().unwrap().lease_duration_seconds = Some(40 + (round % 7) as i32);
                let before = server.requests_received();
                let mut timed = |kind, at: std::time::Instant| {
                    if round >= 30 {
                        took.entry((mode, kind)).or_default().push(at.elapsed());
                    }
                };
                let at = std::time::Instant::now();
                configmaps.create(&dry_run, &configmap).await.unwrap();
                timed("ConfigMap create", at);
                let at = std::time::Instant::now();
                events.create(&dry_run, &event).await.unwrap();
                timed("Event create", at);
                let at = std::time::Instant::now();
                leases.replace("node-1", &dry_run, &lease).await.unwrap();
                timed("Lease update", at);
                if round >= 30 {
                    *calls.entry(mode).or_default() += server.requests_received() - before;
                }
            }
        }
        println!("{rounds} rounds; per write, median / 90th percentile in ms:");
        for ((mode, kind), mut times) in took {
            times.sort();
            let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
            println!("{mode:>8} {kind:<17} {:6.3} / {:6.3}", at(0.5), at(0.9));
        }
        println!("calls kmutate received: {calls:?}");
        assert_eq!(calls["none"], 0);
        assert_eq!(calls["managed"], 0);
        assert_eq!(calls["all"], 3 * rounds as u64);
        server.shutdown().await;
    });
}
