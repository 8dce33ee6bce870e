//! The EC2 provider: launches a NodeClaim's instance with a launch template and an instant
//! CreateFleet, terminates and lists this cluster's instances, and describes the catalogue
//! (DescribeInstanceTypes + offerings + prices) for a node class.
//!
//! Sits under the controllers like every [`CloudProvider`]; also owns what only AWS has: the
//! EC2NodeClass resolution ([`nodeclass`]), the cache of offerings EC2 had no capacity for
//! ([`unavailable`]) and the interruption queue's SQS side ([`interruption`]). It makes no
//! Kubernetes writes: it reads the EC2NodeClass it resolves, and the controllers write the rest.
//!
//! ```no_run
//! # async fn example(kube: kube::Client) -> Result<(), karpenter_core::cloud::CloudError> {
//! use karpenter_core::cloud::aws::{AwsConfig, AwsProvider};
//! let config = AwsConfig::new("us-west-2", "demo");
//! let provider = AwsProvider::new(config, kube).await;
//! # let _ = provider; Ok(()) }
//! ```

pub mod catalogue;
mod cleanup;
pub mod drift;
pub mod interruption;
mod launch;
pub mod nodeclass;
pub mod price_feed;
pub mod pricing;
pub mod userdata;

use super::node_classes::NodeClasses;
use super::provider::{
    CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId,
};
use super::unavailable::{self, UnavailableOfferings};
use crate::apis::{EC2NodeClass, NodeClaim, NodeClassReference, labels};
use crate::scheduling::InstanceType;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{Filter, InstanceStateName, LocationType};
use catalogue::TypeInfo;
use nodeclass::{NodeClassResolution, ResolvedNodeClass};
use pricing::PriceTable;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use userdata::ClusterBootstrap;

/// Tag on everything launched for a cluster: `kubernetes.io/cluster/<name>` = `owned`.
pub fn cluster_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}
/// The tag EKS reads the cluster name from.
pub const EKS_CLUSTER_NAME_TAG: &str = "eks:eks-cluster-name";
/// The tag naming an instance's NodeClaim (the NodePool tag is [`labels::NODE_POOL`]).
pub const NODE_CLAIM_TAG: &str = "karpenter.sh/nodeclaim";
/// The tag naming the cluster on launch templates (upstream's `karpenter.k8s.aws/cluster`).
pub const LAUNCH_TEMPLATE_CLUSTER_TAG: &str = "karpenter.k8s.aws/cluster";

/// What the provider needs to know that the node classes do not say.
#[derive(Clone, Debug)]
pub struct AwsConfig {
    /// The region the cluster and its nodes are in.
    pub region: String,
    /// The EKS cluster's name (tags, instance profiles, DescribeCluster).
    pub cluster_name: String,
    /// Send every AWS call here instead of AWS (tests: moto). `AWS_ENDPOINT_URL` works too.
    pub endpoint_url: Option<String>,
    /// The SQS queue of interruption events, if interruption handling is on.
    pub interruption_queue: Option<String>,
    /// The API server, its CA and the service CIDR as nodes need them; read with EKS
    /// DescribeCluster when not given.
    pub cluster_endpoint: Option<String>,
    pub cluster_ca_bundle: Option<String>,
    pub service_cidr: Option<String>,
    /// On-demand prices: the region's shipped table, and a price file's if given.
    pub prices: PriceTable,
    /// How long DescribeInstanceTypes, offerings and spot prices are reused (upstream: 5 min).
    pub catalogue_ttl: Duration,
    /// How long a node class's resolution is reused before EC2 is asked again.
    pub node_class_ttl: Duration,
    /// How long an offering EC2 had no capacity for is skipped (upstream: 3 min).
    pub unavailable_ttl: Duration,
}

