//! End-to-end tests of the admission webhook: a server started in-process
//! on 127.0.0.1 (free ports), spoken to over TLS like kube-apiserver would,
//! plus one run of the `kmutate serve` binary stopped by SIGTERM. Every test
//! is bounded in time and stops by itself.

use base64::Engine as _;
use kmutate::engine::EngineSources;
use kmutate::webhook::client::{get_plain, Client, Connection};
use kmutate::webhook::review::encode_in_request_order;
use kmutate::webhook::tls::{self, CertFiles};
use kmutate::webhook::{ServeConfig, Server, TlsSource};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;

use support::{run, started};

/// A fresh folder under the target directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    support::scratch("webhook", name)
}

/// A server on the tests' example policies and bindings.
async fn started_on_fixture(dir: &Path) -> Server {
    started(config(
        dir,
        vec![fixture("policies")],
        vec![fixture("bindings")],
    ))
    .await
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The webhook tests' own example policies and bindings (`policies` or
/// `bindings`), kept apart from the shipped library so that the library can
/// grow without changing what these tests expect.
fn fixture(kind: &str) -> PathBuf {
    repo("tests/fixtures/webhook").join(kind)
}

fn config(dir: &Path, policies: Vec<PathBuf>, bindings: Vec<PathBuf>) -> ServeConfig {
    support::config(
        dir,
        EngineSources {
            policies,
            bindings,
            resources: Vec::new(),
        },
    )
}

/// Writes `yaml` (policies and bindings) to `dir/policies.yaml`.
fn write_policies(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("policies.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn client(server: &Server, http2: bool) -> Client {
    let ca = server.ca_bundle().expect("self-signed CA");
    let config = tls::client_config(ca, None, &[]).unwrap();
    Client::new(server.addr(), "localhost", config, http2).unwrap()
}

async fn connect(server: &Server) -> Connection {
    client(server, false).connect().await.expect("connects")
}

async fn metrics_text(server: &Server) -> String {
    let r = get_plain(server.metrics_addr().unwrap(), "/metrics")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    r.text()
}

/// The value of the metric line starting with `prefix` (0 when absent).
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

/// A review as kube-apiserver writes it: the request's members in its
/// order, the object after the others.
fn review(api_version: &str, request: Value) -> Vec<u8> {
    encode_in_request_order(&json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": request,
    }))
}

fn request_for(
    uid: &str,
    group: &str,
    version: &str,
    kind: &str,
    resource: &str,
    object: &Value,
) -> Value {
    json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": object["metadata"]["name"],
        "namespace": "default",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": null,
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    })
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"a": "b"}})
}

/// The answer's `response`, checked to be an AdmissionReview of `api_version` for `uid`.
fn response(body: &Value, api_version: &str, uid: &str) -> Value {
    assert_eq!(body["apiVersion"], api_version, "{body}");
    assert_eq!(body["kind"], "AdmissionReview", "{body}");
    assert_eq!(body["response"]["uid"], uid, "{body}");
    body["response"].clone()
}

/// Posts a v1 review of a CREATE of `object` (`kind` in `resource`, core
/// group, no namespace) and returns its checked `response`.
async fn create(
    conn: &mut Connection,
    uid: &str,
    kind: &str,
    resource: &str,
    object: &Value,
) -> Value {
    let r = conn
        .post(
            "/mutate",
            review(
                "admission.k8s.io/v1",
                request_for(uid, "", "v1", kind, resource, object),
            ),
        )
        .await
        .unwrap();
    response(&r.json().unwrap(), "admission.k8s.io/v1", uid)
}

