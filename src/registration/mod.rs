//! `kmutate serve --manage-webhook NAME`: the rules of the
//! MutatingWebhookConfiguration `NAME` follow the loaded policies, so that
//! kube-apiserver calls kmutate only for requests a binding can match
//! ([`crate::matching::webhook_rules`]) instead of for every write in the
//! cluster.
//!
//! The order of a change is what keeps requests from being missed: a
//! policy set that needs wider rules is published only once the
//! configuration sends what it matches (the [`PublishGate`] waits for it),
//! and rules are narrowed only after the set that needed them is no longer
//! served. One replica writes, the holder of a Lease ([`lease`]); the
//! others read the configuration and wait for it in the same way. Writes
//! come at most once a second, and only the webhooks' `rules` are written:
//! selectors, client configuration and failure policy stay the operator's,
//! and an annotation ([`configuration::CEILING_ANNOTATION`]) bounds what
//! kmutate may ever ask for.

pub mod configuration;
pub mod lease;

use crate::engine::Engine;
use crate::matching::webhook_rules::{union, webhook_rules, WebhookRule};
use crate::source::PublishGate;
use configuration::Registration;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::Api;
use lease::LeaseLock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// At most one write of the rules in this time.
pub const WRITE_INTERVAL: Duration = Duration::from_secs(1);
/// How often the configuration and the Lease are read while nothing waits.
const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// How often the configuration is read while a policy set waits for it.
const WAITING_POLL_INTERVAL: Duration = Duration::from_millis(200);
/// How long a policy set waits for rules that send its requests before it
/// is served anyway (the Lease's holder may be gone, or the ceiling may
/// keep them out).
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// The rules the served policy set needs, and those of the set about to be.
#[derive(Clone, Debug, Default)]
struct Wanted {
    serving: Option<Arc<Vec<WebhookRule>>>,
    preparing: Option<Arc<Vec<WebhookRule>>>,
}

impl Wanted {
    /// What the configuration must send now; none before the first set.
    fn rules(&self) -> Option<Vec<WebhookRule>> {
        match (&self.serving, &self.preparing) {
            (Some(a), Some(b)) => Some(union(a, b)),
            (Some(a), None) | (None, Some(a)) => Some(a.to_vec()),
            (None, None) => None,
        }
    }
}

/// The configuration as last read.
#[derive(Clone, Debug)]
enum Observed {
    Unread,
    Missing,
    Read(Registration),
}

/// Keeps the rules of one MutatingWebhookConfiguration equal to what the
/// served policies can match.
pub struct RuleKeeper {
    name: String,
    api: Api<MutatingWebhookConfiguration>,
    wanted: watch::Sender<Wanted>,
    observed: watch::Sender<Observed>,
    stop: watch::Sender<bool>,
    /// The rules of the last policy set seen, by its compiled set's address.
    last: Mutex<Option<(usize, Arc<Vec<WebhookRule>>)>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for RuleKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleKeeper")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RuleKeeper {
    /// Starts keeping the rules of the configuration `name`, writing them
    /// while holding `lease`.
    pub fn start(client: kube::Client, name: &str, lease: LeaseLock) -> Arc<RuleKeeper> {
        let keeper = Arc::new(RuleKeeper {
            name: name.into(),
            api: Api::all(client),
            wanted: watch::Sender::new(Wanted::default()),
            observed: watch::Sender::new(Observed::Unread),
            stop: watch::Sender::new(false),
            last: Mutex::new(None),
            task: Mutex::new(None),
        });
        let task = tokio::spawn(keeper.clone().run(lease));
        *keeper.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        keeper
    }

