//! The `kmutate` command line: a thin layer over the library.

use anyhow::{bail, Context as _, Result};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use kmutate::api::load;
use kmutate::apply::input::{read_inputs, Content};
use kmutate::apply::output::{describe, render, Format};
use kmutate::apply::{evaluate, Evaluator, Verdict as ApplyVerdict};
use kmutate::authorizer::{AlwaysAllow, AlwaysDeny, Authorizer, FixedAuthorizer};
use kmutate::conformance;
use kmutate::dispatch::PolicySet;
use kmutate::matching::ResourceTable;
use kmutate::request::{ClusterObjects, UserInfo};
use kmutate::schema::SchemaStore;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

// The admission path allocates many small short-lived values (JSON and CEL
// trees); mimalloc serves them about a third faster than glibc's malloc. Its
// `no_thp` build keeps transparent huge pages from tripling resident memory.
#[global_allocator]
static ALLOCATOR: kmutate::allocator::Mimalloc = kmutate::allocator::Mimalloc;

/// Kubernetes MutatingAdmissionPolicy evaluator.
#[derive(Parser)]
#[command(
    name = "kmutate",
    version,
    about,
    long_about = "Evaluates Kubernetes MutatingAdmissionPolicies as kube-apiserver v1.36 does: \
as an admission webhook (`serve`), offline against one object (`apply`), and as a \
conformance runner. `kmutate <COMMAND> --help` describes each command, its exit \
status and examples.",
    after_help = "Examples:
  kmutate serve                                  # webhook on :8443 with ./policies and ./bindings
  kmutate apply --policies policies --bindings bindings -f examples/pod.yaml -o explain
  kmutate check policies bindings
  kmutate completions bash > /etc/bash_completion.d/kmutate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Most YAML documents read from one file (policies, bindings,
    /// resources, cases); a file over it is refused, the others load.
    #[arg(long, global = true, default_value_t = kmutate::api::load::FileLimits::DEFAULT.max_documents)]
    max_file_documents: usize,
    /// Most bytes read from one file (a number, or with Ki, Mi or Gi).
    #[arg(long, global = true, default_value = "64Mi", value_parser = parse_bytes)]
    max_file_bytes: usize,
}

/// `65536`, `64Ki`, `64Mi`, `1Gi`.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number of bytes, e.g. 64Mi"))?;
    let scale: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(format!("{text:?}: the unit must be Ki, Mi or Gi")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{text:?}: too large"))
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate policies against manifests offline and print the result.
    #[command(
        long_about = "Evaluates policies and bindings against every object of the manifests \
given (files, folders, standard input; YAML streams, JSON, kind: List), each as \
kube-apiserver's MutatingAdmissionPolicy plugin would admit it, without a cluster. \
Namespaces, param objects and CRDs among the manifests serve as --resources do. \
Prints the stream back with the policies' changes (objects no policy changed as \
they came), each object's patch, diff or explanation of which policy, binding and \
mutation changed which fields (-o explain), and a summary on stderr. Invalid \
policy or binding documents are reported and left out.",
        after_long_help = "Exit status:
  0  nothing was denied (objects may have changed); with --dry-run, also when
     something was denied
  1  an object was denied, or a document is not a Kubernetes object or does not
     parse (each named on stderr; the others are still evaluated and written),
     or, with --fail-on change, a policy changed an object
  2  usage error: a bad flag, or an input path that cannot be read

Examples:
  kmutate apply --policies policies --bindings bindings \\
      --resources examples/namespace.yaml -f examples/pod.yaml -o diff
  kmutate apply --policies policies --bindings bindings -f examples/deployment.yaml -o explain
  # A pipeline: mutate what helm renders, then apply it
  helm template my-chart | kmutate apply --policies policies --bindings bindings -f - \\
      | kubectl apply -f -
  # A gate: the manifests must already be what the policies would make them
  kmutate apply --policies policies --bindings bindings -R -f manifests/ --fail-on change -o diff
  # CI: report what would change, denials and errors; exit 0 whatever the verdict
  kmutate apply --policies policies --bindings bindings -f manifest.yaml --dry-run"
    )]
    Apply(ApplyArgs),
    /// Run conformance cases (files or folders of YAML cases).
    #[command(after_long_help = "Exit status:
  0  every case passed, apart from those listed as expected failures
  1  a case failed unexpectedly, an expected failure passed, or a case file is unreadable
  2  usage error

