//! `kmutate conformance --cluster`: the conformance cases run against a live
//! kube-apiserver's own MutatingAdmissionPolicy plugin.
//!
//! Each case gets objects of its own ([`plan`]): namespaces, params, RBAC
//! for its user, its policies and bindings, all under names unique to the
//! run. Its request is sent as a server-side dry run, as its user
//! (impersonated), first before its policies exist (the *baseline*), then
//! once they are in force; [`compare`] holds the change between the two
//! against the change the case expects. Everything created is deleted
//! after the case, and at the end of the run (also on Ctrl-C or an error).
//!
//! Waiting for policies: the apiserver loads new policies from its
//! informers about a second after they are created. The runner creates a
//! *sentinel* policy after a case's own, in a namespace of the run, and
//! dry-runs a ConfigMap there until the sentinel acts (at most 10 s): the
//! informers deliver in order, so the case's policies are loaded too. One
//! sentinel serves every case waiting at the time. A case whose answer
//! still shows no effect of its policies (a param informer still syncing)
//! is sent again until it does, within the same 10 s.

pub mod apiserver;
pub mod compare;
pub mod kmutate_dev;
pub mod plan;

use self::apiserver::{Answer, Apiserver, Collection};
use self::plan::{ClusterObject, Expectation, Plan, Planned};
use crate::conformance::{normalize, read_cases};
use futures::StreamExt as _;
use hyper::http::Method;
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a case waits for its policies to take effect.
pub const POLICY_WAIT: Duration = Duration::from_secs(10);

/// The skip reason of a case whose policy the apiserver refuses to store.
pub const POLICY_REFUSED: &str = "policy refused at creation: the apiserver's validation compiles \
     the CEL, so a live cluster cannot hold the policy the case runs";

/// The skip reason of a case whose expected object the apiserver itself
/// refuses (validation, the rules of an update), as it refuses the request
/// with the policies: the message follows.
pub const EXPECTED_REFUSED: &str = "expected object refused by the apiserver with no policy";

/// The skip reason of a case whose expected change the apiserver discards
/// by itself.
pub const UNOBSERVABLE: &str = "change not observable: the apiserver makes the case's expected \
     object, sent with no policy, into the same object as its own (metadata in a status update), \
     so a mutation that did not happen would look the same";

/// The skip reason of a case expecting a denial whose request the
/// apiserver resets without an answer.
pub const RESET: &str = "request reset: the apiserver answered the request with the policies \
     by no status (a panic in its handler resets it), so no denial text can be compared";

/// Said of a refusal for want of params.
const PARAMS_HINT: &str =
    "\n(kube-apiserver v1.36.2 starts the informer of a built-in param kind, \
     a ConfigMap, only for the policies it finds when it starts: run \
     `kmutate conformance --cluster --install-param-informers` once and restart it)";

/// Where v1 MutatingAdmissionPolicies and their bindings live.
fn policy_collections() -> (Collection, Collection) {
    let policies = Collection {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        resource: "mutatingadmissionpolicies".into(),
        namespace: None,
    };
    let bindings = Collection {
        resource: "mutatingadmissionpolicybindings".into(),
        ..policies.clone()
    };
    (policies, bindings)
}

/// The name of a skip reason: its text before the first colon.
fn skip_name(reason: &str) -> String {
    reason.split(':').next().unwrap_or(reason).to_string()
}

/// Which implementation answers the cluster's admission requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    /// The apiserver's MutatingAdmissionPolicy plugin.
    Builtin,
    /// kmutate's webhook reading `kmutate.dev` policy objects.
    KmutateDev,
}

/// How to run the suite against a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The kubeconfig (default: `KUBECONFIG`, then `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// Its context (default: the current one).
    pub context: Option<String>,
    /// Which implementation.
    pub implementation: Implementation,
    /// Cases at once.
    pub jobs: usize,
    /// A case counter on one line (a terminal) instead of nothing.
    pub progress: bool,
    /// Cases known to fail, with why (`--expected-failures`): reported as
    /// `xfail` and counted as skipped; one that passes is reported
    /// (`xpass`) but fails nothing.
    pub expected_failures: BTreeMap<String, String>,
    /// kmutate.dev: kmutate keeps its webhook's rules to what the cases'
    /// policies match (`serve --manage-webhook`) instead of every request.
    pub manage_webhook: bool,
}

/// Errors that stop a run (a case's own problems are its failure).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The cluster could not be reached or refused the run's own objects.
    #[error("cluster: {0}")]
    Cluster(String),
    /// Writing the report.
    #[error("writing the report: {0}")]
    Io(#[from] std::io::Error),
}

/// Totals of a run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClusterSummary {
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// Cases skipped, by reason.
    pub skipped: BTreeMap<String, usize>,
}

impl ClusterSummary {
    /// Cases skipped.
    pub fn skipped_total(&self) -> usize {
        self.skipped.values().sum()
    }
}

/// The result of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterResult {
    /// It passed.
    Pass,
    /// It failed: how.
    Fail(String),
    /// It was skipped: why.
    Skip(String),
    /// It failed as listed: why it is listed, and how it failed.
    ExpectedFailure(String, String),
}

/// The skip reason of a case that failed as `--expected-failures` says.
pub const EXPECTED_FAILURE: &str = "expected failure";

/// `result` of case `name` as `expected` (`--expected-failures`) says.
fn as_listed(
    name: &str,
    result: ClusterResult,
    expected: &BTreeMap<String, String>,
) -> ClusterResult {
    match (result, expected.get(name)) {
        (ClusterResult::Fail(how), Some(why)) => ClusterResult::ExpectedFailure(why.clone(), how),
        (result, _) => result,
    }
}

/// Everything the run created and has not deleted yet.
#[derive(Default)]
struct Created {
    objects: Mutex<Vec<(Collection, String)>>,
}

impl Created {
    fn add(&self, collection: &Collection, name: &str) {
        if let Ok(mut o) = self.objects.lock() {
            o.push((collection.clone(), name.to_string()));
        }
    }