impl AwsConfig {
    /// Upstream's defaults for a cluster in a region.
    pub fn new(region: impl Into<String>, cluster_name: impl Into<String>) -> Self {
        let region = region.into();
        Self {
            prices: PriceTable::shipped(&region),
            region,
            cluster_name: cluster_name.into(),
            endpoint_url: None,
            interruption_queue: None,
            cluster_endpoint: None,
            cluster_ca_bundle: None,
            service_cidr: None,
            catalogue_ttl: Duration::from_secs(300),
            node_class_ttl: Duration::from_secs(60),
            unavailable_ttl: unavailable::DEFAULT_TTL,
        }
    }

    /// The region the SDK's default chain finds (AWS_REGION, the profile, IMDS), if any.
    pub async fn default_region() -> Option<String> {
        aws_config::load_defaults(aws_config::BehaviorVersion::latest())
            .await
            .region()
            .map(ToString::to_string)
    }

    /// The SDK configuration: the default credential chain, this region, and the endpoint
    /// override if any.
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(self.region.clone()));
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        loader
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(3))
            .timeout_config(sdk_timeouts())
            .load()
            .await
    }
}

/// Every AWS call is bounded. Upstream's provider gives its SDK HTTP client a 4-minute
/// timeout (`DefaultAWSSDKClientTimeout` in `pkg/operator/operator.go`) and keeps the SDK's
/// standard retryer (3 attempts, exponential backoff with full jitter, throttling errors
/// included); so does this, per attempt, with the SDK's 3.1 s connect timeout kept explicit.
fn sdk_timeouts() -> aws_config::timeout::TimeoutConfig {
    aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(3100))
        .operation_attempt_timeout(Duration::from_secs(240))
        .build()
}

/// The AWS service clients, built once from one SDK configuration.
#[derive(Clone, Debug)]
pub struct Clients {
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    pub iam: aws_sdk_iam::Client,
    pub eks: aws_sdk_eks::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// The Price List Query API, at the endpoint that serves `region`.
    pub pricing: aws_sdk_pricing::Client,
    pub region: String,
    pub cluster_name: String,
}

impl Clients {
    /// Clients for `sdk`, acting for `cluster_name` in `region`.
    pub fn new(sdk: &aws_config::SdkConfig, region: &str, cluster_name: &str) -> Self {
        Self {
            ec2: aws_sdk_ec2::Client::new(sdk),
            ssm: aws_sdk_ssm::Client::new(sdk),
            iam: aws_sdk_iam::Client::new(sdk),
            eks: aws_sdk_eks::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
            pricing: aws_sdk_pricing::Client::from_conf(
                aws_sdk_pricing::config::Builder::from(sdk)
                    .region(aws_sdk_pricing::config::Region::new(
                        price_feed::pricing_region(region),
                    ))
                    // A failed refresh is retried with the next catalogue, not hammered now;
                    // and launches wait on the catalogue, so an unreachable Pricing endpoint
                    // (an isolated VPC) costs them at most this long per page.
                    .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(2))
                    .timeout_config(
                        aws_config::timeout::TimeoutConfig::builder()
                            .operation_timeout(Duration::from_secs(20))
                            .build(),
                    )
                    .build(),
            ),
            region: region.to_owned(),
            cluster_name: cluster_name.to_owned(),
        }
    }
}

/// The error code of an AWS SDK error, if the service sent one.
pub fn sdk_error_code<E: ProvideErrorMetadata>(error: &E) -> Option<&str> {
    error.code()
}

/// Codes that mean "slow down".
const THROTTLING_CODES: [&str; 5] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestThrottled",
];

/// Maps an SDK error onto the provider's errors: throttling, or an API failure naming `action`.
pub fn cloud_error<E>(action: &str, error: E) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    // The SDK's Display says only "service error"; keep the code and message in the chain.
    let detail = match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        // No answer from the service: a timeout, a refused connection, an unreadable reply.
        (None, _) => format!("{}", aws_sdk_ec2::error::DisplayErrorContext(&error)),
    };
    let throttled = error.code().is_some_and(|c| THROTTLING_CODES.contains(&c));
    let error = AwsApiError {
        detail,
        sdk: Box::new(error),
    };
    if throttled {
        return CloudError::Throttled {
            source: Box::new(error),
        };
    }
    CloudError::Api {
        action: action.to_owned(),
        source: Box::new(error),
    }
}

