//! `kmutate conformance --cluster` against a real kube-apiserver v1.36.2
//! (`../shared/upstream`), its built-in MutatingAdmissionPolicy plugin
//! answering:
//!
//! - the reference cases of `../shared/conformance/cases` pass, but for the
//!   cases where the live apiserver's answer differs from the expectation
//!   (listed below, each with why);
//! - a case whose expected mutation does not happen fails, and one that
//!   expects no change where the policy changes something fails too;
//! - a CONNECT case is skipped with its reason;
//! - the run leaves no policy, binding or active namespace of its own.

mod support;

use kmutate::conformance::cluster::{
    install_param_informers, run_cluster, ClusterOptions, Implementation,
};
use std::path::{Path, PathBuf};
use support::kas::Kas;

/// Reference cases the live apiserver cannot hold to their expectation,
/// skipped with these reasons (the apiserver's own work after admission).
const SKIPPED: &[(&str, &str)] = &[
    // The apiserver defaults spec.replicas to 1 again, its value before.
    ("jp-remove-scalar-field", "change not observable"),
    // Validation after admission: an added container without an image.
    ("jp-add-list-end-dash", "expected object refused"),
    (
        "jp-value-from-object-initializer",
        "expected object refused",
    ),
    ("jp-replace-list-element", "expected object refused"),
    // Validation after admission: a duplicate container name.
    ("jp-copy-list-element-to-end", "expected object refused"),
    // Validation after admission: 'k8s.io/x~y' is no valid label key.
    ("jp-escapekey-label", "expected object refused"),
    // A status update keeps the stored metadata: the label is dropped.
    (
        "crd-status-matched-by-star-slash-star",
        "change not observable",
    ),
    ("crd-status-matched-by-name", "change not observable"),
];

fn shared_cases() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/cases")
}

fn options(kas: &Kas) -> ClusterOptions {
    options_for(kas, Implementation::Builtin, false)
}

fn options_for(kas: &Kas, implementation: Implementation, manage_webhook: bool) -> ClusterOptions {
    ClusterOptions {
        kubeconfig: Some(kas.kubeconfig.clone()),
        context: None,
        implementation,
        jobs: 8,
        progress: false,
        expected_failures: Default::default(),
        manage_webhook,
    }
}

fn run(kas: &Kas, paths: &[PathBuf]) -> (kmutate::conformance::cluster::ClusterSummary, String) {
    run_with(kas, paths, Implementation::Builtin, false)
}

fn run_with(
    kas: &Kas,
    paths: &[PathBuf],
    implementation: Implementation,
    manage_webhook: bool,
) -> (kmutate::conformance::cluster::ClusterSummary, String) {
    let mut out = Vec::new();
    let summary = run_cluster(
        paths,
        &options_for(kas, implementation, manage_webhook),
        &mut out,
    )
    .expect("the run completes");
    (summary, String::from_utf8_lossy(&out).into_owned())
}

/// The failed cases, sorted (cases run at once report in any order).
fn failed_cases(report: &str) -> Vec<String> {
    let mut failed: Vec<String> = report
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL "))
        .map(str::to_string)
        .collect();
    failed.sort();
    failed
}

#[test]
fn reference_cases_pass_against_the_builtin_plugin() {
    let Some(kas) = Kas::start("cluster-conformance-reference") else {
        return;
    };
    if !shared_cases().is_dir() {
        eprintln!("skipped: ../shared/conformance/cases is absent");
        return;
    }
    // kube-apiserver starts the informer of a built-in param kind (a
    // ConfigMap) only for the policies it finds when it starts.
    let kinds = install_param_informers(&[shared_cases()], &options(&kas)).unwrap();
    assert_eq!(kinds, ["v1 ConfigMap"]);
    kas.stop();
    kas.restart();
    let (summary, report) = run(&kas, &[shared_cases()]);
    eprintln!("{report}");
    assert_eq!(failed_cases(&report), Vec::<String>::new(), "{report}");
    let mut skipped: Vec<&str> = report
        .lines()
        .filter_map(|l| l.strip_prefix("skip "))
        .collect();
    skipped.sort();
    let mut want: Vec<String> = SKIPPED
        .iter()
        .map(|(name, reason)| format!("{name} ({reason}"))
        .collect();
    want.sort();
    assert_eq!(skipped.len(), want.len(), "{skipped:#?}");
    for (got, want) in skipped.iter().zip(&want) {
        assert!(got.starts_with(want.as_str()), "{got} is not {want}");
    }
    assert!(summary.passed >= 100, "{summary:?}");
    assert!(report.ends_with(&format!(
        "{} passed, {} failed, {} skipped\n",
        summary.passed,
        summary.failed,
        summary.skipped_total()
    )));
}