    fn remove(&self, collection: &Collection, name: &str) {
        if let Ok(mut o) = self.objects.lock() {
            o.retain(|(c, n)| !(c == collection && n == name));
        }
    }

    fn take(&self) -> Vec<(Collection, String)> {
        self.objects
            .lock()
            .map(|mut o| std::mem::take(&mut *o))
            .unwrap_or_default()
    }
}

/// The order of deletion: bindings, policies, objects, namespaces, CRDs.
fn deletion_rank(c: &Collection) -> u8 {
    match c.resource.as_str() {
        "mutatingwebhookconfigurations" | "mutatingadmissionpolicybindings" => 0,
        "mutatingadmissionpolicies" => 1,
        "namespaces" => 3,
        "customresourcedefinitions" => 4,
        _ => 2,
    }
}

/// Shared by the cases of a run.
struct Run<'o> {
    api: Apiserver,
    expected_failures: &'o BTreeMap<String, String>,
    implementation: Implementation,
    tag: String,
    control_namespace: String,
    created: Created,
    sentinel: Sentinel,
}

/// The sentinel policies that tell when earlier policies are in force.
struct Sentinel {
    started: AtomicU64,
    active: tokio::sync::watch::Sender<u64>,
    probing: tokio::sync::Mutex<()>,
}

