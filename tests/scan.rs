//! Issue 45 on the real kube-apiserver v1.36.2: `kmutate scan` finds the
//! stored objects its policies would change or deny, `--fix` writes the
//! changes back (a write made since the read is kept), a second scan finds
//! nothing left that could be fixed in place, Pods whose spec cannot change
//! name the Deployment that owns them and `--restart-owners` restarts it.
//! What the policies make of each object, and the denial message, are
//! checked against the apiserver's own MutatingAdmissionPolicy plugin given
//! the same policies.

mod support;

use kmutate::authorizer::AlwaysAllow;
use kmutate::engine::{CompiledPolicies, Engine};
use kmutate::request::{GroupVersionResource, UserInfo};
use kmutate::scan::discover::{self, Target};
use kmutate::scan::evaluate::{self, AsOperation, Verdict};
use kmutate::scan::fix::{FixOutcome, Fixer};
use kmutate::scan::ScanOptions;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use support::kas::{self, Kas};
use support::{run, scratch};

const NS: &str = "scan-test";

fn rules(resources: &[(&str, &str)]) -> Value {
    let rules: Vec<Value> = resources
        .iter()
        .map(|(group, plural)| {
            json!({"apiGroups": [group], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": [plural]})
        })
        .collect();
    json!({"resourceRules": rules})
}

/// A v1 policy and its binding of the same name.
fn policy(name: &str, spec: Value) -> [Value; 2] {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name}});
    [policy, binding]
}

fn apply_configuration(expression: &str) -> Value {
    json!([{"patchType": "ApplyConfiguration",
        "applyConfiguration": {"expression": expression}}])
}

/// The test's policies: ConfigMaps and Deployments labelled `scanned`;
/// ConfigMaps with a `size` labelled with it as a number (denied when it
/// is not one, failurePolicy Fail); Pods without service links.
fn policies() -> Vec<Value> {
    let mut out = Vec::new();
    out.extend(policy(
        "label-scanned",
        json!({"matchConstraints": rules(&[("", "configmaps"), ("apps", "deployments")]),
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": apply_configuration(
                r#"Object{metadata: Object.metadata{labels: {"scanned": "yes"}}}"#)}),
    ));
    out.extend(policy(
        "configmaps-size-label",
        json!({"matchConstraints": rules(&[("", "configmaps")]),
            "matchConditions": [{"name": "sized",
                "expression": "has(object.data) && 'size' in object.data"}],
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": apply_configuration(
                r#"Object{metadata: Object.metadata{labels: {"size": string(int(object.data.size))}}}"#)}),
    ));
    out.extend(policy(
        "pods-no-service-links",
        json!({"matchConstraints": rules(&[("", "pods")]),
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": apply_configuration(
                "Object{spec: Object.spec{enableServiceLinks: false}}")}),
    ));
    out
}

fn config_map(name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": labels}, "data": data})
}

fn pod(name: &str, owner: Option<&Value>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}});
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([owner_reference(owner)]);
    }
    pod
}

fn owner_reference(owner: &Value) -> Value {
    json!({"apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "controller": true})
}

/// The cluster as the test finds it: ConfigMaps some of which the policies
/// change, one they deny, one they leave; a Deployment owning (through a
/// ReplicaSet, as its controller would) a Pod, and a Pod of its own.
async fn stored_objects(client: &kube::Client) {
    kas::namespace_with_service_account(client, NS).await;
    for cm in [
        config_map("plain", json!({}), json!({})),
        config_map("already", json!({"scanned": "yes"}), json!({})),
        config_map("sized", json!({}), json!({"size": "3"})),
        config_map("broken", json!({"scanned": "yes"}), json!({"size": "abc"})),
        config_map("raced", json!({}), json!({})),
        config_map("raced-to-it", json!({}), json!({})),
    ] {
        kas::create(client, &cm).await.unwrap();
    }
    let template = json!({"metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}});
    let deployment = kas::create(
        client,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}),
    )
    .await
    .unwrap();
    let replica_set = kas::create(
        client,
        &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-5d4f", "namespace": NS,
                "ownerReferences": [owner_reference(&deployment)]},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}),
    )
    .await
    .unwrap();
    kas::create(client, &pod("web-5d4f-x1", Some(&replica_set)))
        .await
        .unwrap();
    kas::create(client, &pod("lone", None)).await.unwrap();
}

