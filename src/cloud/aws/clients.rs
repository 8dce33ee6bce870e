//! The AWS service clients the provider, the node class resolution, the price feed and the
//! interruption queue share, built once from one SDK configuration.

use super::price_feed;
use std::time::Duration;

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