fn decoded_patch(response: &Value) -> Option<json_patch::Patch> {
    let patch = response.get("patch")?.as_str()?;
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap();
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// A CREATE request for `object` as an `apps/v1` Deployment.
fn deployment_request(uid: &str, object: &Value) -> Value {
    request_for(uid, "apps", "v1", "Deployment", "deployments", object)
}

/// The Deployment of `examples/deployment.yaml`.
/// `examples/deployment.yaml` as kube-apiserver sends it, encoded from its
/// Go types: the structs Go always writes are there, empty (maporacle).
fn example_deployment() -> Value {
    let text = std::fs::read_to_string(repo("examples/deployment.yaml")).unwrap();
    let mut deployment = kmutate::api::load::parse_documents(&text)
        .unwrap()
        .remove(0);
    deployment["status"] = json!({});
    deployment["spec"]["strategy"] = json!({});
    let pod = &mut deployment["spec"]["template"]["spec"];
    pod["securityContext"] = json!({});
    for container in pod["containers"].as_array_mut().unwrap() {
        container["resources"] = json!({});
    }
    deployment
}

#[test]
fn deployment_create_gets_the_expected_patch() {
    let dir = scratch("deployment");
    run(Duration::from_secs(60), async {
        let server = started_on_fixture(&dir).await;
        let deployment = example_deployment();
        let mut conn = connect(&server).await;
        let mut expected = deployment.clone();
        expected["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "kmutate"});
        expected["spec"]["replicas"] = json!(2);

        for (api_version, dry_run) in [
            ("admission.k8s.io/v1", false),
            ("admission.k8s.io/v1beta1", false),
            ("admission.k8s.io/v1", true),
        ] {
            let mut request = deployment_request("d-1", &deployment);
            request["dryRun"] = json!(dry_run);
            let r = conn
                .post("/mutate", review(api_version, request))
                .await
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            assert!(r.content_type.starts_with("application/json"));
            let resp = response(&r.json().unwrap(), api_version, "d-1");
            assert_eq!(resp["allowed"], true, "{resp}");
            let patch = decoded_patch(&resp).expect("a patch");
            let mut patched = deployment.clone();
            json_patch::patch(&mut patched, &patch).unwrap();
            assert_eq!(
                patched,
                expected,
                "{}",
                serde_json::to_string(&patch).unwrap()
            );
        }

        // HTTP/2 gives the same answer.
        let mut h2 = client(&server, true).connect().await.unwrap();
        assert_eq!(h2.protocol(), Some(&b"h2"[..]));
        let r = h2
            .post(
                "/mutate",
                review(
                    "admission.k8s.io/v1",
                    deployment_request("d-2", &deployment),
                ),
            )
            .await
            .unwrap();
        let resp = response(&r.json().unwrap(), "admission.k8s.io/v1", "d-2");
        assert!(decoded_patch(&resp).is_some());

        let m = metrics_text(&server).await;
        assert_eq!(
            metric(&m, "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"deployments.apps\",result=\"patched\"}"),
            4.0,
            "{m}"
        );
        assert!(
            metric(&m, "apiserver_mutating_admission_policy_check_total{policy=\"default-replicas\",policy_binding=\"default-replicas\",error_type=\"no_error\"}") >= 4.0,
            "{m}"
        );
        assert_eq!(metric(&m, "kmutate_policies_loaded"), 3.0, "{m}");
        assert_eq!(metric(&m, "kmutate_policy_load_errors"), 0.0, "{m}");
        server.shutdown().await;
    });
}

#[test]
fn unmatched_request_gets_no_patch_and_no_evaluation() {
    let dir = scratch("unmatched");
    run(Duration::from_secs(60), async {
        let server = started_on_fixture(&dir).await;
        let mut conn = connect(&server).await;
        let cm = config_map("settings");
        let resp = create(&mut conn, "u-1", "ConfigMap", "configmaps", &cm).await;
        assert_eq!(resp["allowed"], true);
        assert!(
            resp.get("patch").is_none() && resp.get("patchType").is_none(),
            "{resp}"
        );

        // Its object is still read whole: one it could not decode is refused.
        let mut request = request_for("u-3", "", "v1", "ConfigMap", "configmaps", &cm);
        request["object"] = json!("BAD");
        let bad = String::from_utf8(review("admission.k8s.io/v1", request))
            .unwrap()
            .replace(
                "\"BAD\"",
                r#"{"metadata":{"name":"settings"},"data":{"k":"\ud800"}}"#,
            );
        // As refused when the object is built.
        let refused = kmutate::webhook::review::decode(bad.as_bytes()).unwrap_err();
        let r = conn.post("/mutate", bad.into_bytes()).await.unwrap();
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains(&refused.to_string()), "{}", r.text());

        // A DELETE of a Deployment matches no policy either.
        let mut request = deployment_request("u-2", &json!({"metadata": {"name": "x"}}));
        request["operation"] = json!("DELETE");
        request["oldObject"] = request["object"].take();
        let r = conn
            .post("/mutate", review("admission.k8s.io/v1", request))
            .await
            .unwrap();
        let resp = response(&r.json().unwrap(), "admission.k8s.io/v1", "u-2");
        assert_eq!(resp["allowed"], true);
        assert!(resp.get("patch").is_none());

        let m = metrics_text(&server).await;
        assert!(
            !m.contains("apiserver_mutating_admission_policy_check_total{"),
            "no policy ran: {m}"
        );
        assert_eq!(
            metric(&m, "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"configmaps\",result=\"allowed\"}"),
            1.0,
            "{m}"
        );
        // TLS 1.2 clients are served too.
        let mut roots = rustls::RootCertStore::empty();
        for c in tls::read_certs(server.ca_bundle().unwrap()).unwrap() {
            roots.add(c).unwrap();
        }
        let tls12 = rustls::ClientConfig::builder_with_provider(tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut old = Client::new(server.addr(), "localhost", tls12, false)
            .unwrap()
            .connect()
            .await
            .unwrap();
        assert_eq!(old.get("/healthz").await.unwrap().status, 200);

        // Health endpoints.
        assert_eq!(conn.get("/healthz").await.unwrap().status, 200);
        assert_eq!(conn.get("/readyz").await.unwrap().status, 200);
        assert_eq!(conn.get("/nowhere").await.unwrap().status, 404);
        server.shutdown().await;
    });
}

const FAILING: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: fails-closed}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
  failurePolicy: Fail
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/data/x", value: object.data.missing}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: fails-closed-binding}
spec: {policyName: fails-closed}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: fails-open}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [secrets]
  failurePolicy: Ignore
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{op: "add", path: "/data/x", value: object.data.missing}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: fails-open-binding}
spec: {policyName: fails-open}
"#;

