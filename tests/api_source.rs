//! The Kubernetes API source of `kmutate serve`, against an in-process
//! fake API server on 127.0.0.1 (`support::fake_api`): policies load
//! (from admissionregistration.k8s.io or kmutate.dev), updates apply within
//! a second, a policy that does not compile fails each invocation under its
//! failure policy while the others serve, an outage
//! and a 410 Gone lose nothing, params resolve by name and by selector,
//! Namespaces feed namespaceSelector and namespaceObject, and
//! SubjectAccessReview answers reach `authorizer`. Every test is bounded
//! in time and polls for conditions.

mod support;

use kmutate::webhook::Server;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::api::*;
use support::fake_api::{FakeApi, Kind, SarRule};
use support::*;

/// Puts a labelling policy and its binding.
fn put_labeller(fake: &FakeApi, kinds: &(Kind, Kind), name: &str, value: &str) {
    let (p, b) = labelling_policy(V1, name, name, value, None, None);
    fake.put(&kinds.0, p);
    fake.put(&kinds.1, b);
}

async fn problems_mention(server: &Server, needles: &[&str]) {
    eventually(Duration::from_secs(30), || async {
        let e = server.engine()?;
        e.problems()
            .iter()
            .any(|p| needles.iter().all(|n| p.contains(n)))
            .then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "no problem mentions {needles:?}: {:?}",
            server.engine().map(|e| e.problems().to_vec())
        )
    });
}

/// Waits for a Warning Event about the object `kind`/`name` whose message
/// mentions `needle`.
async fn warning_event(fake: &FakeApi, kind: &str, name: &str, needle: &str) {
    eventually(Duration::from_secs(30), || async {
        fake.events()
            .iter()
            .any(|e| {
                e["involvedObject"]["name"] == name
                    && e["involvedObject"]["kind"] == kind
                    && e["type"] == "Warning"
                    && e["message"].as_str().is_some_and(|m| m.contains(needle))
            })
            .then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("no Event for {kind} {name}: {:?}", fake.events()));
}

#[test]
fn policies_load_update_quickly_and_broken_ones_fail_under_their_failure_policy() {
    let dir = scratch("api_source", "load");
    run(Duration::from_secs(120), async {
        let (fake, p, b) = fake_with(V1).await;
        let kinds = (p, b);
        put_labeller(&fake, &kinds, "stage", "'one'");
        put_labeller(&fake, &kinds, "team", "'a'");
        let server = started(api_config(&dir, &fake)).await;
        let mut conn = connect(&server).await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"stage": "one", "team": "a"}), "{a:?}");

        // Updates take effect within a second, measured from the write to
        // the API server to the first answer showing it.
        let mut times = Vec::new();
        for (i, value) in ["two", "three", "four", "five", "six"].iter().enumerate() {
            let (policy, _) =
                labelling_policy(V1, "stage", "stage", &format!("'{value}'"), None, None);
            let written = Instant::now();
            fake.put(&kinds.0, policy);
            let want = json!({"stage": value, "team": "a"});
            until_labels(&mut conn, "default", Duration::from_secs(30), |l| {
                *l == want
            })
            .await
            .unwrap_or_else(|a| panic!("update {i} never applied: {a:?}"));
            times.push(written.elapsed());
        }
        times.sort();
        println!("policy update to first effect: {times:?}");
        assert!(times[times.len() / 2] < Duration::from_secs(1), "{times:?}");

        // A policy the API would refuse is skipped; one that does not
        // compile is served as upstream serves it: every invocation fails
        // under its failure policy (Fail, the default: denied with
        // upstream's text). Both are logged and counted.
        put_labeller(&fake, &kinds, "broken", "'x' +");
        let (mut invalid, invalid_binding) =
            labelling_policy(V1, "invalid", "invalid", "'y'", None, None);
        invalid["spec"]["failurePolicy"] = json!("Sometimes");
        fake.put(&kinds.0, invalid);
        fake.put(&kinds.1, invalid_binding);
        problems_mention(
            &server,
            &["\"broken\"", "does not compile", "spec.mutations[0]"],
        )
        .await;
        problems_mention(&server, &["\"invalid\"", "skipped", "failurePolicy"]).await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert!(!a.allowed, "{a:?}");
        let message = a.response["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(
                "policy 'broken' with binding 'broken' denied request: compilation failed: ERROR: <input>:1:"
            ),
            "{message}"
        );
        let m = metrics_text(&server).await;
        assert!(metric(&m, "kmutate_policy_load_errors") >= 2.0, "{m}");
        // Built-in policies get a Warning Event naming the problem.
        warning_event(
            &fake,
            "MutatingAdmissionPolicy",
            "broken",
            "spec.mutations[0]",
        )
        .await;
        assert_eq!(metric(&m, "kmutate_policies_loaded"), 3.0, "{m}");
        // Under failurePolicy Ignore the same policy admits, unmutated.
        let (mut ignored, _) = labelling_policy(V1, "broken", "broken", "'x' +", None, None);
        ignored["spec"]["failurePolicy"] = json!("Ignore");
        fake.put(&kinds.0, ignored);
        let mut admitted = None;
        let started = Instant::now();
        while admitted.is_none() && started.elapsed() < Duration::from_secs(30) {
            let a = create_config_map(&mut conn, "default", "cm", "alice").await;
            if a.allowed {
                admitted = Some(a);
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let a = admitted.expect("admitted under failurePolicy Ignore");
        assert_eq!(a.labels, json!({"stage": "six", "team": "a"}), "{a:?}");
        // So does a binding the API would refuse (no policyName).
        let (_, mut unbound) = labelling_policy(V1, "unbound", "unbound", "'z'", None, None);
        unbound["spec"]
            .as_object_mut()
            .expect("binding spec")
            .remove("policyName");
        fake.put(&kinds.1, unbound);
        problems_mention(&server, &["\"unbound\"", "skipped", "spec.policyName"]).await;
        warning_event(
            &fake,
            "MutatingAdmissionPolicyBinding",
            "unbound",
            "spec.policyName",
        )
        .await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"stage": "six", "team": "a"}), "{a:?}");

        // Fixed, it serves; deleted, it goes.
        put_labeller(&fake, &kinds, "broken", "'fixed'");
        wait_labels(
            &mut conn,
            json!({"stage": "six", "team": "a", "broken": "fixed"}),
        )
        .await;
        fake.delete(&kinds.0, "", "team");
        fake.delete(&kinds.1, "", "team");
        wait_labels(&mut conn, json!({"stage": "six", "broken": "fixed"})).await;
        server.shutdown().await;
    });
}

