//! One writer among the replicas: a `coordination.k8s.io/v1` Lease, held
//! the way client-go's leader election holds one. The holder renews it
//! every few seconds; another replica takes it over only after it has seen
//! the same record, unrenewed, for a whole lease duration on its own clock
//! (never by comparing the holder's timestamps with its own: the clocks of
//! two machines differ).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};

/// How long a holder that stopped renewing keeps the Lease.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews it.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(5);

/// A Lease this replica holds, or waits to take over.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    /// The record last read, and when this replica first saw it.
    seen: Option<(LeaseSpec, Instant)>,
    /// When this replica last wrote the Lease as its holder.
    renewed: Option<Instant>,
}

impl std::fmt::Debug for LeaseLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseLock")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl LeaseLock {
    /// The Lease `name` in `namespace`, held as `identity`.
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            seen: None,
            renewed: None,
        }
    }

    /// This replica's identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica holds the Lease now: renews it when due, takes
    /// it when free or expired. An API error counts as not holding it
    /// unless the last renewal is still fresh.
    pub async fn hold(&mut self) -> Result<bool, kube::Error> {
        if self.renewed.is_some_and(|at| at.elapsed() < RENEW_INTERVAL) {
            return Ok(true);
        }
        match self.try_hold().await {
            Ok(held) => Ok(held),
            Err(e) => {
                let fresh = self.renewed.is_some_and(|at| at.elapsed() < LEASE_DURATION);
                if !fresh {
                    self.renewed = None;
                }
                Err(e)
            }
        }
    }

    async fn try_hold(&mut self) -> Result<bool, kube::Error> {
        let Some(current) = self.api.get_opt(&self.name).await? else {
            return self.create().await;
        };
        let spec = current.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let free = spec
            .holder_identity
            .as_deref()
            .unwrap_or_default()
            .is_empty();
        if !mine && !free && !self.expired(&spec) {
            self.renewed = None;
            return Ok(false);
        }
        let mut next = current;
        next.spec = Some(self.record(&spec, mine));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => {
                self.renewed = Some(Instant::now());
                Ok(true)
            }
            // Another replica wrote it first: it holds it.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                self.renewed = None;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether `spec`, as read now, has gone unrenewed for a lease duration
    /// on this replica's clock.
    fn expired(&mut self, spec: &LeaseSpec) -> bool {
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(1) as u64))
            .unwrap_or(LEASE_DURATION);
        match &self.seen {
            Some((seen, at)) if seen == spec => at.elapsed() >= duration,
            _ => {
                self.seen = Some((spec.clone(), Instant::now()));
                false
            }
        }
    }

    /// The record this replica writes as the holder, after `previous`.
    fn record(&self, previous: &LeaseSpec, renewing: bool) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: if renewing {
                previous.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(previous.lease_transitions.unwrap_or(0) + i32::from(!renewing)),
            ..LeaseSpec::default()
        }
    }

    async fn create(&mut self) -> Result<bool, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            // A new Lease starts with no transition, as client-go's does.
            spec: Some(LeaseSpec {
                lease_transitions: Some(0),
                ..self.record(&LeaseSpec::default(), false)
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => {
                self.renewed = Some(Instant::now());
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (at shutdown), so that another replica takes it
    /// over at once instead of after a lease duration.
    pub async fn release(&mut self) {
        if self.renewed.take().is_none() {
            return;
        }
        let Ok(Some(mut current)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = current.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        let _ = self
            .api
            .replace(&self.name, &PostParams::default(), &current)
            .await;
    }
}
