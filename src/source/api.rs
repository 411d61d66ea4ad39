//! The Kubernetes API source: MutatingAdmissionPolicies and their bindings
//! (`admissionregistration.k8s.io` v1, v1beta1 or v1alpha1, or kmutate's
//! own CRDs in `kmutate.dev/v1`), the param objects of every `paramKind`
//! in use, Namespaces and CustomResourceDefinitions (whose schemas serve
//! ApplyConfiguration, refreshed as they change), each kept current by a `kube::runtime::watcher`
//! (which relists at once after a 410 Gone and retries every second at most
//! while the API server is unreachable; the stores keep their objects
//! meanwhile).
//!
//! A policy that cannot be read is skipped; one whose expressions do not
//! compile is served as upstream serves it, every invocation failing under
//! its failure policy. Both are logged with their name and reason, counted
//! among the load problems and reported on the object (and on its
//! bindings); the others serve. The source reports nothing until the
//! policies, bindings, Namespaces and the params in use have been listed
//! once, so `/readyz` turns ready only after the first full sync.

use super::report::{Reason, Reporter, Verdict};
use super::store::{expand_spec, str_at, ObjectStore};
use super::{PolicyInputs, Snapshot, Source};
use crate::api::{binding_from_json, policy_from_json, Binding, FailurePolicy, SourceRef};
use crate::cel::CelEnvironment;
use crate::dispatch::{compile_policies, CompiledPolicy};
use crate::validation::{validate_fields, Validated};
use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use kube::Client;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The group of kmutate's own policy CRDs.
pub const KMUTATE_GROUP: &str = "kmutate.dev";

/// The policy APIs tried, newest first, when none is named.
pub const POLICY_API_VERSIONS: [&str; 4] = [
    "admissionregistration.k8s.io/v1",
    "admissionregistration.k8s.io/v1beta1",
    "admissionregistration.k8s.io/v1alpha1",
    "kmutate.dev/v1",
];

/// Resource (plural) of the policies, in every group.
pub const POLICIES: &str = "mutatingadmissionpolicies";
/// Resource (plural) of the bindings, in every group.
pub const BINDINGS: &str = "mutatingadmissionpolicybindings";

/// How the API source is configured.
#[derive(Clone, Debug, Default)]
pub struct ApiConfig {
    /// The client configuration (none: inferred from $KUBECONFIG,
    /// ~/.kube/config or the in-cluster service account).
    pub kube: Option<kube::Config>,
    /// The policy API to watch (`group/version`); none: discovered.
    pub policy_api_version: Option<String>,
    /// Answer the CEL `authorizer` checks with SubjectAccessReviews.
    pub subject_access_review: bool,
}

/// A problem of the API source.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The client could not be configured.
    #[error("Kubernetes client: {0}")]
    Client(String),
    /// `--policy-api-version` names an API kmutate does not know.
    #[error("policy API {0:?}: expected one of {list}", list = POLICY_API_VERSIONS.join(", "))]
    UnknownPolicyApi(String),
    /// Discovery failed or found no policy API.
    #[error("discovery: {0}")]
    Discovery(String),
}

/// A param watch, one per distinct paramKind.
struct ParamWatch {
    store: Arc<ObjectStore>,
    task: JoinHandle<()>,
}

/// The policy inputs last built, and from what.
struct Built {
    generations: (u64, u64),
    inputs: Arc<PolicyInputs>,
    param_kinds: BTreeSet<(String, String)>,
}

/// Policies, bindings, params and Namespaces from the Kubernetes API.
pub struct ApiSource {
    client: Client,
    changed: Arc<Notify>,
    requested_api: Option<String>,
    policies: Arc<ObjectStore>,
    bindings: Arc<ObjectStore>,
    namespaces: Arc<ObjectStore>,
    /// CustomResourceDefinitions: resource names, scopes and schemas of
    /// custom resources (ApplyConfiguration, param scopes).
    crds: Arc<ObjectStore>,
    params: Mutex<HashMap<(String, String), ParamWatch>>,
    built: Mutex<Option<Built>>,
    /// Reports verdicts on the objects.
    reporter: Reporter,
    /// Compile verdicts of policies.
    verdicts: Mutex<VerdictMap>,
    /// The policies of the last build, converted and compiled, by
    /// [`name_and_version`].
    compiled: Mutex<FastMap<(String, String), CompiledOrInvalid>>,
    /// Verdicts of bindings (which fail only to convert).
    binding_verdicts: Mutex<VerdictMap>,
    /// What the last build read of each object, by the object's address
    /// in its store: an object the watch did not replace since is taken
    /// as it was, without reading it again (one policy changing among
    /// 10,000 costs one, not 10,000 lookups by name and version).
    read: Mutex<LastRead>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for ApiSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSource")
            .field("policies", &self.policies.len())
            .field("bindings", &self.bindings.len())
            .field("namespaces", &self.namespaces.len())
            .finish_non_exhaustive()
    }
}

