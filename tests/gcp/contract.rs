//! The cloud seam's contract (`karpenter_test_support::contract`) kept by the GCP provider
//! against the project's GCP fake, with a stockout standing in for a zone out of capacity.

use crate::provider::claim;
use crate::rig::rig;
use crate::{apply, config, fake, node_class};
use karpenter_core::cloud::gcp::GcpProvider;
use karpenter_test_support::contract::{self, Subject};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gcp_provider_keeps_the_cloud_provider_contract() {
    let fake = fake("contract-demo").await;
    apply(&node_class("contract-demo", "contract-demo"));
    let provider = GcpProvider::new(
        config(&fake, "contract-demo", "contract-demo"),
        rig().client().await,
    )
    .await
    .expect("provider");
    const ZONE: &str = "us-central1-a";
    let claim = |name: &str| {
        claim(
            name,
            "contract-demo",
            &["e2-standard-2", "n2d-standard-2"],
            &[ZONE],
            "on-demand",
        )
    };
    let exhaust = |instance_type: &str| fake.state().compute.stockout(ZONE, instance_type, true);
    contract::run(&Subject {
        provider: &provider,
        claim: &claim,
        exhaust: Some(&exhaust),
        prefix: "contract-demo",
    })
    .await;
    rig().kubectl_ok(&["delete", "gcenodeclass", "contract-demo"]);
}
