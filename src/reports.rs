//! `kmutate serve --policy-reports`: what monitored bindings would have
//! done, as wg-policy `PolicyReport` objects (`wgpolicyk8s.io/v1alpha2`,
//! `deploy/crds/policyreports.yaml`) that Policy Reporter and `kubectl get
//! polr` show: one report `kmutate-monitor` per namespace, and a
//! `ClusterPolicyReport` of the same name for cluster-scoped objects.
//!
//! The request path only hands a [`Finding`] to a bounded queue (dropped,
//! and counted, when full); a task aggregates them, one result per object,
//! policy and binding (the newest wins), at most [`MAX_RESULTS`] per report
//! (the oldest dropped), and writes a changed report at most once per
//! [`WRITE_INTERVAL`]. Replicas take turns with a Lease: the one holding it
//! reads each report, merges its own results into those of the others, and
//! writes it back unless it changed meanwhile; then it gives the Lease up.

use crate::registration::lease::LeaseLock;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

/// The Lease the replicas take turns with.
pub const LEASE_NAME: &str = "kmutate-policy-reports";
/// The name of kmutate's reports.
pub const REPORT_NAME: &str = "kmutate-monitor";
/// The most results one report keeps.
pub const MAX_RESULTS: usize = 200;
/// The least time between two writes of one report.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(5);
/// Findings waiting to be aggregated before new ones are dropped.
const QUEUE: usize = 10_000;

/// The object a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Subject {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Its namespace (empty: cluster-scoped).
    pub namespace: String,
    /// Its name (a `generateName` prefix for a create without a name).
    pub name: String,
    /// Its uid, when it has one yet (updates).
    pub uid: String,
}

/// What a monitored binding would have done to one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The object.
    pub subject: Subject,
    /// The policy.
    pub policy: String,
    /// The binding.
    pub binding: String,
    /// `Ok(paths set, paths removed)`: would have changed them; `Err`: would
    /// have failed with this message.
    pub outcome: Result<(Vec<String>, Vec<String>), String>,
    /// When it was found.
    pub at: SystemTime,
}

/// Where the request path hands findings over (cheap to clone).
#[derive(Debug, Clone)]
pub struct ReportSink {
    queue: mpsc::Sender<Finding>,
    dropped: Arc<AtomicU64>,
}

impl ReportSink {
    /// Hands `finding` over, or drops it when the queue is full.
    pub fn send(&self, finding: Finding) {
        if self.queue.try_send(finding).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Findings dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Starts the writer with `client`, taking turns through `lease`.
pub fn start(client: kube::Client, lease: LeaseLock) -> (ReportSink, tokio::task::JoinHandle<()>) {
    let (queue, findings) = mpsc::channel(QUEUE);
    let sink = ReportSink {
        queue,
        dropped: Arc::default(),
    };
    let writer = Writer {
        client,
        lease,
        reports: BTreeMap::new(),
    };
    (sink, tokio::spawn(writer.run(findings)))
}

/// One report's results as this replica knows them.
#[derive(Default)]
struct Pending {
    results: BTreeMap<ResultKey, Finding>,
    dirty: bool,
    written: Option<Instant>,
}

impl Pending {
    /// Keeps `finding` in place of an older one for the same object, policy
    /// and binding; over [`MAX_RESULTS`], the oldest goes.
    fn add(&mut self, finding: Finding) {
        let key = (
            finding.subject.clone(),
            finding.policy.clone(),
            finding.binding.clone(),
        );
        self.results.insert(key, finding);
        if self.results.len() > MAX_RESULTS {
            let oldest = self
                .results
                .iter()
                .min_by_key(|(_, f)| f.at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.results.remove(&oldest);
            }
        }
        self.dirty = true;
    }
}

/// A result's identity in a report: object, policy, binding.
type ResultKey = (Subject, String, String);

struct Writer {
    client: kube::Client,
    lease: LeaseLock,
    /// By namespace ("" for the ClusterPolicyReport).
    reports: BTreeMap<String, Pending>,
}

impl Writer {
    async fn run(mut self, mut findings: mpsc::Receiver<Finding>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                finding = findings.recv() => match finding {
                    Some(f) => self.add(f),
                    None => break,
                },
                _ = tick.tick() => self.write_due().await,
            }
        }
        self.lease.release().await;
    }

    fn add(&mut self, finding: Finding) {
        self.reports
            .entry(finding.subject.namespace.clone())
            .or_default()
            .add(finding);
    }

    /// Writes the changed reports whose interval has passed, holding the
    /// Lease while it does.
    async fn write_due(&mut self) {
        let due: Vec<String> = self
            .reports
            .iter()
            .filter(|(_, r)| r.dirty && r.written.is_none_or(|at| at.elapsed() >= WRITE_INTERVAL))
            .map(|(ns, _)| ns.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        match self.lease.hold().await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::debug!(error = %e, "PolicyReport Lease");
                return;
            }
        }
        for namespace in due {
            let Some(pending) = self.reports.get(&namespace) else {
                continue;
            };
            match write_report(&self.client, &namespace, pending).await {
                Ok(()) => {
                    if let Some(p) = self.reports.get_mut(&namespace) {
                        p.dirty = false;
                        p.written = Some(Instant::now());
                    }
                }
                Err(e) => {
                    tracing::warn!(namespace = %namespace, error = %e, "writing a PolicyReport")
                }
            }
        }
        self.lease.release().await;
    }
}

