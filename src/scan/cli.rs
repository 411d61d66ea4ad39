//! The `scan` subcommand: its arguments, the engine it scans with (policies
//! from files or the API; Namespaces, params and CRDs from the cluster),
//! progress on a terminal, Ctrl-C, and the exit status.

use super::discover::{self, Target};
use super::evaluate::{AsOperation, Verdict};
use super::fix::{FixOutcome, Fixer, Owner};
use super::output::{Format, Reporter, SCAN_REPORT_NAME};
use super::{ScanEvent, ScanOptions};
use crate::api::load;
use crate::authorizer::Authorizer;
use crate::engine::{CompiledPolicies, Engine};
use crate::request::UserInfo;
use crate::source::api::{self as api_source, ApiConfig};
use crate::source::SourceKind;
use anyhow::{bail, Context as _, Result};
use arc_swap::ArcSwapOption;
use kube::api::{DynamicObject, ListParams};
use kube::Resource as _;
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What makes `--fail-on` exit 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// An object the policies would change.
    Change,
    /// An object whose admission would be denied.
    Deny,
}

/// `--dry-run` of `--fix`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRun {
    /// Write the changes.
    #[default]
    None,
    /// Send each write as a server-side dry run: validated and admitted by
    /// the API server, never stored.
    Server,
}

/// `kmutate scan`.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// Policy files or folders (with --source files).
    #[arg(long, value_name = "PATH", default_value = "policies")]
    pub policies: Vec<PathBuf>,
    /// Binding files or folders (with --source files).
    #[arg(long, value_name = "PATH", default_value = "bindings")]
    pub bindings: Vec<PathBuf>,
    /// Where policies and bindings come from: files, or the cluster's own
    /// (the served MutatingAdmissionPolicy API, as `serve --source api`).
    /// Namespaces, params and CRDs always come from the cluster.
    #[arg(long, value_enum, default_value = "files")]
    pub source: SourceKind,
    /// The policy API read with --source api (as `serve`'s).
    #[arg(long, value_name = "GROUP/VERSION")]
    pub policy_api_version: Option<String>,
    /// Only objects of this namespace (and no cluster-scoped ones).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Only objects with these labels (a label selector, as kubectl's -l).
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Only these resources (`pods`, `deployments.apps` or a kind;
    /// repeatable or comma-separated).
    #[arg(long = "resource", value_name = "RESOURCE", value_delimiter = ',')]
    pub resources: Vec<String>,
    /// Evaluate each object as the CREATE that would make it again (its
    /// server-set metadata and status cleared), or as an UPDATE that leaves
    /// it as stored.
    #[arg(long = "as", value_enum, default_value = "create")]
    pub operation: AsOperation,
    /// The requesting user of every evaluation (`request.userInfo`, and
    /// whose permissions CEL `authorizer` checks ask about). Default: the
    /// caller, as the API server knows it (SelfSubjectReview).
    #[arg(long, value_name = "USER")]
    pub as_user: Option<String>,
    /// A group of --as-user (repeatable).
    #[arg(long, value_name = "GROUP", requires = "as_user")]
    pub as_group: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
    /// List unchanged objects too.
    #[arg(long)]
    pub show_unchanged: bool,
    /// Write the PolicyReports (`kmutate-scan` in each namespace, a
    /// ClusterPolicyReport for cluster-scoped objects) to the cluster;
    /// needs deploy/crds/policyreports.yaml. A scan of everything replaces
    /// them; a narrowed one (-l, --resource) merges into them.
    #[arg(long)]
    pub write_reports: bool,
    /// Exit 1 when an object would be changed, or denied (repeatable).
    #[arg(long, value_enum, value_name = "WHAT")]
    pub fail_on: Vec<FailOn>,
    /// Write each change back: a JSON patch that first tests the
    /// resourceVersion read (an object written since is read and evaluated
    /// again, up to 3 times; that write is never overwritten).
    #[arg(long)]
    pub fix: bool,
    /// With --fix: `server` sends every write as a server-side dry run.
    #[arg(long, value_enum, default_value = "none", requires = "fix")]
    pub dry_run: DryRun,
    /// With --fix: at most this many writes a second.
    #[arg(long, default_value_t = 20.0, requires = "fix")]
    pub qps: f64,
    /// With --fix: restart (as `kubectl rollout restart`) the Deployments,
    /// StatefulSets and DaemonSets owning objects whose change the API
    /// server refuses in place, so that their new Pods are mutated at
    /// creation.
    #[arg(long, requires = "fix")]
    pub restart_owners: bool,
}

