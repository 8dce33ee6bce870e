//! `karpenter-agent`: the in-cluster agent. This binary reads its flags, environment and
//! signals, and wires the library together: `config.rs` (flags → settings and provider
//! configuration), `telemetry.rs` (logs), `http.rs` (metrics and probes), `leader.rs` (the
//! Lease), `signals.rs`. The loops live in `karpenter_core::controllers`.

mod config;
mod http;
mod json_log;
mod leader;
mod signals;
mod telemetry;

use anyhow::Context;
use clap::Parser;
use config::{Cli, Command, ProviderKind, RunArgs};
use karpenter_core::client::Fence;
use karpenter_core::cloud::kwok::KwokProvider;
use karpenter_core::controllers::leader_election::{ElectionConfig, LeaderElector};
use karpenter_core::controllers::{self, Health, ProviderLoops, Settings};
use karpenter_core::metrics::Metrics;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

/// mimalloc instead of glibc's malloc. The agent's memory turns over fast (every watch event is
/// decoded into a fresh object, every round rebuilds the scheduler's input), and glibc kept
/// the freed memory fragmented across its arenas. Measured with `POD_CPU=400m
/// INSTANCE_TYPES=m5.large tests/kwok/scale.sh 5000` on the release build (5,000 pods, 1,250
/// nodes and NodeClaims): RSS once settled 210 MiB with glibc (`MALLOC_ARENA_MAX=2`), 126 MiB
/// with mimalloc; peak 216 MiB against 166 MiB; the mean scheduling round 45 ms against 29 ms.
///
/// The heap is kept off transparent huge pages: the `no_thp` feature stops mimalloc from
/// `madvise`-ing its arenas `MADV_HUGEPAGE`, and the chart sets `MIMALLOC_ALLOW_THP=0`, which
/// turns them off for the process on hosts whose THP setting is `always`. A huge page is
/// resident whole once any byte of it is touched, and the agent's heap is many half-used
/// pages: at 20,000 pods, 120 MiB of the agent's 355 MiB were huge pages. Same build, same
/// 5,000-pod run as above: peak 121.6 MiB and settled 102.0 MiB without them, 141.3 and 117.0
/// with them.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The agent's client; with leader election its writes go through `fence`.
async fn client(
    kubeconfig: Option<&PathBuf>,
    fence: Option<&Fence>,
) -> anyhow::Result<kube::Client> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not running in a cluster")?,
    };
    // HTTPS_PROXY and NO_PROXY as client-go (upstream's agent) reads them.
    karpenter_core::client::proxy::apply_environment(&mut config, |name| std::env::var(name).ok());
    match fence {
        Some(fence) => karpenter_core::client::fenced_agent_client(config, fence),
        None => karpenter_core::client::agent_client(config),
    }
    .context("creating the Kubernetes client")
}

/// What every start-up needs, whichever the provider.
struct Agent {
    client: kube::Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    elector: Option<LeaderElector>,
    leading: prometheus_client::metrics::gauge::Gauge,
}

impl Agent {
    /// Waits to lead, starts the loops over `provider` (the common ones, then the provider's
    /// own), and runs them until a signal or the Lease's loss. The provider is built, and its
    /// settings checked, before the election: a replica that cannot work says so at start, not
    /// once it is the leader.
    async fn act<P: ProviderLoops>(self, provider: Arc<P>) -> anyhow::Result<()> {
        let elector = self.elector.as_ref();
        if !leader::elect(elector, &self.health, &self.leading).await {
            return Ok(());
        }
        let settings = Settings {
            predecessor_may_be_writing: leader::predecessor_may_be_writing(elector),
            write_fence: elector.map(LeaderElector::fence),
            ..self.settings
        };
        // Renewal runs from the moment the Lease is acquired, beside start-up (listing a large
        // cluster can outlast the lease) and then beside the loops, until it fails.
        let renewal = leader::renewal(elector);
        tokio::pin!(renewal);
        let starting = async {
            let mut running =
                controllers::start_with(self.client, provider, settings, self.metrics, self.health)
                    .await;
            P::start_loops(&mut running)
                .await
                .context("starting the provider's own loops")?;
            anyhow::Ok(running)
        };
        let started = tokio::select! {
            started = starting => started,
            why = &mut renewal => Err(anyhow::anyhow!("leader election lost during start-up: {why}")),
        };
        let outcome = match started {
            Ok(running) => leader::lead(running, renewal).await,
            Err(e) => Err(e),
        };
        // Every loop has stopped (the running loops were dropped): give the Lease to a
        // successor at once instead of after the lease duration. Launches cut short are safe
        // to abandon: a successor relaunches a claim without a provider ID with the same
        // idempotency token (CreateFleet ClientToken, the GCE instance name), and garbage
        // collection deletes any instance no claim names.
        self.leading.set(0);
        if let Some(elector) = elector
            && let Err(e) = elector.release().await
        {
            tracing::warn!(error = %e, "could not release the Lease; a successor takes it once it expires");
        }
        outcome
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    telemetry::init_tracing(args.telemetry.log_format);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        provider = ?args.provider,
        "karpenter-agent starting"
    );
    let fence = args.leader.leader_elect.then(Fence::default);
    let client = client(args.kubeconfig.as_ref(), fence.as_ref()).await?;
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let http = tokio::spawn(http::serve_http(
        args.telemetry.metrics_address,
        metrics.clone(),
        health.clone(),
    ));
    let elector = fence.map(|fence| {
        let namespace = args
            .leader
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        LeaderElector::new(
            client.clone(),
            ElectionConfig::new(namespace, leader::identity()),
            fence,
        )
    });
    let leading = metrics
        .leader_election_master_status
        .get_or_create(&karpenter_core::metrics::LeaseLabels {
            name: karpenter_core::apis::labels::LEADER_ELECTION_LEASE.to_owned(),
        })
        .clone();
    let agent = Agent {
        client: client.clone(),
        settings: args.settings(),
        metrics,
        health,
        elector,
        leading,
    };
    let acting = async {
        match args.provider {
            ProviderKind::Kwok => agent.act(Arc::new(KwokProvider::new(client))).await,
            ProviderKind::Aws => {
                let config = args.aws_config().await?;
                tracing::info!(region = %config.region, cluster = %config.cluster_name, endpoint = ?config.endpoint_url, shipped_prices = %config.prices.provenance(), "using the aws provider");
                let provider = karpenter_core::cloud::aws::AwsProvider::new(config, client).await;
                agent.act(Arc::new(provider)).await
            }
            ProviderKind::Gcp => {
                let config = args.gcp_config()?;
                tracing::info!(project = %config.project, cluster = %config.cluster_name, location = %config.location(), region = %config.region, zones = ?config.zones,
                    endpoint = ?config.endpoint, "using the gcp provider");
                let provider = karpenter_core::cloud::gcp::GcpProvider::new(config, client)
                    .await
                    .context("setting up the Compute Engine clients")?;
                agent.act(Arc::new(provider)).await
            }
        }
    };
    tokio::select! {
        result = acting => result,
        result = http => result.context("the HTTP server stopped")?.context("the HTTP server failed"),
    }
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            let yaml = karpenter_core::apis::crds_yaml().context("rendering the CRDs")?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .context("writing to stdout")?;
            Ok(())
        }
        Command::Run(args) => {
            let stopped = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?
                .block_on(run(args));
            if let Err(e) = stopped {
                // One log record, as upstream's fatal line, not Rust's multi-line report: a log
                // pipeline reading JSON lines keeps it whole.
                tracing::error!(error = %format!("{e:#}"), "karpenter-agent stopped");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}
