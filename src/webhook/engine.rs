//! What the webhook evaluates requests with: the compiled policies and
//! bindings, the cluster objects (Namespaces, params, CRDs), the resource
//! table, the schemas and the authorizer of CEL `authorizer` checks.

use crate::api::load;
use crate::authorizer::Authorizer;
use crate::dispatch::{AdmissionContext, AdmissionObserver, MatchedBinding, Outcome, PolicySet};
use crate::matching::ResourceTable;
use crate::request::{AdmissionRequest, ClusterObjects};
use crate::schema::SchemaStore;
use std::path::PathBuf;

/// The loaded policy configuration, shared by every request.
pub struct Engine {
    set: PolicySet,
    cluster: ClusterObjects,
    table: ResourceTable,
    schemas: SchemaStore,
    authorizer: Box<dyn Authorizer>,
    policies: usize,
    bindings: usize,
    problems: Vec<String>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("policies", &self.policies)
            .field("bindings", &self.bindings)
            .field("problems", &self.problems.len())
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

impl Engine {
    /// Loads and compiles everything `sources` names. Problems (unreadable
    /// files, invalid documents, compile errors, bindings of missing
    /// policies) are kept in [`Engine::problems`]; what loads is served.
    pub fn load(sources: &EngineSources, authorizer: Box<dyn Authorizer>) -> Engine {
        let mut loaded = load::load_paths(&sources.policies);
        let bindings = load::load_paths(&sources.bindings);
        let resources = load::load_paths(&sources.resources);
        loaded.absorb_definitions(bindings.policies, bindings.bindings);
        let mut problems: Vec<String> = loaded
            .errors
            .iter()
            .chain(&bindings.errors)
            .chain(&resources.errors)
            .map(ToString::to_string)
            .collect();
        for b in &loaded.bindings {
            if !loaded.policies.iter().any(|p| p.name == b.policy_name) {
                problems.push(format!(
                    "{}: binding {:?} refers to policy {:?}, which is not loaded",
                    b.source, b.name, b.policy_name
                ));
            }
        }
        let cluster = ClusterObjects::new(resources.resources);
        let table = ResourceTable::new(cluster.crds());
        let schemas = SchemaStore::with_crds(cluster.crds());
        for p in &loaded.policies {
            // Schema-aware field warnings never refuse a policy: logged only.
            for w in crate::cel::field_warnings::policy_field_warnings(p, &table, &schemas) {
                tracing::warn!(source = %p.source, warning = %w, "policy field warning");
            }
        }
        let policies = loaded.policies.len();
        let bindings = loaded.bindings.len();
        let (set, errors) = PolicySet::new(loaded.policies, loaded.bindings);
        problems.extend(errors.iter().map(ToString::to_string));
        Engine {
            set,
            cluster,
            table,
            schemas,
            authorizer,
            policies,
            bindings,
            problems,
        }
    }

    /// Number of policies loaded.
    pub fn policies(&self) -> usize {
        self.policies
    }

    /// Number of bindings loaded.
    pub fn bindings(&self) -> usize {
        self.bindings
    }

    /// What went wrong while loading.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }

    /// The resource table (to complete partial requests).
    pub fn resources(&self) -> &ResourceTable {
        &self.table
    }

    fn context(&self) -> AdmissionContext<'_> {
        AdmissionContext {
            cluster: &self.cluster,
            schemas: &self.schemas,
            resources: &self.table,
            authorizer: self.authorizer.as_ref(),
        }
    }

    /// The bindings that act on `request`, in dispatch order, found by
    /// matching alone (no CEL): empty means the request passes unchanged.
    pub fn matching(&self, request: &AdmissionRequest) -> Vec<MatchedBinding<'_>> {
        self.set.matching_bindings(request, &self.context())
    }

    /// Runs the admission of `request`, telling `observer` about each
    /// mutation and policy error.
    pub fn admit(&self, request: &AdmissionRequest, observer: &dyn AdmissionObserver) -> Outcome {
        self.set.admit_with(request, &self.context(), observer)
    }
}