/// `count` policies, each setting its own label on ConfigMaps.
fn labelling_policies(count: usize) -> String {
    (0..count)
        .map(|i| {
            let mutation = format!(
                r#"patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{{metadata: Object.metadata{{labels: {{"l{i}": "v"}}}}}}'"#
            );
            policy_and_binding(&format!("label-{i}"), "configmaps", "Fail", &mutation)
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[test]
fn a_request_many_bindings_match_gets_every_mutation() {
    // Past a few dozen matching bindings the evaluation leaves the worker
    // for the blocking pool: the answer must not change.
    let dir = scratch("many-bindings");
    run(Duration::from_secs(60), async {
        let policies = write_policies(&dir, &labelling_policies(40));
        let server = started(config(&dir, vec![policies], vec![])).await;
        let mut conn = connect(&server).await;
        let cm = config_map("m");
        let resp = create(&mut conn, "m-1", "ConfigMap", "configmaps", &cm).await;
        assert_eq!(resp["allowed"], true, "{resp}");
        let mut patched = cm.clone();
        json_patch::patch(&mut patched, &decoded_patch(&resp).expect("a patch")).unwrap();
        let labels: serde_json::Map<String, Value> =
            (0..40).map(|i| (format!("l{i}"), json!("v"))).collect();
        assert_eq!(patched["metadata"]["labels"], Value::Object(labels));
        server.shutdown().await;
    });
}

/// A ConfigMap policy on UPDATE and its binding (same name): `selector` is
/// its object selector's `matchLabels`, `value` the value its JSON patch
/// adds at `/data/added`.
fn update_policy(name: &str, selector: &str, value: &str) -> String {
    let mutation = format!(
        r#"patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{{op: "add", path: "/data/added", value: {value}}}]'"#
    );
    let selector = format!("    objectSelector: {{matchLabels: {selector}}}\n");
    policy_on(name, "UPDATE", "configmaps", &selector, "Fail", &mutation)
}

// The server decodes an update's old object only for policies that may
// read it; those get it whole, and an invalid one is refused either way.
#[test]
fn an_update_gets_its_old_object_where_policies_read_it() {
    let dir = scratch("old-object");
    run(Duration::from_secs(60), async {
        let update = |uid: &str, old: Value| {
            let mut request =
                request_for(uid, "", "v1", "ConfigMap", "configmaps", &config_map("a"));
            request["operation"] = json!("UPDATE");
            request["oldObject"] = old;
            review("admission.k8s.io/v1", request)
        };
        let mut old = config_map("a");
        old["data"]["a"] = json!("before");
        old["metadata"]["labels"] = json!({"app": "web"});
        let added = |response: &Value| {
            let patch = decoded_patch(response).unwrap_or_else(|| panic!("no patch: {response}"));
            serde_json::to_value(patch).unwrap()
        };
        for (policies, want) in [
            // Read in an expression.
            (update_policy("reads", "{}", "oldObject.data.a"), "before"),
            // Matched through the old object's labels (the new object has none).
            (
                update_policy("selects", "{app: web}", "\"selected\""),
                "selected",
            ),
            // Never read: left out.
            (update_policy("plain", "{}", "\"x\""), "x"),
        ] {
            let server = started(config(&dir, vec![write_policies(&dir, &policies)], vec![])).await;
            let mut conn = connect(&server).await;
            let r = conn
                .post("/mutate", update("u-1", old.clone()))
                .await
                .unwrap();
            let resp = response(&r.json().unwrap(), "admission.k8s.io/v1", "u-1");
            assert_eq!(
                added(&resp),
                json!([{"op": "add", "path": "/data/added", "value": want}]),
                "{resp}"
            );
            // An old object it could not decode is refused, read or not.
            let bad = String::from_utf8(update("u-2", json!("OLD")))
                .unwrap()
                .replace("\"OLD\"", "1e400");
            let r = conn.post("/mutate", bad.into_bytes()).await.unwrap();
            assert_eq!(r.status, 400, "{}", r.text());
            server.shutdown().await;
        }
    });
}

#[test]
fn failing_policy_denies_with_fail_and_admits_with_ignore() {
    let dir = scratch("failure-policy");
    run(Duration::from_secs(60), async {
        let policies = write_policies(&dir, FAILING);
        let server = started(config(&dir, vec![policies], vec![])).await;
        let mut conn = connect(&server).await;

        let cm = config_map("a");
        let resp = create(&mut conn, "f-1", "ConfigMap", "configmaps", &cm).await;
        assert_eq!(resp["allowed"], false, "{resp}");
        assert_eq!(resp["status"]["code"], 403);
        assert_eq!(resp["status"]["reason"], "Forbidden");
        let message = resp["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("policy 'fails-closed' with binding 'fails-closed-binding' denied request: expression '[JSONPatch{op: \"add\", path: \"/data/x\", value: object.data.missing}]' resulted in error: no such key: missing"),
            "{message}"
        );
        assert!(resp.get("patch").is_none());

        let mut secret = config_map("s");
        secret["kind"] = json!("Secret");
        let resp = create(&mut conn, "f-2", "Secret", "secrets", &secret).await;
        assert_eq!(resp["allowed"], true, "{resp}");
        assert!(
            resp.get("patch").is_none() && resp.get("status").is_none(),
            "{resp}"
        );

        let m = metrics_text(&server).await;
        assert_eq!(metric(&m, "apiserver_mutating_admission_policy_check_total{policy=\"fails-closed\",policy_binding=\"fails-closed-binding\",error_type=\"invalid_error\"}"), 1.0, "{m}");
        assert_eq!(metric(&m, "apiserver_mutating_admission_policy_check_total{policy=\"fails-open\",policy_binding=\"fails-open-binding\",error_type=\"invalid_error\"}"), 1.0, "{m}");
        assert_eq!(metric(&m, "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"configmaps\",result=\"denied\"}"), 1.0, "{m}");
        assert_eq!(metric(&m, "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"secrets\",result=\"allowed\"}"), 1.0, "{m}");
        server.shutdown().await;
    });
}

#[test]
fn bad_bodies_are_refused_and_the_server_keeps_serving() {
    let dir = scratch("bad-bodies");
    run(Duration::from_secs(60), async {
        let server = started_on_fixture(&dir).await;
        let mut conn = connect(&server).await;

        let r = conn.post("/mutate", "{\"apiVersion\": ").await.unwrap();
        assert_eq!(r.status, 400);
        assert!(r.text().contains("invalid AdmissionReview"), "{}", r.text());

        let r = conn
            .post("/mutate", r#"{"apiVersion":"v1","kind":"Pod"}"#)
            .await
            .unwrap();
        assert_eq!(r.status, 400);
        assert!(
            r.text().contains("expected kind AdmissionReview"),
            "{}",
            r.text()
        );

        let deep = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"x","object":{}{}}}}}"#,
            "[".repeat(5000),
            "]".repeat(5000)
        );
        let r = conn.post("/mutate", deep).await.unwrap();
        assert_eq!(r.status, 400);
        assert!(r.text().contains("nests deeper"), "{}", r.text());

        let r = conn.get("/mutate").await.unwrap();
        assert_eq!(r.status, 405);

        // Over 3 MiB: refused from Content-Length.
        let mut big = config_map("big");
        big["data"]["blob"] = json!("x".repeat(3 * 1024 * 1024 + 1));
        let body = review(
            "admission.k8s.io/v1",
            request_for("b-1", "", "v1", "ConfigMap", "configmaps", &big),
        );
        let mut fresh = connect(&server).await;
        let r = fresh.post("/mutate", body).await.unwrap();
        assert_eq!(r.status, 413);

        // Still serving, on the first connection and on new ones.
        let deployment = example_deployment();
        let ok = review("admission.k8s.io/v1", deployment_request("ok", &deployment));
        for c in [&mut conn, &mut connect(&server).await] {
            let r = c.post("/mutate", ok.clone()).await.unwrap();
            assert_eq!(r.status, 200);
            assert!(
                decoded_patch(&response(&r.json().unwrap(), "admission.k8s.io/v1", "ok")).is_some()
            );
        }

        let m = metrics_text(&server).await;
        assert_eq!(
            metric(
                &m,
                "kmutate_webhook_requests_total{operation=\"\",resource=\"\",result=\"invalid\"}"
            ),
            3.0,
            "{m}"
        );
        assert_eq!(
            metric(
                &m,
                "kmutate_webhook_requests_total{operation=\"\",resource=\"\",result=\"too_large\"}"
            ),
            1.0,
            "{m}"
        );
        assert_eq!(metric(&m, "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"deployments.apps\",result=\"patched\"}"), 2.0, "{m}");
        assert_eq!(metric(&m, "kmutate_webhook_request_duration_seconds_count{operation=\"\",resource=\"\",result=\"invalid\"}"), 3.0, "{m}");
        server.shutdown().await;
    });
}