/// Runs `kmutate scan` against `kas` with `args`: exit status, stdout, stderr.
fn scan(kas: &Kas, policies: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kmutate"))
        .arg("scan")
        .arg("--policies")
        .arg(policies)
        .arg("--bindings")
        .arg(policies)
        .args(["-n", NS])
        .args(args)
        .env("KUBECONFIG", &kas.kubeconfig)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// `scan -o json`'s items by `Kind/name`.
fn items(stdout: &str) -> std::collections::BTreeMap<String, Value> {
    let report: Value =
        serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: not JSON: {stdout}"));
    assert_eq!(report["kind"], "ScanReport", "{report}");
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                format!("{}/{}", i["kind"], i["name"]).replace('"', ""),
                i.clone(),
            )
        })
        .collect()
}

/// The field paths the item's changes set.
fn set_paths(item: &Value) -> Vec<String> {
    item["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["set"].as_array().cloned().unwrap_or_default())
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

/// The PATCH requests the apiserver has answered so far (its metrics).
async fn patches(client: &kube::Client) -> f64 {
    let request = hyper::http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap();
    let Ok(text) = client.request_text(request).await else {
        return 0.0;
    };
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("verb=\"PATCH\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn get(client: &kube::Client, object: &Value) -> Value {
    let api = kas::api_for(client, object).await;
    let name = object["metadata"]["name"].as_str().unwrap();
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

#[test]
fn scan_reports_fixes_and_names_owners_on_the_real_apiserver() {
    let Some(kas) = Kas::start("scan") else {
        return;
    };
    let dir = scratch("scan", "scan");
    let policy_dir = dir.join("policies");
    std::fs::create_dir_all(&policy_dir).unwrap();
    for (i, p) in policies().iter().enumerate() {
        std::fs::write(
            policy_dir.join(format!("{i:02}.json")),
            serde_json::to_vec_pretty(p).unwrap(),
        )
        .unwrap();
    }
    run(Duration::from_secs(240), async {
        let client = kas.client().await;
        stored_objects(&client).await;

        // What the policies would do to each object, as created now.
        let (code, stdout, stderr) = scan(&kas, &policy_dir, &["-o", "json", "--show-unchanged"]);
        assert_eq!(code, 0, "{stderr}");
        let found = items(&stdout);
        let result = |key: &str| found[key]["result"].as_str().unwrap().to_string();
        for key in [
            "ConfigMap/plain",
            "ConfigMap/sized",
            "ConfigMap/raced",
            "Deployment/web",
            "Pod/web-5d4f-x1",
            "Pod/lone",
        ] {
            assert_eq!(result(key), "change", "{key}: {stdout}");
        }
        assert_eq!(result("ConfigMap/already"), "unchanged", "{stdout}");
        assert_eq!(result("ConfigMap/broken"), "deny", "{stdout}");
        assert!(
            !found.contains_key("ReplicaSet/web-5d4f"),
            "no binding matches ReplicaSets: {stdout}"
        );
        // In the order the bindings ran.
        assert_eq!(
            set_paths(&found["ConfigMap/sized"]),
            ["metadata.labels.size", "metadata.labels.scanned"]
        );
        assert_eq!(set_paths(&found["Pod/lone"]), ["spec.enableServiceLinks"]);
        let denial = found["ConfigMap/broken"]["message"].as_str().unwrap();

        // Ctrl-C: a clean stop with the report so far (fixes tried at one
        // a second, as server-side dry runs, so that it is still running).
        let child = Command::new(env!("CARGO_BIN_EXE_kmutate"))
            .args([
                "scan",
                "-n",
                NS,
                "-o",
                "json",
                "--fix",
                "--dry-run",
                "server",
                "--qps",
                "1",
            ])
            .arg("--policies")
            .arg(&policy_dir)
            .arg("--bindings")
            .arg(&policy_dir)
            .env("KUBECONFIG", &kas.kubeconfig)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Interrupted once its first write reached the apiserver.
        let before = patches(&client).await;
        support::eventually(Duration::from_secs(60), || async {
            (patches(&client).await > before).then_some(())
        })
        .await
        .expect("scan --fix writes");
        let interrupt = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(interrupt.success());
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(130),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        assert_eq!(report["summary"]["interrupted"], true, "{report}");
        let fixes = report["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["fix"].is_object())
            .count();
        assert!(
            (1..6).contains(&fixes),
            "some of the seven fixes, not all: {report}"
        );

        // A gate in CI: changes found fail it.
        let (code, _, _) = scan(&kas, &policy_dir, &["--fail-on", "change"]);
        assert_eq!(code, 1);

        // A concurrent write between the read and the fix is kept.
        concurrent_writes_are_kept(&client, &policy_dir).await;

        // A server-side dry run writes nothing.
        let (code, stdout, stderr) = scan(
            &kas,
            &policy_dir,
            &["-o", "json", "--fix", "--dry-run", "server"],
        );
        assert_eq!(code, 0, "{stderr}");
        let fix = &items(&stdout)["ConfigMap/plain"]["fix"];
        assert_eq!(fix["result"], "fixed", "{stdout}");
        assert_eq!(fix["dryRun"], true, "{stdout}");
        let plain = get(&client, &config_map("plain", json!({}), json!({}))).await;
        assert!(
            plain["metadata"]["labels"].get("scanned").is_none(),
            "{plain}"
        );

        // The fix: what can change in place does; Pods name their owner.
        let (code, stdout, stderr) = scan(&kas, &policy_dir, &["-o", "json", "--fix"]);
        assert_eq!(code, 0, "{stderr}");
        let fixed = items(&stdout);
        for key in ["ConfigMap/plain", "ConfigMap/sized", "Deployment/web"] {
            assert_eq!(fixed[key]["fix"]["result"], "fixed", "{key}: {stdout}");
        }
        let owned = &fixed["Pod/web-5d4f-x1"]["fix"];
        assert_eq!(owned["result"], "refused", "{stdout}");
        assert_eq!(
            owned["owner"],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS, "name": "web"})
        );
        assert!(
            owned["message"].as_str().unwrap().contains("Forbidden"),
            "{owned}"
        );
        assert_eq!(fixed["Pod/lone"]["fix"]["result"], "refused", "{stdout}");
        assert!(fixed["Pod/lone"]["fix"].get("owner").is_none(), "{stdout}");
        assert!(stderr.contains("Deployment scan-test/web"), "{stderr}");

        // Again: only what cannot change in place (and the denial) is left.
        let (code, stdout, stderr) = scan(&kas, &policy_dir, &["-o", "json"]);
        assert_eq!(code, 0, "{stderr}");
        let left: Vec<String> = items(&stdout).into_keys().collect();
        assert_eq!(left, ["ConfigMap/broken", "Pod/lone", "Pod/web-5d4f-x1"]);

        // The owners restarted, as `kubectl rollout restart` does.
        let (code, _, stderr) = scan(&kas, &policy_dir, &["--fix", "--restart-owners"]);
        assert_eq!(code, 0, "{stderr}");
        assert!(
            stderr.contains("restarted Deployment scan-test/web"),
            "{stderr}"
        );
        let web = get(
            &client,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NS}}),
        )
        .await;
        let annotations = &web["spec"]["template"]["metadata"]["annotations"];
        assert!(
            annotations["kubectl.kubernetes.io/restartedAt"].is_string(),
            "{web}"
        );

        upstream_agrees(&client, denial).await;

        // The same policies read from the cluster find the same.
        let out = Command::new(env!("CARGO_BIN_EXE_kmutate"))
            .args(["scan", "--source", "api", "-n", NS, "-o", "json"])
            .env("KUBECONFIG", &kas.kubeconfig)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let left: Vec<String> = items(&stdout).into_keys().collect();
        assert_eq!(left, ["ConfigMap/broken", "Pod/lone", "Pod/web-5d4f-x1"]);
    });
}

