//! Leader election as the binary runs it (the Lease itself is the library's
//! `controllers::leader_election`): wait to lead, act until the Lease is lost or a signal
//! arrives, and this replica's identity in the Lease.

use crate::signals::shutdown_signal;
use karpenter_core::controllers::leader_election::LeaderElector;
use karpenter_core::controllers::{Health, Running};

/// Waits until this replica leads (at once without leader election); false when the agent is
/// stopped first, with nothing to release. A standby is ready once it knows who leads.
pub(crate) async fn elect(
    elector: Option<&LeaderElector>,
    health: &Health,
    leading: &prometheus_client::metrics::gauge::Gauge,
) -> bool {
    let Some(elector) = elector else {
        return true;
    };
    health.set_unready("electing a leader");
    let elected = elector.acquire(|holder| {
        tracing::debug!(holder = ?holder, "the Lease was read");
        health.set_ready();
    });
    tokio::select! {
        () = elected => {
            leading.set(1);
            true
        }
        () = shutdown_signal() => {
            tracing::info!("stopping before leading; nothing to release");
            false
        }
    }
}

/// Whether an agent before this one may still have NodeClaim creates on the way (see
/// `Settings::predecessor_may_be_writing`): only when this replica took the Lease over from a
/// holder that never released it. Without leader election, nothing would keep a second agent
/// from provisioning alongside this one anyway; an agent started in place of one that died
/// follows a process that is gone, and the API server cancelled the requests on its
/// connections when they closed. The first round checks the NodeClaim watch either way.
pub(crate) fn predecessor_may_be_writing(elector: Option<&LeaderElector>) -> bool {
    elector.is_some_and(LeaderElector::took_over)
}

/// Renews the Lease until a renewal round fails, then says why; never ends without leader
/// election.
pub(crate) async fn renewal(elector: Option<&LeaderElector>) -> String {
    match elector {
        Some(elector) => elector.renew().await,
        None => std::future::pending().await,
    }
}

/// Runs the loops until SIGTERM/SIGINT, or until `renewal` (begun when the Lease was
/// acquired) fails; dropping `running` stops every loop either way.
pub(crate) async fn lead<P>(
    running: Running<P>,
    renewal: impl std::future::Future<Output = String>,
) -> anyhow::Result<()> {
    let stopped = async {
        shutdown_signal().await;
        tracing::info!("shutting down");
    };
    tokio::select! {
        () = running.run_until(stopped) => Ok(()),
        // Upstream's controller-runtime exits here too: the kubelet restarts the process as a
        // fresh candidate, and no loop acts on a cluster another leader now owns.
        why = renewal => anyhow::bail!("leader election lost: {why}"),
    }
}

/// This replica's identity in the Lease: the pod's name (or the host's) and a random suffix,
/// as client-go's hostname + "_" + UUID, so a restarted pod is a new candidate.
pub(crate) fn identity() -> String {
    use rand::Rng;
    let name = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "karpenter-agent".to_owned());
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(8)
        .map(|c| char::from(c).to_ascii_lowercase())
        .collect();
    format!("{name}_{suffix}")
}
