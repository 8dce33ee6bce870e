//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics
//! (`k8s.io/client-go/tools/leaderelection`) as upstream Karpenter runs them through
//! controller-runtime (`pkg/operator/operator.go`): the Lease `karpenter-leader-election` in
//! the agent's namespace, a 15 s lease, a 10 s renew deadline, a 2 s retry period, and the
//! Lease released when the agent shuts down (`LeaderElectionReleaseOnCancel`).
//!
//! - A candidate takes the Lease when nobody holds it, or when its record has not changed for
//!   the lease's duration *as this process observed it* (client-go's `observedTime`), so clocks
//!   that disagree between nodes do not matter.
//! - Every write replaces the Lease at the `resourceVersion` just read: of two candidates one
//!   wins and the other gets a conflict, which is "not acquired", not an error.
//! - The leader renews every retry period; a renewal round that has not succeeded within the
//!   renew deadline loses leadership. The renew deadline is shorter than the lease, so the old
//!   leader has given up (the agent exits) before any other replica may take the Lease.
//! - Each successful renewal opens the loops' [`Fence`] until the renew deadline counted from
//!   when the renewal began, so a leader that was frozen past its lease writes nothing once it
//!   runs again, even before its renewal notices (`client::fence`).
//!
//! Why not a crate: `kube-lease-manager`, the maintained crate for this kube version, renews
//! only shortly before the lease expires and, while renewals fail, keeps reporting leadership
//! after the Lease has expired and another replica has taken it: two agents would then
//! provision at once, which is what this module exists to prevent. `kube-leader-election`
//! requires kube 4.

use super::Error;
use crate::client::Fence;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use rand::Rng;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info, warn};

pub use crate::apis::labels::LEADER_ELECTION_LEASE as LEASE_NAME;

/// Where the Lease is and how long its terms are.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity, unique among the replicas (the pod's name and a random suffix).
    pub identity: String,
    /// How long a record that has not changed keeps other candidates away.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// Upstream's Lease and controller-runtime's default timings.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: LEASE_NAME.to_owned(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One replica's side of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// Open while this replica holds the Lease within its renew deadline; the loops' client
    /// writes only through it (see `client::fence`).
    fence: Fence,
    /// The last record read or written, and when this process first saw it.
    observed: Mutex<Option<(LeaseSpec, Instant)>>,
    /// Whether this replica's last acquisition took the Lease from another holder whose lease
    /// ran out, rather than one nobody held (new, or released).
    took_over: AtomicBool,
}

