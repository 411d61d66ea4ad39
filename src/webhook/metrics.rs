//! The webhook's Prometheus metrics (OpenMetrics text on `/metrics`).
//!
//! Upstream's per-policy metrics, with its names, labels and buckets
//! (`k8s.io/apiserver/pkg/admission/plugin/policy/mutating/metrics`):
//! `apiserver_mutating_admission_policy_check_total` and
//! `apiserver_mutating_admission_policy_check_duration_seconds`, labelled by
//! `policy`, `policy_binding` and `error_type`, observed once per mutation
//! evaluation. Then kmutate's own: requests and their latency by operation,
//! resource and result, policies loaded, load problems, reinvocations,
//! certificate reloads and build info.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upstream's `check_duration_seconds` buckets.
pub const CHECK_BUCKETS: [f64; 5] = [0.0000005, 0.001, 0.01, 0.1, 1.0];

/// Buckets of `kmutate_webhook_request_duration_seconds`.
pub const REQUEST_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Upstream's `MutationErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// The mutation ran without error.
    NoError,
    /// An expression did not compile.
    CompileError,
    /// Any other evaluation or patch error.
    InvalidError,
    /// The cost budget ran out.
    OutOfBudget,
}

impl ErrorType {
    /// Upstream's `ErrorType(err)`: by the error message's prefix.
    pub fn of(error: Option<&str>) -> ErrorType {
        match error {
            None => ErrorType::NoError,
            Some(e) if e.starts_with("compilation") => ErrorType::CompileError,
            Some(e) if e.starts_with("validation failed due to running out of cost budget") => {
                ErrorType::OutOfBudget
            }
            Some(_) => ErrorType::InvalidError,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::NoError => "no_error",
            ErrorType::CompileError => "compile_error",
            ErrorType::InvalidError => "invalid_error",
            ErrorType::OutOfBudget => "out_of_budget",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    policy: String,
    policy_binding: String,
    error_type: &'static str,
}

/// How a request ended, the `result` label of the request metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestResult {
    /// Admitted unchanged.
    Allowed,
    /// Admitted with a patch.
    Patched,
    /// Denied by a policy.
    Denied,
    /// Evaluation ran past `--timeout`; failure policies applied.
    Timeout,
    /// Evaluation panicked; answered with an internal error.
    Panic,
    /// Not an AdmissionReview (HTTP 400).
    Invalid,
    /// Body over the limit (HTTP 413).
    TooLarge,
}

impl RequestResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestResult::Allowed => "allowed",
            RequestResult::Patched => "patched",
            RequestResult::Denied => "denied",
            RequestResult::Timeout => "timeout",
            RequestResult::Panic => "panic",
            RequestResult::Invalid => "invalid",
            RequestResult::TooLarge => "too_large",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: String,
    resource: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BindingLabels {
    policy: String,
    binding: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// The two metrics of one check series, found once and then kept per
/// thread: each request observes a check per mutation, and finding the
/// series in its families means two label strings and two lookups.
struct CheckSeries {
    policy: Box<str>,
    binding: Box<str>,
    total: Counter,
    duration: Histogram,
}

/// Series kept before the cache is emptied (policies come and go with
/// reloads, so its keys are not bounded by the policies loaded now).
const CHECK_SERIES_KEPT: usize = 4096;

/// The series a thread has used, by metrics instance, the addresses of the
/// policy and binding names as the engine holds them, and error type. A
/// hit is checked against the names: an address reused for another name
/// after a reload finds the entry replaced.
type CheckSeriesCache =
    HashMap<(u64, usize, usize, ErrorType), CheckSeries, foldhash::fast::RandomState>;

/// The binding counters a thread has used, by metrics instance and family,
/// then policy, then binding.
type BindingSeriesCache =
    HashMap<(u64, char), HashMap<String, HashMap<String, Counter, FastHash>, FastHash>, FastHash>;

/// The hasher of the thread's series caches.
type FastHash = foldhash::fast::RandomState;

thread_local! {
    static CHECK_SERIES: RefCell<CheckSeriesCache> = RefCell::default();
    static BINDING_SERIES: RefCell<BindingSeriesCache> = RefCell::default();
}

/// Numbers [`Metrics`] instances, so that no two share cached series.
static NEXT_METRICS_ID: AtomicU64 = AtomicU64::new(0);

fn binding_labels(policy: &str, binding: &str) -> BindingLabels {
    BindingLabels {
        policy: policy.into(),
        binding: binding.into(),
    }
}

fn check_histogram() -> Histogram {
    Histogram::new(CHECK_BUCKETS)
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

/// Every metric of the webhook, and the registry that encodes them. (Help
/// texts are given without their final period: the encoder adds it.)
pub struct Metrics {
    id: u64,
    registry: Registry,
    check_total: Family<CheckLabels, Counter>,
    check_duration: Family<CheckLabels, Histogram, fn() -> Histogram>,
    requests: Family<RequestLabels, Counter>,
    request_duration: Family<RequestLabels, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    policies_loaded: Gauge,
    bindings_loaded: Gauge,
    load_errors: Gauge,
    reinvocations: Counter,
    handed_over: Counter,
    hand_overs_unreached: Counter,
    cert_reloads: Family<ReloadLabels, Counter>,
    namespace_lookups: Family<ReloadLabels, Counter>,
    mutations_applied: Family<BindingLabels, Counter>,
    monitor_changes: Family<BindingLabels, Counter>,
    monitor_errors: Family<BindingLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let check_total = Family::<CheckLabels, Counter>::default();
        registry.register(
            "apiserver_mutating_admission_policy_check",
            "Mutation admission policy check total, labeled by policy and further identified by binding",
            check_total.clone(),
        );
        let check_duration =
            Family::<CheckLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                check_histogram,
            );
        registry.register(
            "apiserver_mutating_admission_policy_check_duration_seconds",
            "Mutation admission latency for individual mutation expressions in seconds, labeled by policy and binding",
            check_duration.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "kmutate_webhook_requests",
            "AdmissionReview requests answered, by operation, resource and result",
            requests.clone(),
        );
        let request_duration =
            Family::<RequestLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                request_histogram,
            );
        registry.register(
            "kmutate_webhook_request_duration_seconds",
            "Time from a request's headers to its answer, by operation, resource and result",
            request_duration.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "kmutate_webhook_requests_in_flight",
            "AdmissionReview requests being handled",
            in_flight.clone(),
        );
        let policies_loaded = Gauge::default();
        registry.register(
            "kmutate_policies_loaded",
            "MutatingAdmissionPolicies loaded",
            policies_loaded.clone(),
        );
        let bindings_loaded = Gauge::default();
        registry.register(
            "kmutate_bindings_loaded",
            "MutatingAdmissionPolicyBindings loaded",
            bindings_loaded.clone(),
        );
        let load_errors = Gauge::default();
        registry.register(
            "kmutate_policy_load_errors",
            "Problems found loading policies, bindings and resources (unreadable or invalid documents, compile errors, bindings of missing policies)",
            load_errors.clone(),
        );
        let reinvocations = Counter::default();
        registry.register(
            "kmutate_reinvocations",
            "Admissions that ran the reinvocation pass of IfNeeded policies",
            reinvocations.clone(),
        );
        let handed_over = Counter::default();
        registry.register(
            "kmutate_reinvocation_answers_handed_over",
            "Remembered answers a stopping replica handed to its peers (--peers)",
            handed_over.clone(),
        );
        let hand_overs_unreached = Counter::default();
        registry.register(
            "kmutate_reinvocation_hand_overs_unreached",
            "Hand-overs of a stopping replica that reached no peer",
            hand_overs_unreached.clone(),
        );
        let cert_reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "kmutate_certificate_reloads",
            "Serving certificate reloads after the files changed, by result",
            cert_reloads.clone(),
        );
        let namespace_lookups = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "kmutate_namespace_lookups",
            "Live GETs of a request's Namespace the watch had not delivered yet, by result (found, not_found, error, timeout)",
            namespace_lookups.clone(),
        );
        let mutations_applied = Family::<BindingLabels, Counter>::default();
        registry.register(
            "kmutate_mutations_applied",
            "Admitted objects a binding's mutations changed, by policy and binding",
            mutations_applied.clone(),
        );
        let monitor_changes = Family::<BindingLabels, Counter>::default();
        registry.register(
            "kmutate_monitor_changes",
            "Admitted objects a monitored binding would have changed (not applied), by policy and binding",
            monitor_changes.clone(),
        );
        let monitor_errors = Family::<BindingLabels, Counter>::default();
        registry.register(
            "kmutate_monitor_errors",
            "Errors of monitored bindings (reported, not enforced), by policy and binding",
            monitor_errors.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "kmutate_build_info",
            "Always 1, labelled by the kmutate version",
            build_info.clone(),
        );
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        Metrics {
            id: NEXT_METRICS_ID.fetch_add(1, Ordering::Relaxed),
            registry,
            check_total,
            check_duration,
            requests,
            request_duration,
            in_flight,
            policies_loaded,
            bindings_loaded,
            load_errors,
            reinvocations,
            handed_over,
            hand_overs_unreached,
            cert_reloads,
            namespace_lookups,
            mutations_applied,
            monitor_changes,
            monitor_errors,
        }
    }

    /// A binding changed an admitted object (`monitored`: would have).
    pub fn observe_binding_change(&self, policy: &str, binding: &str, monitored: bool) {
        let (family, kind) = match monitored {
            true => (&self.monitor_changes, 'm'),
            false => (&self.mutations_applied, 'a'),
        };
        self.binding_counter(family, kind, policy, binding).inc();
    }

    /// A monitored binding failed.
    pub fn observe_monitor_error(&self, policy: &str, binding: &str) {
        self.binding_counter(&self.monitor_errors, 'e', policy, binding)
            .inc();
    }

    /// The counter of `policy` and `binding` in `family` (`kind` tells the
    /// families apart), found once per thread: each admission counts one per
    /// binding that changed the object, and finding it in the family takes
    /// two label strings and a lock. The thread's cache is looked up by the
    /// names as they are (nested maps), with nothing formatted.
    fn binding_counter(
        &self,
        family: &Family<BindingLabels, Counter>,
        kind: char,
        policy: &str,
        binding: &str,
    ) -> Counter {
        BINDING_SERIES.with_borrow_mut(|cache| {
            if let Some(counter) = cache
                .get(&(self.id, kind))
                .and_then(|policies| policies.get(policy))
                .and_then(|bindings| bindings.get(binding))
            {
                return counter.clone();
            }
            if cache
                .values()
                .flat_map(|p| p.values())
                .map(|b| b.len())
                .sum::<usize>()
                >= CHECK_SERIES_KEPT
            {
                cache.clear();
            }
            let counter = family
                .get_or_create(&binding_labels(policy, binding))
                .clone();
            cache
                .entry((self.id, kind))
                .or_default()
                .entry(policy.to_string())
                .or_default()
                .insert(binding.to_string(), counter.clone());
            counter
        })
    }

    /// One mutation evaluation (upstream `ObserveAdmission`/`ObserveRejection`).
    pub fn observe_check(&self, policy: &str, binding: &str, elapsed: Duration, error: ErrorType) {
        let key = (
            self.id,
            policy.as_ptr() as usize,
            binding.as_ptr() as usize,
            error,
        );
        CHECK_SERIES.with_borrow_mut(|cache| {
            if cache.len() >= CHECK_SERIES_KEPT && !cache.contains_key(&key) {
                cache.clear();
            }
            let series = cache
                .entry(key)
                .or_insert_with(|| self.check_series(policy, binding, error));
            if *series.policy != *policy || *series.binding != *binding {
                *series = self.check_series(policy, binding, error);
            }
            series.total.inc();
            series.duration.observe(elapsed.as_secs_f64());
        });
    }

    fn check_series(&self, policy: &str, binding: &str, error: ErrorType) -> CheckSeries {
        let labels = CheckLabels {
            policy: policy.to_string(),
            policy_binding: binding.to_string(),
            error_type: error.as_str(),
        };
        CheckSeries {
            policy: policy.into(),
            binding: binding.into(),
            total: self.check_total.get_or_create(&labels).clone(),
            duration: self.check_duration.get_or_create(&labels).clone(),
        }
    }

    /// One answered request.
    pub fn observe_request(
        &self,
        operation: &str,
        resource: &str,
        result: RequestResult,
        elapsed: Duration,
    ) {
        let labels = RequestLabels {
            operation: operation.to_string(),
            resource: resource.to_string(),
            result: result.as_str(),
        };
        self.requests.get_or_create(&labels).inc();
        self.request_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// The in-flight gauge.
    pub fn in_flight(&self) -> &Gauge {
        &self.in_flight
    }

    /// A reinvocation pass ran.
    pub fn observe_reinvocation(&self) {
        self.reinvocations.inc();
    }

    /// A stopping replica's hand-over of `answers` reached `peers` peers.
    pub fn observe_hand_over(&self, answers: usize, peers: usize) {
        if peers > 0 {
            self.handed_over.inc_by(answers as u64);
        } else if answers > 0 {
            self.hand_overs_unreached.inc();
        }
    }

    /// The loaded configuration's size and problems.
    pub fn set_loaded(&self, policies: usize, bindings: usize, problems: usize) {
        let clamp = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.policies_loaded.set(clamp(policies));
        self.bindings_loaded.set(clamp(bindings));
        self.load_errors.set(clamp(problems));
    }

    /// Exports both reload counters at 0 before any reload: a counter
    /// born at 1 has no increase to see, and the first failed reload of a
    /// replica would go unalerted (deploy/prometheus-rules.yaml).
    pub fn init_cert_reloads(&self) {
        for result in ["success", "error"] {
            let _ = self.cert_reloads.get_or_create(&ReloadLabels { result });
        }
    }

    /// A certificate reload, successful or not.
    pub fn observe_cert_reload(&self, ok: bool) {
        self.cert_reloads
            .get_or_create(&ReloadLabels {
                result: if ok { "success" } else { "error" },
            })
            .inc();
    }

    /// A live lookup of a Namespace missing from the watched ones, by
    /// result: `found`, `not_found`, `error` or `timeout`.
    pub fn observe_namespace_lookup(&self, result: &'static str) {
        self.namespace_lookups
            .get_or_create(&ReloadLabels { result })
            .inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of [`Metrics::encode`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl crate::engine::LoadObserver for Metrics {
    fn loaded(&self, policies: usize, bindings: usize, problems: usize) {
        self.set_loaded(policies, bindings, problems);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_series_are_found_by_name() {
        let (a, b) = (Metrics::new(), Metrics::new());
        let observe = |m: &Metrics, policy: String, binding: &str| {
            m.observe_check(
                &policy,
                binding,
                Duration::from_micros(3),
                ErrorType::NoError,
            );
        };
        // The same names in other strings, and other names, possibly at
        // the addresses of strings dropped before.
        for _ in 0..3 {
            observe(&a, "p".to_string(), "b");
        }
        observe(&a, "q".to_string(), "b");
        observe(&a, "p".to_string(), "c");
        observe(&b, "p".to_string(), "b");
        let count = |m: &Metrics, policy: &str, binding: &str| {
            let series = format!(
                "apiserver_mutating_admission_policy_check_total{{policy=\"{policy}\",policy_binding=\"{binding}\",error_type=\"no_error\"}} "
            );
            m.encode()
                .lines()
                .find_map(|l| l.strip_prefix(&series).map(str::to_string))
        };
        assert_eq!(count(&a, "p", "b").as_deref(), Some("3"));
        assert_eq!(count(&a, "q", "b").as_deref(), Some("1"));
        assert_eq!(count(&a, "p", "c").as_deref(), Some("1"));
        assert_eq!(count(&b, "p", "b").as_deref(), Some("1"));
        assert_eq!(count(&b, "q", "b"), None);
        let text = a.encode();
        assert!(
            text.contains("apiserver_mutating_admission_policy_check_duration_seconds_count{policy=\"p\",policy_binding=\"b\",error_type=\"no_error\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn upstream_names_labels_and_buckets() {
        let m = Metrics::new();
        m.observe_check(
            "p",
            "b",
            Duration::from_micros(3),
            ErrorType::of(Some("compilation failed: ERROR: <input>:1:1: x")),
        );
        m.observe_check("p", "b", Duration::from_micros(3), ErrorType::of(None));
        m.observe_request(
            "CREATE",
            "pods",
            RequestResult::Patched,
            Duration::from_micros(300),
        );
        m.set_loaded(3, 4, 1);
        let text = m.encode();
        assert!(text.contains(
            "apiserver_mutating_admission_policy_check_total{policy=\"p\",policy_binding=\"b\",error_type=\"compile_error\"} 1"
        ), "{text}");
        assert!(text.contains(
            "apiserver_mutating_admission_policy_check_duration_seconds_bucket{le=\"5e-7\",policy=\"p\",policy_binding=\"b\",error_type=\"no_error\"} 0"
        ) || text.contains(
            "apiserver_mutating_admission_policy_check_duration_seconds_bucket{le=\"0.0000005\",policy=\"p\",policy_binding=\"b\",error_type=\"no_error\"} 0"
        ), "{text}");
        assert!(text.contains(
            "kmutate_webhook_requests_total{operation=\"CREATE\",resource=\"pods\",result=\"patched\"} 1"
        ), "{text}");
        assert!(text.contains("kmutate_policies_loaded 3"), "{text}");
        assert!(text.contains(
            "# HELP apiserver_mutating_admission_policy_check Mutation admission policy check total, labeled by policy and further identified by binding.\n"
        ), "{text}");
        assert!(text.contains("kmutate_policy_load_errors 1"), "{text}");
        assert!(text.contains("kmutate_build_info{version="), "{text}");
        assert_eq!(
            ErrorType::of(Some(
                "validation failed due to running out of cost budget, no further validation rules will be run"
            )),
            ErrorType::OutOfBudget
        );
        assert_eq!(
            ErrorType::of(Some("expression 'x' resulted in error: y")),
            ErrorType::InvalidError
        );
    }
}