/// An AWS error with its code and message in the text. The SDK's own error is kept for the
/// debug output but is not its `source`: its text ("service error", "dispatch failure") would
/// only repeat less of the detail in a condition or Event that prints the chain.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub struct AwsApiError {
    detail: String,
    sdk: Box<dyn std::error::Error + Send + Sync>,
}

/// What DescribeInstanceTypes, DescribeInstanceTypeOfferings and DescribeSpotPriceHistory said.
#[derive(Debug, Default)]
pub struct CatalogueSnapshot {
    fetched: Option<Instant>,
    pub types: BTreeMap<String, TypeInfo>,
    /// Zones each type is offered in.
    pub zones: HashMap<String, Vec<String>>,
    /// Latest spot price per (type, zone).
    pub spot: HashMap<(String, String), f64>,
    /// The region's on-demand prices from the Pricing API, when it answered.
    pub on_demand: Arc<HashMap<String, f64>>,
}

struct CachedNodeClass {
    resolved_at: Instant,
    spec: crate::apis::EC2NodeClassSpec,
    resolved: Arc<ResolvedNodeClass>,
}

/// Launches and tracks EC2 instances for NodeClaims.
pub struct AwsProvider {
    clients: Clients,
    kube: kube::Client,
    config: AwsConfig,
    unavailable: Arc<UnavailableOfferings>,
    catalogue: tokio::sync::Mutex<Arc<CatalogueSnapshot>>,
    node_classes: Mutex<HashMap<String, CachedNodeClass>>,
    classes: NodeClasses<EC2NodeClass>,
    launch_templates: Mutex<HashSet<String>>,
    k8s_version: tokio::sync::OnceCell<String>,
    bootstrap: tokio::sync::OnceCell<ClusterBootstrap>,
    price_feed: price_feed::PriceFeed,
}

impl AwsProvider {
    /// Reports the live price feed's refreshes in `metrics` (see [`price_feed::PriceFeed::report_to`]).
    pub fn report_prices_to(&self, metrics: Arc<crate::metrics::Metrics>) {
        self.price_feed.report_to(metrics);
    }

    /// A provider using the default credential chain (and `config.endpoint_url`).
    pub async fn new(config: AwsConfig, kube: kube::Client) -> Self {
        let sdk = config.sdk_config().await;
        Self::with_sdk_config(config, &sdk, kube)
    }

    /// A provider with an SDK configuration of your own (tests: static credentials).
    pub fn with_sdk_config(
        config: AwsConfig,
        sdk: &aws_config::SdkConfig,
        kube: kube::Client,
    ) -> Self {
        let clients = Clients::new(sdk, &config.region, &config.cluster_name);
        Self {
            clients,
            classes: NodeClasses::new(kube.clone()),
            kube,
            unavailable: Arc::new(UnavailableOfferings::new(config.unavailable_ttl)),
            config,
            catalogue: tokio::sync::Mutex::new(Arc::new(CatalogueSnapshot::default())),
            node_classes: Mutex::new(HashMap::new()),
            launch_templates: Mutex::new(HashSet::new()),
            k8s_version: tokio::sync::OnceCell::new(),
            bootstrap: tokio::sync::OnceCell::new(),
            price_feed: price_feed::PriceFeed::default(),
        }
    }