#[test]
fn a_certificate_replaced_on_disk_is_served_to_the_next_connection() {
    let dir = scratch("rotation");
    run(Duration::from_secs(60), async {
        let (ca, ca_pem) = tls::new_ca("test CA").unwrap();
        let ca_path = dir.join("ca.crt");
        std::fs::write(&ca_path, ca_pem).unwrap();
        let files = CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        };
        let first = tls::issue(&ca, "first", &["localhost".into()], true).unwrap();
        std::fs::write(&files.cert, &first.cert_pem).unwrap();
        std::fs::write(&files.key, &first.key_pem).unwrap();
        let mut cfg = config(&dir, vec![fixture("policies")], vec![fixture("bindings")]);
        cfg.tls = TlsSource::Files(files.clone());
        let server = started(cfg).await;
        // Without session resumption, so that each handshake shows the certificate.
        let mut client_config = tls::client_config(&ca_path, None, &[]).unwrap();
        client_config.resumption = rustls::client::Resumption::disabled();
        let client = Client::new(server.addr(), "localhost", client_config, false).unwrap();
        let der = |pem: &str| {
            rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
                .map(|c: rustls::pki_types::CertificateDer<'static>| c.to_vec())
                .unwrap()
        };

        let mut old = client.connect().await.unwrap();
        assert_eq!(
            old.peer_certificate().unwrap().to_vec(),
            der(&first.cert_pem)
        );

        // cert-manager style: new files moved into place.
        let second = tls::issue(&ca, "second", &["localhost".into()], true).unwrap();
        std::fs::write(dir.join("tls.crt.new"), &second.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key.new"), &second.key_pem).unwrap();
        std::fs::rename(dir.join("tls.key.new"), &files.key).unwrap();
        std::fs::rename(dir.join("tls.crt.new"), &files.cert).unwrap();

        let mut new = client.connect().await.unwrap();
        assert_eq!(
            new.peer_certificate().unwrap().to_vec(),
            der(&second.cert_pem)
        );
        // The open connection was not dropped.
        assert_eq!(old.get("/healthz").await.unwrap().status, 200);
        assert_eq!(new.get("/healthz").await.unwrap().status, 200);

        let m = metrics_text(&server).await;
        assert_eq!(
            metric(&m, "kmutate_certificate_reloads_total{result=\"success\"}"),
            1.0,
            "{m}"
        );
        server.shutdown().await;
    });
}

/// A client of `server` trusting `ca`, presenting `identity` if given; each
/// has its own TLS session cache.
fn tls_client(server: &Server, ca: &Path, identity: Option<&CertFiles>) -> Client {
    Client::new(
        server.addr(),
        "localhost",
        tls::client_config(ca, identity, &[]).unwrap(),
        false,
    )
    .unwrap()
}

#[test]
fn client_certificates_are_required_with_a_client_ca() {
    let dir = scratch("mtls");
    run(Duration::from_secs(60), async {
        let (ca, ca_pem) = tls::new_ca("clients").unwrap();
        let client_ca = dir.join("clients.crt");
        std::fs::write(&client_ca, ca_pem).unwrap();
        let identity = tls::issue(&ca, "kube-apiserver", &[], false).unwrap();
        let id_files = CertFiles {
            cert: dir.join("client.crt"),
            key: dir.join("client.key"),
        };
        std::fs::write(&id_files.cert, &identity.cert_pem).unwrap();
        std::fs::write(&id_files.key, &identity.key_pem).unwrap();
        let mut cfg = config(&dir, vec![fixture("policies")], vec![fixture("bindings")]);
        cfg.client_ca = Some(client_ca);
        let server = started(cfg).await;
        let ca = server.ca_bundle().unwrap().to_path_buf();

        let anonymous = tls_client(&server, &ca, None);
        let refused = match anonymous.connect().await {
            Err(_) => true,
            // TLS 1.3: the refusal may arrive with the first request.
            Ok(mut c) => c.get("/healthz").await.is_err(),
        };
        assert!(refused, "a client without a certificate is refused");

        let known = tls_client(&server, &ca, Some(&id_files));
        let mut c = known.connect().await.unwrap();
        assert_eq!(c.get("/healthz").await.unwrap().status, 200);

        // The client CA rotates: the file is replaced (as a Secret volume
        // swaps it), and the next handshakes trust the new CA alone.
        let (new_ca, new_ca_pem) = tls::new_ca("clients-2").unwrap();
        let rotated = tls::issue(&new_ca, "kube-apiserver", &[], false).unwrap();
        let rotated_files = CertFiles {
            cert: dir.join("client-2.crt"),
            key: dir.join("client-2.key"),
        };
        std::fs::write(&rotated_files.cert, &rotated.cert_pem).unwrap();
        std::fs::write(&rotated_files.key, &rotated.key_pem).unwrap();
        let staged = dir.join("clients.crt.new");
        std::fs::write(&staged, new_ca_pem).unwrap();
        std::fs::rename(&staged, dir.join("clients.crt")).unwrap();
        let rotated_client = tls_client(&server, &ca, Some(&rotated_files));
        let mut c = rotated_client.connect().await.unwrap();
        assert_eq!(c.get("/healthz").await.unwrap().status, 200);
        // A fresh client: one that resumes an earlier TLS session is not
        // asked for its certificate again.
        let old_identity = tls_client(&server, &ca, Some(&id_files));
        let old_refused = match old_identity.connect().await {
            Err(_) => true,
            Ok(mut c) => c.get("/healthz").await.is_err(),
        };
        assert!(old_refused, "a certificate of the replaced CA is refused");
        server.shutdown().await;
    });
}

/// A policy on `resource` CREATEs in the core group, with one mutation
/// (`mutation`: its `patchType` line and what follows, at list-item depth),
/// and its binding, both named `name`.
fn policy_and_binding(name: &str, resource: &str, failure_policy: &str, mutation: &str) -> String {
    policy_on(name, "CREATE", resource, "", failure_policy, mutation)
}

/// [`policy_and_binding`] on `operation`, with `constraints` (lines at
/// the depth of `matchConstraints`' fields) added to its matching.
fn policy_on(
    name: &str,
    operation: &str,
    resource: &str,
    constraints: &str,
    failure_policy: &str,
    mutation: &str,
) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [{operation}]
      resources: [{resource}]
{constraints}  failurePolicy: {failure_policy}
  mutations:
  - {mutation}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec: {{policyName: {name}}}
"#
    )
}