fn report_api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = api_resource_of(namespace);
    match namespace {
        "" => Api::all_with(client.clone(), &resource),
        ns => Api::namespaced_with(client.clone(), ns, &resource),
    }
}

/// Reads the report of `namespace`, merges `pending` into it and writes it
/// back (created when missing; refused, to be tried again, when another
/// replica wrote it meanwhile).
async fn write_report(
    client: &kube::Client,
    namespace: &str,
    pending: &Pending,
) -> Result<(), kube::Error> {
    let mine = pending.results.values().map(result_of).collect();
    put_report(client, namespace, REPORT_NAME, mine, true).await
}

fn api_resource_of(namespace: &str) -> ApiResource {
    let kind = if namespace.is_empty() {
        "ClusterPolicyReport"
    } else {
        "PolicyReport"
    };
    ApiResource {
        group: "wgpolicyk8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "wgpolicyk8s.io/v1alpha2".into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()),
    }
}

/// `theirs` (a report's results as stored) with `mine` in place of theirs
/// for the same object, policy and rule, newest first kept when over
/// [`MAX_RESULTS`].
fn merge_results(theirs: Vec<Json>, mine: Vec<Json>) -> Vec<Json> {
    let mine: BTreeMap<String, Json> = mine.into_iter().map(|r| (result_key(&r), r)).collect();
    let mut all: Vec<Json> = theirs
        .into_iter()
        .filter(|r| !mine.contains_key(&result_key(r)))
        .collect();
    all.extend(mine.into_values());
    let seconds = |r: &Json| r["timestamp"]["seconds"].as_i64().unwrap_or(0);
    all.sort_by_key(|r| std::cmp::Reverse(seconds(r)));
    all.truncate(MAX_RESULTS);
    all.sort_by_cached_key(result_key);
    all
}

/// A stored result's identity: its object, policy and rule (binding).
fn result_key(result: &Json) -> String {
    let resource = &result["resources"][0];
    format!(
        "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
        resource["apiVersion"].as_str().unwrap_or_default(),
        resource["kind"].as_str().unwrap_or_default(),
        resource["namespace"].as_str().unwrap_or_default(),
        resource["name"].as_str().unwrap_or_default(),
        result["policy"].as_str().unwrap_or_default(),
        result["rule"].as_str().unwrap_or_default(),
    )
}

/// The wg-policy result of `finding`: `warn` for a change not applied,
/// `error` for an error not enforced; the binding is the rule.
pub fn result_of(finding: &Finding) -> Json {
    let (result, message, set, removed) = match &finding.outcome {
        Ok((set, removed)) => {
            let mut parts = Vec::new();
            if !set.is_empty() {
                parts.push(format!("set {}", set.join(", ")));
            }
            if !removed.is_empty() {
                parts.push(format!("removed {}", removed.join(", ")));
            }
            let message = format!(
                "would have {} (monitor mode: not applied)",
                parts.join("; ")
            );
            ("warn", message, set.as_slice(), removed.as_slice())
        }
        Err(message) => (
            "error",
            format!("would have failed (monitor mode: not enforced): {message}"),
            &[][..],
            &[][..],
        ),
    };
    result_entry(&ResultFields {
        subject: &finding.subject,
        policy: &finding.policy,
        rule: &finding.binding,
        result,
        message,
        set,
        removed,
        at: finding.at,
    })
}

/// What a wg-policy result says.
pub struct ResultFields<'a> {
    /// The object.
    pub subject: &'a Subject,
    /// The policy.
    pub policy: &'a str,
    /// The rule: the binding.
    pub rule: &'a str,
    /// `pass`, `fail`, `warn`, `error` or `skip`.
    pub result: &'a str,
    /// The message (shortened to 1,024 characters).
    pub message: String,
    /// Paths set (a property).
    pub set: &'a [String],
    /// Paths removed (a property).
    pub removed: &'a [String],
    /// When it was found.
    pub at: SystemTime,
}

/// One wg-policy `PolicyReportResult`.
pub fn result_entry(fields: &ResultFields<'_>) -> Json {
    let at = fields
        .at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let s = fields.subject;
    let mut resource = json!({"apiVersion": s.api_version, "kind": s.kind, "name": s.name});
    if !s.namespace.is_empty() {
        resource["namespace"] = json!(s.namespace);
    }
    if !s.uid.is_empty() {
        resource["uid"] = json!(s.uid);
    }
    let shorten = |text: &str| -> String { text.chars().take(1024).collect() };
    let mut properties = BTreeMap::new();
    if !fields.set.is_empty() {
        properties.insert("set", shorten(&fields.set.join(", ")));
    }
    if !fields.removed.is_empty() {
        properties.insert("removed", shorten(&fields.removed.join(", ")));
    }
    let mut out = json!({
        "source": "kmutate",
        "policy": fields.policy,
        "rule": fields.rule,
        "category": "mutation",
        "result": fields.result,
        "scored": false,
        "timestamp": {"seconds": at.as_secs(), "nanos": at.subsec_nanos()},
        "resources": [resource],
        "message": shorten(&fields.message),
    });
    if !properties.is_empty() {
        out["properties"] = json!(properties);
    }
    out
}

