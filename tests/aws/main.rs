//! The AWS provider and `init aws` against moto (server mode) and the real rig.
//!
//! One moto per test binary (`moto.rs`, stopped by a watchdog when this process ends), one
//! fault-injecting proxy per test in front of it (`proxy.rs`), and one rig (`karpenter_test_support::rig`).
//! Each test names its own cluster, so tests share moto without seeing each other's instances.
//! Tests that run an agent, touch cluster-wide objects on the rig, or read back a node class
//! status (which a running agent rewrites for every class) take [`exclusive`].

#![cfg(feature = "aws")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
// `exclusive()` is held across awaits on purpose: it keeps agents one at a time.
#![allow(clippy::await_holding_lock)]

mod agent;
mod contract;
mod env;
mod kubelet;
mod moto;
mod permissions;
mod provider;
mod proxy;
mod setup;
mod shipped_prices;

use karpenter_test_support::{cloud_agent, rig};

pub use cloud_agent::{apply, exclusive, wait_for};

/// An EC2NodeClass named `name` for `cluster`'s discovery tags, nodes in `role`.
pub fn node_class(name: &str, cluster: &str, role: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: {name}}}
spec:
  role: {role}
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]
"#
    )
}
