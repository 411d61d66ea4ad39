//! The `kmutate` command line: a thin layer over the library.

use anyhow::{bail, Context as _, Result};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use kmutate::api::load;
use kmutate::authorizer::{AlwaysAllow, AlwaysDeny, Authorizer, FixedAuthorizer};
use kmutate::conformance;
use kmutate::dispatch::{AdmissionContext, Outcome, PolicySet};
use kmutate::explain::ExplainObserver;
use kmutate::matching::{complete_request, ResourceTable};
use kmutate::request::{AdmissionRequest, ClusterObjects, UserInfo};
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

/// The resource name of `kind` when nothing says it: lower case, plural
/// by English rules (`Widget` → `widgets`, `Policy` → `policies`,
/// `Class` → `classes`), as kube's `UnsafeGuessKindToResource`.
fn guess_resource(kind: &str) -> String {
    let singular = kind.to_lowercase();
    if let Some(stem) = singular.strip_suffix('y') {
        format!("{stem}ies")
    } else if singular.ends_with('s') {
        format!("{singular}es")
    } else if singular.is_empty() {
        singular
    } else {
        format!("{singular}s")
    }
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
    /// Evaluate policies against an object offline and print the result.
    #[command(
        long_about = "Evaluates policies and bindings against one object, as kube-apiserver's \
MutatingAdmissionPolicy plugin would, without a cluster, and prints the mutated object, \
the patch, a diff, or an explanation of which policy, binding and mutation changed which \
fields (-o explain). Invalid policy or binding documents are reported and left out.",
        after_long_help = "Exit status:
  0  admitted, whether or not the object changed; with --dry-run, also when denied
  1  denied (the denial is printed on stderr), or an input file is unreadable or not a
     Kubernetes object (with --dry-run, only the latter)
  2  usage error

Examples:
  kmutate apply --policies policies --bindings bindings \\
      --resources examples/namespace.yaml -f examples/pod.yaml -o diff
  kmutate apply --policies policies --bindings bindings -f examples/deployment.yaml -o explain
  # CI: report what would change, denials and errors; exit 0 whatever the verdict
  kmutate apply --policies policies --bindings bindings -f manifest.yaml --dry-run"
    )]
    Apply(ApplyArgs),
    /// Run conformance cases (files or folders of YAML cases).
    #[command(after_long_help = "Exit status:
  0  every case passed, apart from those listed as expected failures
  1  a case failed unexpectedly, an expected failure passed, or a case file is unreadable
  2  usage error

The case format is described in ../shared/conformance/FORMAT.md.

Example:
  kmutate conformance conformance ../shared/conformance/cases")]
    Conformance(ConformanceArgs),
    /// Time the in-process admission of one conformance case.
    #[command(
        after_long_help = "Prints the mean time of one admission in nanoseconds \
(`<N> ns/op`), after a warm-up of a tenth of the iterations.

Exit status: 0 measured; 1 the file or case cannot be read or prepared; 2 usage error.

Example:
  kmutate bench ../shared/conformance/cases/apply-configuration.yaml --case ac-listmap-add-entry"
    )]
    Bench(BenchArgs),
    /// Load and compile policies and bindings; report every problem.
    #[command(
        after_long_help = "Reports unreadable files, invalid documents, CEL compile \
errors (with the expression's field path) and bindings of missing policies, then a count.

Exit status: 0 no problem; 1 at least one problem; 2 usage error.

