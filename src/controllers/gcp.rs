//! The loops only the Compute Engine provider has, run beside the common controllers: the
//! GCENodeClass status ([`super::nodeclass_status`]: the images its selector terms resolved to,
//! and a Ready condition that says why when none did), and the approval of the certificate
//! requests of the kubelets on the agent's VMs ([`super::csr_approval`]), which GKE leaves to
//! whoever created them.

use super::{Error, ProviderLoops, Running, csr_approval, nodeclass_status};
use crate::cloud::Metered;
use crate::cloud::gcp::GcpProvider;

/// Starts the Compute Engine provider's loops beside `running`.
pub fn start(running: &mut Running<Metered<GcpProvider>>) {
    let ctx = running.ctx.clone();
    ctx.provider.inner().report_prices_to(ctx.metrics.clone());
    // Resolving node classes is the provider's own business, not a CloudProvider call.
    running.spawn(
        super::names::NODE_CLASS_STATUS,
        nodeclass_status::node_classes(ctx.client.clone(), ctx.provider.inner().clone()),
    );
    running.spawn(super::names::CSR_APPROVAL, csr_approval::run(ctx));
}

impl ProviderLoops for GcpProvider {
    async fn start_loops(running: &mut Running<Metered<Self>>) -> Result<(), Error> {
        start(running);
        Ok(())
    }
}