/// A policy whose expression takes a while (nested comprehensions).
fn slow_policy(name: &str, resource: &str, failure_policy: &str, width: usize) -> String {
    let list = format!(
        "[{}]",
        (0..width)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let mutation = format!(
        r#"patchType: JSONPatch
    jsonPatch:
      expression: '{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0))) ? [JSONPatch{{op: "add", path: "/data/slow", value: "yes"}}] : []'"#
    );
    policy_and_binding(name, resource, failure_policy, &mutation)
}

#[test]
fn a_request_past_the_timeout_gets_its_failure_policy() {
    let dir = scratch("timeout");
    run(Duration::from_secs(90), async {
        let yaml = slow_policy("slow-closed", "configmaps", "Fail", 24)
            + "---\n"
            + &slow_policy("slow-open", "secrets", "Ignore", 24);
        let policies = write_policies(&dir, &yaml);
        let cm = review(
            "admission.k8s.io/v1",
            request_for("t-1", "", "v1", "ConfigMap", "configmaps", &config_map("c")),
        );
        let mut secret = config_map("s");
        secret["kind"] = json!("Secret");
        let secret = review(
            "admission.k8s.io/v1",
            request_for("t-2", "", "v1", "Secret", "secrets", &secret),
        );

        // How long the evaluation takes here (debug or release build).
        let calibrate = started(config(&dir.join("a"), vec![policies.clone()], vec![])).await;
        let mut conn = connect(&calibrate).await;
        let t = Instant::now();
        let r = conn.post("/mutate", cm.clone()).await.unwrap();
        let took = t.elapsed();
        let resp = response(&r.json().unwrap(), "admission.k8s.io/v1", "t-1");
        assert!(decoded_patch(&resp).is_some(), "{resp}");
        calibrate.shutdown().await;

        let mut cfg = config(&dir.join("b"), vec![policies], vec![]);
        cfg.timeout = (took / 5).max(Duration::from_millis(2));
        let server = started(cfg).await;
        let mut conn = connect(&server).await;
        let r = conn.post("/mutate", cm).await.unwrap();
        let resp = response(&r.json().unwrap(), "admission.k8s.io/v1", "t-1");
        assert_eq!(resp["allowed"], false, "{resp}");
        let message = resp["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("policy 'slow-closed' with binding 'slow-closed' denied request: evaluation did not complete within"),
            "{message}"
        );
        let r = conn.post("/mutate", secret).await.unwrap();
        let resp = response(&r.json().unwrap(), "admission.k8s.io/v1", "t-2");
        assert_eq!(resp["allowed"], true, "{resp}");
        assert!(resp.get("patch").is_none(), "{resp}");
        let m = metrics_text(&server).await;
        assert_eq!(metric(&m, "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"configmaps\",result=\"timeout\"}"), 1.0, "{m}");
        assert_eq!(metric(&m, "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"secrets\",result=\"timeout\"}"), 1.0, "{m}");
        // The server still answers while the abandoned evaluations finish.
        assert_eq!(conn.get("/healthz").await.unwrap().status, 200);
        server.shutdown().await;
    });
}

#[test]
fn shutdown_during_load_loses_no_accepted_request() {
    let dir = scratch("drain");
    run(Duration::from_secs(90), async {
        let policies = write_policies(&dir, &slow_policy("drain", "configmaps", "Fail", 8));
        let server = started(config(&dir, vec![policies], vec![])).await;
        let client = client(&server, false);
        let body = bytes::Bytes::from(review(
            "admission.k8s.io/v1",
            request_for("l", "", "v1", "ConfigMap", "configmaps", &config_map("c")),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (client, body, stop, answered) =
                (client.clone(), body.clone(), stop.clone(), answered.clone());
            tasks.push(tokio::spawn(async move {
                let mut conn: Option<Connection> = None;
                let mut refused = 0u32;
                while !stop.load(Ordering::SeqCst) && refused < 50 {
                    if conn.is_none() {
                        match client.connect().await {
                            Ok(c) => conn = Some(c),
                            Err(_) => {
                                // Listener closed: no new connection is accepted.
                                refused += 1;
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                continue;
                            }
                        }
                    }
                    let c = conn.as_mut().unwrap();
                    match c.post("/mutate", body.clone()).await {
                        Ok(r) => {
                            assert_eq!(r.status, 200, "{}", r.text());
                            let v = r.json().unwrap();
                            assert_eq!(v["response"]["allowed"], true, "{v}");
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        // The server closed the connection before reading the request.
                        Err(_) => conn = None,
                    }
                    if conn.as_ref().is_some_and(|c| !c.is_open()) {
                        conn = None;
                    }
                }
            }));
        }
        // Let the load run, then shut down with requests in flight.
        let deadline = Instant::now() + Duration::from_secs(20);
        while answered.load(Ordering::SeqCst) < 40 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut server = server;
        server.shutdown_handle().shutdown();
        server.wait().await;
        stop.store(true, Ordering::SeqCst);
        for t in tasks {
            t.await.unwrap();
        }
        let received = server.requests_received();
        assert!(received >= 40, "{received}");
        assert_eq!(
            answered.load(Ordering::SeqCst),
            received,
            "every request the server read was answered"
        );
        // Nothing is accepted any more.
        assert!(client.connect().await.is_err());
    });
}

#[cfg(unix)]
#[test]
fn the_serve_binary_drains_and_exits_on_sigterm() {
    use std::process::{Command, Stdio};
    let dir = scratch("sigterm");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kmutate"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(["--log-format", "json", "--timeout", "5s"])
        .arg("--cert-dir")
        .arg(dir.join("tls"))
        .arg("--policies")
        .arg(fixture("policies"))
        .arg("--bindings")
        .arg(fixture("bindings"))
        .current_dir(&dir)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kmutate serve starts");
    let stderr = child.stderr.take().unwrap();
    let lines = support::json_lines(stderr);
    let next = |what: &str| -> Value {
        loop {
            match lines.recv_timeout(Duration::from_secs(30)) {
                Ok(v)
                    if v["fields"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(what)) =>
                {
                    return v
                }
                Ok(_) => {}
                Err(e) => panic!("no log line containing {what:?}: {e}"),
            }
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let serving = next("serving POST /mutate");
        let addr: std::net::SocketAddr = serving["fields"]["listen"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        next("policies loaded");
        run(Duration::from_secs(30), async {
            let config = tls::client_config(&dir.join("tls/ca.crt"), None, &[]).unwrap();
            let client = Client::new(addr, "localhost", config, false).unwrap();
            let mut conn = client.connect().await.unwrap();
            let deployment = example_deployment();
            let r = conn
                .post(
                    "/mutate",
                    review(
                        "admission.k8s.io/v1",
                        deployment_request("s-1", &deployment),
                    ),
                )
                .await
                .unwrap();
            let resp = response(&r.json().unwrap(), "admission.k8s.io/v1", "s-1");
            assert!(decoded_patch(&resp).is_some());
        });
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        next("drained");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "{status}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "kmutate serve exits after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }));
    if result.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    result.unwrap();
}

#[test]
fn the_load_generator_drives_the_server_over_http1_and_http2() {
    use kmutate::webhook::loadtest::{self, LoadtestConfig};
    let dir = scratch("loadtest");
    run(Duration::from_secs(60), async {
        let server = started_on_fixture(&dir).await;
        let body = review(
            "admission.k8s.io/v1",
            deployment_request("d-1", &example_deployment()),
        );
        let config = LoadtestConfig {
            addr: server.addr(),
            server_name: "localhost".into(),
            path: "/mutate".into(),
            ca: server.ca_bundle().expect("self-signed CA").to_path_buf(),
            identity: None,
            body: bytes::Bytes::from(body),
            connections: 2,
            streams: 1,
            rate: None,
            duration: Duration::from_millis(300),
            warmup: Duration::from_millis(50),
            http2: false,
        };
        let mut measured = 0;
        for http2 in [false, true] {
            let report = loadtest::run(&LoadtestConfig {
                http2,
                ..config.clone()
            })
            .await
            .unwrap();
            assert!(report.ok > 0, "{report}");
            assert_eq!((report.bad_status, report.errors), (0, 0), "{report}");
            assert_eq!(report.latencies.len() as u64, report.ok);
            // A connection of its own for each loop.
            assert_eq!(report.opened, 2, "{report}");
            measured += report.ok;
        }
        // kube-apiserver's way over HTTP/2 to a webhook on a loopback
        // address: its requests at once as streams of one connection.
        let report = loadtest::run(&LoadtestConfig {
            http2: true,
            connections: 1,
            streams: 4,
            ..config.clone()
        })
        .await
        .unwrap();
        assert!(report.ok > 0, "{report}");
        assert_eq!((report.bad_status, report.errors), (0, 0), "{report}");
        assert_eq!(report.opened, 1, "{report}");
        assert!(report
            .to_string()
            .contains("1 HTTP/2 connections, 4 streams each"));
        measured += report.ok;
        // Each run also sent its first request and its warm-up.
        assert!(server.requests_received() > measured);
        // HTTP/1.1 takes one request at a time on a connection.
        let e = loadtest::run(&LoadtestConfig {
            streams: 2,
            ..config.clone()
        })
        .await
        .unwrap_err();
        assert!(format!("{e:#}").contains("needs HTTP/2"), "{e:#}");
        // A path the server does not serve fails at the first request.
        let e = loadtest::run(&LoadtestConfig {
            path: "/nope".into(),
            ..config.clone()
        })
        .await
        .unwrap_err();
        assert!(format!("{e:#}").contains("404"), "{e:#}");
        // A fixed rate is never exceeded (100 requests are due in the
        // measured half second; a slow test machine may send fewer).
        let report = loadtest::run(&LoadtestConfig {
            rate: Some(200.0),
            duration: Duration::from_millis(500),
            ..config
        })
        .await
        .unwrap();
        assert!((1..=101).contains(&report.ok), "{report}");
    });
}

/// Writes `bytes` to `stream` one at a time, `every` apart, until the server
/// closes the connection (or, all written, for good); returns how long after
/// `since` the server closed it, and what it had answered.
async fn dribble(
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    bytes: &[u8],
    every: Duration,
    since: Instant,
) -> (Duration, Vec<u8>) {
    use tokio::io::AsyncWriteExt as _;
    let (mut reader, mut writer) = tokio::io::split(stream);
    let bytes = bytes.to_vec();
    let writing = tokio::spawn(async move {
        for b in bytes {
            if writer.write_all(&[b]).await.is_err() || writer.flush().await.is_err() {
                break;
            }
            tokio::time::sleep(every).await;
        }
        // Kept open until the server closes it.
        std::future::pending::<()>().await;
    });
    let (answer, _) = support::read_until_closed(&mut reader).await;
    let closed = since.elapsed();
    writing.abort();
    (closed, answer)
}

/// A request head that never ends (no empty line).
const ENDLESS_HEAD: &[u8] = b"POST /mutate HTTP/1.1\r\nhost: localhost\r\n\
    content-type: application/json\r\ncontent-length: 2\r\nuser-agent: kube-apiserver-admission\r\n";

#[test]
fn a_head_sent_slowly_is_cut_at_the_header_read_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(1);
    const BYTE_EVERY: Duration = Duration::from_millis(50);
    let dir = scratch("header-read-timeout");
    run(Duration::from_secs(30), async {
        let server = started(ServeConfig {
            header_read_timeout: TIMEOUT,
            idle_timeout: Duration::from_secs(30),
            ..config(&dir, vec![fixture("policies")], vec![fixture("bindings")])
        })
        .await;
        // Closed no sooner than the timeout, and well before a timer
        // restarted by each byte (or the 60 s of before) would close it.
        let in_time = TIMEOUT..3 * TIMEOUT;

        // A new connection's first head, a byte every 50 ms: the timeout
        // counts from the connection's start, for the head in all.
        let stream = support::tls_stream(&server, &[b"http/1.1"]).await;
        let (closed, answer) = dribble(stream, ENDLESS_HEAD, BYTE_EVERY, Instant::now()).await;
        assert!(in_time.contains(&closed), "closed after {closed:?}");
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));

        // A later head on a keep-alive connection: from its first byte, not
        // from the end of the request before (the connection idles past
        // the header-read timeout first, as the idle timeout allows).
        let mut stream = support::tls_stream(&server, &[b"http/1.1"]).await;
        {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
                .await
                .unwrap();
            let mut answer = Vec::new();
            while !answer.ends_with(b"\r\n\r\nok\n") {
                let mut buf = [0u8; 1024];
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed before answering");
                answer.extend_from_slice(&buf[..n]);
            }
            assert!(answer.starts_with(b"HTTP/1.1 200 OK\r\n"));
        }
        tokio::time::sleep(TIMEOUT + Duration::from_millis(300)).await;
        let (closed, answer) = dribble(stream, ENDLESS_HEAD, BYTE_EVERY, Instant::now()).await;
        assert!(in_time.contains(&closed), "closed after {closed:?}");
        assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));

        // A connection that sends nothing at all, offering no ALPN protocol
        // (the server would tell HTTP/2 from HTTP/1.1 by its first bytes),
        // and one that offers h2 and sends nothing (not even the preface).
        for alpn in [&[][..], &[&b"h2"[..]][..]] {
            let stream = support::tls_stream(&server, alpn).await;
            let (closed, answer) = dribble(stream, b"", BYTE_EVERY, Instant::now()).await;
            assert!(
                in_time.contains(&closed),
                "{alpn:?}: closed after {closed:?}"
            );
            assert!(answer.is_empty());
        }

        // Heads sent whole are served as before.
        let mut conn = connect(&server).await;
        assert_eq!(conn.get("/healthz").await.unwrap().status, 200);
        server.shutdown().await;
    });
}

