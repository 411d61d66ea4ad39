//! Issue 46, part 1: the Helm chart `charts/kmutate`. `helm lint` and
//! `helm template` over each values file of `charts/kmutate/ci/`; the
//! render of `ci/deploy.yaml` is deploy/ (the kustomize manifests) object
//! for object, so the two cannot drift; every rendered object of every
//! values file is accepted by a server-side dry run of kube-apiserver
//! v1.36.2; and the rendered MutatingWebhookConfiguration, pointed at a
//! `kmutate serve` on loopback run with the chart's own arguments, gets a
//! Pod mutated through the apiserver.
//!
//! Helm is found on PATH or where .ci/run builds it
//! (`~/.cache/kmutate-tools/helm-v4.3.2/helm`); without it the tests skip,
//! unless `KMUTATE_REQUIRE_HELM` is set.

mod support;

use kmutate::webhook::tls;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::kas::{self, Kas};
use support::{eventually, free_port, run, scratch};

const RELEASE: &str = "kmutate";
const NAMESPACE: &str = "kmutate";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The helm binary, if there is one.
fn helm(test: &str) -> Option<PathBuf> {
    let on_path = support::on_path("helm");
    let cached = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache/kmutate-tools/helm-v4.3.2/helm"))
        .filter(|p| p.is_file());
    match on_path.or(cached) {
        Some(helm) => Some(helm),
        None if std::env::var_os("KMUTATE_REQUIRE_HELM").is_some() => {
            panic!("{test}: helm is not installed (.ci/run builds it)")
        }
        None => {
            eprintln!("skipped {test}: helm is not installed");
            None
        }
    }
}

/// The values files the chart is checked with.
fn values_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo("charts/kmutate/ci"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    files
}

