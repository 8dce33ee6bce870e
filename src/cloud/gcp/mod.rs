//! The Compute Engine provider: launches a NodeClaim's VM with `instances.insert` (spot or
//! standard), deletes, looks up and lists this cluster's VMs by label, and describes the
//! catalogue (`zones.list` + `machineTypes.aggregatedList`, priced from
//! [`crate::cloud::gcp_prices`]) for a GCENodeClass.
//!
//! Sits under the controllers like every [`CloudProvider`]; also owns what only GCP has: the
//! GCENodeClass resolution ([`nodeclass`]) and the failed-operation check ([`launch`]). Offerings
//! GCE had no capacity or quota for go into the shared [`UnavailableOfferings`] cache. A VM that
//! GCE preempted (`TERMINATED`/`STOPPED`, or deleted) is reported `terminating` (or absent), and
//! the controllers replace its node.
//!
//! Credentials: Application Default Credentials in production; with
//! [`GcpConfig::endpoint`] set (tests, the project's `gcp-fake`), anonymous ones.

pub mod billing;
pub mod catalogue;
pub mod drift;
pub mod kubelet_identity;
pub mod launch;
mod node_template;
pub mod nodeclass;

pub use node_template::NodeTemplate;

use super::node_classes::NodeClasses;
use super::provider::{
    CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId,
};
use super::unavailable::UnavailableOfferings;
use crate::apis::{GCENodeClass, GCENodeClassStatus, NodeClaim, NodeClassReference, labels};
use crate::cloud::gcp_prices;
use crate::scheduling::InstanceType;
use catalogue::MachineTypeInfo;
use google_cloud_compute_v1::client::{Images, InstanceTemplates, Instances, MachineTypes, Zones};
use nodeclass::{NodeClassResolution, ResolvedNodeClass};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// VM label naming the cluster (GCE label keys cannot hold `/` or `.`).
pub const CLUSTER_LABEL: &str = "karpenter-k8s-gcp-cluster";
/// VM label naming the cluster's location (its region, or its zone for a zonal cluster). GKE
/// names a cluster by project, location and name, so two clusters of one name can share a
/// project; their agents tell their VMs apart by this.
pub const LOCATION_LABEL: &str = "karpenter-k8s-gcp-location";
/// GKE's own labels on its node VMs, which cost reports group by (set on ours too).
pub const GKE_CLUSTER_NAME_LABEL: &str = "goog-k8s-cluster-name";
pub const GKE_CLUSTER_LOCATION_LABEL: &str = "goog-k8s-cluster-location";
/// VM label naming the NodePool.
pub const NODE_POOL_LABEL: &str = "karpenter-sh-nodepool";
/// VM label naming the NodeClaim.
pub const NODE_CLAIM_LABEL: &str = "karpenter-sh-nodeclaim";
/// VM label naming the GCENodeClass.
pub const NODE_CLASS_LABEL: &str = "karpenter-k8s-gcp-gcenodeclass";
/// Metadata key holding the NodeClaim's exact name (labels may have lost characters).
pub const NODE_CLAIM_METADATA: &str = "karpenter-nodeclaim";
/// Metadata key holding the NodePool's exact name.
pub const NODE_POOL_METADATA: &str = "karpenter-nodepool";

/// A GCE label key: lowercase letters, digits, `_` and `-`, starting with a letter, at most 63.
pub fn gce_label_key(key: &str) -> String {
    let mut out = gce_label_value(key);
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, "k-");
        out.truncate(63);
    }
    out
}

/// A GCE label value: lowercase letters, digits, `_` and `-`, at most 63 characters.
pub fn gce_label_value(value: &str) -> String {
    let mut out: String = value
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(63);
    out
}