impl Run<'_> {
    /// Returns once every policy created before the call is in force (or
    /// after [`POLICY_WAIT`]).
    async fn wait_for_policies(&self) -> Result<(), String> {
        let needed = self.sentinel.started.load(Ordering::SeqCst) + 1;
        let deadline = Instant::now() + POLICY_WAIT;
        let mut seen = self.sentinel.active.subscribe();
        loop {
            if *seen.borrow_and_update() >= needed {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the run's sentinel policy took no effect within {} s",
                    POLICY_WAIT.as_secs()
                ));
            }
            if let Ok(_one) = self.sentinel.probing.try_lock() {
                let generation = self.sentinel.started.fetch_add(1, Ordering::SeqCst) + 1;
                self.probe(generation).await?;
                self.sentinel.active.send_replace(generation);
            } else {
                let _ = tokio::time::timeout(Duration::from_millis(200), seen.changed()).await;
            }
        }
    }

    /// Creates sentinel `generation` and waits until it acts.
    async fn probe(&self, generation: u64) -> Result<(), String> {
        let name = format!("kmc-{}-sentinel-{generation}", self.tag);
        let key = format!("kmutate.dev/sentinel-{generation}");
        let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
            "spec": {"matchConstraints": {
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["configmaps"]}],
                    "namespaceSelector": {"matchLabels": {
                        crate::matching::NAMESPACE_NAME_LABEL: self.control_namespace}}},
                "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                    "expression": format!("Object{{metadata: Object.metadata{{annotations: {{'{key}': 'true'}}}}}}")}}]}});
        let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
            "spec": {"policyName": name}});
        let (policies, bindings) = match self.implementation {
            Implementation::Builtin => policy_collections(),
            Implementation::KmutateDev => (
                kmutate_dev::collection("mutatingadmissionpolicies"),
                kmutate_dev::collection("mutatingadmissionpolicybindings"),
            ),
        };
        let api_version = match self.implementation {
            Implementation::Builtin => "admissionregistration.k8s.io/v1",
            Implementation::KmutateDev => kmutate_dev::API_VERSION,
        };
        let (mut policy, mut binding) = (policy, binding);
        policy["apiVersion"] = Json::from(api_version);
        binding["apiVersion"] = Json::from(api_version);
        if self.implementation == Implementation::KmutateDev {
            kmutate_dev::label_own(&mut policy);
            kmutate_dev::label_own(&mut binding);
        }
        for (c, o) in [(&policies, &policy), (&bindings, &binding)] {
            self.create_recorded(c, &name, o)
                .await
                .map_err(|e| format!("sentinel policy {name}: {e}"))?;
        }
        let configmaps = Collection {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
            namespace: Some(self.control_namespace.clone()),
        };
        let probe = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "probe", "namespace": self.control_namespace}});
        let deadline = Instant::now() + POLICY_WAIT;
        let mut result = Err(format!(
            "sentinel policy {name} took no effect within {} s",
            POLICY_WAIT.as_secs()
        ));
        while Instant::now() < deadline {
            let answer = self
                .api
                .send(
                    Method::POST,
                    &configmaps.path(),
                    "dryRun=All",
                    Some(&probe),
                    None,
                )
                .await?;
            if let Answer::Object { object, .. } = answer {
                if object["metadata"]["annotations"][&key] == "true" {
                    result = Ok(());
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if generation > 1 {
            let previous = format!("kmc-{}-sentinel-{}", self.tag, generation - 1);
            for c in [&bindings, &policies] {
                self.delete_recorded(c, &previous).await;
            }
        }
        result
    }

    async fn create_recorded(
        &self,
        collection: &Collection,
        name: &str,
        object: &Json,
    ) -> Result<Json, String> {
        let answer = self.api.create(collection, object).await?;
        let created = answer.object()?;
        self.created.add(collection, name);
        Ok(created)
    }

    async fn delete_recorded(&self, collection: &Collection, name: &str) {
        if self.api.delete(collection, name).await.is_ok() {
            self.created.remove(collection, name);
        }
    }

    /// Deletes everything still recorded, in [`deletion_rank`] order.
    async fn delete_everything(&self) -> Vec<String> {
        let mut left = self.created.take();
        left.sort_by_key(|(c, _)| deletion_rank(c));
        let mut errors = Vec::new();
        for rank in 0..=4 {
            let batch: Vec<_> = left
                .iter()
                .filter(|(c, _)| deletion_rank(c) == rank)
                .collect();
            let results =
                futures::future::join_all(batch.iter().map(|(c, n)| self.api.delete(c, n))).await;
            errors.extend(results.into_iter().filter_map(Result::err));
        }
        errors
    }
}

/// The request of `plan` as its user, dry run.
async fn send_request(api: &Apiserver, plan: &Plan) -> Result<Answer, String> {
    let query = format!("dryRun=All&fieldManager={}", apiserver::FIELD_MANAGER);
    let (method, path) = match plan.operation.as_str() {
        "CREATE" if plan.subresource.is_empty() => (Method::POST, plan.collection.path()),
        "CREATE" => (
            Method::POST,
            plan.collection.object_path(&plan.name, &plan.subresource),
        ),
        _ => (
            Method::PUT,
            plan.collection.object_path(&plan.name, &plan.subresource),
        ),
    };
    api.send(
        method,
        &path,
        &query,
        Some(&plan.object),
        plan.user.as_ref(),
    )
    .await
}

/// Creates the object an UPDATE finds stored. A Pod's ephemeral
/// containers cannot be created with it: they are added after, through
/// its `ephemeralcontainers` subresource, as `kubectl debug` does.
async fn create_stored(run: &Run<'_>, stored: &ClusterObject) -> Result<Json, String> {
    let ephemeral = stored.object["spec"]["ephemeralContainers"].clone();
    let is_pod = stored.collection.group.is_empty() && stored.collection.resource == "pods";
    if !is_pod || ephemeral.is_null() {
        return run
            .create_recorded(&stored.collection, &stored.name, &stored.object)
            .await;
    }
    let mut without = stored.object.clone();
    if let Some(spec) = without["spec"].as_object_mut() {
        spec.remove("ephemeralContainers");
    }
    let created = run
        .create_recorded(&stored.collection, &stored.name, &without)
        .await?;
    let mut with = created;
    with["spec"]["ephemeralContainers"] = ephemeral;
    let query = format!("fieldManager={}", apiserver::FIELD_MANAGER);
    run.api
        .send(
            Method::PUT,
            &stored
                .collection
                .object_path(&stored.name, "ephemeralcontainers"),
            &query,
            Some(&with),
            None,
        )
        .await?
        .object()
        .map_err(|e| format!("adding its ephemeral containers: {e}"))
}

/// Creates `objects` at once (each recorded); the first refusal, naming it.
async fn create_all(run: &Run<'_>, case: &str, objects: &[ClusterObject]) -> Result<(), String> {
    let results = futures::future::join_all(objects.iter().map(|o| async move {
        run.create_recorded(&o.collection, &o.name, &o.object)
            .await
            .map_err(|e| {
                format!(
                    "case {case}: creating {} {}: {e}",
                    o.object["kind"].as_str().unwrap_or("object"),
                    o.name
                )
            })
    }))
    .await;
    results
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map(|_| ())
}

/// Runs one planned case.
async fn run_plan(run: &Run<'_>, plan: &Plan) -> ClusterResult {
    let result = run_plan_steps(run, plan).await;
    // Its objects go, whatever happened: bindings and policies first.
    let mut mine: Vec<&ClusterObject> = plan.policies.iter().collect();
    mine.extend(plan.stored.iter());
    mine.extend(plan.setup.iter());
    mine.sort_by_key(|o| deletion_rank(&o.collection));
    for rank in 0..=3 {
        futures::future::join_all(
            mine.iter()
                .filter(|o| deletion_rank(&o.collection) == rank)
                .map(|o| run.delete_recorded(&o.collection, &o.name)),
        )
        .await;
    }
    match result {
        Ok(r) => r,
        Err(e) => ClusterResult::Fail(e),
    }
}

async fn run_plan_steps(run: &Run<'_>, plan: &Plan) -> Result<ClusterResult, String> {
    let case = &plan.case;
    let (namespaces, rest): (Vec<ClusterObject>, Vec<ClusterObject>) = plan
        .setup
        .iter()
        .cloned()
        .partition(|o| o.collection.resource == "namespaces");
    create_all(run, case, &namespaces).await?;
    create_all(run, case, &rest).await?;
    let mut plan = plan.clone();
    if let Some(stored) = &plan.stored {
        let created = create_stored(run, stored).await.map_err(|e| {
            format!(
                "case {case}: creating the stored object {}: {e}",
                stored.name
            )
        })?;
        // A Pod update may change little but images: it is sent as the
        // stored Pod (with the token volume and defaults the apiserver
        // added) changed as the case changes its oldObject into its object,
        // and so is the expected object.
        let is_pod = stored.collection.group.is_empty() && stored.collection.resource == "pods";
        if is_pod && plan.subresource.is_empty() && stored.object["kind"] == plan.object["kind"] {
            let stored_as = &created;
            plan.object =
                compare::apply_changes(stored_as, &compare::changes(&stored.object, &plan.object));
            if let Expectation::Object(expected) = &plan.expect {
                plan.expect = Expectation::Object(compare::apply_changes(
                    stored_as,
                    &compare::changes(&stored.object, expected),
                ));
            }
        }
        // An update names the version it replaces (custom resources require it).
        if plan.object.get("metadata").is_some_and(Json::is_object) {
            plan.object["metadata"]["resourceVersion"] =
                created["metadata"]["resourceVersion"].clone();
        }
    }
    let plan = &plan;
    // RBAC's informers make a new grant known after a moment.
    let granted_by = Instant::now() + Duration::from_secs(5);
    let mut baseline = send_request(&run.api, plan).await?;
    while baseline.is_refused_with(403) && Instant::now() < granted_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
        baseline = send_request(&run.api, plan).await?;
    }
    let baseline = match baseline {
        Answer::Object { object, .. } => object,
        // The cluster's own configuration (kube-apiserver --allow-privileged).
        Answer::Refused { message, .. } if message.contains("disallowed by cluster policy") => {
            return Ok(ClusterResult::Skip(format!(
                "disallowed by cluster policy: the cluster refuses the case's object \
                 with no policy in force: {}",
                plan.original_names(&message)
            )))
        }
        Answer::Refused { code, message } => {
            return Err(format!(
                "case {case}: without the case's policies the apiserver refuses the request \
                 ({code}): {message}"
            ))
        }
    };
    // The normalised expectation: the expected object through the same
    // apiserver, with no policy in force; and, where it comes out otherwise,
    // the apiserver's own form of the object changed as the case changes it
    // (`compare::defaulting_paths`).
    let normalised = match &plan.expect {
        Expectation::Object(expected)
            if compare::comparable(expected) != compare::comparable(&plan.object) =>
        {
            let mut forms: Vec<Answer> = Vec::with_capacity(2);
            let allocated_anew = compare::without_service_allocations(&baseline, &plan.object);
            let changed = compare::changed_baseline(&allocated_anew, &plan.object, expected);
            for object in [expected.clone(), changed] {
                let known = forms.iter().any(|f| {
                    matches!(f, Answer::Object { object: o, .. }
                        if compare::comparable(o) == compare::comparable(&object))
                });
                if known {
                    continue;
                }
                let mut alone = plan.clone();
                alone.object = object;
                if let Some(rv) = plan.object["metadata"].get("resourceVersion") {
                    alone.object["metadata"]["resourceVersion"] = rv.clone();
                }
                let form = send_request(&run.api, &alone).await?;
                // The second path's refusal counts only as the same refusal
                // as with the policies ([`judge_forms`]).
                forms.push(form);
            }
            forms
        }
        _ => vec![Answer::Object {
            object: baseline.clone(),
            warnings: Vec::new(),
        }],
    };
    let (policies, bindings): (Vec<ClusterObject>, Vec<ClusterObject>) = plan
        .policies
        .iter()
        .cloned()
        .partition(|o| o.collection.resource == "mutatingadmissionpolicies");
    if let Err(refusal) = create_all(run, case, &policies).await {
        // The apiserver's validation compiles the CEL: an error the case
        // expects at admission may be reported when the policy is created.
        let refusal = plan.original_names(&refusal);
        let compile_error = refusal.contains(": 422: ")
            && (refusal.contains("compilation failed")
                || refusal.contains("must evaluate to")
                || refusal.contains("program instantiation failed"));
        if let Expectation::Rejected(text) = &plan.expect {
            if !text.is_empty() && compile_error && refusal.contains(text.as_str()) {
                return Ok(ClusterResult::Pass);
            }
        }
        if compile_error {
            return Ok(ClusterResult::Skip(format!("{POLICY_REFUSED}: {refusal}")));
        }
        return Err(refusal);
    }
    create_all(run, case, &bindings).await?;
    let deadline = Instant::now() + POLICY_WAIT;
    run.wait_for_policies()
        .await
        .map_err(|e| format!("case {case}: {e}"))?;
    let expects_effect = match &plan.expect {
        Expectation::Rejected(_) => true,
        Expectation::Object(o) => compare::comparable(o) != compare::comparable(&plan.object),
    };
    // Sent again while a change the case expects does not show (a param
    // informer still syncing), within the same bound.
    let mut answer = send_request(&run.api, plan).await;
    loop {
        let answer_now = match answer {
            Ok(a) => a,
            // A panic in the apiserver's handler resets the request: no
            // text to hold against the denial the case expects.
            Err(e) if matches!(plan.expect, Expectation::Rejected(_)) => {
                return Ok(ClusterResult::Skip(format!("{RESET}: {e}")))
            }
            Err(e) => return Err(e),
        };
        let result = judge_forms(plan, &baseline, &normalised, answer_now);
        let settled = matches!(result, ClusterResult::Pass | ClusterResult::Skip(_));
        if !expects_effect || settled || Instant::now() > deadline {
            return Ok(match (result, &plan.renamed_text) {
                (ClusterResult::Fail(_), Some(reason)) => ClusterResult::Skip(reason.clone()),
                (result, _) => result,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = send_request(&run.api, plan).await;
    }
}

/// `answer` under the case's own names: a policy may copy a namespace
/// name into the object, and a denial names the policy and binding.
fn in_original_names(plan: &Plan, answer: &Answer) -> Answer {
    match answer {
        Answer::Object { object, warnings } => Answer::Object {
            object: plan.original_names_in(object),
            warnings: warnings.iter().map(|w| plan.original_names(w)).collect(),
        },
        Answer::Refused { code, message } => Answer::Refused {
            code: *code,
            message: plan.original_names(message),
        },
    }
}

/// Whether `form`, the apiserver's refusal of an object, refuses it for
/// what it refuses `live` for: the same message, or every cause of `live`
/// among the causes of `form` (the object the apiserver defaulted before
/// the change may break more rules: a NodePort's allocated port).
fn same_refusal(form: &str, live: &str) -> bool {
    form == live
        || live
            .split_once(" is invalid: ")
            .is_some_and(|(_, causes)| !causes.is_empty() && form.contains(causes))
}

/// Holds the answer against each form of the normalised expectation: a
/// pass against any of them passes, as does a later form's refusal for
/// the live refusal's causes (skipped); otherwise the first form's verdict
/// stands.
fn judge_forms(plan: &Plan, baseline: &Json, forms: &[Answer], answer: Answer) -> ClusterResult {
    let mut first = None;
    for (i, form) in forms.iter().enumerate() {
        if i > 0 {
            if let (Answer::Refused { message, .. }, Answer::Refused { message: live, .. }) =
                (form, &answer)
            {
                // The object the apiserver holds before admission, changed
                // as the case changes it, is refused as the request with
                // the policies is: the change happened, and the apiserver's
                // validation refuses it where it defaulted first (a
                // NodePort's externalTrafficPolicy once a policy makes the
                // Service a ClusterIP).
                if same_refusal(message, live) && matches!(plan.expect, Expectation::Object(_)) {
                    return ClusterResult::Skip(format!(
                        "{EXPECTED_REFUSED}: {} (the object changed as the case changes it, \
                         defaulted before the change)",
                        plan.original_names(message)
                    ));
                }
            }
            if matches!(form, Answer::Refused { .. }) {
                continue;
            }
        }
        let result = judge(plan, baseline, form, answer.clone());
        if matches!(result, ClusterResult::Pass) {
            return result;
        }
        first.get_or_insert(result);
    }
    first.unwrap_or_else(|| ClusterResult::Fail("the case has no expectation to hold".into()))
}

/// Holds the answer against the case's expectation; `normalised` is the
/// apiserver's answer to the expected object with no policy in force
/// ([`compare`]).
fn judge(plan: &Plan, baseline: &Json, normalised: &Answer, answer: Answer) -> ClusterResult {
    let answer = in_original_names(plan, &answer);
    let normalised = in_original_names(plan, normalised);
    match (&plan.expect, answer) {
        (Expectation::Object(expected), Answer::Object { object, warnings }) => {
            let Answer::Object {
                object: normalised, ..
            } = normalised
            else {
                return ClusterResult::Fail(format!(
                    "the apiserver refuses the case's expected object with no policy in force \
                     ({}), but admitted the request with the policies: they did not make it; \
                     it gave\n{}",
                    refusal_text(&normalised),
                    serde_json::to_string_pretty(&compare::comparable(&object)).unwrap_or_default()
                ));
            };
            let verdict = compare::compare(
                &plan.original_names_in(&plan.object),
                &plan.original_names_in(expected),
                &plan.original_names_in(baseline),
                &normalised,
                &object,
            );
            let mut problems = match verdict {
                compare::Verdict::Pass => Vec::new(),
                compare::Verdict::Fail(p) => p,
                compare::Verdict::Unobservable => {
                    return ClusterResult::Skip(UNOBSERVABLE.to_string())
                }
            };
            if let Some(want) = &plan.warnings {
                for w in want {
                    if !warnings.iter().any(|got| got.contains(w.as_str())) {
                        problems.push(format!(
                            "warning {w:?} expected, the apiserver warned {warnings:?}"
                        ));
                    }
                }
            }
            if problems.is_empty() {
                ClusterResult::Pass
            } else {
                ClusterResult::Fail(format!(
                    "object differs from the apiserver's form of the expected object:\n  {}",
                    problems.join("\n  ")
                ))
            }
        }
        (Expectation::Object(_), Answer::Refused { code, message }) => {
            if let Answer::Refused {
                code: alone_code,
                message: alone,
            } = &normalised
            {
                // Both refused by validation, for other causes: the
                // policies made another object than the case expects
                // (a sidecar appended again on a reinvocation).
                if *alone_code == 422 && code == 422 && !same_refusal(alone, &message) {
                    return ClusterResult::Fail(format!(
                        "the apiserver refuses the case's expected object with no policy in \
                         force ({alone_code}: {alone}), and the request with the policies for \
                         other causes ({code}: {message}): the policies made another object"
                    ));
                }
                let answered = if *alone == message {
                    String::new()
                } else {
                    format!(" (with the policies: {message})")
                };
                return ClusterResult::Skip(format!("{EXPECTED_REFUSED}: {alone}{answered}"));
            }
            let hint = if message.contains("no params found") {
                PARAMS_HINT
            } else {
                ""
            };
            ClusterResult::Fail(format!(
                "expected the object, but the apiserver refused the request ({code}): {message}{hint}"
            ))
        }
        (Expectation::Rejected(text), Answer::Refused { message, .. }) => {
            if message.contains(text.as_str()) {
                ClusterResult::Pass
            } else {
                ClusterResult::Fail(format!(
                    "denied, but the message\n    {message}\ndoes not contain\n    {text}"
                ))
            }
        }
        (Expectation::Rejected(_), Answer::Object { object, .. }) => ClusterResult::Fail(format!(
            "expected a denial, but the apiserver admitted the request with\n{}",
            serde_json::to_string_pretty(&compare::without_volatile_metadata(&object))
                .unwrap_or_default()
        )),
    }
}

fn refusal_text(answer: &Answer) -> String {
    match answer {
        Answer::Refused { code, message } => format!("{code}: {message}"),
        Answer::Object { .. } => "admitted".into(),
    }
}

/// The CRDs of one phase, by name, and the plans that run with them.
struct Phase {
    crds: BTreeMap<String, Json>,
    plans: Vec<Plan>,
}

/// Groups plans so that the CRDs of each group agree (a CRD name defined
/// two ways by two cases runs in two phases).
fn phases(plans: Vec<Plan>) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    for plan in plans {
        let named: Vec<(String, Json)> = plan
            .crds
            .iter()
            .map(|c| {
                (
                    c["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    normalize(&c["spec"]),
                )
            })
            .collect();
        let fits = |p: &Phase| {
            named.iter().all(|(n, spec)| {
                p.crds
                    .get(n)
                    .is_none_or(|have| normalize(&have["spec"]) == *spec)
            })
        };
        let index = match out.iter().position(fits) {
            Some(i) => i,
            None => {
                out.push(Phase {
                    crds: BTreeMap::new(),
                    plans: Vec::new(),
                });
                out.len() - 1
            }
        };
        for c in &plan.crds {
            let name = c["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            out[index].crds.entry(name).or_insert_with(|| c.clone());
        }
        out[index].plans.push(plan);
    }
    out
}

fn crd_collection() -> Collection {
    Collection {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        resource: "customresourcedefinitions".into(),
        namespace: None,
    }
}

/// Creates (or replaces) the phase's CRDs and waits until each is
/// established; those it creates are deleted at the end of the run unless
/// `keep`.
async fn install_crds(
    run: &Run<'_>,
    crds: &BTreeMap<String, Json>,
    keep: bool,
) -> Result<(), ClusterError> {
    let collection = crd_collection();
    for (name, crd) in crds {
        let mut crd = crd.clone();
        if let Some(m) = crd.get_mut("metadata").and_then(Json::as_object_mut) {
            m.retain(|k, _| k == "name" || k == "labels" || k == "annotations");
        }
        let answer = run
            .api
            .create(&collection, &crd)
            .await
            .map_err(ClusterError::Cluster)?;
        match answer {
            Answer::Object { .. } if keep => {}
            Answer::Object { .. } => run.created.add(&collection, name),
            Answer::Refused { code: 409, .. } => {
                let current = run
                    .api
                    .get(&collection, name)
                    .await
                    .and_then(Answer::object)
                    .map_err(|e| ClusterError::Cluster(format!("CRD {name}: {e}")))?;
                if normalize(&current["spec"]) != normalize(&crd["spec"]) {
                    crd["metadata"]["resourceVersion"] =
                        current["metadata"]["resourceVersion"].clone();
                    run.api
                        .replace(&collection, name, &crd)
                        .await
                        .and_then(Answer::object)
                        .map_err(|e| ClusterError::Cluster(format!("replacing CRD {name}: {e}")))?;
                }
            }
            Answer::Refused { code, message } => {
                return Err(ClusterError::Cluster(format!(
                    "creating CRD {name}: {code}: {message}"
                )))
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for name in crds.keys() {
        loop {
            let current = run
                .api
                .get(&collection, name)
                .await
                .and_then(Answer::object)
                .map_err(|e| ClusterError::Cluster(format!("CRD {name}: {e}")))?;
            let established = current["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
            if established {
                break;
            }
            if Instant::now() > deadline {
                return Err(ClusterError::Cluster(format!(
                    "CRD {name} is not established after 30 s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// A tag for the run's names: 6 lower-case hex digits.
fn run_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mixed = (nanos as u64) ^ (u64::from(std::process::id()) << 20);
    format!("{:06x}", mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40)
}

async fn client(options: &ClusterOptions) -> Result<kube::Client, ClusterError> {
    let config = kube_config(options).await?;
    kube::Client::try_from(config).map_err(|e| ClusterError::Kubeconfig(e.to_string()))
}

async fn kube_config(options: &ClusterOptions) -> Result<kube::Config, ClusterError> {
    let kube_options = kube::config::KubeConfigOptions {
        context: options.context.clone(),
        ..Default::default()
    };
    let config = match &options.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ClusterError::Kubeconfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &kube_options)
                .await
                .map_err(|e| ClusterError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::from_kubeconfig(&kube_options)
            .await
            .map_err(|e| ClusterError::Kubeconfig(e.to_string()))?,
    };
    Ok(config)
}

/// One line of the report.
struct Reporter<'a> {
    out: Mutex<&'a mut (dyn Write + Send)>,
    total: usize,
    done: AtomicUsize,
    progress: bool,
}

impl Reporter<'_> {
    fn case(&self, name: &str, result: &ClusterResult) {
        let line = match result {
            ClusterResult::Pass => format!("ok {name}"),
            ClusterResult::Fail(msg) => format!("FAIL {name}\n    {}", msg.replace('\n', "\n    ")),
            ClusterResult::Skip(why) => format!("skip {name} ({why})"),
            ClusterResult::ExpectedFailure(why, how) => {
                format!("xfail {name} ({why})\n    {}", how.replace('\n', "\n    "))
            }
        };
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        if self.progress {
            eprint!("\r\x1b[K");
        }
        if let Ok(mut out) = self.out.lock() {
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        if self.progress {
            eprint!("[{done}/{}] {name}", self.total);
        }
    }

    fn line(&self, text: &str) {
        if let Ok(mut out) = self.out.lock() {
            let _ = writeln!(out, "{text}");
        }
    }
}

/// Runs every case under `paths` against the cluster, printing one line
/// per case to `out`, then `N passed, N failed, N skipped`.
pub fn run_cluster(
    paths: &[PathBuf],
    options: &ClusterOptions,
    out: &mut (dyn Write + Send),
) -> Result<ClusterSummary, ClusterError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_cluster_async(paths, options, out))
}

async fn run_cluster_async(
    paths: &[PathBuf],
    options: &ClusterOptions,
    out: &mut (dyn Write + Send),
) -> Result<ClusterSummary, ClusterError> {
    let started = Instant::now();
    let client = client(options).await?;
    let tag = run_tag();
    let mut summary = ClusterSummary::default();
    let reporter = Reporter {
        out: Mutex::new(out),
        total: 0,
        done: AtomicUsize::new(0),
        progress: options.progress,
    };
    let mut plans = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (index, case) in read_cases(paths).into_iter().enumerate() {
        match case {
            Err((name, msg)) => {
                reporter.case(&name, &ClusterResult::Fail(msg));
                summary.failed += 1;
            }
            Ok(case) if !seen.insert(case.name.clone()) => {
                let r = ClusterResult::Fail(format!("{}: duplicate case name", case.source));
                reporter.case(&case.name, &r);
                summary.failed += 1;
            }
            Ok(case) => match plan::plan(&case, index, &tag) {
                Planned::Run(mut p) => {
                    if options.implementation == Implementation::KmutateDev {
                        kmutate_dev::as_kmutate_dev(&mut p);
                    }
                    plans.push(*p)
                }
                Planned::Skip(why) => {
                    reporter.case(&case.name, &ClusterResult::Skip(why.clone()));
                    *summary.skipped.entry(skip_name(&why)).or_default() += 1;
                }
                Planned::Invalid(e) => {
                    reporter.case(&case.name, &ClusterResult::Fail(e));
                    summary.failed += 1;
                }
            },
        }
    }
    let reporter = Reporter {
        total: reporter.done.load(Ordering::SeqCst) + plans.len(),
        ..reporter
    };
    let run = Run {
        api: Apiserver::new(client),
        expected_failures: &options.expected_failures,
        implementation: options.implementation,
        control_namespace: format!("kmc-{tag}"),
        tag,
        created: Created::default(),
        sentinel: Sentinel {
            started: AtomicU64::new(0),
            active: tokio::sync::watch::Sender::new(0),
            probing: tokio::sync::Mutex::new(()),
        },
    };
    let tls_dir = std::env::temp_dir().join(format!("kmutate-conformance-{}", run.tag));
    let mut webhook = None;
    let work = async {
        if options.implementation == Implementation::KmutateDev {
            webhook = Some(install_kmutate_dev(&run, options, &tls_dir).await?);
        }
        run_phases(
            &run,
            phases(plans),
            options.jobs.max(1),
            &reporter,
            &mut summary,
        )
        .await
    };
    let outcome = tokio::select! {
        r = work => r,
        _ = tokio::signal::ctrl_c() => {
            reporter.line("interrupted: deleting what the run created");
            Err(ClusterError::Cluster("interrupted".into()))
        }
    };
    if options.progress {
        eprint!("\r\x1b[K");
    }
    let leftovers = run.delete_everything().await;
    for e in &leftovers {
        reporter.line(&format!("warning: cleanup: {e}"));
    }
    if let Some(server) = webhook {
        server.shutdown().await;
        if options.manage_webhook {
            let lease = Collection {
                group: "coordination.k8s.io".into(),
                version: "v1".into(),
                resource: "leases".into(),
                namespace: Some(kmutate_dev::LEASE_NAMESPACE.into()),
            };
            let name = kmutate_dev::lease_name(&webhook_name(&run.tag));
            if let Err(e) = run.api.delete(&lease, &name).await {
                reporter.line(&format!("warning: cleanup: {e}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tls_dir);
    outcome?;
    for (reason, n) in &summary.skipped {
        reporter.line(&format!("skipped {n}: {reason}"));
    }
    let skipped = summary.skipped_total();
    reporter.line(&format!(
        "{} passed, {} failed, {} skipped",
        summary.passed, summary.failed, skipped
    ));
    if options.progress {
        eprintln!("finished in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(summary)
}

/// Installs kmutate's CRDs where the cluster lacks them, starts kmutate's
/// webhook and registers it ([`kmutate_dev`]).
async fn install_kmutate_dev(
    run: &Run<'_>,
    options: &ClusterOptions,
    tls_dir: &std::path::Path,
) -> Result<crate::webhook::Server, ClusterError> {
    let crds = kmutate_dev::crds().map_err(ClusterError::Cluster)?;
    // They stay: a run after this one may find them still being deleted.
    install_crds(run, &crds, true).await?;
    let name = webhook_name(&run.tag);
    let managed = options.manage_webhook.then_some(name.as_str());
    let server = kmutate_dev::start_webhook(kube_config(options).await?, tls_dir, managed)
        .await
        .map_err(ClusterError::Cluster)?;
    let registration = kmutate_dev::webhook_configuration(&name, &server, managed.is_some())
        .map_err(ClusterError::Cluster)?;
    run.create_recorded(&kmutate_dev::webhook_collection(), &name, &registration)
        .await
        .map_err(|e| ClusterError::Cluster(format!("registering kmutate's webhook: {e}")))?;
    Ok(server)
}

/// The name of the run's MutatingWebhookConfiguration.
fn webhook_name(tag: &str) -> String {
    format!("kmc-{tag}-kmutate")
}

/// Reports the result of case `name` as `--expected-failures` says: a
/// listed failure as `xfail`, a listed case that passes with an `xpass`
/// line after it.
fn settle(
    run: &Run<'_>,
    reporter: &Reporter<'_>,
    name: &str,
    result: ClusterResult,
) -> ClusterResult {
    let result = as_listed(name, result, run.expected_failures);
    reporter.case(name, &result);
    if let (ClusterResult::Pass, Some(why)) = (&result, run.expected_failures.get(name)) {
        reporter.line(&format!(
            "xpass {name}: listed as expected to fail ({why}), it passes"
        ));
    }
    result
}

async fn run_phases(
    run: &Run<'_>,
    phases: Vec<Phase>,
    jobs: usize,
    reporter: &Reporter<'_>,
    summary: &mut ClusterSummary,
) -> Result<(), ClusterError> {
    let namespaces = Collection {
        group: String::new(),
        version: "v1".into(),
        resource: "namespaces".into(),
        namespace: None,
    };
    let control = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": run.control_namespace}});
    run.create_recorded(&namespaces, &run.control_namespace, &control)
        .await
        .map_err(|e| ClusterError::Cluster(format!("namespace {}: {e}", run.control_namespace)))?;
    let count = |summary: &mut ClusterSummary, result: &ClusterResult| match result {
        ClusterResult::Pass => summary.passed += 1,
        ClusterResult::Fail(_) => summary.failed += 1,
        ClusterResult::Skip(why) => *summary.skipped.entry(skip_name(why)).or_default() += 1,
        ClusterResult::ExpectedFailure(..) => {
            *summary.skipped.entry(EXPECTED_FAILURE.into()).or_default() += 1
        }
    };
    for phase in phases {
        install_crds(run, &phase.crds, false).await?;
        let (exclusive, shared): (Vec<Plan>, Vec<Plan>) =
            phase.plans.into_iter().partition(|p| p.exclusive);
        let mut results = futures::stream::iter(shared.iter().map(|plan| async move {
            settle(run, reporter, &plan.case, run_plan(run, plan).await)
        }))
        .buffer_unordered(jobs);
        while let Some(r) = results.next().await {
            count(summary, &r);
        }
        for plan in &exclusive {
            // The policies of the case before are out of force first.
            run.wait_for_policies()
                .await
                .map_err(ClusterError::Cluster)?;
            let r = settle(run, reporter, &plan.case, run_plan(run, plan).await);
            count(summary, &r);
        }
    }
    Ok(())
}

/// The name of the kept policy that makes the apiserver start the
/// informer of built-in param kind `kind`.
fn param_informer_policy(kind: &str) -> String {
    format!("kmutate-conformance-params-{}", kind.to_lowercase())
}

/// Installs, for each built-in param kind the cases under `paths` use, a
/// policy and binding that act on nothing and are kept: kube-apiserver
/// (v1.36.2 at least) starts the informer of a built-in param kind (a
/// ConfigMap) only for the policies it finds when it starts, so a policy
/// created later never finds its params. Restart the apiserver once after.
/// Returns the kinds.
pub fn install_param_informers(
    paths: &[PathBuf],
    options: &ClusterOptions,
) -> Result<Vec<String>, ClusterError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let api = Apiserver::new(client(options).await?);
        let table = crate::matching::ResourceTable::builtin();
        let mut kinds = std::collections::BTreeSet::new();
        for case in read_cases(paths).into_iter().flatten() {
            let Ok((policies, _)) = crate::conformance::policy_documents(&case) else {
                continue;
            };
            for p in policies {
                let param = &p["spec"]["paramKind"];
                let api_version = param["apiVersion"].as_str().unwrap_or_default();
                let kind = param["kind"].as_str().unwrap_or_default();
                let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
                let builtin = table.resource_for_kind(&crate::request::GroupVersionKind {
                    group: group.into(),
                    version: version.into(),
                    kind: kind.into(),
                });
                if builtin.is_some() {
                    kinds.insert((api_version.to_string(), kind.to_string()));
                }
            }
        }
        let (policies, bindings) = policy_collections();
        let mut installed = Vec::new();
        for (api_version, kind) in &kinds {
            let name = param_informer_policy(kind);
            let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
                "spec": {"paramKind": {"apiVersion": api_version, "kind": kind},
                    "matchConstraints": {
                        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                            "operations": ["CREATE"], "resources": ["configmaps"]}],
                        "namespaceSelector": {"matchLabels": {"kmutate.dev/never": "true"}}},
                    "failurePolicy": "Ignore", "reinvocationPolicy": "Never",
                    "mutations": [{"patchType": "ApplyConfiguration",
                        "applyConfiguration": {"expression": "Object{}"}}]}});
            let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
                "spec": {"policyName": name,
                    "paramRef": {"name": "none", "parameterNotFoundAction": "Allow"}}});
            for (c, o) in [(&policies, &policy), (&bindings, &binding)] {
                match api.create(c, o).await.map_err(ClusterError::Cluster)? {
                    Answer::Object { .. } | Answer::Refused { code: 409, .. } => {}
                    Answer::Refused { code, message } => {
                        return Err(ClusterError::Cluster(format!(
                            "creating {} {name}: {code}: {message}",
                            o["kind"].as_str().unwrap_or_default()
                        )))
                    }
                }
            }
            installed.push(format!("{api_version} {kind}"));
        }
        Ok(installed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_for_the_same_causes_is_the_same_refusal() {
        // kube-apiserver's field errors of a NodePort Service made a
        // ClusterIP: the request with the policy (no port allocated yet),
        // and the stored Service changed alike (its port allocated).
        let live = "Service \"web\" is invalid: spec.externalTrafficPolicy: Invalid value: \
                    \"Cluster\": may only be set for externally-accessible services";
        let form = "Service \"web\" is invalid: [spec.ports[0].nodePort: Forbidden: may not \
                    be used when `type` is 'ClusterIP', spec.externalTrafficPolicy: Invalid \
                    value: \"Cluster\": may only be set for externally-accessible services]";
        assert!(same_refusal(live, live));
        assert!(same_refusal(form, live));
        assert!(!same_refusal(live, form));
        assert!(!same_refusal(
            "Service \"web\" is invalid: spec.type: Unsupported value",
            live
        ));
    }

    /// The plan of a Pod CREATE whose policy appends a sidecar.
    fn sidecar_plan() -> Plan {
        let pod = |containers: Json| {
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"containers": containers}})
        };
        let sidecar = serde_json::json!({"name": "sidecar", "image": "s"});
        let doc = serde_json::json!({
            "name": "appends-a-sidecar",
            "policies": [{"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicy", "metadata": {"name": "p"},
                "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""],
                    "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                    "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
                        "[JSONPatch{op: 'add', path: '/spec/containers/-', value: {'name': 'sidecar', 'image': 's'}}]"}}]}}],
            "bindings": [{"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "b"},
                "spec": {"policyName": "p"}}],
            "object": pod(serde_json::json!([sidecar])),
            "expect": {"object": pod(serde_json::json!([sidecar, sidecar]))},
        });
        let case = crate::conformance::Case {
            name: "appends-a-sidecar".into(),
            source: crate::api::SourceRef {
                file: "t.yaml".into(),
                document: 0,
            },
            doc,
        };
        match plan::plan(&case, 0, "t") {
            Planned::Run(p) => *p,
            _ => panic!("the case does not plan"),
        }
    }

    #[test]
    fn a_refusal_for_other_causes_than_the_expected_objects_fails() {
        let plan = sidecar_plan();
        let refused = |code: u16, message: &str| Answer::Refused {
            code,
            message: message.into(),
        };
        let once = "Pod \"web\" is invalid: spec.containers[1].name: Duplicate value: \"sidecar\"";
        let thrice = "Pod \"web\" is invalid: [spec.containers[1].name: Duplicate value: \
                      \"sidecar\", spec.containers[2].name: Duplicate value: \"sidecar\"]";
        let baseline = plan.object.clone();
        // Refused as the expected object is: nothing more to see.
        let same = judge(&plan, &baseline, &refused(422, once), refused(422, once));
        assert!(
            matches!(&same, ClusterResult::Skip(r) if r.starts_with(EXPECTED_REFUSED)),
            "{same:?}"
        );
        // A sidecar appended once more: another object.
        let more = judge(&plan, &baseline, &refused(422, once), refused(422, thrice));
        assert!(
            matches!(&more, ClusterResult::Fail(r) if r.contains("another object")),
            "{more:?}"
        );
        // The expected object refused before validation (decoding): the
        // two refusals say nothing of each other.
        let decoding = "Pod in version \"v1\" cannot be handled as a Pod";
        let other_stage = judge(
            &plan,
            &baseline,
            &refused(400, decoding),
            refused(422, thrice),
        );
        assert!(
            matches!(&other_stage, ClusterResult::Skip(_)),
            "{other_stage:?}"
        );
    }

    #[test]
    fn a_listed_failure_is_expected_and_nothing_else_changes() {
        let listed = BTreeMap::from([("a".to_string(), "why".to_string())]);
        assert_eq!(
            as_listed("a", ClusterResult::Fail("how".into()), &listed),
            ClusterResult::ExpectedFailure("why".into(), "how".into())
        );
        assert_eq!(
            as_listed("b", ClusterResult::Fail("how".into()), &listed),
            ClusterResult::Fail("how".into())
        );
        assert_eq!(
            as_listed("a", ClusterResult::Pass, &listed),
            ClusterResult::Pass
        );
    }
}