impl LeaderElector {
    /// An elector that keeps `fence` open while this replica leads.
    pub fn new(client: Client, config: ElectionConfig, fence: Fence) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            fence,
            observed: Mutex::new(None),
            took_over: AtomicBool::new(false),
        }
    }

    /// Whether this replica leads by taking the Lease over from another holder that did not
    /// release it: that agent stopped without a word (killed, partitioned), and what it was
    /// writing when it did may still land. A holder that shuts down cleanly stops its loops
    /// first and then releases the Lease, so after a release nothing of it is still on the way.
    pub fn took_over(&self) -> bool {
        self.took_over.load(Ordering::Relaxed)
    }

    /// The fence this elector keeps open while this replica leads.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    fn observed(&self) -> std::sync::MutexGuard<'_, Option<(LeaseSpec, Instant)>> {
        // Every update is one assignment: a panic elsewhere cannot leave it half-written.
        self.observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Who holds the Lease as last observed (`None`: nobody, or not read yet).
    pub fn holder(&self) -> Option<String> {
        self.observed()
            .as_ref()
            .and_then(|(spec, _)| holder_of(spec).map(str::to_owned))
    }

    /// Whether this replica held the Lease at the last read or write.
    pub fn is_leader(&self) -> bool {
        self.holder().as_deref() == Some(self.config.identity.as_str())
    }

    /// One attempt (client-go's `tryAcquireOrRenew`): `Ok(true)` when this replica holds the
    /// Lease afterwards, `Ok(false)` when another does or won the race to write it.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, Error> {
        // The fence counts from before the request: the renewal may land at once or only at
        // the end of the request's time.
        let started = Instant::now();
        let held = self.acquire_or_renew_once().await?;
        if held {
            self.fence
                .open_until((started + self.config.renew_deadline).into_std());
        }
        Ok(held)
    }

    async fn acquire_or_renew_once(&self) -> Result<bool, Error> {
        let now = MicroTime(Timestamp::now());
        let mut desired = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(seconds(self.config.lease_duration)),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        };
        let existing = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(Error::kube(format!(
                "reading the Lease {}",
                self.config.name
            )))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(desired.clone()),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    *self.observed() = Some((desired, Instant::now()));
                    Ok(true)
                }
                // Another candidate created it first.
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(e) => Err(Error::kube(format!(
                    "creating the Lease {}",
                    self.config.name
                ))(e)),
            };
        };
        let old = lease.spec.clone().unwrap_or_default();
        let observed_at = {
            let mut observed = self.observed();
            match observed.as_ref() {
                Some((spec, at)) if *spec == old => *at,
                _ => {
                    let at = Instant::now();
                    *observed = Some((old.clone(), at));
                    at
                }
            }
        };
        let ours = holder_of(&old) == Some(self.config.identity.as_str());
        if let Some(holder) = holder_of(&old).filter(|_| !ours) {
            let duration = old
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.lease_duration, Duration::from_secs);
            if observed_at.elapsed() < duration {
                debug!(%holder, "the Lease is held");
                return Ok(false);
            }
        }
        let taking_over = !ours && holder_of(&old).is_some();
        if ours {
            desired.acquire_time = old.acquire_time.clone();
            desired.lease_transitions = old.lease_transitions;
        } else {
            desired.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + 1);
        }
        lease.spec = Some(desired.clone());
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                *self.observed() = Some((desired, Instant::now()));
                if !ours {
                    self.took_over.store(taking_over, Ordering::Relaxed);
                }
                Ok(true)
            }
            // Written by another replica since the read.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(Error::kube(format!(
                "updating the Lease {}",
                self.config.name
            ))(e)),
        }
    }

    /// Tries until this replica leads, every retry period with client-go's jitter (up to 1.2
    /// periods more). `observed` is called after every attempt that read the Lease, with who
    /// holds it, so readiness can say the election is decided.
    pub async fn acquire(&self, mut observed: impl FnMut(Option<&str>)) {
        info!(lease = %self.config.name, namespace = %self.config.namespace, identity = %self.config.identity, "waiting to lead");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    info!(lease = %self.config.name, identity = %self.config.identity, "leading");
                    observed(Some(&self.config.identity));
                    return;
                }
                Ok(false) => observed(self.holder().as_deref()),
                Err(e) => {
                    warn!(error = %e, cause = ?std::error::Error::source(&e), "could not read or take the Lease; retrying");
                }
            }
            let jitter = self
                .config
                .retry_period
                .mul_f64(rand::rng().random_range(0.0..1.2));
            tokio::time::sleep(self.config.retry_period + jitter).await;
        }
    }

    /// Renews while this replica leads; returns, with why, once a renewal round has not
    /// succeeded within the renew deadline (client-go's `renew`).
    pub async fn renew(&self) -> String {
        loop {
            let deadline = Instant::now() + self.config.renew_deadline;
            let mut last = String::from("the Lease is held by another replica");
            let renewed = loop {
                match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                    Ok(Ok(true)) => break true,
                    Ok(Ok(false)) => {
                        last =
                            format!("the Lease is held by {}", self.holder().unwrap_or_default());
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, cause = ?std::error::Error::source(&e), "could not renew the Lease; retrying");
                        last = e.to_string();
                    }
                    Err(_) => {
                        last = "renewing the Lease took longer than the renew deadline".into();
                        break false;
                    }
                }
                if Instant::now() + self.config.retry_period >= deadline {
                    break false;
                }
                tokio::time::sleep(self.config.retry_period).await;
            };
            if !renewed {
                self.fence.shut();
                return format!(
                    "no renewal within {}s: {last}",
                    self.config.renew_deadline.as_secs()
                );
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Gives the Lease up, if this replica holds it, so a successor need not wait out the
    /// lease (client-go's `release`: no holder, a 1 s duration, the transitions kept).
    pub async fn release(&self) -> Result<(), Error> {
        // Every loop has stopped by now; nothing of this replica writes any more.
        self.fence.shut();
        if !self.is_leader() {
            return Ok(());
        }
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(Error::kube(format!(
                "reading the Lease {}",
                self.config.name
            )))?
        else {
            return Ok(());
        };
        let old = lease.spec.clone().unwrap_or_default();
        if holder_of(&old) != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        let released = LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: old.lease_transitions,
            ..LeaseSpec::default()
        };
        lease.spec = Some(released.clone());
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(Error::kube(format!(
                "releasing the Lease {}",
                self.config.name
            )))?;
        *self.observed() = Some((released, Instant::now()));
        info!(lease = %self.config.name, identity = %self.config.identity, "released the Lease");
        Ok(())
    }
}

fn holder_of(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}