/// Reads Namespaces live, for a request whose Namespace the watch has not
/// delivered yet.
pub struct NamespaceReader {
    namespaces: Api<DynamicObject>,
}

impl NamespaceReader {
    /// A reader through `client`.
    pub fn new(client: Client) -> NamespaceReader {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Namespace"),
            "namespaces",
        );
        NamespaceReader {
            namespaces: Api::all_with(client, &resource),
        }
    }
}

impl crate::engine::LiveNamespaces for NamespaceReader {
    fn get(
        &self,
        name: &str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Option<Value>, String>> + Send + '_>,
    > {
        let name = name.to_string();
        Box::pin(async move {
            let found = self
                .namespaces
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?;
            found
                .map(|ns| {
                    let mut v = serde_json::to_value(ns).map_err(|e| e.to_string())?;
                    // A list's items, like the watch's, carry no type.
                    v["apiVersion"] = "v1".into();
                    v["kind"] = "Namespace".into();
                    Ok(v)
                })
                .transpose()
        })
    }
}

/// The kube client of `config` (inferred when none).
pub async fn client(config: Option<kube::Config>) -> Result<Client, ApiError> {
    let config = match config {
        Some(c) => c,
        None => kube::Config::infer()
            .await
            .map_err(|e| ApiError::Client(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| ApiError::Client(e.to_string()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The first wait after a failed API call.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between retries while the API server is unreachable:
/// short, so that changes made once it is back are served within about a
/// second more (a few watches asking once a second costs it little).
pub const RETRY_CAP: Duration = Duration::from_secs(1);

/// Waits between retries of a failing API call: 100 ms doubling to
/// [`RETRY_CAP`], from the start again after a success.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Backoff {
        Backoff(RETRY_FIRST)
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(RETRY_CAP);
    }

    fn reset(&mut self) {
        self.0 = RETRY_FIRST;
    }
}

impl ApiSource {
    /// A source reading through `client`, poking `changed`; nothing runs
    /// until [`ApiSource::start`].
    pub fn new(
        client: Client,
        changed: Arc<Notify>,
        policy_api_version: Option<String>,
    ) -> Result<ApiSource, ApiError> {
        if let Some(v) = &policy_api_version {
            if !POLICY_API_VERSIONS.contains(&v.as_str()) {
                return Err(ApiError::UnknownPolicyApi(v.clone()));
            }
        }
        Ok(ApiSource {
            client: client.clone(),
            changed,
            requested_api: policy_api_version,
            policies: Arc::new(ObjectStore::compacting()),
            bindings: Arc::new(ObjectStore::compacting()),
            namespaces: Arc::default(),
            crds: Arc::default(),
            params: Mutex::default(),
            built: Mutex::default(),
            verdicts: Mutex::default(),
            compiled: Mutex::default(),
            binding_verdicts: Mutex::default(),
            read: Mutex::default(),
            tasks: Mutex::default(),
            reporter: Reporter::new(client.clone()),
        })
    }

    /// Starts discovery and the watches.
    pub fn start(self: &Arc<Self>) {
        let me = self.clone();
        let task = tokio::spawn(async move {
            let mut backoff = Backoff::new();
            let group_version = loop {
                match discover_policy_api(&me.client, me.requested_api.as_deref()).await {
                    Ok(gv) => break gv,
                    Err(e) => {
                        tracing::warn!(error = %e, "policy API discovery failed; retrying");
                        backoff.wait().await;
                    }
                }
            };
            tracing::info!(api = %group_version, "watching MutatingAdmissionPolicies and bindings");
            let (group, version) = group_version
                .split_once('/')
                .unwrap_or(("", group_version.as_str()));
            let resource = |kind: &str, plural: &str| {
                ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk(group, version, kind),
                    plural,
                )
            };
            let namespaces = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Namespace"),
                "namespaces",
            );
            let crds = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
                "customresourcedefinitions",
            );
            // CRDs are optional: without them (or the right to read them),
            // custom resources get no schema, as from files without CRDs.
            let policies = resource("MutatingAdmissionPolicy", POLICIES);
            let bindings = resource("MutatingAdmissionPolicyBinding", BINDINGS);
            // Policies and bindings are listed beside a watch that failed
            // until it delivers again (a change after an outage is served
            // at once); a cluster's Namespaces and CRDs are too many to.
            let watches = [
                (policies, me.policies.clone(), false, true),
                (bindings, me.bindings.clone(), false, true),
                (namespaces, me.namespaces.clone(), false, false),
                (crds, me.crds.clone(), true, false),
            ];
            let mut tasks = Vec::new();
            for (ar, store, optional, catch_up) in watches {
                tasks.push(tokio::spawn(run_watch(
                    me.client.clone(),
                    ar,
                    store,
                    me.changed.clone(),
                    optional,
                    catch_up,
                )));
            }
            lock(&me.tasks).extend(tasks);
        });
        lock(&self.tasks).push(task);
    }

    /// Stops every watch.
    pub fn stop(&self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        for (_, w) in lock(&self.params).drain() {
            w.task.abort();
        }
    }

    /// Reads the policies and bindings (when they changed since the last
    /// build), skipping those that cannot be read. A policy that does not
    /// compile is kept, as upstream keeps it: each invocation fails under
    /// its failure policy.
    fn policy_inputs(&self) -> (Arc<PolicyInputs>, BTreeSet<(String, String)>) {
        let generations = (self.policies.generation(), self.bindings.generation());
        let mut built = lock(&self.built);
        if let Some(b) = built.as_ref().filter(|b| b.generations == generations) {
            return (b.inputs.clone(), b.param_kinds.clone());
        }
        let mut last = lock(&self.read);
        let mut inputs = PolicyInputs::default();
        // What each policy's bindings are told about it.
        let mut states: FastMap<String, PolicyState> = FastMap::default();
        let objects = self.policies.objects();
        let fresh: Vec<Arc<Value>> = objects
            .iter()
            .filter(|o| !last.policies.contains_key(&address(o)))
            .cloned()
            .collect();
        let mut compiled = self.compile_new_policies(&fresh).into_iter();
        let mut verdicts = Verdicts::new(&self.verdicts, &self.reporter, POLICIES);
        let mut read = FastMap::with_capacity_and_hasher(objects.len(), Default::default());
        for object in &objects {
            let entry = match last.policies.remove(&address(object)) {
                Some(entry) => entry,
                None => {
                    let converted = compiled.next().unwrap_or_else(|| Err("not read".into()));
                    read_policy(object, converted, &mut verdicts)
                }
            };
            inputs.problems.extend(entry.problem.iter().cloned());
            states.insert(entry.key.0.clone(), entry.state);
            if let Ok(policy) = &entry.converted {
                inputs.policies.push(policy.clone());
            }
            read.insert(address(object), entry);
        }
        last.policies = read;
        drop(verdicts);
        let mut verdicts = Verdicts::new(&self.binding_verdicts, &self.reporter, BINDINGS);
        let objects = self.bindings.objects();
        let mut read = FastMap::with_capacity_and_hasher(objects.len(), Default::default());
        for object in &objects {
            let mut entry = last
                .bindings
                .remove(&address(object))
                .unwrap_or_else(|| read_binding(object));
            let state = states
                .get(entry.policy_name())
                .copied()
                .unwrap_or(PolicyState::Missing);
            // A binding's verdict also tells its policy's state.
            if entry.judged_in != Some(state) {
                let verdict = verdicts.of(object, state.key(), || match &entry.converted {
                    Ok(b) => Verdict::binding_of(&b.policy_name, state.reason()),
                    Err(e) => {
                        let name = str_at(object, "/metadata/name").unwrap_or_default();
                        tracing::warn!(binding = %name, reason = %e, "binding skipped: invalid");
                        Verdict::invalid(format!("binding {name:?} skipped: {e}"))
                    }
                });
                entry.judged_in = Some(state);
                entry.problem = verdict.problem;
            }
            match &entry.converted {
                Ok(binding) => inputs.bindings.push(binding.clone()),
                Err(_) => inputs.problems.extend(entry.problem.iter().cloned()),
            }
            read.insert(address(object), entry);
        }
        last.bindings = read;
        drop(verdicts);
        // What objects no longer in the stores left in the caches by name
        // and version, once they outgrow the objects (not on every build,
        // which would read every key again).
        prune(&mut lock(&self.compiled), last.policies.len(), || {
            last.policies.values().map(|e| e.key.clone())
        });
        prune(&mut lock(&self.verdicts), last.policies.len(), || {
            last.policies.values().map(|e| verdict_key(&e.key, ""))
        });
        prune(
            &mut lock(&self.binding_verdicts),
            last.bindings.len(),
            || {
                last.bindings.values().filter_map(|e| {
                    Some(verdict_key(
                        &name_and_version(&e.object),
                        e.judged_in?.key(),
                    ))
                })
            },
        );
        drop(last);
        let param_kinds = param_kinds(&inputs.policies, &inputs.bindings);
        let inputs = Arc::new(inputs);
        *built = Some(Built {
            generations,
            inputs: inputs.clone(),
            param_kinds: param_kinds.clone(),
        });
        (inputs, param_kinds)
    }

    /// Each of `objects` converted and compiled: taken from an earlier
    /// build when the same object (uid and generation) was there (a relist,
    /// a status update), else converted and compiled now, the new ones
    /// together on several threads.
    fn compile_new_policies(&self, objects: &[Arc<Value>]) -> Vec<CompiledOrInvalid> {
        let mut known = lock(&self.compiled);
        let keys: Vec<(String, String)> = objects.iter().map(|o| name_and_version(o)).collect();
        let mut fresh_keys = Vec::new();
        let mut fresh_policies = Vec::new();
        let mut invalid: HashMap<(String, String), String> = HashMap::new();
        for (object, key) in objects.iter().zip(&keys) {
            if known.contains_key(key) {
                continue;
            }
            if let Some(refusal) = refused_kmutate_dev(object) {
                invalid.insert(key.clone(), refusal);
                continue;
            }
            match policy_from_json(&as_admission(object), source_of(POLICIES, &key.0)) {
                Ok(policy) => {
                    fresh_keys.push(key.clone());
                    fresh_policies.push(policy);
                }
                Err(e) => {
                    invalid.insert(key.clone(), e.to_string());
                }
            }
        }
        let compiled = compile_policies(&CelEnvironment::shared(), fresh_policies);
        known.extend(
            fresh_keys
                .into_iter()
                .zip(compiled)
                .map(|(k, (c, _))| (k, Ok(Arc::new(c))))
                .chain(invalid.into_iter().map(|(k, e)| (k, Err(e)))),
        );
        keys.into_iter()
            .map(|key| {
                known
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| Err("not read".to_string()))
            })
            .collect()
    }

