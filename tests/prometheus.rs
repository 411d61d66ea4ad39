//! Issue 46, part 3: the dashboard and the alerts on a real Prometheus
//! (Debian's `prometheus` package, which .ci/run installs). `promtool`
//! checks the rules of deploy/prometheus-rules.yaml and runs their unit
//! tests (tests/fixtures/prometheus/rules.test.yaml); then Prometheus scrapes a
//! `kmutate serve` every second while the test drives it with admitted,
//! patched, denied, monitored, reinvoked and malformed requests and a
//! policy error, and every expression of dashboards/kmutate.json returns
//! series through the HTTP API; then the test replaces the serving
//! certificate with one that does not load and with one that does; every
//! alert rule evaluates without error, and the alerts whose failure the
//! test caused are the ones active.
//!
//! Skipped where `prometheus` is not installed, unless
//! `KMUTATE_REQUIRE_PROMETHEUS` is set (as in .ci/run).

mod support;

use kmutate::engine::EngineSources;
use kmutate::webhook::client::{get_plain, Client};
use kmutate::webhook::review::encode_in_request_order;
use kmutate::webhook::tls::{self, CertFiles};
use kmutate::webhook::TlsSource;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{eventually, free_port, run, scratch, started};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `prometheus` and `promtool`, if installed.
fn prometheus_tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    match (support::on_path("prometheus"), support::on_path("promtool")) {
        (Some(p), Some(t)) => Some((p, t)),
        _ if std::env::var_os("KMUTATE_REQUIRE_PROMETHEUS").is_some() => {
            panic!("{test}: prometheus and promtool are not installed (apt-get install prometheus)")
        }
        _ => {
            eprintln!("skipped {test}: prometheus is not installed (apt-get install prometheus)");
            None
        }
    }
}

/// The rule groups of deploy/prometheus-rules.yaml (a PrometheusRule, for
/// the Prometheus Operator) as the plain rules file Prometheus reads.
fn write_rule_groups(dir: &Path) -> PathBuf {
    let rule = support::single_document(&repo("deploy/prometheus-rules.yaml"));
    let path = dir.join("rules.yaml");
    std::fs::write(&path, serde_json::to_vec_pretty(&rule["spec"]).unwrap()).unwrap();
    path
}

/// The alert names of deploy/prometheus-rules.yaml.
fn alert_names() -> BTreeSet<String> {
    let rule = support::single_document(&repo("deploy/prometheus-rules.yaml"));
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect()
}

fn promtool(promtool: &Path, dir: &Path, args: &[&str]) {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let Some((_, tool)) = prometheus_tools("promtool") else {
        return;
    };
    let dir = scratch("prometheus", "promtool");
    write_rule_groups(&dir);
    let tests = repo("tests/fixtures/prometheus/rules.test.yaml");
    std::fs::copy(&tests, dir.join("rules.test.yaml")).unwrap();
    promtool(&tool, &dir, &["check", "rules", "rules.yaml"]);
    promtool(&tool, &dir, &["test", "rules", "rules.test.yaml"]);

    // Each alert has a test where it fires and one where it stays quiet.
    let unit_tests = support::single_document(&tests);
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for case in unit_tests["tests"].as_array().unwrap() {
        for check in case["alert_rule_test"].as_array().unwrap() {
            let name = check["alertname"].as_str().unwrap().to_string();
            match check["exp_alerts"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
            {
                true => fires.insert(name),
                false => quiet.insert(name),
            };
        }
    }
    assert_eq!(fires, alert_names(), "alerts tested firing");
    assert_eq!(quiet, alert_names(), "alerts tested quiet");
}

/// A policy of `name` on CREATE of `resources` (core group) with one
/// apply-configuration mutation, and its binding.
fn policy(name: &str, resource: &str, expression: &str, extra: Value) -> String {
    let mut spec = json!({
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": [resource]}]},
        "failurePolicy": "Fail", "reinvocationPolicy": "Never",
        "mutations": [{"patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": expression}}]});
    let mut annotations = json!({});
    for (k, v) in extra.as_object().unwrap() {
        if k == "mode" {
            annotations = json!({"kmutate.dev/mode": v});
        } else {
            spec[k] = v.clone();
        }
    }
    let documents = [
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"policyName": name}}),
    ];
    documents
        .iter()
        .map(|d| format!("---\n{}\n", serde_json::to_string(d).unwrap()))
        .collect()
}

fn label(key: &str, value: &str) -> String {
    format!("Object{{metadata: Object.metadata{{labels: {{{key:?}: {value}}}}}}}")
}