/// The report `name` of `namespace` (a ClusterPolicyReport for ""), with
/// `results` and their summary; `metadata` of a stored one is kept.
pub fn report_object(
    namespace: &str,
    name: &str,
    results: Vec<Json>,
    stored: Option<DynamicObject>,
) -> DynamicObject {
    let count = |r: &str| results.iter().filter(|x| x["result"] == r).count();
    let summary = json!({"pass": count("pass"), "fail": count("fail"),
        "warn": count("warn"), "error": count("error"), "skip": count("skip")});
    let mut object = stored.unwrap_or_else(|| {
        let mut o = DynamicObject::new(name, &api_resource_of(namespace));
        if !namespace.is_empty() {
            o.metadata.namespace = Some(namespace.into());
        }
        o.metadata.labels = Some(
            [(
                "app.kubernetes.io/managed-by".to_string(),
                "kmutate".to_string(),
            )]
            .into(),
        );
        o
    });
    object.data["summary"] = summary;
    object.data["results"] = Json::Array(results);
    object
}

/// Writes the report `name` of `namespace` with `results`: in place of
/// the stored results, or, with `merge`, in place of those for the same
/// object, policy and rule (newest kept over [`MAX_RESULTS`]). Refused
/// when another writer wrote it meanwhile.
pub async fn put_report(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    results: Vec<Json>,
    merge: bool,
) -> Result<(), kube::Error> {
    let api = report_api(client, namespace);
    let existing = api.get_opt(name).await?;
    let results = match (&existing, merge) {
        (Some(stored), true) => {
            let theirs = stored.data["results"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            merge_results(theirs, results)
        }
        _ => results,
    };
    let exists = existing.is_some();
    let object = report_object(namespace, name, results, existing);
    if exists {
        api.replace(name, &PostParams::default(), &object).await?;
    } else {
        api.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(name: &str, policy: &str, seconds: u64) -> Finding {
        Finding {
            subject: Subject {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: "shop".into(),
                name: name.into(),
                uid: String::new(),
            },
            policy: policy.into(),
            binding: policy.into(),
            outcome: Ok((vec!["metadata.labels.b".into()], Vec::new())),
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(seconds),
        }
    }

    #[test]
    fn a_result_says_what_would_have_changed_or_failed() {
        let changed = result_of(&finding("web", "watched", 7));
        assert_eq!(
            changed,
            json!({"source": "kmutate", "policy": "watched", "rule": "watched",
                "category": "mutation", "result": "warn", "scored": false,
                "timestamp": {"seconds": 7, "nanos": 0},
                "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "shop"}],
                "message": "would have set metadata.labels.b (monitor mode: not applied)",
                "properties": {"set": "metadata.labels.b"}})
        );
        let mut failed = finding("web", "broken", 7);
        failed.outcome = Err("no such key: missing".into());
        let failed = result_of(&failed);
        assert_eq!(failed["result"], "error");
        assert_eq!(
            failed["message"],
            "would have failed (monitor mode: not enforced): no such key: missing"
        );
    }

    #[test]
    fn results_merge_by_object_policy_and_binding_and_stay_bounded() {
        let mine = vec![result_of(&finding("web", "p", 9))];
        // Another replica's result for the same object and policy, older,
        // and one for another object.
        let theirs = vec![
            result_of(&finding("web", "p", 1)),
            result_of(&finding("api", "p", 2)),
        ];
        let all = merge_results(theirs, mine);
        assert_eq!(all.len(), 2);
        let web = all
            .iter()
            .find(|r| r["resources"][0]["name"] == "web")
            .unwrap();
        assert_eq!(web["timestamp"]["seconds"], 9);
        // Over the bound: the oldest go.
        let many: Vec<Json> = (0..MAX_RESULTS as u64 + 10)
            .map(|i| result_of(&finding(&format!("o{i}"), "p", 100 + i)))
            .collect();
        let kept = merge_results(many, Vec::new());
        assert_eq!(kept.len(), MAX_RESULTS);
        assert!(kept
            .iter()
            .all(|r| r["timestamp"]["seconds"].as_u64().unwrap() >= 110));
    }

    #[test]
    fn a_replica_keeps_one_result_per_object_and_the_newest_ones() {
        let mut pending = Pending::default();
        pending.add(finding("web", "p", 1));
        pending.add(finding("web", "p", 2));
        assert_eq!(pending.results.len(), 1);
        assert!(pending.dirty);
        for i in 0..MAX_RESULTS as u64 + 5 {
            pending.add(finding(&format!("o{i}"), "p", 10 + i));
        }
        assert_eq!(pending.results.len(), MAX_RESULTS);
        assert!(pending
            .results
            .values()
            .all(|f| f.at >= SystemTime::UNIX_EPOCH + Duration::from_secs(15)));
    }
}