    /// Starts a watch for each param kind newly in use, stops those no
    /// longer used; returns the stores of the kinds in use.
    fn param_stores(&self, kinds: &BTreeSet<(String, String)>) -> Vec<Arc<ObjectStore>> {
        let mut params = lock(&self.params);
        params.retain(|k, w| {
            let keep = kinds.contains(k);
            if !keep {
                w.task.abort();
            }
            keep
        });
        for (api_version, kind) in kinds {
            let key = (api_version.clone(), kind.clone());
            if params.contains_key(&key) {
                continue;
            }
            let store = Arc::new(ObjectStore::default());
            let task = tokio::spawn(watch_params(
                self.client.clone(),
                api_version.clone(),
                kind.clone(),
                store.clone(),
                self.changed.clone(),
            ));
            params.insert(key, ParamWatch { store, task });
        }
        params.values().map(|w| w.store.clone()).collect()
    }
}

/// A policy object compiled, or why it could not be converted.
type CompiledOrInvalid = Result<Arc<CompiledPolicy>, String>;

/// Verdicts by (name, generation and context).
/// A map hashed with foldhash: a rebuild looks up every object's key.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

type VerdictMap = FastMap<(String, String), Verdict>;

type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// How many more entries than live objects a cache by name and version
/// holds before it is pruned.
const PRUNE_SLACK: usize = 64;

