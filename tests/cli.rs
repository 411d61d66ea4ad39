//! End-to-end tests of the `kmutate` command line: `apply` (with `-o explain`
//! and `--dry-run`), `check`, `conformance`, every subcommand's `--help` and
//! `completions`, on files written to a temporary folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kmutate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kmutate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kmutate runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh folder under the target directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: set-replicas}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [deployments]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{spec: Object.spec{replicas: 3}}"
"#;

const BINDING: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: set-replicas}
spec: {policyName: set-replicas}
"#;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 1
  template: {spec: {containers: [{name: app, image: nginx}]}}
"#;

fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p.display().to_string()
}

/// `kmutate apply` of object `o` with policies `p` and bindings `b`, then `extra`.
fn apply(p: &str, b: &str, o: &str, extra: &[&str]) -> Output {
    let args = ["apply", "--policies", p, "--bindings", b, "-f", o];
    kmutate(&[&args[..], extra].concat())
}

/// A fresh folder holding `policy`, [`BINDING`] and [`DEPLOYMENT`]: their paths.
fn fixture(name: &str, policy: &str) -> (PathBuf, [String; 3]) {
    let dir = scratch(name);
    let files = [
        write(&dir, "policy.yaml", policy),
        write(&dir, "binding.yaml", BINDING),
        write(&dir, "deploy.yaml", DEPLOYMENT),
    ];
    (dir, files)
}

