//! Issue 44 on the real kube-apiserver v1.36.2, its audit log on: a binding
//! annotated `kmutate.dev/mode: monitor` is evaluated but not applied, its
//! error under failurePolicy Fail is not enforced, and the audit event of
//! the Pod create holds kmutate's `auditAnnotations` naming who changed
//! what (applied) and what the monitored bindings would have done; the
//! client gets the `--warnings=changes` warnings; with `--mode monitor`
//! every Pod is stored exactly as sent.

mod support;

use kmutate::engine::EngineSources;
use kmutate::webhook::{AdmissionMode, WarningsMode};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::kas::{self, Kas};
use support::{config, eventually, metrics_text, run, scratch, started};

const NS: &str = "monitor-test";

/// Policy `name` setting label `key` of created Pods to the CEL `value`,
/// and its binding (annotated `mode` when given).
fn pod_labelling(name: &str, key: &str, value: &str, mode: Option<&str>) -> [Value; 2] {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                format!("Object{{metadata: Object.metadata{{labels: {{{key:?}: {value}}}}}}}")}}]}});
    let mut binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name}});
    if let Some(mode) = mode {
        binding["metadata"]["annotations"] = json!({"kmutate.dev/mode": mode});
    }
    [policy, binding]
}

/// The audit policy: Pod requests at Metadata level (annotations included).
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["pods"]}]
- level: None
"#;

fn audit_flags(dir: &Path) -> Vec<String> {
    std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
    vec![
        format!(
            "--audit-policy-file={}",
            dir.join("audit-policy.yaml").display()
        ),
        format!("--audit-log-path={}", dir.join("audit.log").display()),
    ]
}

/// The annotations of the audit event of the Pod `name`'s create.
fn audit_annotations(kas: &Kas, name: &str) -> Option<Value> {
    let log = std::fs::read_to_string(kas.dir.join("audit.log")).ok()?;
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| {
            e["verb"] == "create"
                && e["stage"] == "ResponseComplete"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["name"] == name
        })
        .map(|e| e["annotations"].clone())
}

/// Creates Pod `name` (labelled `x: y`) through the API; returns the stored
/// Pod and the warnings the client got (none when the create failed, as
/// while the apiserver still calls a stopped webhook).
async fn create_pod(client: &kube::Client, name: &str) -> Option<(Value, Vec<String>)> {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"x": "y"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}});
    let request = hyper::http::Request::post(format!("/api/v1/namespaces/{NS}/pods"))
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&pod).unwrap())
        .unwrap();
    let response = client.send(request.map(Into::into)).await.unwrap();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    let status = response.status();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body: Value = serde_json::from_slice(&body).unwrap();
    status.is_success().then_some((body, warnings))
}

/// kmutate serving the three test policies, registered for Pods in [`NS`],
/// writing PolicyReports.
async fn serve(kas: &Kas, dir: &Path, mode: AdmissionMode) -> kmutate::webhook::Server {
    let sources = EngineSources {
        policies: vec![dir.join("policies")],
        bindings: vec![dir.join("policies")],
        resources: Vec::new(),
    };
    let mut serve = config(dir, sources);
    serve.mode = mode;
    serve.warnings = WarningsMode::Changes;
    serve.policy_reports = Some(Some("default".into()));
    serve.api.kube = Some(kas.config().await);
    let server = started(serve).await;
    let ca = std::fs::read(server.ca_bundle().unwrap()).unwrap();
    use base64::Engine as _;
    let webhook = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration", "metadata": {"name": "kmutate"},
        "webhooks": [{"name": "mutate.kmutate.dev",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate", server.addr().port()),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "matchPolicy": "Equivalent", "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]});
    let client = kas.client().await;
    kas::apply(&client, &webhook).await;
    server
}

