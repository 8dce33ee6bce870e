//! What the provider is told rather than finds out: the region and cluster, endpoint and
//! bootstrap overrides, prices, how long each cache is trusted, and the SDK configuration (the
//! default credential chain, with every call bounded as upstream's `pkg/operator/operator.go`
//! bounds it).

use super::pricing::PriceTable;
use crate::cloud::unavailable;
use std::time::Duration;

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
