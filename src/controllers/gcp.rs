//! The loops only the Compute Engine provider has, run beside the common controllers: the
//! GCENodeClass status ([`super::nodeclass_status`]: the images its selector terms resolved to,
//! and a Ready condition that says why when none did), and the approval of the certificate
//! requests of the kubelets on the agent's VMs ([`super::csr_approval`]), which GKE leaves to
//! whoever created them.

use super::{Running, csr_approval, nodeclass_status};
use crate::cloud::gcp::GcpProvider;

/// Starts the Compute Engine provider's loops beside `running`.
pub fn start(running: &mut Running<GcpProvider>) {
    let ctx = running.ctx.clone();
    running.spawn(nodeclass_status::node_classes(
        ctx.client.clone(),
        ctx.provider.clone(),
    ));
    running.spawn(csr_approval::run(ctx));
}
