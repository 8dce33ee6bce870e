//! The cloud seam's contract (`karpenter_test_support::contract`) kept by the EC2 provider
//! against moto, with the fault-injecting proxy standing in for EC2 running out of capacity.

use crate::env::Env;
use crate::provider::{claim, provider};
use crate::{apply, node_class};
use karpenter_test_support::contract::{self, Subject};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_provider_keeps_the_cloud_provider_contract() {
    let env = Env::new("contract-demo", true).await;
    let role = env.node_role().await;
    apply(&node_class("contract-demo", &env.cluster, &role));
    let provider = provider(&env).await;
    let claim = |name: &str| {
        claim(
            name,
            "contract-demo",
            &["m5.large", "m5.xlarge", "m5.2xlarge"],
        )
    };
    let exhaust = |instance_type: &str| env.proxy.insufficient_capacity(instance_type);
    contract::run(&Subject {
        provider: &provider,
        claim: &claim,
        exhaust: Some(&exhaust),
        prefix: "contract-demo",
    })
    .await;
}
