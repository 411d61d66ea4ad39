//! `kmutate apply` over manifest streams (issue 48): files with many
//! documents, folders, standard input, `kind: List`, the cluster context
//! from the stream, pass-through of what no policy changes, and the exit
//! statuses.

use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Labels Pods and Deployments with their namespace's `team` label
/// (`namespaceObject`, which upstream gives a namespaced request) and
/// denies Pods named `forbidden` (a `failurePolicy: Fail` error).
const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: team}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {apiGroups: ["", apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods, deployments]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        object.metadata.name == 'forbidden' ? Object{metadata: Object.metadata{labels: {'n': string(int(object.metadata.name))}}} :
        Object{metadata: Object.metadata{labels: {'team': namespaceObject.metadata.?labels.team.orValue('none')}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: team}
spec: {policyName: team}
"#;

/// A stream: a Namespace, a Pod in it, a ConfigMap no policy matches (with
/// a comment and unusual but valid formatting, to be passed through as
/// written), a Deployment in the same namespace.
const STREAM: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {team: payments}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec: {containers: [{name: app, image: nginx}]}
---
# settings, kept as written
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data:
  key:   'value'   # spacing kept
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: app, image: nginx}]}
";

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("apply_stream")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    dir
}

/// `kmutate ARGS` given `stdin`.
fn kmutate(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kmutate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// `kmutate apply` with the policy of `dir`, `args`, and `stdin`.
fn apply(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let policy = dir.join("policy.yaml");
    let policy = policy.to_str().unwrap();
    let head = ["apply", "--policies", policy, "--bindings", policy];
    kmutate(&[&head[..], args].concat(), stdin)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn documents(yaml: &str) -> Vec<Value> {
    kmutate::api::load::parse_documents(yaml).unwrap()
}

#[test]
fn a_stream_is_written_back_with_namespace_objects_from_the_stream() {
    let dir = scratch("stream");
    std::fs::write(dir.join("all.yaml"), STREAM).unwrap();
    let out = apply(&dir, &["-f", dir.join("all.yaml").to_str().unwrap()], "");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let docs = documents(&stdout);
    assert_eq!(docs.len(), 4, "{stdout}");
    // The Pod's namespace is in the stream: its label is read from it.
    assert_eq!(docs[1]["metadata"]["labels"], json!({"team": "payments"}));
    assert_eq!(docs[3]["metadata"]["labels"], json!({"team": "payments"}));
    // What no policy changed comes out as it went in, byte for byte.
    for unchanged in [
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {team: payments}\n",
        "# settings, kept as written\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: shop}\ndata:\n  key:   'value'   # spacing kept\n",
    ] {
        assert!(stdout.contains(unchanged), "{stdout}");
    }
    assert!(
        stderr.contains("kmutate apply: 4 objects read, 2 changed, 0 denied, 0 errors"),
        "{stderr}"
    );
}

#[test]
fn standard_input_folders_and_lists_are_read_in_order() {
    let dir = scratch("inputs");
    let folder = dir.join("manifests");
    std::fs::create_dir_all(folder.join("nested")).unwrap();
    let pod = |name: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{containers: [{{name: app, image: nginx}}]}}\n")
    };
    std::fs::write(folder.join("a.yaml"), pod("a")).unwrap();
    std::fs::write(folder.join("b.json"), r#"{"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b1", "namespace": "shop"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b2", "namespace": "shop"}}]}"#).unwrap();
    std::fs::write(folder.join("notes.txt"), "not a manifest").unwrap();
    std::fs::write(folder.join("nested/c.yaml"), pod("c")).unwrap();
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {team: t}}\n";
    let names = |out: &Output| -> Vec<String> {
        let value: Value = serde_json::from_slice(&out.stdout).unwrap();
        value["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                format!(
                    "{}:{}",
                    o["metadata"]["name"].as_str().unwrap(),
                    o["metadata"]["labels"]["team"].as_str().unwrap_or("-")
                )
            })
            .collect()
    };
    // Standard input first, then the folder (its subfolder only with -R).
    let args = ["-f", "-", "-f", folder.to_str().unwrap(), "-o", "json"];
    let out = apply(&dir, &args, namespace);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(names(&out), ["shop:t", "a:t", "b1:t", "b2:-"]);
    let out = apply(&dir, &[&args[..], &["-R"]].concat(), namespace);
    assert_eq!(names(&out), ["shop:t", "a:t", "b1:t", "b2:-", "c:t"]);
    // -o yaml writes a changed List back as a List.
    let out = apply(
        &dir,
        &["-f", "-", "-f", folder.join("b.json").to_str().unwrap()],
        namespace,
    );
    let docs = documents(&text(&out.stdout));
    assert_eq!(docs[1]["kind"], "List");
    assert_eq!(
        docs[1]["items"][0]["metadata"]["labels"],
        json!({"team": "t"})
    );
}

