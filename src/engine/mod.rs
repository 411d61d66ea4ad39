//! The policy engine: what requests are evaluated with, the compiled policies and
//! bindings, the cluster objects (Namespaces, params, CRDs), the resource
//! table, the schemas and the authorizer of CEL `authorizer` checks.

use crate::api::load;
use crate::api::{Binding, Policy};
use crate::authorizer::Authorizer;
use crate::cel::CelEnvironment;
use crate::dispatch::{
    compile_policies, AdmissionContext, AdmissionObserver, CompiledPolicy, MatchedBinding,
    ObjectOrigin, Outcome, PolicySet, Prematch,
};
use crate::matching::ResourceTable;
use crate::mutation::diff::Snapshot;
use crate::request::{is_crd, AdmissionRequest, ClusterObjects};
use crate::schema::SchemaStore;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

/// The loaded policy configuration, shared by every request. A new one is
/// built whenever a source changes and swapped in whole.
pub struct Engine {
    compiled: Arc<CompiledPolicies>,
    cluster: ClusterObjects,
    crds: Arc<CrdTables>,
    authorizer: Arc<dyn Authorizer>,
    live_namespaces: Option<Arc<dyn LiveNamespaces>>,
}

/// Told the size and problems of every policy set a source builds (the
/// webhook's metrics are one).
pub trait LoadObserver: Send + Sync {
    /// A new set is in force: `policies` and `bindings` loaded, with
    /// `problems` found reading and compiling them.
    fn loaded(&self, policies: usize, bindings: usize, problems: usize);
}

/// Namespaces read live from the API server, for a request whose Namespace
/// the watch has not delivered yet (created a moment ago): upstream's
/// namespace matcher falls back to a GET on a cache miss too.
pub trait LiveNamespaces: Send + Sync {
    /// The Namespace `name` (`None`: it does not exist), or why it could
    /// not be read.
    fn get(
        &self,
        name: &str,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Option<serde_json::Value>, String>> + Send + '_,
        >,
    >;
}

/// What the CRDs give: the resource table and the schemas, with the CRD
/// objects they were built from (to reuse them while those stay the same).
struct CrdTables {
    sources: Vec<Arc<serde_json::Value>>,
    crds: Arc<Vec<serde_json::Value>>,
    table: ResourceTable,
    schemas: SchemaStore,
}

impl CrdTables {
    fn new(sources: Vec<Arc<serde_json::Value>>) -> CrdTables {
        let crds: Vec<serde_json::Value> = sources.iter().map(|c| (**c).clone()).collect();
        CrdTables {
            table: ResourceTable::new(&crds),
            schemas: SchemaStore::with_crds(&crds),
            crds: Arc::new(crds),
            sources,
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("policies", &self.compiled.policies)
            .field("bindings", &self.compiled.bindings)
            .field("problems", &self.compiled.problems.len())
            .field("objects", &self.cluster.len())
            .finish()
    }
}

/// Where an [`Engine`] reads its configuration.
#[derive(Clone, Debug, Default)]
pub struct EngineSources {
    /// Policy files or folders (a folder may hold bindings too).
    pub policies: Vec<PathBuf>,
    /// Binding files or folders.
    pub bindings: Vec<PathBuf>,
    /// Cluster objects: Namespaces, params, CRDs.
    pub resources: Vec<PathBuf>,
}

impl EngineSources {
    /// The `policies/`, `bindings/` and `resources/` folders under `dir`.
    pub fn under(dir: &std::path::Path) -> EngineSources {
        EngineSources {
            policies: vec![dir.join("policies")],
            bindings: vec![dir.join("bindings")],
            resources: vec![dir.join("resources")],
        }
    }
}

/// Policies and bindings compiled into a [`PolicySet`], with the problems
/// found reading and compiling them; kept apart from the cluster objects so
/// that a change of params or Namespaces does not recompile anything.
#[derive(Debug)]
pub struct CompiledPolicies {
    set: PolicySet,
    policies: usize,
    bindings: usize,
    problems: Vec<String>,
}

impl CompiledPolicies {
    /// Compiles `policies` with `bindings`; `problems` (found while reading
    /// them) are kept, and to them are added bindings of missing policies
    /// and compile errors (such a policy still loads and fails when
    /// invoked, subject to its failure policy, as upstream's does).
    pub fn compile(policies: Vec<Policy>, bindings: Vec<Binding>, problems: Vec<String>) -> Self {
        let compiled = compile_policies(&CelEnvironment::shared(), policies)
            .into_iter()
            .map(|(c, _)| Arc::new(c))
            .collect();
        CompiledPolicies::assemble(compiled, bindings, problems)
    }