const CONFIGMAP_POLICY: &str = r#"
policies:
- apiVersion: admissionregistration.k8s.io/v1
  kind: MutatingAdmissionPolicy
  metadata: {name: label}
  spec:
    matchConstraints:
      resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
    failurePolicy: Fail
    reinvocationPolicy: Never
    mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: "Object{metadata: Object.metadata{labels: {'set': 'yes'}}}"
bindings:
- apiVersion: admissionregistration.k8s.io/v1
  kind: MutatingAdmissionPolicyBinding
  metadata: {name: label}
  spec: {policyName: label}
resources:
- {apiVersion: v1, kind: Namespace, metadata: {name: default}}
request: {userInfo: {username: alice, groups: ["system:authenticated"]}}
object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: default}, data: {k: v}}
"#;

#[test]
fn wrong_expectations_fail_and_connect_is_skipped() {
    let Some(kas) = Kas::start("cluster-conformance-judging") else {
        return;
    };
    let dir = kas.dir.join("cases");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        format!(
            "name: sets-the-label\n{CONFIGMAP_POLICY}expect:\n  object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c, namespace: default, labels: {{set: 'yes'}}}}, data: {{k: v}}}}\n"
        ),
        // The policy sets 'yes': a case claiming 'no' must fail.
        format!(
            "name: claims-another-value\n{CONFIGMAP_POLICY}expect:\n  object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c, namespace: default, labels: {{set: 'no'}}}}, data: {{k: v}}}}\n"
        ),
        // A case claiming no change, where the policy changes the object.
        format!(
            "name: claims-no-change\n{CONFIGMAP_POLICY}expect:\n  object: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c, namespace: default}}, data: {{k: v}}}}\n"
        ),
        "name: connect\nrequest: {operation: CONNECT, subResource: exec, resource: {group: '', version: v1, resource: pods}, kind: {group: '', version: v1, kind: PodExecOptions}, namespace: default, name: p}\nobject: {apiVersion: v1, kind: PodExecOptions, command: [ls]}\nexpect: {object: {apiVersion: v1, kind: PodExecOptions, command: [ls]}}\n".to_string(),
    ];
    let file = dir.join("cases.yaml");
    std::fs::write(&file, cases.join("---\n")).unwrap();
    for (implementation, managed) in [
        (Implementation::Builtin, false),
        (Implementation::KmutateDev, false),
        // kmutate keeping its webhook's rules to the cases' policies.
        (Implementation::KmutateDev, true),
    ] {
        judged_alike(&kas, &file, implementation, managed);
    }
}

/// The judging cases of [`wrong_expectations_fail_and_connect_is_skipped`]
/// run by `implementation`, and nothing of the run left in force.
fn judged_alike(kas: &Kas, file: &Path, implementation: Implementation, managed: bool) {
    let (summary, report) = run_with(kas, &[file.to_path_buf()], implementation, managed);
    eprintln!("{implementation:?} (managed rules: {managed}):\n{report}");
    assert!(report.contains("ok sets-the-label"), "{report}");
    assert_eq!(
        failed_cases(&report),
        ["claims-another-value", "claims-no-change"].map(String::from),
        "{report}"
    );
    assert!(report.contains("skip connect (CONNECT"), "{report}");
    assert_eq!(
        (summary.passed, summary.failed, summary.skipped_total()),
        (1, 2, 1)
    );
    // Nothing of the run is left in force.
    support::run(std::time::Duration::from_secs(60), async {
        let client = kas.client().await;
        for (group, resource) in [
            (
                "admissionregistration.k8s.io/v1",
                "mutatingadmissionpolicies",
            ),
            (
                "admissionregistration.k8s.io/v1",
                "mutatingadmissionpolicybindings",
            ),
            ("kmutate.dev/v1", "mutatingadmissionpolicies"),
            ("kmutate.dev/v1", "mutatingadmissionpolicybindings"),
            (
                "admissionregistration.k8s.io/v1",
                "mutatingwebhookconfigurations",
            ),
            // The Lease of managed rules.
            ("coordination.k8s.io/v1", "namespaces/default/leases"),
        ] {
            let list: Result<serde_json::Value, _> = client
                .request(
                    hyper::http::Request::get(format!("/apis/{group}/{resource}"))
                        .body(Vec::new())
                        .unwrap(),
                )
                .await;
            // kmutate's CRDs are there only once a kmutate.dev run made them.
            let list = match list {
                Err(_) if group.starts_with("kmutate.dev") => continue,
                other => other.unwrap(),
            };
            assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "{list}");
        }
        let namespaces: serde_json::Value = client
            .request(
                hyper::http::Request::get("/api/v1/namespaces")
                    .body(Vec::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        for ns in namespaces["items"].as_array().unwrap() {
            let name = ns["metadata"]["name"].as_str().unwrap_or_default();
            if name.starts_with("kmc-") {
                assert!(
                    ns["metadata"]["deletionTimestamp"].is_string(),
                    "namespace {name} is left active"
                );
            }
        }
    });
}