The case format is described in docs/case-format.md.

Example:
  kmutate conformance conformance")]
    Conformance(ConformanceArgs),
    /// Time the in-process admission of one conformance case.
    #[command(
        after_long_help = "Prints the mean time of one admission in nanoseconds \
(`<N> ns/op`), after a warm-up of a tenth of the iterations.

Exit status: 0 measured; 1 the file or case cannot be read or prepared; 2 usage error.

Example:
  kmutate bench conformance/apply-configuration.yaml --case ac-nested-env-new-name-appends
  # your own policies on your own object
  kmutate bench --policies policies --bindings bindings --resources examples/namespace.yaml \\
      -f examples/pod.yaml"
    )]
    Bench(BenchArgs),
    /// Load and compile policies and bindings; report every problem.
    #[command(
        after_long_help = "Reports what the API server would refuse (its own 422 \
messages), unreadable files, CEL compile errors (with the expression's field path) and \
bindings of missing policies, then a count. With --webhook-rules, prints instead the rules \
a MutatingWebhookConfiguration needs to send kmutate every request the bindings can match \
(YAML, for its `rules:`), and the report on stderr.

Exit status: 0 no problem; 1 at least one problem; 2 usage error.

Examples:
  kmutate check policies bindings
  kmutate check --webhook-rules policies bindings > rules.yaml"
    )]
    Check(CheckArgs),
    /// Serve the admission webhook (HTTPS POST /mutate, GET /metrics).
    #[command(
        long_about = "Serves kube-apiserver's admission webhook calls: POST /mutate takes an \
admission.k8s.io/v1 (or v1beta1) AdmissionReview and answers with a JSON patch or a denial. \
GET /healthz and GET /readyz are on the HTTPS listener, GET /metrics on the metrics \
listener. Without --tls-cert a self-signed certificate is generated and the path of its \
CA bundle is logged.",
        after_long_help = "Exit status: 0 after SIGTERM or SIGINT once in-flight requests are \
answered; 1 when the server cannot start (address in use, unreadable certificate, ...); \
2 usage error.

Examples:
  kmutate serve
  kmutate serve --policies /etc/kmutate/policies --bindings /etc/kmutate/bindings \\
      --tls-cert /tls/tls.crt --tls-key /tls/tls.key --log-format json"
    )]
    Serve(Box<kmutate::webhook::cli::ServeArgs>),
    /// Drive a webhook with a recorded AdmissionReview; report throughput and latency.
    #[command(
        after_long_help = "Prints requests, throughput, p50, p99 and p99.9 latency.

Exit status: 0 every request was answered with HTTP 200; 1 a request failed or got \
another status, or the webhook is unreachable; 2 usage error.

Example:
  kmutate loadtest --ca /tmp/kmutate-tls/ca.crt --review bench/webhook/review.json \\
      --connections 8 --duration 10s"
    )]
    Loadtest(kmutate::webhook::cli::LoadtestArgs),
    /// Translate declarative mutation rules (Katalog, Capsule) to policies and bindings.
    #[command(
        after_long_help = "Prints the policies and bindings as YAML on stdout, \
warnings on stderr. The supported constructs are listed in docs/translate-katalog.md and \
docs/translate-capsule.md.

Exit status: 0 translated; 1 a rule cannot be translated (see --skip-untranslatable) or \
the file is unreadable; 2 usage error.