/// What the provider needs to know that the node classes do not say.
#[derive(Clone, Debug)]
pub struct GcpConfig {
    /// The project VMs launch in.
    pub project: String,
    /// The cluster's name (labels, instance names).
    pub cluster_name: String,
    /// The region the cluster's nodes are in.
    pub region: String,
    /// The cluster's location as GKE names it: its region, or its zone for a zonal cluster
    /// (default: the region).
    pub location: Option<String>,
    /// Zones to launch in; empty means every zone of the region that is `UP`.
    pub zones: Vec<String>,
    /// Send every Compute call here with anonymous credentials (tests: `gcp-fake`).
    pub endpoint: Option<String>,
    /// The network and subnetwork when the node class names none (default: the node template's,
    /// else the `default` network).
    pub network: Option<String>,
    pub subnetwork: Option<String>,
    /// The instance template new nodes take GKE's bootstrap from (its metadata: `kube-env`,
    /// `user-data` and the scripts that join the cluster; its network, tags and service account
    /// as defaults). Unset: the newest `gke-<cluster>-*` template with a `kube-env`, if any.
    pub node_template: Option<String>,
    /// How long the machine types and zones are reused (upstream: 5 min).
    pub catalogue_ttl: Duration,
    /// How long a node class's resolution is reused before the images are read again.
    pub node_class_ttl: Duration,
    /// How long an offering GCE had no capacity for is skipped.
    pub unavailable_ttl: Duration,
    /// Offerings one launch tries before it gives up with insufficient capacity.
    pub max_launch_attempts: usize,
    /// First delay between operation polls (the client's default starts at 1 s).
    pub polling_initial_delay: Option<Duration>,
}

impl GcpConfig {
    /// The cluster's location: [`Self::location`], else the region.
    pub fn location(&self) -> &str {
        self.location.as_deref().unwrap_or(&self.region)
    }

    /// Whether a VM's labels say it is of this cluster: its cluster label names this cluster
    /// and its location label (when it has one: VMs made before the label existed have none)
    /// this location.
    pub fn owns_labels(&self, labels: &HashMap<String, String>) -> bool {
        labels.get(CLUSTER_LABEL) == Some(&gce_label_value(&self.cluster_name))
            && labels
                .get(LOCATION_LABEL)
                .is_none_or(|l| *l == gce_label_value(self.location()))
    }

    /// Defaults for a cluster in a project and region.
    pub fn new(
        project: impl Into<String>,
        cluster_name: impl Into<String>,
        region: impl Into<String>,
    ) -> Self {
        Self {
            project: project.into(),
            cluster_name: cluster_name.into(),
            region: region.into(),
            location: None,
            zones: Vec::new(),
            endpoint: None,
            network: None,
            subnetwork: None,
            node_template: None,
            catalogue_ttl: Duration::from_secs(300),
            node_class_ttl: Duration::from_secs(60),
            unavailable_ttl: super::unavailable::DEFAULT_TTL,
            max_launch_attempts: 3,
            polling_initial_delay: None,
        }
    }
}

/// A Compute API error with its HTTP status, code and message in the text.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct GcpApiError {
    detail: String,
    #[source]
    source: google_cloud_compute_v1::Error,
}

impl From<google_cloud_compute_v1::Error> for GcpApiError {
    fn from(source: google_cloud_compute_v1::Error) -> Self {
        let detail = match (source.http_status_code(), source.status()) {
            (Some(http), Some(status)) => {
                format!("HTTP {http} {:?}: {}", status.code, status.message)
            }
            (None, Some(status)) => format!("{:?}: {}", status.code, status.message),
            _ => source.to_string(),
        };
        Self { detail, source }
    }
}

/// Whether a call failed because a quota or the zone's capacity ran out.
fn is_quota_or_stockout(error: &google_cloud_compute_v1::Error) -> bool {
    use google_cloud_gax::error::rpc::Code;
    let reason_says = error.http_payload().is_some_and(|p| {
        let text = String::from_utf8_lossy(p);
        text.contains("quotaExceeded") || text.contains("ZONE_RESOURCE_POOL_EXHAUSTED")
    });
    reason_says
        || (error.http_status_code() == Some(403)
            && error
                .status()
                .is_some_and(|s| s.code == Code::ResourceExhausted))
}

/// Maps a Compute error: rate limits become throttling, the rest an API failure naming `action`.
fn cloud_error(action: &str, error: google_cloud_compute_v1::Error) -> CloudError {
    use google_cloud_gax::error::rpc::Code;
    let rate_limited = error.http_status_code() == Some(429)
        || error
            .http_payload()
            .is_some_and(|p| String::from_utf8_lossy(p).contains("rateLimitExceeded"));
    if rate_limited
        || (error
            .status()
            .is_some_and(|s| s.code == Code::ResourceExhausted)
            && !is_quota_or_stockout(&error))
    {
        return CloudError::Throttled {
            source: Box::new(GcpApiError::from(error)),
        };
    }
    CloudError::api(action, GcpApiError::from(error))
}

/// How long one attempt of a Compute call may take. The client's default retry policy bounds
/// a call's retries to 60 s but an attempt only by what is left of that; this bounds a hung
/// attempt on its own, as upstream's AWS provider bounds each SDK request (4 minutes there,
/// where a CreateFleet may take that long; an insert returns its operation at once).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);