/// The fixes equal what the apiserver's own plugin makes of the same
/// objects created now, and its denial is scan's.
async fn upstream_agrees(client: &kube::Client, denial: &str) {
    for object in policies() {
        kas::create(client, &object).await.unwrap();
    }
    // The apiserver reads new policies within a few seconds, each on its
    // own: the probe waits for both (one labels every ConfigMap, the other
    // those with a size).
    let probe = config_map("probe", json!({}), json!({"size": "1"}));
    support::eventually(Duration::from_secs(30), || async {
        let made = kas::dry_run_create(client, &probe).await.ok()?;
        let labels = &made["metadata"]["labels"];
        (labels.get("scanned").is_some() && labels.get("size").is_some()).then_some(())
    })
    .await
    .expect("the apiserver applies both policies");
    for (name, data) in [("plain", json!({})), ("sized", json!({"size": "3"}))] {
        let stored = get(client, &config_map(name, json!({}), json!({}))).await;
        let copy = config_map(&format!("{name}-copy"), json!({}), data);
        let upstream = kas::dry_run_create(client, &copy).await.unwrap();
        assert_eq!(
            stored["metadata"]["labels"], upstream["metadata"]["labels"],
            "{name}: fixed as the apiserver mutates it"
        );
    }
    let broken = config_map(
        "broken-copy",
        json!({"scanned": "yes"}),
        json!({"size": "abc"}),
    );
    let refused = kas::dry_run_create(client, &broken).await.unwrap_err();
    let message = kas::message(&refused);
    assert!(
        message.ends_with(denial),
        "the apiserver's denial {message:?} ends with scan's {denial:?}"
    );
}