    /// [`CompiledPolicies::compile`] of policies a source compiled already
    /// (each with its compile errors): nothing is compiled again.
    pub fn assemble(
        policies: Vec<Arc<CompiledPolicy>>,
        bindings: Vec<Binding>,
        problems: Vec<String>,
    ) -> Self {
        let mut problems = problems;
        let names: HashSet<&str> = policies.iter().map(|p| p.policy.name.as_str()).collect();
        for b in &bindings {
            if !names.contains(b.policy_name.as_str()) {
                problems.push(format!(
                    "{}: binding {:?} refers to policy {:?}, which is not loaded",
                    b.source, b.name, b.policy_name
                ));
            }
        }
        drop(names);
        problems.extend(
            policies
                .iter()
                .flat_map(|p| p.compile_errors())
                .map(ToString::to_string),
        );
        let counts = (policies.len(), bindings.len());
        CompiledPolicies {
            set: PolicySet::assemble(policies, bindings),
            policies: counts.0,
            bindings: counts.1,
            problems,
        }
    }

    /// What went wrong while reading and compiling.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl Engine {
    /// Loads and compiles everything `sources` names. Problems (unreadable
    /// files, invalid documents, compile errors, bindings of missing
    /// policies) are kept in [`Engine::problems`]; what loads is served.
    pub fn load(sources: &EngineSources, authorizer: Box<dyn Authorizer>) -> Engine {
        let loaded = load::load_definitions(&sources.policies, &sources.bindings);
        let resources = load::load_paths(&sources.resources);
        let problems: Vec<String> = loaded
            .errors
            .iter()
            .chain(&resources.errors)
            .map(ToString::to_string)
            .collect();
        let compiled = CompiledPolicies::compile(loaded.policies, loaded.bindings, problems);
        Engine::assemble(
            Arc::new(compiled),
            resources.resources.into_iter().map(Arc::new),
            Arc::from(authorizer),
        )
    }

    /// An engine of compiled policies and cluster objects (Namespaces,
    /// params, CRDs).
    pub fn assemble(
        compiled: Arc<CompiledPolicies>,
        objects: impl IntoIterator<Item = Arc<serde_json::Value>>,
        authorizer: Arc<dyn Authorizer>,
    ) -> Engine {
        Engine::reassemble(compiled, objects.into_iter().collect(), authorizer, None)
    }

    /// [`Engine::assemble`], reusing the resource table and schemas of
    /// `previous` when the CRDs are the same objects.
    pub fn reassemble(
        compiled: Arc<CompiledPolicies>,
        objects: Vec<Arc<serde_json::Value>>,
        authorizer: Arc<dyn Authorizer>,
        previous: Option<&Engine>,
    ) -> Engine {
        let crd_sources: Vec<Arc<serde_json::Value>> =
            objects.iter().filter(|o| is_crd(o)).cloned().collect();
        let crds = match previous {
            Some(p)
                if p.crds.sources.len() == crd_sources.len()
                    && p.crds
                        .sources
                        .iter()
                        .zip(&crd_sources)
                        .all(|(a, b)| Arc::ptr_eq(a, b)) =>
            {
                p.crds.clone()
            }
            _ => Arc::new(CrdTables::new(crd_sources)),
        };
        let unchanged = previous
            .is_some_and(|p| Arc::ptr_eq(&p.compiled, &compiled) && Arc::ptr_eq(&p.crds, &crds));
        if !unchanged {
            // Warned once per compiled policy (and again for all when the
            // CRDs change): an update of one of thousands warns about one.
            let warned: HashSet<*const CompiledPolicy> = previous
                .filter(|p| Arc::ptr_eq(&p.crds, &crds))
                .map(|p| {
                    let set = p.compiled.set.compiled_policies();
                    set.iter().map(Arc::as_ptr).collect()
                })
                .unwrap_or_default();
            let fresh = compiled
                .set
                .compiled_policies()
                .iter()
                .filter(|c| !warned.contains(&Arc::as_ptr(c)))
                .map(|c| &c.policy);
            // Schema-aware field warnings never refuse a policy: logged only.
            for policy in fresh {
                for w in crate::cel::field_warnings::policy_field_warnings(
                    policy,
                    &crds.table,
                    &crds.schemas,
                ) {
                    tracing::warn!(source = %policy.source, warning = %w, "policy field warning");
                }
            }
        }
        let cluster = ClusterObjects::from_shared_with_crds(objects, crds.crds.clone());
        Engine {
            compiled,
            cluster,
            crds,
            authorizer,
            live_namespaces: None,
        }
    }