/// An object's place in its store, which stays while the watch does not
/// replace the object (the entry holding it keeps the address from reuse).
fn address(object: &Arc<Value>) -> usize {
    Arc::as_ptr(object) as usize
}

/// What the last build read of the objects, by [`address`].
#[derive(Default)]
struct LastRead {
    policies: FastMap<usize, PolicyRead>,
    bindings: FastMap<usize, BindingRead>,
}

/// A policy object as a build read it.
struct PolicyRead {
    /// Holds the object, so that its address is not reused.
    _object: Arc<Value>,
    /// [`name_and_version`].
    key: (String, String),
    converted: CompiledOrInvalid,
    state: PolicyState,
    problem: Option<String>,
}

/// A binding object as a build read it.
struct BindingRead {
    /// Holds the object, so that its address is not reused.
    object: Arc<Value>,
    converted: Result<Binding, String>,
    /// The state of its policy its verdict was judged in.
    judged_in: Option<PolicyState>,
    problem: Option<String>,
}

/// A policy object read: converted and compiled (`converted`), judged.
fn read_policy(
    object: &Arc<Value>,
    converted: CompiledOrInvalid,
    verdicts: &mut Verdicts<'_>,
) -> PolicyRead {
    let key = name_and_version(object);
    let name = &key.0;
    let verdict = verdicts.of(object, "", || match &converted {
        Ok(policy) => compile_verdict(policy),
        Err(e) => {
            tracing::warn!(policy = %name, reason = %e, "policy skipped: invalid");
            Verdict::invalid(format!("policy {name:?} skipped: {e}"))
        }
    });
    let state = match (&converted, verdict.reason) {
        (Err(_), _) => PolicyState::Invalid,
        (Ok(_), Reason::CompileError) => PolicyState::DoesNotCompile,
        (Ok(_), _) => PolicyState::Compiled,
    };
    PolicyRead {
        _object: object.clone(),
        key,
        converted,
        state,
        problem: verdict.problem,
    }
}