#[test]
fn an_idle_connection_is_closed_at_the_idle_timeout_and_a_busy_one_is_not() {
    const IDLE: Duration = Duration::from_secs(1);
    let dir = scratch("idle-timeout");
    run(Duration::from_secs(30), async {
        let server = started(ServeConfig {
            idle_timeout: IDLE,
            ..config(&dir, vec![fixture("policies")], vec![fixture("bindings")])
        })
        .await;
        for http2 in [false, true] {
            let mut idle = client(&server, http2).connect().await.unwrap();
            let mut busy = client(&server, http2).connect().await.unwrap();
            assert_eq!(busy.get("/healthz").await.unwrap().status, 200);
            let since = Instant::now();
            assert_eq!(idle.get("/healthz").await.unwrap().status, 200);
            // The busy connection sends a request every 300 ms for 2.5 idle
            // timeouts; the idle one sends none.
            let mut closed = None;
            let mut last_request = Instant::now();
            while since.elapsed() < IDLE * 5 / 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                if closed.is_none() && !idle.is_open() {
                    closed = Some(since.elapsed());
                }
                if last_request.elapsed() >= Duration::from_millis(300) {
                    let r = busy.get("/healthz").await.unwrap();
                    assert_eq!(r.status, 200, "http2 {http2}");
                    last_request = Instant::now();
                }
            }
            let closed = closed.unwrap_or_else(|| panic!("http2 {http2}: idle connection open"));
            assert!(
                (IDLE..2 * IDLE).contains(&closed),
                "http2 {http2}: idle connection closed after {closed:?}"
            );
            assert!(busy.is_open(), "http2 {http2}: busy connection closed");
            assert_eq!(busy.get("/healthz").await.unwrap().status, 200);
            assert!(idle.get("/healthz").await.is_err());
        }
        server.shutdown().await;
    });
}

