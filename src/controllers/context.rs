//! What every control loop shares: the API client, the cloud provider, the cluster as the
//! watches hold it ([`Stores`]), the event recorder, the settings and the metrics.

use super::{FIELD_MANAGER, Health, Notices, OwnWrites, RecentLaunches, Settings};
use crate::state::Stores;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use std::sync::Arc;

/// What every loop shares.
pub struct Context<P> {
    pub client: Client,
    pub provider: Arc<P>,
    /// The cluster as the watches hold it.
    pub cluster: Stores,
    pub recorder: Recorder,
    pub settings: Settings,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// NodeClaims the lifecycle loop wrote whose new version the watch has not delivered yet.
    pub own_writes: Arc<OwnWrites>,
    /// Instances the lifecycle loop launched in the last minute, by NodeClaim UID.
    pub recent_launches: RecentLaunches,
    /// Events that loops re-evaluate every pass, published once per state.
    pub notices: Notices,
    /// How long each NodeClaim whose reconcile failed waits before the next attempt.
    pub claim_failures: super::backoff::FailureBackoff,
    /// What the probes answer; the loops report their passes here.
    pub health: Arc<Health>,
    /// Each NodePool's recent launch outcomes (`NodeRegistrationHealthy`).
    pub pool_health: super::pool_health::PoolHealth,
}

impl<P> Context<P> {
    /// A context over `cluster`, whose Events name this replica as `settings` says.
    pub fn new(
        client: Client,
        provider: Arc<P>,
        cluster: Stores,
        settings: Settings,
        metrics: Arc<crate::metrics::Metrics>,
        health: Arc<Health>,
        own_writes: Arc<OwnWrites>,
    ) -> Self {
        let reporter = reporter(&settings);
        let notices = Notices::new(client.clone(), reporter.clone());
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            provider,
            cluster,
            recorder,
            settings,
            metrics,
            own_writes,
            recent_launches: RecentLaunches::default(),
            notices,
            claim_failures: super::backoff::FailureBackoff::lifecycle(),
            health,
            pool_health: super::pool_health::PoolHealth::default(),
        }
    }
}

/// Who the agent's Events say reported them: the agent, and the replica when the binary
/// knows its pod's name.
pub(super) fn reporter(settings: &Settings) -> Reporter {
    Reporter {
        controller: FIELD_MANAGER.to_owned(),
        instance: settings.pod_name.clone(),
    }
}