Examples:
  kmutate translate katalog katalog.yaml --target example.com/v1/AppRequest/apprequests
  kmutate translate capsule tenant.yaml"
    )]
    Translate(kmutate::translate::cli::TranslateArgs),
    /// Evaluate the policies on the cluster's stored objects: what they would change, and fix it.
    #[command(
        long_about = "Reads the live cluster and evaluates the policies on every stored object \
they could match: discovery finds the resources the loaded bindings can match (subresources \
left out), listed in pages and streamed. Each object is evaluated as the CREATE that would make \
it again (server-set metadata and status cleared), or with --as update as an update leaving it \
as stored; Namespaces, params and CEL authorizer checks come from the cluster, as the webhook \
reads them. Reports, per object, would change (the paths, and the policies and bindings that \
change them), would be denied (upstream's message), unchanged, or error; then a summary per \
policy and binding. With --fix, each change is written back as a JSON patch that tests the \
resourceVersion read first. Resources the caller may not list are skipped with a message.",
        after_long_help = "Exit status:
  0    the scan completed (whatever it found), every fix was written
  1    --fail-on found what it names; an object could not be evaluated, a resource could
       not be listed (other than not being allowed to), or a fix failed
  2    usage error, or the cluster or the policies cannot be read
  130  interrupted (Ctrl-C): the report so far is printed

Examples:
  kmutate scan
  kmutate scan -n shop --resource pods -o json
  kmutate scan --source api --fail-on change          # a CI gate on a cluster
  kmutate scan --fix --dry-run=server                  # what a fix would write
  kmutate scan --fix --restart-owners                  # fix in place, restart the rest
  kmutate scan -o policyreport --write-reports"
    )]
    Scan(Box<kmutate::scan::cli::ScanArgs>),
    /// Print a shell completion script.
    #[command(after_long_help = "Exit status: 0 printed; 2 usage error.

Examples:
  kmutate completions bash > ~/.local/share/bash-completion/completions/kmutate
  kmutate completions zsh > \"${fpath[1]}/_kmutate\"
  kmutate completions fish > ~/.config/fish/completions/kmutate.fish")]
    Completions(CompletionsArgs),
}

#[derive(clap::Args)]
struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(clap::Args)]
struct ApplyArgs {
    /// Policy files or folders, searched recursively for YAML and JSON
    /// (repeatable; a file may hold bindings and other objects too).
    #[arg(long, value_name = "PATH", required = true)]
    policies: Vec<PathBuf>,
    /// Binding files or folders (repeatable).
    #[arg(long, value_name = "PATH", required = true)]
    bindings: Vec<PathBuf>,
    /// Cluster objects the policies see: Namespaces (namespaceSelector,
    /// namespaceObject), param objects, and the CustomResourceDefinitions of
    /// custom kinds (repeatable).
    #[arg(long, value_name = "PATH")]
    resources: Vec<PathBuf>,
    /// Manifests to evaluate: a file, a folder (its YAML and JSON files), or
    /// - for standard input (repeatable). YAML streams, JSON, kind: List.
    #[arg(short = 'f', long = "filename", value_name = "PATH", required = true)]
    inputs: Vec<PathBuf>,
    /// Read the subfolders of folders given with -f and --old-object too.
    #[arg(short = 'R', long)]
    recursive: bool,
    /// The existing objects (`oldObject`) of an UPDATE, as -f takes them;
    /// each object is matched with the old object of its API group, kind,
    /// namespace and name.
    #[arg(long, value_name = "PATH")]
    old_object: Vec<PathBuf>,
    /// The request's operation.
    #[arg(long, default_value = "CREATE", value_parser = ["CREATE", "UPDATE", "CONNECT"])]
    operation: String,
    /// The namespace of namespaced objects that name none (as kubectl's -n;
    /// else they are admitted in `default`).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// The requesting user's name (`request.userInfo.username`).
    #[arg(long, value_name = "NAME", default_value = "")]
    user: String,
    /// A group of the requesting user (repeatable).
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Decisions for the CEL `authorizer` checks: a YAML or JSON list of
    /// `{user?, group?, resource?, subresource?, namespace?, name?, verb,
    /// path?, allowed, reason?}`, the first entry whose given fields all equal
    /// the check's deciding it (as a conformance case's `authorizer` list).
    /// Without this or --authorizer-allow-all, every check is denied.
    #[arg(long, value_name = "FILE", conflicts_with = "authorizer_allow_all")]
    authorizer: Option<PathBuf>,
    /// Allow every CEL `authorizer` check.
    #[arg(long)]
    authorizer_allow_all: bool,
    /// Output format (default: yaml; with --dry-run, explain).
    #[arg(short = 'o', long, value_enum)]
    output: Option<Format>,
    /// Report only, for CI pipelines: exit 0 whether the request is admitted
    /// or denied (a denial is part of the output); only usage errors and
    /// unreadable input fail.
    #[arg(long)]
    dry_run: bool,
    /// Also exit 1 when a policy changes any object: a gate for manifests
    /// that must already be what the policies make them.
    #[arg(long, value_enum, value_name = "WHAT")]
    fail_on: Option<FailOn>,
}

