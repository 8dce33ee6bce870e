//! `karpenter-agent`: the in-cluster provisioning loop. This file only parses flags and wires
//! the library together; the loops live in `karpenter_core::controllers`.

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use karpenter_core::cloud::CloudProvider;
use karpenter_core::cloud::kwok::KwokProvider;
use karpenter_core::controllers::leader_election::{ElectionConfig, LeaderElector};
use karpenter_core::controllers::{self, Health, Running, Settings};
use karpenter_core::metrics::Metrics;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// mimalloc instead of glibc's malloc. The agent's memory turns over fast (every watch event is
/// decoded into a fresh object, every round rebuilds the scheduler's input), and glibc kept
/// the freed memory fragmented across its arenas. Measured with `POD_CPU=400m
/// INSTANCE_TYPES=m5.large tests/agent/scale.sh 5000` on the release build (5,000 pods, 1,250
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

/// Just-in-time node provisioning for Kubernetes, compatible with Karpenter's v1 API.
#[derive(Parser)]
#[command(name = "karpenter-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once at start-up")]
enum Command {
    /// Print the CustomResourceDefinitions (NodePool, NodeClaim, node classes) as YAML.
    Crds,
    /// Run the provisioning loop against a cluster.
    Run(RunArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProviderKind {
    /// Simulated nodes kept alive by kwok: no cloud, no cost.
    Kwok,
    /// Amazon EC2.
    Aws,
    /// Google Compute Engine.
    Gcp,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The cloud to launch nodes in (required: a default would make a real cluster launch
    /// simulated kwok nodes without a word).
    #[arg(long, env = "KARPENTER_PROVIDER", value_enum)]
    provider: ProviderKind,
    /// Kubeconfig to use instead of the in-cluster service account (or $KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Close a batch of pending pods after this long without a new one (e.g. 1s, 500ms).
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    batch_idle_duration: Duration,
    /// Close a batch at the latest this long after its first pod.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    batch_max_duration: Duration,
    /// Close a batch before the idle window once every pod its ReplicaSets, Jobs and
    /// StatefulSets want exists and the kube-scheduler has judged each (false: always wait).
    #[arg(long, env = "BATCH_CLOSE_WHEN_COMPLETE", default_value_t = true, action = clap::ArgAction::Set)]
    batch_close_when_complete: bool,
    /// Upstream's feature gates, as upstream spells them (`SpotToSpotConsolidation=true`,
    /// comma-separated). Gates this agent does not know are refused.
    #[arg(long, env = "FEATURE_GATES", value_delimiter = ',', value_parser = parse_feature_gate)]
    feature_gates: Vec<(String, bool)>,
    /// Take the Lease `karpenter-leader-election` before doing anything, so that of several
    /// replicas only one provisions, disrupts, collects garbage and reads the interruption
    /// queue (upstream's flag; false: this process acts alone, whatever else runs).
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// The namespace of the leader-election Lease (default: the agent's own namespace, as in
    /// cluster, or the kubeconfig context's).
    #[arg(long, env = "SYSTEM_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_address: SocketAddr,
    /// How to log: `json` lines (what the Deployment uses, for log pipelines) or `text`
    /// (coloured only on a terminal, and not with NO_COLOR set).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// The cluster's name. AWS: the EKS cluster (tags, instance profiles, node bootstrap); GCP:
    /// the default of --gcp-cluster.
    #[arg(long, env = "CLUSTER_NAME")]
    cluster_name: Option<String>,
    /// AWS: the region of the cluster (default: the SDK's, from AWS_REGION or the profile).
    #[arg(long, env = "AWS_REGION")]
    aws_region: Option<String>,
    /// AWS: send every AWS call to this endpoint (tests: a moto server).
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    aws_endpoint_url: Option<String>,
    /// AWS: the SQS queue of interruption events (name or URL); unset turns interruption off.
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    interruption_queue: Option<String>,
    /// AWS: the API server URL nodes join (default: from eks:DescribeCluster).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    cluster_endpoint: Option<String>,
    /// AWS: a JSON file of on-demand prices ({"m5.large": 0.096, ...}) over the shipped table.
    #[arg(long, env = "AWS_PRICE_FILE")]
    aws_price_file: Option<PathBuf>,
    /// GCP: the project nodes launch in.
    #[arg(long, env = "GCP_PROJECT")]
    gcp_project: Option<String>,
    /// GCP: the GKE cluster's name (instance names and labels); defaults to --cluster-name.
    #[arg(long, env = "GCP_CLUSTER")]
    gcp_cluster: Option<String>,
    /// GCP: the region nodes launch in (default: the region of the first --gcp-zones zone).
    #[arg(long, env = "GCP_REGION")]
    gcp_region: Option<String>,
    /// GCP: the cluster's location as GKE names it, its region or (zonal cluster) its zone;
    /// with project and name it identifies the cluster's VMs (default: the region).
    #[arg(long, env = "GCP_LOCATION")]
    gcp_location: Option<String>,
    /// GCP: the zones nodes launch in, comma-separated (default: every zone of the region).
    #[arg(long, env = "GCP_ZONES", value_delimiter = ',')]
    gcp_zones: Vec<String>,
    /// GCP: the subnetwork nodes use when the GCENodeClass names none.
    #[arg(long, env = "GCP_SUBNETWORK")]
    gcp_subnetwork: Option<String>,
    /// GCP: the instance template nodes copy GKE's bootstrap from (kube-env, network, tags);
    /// default: the newest gke-<cluster>-* template.
    #[arg(long, env = "GCP_NODE_TEMPLATE")]
    gcp_node_template: Option<String>,
    /// GCP: send every Compute call here with anonymous credentials (tests: gcp-fake).
    #[arg(long, env = "GCP_ENDPOINT", hide = true)]
    gcp_endpoint: Option<String>,
}

async fn gcp_provider(
    args: &RunArgs,
    client: kube::Client,
) -> anyhow::Result<karpenter_core::cloud::gcp::GcpProvider> {
    use karpenter_core::cloud::gcp::{GcpConfig, GcpProvider};
    let project = args
        .gcp_project
        .clone()
        .context("--gcp-project (or GCP_PROJECT) is required with --provider gcp")?;
    let cluster = args
        .gcp_cluster
        .clone()
        .or_else(|| args.cluster_name.clone())
        .context("--gcp-cluster (or GCP_CLUSTER) is required with --provider gcp")?;
    let region = match (&args.gcp_region, args.gcp_zones.first()) {
        (Some(region), _) => region.clone(),
        (None, Some(zone)) => zone
            .rsplit_once('-')
            .map_or(zone.as_str(), |(region, _)| region)
            .to_owned(),
        (None, None) => {
            anyhow::bail!("--gcp-region or --gcp-zones is required with --provider gcp")
        }
    };
    let mut config = GcpConfig::new(project, cluster, region);
    config.zones = args.gcp_zones.clone();
    config.location = args.gcp_location.clone();
    config.subnetwork = args.gcp_subnetwork.clone();
    config.endpoint = args.gcp_endpoint.clone();
    config.node_template = args.gcp_node_template.clone();
    tracing::info!(project = %config.project, cluster = %config.cluster_name, location = %config.location(), region = %config.region, zones = ?config.zones,
        endpoint = ?config.endpoint, "using the gcp provider");
    GcpProvider::new(config, client)
        .await
        .context("setting up the Compute Engine clients")
}

async fn aws_provider(
    args: &RunArgs,
    client: kube::Client,
) -> anyhow::Result<karpenter_core::cloud::aws::AwsProvider> {
    use karpenter_core::cloud::aws::{AwsConfig, AwsProvider, pricing::PriceTable};
    let cluster_name = args
        .cluster_name
        .clone()
        .context("--cluster-name (or CLUSTER_NAME) is required with --provider aws")?;
    let region = match &args.aws_region {
        Some(region) => region.clone(),
        None => AwsConfig::default_region()
            .await
            .context("no AWS region: pass --aws-region or set AWS_REGION")?,
    };
    let mut config = AwsConfig::new(region, cluster_name);
    config.endpoint_url = args.aws_endpoint_url.clone();
    config.interruption_queue = args.interruption_queue.clone();
    config.cluster_endpoint = args.cluster_endpoint.clone();
    if let Some(path) = &args.aws_price_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the price file {}", path.display()))?;
        config.prices = PriceTable::shipped(&config.region)
            .with_overrides(&text)
            .with_context(|| format!("reading the price file {}", path.display()))?;
    }
    tracing::info!(region = %config.region, cluster = %config.cluster_name, endpoint = ?config.endpoint_url, shipped_prices = %config.prices.provenance(), "using the aws provider");
    Ok(AwsProvider::new(config, client).await)
}

/// Whether the last setting of `name` among the feature gates turns it on (all are off by
/// default, as upstream's `SpotToSpotConsolidation`, `NodeRepair` and `StaticCapacity`).
fn gate(gates: &[(String, bool)], name: &str) -> bool {
    gates
        .iter()
        .rev()
        .find(|(gate, _)| gate == name)
        .is_some_and(|(_, on)| *on)
}

/// Reads one `Name=true|false` feature gate. Upstream's other gates (ReservedCapacity,
/// NodeOverlay, CapacityBuffer) are accepted so an upstream chart's value works, and have no
/// effect here yet.
fn parse_feature_gate(text: &str) -> Result<(String, bool), String> {
    const KNOWN: &[&str] = &[
        "SpotToSpotConsolidation",
        "NodeRepair",
        "ReservedCapacity",
        "NodeOverlay",
        "StaticCapacity",
        "CapacityBuffer",
    ];
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not Name=true|false"))?;
    if !KNOWN.contains(&name) {
        return Err(format!(
            "unknown feature gate {name:?}; known: {}",
            KNOWN.join(", ")
        ));
    }
    let on = value
        .parse::<bool>()
        .map_err(|_| format!("feature gate {name} must be true or false, not {value:?}"))?;
    Ok((name.to_owned(), on))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    karpenter_core::apis::parse_duration(text).map_err(|e| e.to_string())
}

fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => {
            // Escape codes belong on a terminal, not in a file or a log collector.
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            builder.with_ansi(colour).init();
        }
    }
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
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
    karpenter_core::proxy::apply_environment(&mut config);
    controllers::agent_client(config).context("creating the Kubernetes client")
}