/// The client library's default policy (AIP-194: retry what is safe to retry, at most 10
/// attempts in 60 s, exponential backoff with jitter), plus one more case: an HTTP 429, which
/// Compute answers a rate-limited request before doing anything. The library leaves it to the
/// caller; retried here with the library's backoff, a short burst of rate limiting costs the
/// launch seconds instead of a failed reconcile. A quota or stockout error (403 or 503 with
/// `RESOURCE_EXHAUSTED`) is not retried: it goes back to the controllers as capacity.
fn retry_policy() -> impl google_cloud_gax::retry_policy::RetryPolicy {
    use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt};
    RetryOnTooManyRequests(Aip194Strict)
        .with_attempt_limit(10)
        .with_time_limit(Duration::from_secs(60))
}

/// Retries an HTTP 429 answer, and defers everything else to the inner policy.
#[derive(Debug)]
struct RetryOnTooManyRequests<P>(P);

impl<P: google_cloud_gax::retry_policy::RetryPolicy> google_cloud_gax::retry_policy::RetryPolicy
    for RetryOnTooManyRequests<P>
{
    fn on_error(
        &self,
        state: &google_cloud_gax::retry_state::RetryState,
        error: google_cloud_gax::error::Error,
    ) -> google_cloud_gax::retry_result::RetryResult {
        if error.http_status_code() == Some(429) {
            return google_cloud_gax::retry_result::RetryResult::Continue(error);
        }
        self.0.on_error(state, error)
    }

    fn on_throttle(
        &self,
        state: &google_cloud_gax::retry_state::RetryState,
        error: google_cloud_gax::error::Error,
    ) -> google_cloud_gax::throttle_result::ThrottleResult {
        self.0.on_throttle(state, error)
    }

    fn remaining_time(
        &self,
        state: &google_cloud_gax::retry_state::RetryState,
    ) -> Option<Duration> {
        self.0.remaining_time(state)
    }
}

/// The Compute clients, built once.
#[derive(Clone, Debug)]
pub struct Clients {
    pub instances: Instances,
    pub machine_types: MachineTypes,
    pub zones: Zones,
    pub images: Images,
    pub instance_templates: InstanceTemplates,
    /// The Cloud Billing Catalog, for the region's prices.
    pub billing: billing::CatalogClient,
}

/// Why the clients could not be built.
#[derive(Debug, thiserror::Error)]
#[error("building the Compute Engine clients failed")]
pub struct ClientsError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl Clients {
    /// Clients with ADC, or anonymous credentials against `config.endpoint`.
    pub async fn new(config: &GcpConfig) -> Result<Self, ClientsError> {
        macro_rules! build {
            ($client:ty) => {{
                let mut builder = <$client>::builder();
                if let Some(endpoint) = &config.endpoint {
                    builder = builder.with_endpoint(endpoint.clone()).with_credentials(
                        google_cloud_auth::credentials::anonymous::Builder::new().build(),
                    );
                }
                builder = builder
                    .with_retry_policy(retry_policy())
                    .with_attempt_timeout(ATTEMPT_TIMEOUT);
                if let Some(initial) = config.polling_initial_delay {
                    let backoff =
                        google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder::new()
                            .with_initial_delay(initial)
                            .with_maximum_delay(initial * 10)
                            .build()
                            .map_err(|e| ClientsError(Box::new(e)))?;
                    builder = builder.with_polling_backoff_policy(backoff);
                }
                builder
                    .build()
                    .await
                    .map_err(|e| ClientsError(Box::new(e)))?
            }};
        }
        Ok(Self {
            instances: build!(Instances),
            machine_types: build!(MachineTypes),
            zones: build!(Zones),
            images: build!(Images),
            instance_templates: build!(InstanceTemplates),
            billing: billing::CatalogClient::new(config.endpoint.as_deref())
                .map_err(|e| ClientsError(Box::new(e)))?,
        })
    }
}

/// What `zones.list` and `machineTypes.aggregatedList` said.
#[derive(Debug, Default)]
pub struct CatalogueSnapshot {
    fetched: Option<Instant>,
    /// Machine types offered in at least one of the zones.
    pub types: BTreeMap<String, MachineTypeInfo>,
    /// Zones each type is offered in.
    pub zones_of: HashMap<String, Vec<String>>,
    /// The zones launched in.
    pub zones: Vec<String>,
    /// The region's rates from the Cloud Billing Catalog (empty until it answered).
    pub rates: Arc<billing::Parsed>,
}