#[test]
fn monitored_bindings_are_reported_not_applied_and_answers_say_who_changed_what() {
    let Some(kas) = Kas::start_with("monitor", audit_flags) else {
        return;
    };
    let dir = scratch("monitor", "policies");
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    let documents: Vec<Value> = [
        pod_labelling("applied", "a", "'1'", None),
        pod_labelling("watched", "b", "'2'", Some("monitor")),
        // Fails (no such key) under failurePolicy Fail, monitored.
        pod_labelling("broken", "c", "object.spec.missing", Some("monitor")),
    ]
    .into_iter()
    .flatten()
    .collect();
    std::fs::write(
        dir.join("policies/all.json"),
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": documents}))
            .unwrap(),
    )
    .unwrap();
    run(Duration::from_secs(300), async {
        let client = kas.client().await;
        kas::namespace_with_service_account(&client, NS).await;
        for crd in support::documents(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds/policyreports.yaml"),
        ) {
            kas::apply(&client, &crd).await;
        }
        let server = serve(&kas, &dir, AdmissionMode::Enforce).await;

        // In force once a Pod comes back labelled by `applied`.
        let (pod, warnings) = eventually(Duration::from_secs(30), || async {
            let name = format!("p-{}", rand_suffix());
            let (pod, warnings) = create_pod(&client, &name).await?;
            (pod["metadata"]["labels"]["a"] == "1").then_some((pod, warnings))
        })
        .await
        .expect("the webhook never labelled a Pod")
        .0;
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        // Applied: a; monitored: neither b nor c; the error is not enforced.
        assert_eq!(pod["metadata"]["labels"], json!({"x": "y", "a": "1"}));
        assert_eq!(
            warnings,
            [
                r#"299 - "kmutate: policy applied (binding applied) set metadata.labels.a""#,
                r#"299 - "kmutate: policy broken (binding broken) would have failed (monitor mode: not enforced): expression 'Object{metadata: Object.metadata{labels: {\"c\": object.spec.missing}}}' resulted in error: no such key: missing""#,
                r#"299 - "kmutate: policy watched (binding watched) would have set metadata.labels.b (monitor mode: not applied)""#,
            ]
            .map(String::from)
            .to_vec(),
        );
        let annotations = eventually(Duration::from_secs(10), || async {
            audit_annotations(&kas, &name)
        })
        .await
        .expect("no audit event of the create")
        .0;
        let changes: Value = serde_json::from_str(
            annotations["mutate.kmutate.dev/changes"]
                .as_str()
                .expect("the changes annotation"),
        )
        .unwrap();
        assert_eq!(
            changes,
            json!([{"policy": "applied", "binding": "applied", "set": ["metadata.labels.a"]}])
        );
        let monitored: Value = serde_json::from_str(
            annotations["mutate.kmutate.dev/monitor"]
                .as_str()
                .expect("the monitor annotation"),
        )
        .unwrap();
        assert_eq!(monitored[0]["policy"], "broken");
        assert!(monitored[0]["error"]
            .as_str()
            .unwrap()
            .ends_with("no such key: missing"));
        assert_eq!(
            monitored[1],
            json!({"policy": "watched", "binding": "watched", "set": ["metadata.labels.b"]})
        );
        // The PolicyReport of the namespace lists the monitored results.
        let reports: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
            client.clone(),
            NS,
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk("wgpolicyk8s.io", "v1alpha2", "PolicyReport"),
                "policyreports",
            ),
        );
        let report = eventually(Duration::from_secs(20), || async {
            let report =
                serde_json::to_value(reports.get_opt("kmutate-monitor").await.ok()??).ok()?;
            report["results"]
                .as_array()?
                .iter()
                .any(|r| r["resources"][0]["name"] == name.as_str())
                .then_some(report)
        })
        .await
        .expect("no PolicyReport result for the Pod")
        .0;
        let of_pod: Vec<&Value> = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["resources"][0]["name"] == name.as_str())
            .collect();
        let verdicts: Vec<(&str, &str, &str)> = of_pod
            .iter()
            .map(|r| {
                (
                    r["policy"].as_str().unwrap(),
                    r["rule"].as_str().unwrap(),
                    r["result"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            verdicts,
            [
                ("broken", "broken", "error"),
                ("watched", "watched", "warn")
            ]
        );
        let watched = of_pod[1];
        assert_eq!(
            watched["message"],
            "would have set metadata.labels.b (monitor mode: not applied)"
        );
        assert_eq!(
            watched["resources"][0],
            json!({"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": NS})
        );
        assert_eq!(
            report["summary"]["error"].as_u64(),
            Some(
                report["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["result"] == "error")
                    .count() as u64
            )
        );
        let metrics = metrics_text(&server).await;
        for line in [
            r#"kmutate_mutations_applied_total{policy="applied",binding="applied"}"#,
            r#"kmutate_monitor_changes_total{policy="watched",binding="watched"}"#,
            r#"kmutate_monitor_errors_total{policy="broken",binding="broken"}"#,
        ] {
            assert!(
                support::metric(&metrics, line) >= 1.0,
                "{line} in\n{metrics}"
            );
        }
        server.shutdown().await;

        // Every binding monitored: the Pod is stored as sent.
        let server = serve(&kas, &dir, AdmissionMode::Monitor).await;
        let (pod, warnings) = eventually(Duration::from_secs(30), || async {
            let (pod, warnings) = create_pod(&client, &format!("m-{}", rand_suffix())).await?;
            (warnings.len() == 3).then_some((pod, warnings))
        })
        .await
        .expect("the monitoring webhook never answered")
        .0;
        assert_eq!(pod["metadata"]["labels"], json!({"x": "y"}));
        assert!(warnings[0].contains("policy applied (binding applied) would have set metadata.labels.a (monitor mode: not applied)"), "{warnings:?}");
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        let annotations = eventually(Duration::from_secs(10), || async {
            audit_annotations(&kas, &name)
        })
        .await
        .expect("no audit event of the create")
        .0;
        assert!(
            annotations.get("mutate.kmutate.dev/changes").is_none(),
            "{annotations}"
        );
        let monitored: Value =
            serde_json::from_str(annotations["mutate.kmutate.dev/monitor"].as_str().unwrap())
                .unwrap();
        let policies: Vec<&str> = monitored
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["policy"].as_str().unwrap())
            .collect();
        assert_eq!(policies, ["applied", "broken", "watched"]);
        server.shutdown().await;
    });
}

fn rand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{nanos:x}")
}