    /// Stops writing and gives the Lease up; waits at most `limit`.
    pub async fn stop(&self, limit: Duration) {
        self.stop.send_replace(true);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(limit, task).await;
        }
    }

    /// The rules `engine`'s policies need (computed once per policy set).
    fn rules_of(&self, engine: &Engine) -> Arc<Vec<WebhookRule>> {
        let key = Arc::as_ptr(engine.compiled()) as usize;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, rules)) = last.as_ref() {
            if *k == key {
                return rules.clone();
            }
        }
        let set = engine.policy_set();
        let rules = Arc::new(webhook_rules(set.policies(), set.bindings()));
        *last = Some((key, rules.clone()));
        rules
    }

    async fn run(self: Arc<Self>, mut lease: LeaseLock) {
        let mut wanted = self.wanted.subscribe();
        let mut stop = self.stop.subscribe();
        let mut last_write: Option<Instant> = None;
        let mut leading = false;
        let mut problem: Option<String> = None;
        loop {
            let held = match lease.hold().await {
                Ok(held) => held,
                Err(e) => {
                    report(&mut problem, format!("Lease: {e}"));
                    false
                }
            };
            if held != leading {
                leading = held;
                tracing::info!(
                    configuration = %self.name,
                    identity = lease.identity(),
                    leading,
                    "{}",
                    if leading {
                        "holding the Lease: this replica writes the webhook rules"
                    } else {
                        "another replica writes the webhook rules"
                    }
                );
            }
            let wait = self.step(leading, &mut last_write, &mut problem).await;
            let interval = match self.wanted.borrow().preparing.is_some() {
                true => WAITING_POLL_INTERVAL,
                false => POLL_INTERVAL,
            };
            tokio::select! {
                _ = wanted.changed() => {}
                _ = tokio::time::sleep(wait.unwrap_or(interval)) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        lease.release().await;
    }

    /// Reads the configuration and, holding the Lease, writes the rules
    /// wanted if they differ; returns how long to wait for the next write
    /// when one is due but too soon.
    async fn step(
        &self,
        leading: bool,
        last_write: &mut Option<Instant>,
        problem: &mut Option<String>,
    ) -> Option<Duration> {
        let read = match Registration::read(&self.api, &self.name).await {
            Ok(Some(read)) => read,
            Ok(None) => {
                report(
                    problem,
                    format!(
                        "MutatingWebhookConfiguration {} does not exist: no rules to keep",
                        self.name
                    ),
                );
                self.observed.send_replace(Observed::Missing);
                return None;
            }
            Err(e) => {
                report(problem, e.to_string());
                return None;
            }
        };
        *problem = None;
        self.observed.send_replace(Observed::Read(read.clone()));
        let rules = self.wanted.borrow().rules();
        let rules = rules.filter(|r| leading && !read.sends_exactly(r))?;
        if let Some(since) = last_write.map(|at| at.elapsed()) {
            if since < WRITE_INTERVAL {
                return Some(WRITE_INTERVAL - since);
            }
        }
        *last_write = Some(Instant::now());
        match read.write(&self.api, &self.name, &rules).await {
            Ok(written) => {
                tracing::info!(
                    configuration = %self.name,
                    rules = %serde_json::to_string(&written.webhooks.first().map(|w| &w.1)).unwrap_or_default(),
                    "webhook rules written"
                );
                self.observed.send_replace(Observed::Read(written));
            }
            // Changed since it was read (a conflict): read it again.
            Err(e) => tracing::debug!(error = %e, "writing the webhook rules"),
        }
        None
    }
}

/// Logs `now` unless it is the problem last logged.
fn report(last: &mut Option<String>, now: String) {
    if last.as_deref() != Some(now.as_str()) {
        tracing::warn!(problem = %now, "managing the webhook rules");
        *last = Some(now);
    }
}

impl PublishGate for RuleKeeper {
    fn before_publish<'a>(
        &'a self,
        engine: &'a Engine,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let needed = self.rules_of(engine);
            self.wanted
                .send_modify(|w| w.preparing = Some(needed.clone()));
            let mut observed = self.observed.subscribe();
            let sent = async {
                loop {
                    match &*observed.borrow_and_update() {
                        Observed::Missing => return,
                        Observed::Read(read) if read.sends(&needed) => return,
                        _ => {}
                    }
                    if observed.changed().await.is_err() {
                        return;
                    }
                }
            };
            if tokio::time::timeout(WAIT_LIMIT, sent).await.is_err() {
                tracing::warn!(
                    configuration = %self.name,
                    "after {} s the webhook rules still do not send every request the new \
                     policy set matches; serving it anyway",
                    WAIT_LIMIT.as_secs()
                );
            }
        })
    }

    fn published(&self, engine: &Engine) {
        let rules = self.rules_of(engine);
        self.wanted.send_modify(|w| {
            w.serving = Some(rules);
            w.preparing = None;
        });
    }
}
