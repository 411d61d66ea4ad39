//! Where `kmutate serve` gets its policies, bindings and cluster objects,
//! and how it keeps them current.
//!
//! Each source (the policy files, the Kubernetes API) keeps a [`Snapshot`]
//! of what it holds and pokes a shared [`Notify`] when it changes; the
//! [`Assembler`] then waits a moment for the burst to settle, builds a new
//! [`Engine`] from every source's snapshot and swaps it in whole, so that a
//! request sees either the old configuration or the new one, never half of
//! an update. Policies are recompiled only when a source's policies or
//! bindings changed; a change of params or Namespaces reuses them.
//!
//! - [`files`]: the `--policies`, `--bindings` and `--resources` files,
//!   re-read when they change;
//! - [`api`]: policies, bindings, params and Namespaces watched through
//!   the Kubernetes API;
//! - [`store`]: the watched objects of one resource;
//! - [`report`]: status conditions and Events on policies kmutate skips;
//! - [`sar`]: CEL `authorizer` checks answered by SubjectAccessReviews.

pub mod api;
pub mod files;
pub mod report;
pub mod sar;
pub mod store;

use crate::api::Binding;
use crate::authorizer::Authorizer;
use crate::dispatch::CompiledPolicy;
use crate::engine::{CompiledPolicies, Engine, EngineSources, LiveNamespaces, LoadObserver};
use arc_swap::ArcSwapOption;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long the assembler waits after a change for more before rebuilding:
/// the events of one save or one `kubectl apply` come within a few
/// milliseconds, and a change should take effect within 100 ms.
pub const DEBOUNCE: Duration = Duration::from_millis(10);

/// Where `kmutate serve` reads policies and bindings from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceKind {
    /// The `--policies`, `--bindings` and `--resources` files, watched.
    #[default]
    Files,
    /// The Kubernetes API (watches).
    Api,
    /// Both: the files' policies and the API's together.
    Both,
}

/// The policies and bindings a source holds, with the problems found
/// reading them. A source compiles each policy once, when it reads it, and
/// makes a new `PolicyInputs` whenever something changes, so that pointer
/// equality tells the assembler whether to rebuild the set at all.
#[derive(Debug, Default)]
pub struct PolicyInputs {
    /// The policies, compiled (each with its compile errors).
    pub policies: Vec<Arc<CompiledPolicy>>,
    /// The bindings.
    pub bindings: Vec<Binding>,
    /// What went wrong reading them (one line each).
    pub problems: Vec<String>,
}

/// What a source holds at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Policies and bindings.
    pub policies: Arc<PolicyInputs>,
    /// Cluster objects: Namespaces, params, CRDs.
    pub objects: Vec<Arc<Value>>,
}

/// A source of policies, bindings and cluster objects.
pub trait Source: Send + Sync {
    /// What the source holds now; `None` until its first full sync.
    fn snapshot(&self) -> Option<Snapshot>;
}

/// Told of each policy set the assembler publishes, before and after: the
/// webhook registration ([`crate::registration`]) must send kube-apiserver's
/// requests for a policy to kmutate before kmutate says the policy is in
/// force, and may stop only after kmutate stopped serving it.
pub trait PublishGate: Send + Sync {
    /// Returns once `engine` may be published.
    fn before_publish<'a>(
        &'a self,
        engine: &'a Engine,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
    /// `engine` is the one served now.
    fn published(&self, engine: &Engine);
}

/// Builds engines from the sources' snapshots and publishes them.
pub struct Assembler {
    sources: Vec<Arc<dyn Source>>,
    changed: Arc<Notify>,
    authorizer: Arc<dyn Authorizer>,
    slot: Arc<ArcSwapOption<Engine>>,
    metrics: Option<Arc<dyn LoadObserver>>,
    live_namespaces: Option<Arc<dyn LiveNamespaces>>,
    gate: Option<Arc<dyn PublishGate>>,
}

impl std::fmt::Debug for Assembler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembler")
            .field("sources", &self.sources.len())
            .finish_non_exhaustive()
    }
}

/// The compiled policies of the last build, and what they were built from.
struct LastBuild {
    inputs: Vec<Arc<PolicyInputs>>,
    compiled: Arc<CompiledPolicies>,
}

impl Assembler {
    /// An assembler of `sources`, which poke `changed`, publishing into `slot`.
    pub fn new(
        sources: Vec<Arc<dyn Source>>,
        changed: Arc<Notify>,
        authorizer: Arc<dyn Authorizer>,
        slot: Arc<ArcSwapOption<Engine>>,
        metrics: Option<Arc<dyn LoadObserver>>,
    ) -> Assembler {
        Assembler {
            sources,
            changed,
            authorizer,
            slot,
            metrics,
            live_namespaces: None,
            gate: None,
        }
    }

    /// Engines are published through `gate`.
    pub fn with_gate(mut self, gate: Arc<dyn PublishGate>) -> Assembler {
        self.gate = Some(gate);
        self
    }

    /// Engines built read the Namespaces they do not hold from `live`.
    pub fn with_live_namespaces(mut self, live: Arc<dyn LiveNamespaces>) -> Assembler {
        self.live_namespaces = Some(live);
        self
    }