/// Fixes of objects written between their read and their fix, through the
/// library: the write is kept and the change made on top of it, or the
/// change is dropped when the write made it already.
async fn concurrent_writes_are_kept(client: &kube::Client, policy_dir: &Path) {
    let mut loaded = kmutate::api::load::load_paths(&[policy_dir.to_path_buf()]);
    let policies = std::mem::take(&mut loaded.policies);
    let bindings = std::mem::take(&mut loaded.bindings);
    let compiled = CompiledPolicies::compile(policies, bindings, Vec::new());
    let engine = Arc::new(Engine::assemble(
        Arc::new(compiled),
        std::iter::empty(),
        Arc::new(AlwaysAllow),
    ));
    let served = discover::served(client).await.unwrap();
    let target: Target = served
        .iter()
        .find(|t| t.resource.plural == "configmaps" && t.resource.group.is_empty())
        .unwrap()
        .clone();
    let options = ScanOptions {
        operation: AsOperation::Create,
        namespace: Some(NS.into()),
        label_selector: None,
        user: UserInfo::default(),
    };
    let mut fixer = Fixer::new(
        client.clone(),
        engine.clone(),
        options,
        served.clone(),
        false,
        100.0,
    );
    let resource = GroupVersionResource {
        group: String::new(),
        version: "v1".into(),
        resource: "configmaps".into(),
    };
    let change_of = |stored: &Value| match evaluate::evaluate(
        &engine,
        stored,
        &resource,
        AsOperation::Create,
        &UserInfo::default(),
    ) {
        Verdict::Change { patch, .. } => patch,
        other => panic!("a change expected: {other:?}"),
    };

    let raced = get(client, &config_map("raced", json!({}), json!({}))).await;
    let patch = change_of(&raced);
    let api = kas::api_for(client, &raced).await;
    let write = |data: Value| kube::api::Patch::Merge(data);
    api.patch(
        "raced",
        &Default::default(),
        &write(json!({"data": {"written": "meanwhile"}})),
    )
    .await
    .unwrap();
    let outcome = fixer.fix(&target, &raced, &patch).await;
    assert_eq!(
        outcome,
        FixOutcome::Fixed {
            dry_run: false,
            retries: 1
        }
    );
    let now = get(client, &raced).await;
    assert_eq!(now["data"]["written"], "meanwhile", "{now}");
    assert_eq!(now["metadata"]["labels"]["scanned"], "yes", "{now}");

    let raced = get(client, &config_map("raced-to-it", json!({}), json!({}))).await;
    let patch = change_of(&raced);
    api.patch(
        "raced-to-it",
        &Default::default(),
        &write(json!({"metadata": {"labels": {"scanned": "yes"}}})),
    )
    .await
    .unwrap();
    let outcome = fixer.fix(&target, &raced, &patch).await;
    assert!(
        matches!(outcome, FixOutcome::NothingToDo { .. }),
        "{outcome:?}"
    );
}