    /// The AWS clients (shared with the interruption handler).
    pub fn clients(&self) -> &Clients {
        &self.clients
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &AwsConfig {
        &self.config
    }

    /// The shared cache of offerings with no capacity (the interruption handler adds to it).
    pub fn unavailable_offerings(&self) -> Arc<UnavailableOfferings> {
        self.unavailable.clone()
    }

    /// `major.minor` of the API server, for the EKS AMI aliases.
    async fn kubernetes_version(&self) -> Result<&str, CloudError> {
        self.k8s_version
            .get_or_try_init(|| async {
                let info = self
                    .kube
                    .apiserver_version()
                    .await
                    .map_err(|e| CloudError::api("reading the Kubernetes version", e))?;
                let minor: String = info
                    .minor
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                Ok::<_, CloudError>(format!("{}.{minor}", info.major))
            })
            .await
            .map(String::as_str)
    }

    /// What nodes need to join the cluster (config first, else EKS DescribeCluster).
    async fn cluster_bootstrap(&self) -> Result<&ClusterBootstrap, CloudError> {
        self.bootstrap
            .get_or_try_init(|| async {
                let c = &self.config;
                if let (Some(endpoint), Some(ca)) = (&c.cluster_endpoint, &c.cluster_ca_bundle) {
                    return Ok(ClusterBootstrap {
                        name: c.cluster_name.clone(),
                        endpoint: endpoint.clone(),
                        ca_bundle: ca.clone(),
                        service_cidr: c
                            .service_cidr
                            .clone()
                            .unwrap_or_else(|| "10.100.0.0/16".to_owned()),
                    });
                }
                let out = self
                    .clients
                    .eks
                    .describe_cluster()
                    .name(&c.cluster_name)
                    .send()
                    .await
                    .map_err(|e| {
                        cloud_error(
                            "reading the EKS cluster (eks:DescribeCluster) for node bootstrap",
                            e,
                        )
                    })?;
                let cluster = out.cluster();
                Ok(ClusterBootstrap {
                    name: c.cluster_name.clone(),
                    endpoint: c
                        .cluster_endpoint
                        .clone()
                        .or_else(|| cluster.and_then(|x| x.endpoint()).map(str::to_owned))
                        .unwrap_or_default(),
                    ca_bundle: c
                        .cluster_ca_bundle
                        .clone()
                        .or_else(|| {
                            cluster
                                .and_then(|x| x.certificate_authority())
                                .and_then(|a| a.data())
                                .map(str::to_owned)
                        })
                        .unwrap_or_default(),
                    service_cidr: c
                        .service_cidr
                        .clone()
                        .or_else(|| {
                            cluster
                                .and_then(|x| x.kubernetes_network_config())
                                .and_then(|n| n.service_ipv4_cidr())
                                .map(str::to_owned)
                        })
                        .unwrap_or_else(|| "10.100.0.0/16".to_owned()),
                })
            })
            .await
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
            .map_err(|e| CloudError::api("reading the EC2NodeClass", e))?;
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
        let api: kube::Api<EC2NodeClass> = kube::Api::all(self.kube.clone());
        let class = api
            .get_opt(name)
            .await
            .map_err(|e| CloudError::api("reading the EC2NodeClass", e))?;
        self.resolve_class(name, class.as_ref()).await
    }

    /// Resolves the class `name` as found (`None`: there is none).
    async fn resolve_class(
        &self,
        name: &str,
        class: Option<&EC2NodeClass>,
    ) -> Result<NodeClassResolution, CloudError> {
        let Some(class) = class else {
            return Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: format!("EC2NodeClass {name} does not exist"),
            });
        };
        let previous = class.status.clone().unwrap_or_default();
        let generation = class.metadata.generation;
        if let Some(cached) = self.cached_node_class(name, class) {
            let status = nodeclass::status(&Ok((*cached).clone()), None, generation, &previous);
            return Ok(NodeClassResolution {
                resolved: Ok(cached),
                status: (!nodeclass::same_status(&status, &previous)).then_some(status),
            });
        }
        let k8s_version = self.kubernetes_version().await?.to_owned();
        let result = nodeclass::resolve(&self.clients, class, &k8s_version).await;
        let (status, outcome) = match result {
            Ok(resolved) => {
                let resolved = Arc::new(resolved);
                (
                    nodeclass::status(&Ok((*resolved).clone()), None, generation, &previous),
                    Ok(resolved),
                )
            }
            Err(nodeclass::ResolveError::NotReady { condition, reason }) => (
                nodeclass::status(&Err(reason.clone()), Some(condition), generation, &previous),
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
                        resolved: resolved.clone(),
                    },
                );
        }
        Ok(NodeClassResolution {
            resolved: outcome,
            status: (!nodeclass::same_status(&status, &previous)).then_some(status),
        })
    }

    fn cached_node_class(
        &self,
        name: &str,
        class: &EC2NodeClass,
    ) -> Option<Arc<ResolvedNodeClass>> {
        let cache = self
            .node_classes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cached = cache.get(name)?;
        let fresh =
            cached.resolved_at.elapsed() < self.config.node_class_ttl && cached.spec == class.spec;
        let ready = class.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == nodeclass::conditions::READY && c.status == "True")
        });
        (fresh && ready).then(|| cached.resolved.clone())
    }

    /// The catalogue from EC2, refreshed when older than `catalogue_ttl` (a stale one is kept
    /// when a refresh fails).
    pub async fn catalogue(&self) -> Result<Arc<CatalogueSnapshot>, CloudError> {
        super::catalogue::cached_or_refreshed(
            &self.catalogue,
            |c| c.fetched,
            self.config.catalogue_ttl,
            "instance type",
            || self.fetch_catalogue(),
        )
        .await
    }

    async fn fetch_catalogue(&self) -> Result<CatalogueSnapshot, CloudError> {
        let started = Instant::now();
        let ec2 = &self.clients.ec2;
        let mut types = BTreeMap::new();
        let mut token = None;
        loop {
            let out = ec2
                .describe_instance_types()
                .filters(
                    Filter::builder()
                        .name("processor-info.supported-architecture")
                        .values("x86_64")
                        .values("arm64")
                        .build(),
                )
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| cloud_error("describing instance types", e))?;
            for info in out.instance_types() {
                if let Some(t) = TypeInfo::from_sdk(info) {
                    types.insert(t.name.clone(), t);
                }
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        let mut zones: HashMap<String, Vec<String>> = HashMap::new();
        let mut token = None;
        loop {
            let out = ec2
                .describe_instance_type_offerings()
                .location_type(LocationType::AvailabilityZone)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| cloud_error("describing instance type offerings", e))?;
            for o in out.instance_type_offerings() {
                if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                    zones
                        .entry(t.as_str().to_owned())
                        .or_default()
                        .push(zone.to_owned());
                }
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        let mut spot: HashMap<(String, String), (f64, i64)> = HashMap::new();
        let mut token = None;
        loop {
            let out = ec2
                .describe_spot_price_history()
                .product_descriptions("Linux/UNIX")
                .product_descriptions("Linux/UNIX (Amazon VPC)")
                .start_time(aws_sdk_ec2::primitives::DateTime::from(
                    std::time::SystemTime::now(),
                ))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| cloud_error("describing spot prices", e))?;
            for p in out.spot_price_history() {
                let (Some(t), Some(zone), Some(price)) = (
                    p.instance_type(),
                    p.availability_zone(),
                    p.spot_price().and_then(|s| s.parse::<f64>().ok()),
                ) else {
                    continue;
                };
                let at = p.timestamp().map(|t| t.secs()).unwrap_or_default();
                let entry = spot
                    .entry((t.as_str().to_owned(), zone.to_owned()))
                    .or_insert((price, at));
                if at > entry.1 {
                    *entry = (price, at);
                }
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        // Every 12 hours, the region's exact on-demand prices; a failure keeps the last good.
        self.price_feed
            .refresh_if_due(&self.clients.pricing, &self.config.region)
            .await;
        tracing::info!(
            types = types.len(),
            elapsed_ms = started.elapsed().as_millis(),
            "refreshed the EC2 instance type catalogue"
        );
        Ok(CatalogueSnapshot {
            fetched: Some(Instant::now()),
            types,
            zones,
            spot: spot.into_iter().map(|(k, (price, _))| (k, price)).collect(),
            on_demand: self.price_feed.prices(),
        })
    }

    /// The catalogue for a resolved node class: types some AMI can boot, offered in its
    /// subnets' zones, priced, with the unavailable-offerings cache applied.
    pub fn instance_types_for(
        &self,
        resolved: &ResolvedNodeClass,
        snapshot: &CatalogueSnapshot,
    ) -> Vec<InstanceType> {
        let zones: Vec<String> = {
            let mut z: Vec<String> = resolved.subnets.iter().map(|s| s.zone.clone()).collect();
            z.dedup();
            z
        };
        let root_volume = root_volume_bytes(&resolved.spec);
        let kubelet = resolved.spec.kubelet.as_ref();
        snapshot
            .types
            .values()
            .filter(|info| {
                resolved
                    .amis
                    .iter()
                    .any(|a| a.fits(&info.arch, info.gpus.is_some() || info.neuron_devices > 0))
            })
            .map(|info| {
                let mut it =
                    catalogue::instance_type(info, &self.config.region, root_volume, kubelet);
                let offered: Vec<String> = snapshot
                    .zones
                    .get(&info.name)
                    .map(|z| {
                        zones
                            .iter()
                            .filter(|zone| z.contains(zone))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                it.offerings = catalogue::offerings(
                    info,
                    &offered,
                    self.config
                        .prices
                        .on_demand_with(&snapshot.on_demand, &info.name),
                    |zone| {
                        snapshot
                            .spot
                            .get(&(info.name.clone(), zone.to_owned()))
                            .copied()
                    },
                    |capacity_type, zone| {
                        self.unavailable
                            .is_unavailable(capacity_type, &info.name, zone)
                    },
                );
                it
            })
            .collect()
    }

    fn instance_from_ec2(
        &self,
        instance: &aws_sdk_ec2::types::Instance,
        snapshot: &CatalogueSnapshot,
    ) -> Option<Instance> {
        let id = instance.instance_id()?;
        let zone = instance
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_owned();
        let instance_type = instance
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default();
        let tags: HashMap<&str, &str> = instance
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?, t.value()?)))
            .collect();
        let capacity_type = if instance
            .instance_lifecycle()
            .is_some_and(|l| l.as_str() == "spot")
        {
            labels::CAPACITY_TYPE_SPOT
        } else {
            labels::CAPACITY_TYPE_ON_DEMAND
        };
        let state = instance.state().and_then(|s| s.name());
        let terminating = matches!(
            state,
            Some(
                InstanceStateName::ShuttingDown
                    | InstanceStateName::Terminated
                    | InstanceStateName::Stopping
                    | InstanceStateName::Stopped
            )
        );
        let info = snapshot.types.get(&instance_type);
        let it = info.map(|info| {
            catalogue::instance_type(
                info,
                &self.config.region,
                catalogue::DEFAULT_ROOT_VOLUME_BYTES,
                None,
            )
        });
        let mut node_labels = it
            .as_ref()
            .map(InstanceType::fixed_labels)
            .unwrap_or_default();
        node_labels.insert(labels::INSTANCE_TYPE.to_owned(), instance_type.clone());
        node_labels.insert(labels::ZONE.to_owned(), zone.clone());
        node_labels.insert(labels::CAPACITY_TYPE.to_owned(), capacity_type.to_owned());
        let price = if capacity_type == labels::CAPACITY_TYPE_SPOT {
            snapshot
                .spot
                .get(&(instance_type.clone(), zone.clone()))
                .copied()
        } else {
            self.config
                .prices
                .on_demand_with(&snapshot.on_demand, &instance_type)
        };
        Some(Instance {
            provider_id: ProviderId::Aws {
                zone: zone.clone(),
                instance_id: id.to_owned(),
            },
            node_claim: tags.get(NODE_CLAIM_TAG).map(|s| (*s).to_owned()),
            node_pool: tags.get(labels::NODE_POOL).map(|s| (*s).to_owned()),
            instance_type,
            zone,
            capacity_type: capacity_type.to_owned(),
            image_id: instance.image_id().map(str::to_owned),
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
                .launch_time()
                .and_then(|t| k8s_openapi::jiff::Timestamp::from_second(t.secs()).ok()),
            terminating,
        })
    }

    /// Instances this cluster owns (`kubernetes.io/cluster/<name>: owned`).
    fn cluster_filter(&self) -> Filter {
        Filter::builder()
            .name(format!("tag:{}", cluster_tag(&self.config.cluster_name)))
            .values("owned")
            .build()
    }

    /// The live instance of this cluster tagged for the claim `name`, if any.
    pub(crate) async fn launched_for(&self, name: &str) -> Result<Option<Instance>, CloudError> {
        let filters = vec![
            self.cluster_filter(),
            Filter::builder()
                .name(format!("tag:{NODE_CLAIM_TAG}"))
                .values(name)
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .build(),
        ];
        let instances = self.describe_instances(filters, Vec::new()).await?;
        let snapshot = self.catalogue().await?;
        Ok(instances
            .iter()
            .find_map(|i| self.instance_from_ec2(i, &snapshot)))
    }

    async fn describe_instances(
        &self,
        filters: Vec<Filter>,
        ids: Vec<String>,
    ) -> Result<Vec<aws_sdk_ec2::types::Instance>, CloudError> {
        let mut instances = Vec::new();
        let mut token = None;
        loop {
            let out = match self
                .clients
                .ec2
                .describe_instances()
                .set_filters((!filters.is_empty()).then(|| filters.clone()))
                .set_instance_ids((!ids.is_empty()).then(|| ids.clone()))
                .set_next_token(token)
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) if sdk_error_code(&e) == Some("InvalidInstanceID.NotFound") => {
                    return Ok(Vec::new());
                }
                Err(e) => return Err(cloud_error("describing instances", e)),
            };
            for reservation in out.reservations() {
                instances.extend(reservation.instances().iter().cloned());
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                return Ok(instances);
            }
        }
    }
}

