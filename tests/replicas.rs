//! Two `kmutate serve` replicas behind one address, through a rolling
//! update, against the real kube-apiserver (issue 42).
//!
//! The replicas share one certificate and name each other with `--peers`
//! (each answer with a change reaches the peer before kube-apiserver, a
//! starting replica takes the other's memory, a stopping one hands its
//! own over);
//! a TCP proxy on loopback gives each new connection to the next replica
//! that listens (as a Service does). kube-apiserver calls the webhook
//! (registered `reinvocationPolicy: IfNeeded`) for Pod creates from 16
//! clients while the replicas restart in turn (SIGTERM, drained, started
//! again). A `Never` policy appends container `sidecar` by JSON patch, an
//! `IfNeeded` one sets a label; the ServiceAccount plugin's token mount
//! into the sidecar makes kube-apiserver reinvoke the webhook, and a
//! reinvocation that reaches the other replica must still be told from a
//! new request. Every Pod must be stored as the built-in plugin stores it
//! with the same policies (created as v1 objects), and none refused, on a
//! node loaded well past its cores.

mod support;

use base64::Engine as _;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::kas::{self, Kas};
use support::{eventually, free_port, run, scratch};
use tokio::net::{TcpListener, TcpStream};

const V1: &str = "admissionregistration.k8s.io/v1";
const CREATES: usize = 1_000;
const CLIENTS: usize = 16;
const RESTART_EVERY: Duration = Duration::from_millis(700);
/// Threads that only burn CPU while the creates run: a node this loaded
/// (5 runnable threads a core on 2 cores) slows a peer's answer past any
/// fixed short wait, and a replica that then answered without its peer
/// knowing had the other take the reinvocation for a new request.
const CPU_HOGS: usize = 8;

/// The two policies, as v1 objects bound to Namespaces labelled `label`
/// (or to all: the webhook's registration selects the Namespace).
fn policies(prefix: &str, label: Option<&str>) -> Vec<Value> {
    let sidecar = json!({"apiVersion": V1, "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": format!("{prefix}-sidecar")},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/spec/containers/-', value: Object.spec.containers{name: 'sidecar', image: 'registry.example/sidecar:1'}}]"}}]}});
    let label_policy = json!({"apiVersion": V1, "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": format!("{prefix}-label")},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{labels: {'containers': string(size(object.spec.containers))}}}"}}]}});
    let binding = |policy: &str| {
        let mut b = json!({"apiVersion": V1, "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": policy}, "spec": {"policyName": policy}});
        if let Some(label) = label {
            b["spec"]["matchResources"] =
                json!({"namespaceSelector": {"matchLabels": {label: "yes"}}});
        }
        b
    };
    vec![
        binding(&format!("{prefix}-sidecar")),
        binding(&format!("{prefix}-label")),
        sidecar,
        label_policy,
    ]
}

fn pod(ns: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "app-", "namespace": ns},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}})
}

/// What the comparison keeps of a stored Pod: its spec and labels, the
/// token volume's random suffix and the node-independent defaults alike.
fn stored_form(pod: &Value) -> Value {
    let pod = kas::without_volatile_metadata(pod);
    json!({"labels": pod["metadata"]["labels"], "spec": pod["spec"]})
}

/// One `kmutate serve` replica, restartable on its port.
struct Replica {
    port: u16,
    args: Vec<String>,
    child: Option<Child>,
    log: PathBuf,
}

