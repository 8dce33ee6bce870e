//! What every control loop shares: the API client, the cloud provider, the reflector stores
//! the loops read the cluster from, the event recorder, the settings and the metrics.

use super::{FIELD_MANAGER, Notices, OwnWrites, RecentLaunches, Settings};
use crate::apis::{NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use crate::scheduling::VolumeTopology;
use crate::state::{CachedNode, CachedPod};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use std::sync::Arc;

/// What every loop shares: the API client, the provider, the cluster as the reflectors see it.
pub struct Context<P> {
    pub client: Client,
    pub provider: Arc<P>,
    pub claims: Store<NodeClaim>,
    pub nodes: Store<CachedNode>,
    pub pools: Store<NodePool>,
    pub pods: Store<CachedPod>,
    pub recorder: Recorder,
    pub settings: Settings,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// NodeClaims the lifecycle loop wrote whose new version the watch has not delivered yet.
    pub own_writes: Arc<OwnWrites>,
    /// Instances the lifecycle loop launched in the last minute, by NodeClaim UID.
    pub recent_launches: RecentLaunches,
    /// Events that loops re-evaluate every pass, published once per state.
    pub notices: Notices,
    /// NodeClaims the API server has that do not decode (left out of `claims`).
    pub unreadable_claims: super::lenient_watch::Unreadable,
    /// How long each NodeClaim whose reconcile failed waits before the next attempt.
    pub claim_failures: super::backoff::FailureBackoff,
    /// What the probes answer; the loops report their passes here.
    pub health: Arc<super::Health>,
    /// Namespaces (their labels), for pod-affinity terms with a `namespaceSelector`; `None`
    /// where no watch feeds them (such terms then match namespaces without labels only).
    pub namespaces: Option<Store<k8s_openapi::api::core::v1::Namespace>>,
    /// Claims, volumes and classes, for volume topology; `None` where no watch feeds them
    /// (pods with claims then wait, their claims not found).
    pub volumes: Option<super::volumes::VolumeStores>,
    /// DaemonSets, whose pods are overhead on every new node; `None` where no watch feeds
    /// them (each round then lists them).
    pub daemon_sets: Option<Store<DaemonSet>>,
    /// PodDisruptionBudgets, for disruption's candidates; `None` where no watch feeds them
    /// (each pass then lists them).
    pub pdbs: Option<Store<PodDisruptionBudget>>,
}

impl<P: CloudProvider> Context<P> {
    /// A context over the given stores.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        provider: Arc<P>,
        claims: Store<NodeClaim>,
        nodes: Store<CachedNode>,
        pools: Store<NodePool>,
        pods: Store<CachedPod>,
        settings: Settings,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let notices = Notices::new(client.clone(), reporter.clone());
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            provider,
            claims,
            nodes,
            pools,
            pods,
            recorder,
            settings,
            metrics,
            own_writes: Arc::default(),
            recent_launches: RecentLaunches::default(),
            notices,
            claim_failures: super::backoff::FailureBackoff::lifecycle(),
            unreadable_claims: super::lenient_watch::Unreadable::default(),
            health: Arc::default(),
            namespaces: None,
            volumes: None,
            daemon_sets: None,
            pdbs: None,
        }
    }

    /// Each namespace's labels, as the Namespace watch holds them.
    pub fn namespace_labels(
        &self,
    ) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> {
        self.namespaces
            .as_ref()
            .map(|store| {
                store
                    .state()
                    .iter()
                    .filter_map(|ns| {
                        Some((
                            ns.metadata.name.clone()?,
                            ns.metadata.labels.clone().unwrap_or_default(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The volume topology of the pods with claims.
    pub fn volume_topology(&self, pods: &[Arc<CachedPod>]) -> VolumeTopology {
        match &self.volumes {
            Some(stores) => stores.topology(pods),
            None => {
                VolumeTopology::resolve(pods.iter().map(AsRef::as_ref), &super::volumes::NoVolumes)
            }
        }
    }

    /// The Node whose providerID is `provider_id`, if the reflector has seen one.
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<CachedNode>> {
        self.nodes
            .state()
            .into_iter()
            .find(|n| n.provider_id.as_deref() == Some(provider_id))
    }
}