fn helm_run(helm: &Path, args: &[&str], values: &Path) -> String {
    let out = Command::new(helm)
        .args(args)
        .arg(repo("charts/kmutate"))
        .arg("-f")
        .arg(values)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "helm {args:?} -f {}:\n{stdout}\n{}",
        values.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The objects the chart renders with `values`, released as kmutate in
/// namespace kmutate.
fn render(helm: &Path, values: &Path) -> Vec<Value> {
    let text = helm_run(
        helm,
        &["template", RELEASE, "--namespace", NAMESPACE],
        values,
    );
    kmutate::api::load::parse_documents(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", values.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

#[test]
fn the_chart_lints_and_renders_with_every_values_file() {
    let Some(helm) = helm("chart lint") else {
        return;
    };
    for values in values_files() {
        let lint = helm_run(&helm, &["lint", "--strict"], &values);
        assert!(lint.contains("0 chart(s) failed"), "{lint}");
        let objects = render(&helm, &values);
        // Every object but the CRDs (deploy/crds/ as they are) is the release's.
        for o in objects
            .iter()
            .filter(|o| o["kind"] != "CustomResourceDefinition")
        {
            assert!(
                o["metadata"]["labels"]["helm.sh/chart"].is_string(),
                "{}: {} is not labelled",
                values.display(),
                key(o)
            );
        }
    }
}

/// Labels only a Helm release has.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
];

/// `object` as deploy/ would hold it: without Helm's labels (wherever
/// labels are, selectors included) and the checksum that rolls the Pods
/// on a policy change (kustomize hashes the ConfigMap names instead), the
/// allowed-rules annotation read as the YAML it holds.
fn as_in_deploy(object: &Value) -> Value {
    let mut o = object.clone();
    normalize(&mut o);
    o
}

fn normalize(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in ["labels", "matchLabels", "selector"] {
                if let Some(Value::Object(labels)) = map.get_mut(key) {
                    for helm_label in HELM_LABELS {
                        labels.remove(helm_label);
                    }
                }
            }
            if let Some(Value::Object(annotations)) = map.get_mut("annotations") {
                annotations.remove("checksum/policies");
                if let Some(Value::String(rules)) = annotations.get_mut("kmutate.dev/allowed-rules")
                {
                    let parsed = kmutate::api::load::parse_documents(rules).unwrap();
                    annotations.insert("kmutate.dev/allowed-rules".into(), json!(parsed));
                }
            }
            map.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn key(o: &Value) -> String {
    format!(
        "{} {}/{}",
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["namespace"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The files of deploy/ that the chart renders (the Namespace is left to
/// `helm install --create-namespace`; the CRDs are compared as files).
const DEPLOY_FILES: [&str; 9] = [
    "rbac.yaml",
    "certificate.yaml",
    "deployment.yaml",
    "service.yaml",
    "webhook.yaml",
    "validating-webhook.yaml",
    "servicemonitor.yaml",
    "prometheus-rules.yaml",
    "policy-reports.yaml",
];

#[test]
fn the_chart_renders_deploy_so_that_the_two_cannot_drift() {
    let Some(helm) = helm("chart drift") else {
        return;
    };
    let mut rendered: BTreeMap<String, Value> =
        render(&helm, &repo("charts/kmutate/ci/deploy.yaml"))
            .iter()
            .map(|o| (key(o), as_in_deploy(o)))
            .collect();
    // deploy/policy-reports.yaml asks its user to add --policy-reports to
    // deployment.yaml's arguments; the chart adds it with the RBAC.
    let args = &mut rendered.get_mut("Deployment kmutate/kmutate").unwrap()["spec"]["template"]
        ["spec"]["containers"][0]["args"];
    let last = args.as_array_mut().unwrap().pop();
    assert_eq!(last, Some(json!("--policy-reports")));
    let mut expected = BTreeMap::new();
    for file in DEPLOY_FILES {
        for o in support::documents(&repo(&format!("deploy/{file}"))) {
            expected.insert(key(&o), as_in_deploy(&o));
        }
    }
    // The policies' ConfigMaps: kustomize makes them from deploy/config/.
    for (folder, name) in [
        ("policies", "kmutate-policies"),
        ("bindings", "kmutate-bindings"),
    ] {
        let mut data = serde_json::Map::new();
        for entry in std::fs::read_dir(repo(&format!("deploy/config/{folder}"))).unwrap() {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_str().unwrap().to_string();
            data.insert(file, json!(std::fs::read_to_string(&path).unwrap()));
        }
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE,
                "labels": {"app.kubernetes.io/name": "kmutate"}}, "data": data});
        expected.insert(key(&cm), cm);
    }
    for file in ["policyreports.yaml"] {
        for o in support::documents(&repo(&format!("deploy/crds/{file}"))) {
            expected.insert(key(&o), as_in_deploy(&o));
        }
    }
    let dashboard = &rendered["ConfigMap kmutate/kmutate-dashboard"];
    let json_text = dashboard["data"]["kmutate.json"].as_str().unwrap();
    let shipped: Value =
        serde_json::from_slice(&std::fs::read(repo("dashboards/kmutate.json")).unwrap()).unwrap();
    assert_eq!(serde_json::from_str::<Value>(json_text).unwrap(), shipped);

    let mut differences = Vec::new();
    for (k, want) in &expected {
        match rendered.get(k) {
            None => differences.push(format!("{k}: in deploy/, not rendered")),
            Some(got) if k.starts_with("ConfigMap") => {
                // The policy texts: the same documents, comments aside.
                for (file, text) in want["data"].as_object().unwrap() {
                    let parse = |t: &str| kmutate::api::load::parse_documents(t).unwrap();
                    let got_text = got["data"][file].as_str().unwrap_or_default();
                    if parse(text.as_str().unwrap()) != parse(got_text) {
                        differences.push(format!("{k}: {file} differs"));
                    }
                }
            }
            Some(got) if got != want => {
                let mut paths = Vec::new();
                differing_fields(want, got, String::new(), &mut paths);
                differences.push(format!("{k}: {}", paths.join("; ")));
            }
            Some(_) => {}
        }
    }
    for k in rendered.keys() {
        if !expected.contains_key(k) && k != "ConfigMap kmutate/kmutate-dashboard" {
            differences.push(format!("{k}: rendered, not in deploy/"));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));

    // The files the chart ships are deploy/'s and the dashboard's.
    for (chart, source) in [
        (
            "files/crds/mutatingadmissionpolicies.yaml",
            "deploy/crds/mutatingadmissionpolicies.yaml",
        ),
        (
            "files/crds/mutatingadmissionpolicybindings.yaml",
            "deploy/crds/mutatingadmissionpolicybindings.yaml",
        ),
        (
            "files/crds/policyreports.yaml",
            "deploy/crds/policyreports.yaml",
        ),
        (
            "files/prometheus-rules.yaml",
            "deploy/prometheus-rules.yaml",
        ),
        ("files/kmutate.json", "dashboards/kmutate.json"),
    ] {
        assert_eq!(
            std::fs::read(repo(&format!("charts/kmutate/{chart}"))).unwrap(),
            std::fs::read(repo(source)).unwrap(),
            "charts/kmutate/{chart} is a copy of {source}: cp {source} charts/kmutate/{chart}"
        );
    }
}

/// Where `deploy` and `chart` differ: each field's path and both values.
fn differing_fields(deploy: &Value, chart: &Value, path: String, out: &mut Vec<String>) {
    match (deploy, chart) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let (x, y) = (
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                );
                differing_fields(x, y, format!("{path}.{k}"), out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differing_fields(x, y, format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a != b => out.push(format!("{path}: deploy/ {a}, chart {b}")),
        _ => {}
    }
}

/// Creates `objects` with a server-side dry run, CRDs and Namespaces for
/// real first (what the others need).
async fn dry_run_all(client: &kube::Client, objects: &[Value], values: &Path) {
    for o in objects {
        let made = kas::dry_run_create(client, o).await;
        if let Err(e) = made {
            panic!(
                "{}: {} refused: {}",
                values.display(),
                key(o),
                kas::message(&e)
            );
        }
    }
}

#[test]
fn every_rendered_object_is_accepted_by_kube_apiserver() {
    let Some(helm) = helm("chart dry run") else {
        return;
    };
    let Some(kas) = Kas::start("chart-dry-run") else {
        return;
    };
    run(Duration::from_secs(240), async {
        let client = kas.client().await;
        for crd in support::documents(&repo("tests/fixtures/chart/operator-crds.yaml")) {
            kas::apply(&client, &crd).await;
        }
        kas::namespace_with_service_account(&client, NAMESPACE).await;
        let gvk = kube::api::GroupVersionKind::gvk("monitoring.coreos.com", "v1", "PrometheusRule");
        eventually(Duration::from_secs(30), || async {
            kube::discovery::pinned_kind(&client, &gvk).await.ok()
        })
        .await
        .expect("the stand-in CRDs are served");
        for values in values_files() {
            dry_run_all(&client, &render(&helm, &values), &values).await;
        }
    });
}

/// A `kmutate serve` child process, killed on drop.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Deployment's container arguments, made to run here: policies from
/// `dir` (the rendered ConfigMaps' files), loopback ports, the test's
/// certificate, and no peers (they are found through cluster DNS).
fn local_args(args: &[Value], dir: &Path, port: u16) -> Vec<String> {
    args.iter()
        .filter_map(|a| {
            let a = a.as_str().unwrap();
            let (flag, value) = a.split_once('=').unwrap_or((a, ""));
            let local = |v: PathBuf| Some(format!("{flag}={}", v.display()));
            match flag {
                "--policies" => local(dir.join("policies")),
                "--bindings" => local(dir.join("bindings")),
                "--tls-cert" => local(dir.join("tls.crt")),
                "--tls-key" => local(dir.join("tls.key")),
                "--listen" => Some(format!("--listen=127.0.0.1:{port}")),
                "--metrics-listen" => Some(format!("--metrics-listen=127.0.0.1:{}", free_port())),
                "--peers" | "--peer-address" => None,
                _ => Some(if value.is_empty() {
                    flag.to_string()
                } else {
                    a.to_string()
                }),
            }
        })
        .collect()
}

#[test]
fn the_rendered_webhook_mutates_a_pod_through_kube_apiserver() {
    let Some(helm) = helm("chart webhook") else {
        return;
    };
    let Some(kas) = Kas::start("chart-webhook") else {
        return;
    };
    let dir = scratch("chart", "webhook");
    let objects = render(&helm, &repo("charts/kmutate/ci/default.yaml"));
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} rendered"))
            .clone()
    };
    for (folder, name) in [
        ("policies", "kmutate-policies"),
        ("bindings", "kmutate-bindings"),
    ] {
        std::fs::create_dir_all(dir.join(folder)).unwrap();
        for (file, text) in find("ConfigMap", name)["data"].as_object().unwrap() {
            std::fs::write(dir.join(folder).join(file), text.as_str().unwrap()).unwrap();
        }
    }
    let (ca, ca_pem) = tls::new_ca("chart test CA").unwrap();
    let issued = tls::issue(&ca, "kmutate", &["127.0.0.1".into()], true).unwrap();
    std::fs::write(dir.join("tls.crt"), &issued.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &issued.key_pem).unwrap();

    let deployment = find("Deployment", RELEASE);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let port = free_port();
    let args = local_args(container["args"].as_array().unwrap(), &dir, port);
    assert!(
        args.contains(&format!("--manage-webhook={RELEASE}")),
        "{args:?}"
    );
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let _serve = Serve(
        Command::new(env!("CARGO_BIN_EXE_kmutate"))
            .arg("serve")
            .args(&args)
            .env("KUBECONFIG", &kas.kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    // The rendered configuration, calling the loopback server instead of
    // the Service (and trusting its CA instead of cert-manager's).
    use base64::Engine as _;
    let mut webhook = find("MutatingWebhookConfiguration", RELEASE);
    webhook["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("cert-manager.io/inject-ca-from");
    webhook["webhooks"][0]["clientConfig"] = json!({
        "url": format!("https://127.0.0.1:{port}/mutate"),
        "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca_pem)});
    run(Duration::from_secs(120), async {
        let client = kas.client().await;
        kas::create(&client, &webhook).await.unwrap();
        kas::namespace_with_service_account(&client, "chart-test").await;
        let pod = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "chart-test",
                    "labels": {"kmutate.dev/demo": "true"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
        };
        let mut n = 0;
        let mutated = eventually(Duration::from_secs(60), || {
            n += 1;
            let pod = pod(&format!("demo-{n}"));
            let client = client.clone();
            async move {
                let made = kas::create(&client, &pod).await.ok()?;
                let label = made["metadata"]["labels"]["kmutate.dev/mutated-by"].clone();
                (label == "kmutate-demo").then_some(made)
            }
        })
        .await;
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        assert!(mutated.is_some(), "no Pod mutated; kmutate's log:\n{log}");

        // --manage-webhook: the rules narrowed to what the starter policy matches.
        let api = kas::api_for(&client, &webhook).await;
        let narrowed = eventually(Duration::from_secs(30), || async {
            let now = serde_json::to_value(api.get(RELEASE).await.ok()?).ok()?;
            let rules = now["webhooks"][0]["rules"].clone();
            (rules
                .as_array()?
                .iter()
                .all(|r| r["resources"] == json!(["pods"])))
            .then_some(rules)
        })
        .await;
        assert!(
            narrowed.is_some(),
            "rules not narrowed to pods; kmutate's log:\n{log}"
        );
    });
}