    /// This engine reading Namespaces it does not hold from `live`.
    pub fn with_live_namespaces(mut self, live: Arc<dyn LiveNamespaces>) -> Engine {
        self.live_namespaces = Some(live);
        self
    }

    /// Where Namespaces the engine does not hold are read, if anywhere.
    pub fn live_namespaces(&self) -> Option<&Arc<dyn LiveNamespaces>> {
        self.live_namespaces.as_ref()
    }

    /// The same engine with `namespace` among its cluster objects, for one
    /// request (the watch delivers it to the next engine).
    pub fn with_namespace(&self, namespace: serde_json::Value) -> Engine {
        let mut cluster = self.cluster.clone();
        cluster.insert(namespace);
        Engine {
            compiled: self.compiled.clone(),
            cluster,
            crds: self.crds.clone(),
            authorizer: self.authorizer.clone(),
            live_namespaces: None,
        }
    }

    /// The compiled policies (to reuse when only cluster objects change).
    pub fn compiled(&self) -> &Arc<CompiledPolicies> {
        &self.compiled
    }

    /// The cluster objects (Namespaces, params, CRDs).
    pub fn cluster(&self) -> &ClusterObjects {
        &self.cluster
    }

    /// Number of policies loaded.
    pub fn policies(&self) -> usize {
        self.compiled.policies
    }

    /// Number of bindings loaded.
    pub fn bindings(&self) -> usize {
        self.compiled.bindings
    }

    /// What went wrong while loading.
    pub fn problems(&self) -> &[String] {
        &self.compiled.problems
    }

    /// Whether an evaluation may wait on the network (its authorizer asks
    /// the API server), and so belongs on a thread that may block.
    pub fn may_block(&self) -> bool {
        self.authorizer.may_block()
    }

    /// Whether an admission may read the request's `oldObject` (see
    /// [`crate::dispatch::PolicySet::reads_old_object`]).
    pub fn reads_old_object(&self) -> bool {
        self.compiled.set.reads_old_object()
    }

    /// The resource table (to complete partial requests).
    pub fn resources(&self) -> &ResourceTable {
        &self.crds.table
    }

    /// What an admission on this engine is given besides its request.
    pub fn context(&self) -> AdmissionContext<'_> {
        AdmissionContext {
            cluster: &self.cluster,
            schemas: &self.crds.schemas,
            resources: &self.crds.table,
            authorizer: self.authorizer.as_ref(),
        }
    }

    /// The compiled policies and bindings.
    pub fn policy_set(&self) -> &PolicySet {
        &self.compiled.set
    }

    /// `request` matched against every binding, by matching alone (no CEL),
    /// for [`Engine::matched`] and then [`Engine::admit_prematched`].
    pub fn prematch(&self, request: &AdmissionRequest) -> Prematch {
        self.compiled.set.prematch(request, &self.context())
    }

    /// The bindings that act on the request `prematch` was made for, in
    /// dispatch order: empty means the request passes unchanged.
    pub fn matched(&self, prematch: &Prematch) -> Vec<MatchedBinding<'_>> {
        self.compiled.set.matched(prematch)
    }

    /// Runs the admission of `request`, telling `observer` about each
    /// mutation and policy error.
    pub fn admit(&self, request: &AdmissionRequest, observer: &dyn AdmissionObserver) -> Outcome {
        self.compiled
            .set
            .admit_with(request, &self.context(), observer)
    }

    /// [`Engine::admit`] on a request given up to it, with the snapshot of
    /// its object that the answer's patch is computed from: the object is
    /// mutated in place, not copied. No snapshot is taken when nothing was
    /// written to the object (see [`PolicySet::admit_keeping_original`]).
    ///
    /// [`PolicySet::admit_keeping_original`]: crate::dispatch::PolicySet::admit_keeping_original
    pub fn admit_owned(
        &self,
        request: AdmissionRequest,
        observer: &dyn AdmissionObserver,
        origin: ObjectOrigin,
    ) -> (Outcome, Option<Snapshot>) {
        self.admit_prematched(request, None, observer, origin)
    }

    /// [`Engine::admit_owned`], reusing the matching of `prematch` (made by
    /// [`Engine::prematch`] for this request on this engine).
    pub fn admit_prematched(
        &self,
        request: AdmissionRequest,
        prematch: Option<Prematch>,
        observer: &dyn AdmissionObserver,
        origin: ObjectOrigin,
    ) -> (Outcome, Option<Snapshot>) {
        self.compiled.set.admit_keeping_original(
            request,
            prematch,
            &self.context(),
            observer,
            origin,
        )
    }
}