impl Replica {
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kmutate"))
            .args(&self.args)
            .env("RUST_LOG", "kmutate=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kmutate serve starts");
        self.child = Some(child);
    }

    /// SIGTERM, then waits for the drain to end.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().unwrap().is_none() {
                assert!(
                    Instant::now() < deadline,
                    "replica on {} did not stop",
                    self.port
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

/// A TCP proxy giving each new connection to the next replica that
/// accepts it, as a Service does.
async fn proxy(listener: TcpListener, backends: Vec<u16>, stop: Arc<AtomicBool>) {
    let next = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        let Ok(Ok((mut inbound, _))) =
            tokio::time::timeout(Duration::from_millis(200), listener.accept()).await
        else {
            continue;
        };
        let backends = backends.clone();
        let next = next.clone();
        tokio::spawn(async move {
            for _ in 0..20 * backends.len() {
                let port = backends[next.fetch_add(1, Ordering::SeqCst) % backends.len()];
                if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        });
    }
}

fn write_documents(dir: &Path, documents: &[Value]) {
    std::fs::create_dir_all(dir).unwrap();
    for (i, d) in documents.iter().enumerate() {
        std::fs::write(
            dir.join(format!("{i}.json")),
            serde_json::to_vec_pretty(d).unwrap(),
        )
        .unwrap();
    }
}

#[test]
fn two_replicas_answer_as_the_builtin_plugin_through_a_rolling_update() {
    let Some(kas) = Kas::start("replicas") else {
        return;
    };
    let dir = scratch("replicas", "rolling-update");
    run(Duration::from_secs(600), async {
        let client = kas.client().await;

        // The built-in plugin's answer: the same policies as v1 objects.
        let builtin_ns = "replicas-builtin";
        kas::create(
            &client,
            &json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": builtin_ns, "labels": {"replicas-builtin": "yes"}}}),
        )
        .await
        .unwrap();
        kas::namespace_with_service_account(&client, builtin_ns).await;
        for o in policies("builtin", Some("replicas-builtin")) {
            kas::create(&client, &o).await.unwrap();
        }
        eventually(Duration::from_secs(30), || async {
            let o = kas::dry_run_create(&client, &pod(builtin_ns)).await.ok()?;
            (o["metadata"]["labels"]["containers"] == "2").then_some(())
        })
        .await
        .expect("the built-in plugin's policies take effect");
        let expected = stored_form(&kas::create(&client, &pod(builtin_ns)).await.unwrap());
        assert_eq!(
            expected["spec"]["containers"].as_array().map(Vec::len),
            Some(2)
        );

        // Two replicas, one certificate, each naming the other.
        let tls = kmutate::webhook::tls::generate_self_signed(&dir.join("tls"), &[]).unwrap();
        write_documents(&dir.join("policies"), &policies("webhook", None));
        let ports = [free_port(), free_port()];
        let mut replicas: Vec<Replica> = (0..2)
            .map(|i| Replica {
                port: ports[i],
                args: vec![
                    "serve".into(),
                    "--policies".into(),
                    dir.join("policies").display().to_string(),
                    "--bindings".into(),
                    dir.join("policies").display().to_string(),
                    "--listen".into(),
                    format!("127.0.0.1:{}", ports[i]),
                    "--metrics-listen".into(),
                    "127.0.0.1:0".into(),
                    "--tls-cert".into(),
                    tls.files.cert.display().to_string(),
                    "--tls-key".into(),
                    tls.files.key.display().to_string(),
                    "--peers".into(),
                    format!("127.0.0.1:{}", ports[1 - i]),
                ],
                child: None,
                log: dir.join(format!("replica-{i}.log")),
            })
            .collect();
        for r in &mut replicas {
            r.start();
        }
        for port in ports {
            assert!(eventually(Duration::from_secs(30), || async {
                listening(port).await.then_some(())
            })
            .await
            .is_some());
        }
        let proxy_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr: SocketAddr = proxy_listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        tokio::spawn(proxy(proxy_listener, ports.to_vec(), stop.clone()));

        let ns = "replicas-webhook";
        kas::create(
            &client,
            &json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"replicas-webhook": "yes"}}}),
        )
        .await
        .unwrap();
        kas::namespace_with_service_account(&client, ns).await;
        let ca = std::fs::read(&tls.ca).unwrap();
        kas::create(
            &client,
            &json!({"apiVersion": V1,
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "kmutate-replicas"},
            "webhooks": [{"name": "kmutate.kmutate.dev",
                "clientConfig": {"url": format!("https://{proxy_addr}/mutate"),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}],
                "namespaceSelector": {"matchLabels": {"replicas-webhook": "yes"}},
                "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded", "sideEffects": "None",
                "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}]}),
        )
        .await
        .unwrap();
        eventually(Duration::from_secs(30), || async {
            let o = kas::dry_run_create(&client, &pod(ns)).await.ok()?;
            (o["metadata"]["labels"]["containers"] == "2").then_some(())
        })
        .await
        .expect("the webhook takes effect");

        // The creates, while the replicas restart in turn.
        let replicas = Arc::new(Mutex::new(replicas));
        let creating = Arc::new(AtomicBool::new(true));
        let restarter = {
            let replicas = replicas.clone();
            let creating = creating.clone();
            tokio::task::spawn_blocking(move || {
                let mut restarts = 0;
                let mut i = 0;
                while creating.load(Ordering::SeqCst) {
                    std::thread::sleep(RESTART_EVERY);
                    let mut replicas = replicas.lock().unwrap();
                    replicas[i].stop();
                    replicas[i].start();
                    restarts += 1;
                    i = 1 - i;
                }
                restarts
            })
        };
        let hogs: Vec<_> = (0..CPU_HOGS)
            .map(|_| {
                let creating = creating.clone();
                std::thread::spawn(move || {
                    let mut spins = 0u64;
                    while creating.load(Ordering::Relaxed) {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                })
            })
            .collect();
        let started = Instant::now();
        let sent = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let stored = Arc::new(Mutex::new(Vec::new()));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let client = client.clone();
                let (sent, refused, stored) = (sent.clone(), refused.clone(), stored.clone());
                tokio::spawn(async move {
                    while sent.fetch_add(1, Ordering::SeqCst) < CREATES {
                        match kas::create(&client, &pod(ns)).await {
                            Ok(o) => stored.lock().unwrap().push(o),
                            Err(e) => refused.lock().unwrap().push(kas::message(&e)),
                        }
                        // About 100 creates a second: the run spans restarts.
                        tokio::time::sleep(Duration::from_millis(150)).await;
                    }
                })
            })
            .collect();
        for c in clients {
            c.await.unwrap();
        }
        creating.store(false, Ordering::SeqCst);
        for hog in hogs {
            hog.join().unwrap();
        }
        let restarts = restarter.await.unwrap();
        stop.store(true, Ordering::SeqCst);
        let elapsed = started.elapsed();

        let refused = refused.lock().unwrap().clone();
        let stored = stored.lock().unwrap().clone();
        let differing: Vec<Value> = stored
            .iter()
            .map(stored_form)
            .filter(|s| *s != expected)
            .collect();
        let handed: usize = (0..2)
            .map(|i| {
                std::fs::read_to_string(dir.join(format!("replica-{i}.log")))
                    .unwrap_or_default()
                    .matches("reinvocation memory handed to the peers")
                    .count()
            })
            .sum();
        eprintln!(
            "{} creates in {:.1} s through {restarts} restarts ({handed} hand-overs by a stopping replica): {} stored, {} refused, {} stored otherwise",
            CREATES,
            elapsed.as_secs_f64(),
            stored.len(),
            refused.len(),
            differing.len()
        );
        assert!(restarts >= 4, "only {restarts} restarts during the creates");
        assert!(
            refused.is_empty(),
            "refused: {:?}",
            &refused[..refused.len().min(5)]
        );
        assert_eq!(stored.len(), CREATES);
        assert!(
            differing.is_empty(),
            "stored otherwise than the built-in plugin stores it:\nexpected {expected:#}\nfound {:#}",
            differing[0]
        );
    });
}