/// A binding object read: converted (cheap: unlike a policy, nothing
/// compiles); its verdict is judged by the caller, which knows the
/// policy's state.
fn read_binding(object: &Arc<Value>) -> BindingRead {
    let name = str_at(object, "/metadata/name").unwrap_or_default();
    BindingRead {
        object: object.clone(),
        converted: match refused_kmutate_dev(object) {
            Some(refusal) => Err(refusal),
            None => binding_from_json(&as_admission(object), source_of(BINDINGS, name))
                .map_err(|e| e.to_string()),
        },
        judged_in: None,
        problem: None,
    }
}

impl BindingRead {
    /// `spec.policyName` ("" when the binding does not convert).
    fn policy_name(&self) -> &str {
        self.converted
            .as_ref()
            .map(|b| b.policy_name.as_str())
            .unwrap_or_default()
    }
}

/// The key of a verdict on the object of `key` in `context`.
fn verdict_key(key: &(String, String), context: &str) -> (String, String) {
    (key.0.clone(), format!("{}/{context}", key.1))
}

/// Drops from `cache` what none of the `live` objects' keys names, once
/// it holds more than [`PRUNE_SLACK`] entries beyond twice their `count`
/// (the keys are made only then).
fn prune<V, I: Iterator<Item = (String, String)>>(
    cache: &mut FastMap<(String, String), V>,
    count: usize,
    live: impl FnOnce() -> I,
) {
    if cache.len() <= 2 * count + PRUNE_SLACK {
        return;
    }
    let keep: FastSet<(String, String)> = live().collect();
    cache.retain(|k, _| keep.contains(k));
}

/// One pass over the policies (or bindings) of a build: each object's
/// verdict is judged, and reported on the object, once per generation (and
/// context: a binding's verdict also depends on its policy's); verdicts of
/// objects gone are pruned with the other caches by name and version.
struct Verdicts<'s> {
    known: std::sync::MutexGuard<'s, VerdictMap>,
    reporter: &'s Reporter,
    plural: &'static str,
}

