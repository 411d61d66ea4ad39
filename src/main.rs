//! The `kmutate` command line: a thin layer over the library.

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use kmutate::api::load;
use kmutate::authorizer::{AlwaysAllow, AlwaysDeny, Authorizer, FixedAuthorizer};
use kmutate::conformance;
use kmutate::dispatch::{AdmissionContext, Outcome, PolicySet};
use kmutate::matching::{complete_request, ResourceTable};
use kmutate::request::{AdmissionRequest, ClusterObjects, UserInfo};
use kmutate::schema::SchemaStore;
use std::path::PathBuf;
use std::process::ExitCode;

/// Kubernetes MutatingAdmissionPolicy evaluator.
#[derive(Parser)]
#[command(name = "kmutate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate policies against an object offline and print the result.
    Apply(ApplyArgs),
    /// Run conformance cases (files or folders of YAML cases).
    Conformance(ConformanceArgs),
    /// Time the in-process admission of one conformance case.
    Bench(BenchArgs),
    /// Load and compile policies and bindings; report every problem.
    Check(CheckArgs),
    /// Serve the admission webhook (HTTPS POST /mutate, GET /metrics).
    Serve(kmutate::webhook::cli::ServeArgs),
    /// Drive a webhook with a recorded AdmissionReview; report throughput and latency.
    Loadtest(kmutate::webhook::cli::LoadtestArgs),
    /// Translate declarative mutation rules (Katalog, Capsule) to policies and bindings.
    Translate(kmutate::translate::cli::TranslateArgs),
}

#[derive(clap::Args)]
struct ApplyArgs {
    /// Policy files or folders.
    #[arg(long, required = true)]
    policies: Vec<PathBuf>,
    /// Binding files or folders.
    #[arg(long, required = true)]
    bindings: Vec<PathBuf>,
    /// Cluster objects: Namespaces, params, CRDs.
    #[arg(long)]
    resources: Vec<PathBuf>,
    /// The incoming object (YAML or JSON).
    #[arg(short = 'f', long = "filename")]
    object: PathBuf,
    /// The existing object, for UPDATE.
    #[arg(long)]
    old_object: Option<PathBuf>,
    /// The operation.
    #[arg(long, default_value = "CREATE", value_parser = ["CREATE", "UPDATE", "CONNECT"])]
    operation: String,
    /// The requesting user.
    #[arg(long, default_value = "")]
    user: String,
    /// Groups of the requesting user.
    #[arg(long = "group")]
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
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "yaml")]
    output: OutputFormat,
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
}

#[derive(clap::Args)]
struct ConformanceArgs {
    /// Case files or folders.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// File listing cases expected to fail (default: conformance/expected-failures.txt when present).
    #[arg(long)]
    expected_failures: Option<PathBuf>,
    /// Print the failure details of expected failures too.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// A conformance case file.
    file: PathBuf,
    /// The case to run (default: the first).
    #[arg(long)]
    case: Option<String>,
    /// Iterations.
    #[arg(long, default_value_t = 10_000)]
    iterations: u64,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Policy and binding files or folders.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Apply(a) => apply(a),
        Command::Conformance(c) => conformance_cmd(c),
        Command::Bench(b) => bench(b),
        Command::Check(c) => check(c),
        Command::Serve(s) => kmutate::webhook::cli::serve(s),
        Command::Loadtest(l) => kmutate::webhook::cli::loadtest_cmd(l),
        Command::Translate(t) => kmutate::translate::cli::translate_cmd(t),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn read_object(path: &PathBuf) -> Result<serde_json::Value> {
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
    let object = docs.remove(0);
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
    let mut loaded = load::load_paths(&a.policies);
    let bindings = load::load_paths(&a.bindings);
    let resources = load::load_paths(&a.resources);
    loaded.bindings.extend(bindings.bindings);
    loaded.policies.extend(bindings.policies);
    let mut problems: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
    problems.extend(
        bindings
            .errors
            .iter()
            .chain(&resources.errors)
            .map(ToString::to_string),
    );
    for p in &problems {
        eprintln!("warning: {p}");
    }
    let object = read_object(&a.object)?;
    let old_object = a.old_object.as_ref().map(read_object).transpose()?;
    let cluster = ClusterObjects::new(resources.resources);
    let table = ResourceTable::new(cluster.crds());
    let schemas = SchemaStore::with_crds(cluster.crds());
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
    let (set, errors) = PolicySet::new(loaded.policies, loaded.bindings);
    for e in &errors {
        eprintln!("warning: {e}");
    }
    let authorizer: Box<dyn Authorizer> = match &a.authorizer {
        Some(path) => Box::new(
            FixedAuthorizer::from_json(&read_object(path)?)
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
    match set.admit(&request, &ctx) {
        Outcome::Denied { message, .. } => {
            eprintln!("denied: {message}");
            Ok(ExitCode::from(1))
        }
        Outcome::Admitted { object: result, .. } => {
            match a.output {
                OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&result)?),
                OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(&result)?),
                OutputFormat::Patch => {
                    let patch = json_patch::diff(&object, &result);
                    println!("{}", serde_json::to_string_pretty(&patch)?)
                }
                OutputFormat::Diff => {
                    let before = serde_saphyr::to_string(&object)?;
                    let after = serde_saphyr::to_string(&result)?;
                    print!("{}", line_diff(&before, &after));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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
    let list = c
        .expected_failures
        .clone()
        .unwrap_or_else(|| PathBuf::from("conformance/expected-failures.txt"));
    let expected = conformance::read_expected_failures(&list);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let summary = conformance::run_all(&c.paths, &expected, c.verbose, &mut out)?;
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
    let mut problems: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
    let known: std::collections::BTreeSet<&str> =
        loaded.policies.iter().map(|p| p.name.as_str()).collect();
    for b in &loaded.bindings {
        if !known.contains(b.policy_name.as_str()) {
            problems.push(format!(
                "{}: binding {:?} refers to policy {:?}, which is not among the loaded policies",
                b.source, b.name, b.policy_name
            ));
        }
    }
    let sources: Vec<(String, String)> = loaded
        .policies
        .iter()
        .map(|p| (p.name.clone(), p.source.to_string()))
        .collect();
    let (_set, errors) = PolicySet::new(loaded.policies.clone(), loaded.bindings.clone());
    for e in errors {
        let at = sources
            .iter()
            .find(|(n, _)| *n == e.policy)
            .map(|(_, s)| s.as_str())
            .unwrap_or("");
        problems.push(format!("{at}: {e}"));
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