#[test]
fn apply_prints_the_mutated_object_and_the_patch() {
    let (_, [p, b, o]) = fixture("apply", POLICY);
    let out = apply(&p, &b, &o, &["-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["spec"]["replicas"], 3);
    assert_eq!(
        v["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx"
    );

    let out = apply(&p, &b, &o, &["-o", "patch"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let patch: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        patch,
        serde_json::json!([{"op": "replace", "path": "/spec/replicas", "value": 3}])
    );
}

// FORMAT.md: a custom kind with no CRD among the resources gets a deduced
// schema (lists atomic, maps granular) and a warning naming the kind; the
// expectation is maporacle's with a schema preserving unknown fields
// (conformance/custom-kind-without-crd.yaml).
#[test]
fn apply_deduces_the_schema_of_a_custom_kind_without_its_crd() {
    let dir = scratch("apply-custom-kind");
    let p = write(
        &dir,
        "policy.yaml",
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: p}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [widgets]}]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{labels: {'b': '2'}, items: [3]}}"}
"#,
    );
    let b = write(
        &dir,
        "binding.yaml",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec: {policyName: p}\n",
    );
    let o = write(
        &dir,
        "widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: default}\nspec: {labels: {a: '1'}, items: [1, 2]}\n",
    );
    let out = apply(&p, &b, &o, &["-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["spec"],
        serde_json::json!({"labels": {"a": "1", "b": "2"}, "items": [3]})
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("kind example.com/v1 Widget has no CustomResourceDefinition"),
        "{stderr}"
    );
}

#[test]
fn apply_exits_1_with_the_denial_message() {
    let policy = POLICY.replace(
        "Object{spec: Object.spec{replicas: 3}}",
        "Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {'a': 'b'}}}}",
    );
    let (_, [p, b, o]) = fixture("deny", &policy);
    let out = apply(&p, &b, &o, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    // smd.go validatePatch, wrapped by the patcher and the dispatcher.
    assert!(
        err.contains("policy 'set-replicas' with binding 'set-replicas' denied request: error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.selector"),
        "{err}"
    );
}

#[test]
fn check_reports_file_document_policy_and_position() {
    let dir = scratch("check");
    let bad = POLICY.replace("Object{spec: Object.spec{replicas: 3}}", "Object{spec: ");
    write(
        &dir,
        "policies.yaml",
        &format!("{POLICY}---{}", bad.replace("set-replicas", "broken")),
    );
    write(&dir, "bindings.yaml", BINDING);
    let out = kmutate(&["check", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("policies.yaml (document 1)"), "{stdout}");
    assert!(stdout.contains("\"broken\""), "{stdout}");
    assert!(
        stdout.contains("spec.mutations[0].applyConfiguration.expression"),
        "{stdout}"
    );
    assert!(
        stdout.contains("compilation failed: ERROR: <input>:1:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 policies, 1 bindings, 1 problems"),
        "{stdout}"
    );

    let out = kmutate(&["check", "policies", "bindings"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
}

#[test]
fn malformed_and_deeply_nested_input_is_an_error_not_a_crash() {
    let dir = scratch("malformed");
    let p = write(&dir, "policy.yaml", POLICY);
    let b = write(&dir, "binding.yaml", BINDING);
    for (name, content) in [
        (
            "broken.yaml",
            "apiVersion: v1\nkind: [unclosed\n".to_string(),
        ),
        ("deep.json", "[".repeat(10_000) + &"]".repeat(10_000)),
        ("wrong.yaml", "- just\n- a list\n".to_string()),
    ] {
        let o = write(&dir, name, &content);
        let out = apply(&p, &b, &o, &[]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.starts_with("error: "), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

#[test]
fn conformance_reports_unreadable_files_and_counts() {
    let dir = scratch("conformance");
    write(&dir, "bad.yaml", "name: x\npolicies: [\n");
    let case = format!(
        "name: sets-replicas\npolicies:\n{}\nbindings:\n{}\nobject:\n{}\nexpect:\n  object:\n{}",
        indent(POLICY),
        indent(BINDING),
        block(DEPLOYMENT, 2),
        block(&DEPLOYMENT.replace("replicas: 1", "replicas: 3"), 4),
    );
    write(&dir, "good.yaml", &case);
    let out = kmutate(&["conformance", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("FAIL "), "{stdout}");
    assert!(stdout.contains("bad.yaml"), "{stdout}");
    assert!(stdout.contains("ok sets-replicas"), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("1 passed, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn conformance_refuses_an_expected_failures_list_it_cannot_read() {
    let dir = scratch("conformance-xfail");
    write(&dir, "none.yaml", "");
    let missing = dir.join("no-such-list.txt");
    let out = kmutate(&[
        "conformance",
        "--expected-failures",
        missing.to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("reading the expected failures") && stderr.contains("no-such-list.txt"),
        "{stderr}"
    );
}

/// Indents a YAML mapping by `n` spaces.
fn block(doc: &str, n: usize) -> String {
    doc.trim()
        .lines()
        .map(|l| format!("{}{l}\n", " ".repeat(n)))
        .collect()
}

/// Indents a YAML document as one item of a list.
fn indent(doc: &str) -> String {
    let mut out = String::new();
    let mut first = true;
    for line in doc.trim().lines() {
        if first {
            out.push_str("- ");
            first = false;
        } else {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The subcommands `kmutate --help` lists (besides `help`).
const SUBCOMMANDS: [&str; 9] = [
    "apply",
    "conformance",
    "bench",
    "check",
    "serve",
    "loadtest",
    "translate",
    "scan",
    "completions",
];

#[test]
fn every_subcommand_has_help_with_its_exit_status() {
    let out = kmutate(&["--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<String> = text(&out.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert_eq!(listed, SUBCOMMANDS, "{}", text(&out.stdout));
    for sub in SUBCOMMANDS {
        let out = kmutate(&[sub, "--help"]);
        assert!(out.status.success(), "{sub}: {}", text(&out.stderr));
        let help = text(&out.stdout);
        assert!(help.contains("Usage: kmutate "), "{sub}: {help}");
        assert!(help.contains("Exit status"), "{sub}: {help}");
    }
    for sub in ["katalog", "capsule"] {
        let out = kmutate(&["translate", sub, "--help"]);
        assert!(out.status.success(), "{sub}: {}", text(&out.stderr));
    }
}

#[test]
fn completions_cover_every_subcommand_in_each_shell() {
    let out = kmutate(&["completions", "bash"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    for sub in SUBCOMMANDS {
        // clap_complete's bash script has a case arm per subcommand.
        assert!(script.contains(&format!("kmutate,{sub})")), "{sub}");
    }
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let out = kmutate(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("dry-run"), "{shell}");
    }
    assert_eq!(kmutate(&["completions", "tcsh"]).status.code(), Some(2));
}

#[test]
fn apply_explains_which_policy_changed_which_field() {
    let (_, [p, b, o]) = fixture("explain", POLICY);
    let out = apply(&p, &b, &o, &["-o", "explain"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "pass 1:
  policy set-replicas, binding set-replicas
    spec.mutations[0] (ApplyConfiguration):
      spec.replicas: 1 -> 3
result: admitted, mutated
"
    );
    let out = apply(&p, &b, &o, &["-o", "explain-json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["passes"][0]["invocations"][0]["mutations"][0]["changes"],
        serde_json::json!([{"path": "spec.replicas", "before": 1, "after": 3}])
    );
    assert_eq!(
        v["outcome"],
        serde_json::json!({"result": "admitted", "changed": true})
    );
}

#[test]
fn dry_run_reports_a_denial_and_exits_0_but_not_unreadable_input() {
    let policy = POLICY.replace(
        "Object{spec: Object.spec{replicas: 3}}",
        "Object{spec: Object.spec{replicas: object.spec.paused ? 1 : 2}}",
    );
    let (dir, [p, b, o]) = fixture("dry-run", &policy);
    let out = apply(&p, &b, &o, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    // The policy's failurePolicy defaults to Fail, so the error denies (403).
    assert!(
        report.contains("    spec.mutations[0] (ApplyConfiguration): error (failurePolicy Fail): "),
        "{report}"
    );
    assert!(
        report.contains("result: denied (403): policy 'set-replicas' with binding 'set-replicas' denied request: "),
        "{report}"
    );
    let without = apply(&p, &b, &o, &[]);
    assert_eq!(without.status.code(), Some(1));

    // A path that cannot be read is a usage error (issue 48).
    let missing = dir.join("missing.yaml").display().to_string();
    let out = apply(&p, &b, &missing, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.yaml"));
}

#[test]
fn apply_reads_authorizer_decisions_from_a_list_file() {
    // Upstream mutating/compilation_test.go 'authorizer check': the mutation
    // reads authorizer.group('').resource('endpoints').check('create').allowed().
    let policy = POLICY.replace(
        "Object{spec: Object.spec{replicas: 3}}",
        "Object{spec: Object.spec{replicas: authorizer.group('').resource('endpoints').check('create').allowed() ? 10 : 0}}",
    );
    let (dir, [p, b, o]) = fixture("authorizer", &policy);
    let decisions = write(
        &dir,
        "authz.yaml",
        "- {resource: endpoints, verb: create, allowed: true}\n",
    );
    for (extra, replicas) in [
        (vec!["--authorizer", decisions.as_str()], 10),
        (vec!["--authorizer-allow-all"], 10),
        (vec![], 0),
    ] {
        let out = apply(&p, &b, &o, &[&extra[..], &["-o", "json"]].concat());
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["spec"]["replicas"], replicas, "{extra:?}");
    }
}

/// `kmutate check` reports a field the matched kind's schema lacks as a
/// warning (in upstream's type-checking words), and still exits 0; a
/// constant `matches` pattern that is not a Go regex is a problem.
#[test]
fn check_reports_field_warnings_and_regex_errors() {
    let dir = scratch("check-field-warnings");
    let warned = POLICY.replace(
        "Object{spec: Object.spec{replicas: 3}}",
        "has(object.spec.replicaz) ? Object{} : Object{spec: Object.spec{replicas: 3}}",
    );
    std::fs::write(dir.join("policy.yaml"), &warned).unwrap();
    let out = kmutate(&["check", dir.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("policy \"set-replicas\": spec.mutations[0].applyConfiguration.expression: warning: object.spec.replicaz: apps/v1, Kind=Deployment: ERROR: <input>:1:4: undefined field 'replicaz'"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 policies, 0 bindings, 0 problems, 1 warnings"),
        "{stdout}"
    );

    let bad = POLICY.replace(
        "Object{spec: Object.spec{replicas: 3}}",
        "object.metadata.name.matches('[') ? Object{} : Object{}",
    );
    std::fs::write(dir.join("policy.yaml"), &bad).unwrap();
    let out = kmutate(&["check", dir.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("compilation failed: ERROR: <input>:1:30: invalid matches argument"),
        "{stdout}"
    );
}

/// `kmutate check` refuses what the API server refuses, with its message
/// (issue 47): here the one kube-apiserver v1.36.2 gave this object
/// (tests/validation/recorded.json, `policy-several-errors-at-once`).
#[test]
fn check_gives_the_api_servers_message_for_an_invalid_policy() {
    let dir = scratch("check-validation");
    let bad = POLICY
        .replace("metadata: {name: set-replicas}", "metadata: {name: policy-several-errors-at-once}")
        .replace("  reinvocationPolicy: Never\n", "  reinvocationPolicy: Always\n  failurePolicy: Sometimes\n")
        .replace(
            "  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{spec: Object.spec{replicas: 3}}\"\n",
            "  mutations: []\n",
        );
    write(&dir, "policy.yaml", &bad);
    let out = kmutate(&["check", dir.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(r#"policy.yaml (document 0): MutatingAdmissionPolicy.admissionregistration.k8s.io "policy-several-errors-at-once" is invalid: [spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore", spec.mutations: Required value: mutations must contain at least one item, spec.reinvocationPolicy: Unsupported value: "Always": supported values: "IfNeeded", "Never"]"#),
        "{stdout}"
    );
    assert!(
        stdout.contains("0 policies, 0 bindings, 1 problems"),
        "{stdout}"
    );
}

/// `kmutate check --webhook-rules` prints the rules for a webhook
/// configuration on stdout (issue 49), the report on stderr: for the
/// fixture's one Deployment policy, that one rule, in every version (a
/// request through another comes as it was made).
#[test]
fn check_prints_the_webhook_rules_the_bindings_need() {
    let (dir, _) = fixture("check-webhook-rules", POLICY);
    let out = kmutate(&["check", "--webhook-rules", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rules: serde_json::Value = serde_saphyr::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(
        rules,
        serde_json::json!([{"apiGroups": ["apps"], "apiVersions": ["*"],
            "operations": ["CREATE"], "resources": ["deployments"], "scope": "*"}])
    );
    assert!(text(&out.stderr).contains("1 policies, 1 bindings, 0 problems"));
}

/// `kmutate bench -f` times a user's own object through their policies
/// (issue 43); a case file and -f exclude each other.
#[test]
fn bench_takes_policies_bindings_and_an_object() {
    let (_, [p, b, o]) = fixture("bench-object", POLICY);
    let out = kmutate(&[
        "bench",
        "--policies",
        &p,
        "--bindings",
        &b,
        "-f",
        &o,
        "--iterations",
        "20",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).trim_end().ends_with(" ns/op"),
        "{}",
        text(&out.stdout)
    );
    let out = kmutate(&[
        "bench",
        "conformance/apply-configuration.yaml",
        "-f",
        &o,
        "--policies",
        &p,
        "--bindings",
        &b,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = kmutate(&["bench", "-f", &o]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--policies and --bindings are required with -f"
    );
}