#[test]
fn mutate_takes_application_json_only() {
    let dir = scratch("content-type");
    run(Duration::from_secs(30), async {
        let server = started_on_fixture(&dir).await;
        let body = review(
            "admission.k8s.io/v1",
            deployment_request("ct-1", &example_deployment()),
        );
        let post = |content_type: Option<&str>| {
            let mut request = format!(
                "POST /mutate HTTP/1.1\r\nhost: localhost\r\n{}content-length: {}\r\n\r\n",
                content_type.map_or(String::new(), |c| format!("content-type: {c}\r\n")),
                body.len()
            )
            .into_bytes();
            request.extend_from_slice(&body);
            request
        };
        let client = client(&server, false);
        for (content_type, status, message) in [
            (
                Some("text/plain"),
                415,
                r#"unsupported Content-Type "text/plain": expected "application/json""#,
            ),
            (
                Some("application/json-patch+json"),
                415,
                r#"unsupported Content-Type "application/json-patch+json": expected "application/json""#,
            ),
            (
                None,
                415,
                r#"missing Content-Type: expected "application/json""#,
            ),
            (Some("application/json; charset=utf-8"), 200, ""),
            (Some("Application/JSON;charset=UTF-8"), 200, ""),
        ] {
            let mut raw = client.connect_raw().await.unwrap();
            let r = raw.send(&post(content_type)).await.unwrap();
            assert_eq!(r.status, status, "{content_type:?}: {}", r.text());
            if status == 415 {
                assert_eq!(r.text(), format!("{message}\n"), "{content_type:?}");
            } else {
                let response = response(&r.json().unwrap(), "admission.k8s.io/v1", "ct-1");
                assert!(decoded_patch(&response).is_some(), "{content_type:?}");
            }
        }
        let m = metrics_text(&server).await;
        assert_eq!(
            metric(
                &m,
                "kmutate_webhook_requests_total{operation=\"\",resource=\"\",result=\"invalid\"}"
            ),
            3.0,
            "{m}"
        );
        server.shutdown().await;
    });
}