impl<'s> Verdicts<'s> {
    fn new(known: &'s Mutex<VerdictMap>, reporter: &'s Reporter, plural: &'static str) -> Self {
        Verdicts {
            known: lock(known),
            reporter,
            plural,
        }
    }

    /// The verdict on `object` in `context`: `judge`'s answer, asked only
    /// when this generation of the object (or its context) is new.
    fn of(&mut self, object: &Value, context: &str, judge: impl FnOnce() -> Verdict) -> Verdict {
        let key = verdict_key(&name_and_version(object), context);
        if let Some(verdict) = self.known.get(&key) {
            return verdict.clone();
        }
        let verdict = judge();
        self.reporter.verdict(object, self.plural, &verdict);
        self.known.insert(key, verdict.clone());
        verdict
    }
}

impl Drop for ApiSource {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Source for ApiSource {
    fn snapshot(&self) -> Option<Snapshot> {
        let stores = [&self.policies, &self.bindings, &self.namespaces, &self.crds];
        if !stores.iter().all(|s| s.is_synced()) {
            return None;
        }
        let started = std::time::Instant::now();
        let (policies, kinds) = self.policy_inputs();
        tracing::debug!(
            took_us = started.elapsed().as_micros() as u64,
            "policies and bindings of the API read"
        );
        let params = self.param_stores(&kinds);
        if !params.iter().all(|s| s.is_synced()) {
            return None;
        }
        let mut objects = self.namespaces.objects();
        objects.extend(self.crds.objects());
        for store in params {
            objects.extend(store.objects());
        }
        Some(Snapshot { policies, objects })
    }
}

/// The name, and what changes when the spec does: the generation (which
/// a status update leaves alone), else the resourceVersion.
/// An object's name, and what changes with its content: its uid (a policy
/// deleted and created again starts at generation 1 again) and generation.
fn name_and_version(object: &Value) -> (String, String) {
    let metadata = &object["metadata"];
    let text = |field: &str| {
        metadata
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let uid = text("uid");
    let version = match metadata.get("generation").and_then(Value::as_i64) {
        Some(g) => format!("{uid}/g{g}"),
        None => format!("{uid}/rv{}", text("resourceVersion")),
    };
    (text("name").to_string(), version)
}

fn source_of(resource: &str, name: &str) -> SourceRef {
    SourceRef {
        file: format!("{resource}/{name}"),
        document: 0,
    }
}

/// A kmutate.dev object read as the admissionregistration.k8s.io/v1 one
/// (same schema); others unchanged.
/// The built-in API's refusal of a kmutate.dev object, which got stored
/// while kmutate's validating webhook did not answer (its failurePolicy is
/// Ignore): such an object is not served, as the built-in API would not
/// have stored it. Expressions are left to the compiler, whose verdict
/// (served, failing under the policy's failure policy) is upstream's for a
/// stored policy that does not compile. Built-in objects were validated by
/// the API server itself.
fn refused_kmutate_dev(object: &Value) -> Option<String> {
    let group = str_at(object, "/apiVersion")?.split_once('/')?.0;
    if group != KMUTATE_GROUP {
        return None;
    }
    let mut object = expand_spec(object);
    // Stored before the CRD required it, and served as Never since: kept so.
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("reinvocationPolicy").or_insert("Never".into());
    }
    match validate_fields(&object) {
        Validated::Refused(refusal) => Some(refusal.message(KMUTATE_GROUP)),
        Validated::Accepted | Validated::NotOurs => None,
    }
}

fn as_admission(object: &Value) -> Value {
    let mut object = expand_spec(object);
    let group = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map(|(g, _)| g.to_string());
    if group.as_deref() == Some(KMUTATE_GROUP) {
        object["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    }
    object
}

/// What a binding's policy is, as far as serving it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PolicyState {
    /// Compiled: served.
    Compiled,
    /// Served, but every invocation fails under its failure policy.
    DoesNotCompile,
    /// Unreadable (the API would refuse it): not served.
    Invalid,
    /// No policy of that name: nothing served.
    Missing,
}

impl PolicyState {
    /// The reason a binding of a policy in this state reports.
    fn reason(self) -> Reason {
        match self {
            PolicyState::Compiled => Reason::Compiled,
            PolicyState::DoesNotCompile => Reason::PolicyCompileError,
            PolicyState::Invalid => Reason::PolicyInvalid,
            PolicyState::Missing => Reason::PolicyNotFound,
        }
    }

    fn key(self) -> &'static str {
        match self {
            PolicyState::Compiled => "compiled",
            PolicyState::DoesNotCompile => "does-not-compile",
            PolicyState::Invalid => "invalid",
            PolicyState::Missing => "missing",
        }
    }
}

/// A policy's compile verdict: compiled, or served with every invocation
/// failing under its failure policy (upstream's `compilation failed` error).
fn compile_verdict(compiled: &CompiledPolicy) -> Verdict {
    let errors = compiled.compile_errors();
    let policy = &compiled.policy;
    if errors.is_empty() {
        return Verdict::compiled();
    }
    let reason = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let failure = policy.failure_policy;
    tracing::warn!(policy = %policy.name, %reason, failure_policy = ?failure,
        "policy does not compile: served, every invocation fails under its failure policy");
    Verdict::does_not_compile(format!(
        "policy {:?} does not compile: served, and every invocation fails under \
         failurePolicy {failure:?} ({}): {reason}",
        policy.name,
        failure_consequence(failure)
    ))
}

/// What an invocation failing under `failure` does to the request.
fn failure_consequence(failure: FailurePolicy) -> &'static str {
    match failure {
        FailurePolicy::Fail => "matching requests are denied",
        FailurePolicy::Ignore => "matching requests are admitted unchanged",
    }
}