/// Exit status of an interrupted scan (128 + SIGINT).
const INTERRUPTED: u8 = 130;

/// Runs `kmutate scan`.
pub fn scan_cmd(args: ScanArgs) -> Result<ExitCode> {
    if args.source == SourceKind::Both {
        bail!("--source both: a scan reads policies from files or from the API, not both");
    }
    if args.qps.is_nan() || args.qps <= 0.0 {
        bail!("--qps {}: must be more than 0", args.qps);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kmutate-scan")
        .build()
        .context("starting the runtime")?;
    // What cannot be read (the cluster, the policies) is a usage-class
    // failure, told apart from what the scan found.
    match runtime.block_on(run(args)) {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(2))
        }
    }
}

async fn run(args: ScanArgs) -> Result<ExitCode> {
    let client = api_source::client(None)
        .await
        .context("connecting to the cluster")?;
    let user = requesting_user(&client, &args).await;
    let engine = engine(&client, &args).await?;
    for problem in engine.problems() {
        eprintln!("warning: {problem}");
    }
    let set = engine.policy_set();
    let rules = crate::matching::webhook_rules::webhook_rules(set.policies(), set.bindings());
    let served = discover::served(&client)
        .await
        .context("discovering the cluster's resources")?;
    let operation = match args.operation {
        AsOperation::Create => "CREATE",
        AsOperation::Update => "UPDATE",
    };
    let targets = discover::select(&rules, operation, &served, &args.resources);
    if targets.is_empty() {
        eprintln!("no resource the loaded bindings match for {operation} is served");
    }
    let options = ScanOptions {
        operation: args.operation,
        namespace: args.namespace.clone(),
        label_selector: args.selector.clone(),
        user,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let (stop, interrupted) = (stop.clone(), interrupted.clone());
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
            }
        });
    }
    let by_name: BTreeMap<String, Target> = targets.iter().map(|t| (t.name(), t.clone())).collect();
    let (events_tx, mut events) = tokio::sync::mpsc::channel(256);
    let scanner = {
        let (client, engine, options, stop) = (
            client.clone(),
            engine.clone(),
            options.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            super::scan(&client, engine, targets, &options, stop, events_tx).await
        })
    };
    let progress = progress_bar();
    let stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut reporter = Reporter::new(args.output, stdout, args.show_unchanged);
    if args.write_reports {
        reporter = reporter.keeping_reports();
    }
    let mut fixer = args.fix.then(|| {
        Fixer::new(
            client.clone(),
            engine.clone(),
            options.clone(),
            served.clone(),
            args.dry_run == DryRun::Server,
            args.qps,
        )
    });
    let mut owners: BTreeSet<Owner> = BTreeSet::new();
    let mut fix_failures = 0u64;
    while let Some(event) = events.recv().await {
        match event {
            ScanEvent::Listing { resource, estimate } => {
                if let Some(pb) = &progress {
                    pb.inc_length(estimate.unwrap_or(0));
                    pb.set_message(resource);
                }
            }
            ScanEvent::Skipped {
                resource,
                reason,
                forbidden,
            } => {
                if let Some(pb) = &progress {
                    pb.suspend(|| eprintln!("skipped {resource}: {reason}"));
                }
                reporter.skipped(&resource, &reason, forbidden);
            }
            ScanEvent::Object(scanned, stored) => {
                let mut outcome = None;
                if let (Some(fixer), Verdict::Change { patch, .. }) = (&mut fixer, &scanned.verdict)
                {
                    if !patch.0.is_empty() && !stop.load(Ordering::Relaxed) {
                        if let Some(target) = by_name.get(&scanned.resource) {
                            let fixed = fixer.fix(target, &stored, patch).await;
                            match &fixed {
                                FixOutcome::Refused { owner: Some(o), .. } => {
                                    owners.insert(o.clone());
                                }
                                FixOutcome::Conflict { .. } | FixOutcome::Failed { .. } => {
                                    fix_failures += 1
                                }
                                _ => {}
                            }
                            outcome = Some(fixed);
                        }
                    }
                }
                reporter.object(&scanned, outcome.as_ref())?;
                if let Some(pb) = &progress {
                    pb.inc(1);
                }
            }
        }
    }
    let _ = scanner.await;
    if let Some(pb) = &progress {
        pb.finish_and_clear();
    }
    let was_interrupted = interrupted.load(Ordering::SeqCst);
    if let (true, Some(fixer)) = (args.restart_owners && !was_interrupted, &mut fixer) {
        for owner in &owners {
            match fixer.restart(owner).await {
                Ok(()) => eprintln!("restarted {owner}"),
                Err(e) => {
                    fix_failures += 1;
                    eprintln!("not restarted {owner}: {e}");
                }
            }
        }
    } else if !owners.is_empty() {
        let names: Vec<String> = owners.iter().map(ToString::to_string).collect();
        eprintln!(
            "changes refused in place: restart their owners to have them mutated at creation \
             (--restart-owners, or kubectl rollout restart): {}",
            names.join(", ")
        );
    }
    let (summary, reports) = reporter.finish(was_interrupted, &mut std::io::stderr())?;
    if args.write_reports && !was_interrupted {
        let narrowed = args.selector.is_some() || !args.resources.is_empty();
        write_reports(&client, reports, narrowed).await;
    }
    if was_interrupted {
        return Ok(ExitCode::from(INTERRUPTED));
    }
    let failed_on = args.fail_on.iter().any(|f| match f {
        FailOn::Change => summary.would_change > 0,
        FailOn::Deny => summary.would_deny > 0,
    });
    let broken =
        summary.errors > 0 || fix_failures > 0 || summary.skipped.iter().any(|s| !s.forbidden);
    Ok(if failed_on || broken {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Writes each namespace's results as its `kmutate-scan` report.
async fn write_reports(client: &kube::Client, reports: BTreeMap<String, Vec<Json>>, merge: bool) {
    for (namespace, results) in reports {
        let written =
            crate::reports::put_report(client, &namespace, SCAN_REPORT_NAME, results, merge).await;
        let at = if namespace.is_empty() {
            "cluster scope".to_string()
        } else {
            format!("namespace {namespace}")
        };
        match written {
            Ok(()) => eprintln!("PolicyReport {SCAN_REPORT_NAME} written in {at}"),
            Err(e) => eprintln!(
                "PolicyReport {SCAN_REPORT_NAME} in {at} not written: {}",
                super::api_message(&e)
            ),
        }
    }
}

/// A progress bar on a terminal's stderr (none when not a terminal).
fn progress_bar() -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template(
        "{bar:30} {pos}/{len} objects, {per_sec}, {eta} left ({msg})",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    pb.set_style(style);
    pb.enable_steady_tick(Duration::from_millis(200));
    Some(pb)
}

/// The user every evaluation is made as: --as-user, else the caller.
async fn requesting_user(client: &kube::Client, args: &ScanArgs) -> UserInfo {
    if let Some(name) = &args.as_user {
        return UserInfo {
            username: name.clone(),
            groups: args.as_group.clone(),
            ..UserInfo::default()
        };
    }
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    match api
        .create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
    {
        Ok(review) => {
            let info = review.status.and_then(|s| s.user_info).unwrap_or_default();
            UserInfo {
                username: info.username.unwrap_or_default(),
                uid: info.uid.unwrap_or_default(),
                groups: info.groups.unwrap_or_default(),
                extra: info.extra.unwrap_or_default().into_iter().collect(),
            }
        }
        Err(e) => {
            eprintln!(
                "warning: who the caller is is unknown (SelfSubjectReview: {}); evaluating as an anonymous user",
                super::api_message(&e)
            );
            UserInfo::default()
        }
    }
}

/// The engine: policies from the files or the API, cluster objects from
/// the API, `authorizer` checks answered by SubjectAccessReviews.
async fn engine(client: &kube::Client, args: &ScanArgs) -> Result<Arc<Engine>> {
    let authorizer: Arc<dyn Authorizer> =
        Arc::new(crate::source::sar::SubjectAccessReviewAuthorizer::new(
            client.clone(),
            tokio::runtime::Handle::current(),
        ));
    match args.source {
        SourceKind::Api => api_engine(args, authorizer).await,
        _ => files_engine(client, args, authorizer).await.map(Arc::new),
    }
}

/// Policies from the cluster, read as `serve --source api` reads them.
async fn api_engine(args: &ScanArgs, authorizer: Arc<dyn Authorizer>) -> Result<Arc<Engine>> {
    let slot = Arc::new(ArcSwapOption::<Engine>::empty());
    let api = ApiConfig {
        kube: None,
        policy_api_version: args.policy_api_version.clone(),
        subject_access_review: false,
    };
    let mut running = crate::source::start(
        &Default::default(),
        SourceKind::Api,
        &api,
        authorizer,
        slot.clone(),
        None,
        None,
    )
    .await
    .context("reading policies from the cluster")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let engine = loop {
        if let Some(engine) = slot.load_full() {
            break engine;
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the cluster's policies, bindings, Namespaces and params were not read within 60 s"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    running.stop();
    Ok(engine)
}

/// Policies from the files; Namespaces, CRDs and params from the cluster.
async fn files_engine(
    client: &kube::Client,
    args: &ScanArgs,
    authorizer: Arc<dyn Authorizer>,
) -> Result<Engine> {
    let loaded = load::load_definitions(&args.policies, &args.bindings);
    let problems: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
    if loaded.policies.is_empty() {
        bail!(
            "no policy loaded from {}",
            args.policies
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let param_kinds: BTreeSet<(String, String)> = loaded
        .policies
        .iter()
        .filter(|p| {
            loaded
                .bindings
                .iter()
                .any(|b| b.policy_name == p.name && b.param_ref.is_some())
        })
        .filter_map(|p| p.param_kind.as_ref())
        .map(|k| (k.api_version.clone(), k.kind.clone()))
        .collect();
    let compiled = CompiledPolicies::compile(loaded.policies, loaded.bindings, problems);
    let mut objects = list_all(client, "v1", "Namespace", true).await?;
    objects.extend(
        list_all(
            client,
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            false,
        )
        .await?,
    );
    for (api_version, kind) in &param_kinds {
        objects.extend(list_all(client, api_version, kind, false).await?);
    }
    Ok(Engine::assemble(
        Arc::new(compiled),
        objects.into_iter().map(Arc::new),
        authorizer,
    ))
}

/// Every object of `kind`; a kind the server does not serve, or the caller
/// may not list, gives none (with a warning) unless `required`.
async fn list_all(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    required: bool,
) -> Result<Vec<Json>> {
    let resource = match api_source::discover_resource(client, api_version, kind).await {
        Ok(Some(r)) => r,
        Ok(None) if !required => {
            eprintln!("warning: the server does not serve {api_version} {kind}");
            return Ok(Vec::new());
        }
        Ok(None) => bail!("the server does not serve {api_version} {kind}"),
        Err(e) => bail!(
            "discovering {api_version} {kind}: {}",
            super::api_message(&e)
        ),
    };
    let path = DynamicObject::url_path(&resource, None);
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(super::PAGE_SIZE);
    loop {
        let mut page = match super::list_page(client, &path, &params).await {
            Ok(page) => page,
            Err(e) if !required => {
                eprintln!(
                    "warning: {kind} objects not read: {}",
                    super::api_message(&e)
                );
                return Ok(out);
            }
            Err(e) => bail!("listing {kind} objects: {}", super::api_message(&e)),
        };
        out.extend(super::typed_items(&mut page, &resource));
        match super::continue_token(&page) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok(out),
        }
    }
}