#[test]
fn ready_only_after_the_first_sync_and_outages_lose_nothing() {
    let dir = scratch("api_source", "outage");
    run(Duration::from_secs(180), async {
        let (fake, p, b) = fake_with(V1).await;
        let kinds = (p, b);
        put_labeller(&fake, &kinds, "stage", "'one'");
        // Not ready while the API server is away.
        fake.stop();
        let server = kmutate::webhook::start(api_config(&dir, &fake))
            .await
            .expect("starts");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!server.is_ready(), "ready before any sync");
        fake.restart().await;
        assert!(
            server.wait_ready(Duration::from_secs(60)).await,
            "ready after the sync"
        );
        let mut conn = connect(&server).await;
        wait_labels(&mut conn, json!({"stage": "one"})).await;

        // The API server goes away: the last good set keeps serving.
        fake.stop();
        for _ in 0..10 {
            let a = create_config_map(&mut conn, "default", "cm", "alice").await;
            assert_eq!(a.labels, json!({"stage": "one"}), "{a:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Changes made meanwhile arrive once it is back (the watch resumes
        // from its resourceVersion).
        put_labeller(&fake, &kinds, "stage", "'two'");
        put_labeller(&fake, &kinds, "team", "'a'");
        fake.restart().await;
        wait_labels(&mut conn, json!({"stage": "two", "team": "a"})).await;

        // The history expires (410 Gone): the watches relist, and no
        // request meanwhile sees the policies gone.
        let (lists_before, _) = fake.list_and_watch_counts();
        fake.expire_history();
        let deadline = Instant::now() + Duration::from_secs(60);
        while fake.list_and_watch_counts().0 < lists_before + 3 {
            let a = create_config_map(&mut conn, "default", "cm", "alice").await;
            assert_eq!(a.labels, json!({"stage": "two", "team": "a"}), "{a:?}");
            assert!(Instant::now() < deadline, "the watches relist after 410");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..10 {
            let a = create_config_map(&mut conn, "default", "cm", "alice").await;
            assert_eq!(a.labels, json!({"stage": "two", "team": "a"}), "{a:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // And it still follows changes.
        put_labeller(&fake, &kinds, "stage", "'three'");
        wait_labels(&mut conn, json!({"stage": "three", "team": "a"})).await;
        server.shutdown().await;
    });
}

#[test]
fn params_resolve_by_name_and_selector_and_namespaces_are_watched() {
    let dir = scratch("api_source", "params");
    run(Duration::from_secs(120), async {
        let (fake, p, b) = fake_with(V1).await;
        let cms = config_maps();
        let param = |name: &str, labels: Value, team: &str| {
            json!({"metadata": {"name": name, "namespace": "default", "labels": labels},
                "data": {"team": team}})
        };
        fake.put(&cms, param("settings", json!({}), "blue"));
        fake.put(&cms, param("sel-1", json!({"use": "yes"}), "green"));
        fake.put(&cms, param("sel-2", json!({"use": "no"}), "red"));
        let kind = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let (policy, binding) = labelling_policy(
            V1,
            "byname",
            "byname",
            "params.data.team",
            Some(kind.clone()),
            Some(
                json!({"name": "settings", "namespace": "default", "parameterNotFoundAction": "Deny"}),
            ),
        );
        fake.put(&p, policy);
        fake.put(&b, binding);
        let (policy, binding) = labelling_policy(
            V1,
            "bysel",
            "bysel",
            "params.data.team",
            Some(kind),
            Some(
                json!({"selector": {"matchLabels": {"use": "yes"}}, "namespace": "default",
                "parameterNotFoundAction": "Allow"}),
            ),
        );
        fake.put(&p, policy);
        fake.put(&b, binding);
        let (mut policy, binding) = labelling_policy(
            V1,
            "ns",
            "env",
            "namespaceObject.metadata.labels.env",
            None,
            None,
        );
        policy["spec"]["matchConstraints"]["namespaceSelector"] =
            json!({"matchLabels": {"env": "prod"}});
        fake.put(&p, policy);
        fake.put(&b, binding);

        let server = started(api_config(&dir, &fake)).await;
        let mut conn = connect(&server).await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(
            a.labels,
            json!({"byname": "blue", "bysel": "green", "env": "prod"}),
            "{a:?}"
        );

        // A param change applies; a param newly selected joins.
        fake.put(&cms, param("settings", json!({}), "purple"));
        wait_labels(
            &mut conn,
            json!({"byname": "purple", "bysel": "green", "env": "prod"}),
        )
        .await;
        fake.put(&cms, param("sel-1", json!({"use": "no"}), "green"));
        wait_labels(&mut conn, json!({"byname": "purple", "env": "prod"})).await;

        // The Namespace's labels decide namespaceSelector and namespaceObject.
        fake.put(
            &namespaces(),
            json!({"metadata": {"name": "default", "labels": {"env": "dev"}}}),
        );
        wait_labels(&mut conn, json!({"byname": "purple"})).await;

        // A missing param with Deny denies.
        fake.delete(&cms, "default", "settings");
        let started_at = Instant::now();
        loop {
            let a = create_config_map(&mut conn, "default", "cm", "alice").await;
            if !a.allowed {
                let message = a.response["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                assert!(message.contains("no params found"), "{message}");
                break;
            }
            assert!(
                started_at.elapsed() < Duration::from_secs(30),
                "never denied: {a:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.shutdown().await;
    });
}

#[test]
fn subject_access_reviews_answer_authorizer_checks() {
    let dir = scratch("api_source", "sar");
    run(Duration::from_secs(120), async {
        let (fake, p, b) = fake_with(V1).await;
        fake.allow(SarRule {
            user: "alice".into(),
            verb: "get".into(),
            resource: "secrets".into(),
            allowed: true,
        });
        fake.allow(SarRule {
            user: "bob".into(),
            verb: "get".into(),
            resource: "secrets".into(),
            allowed: false,
        });
        let (policy, binding) = labelling_policy(
            V1,
            "secrets",
            "secrets",
            "authorizer.group('').resource('secrets').namespace('default').check('get').allowed() ? 'yes' : 'no'",
            None,
            None,
        );
        fake.put(&p, policy);
        fake.put(&b, binding);
        let mut config = api_config(&dir, &fake);
        config.api.subject_access_review = true;
        let server = started(config).await;
        let mut conn = connect(&server).await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"secrets": "yes"}), "{a:?}");
        let a = create_config_map(&mut conn, "default", "cm", "bob").await;
        assert_eq!(a.labels, json!({"secrets": "no"}), "{a:?}");
        let reviews = fake.sar_requests();
        assert_eq!(reviews.len(), 2, "{reviews:?}");
        let alice = &reviews[0]["spec"];
        assert_eq!(alice["user"], "alice");
        assert_eq!(alice["groups"], json!(["system:authenticated"]));
        assert_eq!(
            alice["resourceAttributes"],
            json!({"group": "", "version": "*", "resource": "secrets", "namespace": "default", "verb": "get"})
        );
        // Cached briefly: the same check again asks nothing.
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"secrets": "yes"}), "{a:?}");
        assert_eq!(fake.sar_requests().len(), 2);
        server.shutdown().await;
    });
}

#[test]
fn kmutate_dev_crds_serve_when_the_builtin_api_is_absent() {
    let dir = scratch("api_source", "crds");
    run(Duration::from_secs(120), async {
        let (fake, p, b) = fake_with("kmutate.dev/v1").await;
        let (mut policy, mut binding) = labelling_policy(V1, "stage", "stage", "'crd'", None, None);
        policy["apiVersion"] = json!("kmutate.dev/v1");
        binding["apiVersion"] = json!("kmutate.dev/v1");
        fake.put(&p, policy);
        fake.put(&b, binding);
        let server = started(api_config(&dir, &fake)).await;
        let mut conn = connect(&server).await;
        wait_labels(&mut conn, json!({"stage": "crd"})).await;

        // kmutate.dev policies and bindings carry a Ready condition that
        // says what is served.
        let ready = |fake: Arc<FakeApi>, p: Kind, name: &'static str, reason: &'static str| async move {
            eventually(Duration::from_secs(30), || async {
                let o = fake.object(&p, "", name)?;
                let c = o["status"]["conditions"].as_array()?.first()?.clone();
                (c["type"] == "Ready"
                    && c["reason"] == reason
                    && c["status"]
                        == if reason == "Compiled" {
                            "True"
                        } else {
                            "False"
                        }
                    && o["status"]["observedGeneration"] == o["metadata"]["generation"])
                    .then_some(c)
            })
            .await
            .unwrap_or_else(|| panic!("no Ready {reason}: {:?}", fake.object(&p, "", name)))
            .0
        };
        ready(fake.clone(), p.clone(), "stage", "Compiled").await;
        ready(fake.clone(), b.clone(), "stage", "Compiled").await;
        // A policy that does not compile is served, failing every invocation.
        let (mut broken, _) = labelling_policy(V1, "stage", "stage", "'crd' +", None, None);
        broken["apiVersion"] = json!("kmutate.dev/v1");
        fake.put(&p, broken);
        let c = ready(fake.clone(), p.clone(), "stage", "CompileError").await;
        let message = c["message"].as_str().unwrap();
        assert!(
            message.contains("spec.mutations[0]")
                && message.contains("served")
                && message.contains("failurePolicy Fail"),
            "{c}"
        );
        let c = ready(fake.clone(), b.clone(), "stage", "PolicyCompileError").await;
        assert!(c["message"].as_str().unwrap().contains("served"), "{c}");
        // The condition is written as the new set is built: the set is in
        // force a moment later.
        let denied = eventually(Duration::from_secs(30), || async {
            let a = create_config_map(&mut connect(&server).await, "default", "cm", "alice").await;
            (!a.allowed).then_some(a)
        })
        .await;
        assert!(denied.is_some(), "a broken Fail policy kept admitting");
        // A binding of a policy that never existed serves nothing.
        let (_, mut orphan) = labelling_policy(V1, "orphan", "orphan", "'x'", None, None);
        orphan["apiVersion"] = json!("kmutate.dev/v1");
        orphan["spec"]["policyName"] = json!("never-created");
        fake.put(&b, orphan);
        let c = ready(fake.clone(), b.clone(), "orphan", "PolicyNotFound").await;
        assert!(
            c["message"].as_str().unwrap().contains("\"never-created\""),
            "{c}"
        );
        // Fixed, both are ready again.
        let (mut fixed, _) = labelling_policy(V1, "stage", "stage", "'again'", None, None);
        fixed["apiVersion"] = json!("kmutate.dev/v1");
        fake.put(&p, fixed);
        ready(fake.clone(), p.clone(), "stage", "Compiled").await;
        ready(fake.clone(), b.clone(), "stage", "Compiled").await;
        wait_labels(&mut conn, json!({"stage": "again"})).await;
        // One the built-in API refuses, stored while kmutate's validating
        // webhook was down (issue 47): not served, and its condition gives
        // the built-in API's reason (kube-apiserver v1.36.2's words for this
        // rule: tests/validation/recorded.json,
        // policy-rule-resources-wildcard-and-others).
        let (mut contradictory, _) = labelling_policy(V1, "stage", "stage", "'x'", None, None);
        contradictory["apiVersion"] = json!("kmutate.dev/v1");
        contradictory["spec"]["matchConstraints"]["resourceRules"][0]["resources"] =
            json!(["*", "configmaps"]);
        fake.put(&p, contradictory);
        let c = ready(fake.clone(), p.clone(), "stage", "Invalid").await;
        assert!(
            c["message"].as_str().unwrap().contains(r#"MutatingAdmissionPolicy.kmutate.dev "stage" is invalid: spec.matchConstraints.resourceRules[0].resources: Invalid value: ["*","configmaps"]: if '*' is present, must not specify other resources without subresources"#),
            "{c}"
        );
        ready(fake.clone(), b.clone(), "stage", "PolicyInvalid").await;
        wait_labels(&mut conn, json!(null)).await;
        // The policy deleted, its binding says nothing is served.
        fake.delete(&p, "", "stage");
        ready(fake.clone(), b.clone(), "stage", "PolicyNotFound").await;
        wait_labels(&mut conn, json!(null)).await;
        server.shutdown().await;
    });
}

#[test]
fn policy_api_version_picks_the_api() {
    let dir = scratch("api_source", "version");
    run(Duration::from_secs(120), async {
        // The server serves both v1 and v1beta1, with different policies.
        let (v1p, v1b) = policy_kinds(V1);
        let (betap, betab) = policy_kinds("admissionregistration.k8s.io/v1beta1");
        let fake = FakeApi::start(vec![
            namespaces(),
            v1p.clone(),
            v1b.clone(),
            betap.clone(),
            betab.clone(),
        ])
        .await;
        fake.put(&namespaces(), json!({"metadata": {"name": "default"}}));
        let (p, b) = labelling_policy(V1, "v1", "from", "'v1'", None, None);
        fake.put(&v1p, p);
        fake.put(&v1b, b);
        let beta = "admissionregistration.k8s.io/v1beta1";
        let (p, b) = labelling_policy(beta, "beta", "from", "'v1beta1'", None, None);
        fake.put(&betap, p);
        fake.put(&betab, b);

        let server = started(api_config(&dir, &fake)).await;
        let mut conn = connect(&server).await;
        wait_labels(&mut conn, json!({"from": "v1"})).await;
        server.shutdown().await;

        let mut config = api_config(&dir, &fake);
        config.api.policy_api_version = Some(beta.into());
        let server = started(config).await;
        let mut conn = connect(&server).await;
        wait_labels(&mut conn, json!({"from": "v1beta1"})).await;
        server.shutdown().await;
    });
}

#[test]
fn crds_from_the_api_give_custom_param_kinds_their_scope() {
    // A cluster-scoped custom paramKind: without its CRD kmutate would take
    // it for namespaced and look for the param in the request's namespace.
    let dir = scratch("api_source", "crd_params");
    run(Duration::from_secs(120), async {
        let crds = Kind::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        );
        let settings = Kind::new("example.com", "v1", "settings", "Setting", false);
        let (p, b) = policy_kinds(V1);
        let fake = FakeApi::start(vec![
            namespaces(),
            crds.clone(),
            settings.clone(),
            p.clone(),
            b.clone(),
        ])
        .await;
        fake.put(&namespaces(), json!({"metadata": {"name": "default"}}));
        fake.put(
            &crds,
            json!({"metadata": {"name": "settings.example.com"}, "spec": {
                "group": "example.com", "scope": "Cluster",
                "names": {"plural": "settings", "singular": "setting", "kind": "Setting", "listKind": "SettingList"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object", "properties": {"team": {"type": "string"}}}}}}}],
            }}),
        );
        fake.put(
            &settings,
            json!({"metadata": {"name": "global"}, "spec": {"team": "platform"}}),
        );
        let (policy, binding) = labelling_policy(
            V1,
            "custom",
            "team",
            "params.spec.team",
            Some(json!({"apiVersion": "example.com/v1", "kind": "Setting"})),
            Some(json!({"name": "global", "parameterNotFoundAction": "Deny"})),
        );
        fake.put(&p, policy);
        fake.put(&b, binding);
        let server = started(api_config(&dir, &fake)).await;
        let mut conn = connect(&server).await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"team": "platform"}), "{a:?}");
        server.shutdown().await;
    });
}