impl CatalogueSnapshot {
    /// A machine type's price in `region`: from the Cloud Billing Catalog's rates where they
    /// price it, else from the shipped table; `None` when neither knows its family.
    pub fn price(&self, info: &MachineTypeInfo, region: &str) -> Option<gcp_prices::Price> {
        self.rates
            .price(
                &info.name,
                info.vcpus,
                info.memory_mib,
                info.shared_cpu,
                info.gpus.is_some(),
            )
            .or_else(|| gcp_prices::price(&info.name, info.vcpus, info.memory_mib, region))
    }
}

struct CachedNodeClass {
    resolved_at: Instant,
    spec: crate::apis::GCENodeClassSpec,
    /// The node template's boot image it was resolved with: when GKE upgrades the node pool,
    /// aliases resolve afresh (and the old nodes drift).
    template_image: Option<String>,
    resolved: Arc<ResolvedNodeClass>,
}

/// Launches and tracks Compute Engine VMs for NodeClaims.
pub struct GcpProvider {
    clients: Clients,
    kube: kube::Client,
    config: GcpConfig,
    unavailable: Arc<UnavailableOfferings>,
    catalogue: tokio::sync::Mutex<Arc<CatalogueSnapshot>>,
    node_classes: Mutex<HashMap<String, CachedNodeClass>>,
    classes: NodeClasses<GCENodeClass>,
    node_template: tokio::sync::Mutex<Option<(Instant, Option<Arc<NodeTemplate>>)>>,
    prices: billing::PriceFeed,
}

impl GcpProvider {
    /// A provider for `config` (ADC, or anonymous against `config.endpoint`).
    pub async fn new(config: GcpConfig, kube: kube::Client) -> Result<Self, ClientsError> {
        let clients = Clients::new(&config).await?;
        Ok(Self::with_clients(config, clients, kube))
    }

    /// A provider with clients of your own.
    pub fn with_clients(config: GcpConfig, clients: Clients, kube: kube::Client) -> Self {
        Self {
            clients,
            classes: NodeClasses::new(kube.clone()),
            kube,
            unavailable: Arc::new(UnavailableOfferings::new(config.unavailable_ttl)),
            config,
            catalogue: tokio::sync::Mutex::new(Arc::new(CatalogueSnapshot::default())),
            node_classes: Mutex::new(HashMap::new()),
            node_template: tokio::sync::Mutex::new(None),
            prices: billing::PriceFeed::default(),
        }
    }

    /// Reports the Cloud Billing Catalog feed's refreshes in `metrics`.
    pub fn report_prices_to(&self, metrics: Arc<crate::metrics::Metrics>) {
        self.prices.report_to(metrics);
    }