    /// Rebuilds after every change, forever (the task is aborted at shutdown).
    pub async fn run(self) {
        let mut last: Option<LastBuild> = None;
        let mut reported: BTreeSet<String> = BTreeSet::new();
        loop {
            self.changed.notified().await;
            tokio::time::sleep(DEBOUNCE).await;
            let Some(snapshots) = self
                .sources
                .iter()
                .map(|s| s.snapshot())
                .collect::<Option<Vec<Snapshot>>>()
            else {
                continue;
            };
            let started = Instant::now();
            tracing::debug!("rebuilding the policy set");
            let inputs: Vec<Arc<PolicyInputs>> =
                snapshots.iter().map(|s| s.policies.clone()).collect();
            let reuse = last.as_ref().filter(|l| {
                l.inputs.len() == inputs.len()
                    && l.inputs.iter().zip(&inputs).all(|(a, b)| Arc::ptr_eq(a, b))
            });
            let previous = reuse.map(|l| l.compiled.clone());
            let authorizer = self.authorizer.clone();
            let engine_before = self.slot.load_full();
            let live = self.live_namespaces.clone();
            let build = tokio::task::spawn_blocking(move || {
                let compiled = previous.unwrap_or_else(|| Arc::new(assemble(&inputs)));
                let objects = snapshots.into_iter().flat_map(|s| s.objects).collect();
                let mut engine =
                    Engine::reassemble(compiled, objects, authorizer, engine_before.as_deref());
                if let Some(live) = live {
                    engine = engine.with_live_namespaces(live);
                }
                (engine, inputs)
            })
            .await;
            let Ok((engine, inputs)) = build else {
                tracing::error!("building the policy set failed");
                continue;
            };
            let recompiled = last
                .as_ref()
                .is_none_or(|l| !Arc::ptr_eq(&l.compiled, engine.compiled()));
            if recompiled {
                let now: BTreeSet<String> = engine.problems().iter().cloned().collect();
                for p in now.difference(&reported) {
                    tracing::warn!(problem = %p, "policy load problem");
                }
                reported = now;
            }
            let engine = Arc::new(engine);
            last = Some(LastBuild {
                inputs,
                compiled: engine.compiled().clone(),
            });
            if let Some(gate) = &self.gate {
                gate.before_publish(&engine).await;
            }
            // Published before it is logged and counted: whoever reads the
            // log line or the metric finds the new set in force.
            self.slot.store(Some(engine.clone()));
            if let Some(gate) = &self.gate {
                gate.published(&engine);
            }
            if let Some(m) = &self.metrics {
                m.loaded(
                    engine.policies(),
                    engine.bindings(),
                    engine.problems().len(),
                );
            }
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let (policies, bindings) = (engine.policies(), engine.bindings());
            let (objects, problems) = (engine.cluster().len(), engine.problems().len());
            if recompiled {
                tracing::info!(
                    policies,
                    bindings,
                    objects,
                    problems,
                    elapsed_ms,
                    "policies loaded"
                );
            } else {
                // Params or Namespaces changed: frequent, so quieter.
                tracing::debug!(
                    policies,
                    bindings,
                    objects,
                    problems,
                    elapsed_ms,
                    "cluster objects reloaded"
                );
            }
        }
    }
}

/// The compiled policies and bindings of every source, together.
fn assemble(inputs: &[Arc<PolicyInputs>]) -> CompiledPolicies {
    let mut policies = Vec::new();
    let mut bindings = Vec::new();
    let mut problems = Vec::new();
    for i in inputs {
        policies.extend(i.policies.iter().cloned());
        bindings.extend(i.bindings.iter().cloned());
        problems.extend(i.problems.iter().cloned());
    }
    CompiledPolicies::assemble(policies, bindings, problems)
}

/// The running sources' tasks; dropping it (or [`Running::stop`]) stops them.
#[derive(Debug, Default)]
pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    api: Option<Arc<api::ApiSource>>,
}

impl Running {
    /// Stops every task.
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        if let Some(api) = self.api.take() {
            api.stop();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the sources `kind` names and the assembler publishing into
/// `slot` (which stays empty until every source has synced once).
pub async fn start(
    files: &EngineSources,
    kind: SourceKind,
    api: &api::ApiConfig,
    authorizer: Arc<dyn Authorizer>,
    slot: Arc<ArcSwapOption<Engine>>,
    metrics: Option<Arc<dyn LoadObserver>>,
    gate: Option<Arc<dyn PublishGate>>,
) -> Result<Running, SourceError> {
    let changed = Arc::new(Notify::new());
    let mut running = Running::default();
    let mut sources: Vec<Arc<dyn Source>> = Vec::new();
    let mut authorizer = authorizer;
    if matches!(kind, SourceKind::Files | SourceKind::Both) {
        let source = Arc::new(files::FileSource::new(files));
        sources.push(source.clone());
        let changed = changed.clone();
        running.tasks.push(tokio::spawn(async move {
            let first = source.clone();
            let _ = tokio::task::spawn_blocking(move || first.scan()).await;
            changed.notify_one();
            source.watch(files::POLL_INTERVAL, changed).await;
        }));
    }
    let mut live_namespaces: Option<Arc<dyn LiveNamespaces>> = None;
    if matches!(kind, SourceKind::Api | SourceKind::Both) {
        let client = api::client(api.kube.clone()).await?;
        live_namespaces = Some(Arc::new(api::NamespaceReader::new(client.clone())));
        let source = Arc::new(api::ApiSource::new(
            client.clone(),
            changed.clone(),
            api.policy_api_version.clone(),
        )?);
        source.start();
        sources.push(source.clone());
        running.api = Some(source);
        if api.subject_access_review {
            authorizer = Arc::new(sar::SubjectAccessReviewAuthorizer::new(
                client,
                tokio::runtime::Handle::current(),
            ));
        }
    }
    let mut assembler = Assembler::new(sources, changed, authorizer, slot, metrics);
    if let Some(live) = live_namespaces {
        assembler = assembler.with_live_namespaces(live);
    }
    if let Some(gate) = gate {
        assembler = assembler.with_gate(gate);
    }
    running.tasks.push(tokio::spawn(assembler.run()));
    Ok(running)
}

/// A source that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The API source cannot start.
    #[error(transparent)]
    Api(#[from] api::ApiError),
}