/// What `--fail-on` fails on.
#[derive(Clone, Copy, ValueEnum)]
enum FailOn {
    /// A policy changed an object.
    Change,
}

#[derive(clap::Args)]
struct ConformanceArgs {
    /// Case files or folders (searched recursively).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// File listing cases expected to fail (default: conformance/expected-failures.txt when present).
    #[arg(long, value_name = "FILE")]
    expected_failures: Option<PathBuf>,
    /// Print the failure details of expected failures too.
    #[arg(short, long)]
    verbose: bool,
    /// Run the cases against a live cluster (server-side dry runs) instead
    /// of in process.
    #[arg(long)]
    cluster: bool,
    /// The cluster's kubeconfig (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE", requires = "cluster")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long, value_name = "NAME", requires = "cluster")]
    context: Option<String>,
    /// What answers the cluster's admission: its built-in
    /// MutatingAdmissionPolicy plugin, or kmutate's webhook (kmutate.dev).
    #[arg(long, value_name = "IMPL", default_value = "builtin", value_parser = ["builtin", "kmutate.dev"], requires = "cluster")]
    implementation: String,
    /// Install, and keep, a policy per built-in param kind the cases use,
    /// so that kube-apiserver, restarted once after, runs their informers;
    /// runs no case.
    #[arg(long, requires = "cluster")]
    install_param_informers: bool,
    /// Cases run at once against the cluster.
    #[arg(long, value_name = "N", default_value_t = 8, requires = "cluster")]
    jobs: usize,
    /// With --implementation kmutate.dev: kmutate keeps its webhook's rules
    /// to what the cases' policies match, as `serve --manage-webhook` does.
    #[arg(long, requires = "cluster")]
    manage_webhook: bool,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// A conformance case file (or, with -f, none).
    #[arg(required_unless_present = "object", conflicts_with = "object")]
    file: Option<PathBuf>,
    /// Your own object instead of a case: admitted as a CREATE through
    /// --policies and --bindings (with --resources for the cluster).
    #[arg(short = 'f', long = "filename", value_name = "FILE", requires_all = ["policies", "bindings"])]
    object: Option<PathBuf>,
    /// Policy files or folders, with -f (repeatable).
    #[arg(long, value_name = "PATH")]
    policies: Vec<PathBuf>,
    /// Binding files or folders, with -f (repeatable).
    #[arg(long, value_name = "PATH")]
    bindings: Vec<PathBuf>,
    /// Cluster objects (Namespaces, params, CRDs), with -f (repeatable).
    #[arg(long, value_name = "PATH")]
    resources: Vec<PathBuf>,
    /// The name of the case to run (default: the first of the file).
    #[arg(long, value_name = "NAME")]
    case: Option<String>,
    /// Admissions to time.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    iterations: u64,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Policy and binding files or folders (searched recursively), or -
    /// for standard input.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Print the webhook rules the bindings need (YAML) on stdout; the
    /// report goes to stderr.
    #[arg(long)]
    webhook_rules: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    kmutate::api::load::set_file_limits(kmutate::api::load::FileLimits {
        max_documents: cli.max_file_documents,
        max_bytes: cli.max_file_bytes,
    });
    let result = match cli.command {
        Command::Apply(a) => apply(a),
        Command::Conformance(c) => conformance_cmd(c),
        Command::Bench(b) => bench(b),
        Command::Check(c) => check(c),
        Command::Serve(s) => kmutate::webhook::cli::serve(*s),
        Command::Loadtest(l) => kmutate::webhook::cli::loadtest_cmd(l),
        Command::Translate(t) => kmutate::translate::cli::translate_cmd(t),
        Command::Scan(s) => kmutate::scan::cli::scan_cmd(*s),
        Command::Completions(c) => completions(c.shell),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The one YAML or JSON document of a file.
fn read_document(path: &PathBuf) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs =
        load::parse_documents(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if docs.len() != 1 {
        bail!(
            "{}: expected one document, found {}",
            path.display(),
            docs.len()
        );
    }
    Ok(docs.remove(0))
}

fn apply(a: ApplyArgs) -> Result<ExitCode> {
    let output = a.output.unwrap_or(if a.dry_run {
        Format::Explain
    } else {
        Format::Yaml
    });
    let explain = matches!(output, Format::Explain | Format::ExplainJson);
    let usage = |message: String| {
        eprintln!("error: {message}");
        Ok(ExitCode::from(2))
    };
    let stdin_count = a
        .inputs
        .iter()
        .chain(&a.old_object)
        .filter(|p| p.as_os_str() == "-")
        .count();
    if stdin_count > 1 {
        return usage("standard input (-) can be read only once".into());
    }
    if !a.old_object.is_empty() && a.operation != "UPDATE" {
        return usage("--old-object is for --operation UPDATE".into());
    }
    if a.old_object.is_empty() && a.operation == "UPDATE" {
        return usage("--operation UPDATE needs --old-object".into());
    }
    let loaded = load::load_definitions(&a.policies, &a.bindings);
    let resources = load::load_paths(&a.resources);
    let mut problems: Vec<String> = loaded
        .errors
        .iter()
        .chain(&resources.errors)
        .map(ToString::to_string)
        .collect();
    problems.extend(missing_policy_problems(&loaded));
    let mut stdin = std::io::stdin().lock();
    let documents = match read_inputs(&a.inputs, a.recursive, &mut stdin) {
        Ok(d) => d,
        Err(e) => return usage(e.to_string()),
    };
    let old = match read_inputs(&a.old_object, a.recursive, &mut stdin) {
        Ok(d) => d,
        Err(e) => return usage(e.to_string()),
    };
    let authorizer: Box<dyn Authorizer> = match &a.authorizer {
        Some(path) => Box::new(
            FixedAuthorizer::from_json(&read_document(path)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        ),
        None if a.authorizer_allow_all => Box::new(AlwaysAllow),
        None => Box::new(AlwaysDeny),
    };
    let (policies, binding_list) = (loaded.policies.clone(), loaded.bindings.clone());
    let (set, errors) = PolicySet::new(loaded.policies, loaded.bindings);
    problems.extend(errors.iter().map(ToString::to_string));
    let evaluator = Evaluator {
        set: &set,
        policies: &policies,
        bindings: &binding_list,
        authorizer: authorizer.as_ref(),
        problems: &problems,
    };
    let request = kmutate::apply::Request {
        operation: a.operation.clone(),
        namespace: a.namespace.clone(),
        user: UserInfo {
            username: a.user.clone(),
            groups: a.groups.clone(),
            ..Default::default()
        },
        explain,
    };
    let results = match evaluate(&evaluator, &request, documents, resources.resources, &old) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    if !explain {
        for p in &problems {
            eprintln!("warning: {p}");
        }
    }
    print_stdout(&render(&results, output)?)?;
    Ok(apply_summary(&results, &a))
}

/// Names each unreadable document and denial on stderr, then the summary
/// line; the exit status.
fn apply_summary(results: &[kmutate::apply::DocumentResult], a: &ApplyArgs) -> ExitCode {
    let (mut objects, mut changed, mut denied, mut errors) = (0, 0, 0, 0);
    for r in results {
        if let Content::Unreadable(why) = &r.document.content {
            eprintln!("error: {why}");
            errors += 1;
        }
        for e in &r.objects {
            objects += 1;
            for w in &e.warnings {
                eprintln!("warning: {w}");
            }
            match &e.verdict {
                ApplyVerdict::Admitted { changed: c, .. } => changed += usize::from(*c),
                ApplyVerdict::Denied(message) => {
                    denied += 1;
                    eprintln!(
                        "denied: {} ({}): {message}",
                        describe(&e.original),
                        e.origin
                    );
                }
            }
        }
    }
    eprintln!(
        "kmutate apply: {objects} objects read, {changed} changed, {denied} denied, {errors} errors"
    );
    let gate_failed = matches!(a.fail_on, Some(FailOn::Change)) && changed > 0;
    if errors > 0 || gate_failed || (denied > 0 && !a.dry_run) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A case admitting the one object of `object` as a CREATE through the
/// policies, bindings and resources of `b`, for `kmutate bench -f`.
fn bench_case(b: &BenchArgs, object: &PathBuf) -> Result<conformance::Case> {
    // Read as documents: the case's preparation converts and checks them.
    let documents = |paths: &[PathBuf]| -> Result<Vec<serde_json::Value>> {
        let mut docs = Vec::new();
        for path in paths {
            for file in load::collect_files(path).map_err(|e| anyhow::anyhow!("{e}"))? {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                docs.extend(
                    load::parse_documents(&text)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?
                        .into_iter()
                        .filter(|d| !d.is_null()),
                );
            }
        }
        Ok(docs)
    };
    let mut all = documents(&b.policies)?;
    all.extend(documents(&b.bindings)?);
    let of_kind = |kind: &str| -> Vec<&serde_json::Value> {
        all.iter().filter(|d| d["kind"] == kind).collect()
    };
    let doc = serde_json::json!({
        "name": "bench",
        "policies": of_kind("MutatingAdmissionPolicy"),
        "bindings": of_kind("MutatingAdmissionPolicyBinding"),
        "resources": documents(&b.resources)?,
        "object": read_document(object)?,
        "expect": {"object": {}},
    });
    Ok(conformance::Case {
        name: "bench".into(),
        source: Default::default(),
        doc,
    })
}

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
fn print_stdout(text: &str) -> Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Prints the completion script of `shell`.
fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kmutate", &mut script);
    print_stdout(&String::from_utf8_lossy(&script))?;
    Ok(ExitCode::SUCCESS)
}

/// Bindings whose policy is not among the loaded ones (the dispatcher
/// ignores them, as upstream does).
fn missing_policy_problems(loaded: &load::Loaded) -> Vec<String> {
    let known: std::collections::BTreeSet<&str> =
        loaded.policies.iter().map(|p| p.name.as_str()).collect();
    loaded
        .bindings
        .iter()
        .filter(|b| !known.contains(b.policy_name.as_str()))
        .map(|b| {
            format!(
                "{}: binding {:?} refers to policy {:?}, which is not among the loaded policies",
                b.source, b.name, b.policy_name
            )
        })
        .collect()
}

fn conformance_cmd(c: ConformanceArgs) -> Result<ExitCode> {
    if c.cluster {
        return cluster_conformance(c);
    }
    let expected = match &c.expected_failures {
        Some(list) => read_expected_failures(list)?,
        // The default list, where the suite runs from a checkout.
        None => {
            let list = Path::new("conformance/expected-failures.txt");
            if list.exists() {
                read_expected_failures(list)?
            } else {
                Default::default()
            }
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let summary = conformance::run_all(&c.paths, &expected, c.verbose, &mut out)?;
    Ok(if summary.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The `--expected-failures` list; a list named but unreadable is an error
/// (a typo would otherwise turn every listed case into a failure).
fn read_expected_failures(list: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    conformance::read_expected_failures(list)
        .with_context(|| format!("reading the expected failures {}", list.display()))
}

fn cluster_conformance(c: ConformanceArgs) -> Result<ExitCode> {
    use conformance::cluster::{run_cluster, ClusterOptions, Implementation};
    use std::io::IsTerminal as _;
    let options = ClusterOptions {
        kubeconfig: c.kubeconfig,
        context: c.context,
        implementation: if c.implementation == "kmutate.dev" {
            Implementation::KmutateDev
        } else {
            Implementation::Builtin
        },
        jobs: c.jobs,
        progress: std::io::stderr().is_terminal(),
        // Only a list given: the default one is kmutate's in process.
        expected_failures: match c.expected_failures.as_deref() {
            Some(list) => read_expected_failures(list)?,
            None => Default::default(),
        },
        manage_webhook: c.manage_webhook,
    };
    if c.install_param_informers {
        let kinds = conformance::cluster::install_param_informers(&c.paths, &options)?;
        println!(
            "kept a policy for the param kinds {kinds:?}: restart kube-apiserver once so that it starts their informers"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout();
    let summary = run_cluster(&c.paths, &options, &mut out)?;
    Ok(if summary.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn bench(b: BenchArgs) -> Result<ExitCode> {
    let case = match (&b.object, &b.file) {
        (Some(object), _) => bench_case(&b, object)?,
        (None, Some(file)) => conformance::read_cases(std::slice::from_ref(file))
            .into_iter()
            .filter_map(Result::ok)
            .find(|c| b.case.as_ref().is_none_or(|n| &c.name == n))
            .ok_or_else(|| anyhow::anyhow!("no such case in {}", file.display()))?,
        (None, None) => bail!("a case file or -f OBJECT is needed"),
    };
    let prepared = conformance::prepare(&case).map_err(|e| anyhow::anyhow!(e))?;
    for _ in 0..(b.iterations / 10).max(1) {
        std::hint::black_box(prepared.run());
    }
    let start = std::time::Instant::now();
    for _ in 0..b.iterations.max(1) {
        std::hint::black_box(prepared.run());
    }
    let ns = start.elapsed().as_nanos() / u128::from(b.iterations.max(1));
    println!("{ns} ns/op");
    Ok(ExitCode::SUCCESS)
}

fn check(c: CheckArgs) -> Result<ExitCode> {
    let (stdin, paths): (Vec<&PathBuf>, Vec<&PathBuf>) =
        c.paths.iter().partition(|p| p.as_os_str() == "-");
    let mut loaded = load::load_paths(&paths);
    // What the API server would refuse, in its words (issue 47); what the
    // loader and the compiler say of those documents would only repeat it.
    let mut refused = kmutate::validation::files::refused_documents(&paths);
    if !stdin.is_empty() {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading standard input")?;
        loaded.add_text("-", &text);
        refused.extend(kmutate::validation::files::refused_in_text("-", &text));
    }
    let is_refused = |at: &kmutate::api::SourceRef| refused.iter().any(|r| r.at == *at);
    let mut problems: Vec<String> = refused
        .iter()
        .map(|r| format!("{}: {}", r.at, r.message))
        .collect();
    problems.extend(
        loaded
            .errors
            .iter()
            .filter(|e| !matches!(e, load::LoadError::Invalid { at, .. } if is_refused(at)))
            .map(ToString::to_string),
    );
    problems.extend(missing_policy_problems(&loaded));
    let (_set, errors) = PolicySet::new(loaded.policies.clone(), loaded.bindings.clone());
    for e in errors {
        let Some(policy) = loaded.policies.iter().find(|p| p.name == e.policy) else {
            problems.push(e.to_string());
            continue;
        };
        if !is_refused(&policy.source) {
            problems.push(format!("{}: {e}", policy.source));
        }
    }
    // Schema-aware field warnings (CRDs among the paths give their schemas):
    // reported, never a problem.
    let cluster = ClusterObjects::new(loaded.resources.clone());
    let table = ResourceTable::new(cluster.crds());
    let schemas = SchemaStore::with_crds(cluster.crds());
    let warnings: Vec<String> = loaded
        .policies
        .iter()
        .flat_map(|p| {
            kmutate::cel::field_warnings::policy_field_warnings(p, &table, &schemas)
                .into_iter()
                .map(move |w| format!("{}: {w}", p.source))
        })
        .collect();
    let warned = if warnings.is_empty() {
        String::new()
    } else {
        format!(", {} warnings", warnings.len())
    };
    let mut report: Vec<String> = problems.iter().chain(&warnings).cloned().collect();
    report.push(format!(
        "{} policies, {} bindings, {} problems{warned}",
        loaded.policies.len(),
        loaded.bindings.len(),
        problems.len()
    ));
    if c.webhook_rules {
        for line in &report {
            eprintln!("{line}");
        }
        let rules =
            kmutate::matching::webhook_rules::webhook_rules(&loaded.policies, &loaded.bindings);
        let mut yaml = serde_saphyr::to_string(&rules)?;
        if !yaml.ends_with('\n') {
            yaml.push('\n');
        }
        print_stdout(&yaml)?;
    } else {
        print_stdout(&(report.join("\n") + "\n"))?;
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_take_binary_units() {
        assert_eq!(parse_bytes("64Mi"), Ok(64 << 20));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("1MB").is_err());
        assert!(parse_bytes("x").is_err());
    }
}