/// The (apiVersion, kind) of the params some binding of a loaded policy uses.
fn param_kinds(
    policies: &[Arc<CompiledPolicy>],
    bindings: &[Binding],
) -> BTreeSet<(String, String)> {
    let with_params: std::collections::HashSet<&str> = bindings
        .iter()
        .filter(|b| b.param_ref.is_some())
        .map(|b| b.policy_name.as_str())
        .collect();
    policies
        .iter()
        .map(|c| &c.policy)
        .filter(|p| with_params.contains(p.name.as_str()))
        .filter_map(|p| p.param_kind.as_ref())
        .map(|k| (k.api_version.clone(), k.kind.clone()))
        .collect()
}

/// The first of the candidate policy APIs the server serves with both
/// resources.
pub async fn discover_policy_api(
    client: &Client,
    requested: Option<&str>,
) -> Result<String, ApiError> {
    let candidates: Vec<&str> = match requested {
        Some(v) => vec![v],
        None => POLICY_API_VERSIONS.to_vec(),
    };
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| ApiError::Discovery(e.to_string()))?;
    for gv in &candidates {
        let Some((group, version)) = gv.split_once('/') else {
            continue;
        };
        let served = groups
            .groups
            .iter()
            .any(|g| g.name == group && g.versions.iter().any(|v| v.version == version));
        if !served {
            continue;
        }
        let resources = client
            .list_api_group_resources(gv)
            .await
            .map_err(|e| ApiError::Discovery(e.to_string()))?;
        let has = |plural: &str| resources.resources.iter().any(|r| r.name == plural);
        if has(POLICIES) && has(BINDINGS) {
            return Ok((*gv).to_string());
        }
    }
    Err(ApiError::Discovery(format!(
        "the server serves none of {}",
        candidates.join(", ")
    )))
}

/// The resource of `kind` in `api_version`, by discovery; `Ok(None)` when
/// the server does not serve it.
pub async fn discover_resource(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> Result<Option<ApiResource>, kube::Error> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let list = if group.is_empty() {
        client.list_core_api_resources(version).await
    } else {
        client.list_api_group_resources(api_version).await
    };
    let list = match list {
        Ok(l) => l,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(list
        .resources
        .iter()
        .find(|r| r.kind == kind && !r.name.contains('/'))
        .map(|r| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &r.name)
        }))
}

/// How long after a failed watch its resource is also listed, every
/// [`CATCH_UP_EVERY`], until the watch delivers again: kube-apiserver
/// serves a custom resource's watch only once its watch cache is ready
/// again, seconds after it is back (3.5 s for kmutate.dev policies), and a
/// change made meanwhile would wait for it.
const CATCH_UP_FOR: Duration = Duration::from_secs(20);

