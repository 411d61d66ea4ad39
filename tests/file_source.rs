//! The file source of `kmutate serve`: edited policy files take effect
//! within a second, a broken file keeps its last good version (and says
//! why in the load-error metric), a fixed file is picked up again.

mod support;

use kmutate::engine::EngineSources;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use support::*;

/// Writes `docs` as a multi-document YAML file (JSON documents are YAML),
/// through a rename so that the watcher never reads half a file.
fn write_docs(path: &Path, docs: &[Value]) {
    let text: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
    write_text(path, &text.join("\n---\n"));
}

fn write_text(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn edited_files_take_effect_and_broken_ones_keep_their_last_good_version() {
    let dir = scratch("file_source", "edits");
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    let stage = policies.join("stage.yaml");
    let other = policies.join("other.yaml");
    let v1 = "admissionregistration.k8s.io/v1";
    let (p, b) = labelling_policy(v1, "stage", "stage", "'one'", None, None);
    write_docs(&stage, &[p, b]);
    let (p, b) = labelling_policy(v1, "team", "team", "'a'", None, None);
    write_docs(&other, &[p, b]);
    let sources = EngineSources {
        policies: vec![policies.clone()],
        ..EngineSources::default()
    };
    run(Duration::from_secs(120), async {
        let server = started(config(&dir, sources)).await;
        let mut conn = connect(&server).await;
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"stage": "one", "team": "a"}), "{a:?}");

        // An edit takes effect within a second (polled, generous limit for
        // a loaded machine; the time is printed).
        let (p, b) = labelling_policy(v1, "stage", "stage", "'two'", None, None);
        write_docs(&stage, &[p, b]);
        let took = until_labels(&mut conn, "default", Duration::from_secs(10), |l| {
            l["stage"] == "two"
        })
        .await
        .expect("the edit takes effect");
        println!("file edit to first effect: {took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");

        // A broken file (invalid YAML, then a CEL compile error) keeps the
        // version in force; the other file still serves; the problem counts.
        write_text(&stage, "apiVersion: [unclosed\n");
        let errors = eventually(Duration::from_secs(10), || async {
            let m = metrics_text(&server).await;
            let n = metric(&m, "kmutate_policy_load_errors");
            (n > 0.0).then_some(n)
        })
        .await
        .expect("the broken file is counted");
        assert!(errors.0 >= 1.0);
        let engine = server.engine().unwrap();
        assert!(
            engine
                .problems()
                .iter()
                .any(|p| p.contains("stage.yaml") && p.contains("stays in force")),
            "{:?}",
            engine.problems()
        );
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"stage": "two", "team": "a"}), "{a:?}");

        let (p, b) = labelling_policy(v1, "stage", "stage", "'three' +", None, None);
        write_docs(&stage, &[p, b]);
        eventually(Duration::from_secs(10), || async {
            let e = server.engine().unwrap();
            e.problems()
                .iter()
                .any(|p| p.contains("\"stage\"") && p.contains("spec.mutations[0]"))
                .then_some(())
        })
        .await
        .expect("the compile error is reported with the policy and field");
        let a = create_config_map(&mut conn, "default", "cm", "alice").await;
        assert_eq!(a.labels, json!({"stage": "two", "team": "a"}), "{a:?}");

        // Fixed: the new version serves, the problem count drops to zero.
        let (p, b) = labelling_policy(v1, "stage", "stage", "'four'", None, None);
        write_docs(&stage, &[p, b]);
        until_labels(&mut conn, "default", Duration::from_secs(10), |l| {
            l["stage"] == "four"
        })
        .await
        .expect("the fixed file takes effect");
        let m = metrics_text(&server).await;
        assert_eq!(metric(&m, "kmutate_policy_load_errors"), 0.0, "{m}");

        // A removed file's policies go.
        std::fs::remove_file(&other).unwrap();
        until_labels(&mut conn, "default", Duration::from_secs(10), |l| {
            *l == json!({"stage": "four"})
        })
        .await
        .expect("the removed file's policy is gone");
        server.shutdown().await;
    });
}
