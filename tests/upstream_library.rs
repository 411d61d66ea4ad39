//! The policies the project ships, and the ones `kmutate translate` writes,
//! against a real kube-apiserver v1.36.2 (`../shared/upstream`):
//!
//! - every policy and binding of `policies/`, `bindings/` and
//!   `deploy/config/` is created as an `admissionregistration.k8s.io/v1`
//!   object (server-side validation, CEL compilation included);
//! - each policy then mutates an object through the apiserver's own
//!   MutatingAdmissionPolicy plugin (a server-side dry-run create), and
//!   the change it makes is the change kmutate makes to the same object;
//! - every policy and binding translated from `conformance/translation/`
//!   passes the same validation (a server-side dry-run create).
//!
//! The apiserver defaults an object and runs the ServiceAccount plugin
//! before the policies see it, and defaults it again after each mutation.
//! So the comparison starts from a baseline: the same dry-run create with
//! no policy in force. kmutate runs the policy on that baseline; every
//! change kmutate makes must be in the apiserver's answer, the apiserver
//! may change nothing that kmutate did not change (but for the defaults
//! filled into what the policy added), and the policy must change
//! something, so a mutation that did not happen cannot pass.

mod support;

use kmutate::conformance::cluster::compare::{self, at, changes, derived, show};
use kmutate::conformance::{normalize, prepare, Case};
use kmutate::dispatch::Outcome;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::kas::{self, without_volatile_metadata as stable, Kas};
use support::{documents, eventually as poll, single_document as one};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Whether `actual` holds `expected`, the apiserver's defaults inside
/// allowed: admission reinvocation runs the built-in plugins again, and the
/// ServiceAccount plugin mounts its token into containers a policy added.
fn holds(actual: &Value, expected: &Value) -> bool {
    compare::holds(actual, expected, &is_token_mount)
}

/// The ServiceAccount plugin's token mount (its name made stable by `kas`).
fn is_token_mount(v: &Value) -> bool {
    v["name"] == "kube-api-access-xxxxx" && v.get("mountPath").is_some()
}

/// The problems of the apiserver's answer `upstream` against kmutate's
/// `kmutate`, both from `baseline`.
fn compare(baseline: &Value, upstream: &Value, kmutate: &Value) -> Vec<String> {
    // As the conformance runner compares: nulls and empty lists and maps
    // are what a typed apiserver omits.
    let (baseline, upstream, kmutate) = (
        &normalize(baseline),
        &normalize(upstream),
        &normalize(kmutate),
    );
    let ours = changes(baseline, kmutate);
    let theirs: Vec<_> = changes(baseline, upstream)
        .into_iter()
        .filter(|(path, _)| !derived(path))
        .collect();
    let mut problems = Vec::new();
    if ours.is_empty() {
        problems.push("kmutate changed nothing: the case shows no mutation".into());
    }
    for (path, value) in &ours {
        let found = at(upstream, path);
        let ok = match (value, found) {
            (None, None) => true,
            (Some(v), Some(f)) => holds(f, v),
            _ => false,
        };
        if !ok {
            problems.push(format!(
                "{}: kmutate made it {}, the apiserver {}",
                show(path),
                value.as_ref().map_or("absent".into(), Value::to_string),
                found.map_or("absent".into(), Value::to_string)
            ));
        }
    }
    for (path, value) in &theirs {
        let covered = ours
            .iter()
            .any(|(p, _)| path.starts_with(p) || p.starts_with(path));
        if !covered {
            problems.push(format!(
                "{}: the apiserver made it {}, kmutate left it alone",
                show(path),
                value.as_ref().map_or("absent".into(), Value::to_string)
            ));
        }
    }
    problems
}

/// A shipped policy with its binding and the object it is shown on.
struct Shipped {
    policy: Value,
    binding: Value,
    /// The policy's library cases, in order (their resources and objects),
    /// or one written here; the first whose object the apiserver admits
    /// and the policy changes is the one shown.
    cases: Vec<Value>,
}