    /// The node template (named, or discovered as the newest `gke-<cluster>-*` template with a
    /// `kube-env` whose `cluster-name` and `cluster-location` metadata, when it has them, are
    /// this cluster's), reused for `catalogue_ttl`. `None` when there is none to copy: nodes then
    /// boot with only the node class's metadata.
    pub async fn node_template(&self) -> Result<Option<Arc<NodeTemplate>>, CloudError> {
        let mut cached = self.node_template.lock().await;
        if let Some((at, template)) = cached.as_ref()
            && at.elapsed() < self.config.catalogue_ttl
        {
            return Ok(template.clone());
        }
        let project = &self.config.project;
        let found = match &self.config.node_template {
            Some(name) => {
                let template = self
                    .clients
                    .instance_templates
                    .get()
                    .set_project(project)
                    .set_instance_template(name)
                    .send()
                    .await
                    .map_err(|e| cloud_error("reading the node instance template", e))?;
                NodeTemplate::from_api(&template)
            }
            None => {
                let prefix = format!("gke-{}-", gce_label_value(&self.config.cluster_name));
                let mut newest: Option<(String, NodeTemplate)> = None;
                let mut token = String::new();
                loop {
                    let page = self
                        .clients
                        .instance_templates
                        .list()
                        .set_project(project)
                        .set_page_token(token.clone())
                        .send()
                        .await
                        .map_err(|e| cloud_error("listing instance templates", e))?;
                    for template in &page.items {
                        let created = template.creation_timestamp.clone().unwrap_or_default();
                        let Some(parsed) = NodeTemplate::from_api(template) else {
                            continue;
                        };
                        // GKE's templates say whose they are in their metadata; a cluster
                        // of the same name elsewhere in the project has its own.
                        let of_this_cluster = parsed
                            .metadata("cluster-name")
                            .is_none_or(|n| n == self.config.cluster_name)
                            && parsed
                                .metadata("cluster-location")
                                .is_none_or(|l| l == self.config.location());
                        if parsed.name.starts_with(&prefix)
                            && of_this_cluster
                            && parsed.metadata("kube-env").is_some()
                            && newest.as_ref().is_none_or(|(at, _)| created > *at)
                        {
                            newest = Some((created, parsed));
                        }
                    }
                    match page.next_page_token.filter(|t| !t.is_empty()) {
                        Some(next) => token = next,
                        None => break,
                    }
                }
                newest.map(|(_, t)| t)
            }
        };
        match &found {
            Some(t) => {
                tracing::info!(template = %t.name, "nodes take their bootstrap from this instance template")
            }
            None => {
                tracing::warn!(cluster = %self.config.cluster_name, "no GKE node template found; nodes get only the node class's metadata and may not join the cluster")
            }
        }
        let found = found.map(Arc::new);
        *cached = Some((Instant::now(), found.clone()));
        Ok(found)
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &GcpConfig {
        &self.config
    }

    /// The cache of offerings GCE had no capacity or quota for.
    pub fn unavailable_offerings(&self) -> Arc<UnavailableOfferings> {
        self.unavailable.clone()
    }

    /// Resolves a node class (reusing a recent answer for an unchanged spec), as a launch and
    /// the catalogue need it.
    pub async fn resolve_node_class(
        &self,
        name: &str,
    ) -> Result<Arc<ResolvedNodeClass>, CloudError> {
        // From the watch: this is every round's and every launch's read (see `NodeClasses`).
        let class = self
            .classes
            .get(name)
            .await
            .map_err(|e| CloudError::api("reading the GCENodeClass", e))?;
        self.resolve_class(name, class.as_deref()).await?.resolved
    }

    /// Resolves a node class as [`Self::resolve_node_class`] does, and says which status that
    /// amounts to when it differs from the class's: the node class status controller writes it
    /// (the provider makes no Kubernetes writes). The class is read from the API server, not
    /// the watch, so a status follows the change that prompted it.
    pub async fn resolve_node_class_status(
        &self,
        name: &str,
    ) -> Result<NodeClassResolution, CloudError> {
        let api: kube::Api<GCENodeClass> = kube::Api::all(self.kube.clone());
        let class = api
            .get_opt(name)
            .await
            .map_err(|e| CloudError::api("reading the GCENodeClass", e))?;
        self.resolve_class(name, class.as_ref()).await
    }

    /// Resolves the class `name` as found (`None`: there is none).
    async fn resolve_class(
        &self,
        name: &str,
        class: Option<&GCENodeClass>,
    ) -> Result<NodeClassResolution, CloudError> {
        let Some(class) = class else {
            return Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: format!("GCENodeClass {name} does not exist"),
            });
        };
        let previous = class.status.clone().unwrap_or_default();
        let template_image = self
            .node_template()
            .await?
            .and_then(|t| t.source_image.clone());
        let cached = {
            let cache = self
                .node_classes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cache
                .get(name)
                .filter(|cached| {
                    cached.spec == class.spec
                        && cached.template_image == template_image
                        && cached.resolved_at.elapsed() < self.config.node_class_ttl
                })
                .map(|cached| cached.resolved.clone())
        };
        if let Some(cached) = cached {
            let status =
                nodeclass::status(&Ok((*cached).clone()), class.metadata.generation, &previous);
            return Ok(NodeClassResolution {
                resolved: Ok(cached),
                status: nodeclass::status_changed(&status, &previous).then_some(status),
            });
        }
        let result = nodeclass::resolve(
            &self.clients.images,
            class,
            &self.config.project,
            template_image.as_deref(),
        )
        .await;
        let (status, outcome): (
            GCENodeClassStatus,
            Result<Arc<ResolvedNodeClass>, CloudError>,
        ) = match result {
            Ok(resolved) => {
                let status =
                    nodeclass::status(&Ok(resolved.clone()), class.metadata.generation, &previous);
                (status, Ok(Arc::new(resolved)))
            }
            Err(nodeclass::ResolveError::NotReady { reason }) => (
                nodeclass::status(&Err(reason.clone()), class.metadata.generation, &previous),
                Err(CloudError::NodeClassNotReady {
                    name: name.to_owned(),
                    reason,
                }),
            ),
            Err(nodeclass::ResolveError::Cloud(e)) => return Err(e),
        };
        if let Ok(resolved) = &outcome {
            self.node_classes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(
                    name.to_owned(),
                    CachedNodeClass {
                        resolved_at: Instant::now(),
                        spec: class.spec.clone(),
                        template_image,
                        resolved: resolved.clone(),
                    },
                );
        }
        Ok(NodeClassResolution {
            resolved: outcome,
            status: nodeclass::status_changed(&status, &previous).then_some(status),
        })
    }

    /// The catalogue from Compute, refreshed when older than `catalogue_ttl` (a stale one is
    /// kept when a refresh fails).
    pub async fn catalogue(&self) -> Result<Arc<CatalogueSnapshot>, CloudError> {
        super::catalogue::cached_or_refreshed(
            &self.catalogue,
            |c| c.fetched,
            self.config.catalogue_ttl,
            "machine type",
            || self.fetch_catalogue(),
        )
        .await
    }

    async fn fetch_catalogue(&self) -> Result<CatalogueSnapshot, CloudError> {
        let started = Instant::now();
        let project = &self.config.project;
        let mut zones = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .clients
                .zones
                .list()
                .set_project(project)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| cloud_error("listing zones", e))?;
            for zone in page.items {
                let (Some(name), Some(region)) = (zone.name.clone(), zone.region.clone()) else {
                    continue;
                };
                let up = zone.status.as_ref().and_then(|s| s.name()) != Some("DOWN");
                let wanted = if self.config.zones.is_empty() {
                    last_segment(&region) == self.config.region
                } else {
                    self.config.zones.contains(&name)
                };
                if up && wanted {
                    zones.push(name);
                }
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = next,
                None => break,
            }
        }
        zones.sort();
        let mut types = BTreeMap::new();
        let mut zones_of: HashMap<String, Vec<String>> = HashMap::new();
        let mut token = String::new();
        loop {
            let page = self
                .clients
                .machine_types
                .aggregated_list()
                .set_project(project)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| cloud_error("listing machine types", e))?;
            for (scope, list) in page.items {
                let zone = scope.strip_prefix("zones/").unwrap_or(&scope).to_owned();
                if !zones.contains(&zone) {
                    continue;
                }
                for mt in &list.machine_types {
                    let Some(info) = MachineTypeInfo::from_api(mt) else {
                        continue;
                    };
                    zones_of
                        .entry(info.name.clone())
                        .or_default()
                        .push(zone.clone());
                    types.entry(info.name.clone()).or_insert(info);
                }
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = next,
                None => break,
            }
        }
        for list in zones_of.values_mut() {
            list.sort();
        }
        // Every 12 hours, the region's rates; a failure keeps the last good (or the table).
        self.prices
            .refresh_if_due(&self.clients.billing, &self.config.region)
            .await;
        tracing::info!(
            types = types.len(),
            zones = zones.len(),
            elapsed_ms = started.elapsed().as_millis(),
            "refreshed the Compute Engine machine type catalogue"
        );
        Ok(CatalogueSnapshot {
            fetched: Some(Instant::now()),
            types,
            zones_of,
            zones,
            rates: self.prices.rates(),
        })
    }

    /// The catalogue for a resolved node class: types some image of the class can boot,
    /// offered in the configured zones, priced, with the unavailable-offerings cache applied.
    pub fn instance_types_for(
        &self,
        resolved: &ResolvedNodeClass,
        snapshot: &CatalogueSnapshot,
    ) -> Vec<InstanceType> {
        let boot_gib = resolved
            .spec
            .disks
            .iter()
            .find(|d| d.boot)
            .and_then(|d| d.size_gib)
            .and_then(|gib| u64::try_from(gib).ok())
            .unwrap_or(catalogue::DEFAULT_BOOT_DISK_GIB);
        snapshot
            .types
            .values()
            .filter(|info| resolved.image_for(&info.arch).is_some())
            .map(|info| {
                let zones = snapshot
                    .zones_of
                    .get(&info.name)
                    .cloned()
                    .unwrap_or_default();
                let price = snapshot.price(info, &self.config.region);
                if price.is_none() {
                    tracing::debug!(machine_type = %info.name, "no price known; offered last");
                }
                let mut it = catalogue::instance_type(info, &self.config.region, boot_gib);
                it.offerings = catalogue::offerings(&zones, price, |ct, zone| {
                    self.unavailable.is_unavailable(ct, &info.name, zone)
                });
                it
            })
            .collect()
    }

    /// Reads one instance by zone and name (`None` when it does not exist).
    pub async fn instance_by_name(
        &self,
        zone: &str,
        name: &str,
    ) -> Result<Option<Instance>, CloudError> {
        let found = self
            .clients
            .instances
            .get()
            .set_project(&self.config.project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await;
        match found {
            Ok(instance) => {
                let snapshot = self.catalogue().await?;
                Ok(self.instance_from_api(&instance, &snapshot))
            }
            Err(e) if e.http_status_code() == Some(404) => Ok(None),
            Err(e) => Err(cloud_error("reading the instance", e)),
        }
    }

    fn instance_from_api(
        &self,
        instance: &google_cloud_compute_v1::model::Instance,
        snapshot: &CatalogueSnapshot,
    ) -> Option<Instance> {
        let json = serde_json::to_value(instance).ok()?;
        let name = json.get("name")?.as_str()?.to_owned();
        let zone = last_segment(json.get("zone")?.as_str()?).to_owned();
        let machine_type = last_segment(
            json.get("machineType")
                .and_then(|v| v.as_str())
                .unwrap_or_default(),
        )
        .to_owned();
        let metadata: HashMap<String, String> = json
            .pointer("/metadata/items")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|item| {
                Some((
                    item.get("key")?.as_str()?.to_owned(),
                    item.get("value")?.as_str()?.to_owned(),
                ))
            })
            .collect();
        let label = |key: &str| instance.labels.get(key).cloned();
        let spot = json
            .pointer("/scheduling/provisioningModel")
            .and_then(|v| v.as_str())
            == Some("SPOT")
            || json
                .pointer("/scheduling/preemptible")
                .and_then(serde_json::Value::as_bool)
                == Some(true);
        let capacity_type = if spot {
            labels::CAPACITY_TYPE_SPOT
        } else {
            labels::CAPACITY_TYPE_ON_DEMAND
        };
        let status = json
            .get("status")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let terminating = matches!(
            status,
            "STOPPING" | "STOPPED" | "SUSPENDING" | "SUSPENDED" | "TERMINATED"
        );
        let info = snapshot.types.get(&machine_type);
        let it = info.map(|info| {
            catalogue::instance_type(info, &self.config.region, catalogue::DEFAULT_BOOT_DISK_GIB)
        });
        let mut node_labels = it
            .as_ref()
            .map(InstanceType::fixed_labels)
            .unwrap_or_default();
        node_labels.insert(labels::INSTANCE_TYPE.to_owned(), machine_type.clone());
        node_labels.insert(labels::ZONE.to_owned(), zone.clone());
        node_labels.insert(labels::CAPACITY_TYPE.to_owned(), capacity_type.to_owned());
        let price = info
            .and_then(|info| snapshot.price(info, &self.config.region))
            .map(|p| if spot { p.spot } else { p.on_demand });
        Some(Instance {
            provider_id: ProviderId::Gce {
                project: self.config.project.clone(),
                zone: zone.clone(),
                name,
            },
            node_claim: metadata
                .get(NODE_CLAIM_METADATA)
                .cloned()
                .or_else(|| label(NODE_CLAIM_LABEL)),
            node_pool: metadata
                .get(NODE_POOL_METADATA)
                .cloned()
                .or_else(|| label(NODE_POOL_LABEL)),
            instance_type: machine_type,
            zone,
            capacity_type: capacity_type.to_owned(),
            image_id: None,
            capacity: it
                .as_ref()
                .map(|it| it.capacity.clone())
                .unwrap_or_default(),
            allocatable: it
                .as_ref()
                .map(InstanceType::allocatable)
                .unwrap_or_default(),
            labels: node_labels,
            annotations: BTreeMap::new(),
            price,
            created: instance
                .creation_timestamp
                .as_deref()
                .and_then(|t| t.parse().ok()),
            terminating,
        })
    }
}