/// The root volume size a node class asks for (default 20Gi).
pub fn root_volume_bytes(spec: &crate::apis::EC2NodeClassSpec) -> u64 {
    spec.block_device_mappings
        .iter()
        .find(|b| b.root_volume == Some(true))
        .or_else(|| spec.block_device_mappings.first())
        .and_then(|b| b.ebs.as_ref())
        .and_then(|e| e.volume_size.as_deref())
        .and_then(|size| crate::resources::parse(crate::resources::EPHEMERAL_STORAGE, size).ok())
        .unwrap_or(catalogue::DEFAULT_ROOT_VOLUME_BYTES)
}

fn is_ec2_node_class(reference: &NodeClassReference) -> bool {
    reference.kind == "EC2NodeClass" && reference.group == labels::AWS_GROUP
}

impl CloudProvider for AwsProvider {
    fn name(&self) -> &'static str {
        "aws"
    }

    /// Upstream's AWS provider (`pkg/cloudprovider/cloudprovider.go` `RepairPolicies`): the
    /// kubelet's Ready condition for 30 minutes, and the conditions the EKS node monitoring
    /// agent reports (accelerated hardware after 10 minutes, the rest after 30).
    fn repair_policies(&self) -> Vec<crate::cloud::RepairPolicy> {
        use crate::cloud::RepairPolicy;
        let mut policies = crate::cloud::repair::kubelet_not_ready(30).to_vec();
        policies.extend([
            RepairPolicy::new("AcceleratedHardwareReady", "False", 10),
            RepairPolicy::new("StorageReady", "False", 30),
            RepairPolicy::new("NetworkingReady", "False", 30),
            RepairPolicy::new("KernelReady", "False", 30),
            RepairPolicy::new("ContainerRuntimeReady", "False", 30),
        ]);
        policies
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> Result<Instance, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_ec2_node_class(reference) {
            return Err(CloudError::NodeClassNotReady {
                name: reference.name.clone(),
                reason: format!(
                    "{}/{} is not an EC2NodeClass; the aws provider launches only those",
                    reference.group, reference.kind
                ),
            });
        }
        let resolved = self.resolve_node_class(&reference.name).await?;
        let snapshot = self.catalogue().await?;
        let bootstrap = self.cluster_bootstrap().await?.clone();
        launch::launch(self, claim, candidates, &resolved, &snapshot, &bootstrap).await
    }

    async fn delete(&self, id: &ProviderId) -> Result<DeleteOutcome, CloudError> {
        let ProviderId::Aws { instance_id, .. } = id else {
            return Ok(DeleteOutcome::Gone);
        };
        match self
            .clients
            .ec2
            .terminate_instances()
            .instance_ids(instance_id)
            .send()
            .await
        {
            Ok(out) => {
                let change = out.terminating_instances().first();
                let was_terminated = change
                    .and_then(|c| c.previous_state())
                    .and_then(|s| s.name())
                    == Some(&InstanceStateName::Terminated);
                if change.is_none() || was_terminated {
                    Ok(DeleteOutcome::Gone)
                } else {
                    tracing::info!(instance_id, "terminating instance");
                    Ok(DeleteOutcome::Terminating)
                }
            }
            Err(e) if sdk_error_code(&e) == Some("InvalidInstanceID.NotFound") => {
                Ok(DeleteOutcome::Gone)
            }
            Err(e) => Err(cloud_error("terminating the instance", e)),
        }
    }

    async fn get(&self, id: &ProviderId) -> Result<Option<Instance>, CloudError> {
        let ProviderId::Aws { instance_id, .. } = id else {
            return Ok(None);
        };
        let instances = self
            .describe_instances(Vec::new(), vec![instance_id.clone()])
            .await?;
        let Some(instance) = instances.into_iter().next() else {
            return Ok(None);
        };
        if instance.state().and_then(|s| s.name()) == Some(&InstanceStateName::Terminated) {
            return Ok(None);
        }
        let snapshot = self.catalogue().await?;
        Ok(self.instance_from_ec2(&instance, &snapshot))
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, CloudError> {
        let filters = vec![
            self.cluster_filter(),
            Filter::builder()
                .name("tag-key")
                .values(labels::NODE_POOL)
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .values("stopping")
                .values("stopped")
                .values("shutting-down")
                .build(),
        ];
        let instances = self.describe_instances(filters, Vec::new()).await?;
        let snapshot = self.catalogue().await?;
        Ok(instances
            .iter()
            .filter_map(|i| self.instance_from_ec2(i, &snapshot))
            .map(ListedInstance::from)
            .collect())
    }

    async fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> Result<Arc<[InstanceType]>, CloudError> {
        if !is_ec2_node_class(node_class) {
            return Err(CloudError::NodeClassNotReady {
                name: node_class.name.clone(),
                reason: format!(
                    "{}/{} is not an EC2NodeClass; the aws provider serves only those",
                    node_class.group, node_class.kind
                ),
            });
        }
        let resolved = self.resolve_node_class(&node_class.name).await?;
        let snapshot = self.catalogue().await?;
        Ok(self.instance_types_for(&resolved, &snapshot).into())
    }

    /// Upstream's AWS `IsDrifted`: static fields, image, then the instance's security groups
    /// and subnet (see [`drift`]).
    async fn drift(&self, claim: &NodeClaim) -> Result<Option<String>, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_ec2_node_class(reference) {
            return Ok(None);
        }
        let Some(class) = self
            .classes
            .get(&reference.name)
            .await
            .map_err(|e| CloudError::api("reading the EC2NodeClass", e))?
        else {
            return Ok(None);
        };
        if let Some(reason) = drift::static_drift(claim, &class)
            .or_else(|| drift::ami_drift(claim, class.status.as_ref()))
        {
            return Ok(Some(reason.to_owned()));
        }
        let Some(ProviderId::Aws { instance_id, .. }) = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|id| id.parse().ok())
        else {
            return Ok(None);
        };
        let instances = self
            .describe_instances(Vec::new(), vec![instance_id])
            .await?;
        let Some(instance) = instances.first() else {
            return Ok(None);
        };
        let groups: Vec<String> = instance
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect();
        Ok(
            drift::network_drift(class.status.as_ref(), instance.subnet_id(), &groups)
                .map(str::to_owned),
        )
    }
}
