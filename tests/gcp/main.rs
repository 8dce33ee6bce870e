//! The GCP provider and the agent against the project's own GCP fake (`gcp-fake`, in-process,
//! one per test) and the real rig (`karpenter_test_support::rig`).
//!
//! `provider.rs` drives the provider alone: catalogue, node class resolution, launch labels and
//! scheduling, the failed-operation check, stockout and quota fallback, preemption as seen by
//! get/list. `agent.rs` runs the whole agent: pending pods get fake instances, instances go with
//! their claims, orphans are collected, a stockout moves the claim to the next type, and a
//! preempted VM's node is replaced; `tls_bootstrap.rs` is the kubelet's certificate request,
//! which only the agent approves. Each test names its own project and cluster; tests that run
//! an agent, touch cluster-wide objects, or read back a node class status (which a running
//! agent rewrites for every class) take [`exclusive`].

#![cfg(feature = "gcp")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
// `exclusive()` is held across awaits on purpose: it keeps agents one at a time.
#![allow(clippy::await_holding_lock)]

mod agent;
mod contract;
mod provider;
mod tls_bootstrap;

use std::time::Duration;

use karpenter_test_support::{cloud_agent, rig};

pub use cloud_agent::{apply, exclusive, wait_for};

/// A GCENodeClass `name` booting COS, with a service account of `project`, a 60 GiB boot disk,
/// a network tag, a label and a metadata item.
pub fn node_class(name: &str, project: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.k8s.gcp/v1alpha1
kind: GCENodeClass
metadata: {{name: {name}}}
spec:
  serviceAccount: nodes@{project}.iam.gserviceaccount.com
  imageSelectorTerms: [{{alias: ContainerOptimizedOS@latest}}]
  disks: [{{category: pd-balanced, sizeGiB: 60, boot: true}}]
  networkTags: [gke-node]
  labels: {{team: platform}}
  metadata: {{serial-port-logging-enable: "true"}}
"#
    )
}

/// A fake with `project` seeded (zones us-central1-a/b/c/f, common machine types, COS and
/// Ubuntu images).
pub async fn fake(project: &str) -> gcp_fake::FakeGcp {
    let fake = gcp_fake::FakeGcp::start().await.expect("start gcp-fake");
    fake.state().compute.seed_project(project);
    // Calls are the project's: the Cloud Billing Catalog answers only once its API is enabled
    // there, as a real project's would.
    fake.state().billing.caller_project = Some(project.to_owned());
    fake
}

/// Provider settings for the fake: anonymous credentials, fast operation polling.
pub fn config(
    fake: &gcp_fake::FakeGcp,
    project: &str,
    cluster: &str,
) -> karpenter_core::cloud::gcp::GcpConfig {
    let mut config = karpenter_core::cloud::gcp::GcpConfig::new(project, cluster, "us-central1");
    config.endpoint = Some(fake.endpoint());
    config.polling_initial_delay = Some(Duration::from_millis(20));
    config
}