/// The last segment of a resource URL (`…/zones/us-central1-a` → `us-central1-a`).
pub fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

fn is_gce_node_class(reference: &NodeClassReference) -> bool {
    reference.kind == "GCENodeClass" && reference.group == labels::GCP_GROUP
}

fn not_a_gce_node_class(reference: &NodeClassReference) -> CloudError {
    CloudError::NodeClassNotReady {
        name: reference.name.clone(),
        reason: format!(
            "{}/{} is not a GCENodeClass; the gcp provider serves only those",
            reference.group, reference.kind
        ),
    }
}

impl CloudProvider for GcpProvider {
    fn name(&self) -> &'static str {
        "gcp"
    }

    /// As the GKE Karpenter providers: the kubelet's Ready condition, tolerated 15 minutes.
    fn repair_policies(&self) -> Vec<crate::cloud::RepairPolicy> {
        crate::cloud::repair::kubelet_not_ready(15).to_vec()
    }

    /// The class's static fields, then its image (see [`drift`]).
    async fn kubelet_identity(
        &self,
        id: &ProviderId,
    ) -> Result<Option<super::KubeletIdentity>, CloudError> {
        self.kubelet_identity_of(id).await
    }

    async fn drift(&self, claim: &NodeClaim) -> Result<Option<String>, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_gce_node_class(reference) {
            return Ok(None);
        }
        let class = self
            .classes
            .get(&reference.name)
            .await
            .map_err(|e| CloudError::api("reading the GCENodeClass", e))?;
        Ok(class
            .and_then(|class| drift::drift(claim, &class))
            .map(str::to_owned))
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> Result<Instance, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_gce_node_class(reference) {
            return Err(not_a_gce_node_class(reference));
        }
        let resolved = self.resolve_node_class(&reference.name).await?;
        let snapshot = self.catalogue().await?;
        let template = self.node_template().await?;
        launch::launch(
            self,
            claim,
            candidates,
            &resolved,
            &snapshot,
            template.as_deref(),
        )
        .await
    }

    async fn delete(&self, id: &ProviderId) -> Result<DeleteOutcome, CloudError> {
        let ProviderId::Gce {
            project,
            zone,
            name,
        } = id
        else {
            return Ok(DeleteOutcome::Gone);
        };
        let sent = self
            .clients
            .instances
            .delete()
            .set_project(project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await;
        match sent {
            Ok(op) => {
                if let Some(failure) = launch::operation_failure(&op) {
                    tracing::warn!(instance = %name, ?failure, "instance delete failed");
                    return Err(CloudError::api(
                        "deleting the instance",
                        launch::OperationError {
                            operation: op.name.unwrap_or_default(),
                            message: format!("{failure:?}"),
                        },
                    ));
                }
                tracing::info!(instance = %name, zone = %zone, "deleting instance");
                Ok(DeleteOutcome::Terminating)
            }
            Err(e) if e.http_status_code() == Some(404) => Ok(DeleteOutcome::Gone),
            Err(e) => Err(cloud_error("deleting the instance", e)),
        }
    }

    async fn get(&self, id: &ProviderId) -> Result<Option<Instance>, CloudError> {
        let ProviderId::Gce {
            project,
            zone,
            name,
        } = id
        else {
            return Ok(None);
        };
        if *project != self.config.project {
            return Ok(None);
        }
        self.instance_by_name(zone, name).await
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, CloudError> {
        let filter = format!(
            "(labels.{CLUSTER_LABEL} = \"{}\") AND (labels.{NODE_POOL_LABEL}:*)",
            gce_label_value(&self.config.cluster_name)
        );
        let mut found = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .clients
                .instances
                .aggregated_list()
                .set_project(&self.config.project)
                .set_filter(filter.clone())
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| cloud_error("listing instances", e))?;
            for scoped in page.items.values() {
                found.extend(scoped.instances.iter().cloned());
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = next,
                None => break,
            }
        }
        let snapshot = self.catalogue().await?;
        Ok(found
            .iter()
            .filter(|i| self.config.owns_labels(&i.labels))
            .filter_map(|i| self.instance_from_api(i, &snapshot))
            .map(ListedInstance::from)
            .collect())
    }

    async fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> Result<Arc<[InstanceType]>, CloudError> {
        if !is_gce_node_class(node_class) {
            return Err(not_a_gce_node_class(node_class));
        }
        let resolved = self.resolve_node_class(&node_class.name).await?;
        let snapshot = self.catalogue().await?;
        Ok(self.instance_types_for(&resolved, &snapshot).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_gce_rules() {
        assert_eq!(gce_label_value("Default.Pool_x"), "default-pool_x");
        assert_eq!(gce_label_key("1team"), "k-1team");
        assert_eq!(gce_label_value(&"x".repeat(80)).len(), 63);
    }
}