/// How often a resource is listed while its watch catches up.
const CATCH_UP_EVERY: Duration = Duration::from_millis(250);

/// Watches one resource into `store`, forever, retrying with kube's
/// default backoff. An `optional` store counts as synced once its first
/// attempt failed, so that readiness does not wait for it. With
/// `catch_up`, a watch that failed has its resource listed beside it
/// until it delivers again ([`CATCH_UP_FOR`]).
async fn run_watch(
    client: Client,
    resource: ApiResource,
    store: Arc<ObjectStore>,
    changed: Arc<Notify>,
    optional: bool,
    catch_up: bool,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    // No backoff of kube-runtime's (800 ms doubling to 30 s, also after a
    // 410): a watch whose resourceVersion expired relists at once, and one
    // that cannot reach the API server retries within RETRY_CAP.
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut backoff = Backoff::new();
    let mut relisted = false;
    let mut catching_up_until: Option<tokio::time::Instant> = None;
    let mut catch_up_tick = tokio::time::interval(CATCH_UP_EVERY);
    catch_up_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let catching_up =
            catching_up_until.is_some_and(|until| tokio::time::Instant::now() < until);
        let event = tokio::select! {
            event = events.next() => event,
            _ = catch_up_tick.tick(), if catching_up => {
                // Not waiting for the client's own retries (a 429 while
                // the apiserver starts is retried after its Retry-After):
                // the next tick asks again.
                let listed = tokio::time::timeout(CATCH_UP_EVERY * 2, api.list(&Default::default())).await;
                match listed.unwrap_or_else(|_| Err(kube::Error::Service("no answer in time".into()))) {
                    Ok(listed) => {
                        if store.is_synced() && store.replace_listed(listed.items, &resource) {
                            tracing::info!(resource = %resource.plural, api = %resource.api_version,
                                "a change listed while the watch catches up");
                            changed.notify_one();
                        }
                    }
                    Err(e) => tracing::debug!(resource = %resource.plural, error = %e,
                        "listing while the watch catches up failed"),
                }
                continue;
            }
        };
        let Some(event) = event else {
            break;
        };
        match event {
            Ok(e) => {
                backoff.reset();
                relisted = false;
                catching_up_until = None;
                if store.apply(e, &resource) {
                    tracing::debug!(resource = %resource.plural, "watch event applied");
                    changed.notify_one();
                }
            }
            Err(e) => {
                if optional && !store.is_synced() {
                    store.mark_synced();
                    changed.notify_one();
                }
                if catch_up {
                    catching_up_until = Some(tokio::time::Instant::now() + CATCH_UP_FOR);
                }
                if is_gone(&e) && !relisted {
                    tracing::info!(resource = %resource.plural, api = %resource.api_version,
                        "watch expired (410 Gone); relisting now");
                    relisted = true;
                    continue;
                }
                tracing::warn!(resource = %resource.plural, api = %resource.api_version, error = %e,
                    "watch failed; keeping the objects seen, retrying");
                backoff.wait().await;
            }
        }
    }
}

/// Whether the watch failed because its resourceVersion is too old (410
/// Gone): the watcher then starts over with a list.
fn is_gone(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// Finds the resource of a param kind, then watches it. A kind the server
/// does not serve counts as synced and empty (so that readiness does not
/// wait for it) and is looked up again later.
async fn watch_params(
    client: Client,
    api_version: String,
    kind: String,
    store: Arc<ObjectStore>,
    changed: Arc<Notify>,
) {
    let mut backoff = Backoff::new();
    let resource = loop {
        match discover_resource(&client, &api_version, &kind).await {
            Ok(Some(r)) => break r,
            Ok(None) => {
                tracing::warn!(api_version = %api_version, kind = %kind,
                    "paramKind not served by the API server; its params are empty");
                store.mark_synced();
                changed.notify_one();
            }
            Err(e) => {
                tracing::warn!(api_version = %api_version, kind = %kind, error = %e,
                    "paramKind discovery failed; retrying");
            }
        }
        backoff.wait().await;
    };
    tracing::info!(api_version = %api_version, kind = %kind, resource = %resource.plural, "watching params");
    run_watch(client, resource, store, changed, false, false).await;
}