/// A probe's answer: 200 "ok", or the status and why.
fn probe(
    result: Result<(), String>,
    failing: axum::http::StatusCode,
) -> (axum::http::StatusCode, String) {
    match result {
        Ok(()) => (axum::http::StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (failing, format!("{why}\n")),
    }
}

async fn serve_http(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> anyhow::Result<()> {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let liveness = health.clone();
    let app = axum::Router::new()
        .route(
            "/healthz",
            get(move || {
                let health = liveness.clone();
                async move { probe(health.liveness(), StatusCode::INTERNAL_SERVER_ERROR) }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let health = health.clone();
                async move { probe(health.readiness(), StatusCode::SERVICE_UNAVAILABLE) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    match metrics.encode() {
                        Ok(body) => (
                            StatusCode::OK,
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            body,
                        ),
                        Err(_) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [(header::CONTENT_TYPE, "text/plain")],
                            String::new(),
                        ),
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("listening on {address}"))?;
    axum::serve(listener, app).await.context("serving /metrics")
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_tracing(args.log_format);
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        provider = ?args.provider,
        "karpenter-agent starting"
    );
    let client = client(args.kubeconfig.as_ref()).await?;
    let settings = Settings {
        batch_idle: args.batch_idle_duration,
        batch_max: args.batch_max_duration,
        batch_close_when_complete: args.batch_close_when_complete,
        spot_to_spot_consolidation: gate(&args.feature_gates, "SpotToSpotConsolidation"),
        node_repair: gate(&args.feature_gates, "NodeRepair"),
        static_capacity: gate(&args.feature_gates, "StaticCapacity"),
        ..Settings::default()
    };
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let http = tokio::spawn(serve_http(
        args.metrics_address,
        metrics.clone(),
        health.clone(),
    ));
    let agent = async {
        let elector = args.leader_elect.then(|| {
            let namespace = args
                .leader_election_namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_owned());
            LeaderElector::new(client.clone(), ElectionConfig::new(namespace, identity()))
        });
        let leading = metrics
            .leader_election_master_status
            .get_or_create(&karpenter_core::metrics::LeaseLabels {
                name: karpenter_core::apis::labels::LEADER_ELECTION_LEASE.to_owned(),
            })
            .clone();
        // The provider is built, and its settings checked, before the election: a replica
        // that cannot work says so at start, not once it is the leader.
        let outcome = match args.provider {
            ProviderKind::Kwok => {
                let provider = Arc::new(KwokProvider::new(client.clone()));
                if !elect(elector.as_ref(), &health, &leading).await {
                    return Ok(());
                }
                let settings = Settings {
                    predecessor_may_be_writing: predecessor_may_be_writing(elector.as_ref()),
                    ..settings
                };
                let running =
                    controllers::start_with(client, provider, settings, metrics, health.clone())
                        .await;
                lead(running, elector.as_ref()).await
            }
            ProviderKind::Aws => {
                let provider = Arc::new(aws_provider(&args, client.clone()).await?);
                if !elect(elector.as_ref(), &health, &leading).await {
                    return Ok(());
                }
                let settings = Settings {
                    predecessor_may_be_writing: predecessor_may_be_writing(elector.as_ref()),
                    ..settings
                };
                let mut running =
                    controllers::start_with(client, provider, settings, metrics, health.clone())
                        .await;
                // EC2NodeClass status, and the interruption queue when --interruption-queue is set.
                controllers::aws::start(&mut running)
                    .await
                    .context("starting the EC2 loops")?;
                lead(running, elector.as_ref()).await
            }
            ProviderKind::Gcp => {
                let provider = Arc::new(gcp_provider(&args, client.clone()).await?);
                if !elect(elector.as_ref(), &health, &leading).await {
                    return Ok(());
                }
                let settings = Settings {
                    predecessor_may_be_writing: predecessor_may_be_writing(elector.as_ref()),
                    ..settings
                };
                let mut running =
                    controllers::start_with(client, provider, settings, metrics, health.clone())
                        .await;
                // GCENodeClass status and the kubelets' certificate requests.
                controllers::gcp::start(&mut running);
                lead(running, elector.as_ref()).await
            }
        };
        // Every loop has stopped (the running loops were dropped): give the Lease to a
        // successor at once instead of after the lease duration. Launches cut short are safe
        // to abandon: a successor relaunches a claim without a provider ID with the same
        // idempotency token (CreateFleet ClientToken, the GCE instance name), and garbage
        // collection deletes any instance no claim names.
        leading.set(0);
        if let Some(elector) = &elector
            && let Err(e) = elector.release().await
        {
            tracing::warn!(error = %e, "could not release the Lease; a successor takes it once it expires");
        }
        outcome
    };
    tokio::select! {
        result = agent => result,
        result = http => result.context("the HTTP server stopped")?.context("the HTTP server failed"),
    }
}

/// Waits until this replica leads (at once without leader election); false when the agent is
/// stopped first, with nothing to release. A standby is ready once it knows who leads.
async fn elect(
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
fn predecessor_may_be_writing(elector: Option<&LeaderElector>) -> bool {
    elector.is_some_and(LeaderElector::took_over)
}

/// Runs the loops until SIGTERM/SIGINT (the lifecycle controller's signal), or, with leader
/// election, until the Lease is lost; dropping `running` stops every loop either way.
async fn lead<P: CloudProvider + 'static>(
    running: Running<P>,
    elector: Option<&LeaderElector>,
) -> anyhow::Result<()> {
    let Some(elector) = elector else {
        running.wait().await;
        return Ok(());
    };
    tokio::select! {
        () = running.wait() => Ok(()),
        // Upstream's controller-runtime exits here too: the kubelet restarts the process as a
        // fresh candidate, and no loop acts on a cluster another leader now owns.
        why = elector.renew() => anyhow::bail!("leader election lost: {why}"),
    }
}

/// This replica's identity in the Lease: the pod's name (or the host's) and a random suffix,
/// as client-go's hostname + "_" + UUID, so a restarted pod is a new candidate.
fn identity() -> String {
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

/// SIGTERM (the kubelet stopping the pod) or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
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
        Command::Run(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?
            .block_on(run(args)),
    }
}