/// The replicas' endpoint takes answers only from a replica holding the
/// serving key: anything else is refused, and nothing is remembered.
#[test]
fn the_replicas_endpoint_refuses_whoever_lacks_the_key() {
    let dir = scratch("peers-refuse");
    run(Duration::from_secs(60), async {
        let server = started(ServeConfig {
            peers: vec!["127.0.0.1:9".into()],
            ..config(&dir, vec![fixture("policies")], vec![fixture("bindings")])
        })
        .await;
        let mut conn = connect(&server).await;
        let entry = r#"{"entries":[{"identity":"1","answer":"1","ageMillis":0,"object":{"a":1}}]}"#;
        for authorization in [None, Some("Bearer 00"), Some("Basic a2V5")] {
            let headers: Vec<(&str, &str)> = authorization
                .map(|a| vec![("authorization", a)])
                .unwrap_or_default();
            for method in [hyper::Method::POST, hyper::Method::GET] {
                let answer = conn
                    .request_with(method.clone(), "/reinvocations", &headers, entry.into())
                    .await
                    .unwrap();
                assert_eq!(
                    answer.status,
                    403,
                    "{method} {authorization:?}: {}",
                    answer.text()
                );
            }
        }
        // A replica without --peers has no such endpoint.
        let plain = started_on_fixture(&scratch("peers-none")).await;
        let answer = connect(&plain)
            .await
            .post("/reinvocations", entry)
            .await
            .unwrap();
        assert_eq!(answer.status, 404);
        server.shutdown().await;
        plain.shutdown().await;
    });
}