#[cfg(unix)]
#[test]
fn the_serve_binary_reads_policies_from_the_api() {
    // `kmutate serve --source api` with $KUBECONFIG naming the fake:
    // policies load, and `authorizer` checks go to SubjectAccessReviews by
    // default.
    use std::process::{Command, Stdio};
    let dir = scratch("api_source", "binary");
    run(Duration::from_secs(120), async {
        let (fake, p, b) = fake_with(V1).await;
        fake.allow(SarRule {
            user: "alice".into(),
            verb: "get".into(),
            resource: "secrets".into(),
            allowed: true,
        });
        let (policy, binding) = labelling_policy(
            V1,
            "secrets",
            "secrets",
            "authorizer.group('').resource('secrets').namespace('default').check('get').allowed() ? 'yes' : 'no'",
            None,
            None,
        );
        fake.put(&p, policy);
        fake.put(&b, binding);
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{}\"}}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context: {{cluster: fake, user: u}}\ncurrent-context: c\n",
                fake.url()
            ),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kmutate"))
            .args(["serve", "--source", "api"])
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(["--log-format", "json"])
            .arg("--cert-dir")
            .arg(dir.join("tls"))
            .current_dir(&dir)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kmutate serve starts");
        let stderr = child.stderr.take().unwrap();
        // Killed however the test ends.
        struct Reaped(std::process::Child);
        impl Drop for Reaped {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let child = Reaped(child);
        let lines = support::json_lines(stderr);
        // Both lines, in whichever order they come.
        let mut listen = None;
        let mut loaded = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        while listen.is_none() || !loaded {
            assert!(
                Instant::now() < deadline,
                "kmutate serve did not start and load"
            );
            match lines.try_recv() {
                Ok(v) => {
                    let message = v["fields"]["message"].as_str().unwrap_or_default();
                    if message.contains("serving POST /mutate") {
                        listen = v["fields"]["listen"].as_str().map(str::to_string);
                    }
                    if message.contains("policies loaded") {
                        loaded = true;
                    }
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let addr: std::net::SocketAddr = listen.unwrap().parse().unwrap();
        let config =
            kmutate::webhook::tls::client_config(&dir.join("tls/ca.crt"), None, &[]).unwrap();
        let client =
            kmutate::webhook::client::Client::new(addr, "localhost", config, false).unwrap();
        let mut conn = client.connect().await.unwrap();
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        drop(child);
        assert_eq!(a.labels, json!({"secrets": "yes"}), "{a:?}");
        assert_eq!(fake.sar_requests().len(), 1);
    });
}

#[test]
fn both_sources_serve_together() {
    let dir = scratch("api_source", "both");
    let files = dir.join("policies");
    std::fs::create_dir_all(&files).unwrap();
    let (p, b) = labelling_policy(V1, "from-file", "file", "'yes'", None, None);
    std::fs::write(files.join("p.yaml"), format!("{p}\n---\n{b}\n")).unwrap();
    run(Duration::from_secs(120), async {
        let (fake, p, b) = fake_with(V1).await;
        put_labeller(&fake, &(p, b), "api", "'yes'");
        let mut config = api_config(&dir, &fake);
        config.source = kmutate::source::SourceKind::Both;
        config.sources.policies = vec![files.clone()];
        let server = started(config).await;
        let mut conn = connect(&server).await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"file": "yes", "api": "yes"}), "{a:?}");
        server.shutdown().await;
    });
}