/// Every shipped policy: `policies/` with `bindings/` and the cases of its
/// `conformance/library/` file, and `deploy/config/`'s demo policy on a
/// Pod that opts in.
fn shipped() -> Vec<Shipped> {
    let mut out = Vec::new();
    let mut stems: Vec<String> = std::fs::read_dir(repo("policies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    for stem in stems {
        out.push(Shipped {
            policy: one(&repo(&format!("policies/{stem}.yaml"))),
            binding: one(&repo(&format!("bindings/{stem}.yaml"))),
            cases: documents(&repo(&format!("conformance/library/{stem}.yaml"))),
        });
    }
    let mut pod = one(&repo("examples/pod.yaml"));
    pod["metadata"]["labels"] = json!({"kmutate.dev/demo": "true"});
    out.push(Shipped {
        policy: one(&repo("deploy/config/policies/kmutate-demo.yaml")),
        binding: one(&repo("deploy/config/bindings/kmutate-demo.yaml")),
        cases: vec![json!({"name": "deploy-config-kmutate-demo", "object": pod})],
    });
    assert!(out.len() >= 16, "{} shipped policies", out.len());
    out
}

/// kmutate's answer to creating `object` with `shipped`'s policy in force
/// and `case`'s cluster objects.
fn kmutate_answer(shipped: &Shipped, case: &Value, object: &Value) -> Outcome {
    let mut doc = case.clone();
    doc["policies"] = json!([shipped.policy]);
    doc["bindings"] = json!([shipped.binding]);
    doc["object"] = object.clone();
    let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let resources = doc["resources"].as_array().cloned().unwrap_or_default();
    let has_ns = resources
        .iter()
        .any(|r| r["kind"] == "Namespace" && r["metadata"]["name"] == ns);
    let mut resources = resources;
    if !has_ns && !ns.is_empty() {
        resources.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    doc["resources"] = Value::Array(resources);
    // The dry-run create is the admin's (kube-apiserver.sh's token).
    doc["request"] = json!({"operation": "CREATE",
        "userInfo": {"username": "admin", "uid": "admin-uid",
            "groups": ["system:masters", "system:authenticated"]}});
    let case = Case {
        name: case["name"].as_str().unwrap_or_default().into(),
        source: kmutate::api::SourceRef {
            file: "tests/upstream_library.rs".into(),
            document: 0,
        },
        doc,
    };
    prepare(&case)
        .unwrap_or_else(|e| panic!("{}: {e}", case.name))
        .run()
}

#[test]
fn shipped_policies_are_accepted_and_mutate_as_through_the_builtin_plugin() {
    let Some(kas) = Kas::start("library") else {
        return;
    };
    runtime().block_on(async {
        let client = kas.client().await;
        let mut failures = Vec::new();
        // kube-apiserver 1.36 stops watching a paramKind when its last
        // policy goes and, when a policy of that paramKind comes back,
        // reads the stale cache: params created meanwhile are not found
        // (seen here: a ConfigMap made after the first ConfigMap-param
        // policy was deleted stays unknown to the next one). A policy of
        // that paramKind that matches nothing keeps the watch alive.
        let keeper = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "keep-configmap-params-watched"},
            "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "reinvocationPolicy": "Never",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["example.invalid"],
                    "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["nothings"]}]},
                "mutations": [{"patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": "Object{}"}}]}});
        let keeper_binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": "keep-configmap-params-watched"},
            "spec": {"policyName": "keep-configmap-params-watched",
                "paramRef": {"name": "none", "parameterNotFoundAction": "Allow"}}});
        kas::create(&client, &keeper).await.unwrap();
        kas::create(&client, &keeper_binding).await.unwrap();
        // `KMUTATE_ONLY=NAME[,NAME]` shows those policies alone.
        let only = std::env::var("KMUTATE_ONLY").ok();
        for s in shipped() {
            let name = s.policy["metadata"]["name"].as_str().unwrap().to_string();
            if only
                .as_ref()
                .is_some_and(|o| !o.split(",").any(|o| o == name))
            {
                continue;
            }
            let mut chosen = None;
            let mut passed_over = Vec::new();
            for case in &s.cases {
                let object = case["object"].clone();
                // The case's cluster objects: Namespaces (labels), params.
                for r in case["resources"].as_array().into_iter().flatten() {
                    let ns = match r["kind"].as_str() {
                        Some("Namespace") => r["metadata"]["name"].as_str(),
                        _ => r["metadata"]["namespace"].as_str(),
                    };
                    if let Some(ns) = ns {
                        kas::namespace_with_service_account(&client, ns).await;
                    }
                    kas::apply(&client, r).await;
                }
                let ns = object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default");
                kas::namespace_with_service_account(&client, ns).await;
                // The apiserver may refuse the case's object for its own
                // reasons (no --allow-privileged here): another case then.
                let baseline = match kas::dry_run_create(&client, &object).await {
                    Ok(b) => stable(&b),
                    Err(e) => {
                        passed_over.push(format!("{}: {}", case["name"], kas::message(&e)));
                        continue;
                    }
                };
                match kmutate_answer(&s, case, &baseline) {
                    Outcome::Admitted { object: ours, .. } if ours != baseline => {
                        chosen = Some((case, object, baseline, ours));
                        break;
                    }
                    _ => passed_over.push(format!("{}: no change", case["name"])),
                }
            }
            let Some((case, object, baseline, ours)) = chosen else {
                failures.push(format!("{name}: no case to show it on: {passed_over:?}"));
                continue;
            };
            kas::create(&client, &s.policy)
                .await
                .unwrap_or_else(|e| panic!("{name}: the apiserver refused the policy: {e}"));
            kas::create(&client, &s.binding)
                .await
                .unwrap_or_else(|e| panic!("{name}: the apiserver refused the binding: {e}"));
            // In force once the plugin's informers have it.
            let last_error = std::sync::Mutex::new(String::new());
            let upstream = poll(Duration::from_secs(20), || async {
                let answer = match kas::dry_run_create(&client, &object).await {
                    Ok(a) => stable(&a),
                    Err(e) => {
                        *last_error.lock().unwrap() = kas::message(&e);
                        return None;
                    }
                };
                (answer != baseline).then_some(answer)
            })
            .await
            .map(|(a, _)| a);
            let Some(upstream) = upstream else {
                failures.push(format!(
                    "{name}: the apiserver's plugin never changed the object (last error: {:?})",
                    last_error.lock().unwrap()
                ));
                kas::delete(&client, &s.binding).await;
                kas::delete(&client, &s.policy).await;
                continue;
            };
            let problems = compare(&baseline, &upstream, &ours);
            if problems.is_empty() {
                println!(
                    "ok {name} on {}: {} change(s)",
                    case["name"],
                    changes(&baseline, &ours).len()
                );
            } else {
                failures.push(format!(
                    "{name} on {}:\n  {}",
                    case["name"],
                    problems.join("\n  ")
                ));
            }
            kas::delete(&client, &s.binding).await;
            kas::delete(&client, &s.policy).await;
            // Out of force before the next baseline.
            let mut last = Value::Null;
            let gone = poll(Duration::from_secs(20), || async {
                let answer = stable(&kas::dry_run_create(&client, &object).await.ok()?);
                (answer == baseline).then_some(())
            })
            .await;
            if gone.is_none() {
                last = stable(&kas::dry_run_create(&client, &object).await.unwrap());
            }
            assert!(
                gone.is_some(),
                "{name}: still in force 20 s after its deletion: {:?}",
                changes(&baseline, &last)
            );
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

#[test]
fn translated_policies_are_accepted_by_the_apiserver() {
    let Some(kas) = Kas::start("translation") else {
        return;
    };
    runtime().block_on(async {
        let client = kas.client().await;
        let cases = kmutate::conformance::read_cases(&[repo("conformance/translation")]);
        let mut checked = 0;
        let mut refused = Vec::new();
        for case in cases {
            let case = case.unwrap_or_else(|(name, e)| panic!("{name}: {e}"));
            let Some(items) = case.doc.get("declarative") else {
                continue;
            };
            let dir = Path::new(&case.source.file).parent().unwrap().to_path_buf();
            let translation = kmutate::translate::translate_declarative_list(items, &dir)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            for mut object in translation.policies.into_iter().chain(translation.bindings) {
                // Checked as v1 objects (the same schema in every version).
                object["apiVersion"] = json!("admissionregistration.k8s.io/v1");
                match kas::dry_run_create(&client, &object).await {
                    Ok(_) => checked += 1,
                    Err(e) => refused.push(format!(
                        "{}: {} {}: {}",
                        case.name,
                        object["kind"],
                        object["metadata"]["name"],
                        kas::message(&e)
                    )),
                }
            }
        }
        println!("{checked} translated objects accepted");
        assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
        assert!(checked >= 10, "only {checked} translated objects");
    });
}

#[test]
fn the_comparison_refuses_what_it_must() {
    let base = json!({"spec": {"a": 1, "list": [{"n": "x"}]}});
    let ours = json!({"spec": {"a": 1, "b": 2, "list": [{"n": "x"}]}});
    // The same change, with a default filled in beside it: fine.
    let theirs = json!({"spec": {"a": 1, "b": 2, "list": [{"n": "x"}]}});
    assert!(compare(&base, &theirs, &ours).is_empty());
    // Another value, a missing change, an extra change, no change at all.
    let other = json!({"spec": {"a": 1, "b": 3, "list": [{"n": "x"}]}});
    assert_eq!(compare(&base, &other, &ours).len(), 1);
    assert_eq!(compare(&base, &base, &ours).len(), 1);
    let extra = json!({"spec": {"a": 5, "b": 2, "list": [{"n": "x"}]}});
    assert_eq!(compare(&base, &extra, &ours).len(), 1);
    assert!(!compare(&base, &base, &base).is_empty());
    // Defaults inside what the policy added are the apiserver's own.
    let added = json!({"spec": {"a": 1, "list": [{"n": "x"}, {"n": "y"}]}});
    let defaulted = json!({"spec": {"a": 1, "list": [{"n": "x"}, {"n": "y", "d": true}]}});
    assert!(compare(&base, &defaulted, &added).is_empty());
}