/// Pods get `a` (reinvoked when `b` comes after it) and `b`, and would get
/// `watched` (monitored); ConfigMaps get their `n` as a label, which fails
/// (denied) when it is not a number, as it does in monitor mode.
fn policies() -> String {
    [
        policy(
            "a-pods",
            "pods",
            &label("a", "'1'"),
            json!({"reinvocationPolicy": "IfNeeded"}),
        ),
        policy("b-pods", "pods", &label("b", "'1'"), json!({})),
        policy(
            "c-pods-watched",
            "pods",
            &label("watched", "'1'"),
            json!({"mode": "monitor"}),
        ),
        policy(
            "d-configmaps",
            "configmaps",
            &label("n", "string(int(object.data.n))"),
            json!({}),
        ),
        policy(
            "e-configmaps-watched",
            "configmaps",
            &label("m", "string(int(object.data.m))"),
            json!({"mode": "monitor"}),
        ),
    ]
    .concat()
}

fn review(resource: &str, kind: &str, object: Value) -> Vec<u8> {
    let gvr = json!({"group": "", "version": "v1", "resource": resource});
    let gvk = json!({"group": "", "version": "v1", "kind": kind});
    encode_in_request_order(&json!({"apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview", "request": {
        "uid": "3c8a5f4e-0000-4000-8000-000000000001",
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": object["metadata"]["name"], "namespace": "default", "operation": "CREATE",
        "userInfo": {"username": "alice"}, "object": object, "oldObject": null,
        "dryRun": false, "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}))
}

/// The requests a cluster sends, round after round until `stop`: a Pod
/// (patched, reinvoked, monitored), ConfigMaps admitted and denied, a
/// Service no policy matches, and a malformed body.
async fn drive(server: &kmutate::webhook::Server, ca: &Path, stop: Arc<AtomicBool>) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let config_map = |data: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default"}, "data": data})
    };
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s", "namespace": "default"}, "spec": {"ports": [{"port": 80}]}});
    let bodies = [
        review("pods", "Pod", pod),
        review(
            "configmaps",
            "ConfigMap",
            config_map(json!({"n": "1", "m": "x"})),
        ),
        review("configmaps", "ConfigMap", config_map(json!({"n": "x"}))),
        review("services", "Service", service),
        b"{not json".to_vec(),
    ];
    let tls = tls::client_config(ca, None, &[]).unwrap();
    let client = Client::new(server.addr(), "localhost", tls, false).unwrap();
    let mut conn = client.connect().await.unwrap();
    while !stop.load(Ordering::Relaxed) {
        for body in &bodies {
            conn.post("/mutate", body.clone()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Prometheus process, killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Prometheus scraping `target` every second as the replica `kmutate-0` of
/// job `kmutate` in namespace `kmutate` (the labels the alerts select),
/// evaluating the alert rules every second.
fn start_prometheus(binary: &Path, dir: &Path, target: SocketAddr) -> Prometheus {
    write_rule_groups(dir);
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         rule_files: [rules.yaml]\n\
         scrape_configs:\n\
         - job_name: kmutate\n  \
           static_configs:\n  \
           - targets: ['{target}']\n    \
             labels: {{namespace: kmutate, pod: kmutate-0}}\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(binary)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .current_dir(dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Prometheus { child, addr }
}

/// `s` percent-encoded for a query string.
fn url_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An HTTP API answer's `data`; panics on an error answer.
async fn api(prometheus: &Prometheus, path: &str) -> Option<Value> {
    let answer = get_plain(prometheus.addr, path).await.ok()?;
    let body: Value = serde_json::from_slice(&answer.body).ok()?;
    assert_eq!(body["status"], "success", "{path}: {body}");
    Some(body["data"].clone())
}

/// The series an instant query returns; `None` while Prometheus does not
/// answer.
async fn try_query(prometheus: &Prometheus, expr: &str) -> Option<Vec<Value>> {
    let path = format!("/api/v1/query?query={}", url_encoded(expr));
    let data = api(prometheus, &path).await?;
    Some(data["result"].as_array().cloned().unwrap_or_default())
}

/// The series an instant query returns.
async fn query(prometheus: &Prometheus, expr: &str) -> Vec<Value> {
    try_query(prometheus, expr)
        .await
        .unwrap_or_else(|| panic!("{expr}: no answer"))
}

/// Every panel's expressions, with Grafana's `$__rate_interval` for a 1 s
/// scrape (four scrape intervals).
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: Value =
        serde_json::from_slice(&std::fs::read(repo("dashboards/kmutate.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                let title = panel["title"].as_str().unwrap_or_default().to_string();
                out.push((title, expr.replace("$__rate_interval", "4s")));
            }
        }
    }
    assert!(out.len() > 20, "the dashboard's queries: {out:?}");
    out
}

#[test]
fn every_panel_and_alert_evaluates_on_a_real_prometheus() {
    let Some((binary, _)) = prometheus_tools("prometheus") else {
        return;
    };
    let dir = scratch("prometheus", "live");
    let policy_dir = dir.join("policies");
    std::fs::create_dir_all(&policy_dir).unwrap();
    std::fs::write(policy_dir.join("policies.yaml"), policies()).unwrap();
    run(Duration::from_secs(120), async {
        let (ca, ca_pem) = tls::new_ca("test CA").unwrap();
        std::fs::write(dir.join("ca.crt"), ca_pem).unwrap();
        let files = CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        let issue = |name: &str| {
            let issued = tls::issue(&ca, name, &["localhost".into()], true).unwrap();
            std::fs::write(&files.key, &issued.key_pem).unwrap();
            std::fs::write(&files.cert, &issued.cert_pem).unwrap();
        };
        issue("first");
        let sources = EngineSources {
            policies: vec![policy_dir.clone()],
            bindings: vec![policy_dir.clone()],
            resources: Vec::new(),
        };
        let mut config = support::config(&dir, sources);
        config.tls = TlsSource::Files(files.clone());
        let server = started(config).await;
        let stop = Arc::new(AtomicBool::new(false));
        let driver = {
            let (server_ref, ca, stop) = (&server, dir.join("ca.crt"), stop.clone());
            async move { drive(server_ref, &ca, stop).await }
        };
        let checks = async {
            let prometheus = start_prometheus(&binary, &dir, server.metrics_addr().unwrap());
            // Scraped, with enough samples for 4 s rates.
            eventually(Duration::from_secs(30), || async {
                let up = try_query(&prometheus, "up{job=\"kmutate\"} == 1").await?;
                (!up.is_empty()).then_some(())
            })
            .await
            .expect("Prometheus scrapes kmutate");
            tokio::time::sleep(Duration::from_secs(6)).await;

            // Every panel, the certificate reloads' too: their counters
            // are exported at 0 before any reload.
            let mut empty = Vec::new();
            for (title, expr) in dashboard_queries() {
                if query(&prometheus, &expr).await.is_empty() {
                    empty.push(format!("{title}: {expr}"));
                }
            }
            assert!(empty.is_empty(), "panels without series: {empty:#?}");

            // The events: a certificate that does not load, then one that
            // does, each seen at the next handshake.
            let handshake = || async {
                let tls = tls::client_config(&dir.join("ca.crt"), None, &[]).unwrap();
                let client = Client::new(server.addr(), "localhost", tls, false).unwrap();
                client.connect().await.unwrap();
            };
            std::fs::write(&files.cert, "not a certificate").unwrap();
            handshake().await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            issue("second");
            handshake().await;
            let reloads = "sum by (result) (kmutate_certificate_reloads_total) == 1";
            eventually(Duration::from_secs(20), || async {
                (query(&prometheus, reloads).await.len() == 2).then_some(())
            })
            .await
            .expect("a failed and a successful reload scraped");

            alerts_as_caused(&prometheus).await;
        };
        tokio::select! {
            () = driver => panic!("the driver stopped"),
            () = checks => {}
        }
        stop.store(true, Ordering::Relaxed);
        server.shutdown().await;
    });
}

/// Every rule evaluates without error; active are the alerts whose failure
/// the test caused: one replica where two are wanted (NotReady), a binding
/// failing (MutationErrors), a certificate that did not load; quiet the
/// others (kmutate is up, fast, never timing out, and has no denial rate of
/// an hour before to compare with).
async fn alerts_as_caused(prometheus: &Prometheus) {
    let expected: BTreeSet<String> = [
        "KmutateNotReady",
        "KmutateMutationErrors",
        "KmutateCertificateReloadFailing",
    ]
    .map(String::from)
    .into();
    let outcome = eventually(Duration::from_secs(20), || async {
        let rules = api(prometheus, "/api/v1/rules").await?;
        let alerting: Vec<&Value> = rules["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        let all_evaluated = alerting.len() == alert_names().len()
            && alerting
                .iter()
                .all(|r| r["health"] == "ok" && r["lastError"].as_str().unwrap_or("").is_empty());
        let active: BTreeSet<String> = alerting
            .iter()
            .filter(|r| r["state"] != "inactive")
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect();
        (all_evaluated && active == expected).then_some(())
    })
    .await;
    if outcome.is_none() {
        let rules = api(prometheus, "/api/v1/rules").await;
        panic!("alerts: expected {expected:?} active and every rule healthy: {rules:#?}");
    }
}