#[test]
fn bad_documents_and_denials_are_named_and_the_rest_still_evaluated() {
    let dir = scratch("bad");
    let stream = format!(
        "{STREAM}---\n- not\n- an object\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: forbidden, namespace: shop}}\n"
    );
    let out = apply(&dir, &["-f", "-", "-o", "patch"], &stream);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: -, document 4: not a Kubernetes object: expected a mapping, found a sequence"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("denied: Pod shop/forbidden (-, document 5): policy 'team' with binding 'team' denied request: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("kmutate apply: 5 objects read, 2 changed, 1 denied, 1 errors"),
        "{stderr}"
    );
    // Each object's patch under a header naming it.
    assert!(
        stdout.contains("# Pod shop/web (-, document 1)\n[\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("# Pod shop/forbidden (-, document 5)\n# denied: "),
        "{stdout}"
    );
    // Report only: the denial and the bad document are named, exit 0 for
    // the denial alone.
    let only_denied = format!(
        "{STREAM}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: forbidden, namespace: shop}}\n"
    );
    let out = apply(&dir, &["-f", "-", "--dry-run"], &only_denied);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn exit_statuses_gate_on_denials_changes_and_usage() {
    let dir = scratch("gates");
    let out = apply(&dir, &["-f", "-", "--fail-on", "change"], STREAM);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // Already what the policy makes it: the gate passes.
    let settled = STREAM
        .replace(
            "metadata: {name: web, namespace: shop}",
            "metadata: {name: web, namespace: shop, labels: {team: payments}}",
        )
        .replace(
            "metadata: {name: api, namespace: shop}",
            "metadata: {name: api, namespace: shop, labels: {team: payments}}",
        );
    let out = apply(&dir, &["-f", "-", "--fail-on", "change"], &settled);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Usage errors: 2.
    for args in [
        &["-f", "-", "-f", "-"][..],
        &["-f", "/no/such/file.yaml"],
        &["-f", "-", "--old-object", "-", "--operation", "UPDATE"],
        &["-f", "-", "--operation", "UPDATE"],
        &["-f", "-", "--bogus"],
    ] {
        let out = apply(&dir, args, STREAM);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn an_update_finds_its_old_object_by_kind_namespace_and_name() {
    let dir = scratch("update");
    std::fs::write(dir.join("old.yaml"), STREAM).unwrap();
    let new = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec: {containers: [{name: app, image: nginx:2}]}\n";
    let old = dir.join("old.yaml");
    let update = [
        "-f",
        "-",
        "--operation",
        "UPDATE",
        "--old-object",
        old.to_str().unwrap(),
    ];
    let out = apply(&dir, &[&update[..], &["-o", "json"]].concat(), new);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let object: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The old stream is what is stored: its Namespace exists.
    assert_eq!(object["metadata"]["labels"], json!({"team": "payments"}));
    let orphan = "apiVersion: v1\nkind: Pod\nmetadata: {name: nobody, namespace: shop}\n";
    let out = apply(&dir, &update, orphan);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no old object"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn namespace_flag_places_objects_that_name_none() {
    let dir = scratch("namespace");
    let stream = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, labels: {team: payments}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web}\n";
    let out = apply(&dir, &["-f", "-", "-n", "shop", "-o", "json"], stream);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["items"][1]["metadata"]["namespace"], "shop");
    assert_eq!(
        list["items"][1]["metadata"]["labels"],
        json!({"team": "payments"})
    );
    // A Namespace is cluster-scoped: given none.
    assert!(list["items"][0]["metadata"].get("namespace").is_none());
}

/// `kmutate check -` reads standard input (issue 48), with the messages of
/// issue 47 (kube-apiserver v1.36.2's for this object:
/// tests/validation/recorded.json, policy-reinvocation-policy-unsupported).
#[test]
fn check_reads_standard_input() {
    let run = |input: &str| kmutate(&["check", "-"], input);
    let out = run(POLICY);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("1 policies, 1 bindings, 0 problems"));
    let bad = POLICY
        .replace(
            "metadata: {name: team}\nspec:",
            "metadata: {name: policy-reinvocation-policy-unsupported}\nspec:",
        )
        .replace("reinvocationPolicy: Never", "reinvocationPolicy: Always");
    let out = run(&bad);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains(r#"- (document 0): MutatingAdmissionPolicy.admissionregistration.k8s.io "policy-reinvocation-policy-unsupported" is invalid: spec.reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never""#),
        "{}",
        text(&out.stdout)
    );
}

/// A binding annotated `kmutate.dev/mode: monitor` (issue 44) changes
/// nothing in the stream, and no gate counts it: what it would have done is
/// told on stderr, for `-o explain` too.
#[test]
fn a_monitored_binding_changes_nothing_and_says_what_it_would_have_done() {
    let dir = scratch("monitor");
    let monitored = POLICY.replace(
        "metadata: {name: team}\nspec: {policyName: team}",
        "metadata: {name: team, annotations: {kmutate.dev/mode: monitor}}\nspec: {policyName: team}",
    );
    assert_ne!(monitored, POLICY);
    std::fs::write(dir.join("policy.yaml"), monitored).unwrap();
    let out = apply(&dir, &["-f", "-", "--fail-on", "change"], STREAM);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(documents(&stdout), documents(STREAM));
    assert!(
        stderr.contains(
            "warning: -, document 1: kmutate: policy team (binding team) would have set metadata.labels.team (monitor mode: not applied)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("4 objects read, 0 changed"), "{stderr}");
    let out = apply(&dir, &["-f", "-", "-o", "explain"], STREAM);
    assert!(
        text(&out.stderr)
            .contains("policy team (binding team) would have set metadata.labels.team"),
        "{}",
        text(&out.stderr)
    );
}