Example:
  kmutate check policies bindings"
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
    /// The incoming object: one YAML or JSON document.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    object: PathBuf,
    /// The existing object (`oldObject`), for UPDATE.
    #[arg(long, value_name = "FILE")]
    old_object: Option<PathBuf>,
    /// The request's operation.
    #[arg(long, default_value = "CREATE", value_parser = ["CREATE", "UPDATE", "CONNECT"])]
    operation: String,
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
    output: Option<OutputFormat>,
    /// Report only, for CI pipelines: exit 0 whether the request is admitted
    /// or denied (a denial is part of the output); only usage errors and
    /// unreadable input fail.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum OutputFormat {
    /// The mutated object as YAML.
    Yaml,
    /// The mutated object as JSON.
    Json,
    /// The RFC 6902 patch from the original to the mutated object.
    Patch,
    /// A readable line diff.
    Diff,
    /// Which policy, binding and mutation changed which fields, in dispatch
    /// order, with skipped invocations, errors and the verdict.
    Explain,
    /// The explanation as JSON.
    ExplainJson,
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
}

#[derive(clap::Args)]
struct BenchArgs {
    /// A conformance case file.
    file: PathBuf,
    /// The name of the case to run (default: the first of the file).
    #[arg(long, value_name = "NAME")]
    case: Option<String>,
    /// Admissions to time.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    iterations: u64,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Policy and binding files or folders (searched recursively).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
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

/// The one Kubernetes object (with `apiVersion` and `kind`) of a file.
fn read_object(path: &PathBuf) -> Result<serde_json::Value> {
    let object = read_document(path)?;
    for field in ["apiVersion", "kind"] {
        if !object.get(field).is_some_and(|v| v.is_string()) {
            bail!(
                "{}: not a Kubernetes object: it has no string field {field:?}",
                path.display()
            );
        }
    }
    Ok(object)
}

fn apply(a: ApplyArgs) -> Result<ExitCode> {
    let output = a.output.unwrap_or(if a.dry_run {
        OutputFormat::Explain
    } else {
        OutputFormat::Yaml
    });
    let explain = matches!(output, OutputFormat::Explain | OutputFormat::ExplainJson);
    let mut loaded = load::load_paths(&a.policies);
    let bindings = load::load_paths(&a.bindings);
    let resources = load::load_paths(&a.resources);
    loaded.absorb_definitions(bindings.policies, bindings.bindings);
    let mut problems: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
    problems.extend(
        bindings
            .errors
            .iter()
            .chain(&resources.errors)
            .map(ToString::to_string),
    );
    let object = read_object(&a.object)?;
    let old_object = a.old_object.as_ref().map(read_object).transpose()?;
    let cluster = ClusterObjects::new(resources.resources);
    let table = ResourceTable::new(cluster.crds());
    // A custom kind whose CRD is not among --resources: a deduced schema,
    // with a warning (the webhook answers 503, as upstream does).
    let schemas = SchemaStore::with_crds(cluster.crds()).deducing_unknown_kinds();
    let mut request = AdmissionRequest {
        uid: "kmutate-apply".into(),
        operation: a.operation.clone(),
        user_info: UserInfo {
            username: a.user.clone(),
            groups: a.groups.clone(),
            ..Default::default()
        },
        object: Some(object.clone()),
        old_object,
        ..Default::default()
    };
    complete_request(&mut request, &table);
    let kind = request.kind.clone();
    if !schemas.has_schema(&kind.group, &kind.version, &kind.kind) {
        // Its resource name too, as kube's UnsafeGuessKindToResource would.
        if request.resource.resource.is_empty() {
            request.resource.group = kind.group.clone();
            request.resource.version = kind.version.clone();
            request.resource.resource = guess_resource(&kind.kind);
        }
        problems.push(format!(
            "{}: kind {}/{} {} has no CustomResourceDefinition among --resources: \
             a deduced schema is used (lists atomic, maps granular), resource {:?}",
            a.object.display(),
            kind.group,
            kind.version,
            kind.kind,
            request.resource.resource
        ));
    }
    problems.extend(missing_policy_problems(&loaded));
    let observer = ExplainObserver::new(&loaded.policies, &loaded.bindings);
    let (set, errors) = PolicySet::new(loaded.policies, loaded.bindings);
    problems.extend(errors.iter().map(ToString::to_string));
    let authorizer: Box<dyn Authorizer> = match &a.authorizer {
        Some(path) => Box::new(
            FixedAuthorizer::from_json(&read_document(path)?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        ),
        None if a.authorizer_allow_all => Box::new(AlwaysAllow),
        None => Box::new(AlwaysDeny),
    };
    let ctx = AdmissionContext {
        cluster: &cluster,
        schemas: &schemas,
        resources: &table,
        authorizer: authorizer.as_ref(),
    };
    let outcome = if explain {
        set.admit_with(&request, &ctx, &observer)
    } else {
        for p in &problems {
            eprintln!("warning: {p}");
        }
        set.admit(&request, &ctx)
    };
    let denied_code = if a.dry_run {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if explain {
        let explanation = observer.finish(problems, &object, &outcome);
        if matches!(output, OutputFormat::ExplainJson) {
            print_stdout(&format!(
                "{}\n",
                serde_json::to_string_pretty(&explanation)?
            ))?;
        } else {
            print_stdout(&explanation.to_text())?;
        }
        return Ok(match outcome {
            Outcome::Denied { message, .. } if !a.dry_run => {
                eprintln!("denied: {message}");
                denied_code
            }
            _ => ExitCode::SUCCESS,
        });
    }
    match outcome {
        Outcome::Denied { message, .. } => {
            eprintln!("denied: {message}");
            Ok(denied_code)
        }
        Outcome::Admitted { object: result, .. } => {
            let text = match output {
                OutputFormat::Json => format!("{}\n", serde_json::to_string_pretty(&result)?),
                OutputFormat::Yaml => serde_saphyr::to_string(&result)?,
                OutputFormat::Patch => {
                    let patch = json_patch::diff(&object, &result);
                    format!("{}\n", serde_json::to_string_pretty(&patch)?)
                }
                OutputFormat::Diff => {
                    let before = serde_saphyr::to_string(&object)?;
                    let after = serde_saphyr::to_string(&result)?;
                    line_diff(&before, &after)
                }
                OutputFormat::Explain | OutputFormat::ExplainJson => String::new(),
            };
            print_stdout(&text)?;
            Ok(ExitCode::SUCCESS)
        }
    }
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

/// A minimal unified-style line diff (longest common subsequence).
fn line_diff(before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        }
    }
    out
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
    let cases = conformance::read_cases(std::slice::from_ref(&b.file));
    let case = cases
        .into_iter()
        .filter_map(Result::ok)
        .find(|c| b.case.as_ref().is_none_or(|n| &c.name == n))
        .ok_or_else(|| anyhow::anyhow!("no such case in {}", b.file.display()))?;
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
    let loaded = load::load_paths(&c.paths);
    // What the API server would refuse, in its words (issue 47); what the
    // loader and the compiler say of those documents would only repeat it.
    let refused = kmutate::validation::files::refused_documents(&c.paths);
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
    for p in problems.iter().chain(&warnings) {
        println!("{p}");
    }
    let warned = if warnings.is_empty() {
        String::new()
    } else {
        format!(", {} warnings", warnings.len())
    };
    println!(
        "{} policies, {} bindings, {} problems{warned}",
        loaded.policies.len(),
        loaded.bindings.len(),
        problems.len()
    );
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // k8s.io/apimachinery meta.UnsafeGuessKindToResource's examples.
    #[test]
    fn resource_names_are_guessed_as_kube_guesses_them() {
        assert_eq!(guess_resource("Widget"), "widgets");
        assert_eq!(guess_resource("NetworkPolicy"), "networkpolicies");
        assert_eq!(guess_resource("IngressClass"), "ingressclasses");
        assert_eq!(guess_resource(""), "");
    }

    #[test]
    fn byte_sizes_take_binary_units() {
        assert_eq!(parse_bytes("64Mi"), Ok(64 << 20));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("1MB").is_err());
        assert!(parse_bytes("x").is_err());
    }
}
