//! The agent's command line: every flag (and the environment variable that sets it, as the
//! Helm chart and `init` pass them), grouped as `--help` shows them, and what they turn into:
//! the library's [`Settings`] and each provider's configuration. The only other input the agent
//! reads from its environment is its pod's name (`POD_NAME`), read here too.

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use karpenter_core::controllers::Settings;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Just-in-time node provisioning for Kubernetes, compatible with Karpenter's v1 API.
#[derive(Parser)]
#[command(name = "karpenter-agent", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant, reason = "parsed once at start-up")]
pub(crate) enum Command {
    /// Print the CustomResourceDefinitions (NodePool, NodeClaim, node classes) as YAML.
    Crds,
    /// Run the provisioning loop against a cluster.
    Run(RunArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum ProviderKind {
    /// Simulated nodes kept alive by kwok: no cloud, no cost.
    Kwok,
    /// Amazon EC2.
    Aws,
    /// Google Compute Engine.
    Gcp,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The cloud to launch nodes in (required: a default would make a real cluster launch
    /// simulated kwok nodes without a word).
    #[arg(long, env = "KARPENTER_PROVIDER", value_enum)]
    pub provider: ProviderKind,
    /// Kubeconfig to use instead of the in-cluster service account (or $KUBECONFIG).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The cluster's name. AWS: the EKS cluster (tags, instance profiles, node bootstrap); GCP:
    /// the default of --gcp-cluster.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    #[command(flatten)]
    pub loops: LoopArgs,
    #[command(flatten)]
    pub leader: LeaderArgs,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub gcp: GcpArgs,
}

/// How the control loops behave.
#[derive(clap::Args)]
#[command(next_help_heading = "Control loops")]
pub(crate) struct LoopArgs {
    /// Close a batch of pending pods after this long without a new one (e.g. 1s, 500ms).
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle_duration: Duration,
    /// Close a batch at the latest this long after its first pod.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub batch_max_duration: Duration,
    /// Close a batch before the idle window once every pod its ReplicaSets, Jobs and
    /// StatefulSets want exists and the kube-scheduler has judged each (false: always wait).
    #[arg(long, env = "BATCH_CLOSE_WHEN_COMPLETE", default_value_t = true, action = clap::ArgAction::Set)]
    pub batch_close_when_complete: bool,
    /// Upstream's feature gates, as upstream spells them (`SpotToSpotConsolidation=true`,
    /// comma-separated). Gates this agent does not know are refused.
    #[arg(long, env = "FEATURE_GATES", value_delimiter = ',', value_parser = parse_feature_gate)]
    pub feature_gates: Vec<(String, bool)>,
}

/// Leader election among replicas.
#[derive(clap::Args)]
#[command(next_help_heading = "Leader election")]
pub(crate) struct LeaderArgs {
    /// Take the Lease `karpenter-leader-election` before doing anything, so that of several
    /// replicas only one provisions, disrupts, collects garbage and reads the interruption
    /// queue (upstream's flag; false: this process acts alone, whatever else runs).
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The namespace of the leader-election Lease (default: the agent's own namespace, as in
    /// cluster, or the kubeconfig context's).
    #[arg(long, env = "SYSTEM_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
}

/// Metrics, probes and logs.
#[derive(clap::Args)]
#[command(next_help_heading = "Telemetry")]
pub(crate) struct TelemetryArgs {
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,
    /// How to log: `json` lines (what the Deployment uses, for log pipelines) or `text`
    /// (coloured only on a terminal, and not with NO_COLOR set).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// `--provider aws`.
#[derive(clap::Args)]
#[command(next_help_heading = "AWS")]
pub(crate) struct AwsArgs {
    /// AWS: the region of the cluster (default: the SDK's, from AWS_REGION or the profile).
    #[arg(long, env = "AWS_REGION")]
    pub aws_region: Option<String>,
    /// AWS: send every AWS call to this endpoint (tests: a moto server).
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub aws_endpoint_url: Option<String>,
    /// AWS: the SQS queue of interruption events (name or URL); unset turns interruption off.
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// AWS: the API server URL nodes join (default: from eks:DescribeCluster).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// AWS: a JSON file of on-demand prices ({"m5.large": 0.096, ...}) over the shipped table.
    #[arg(long, env = "AWS_PRICE_FILE")]
    pub aws_price_file: Option<PathBuf>,
}

/// `--provider gcp`.
#[derive(clap::Args)]
#[command(next_help_heading = "Google Cloud")]
pub(crate) struct GcpArgs {
    /// GCP: the project nodes launch in.
    #[arg(long, env = "GCP_PROJECT")]
    pub gcp_project: Option<String>,
    /// GCP: the GKE cluster's name (instance names and labels); defaults to --cluster-name.
    #[arg(long, env = "GCP_CLUSTER")]
    pub gcp_cluster: Option<String>,
    /// GCP: the region nodes launch in (default: the region of the first --gcp-zones zone).
    #[arg(long, env = "GCP_REGION")]
    pub gcp_region: Option<String>,
    /// GCP: the cluster's location as GKE names it, its region or (zonal cluster) its zone;
    /// with project and name it identifies the cluster's VMs (default: the region).
    #[arg(long, env = "GCP_LOCATION")]
    pub gcp_location: Option<String>,
    /// GCP: the zones nodes launch in, comma-separated (default: every zone of the region).
    #[arg(long, env = "GCP_ZONES", value_delimiter = ',')]
    pub gcp_zones: Vec<String>,
    /// GCP: the subnetwork nodes use when the GCENodeClass names none.
    #[arg(long, env = "GCP_SUBNETWORK")]
    pub gcp_subnetwork: Option<String>,
    /// GCP: the instance template nodes copy GKE's bootstrap from (kube-env, network, tags);
    /// default: the newest gke-<cluster>-* template.
    #[arg(long, env = "GCP_NODE_TEMPLATE")]
    pub gcp_node_template: Option<String>,
    /// GCP: send every Compute call here with anonymous credentials (tests: gcp-fake).
    #[arg(long, env = "GCP_ENDPOINT", hide = true)]
    pub gcp_endpoint: Option<String>,
}

impl RunArgs {
    /// The control loops' settings: the flags' timings and gates, upstream's defaults for the
    /// rest, and this replica's pod name for its Events.
    pub(crate) fn settings(&self) -> Settings {
        let gates = &self.loops.feature_gates;
        Settings {
            pod_name: std::env::var("POD_NAME").ok(),
            batch_idle: self.loops.batch_idle_duration,
            batch_max: self.loops.batch_max_duration,
            batch_close_when_complete: self.loops.batch_close_when_complete,
            spot_to_spot_consolidation: gate(gates, "SpotToSpotConsolidation"),
            node_repair: gate(gates, "NodeRepair"),
            static_capacity: gate(gates, "StaticCapacity"),
            ..Settings::default()
        }
    }

    /// The GCP provider's configuration, or which flag is missing.
    pub(crate) fn gcp_config(&self) -> anyhow::Result<karpenter_core::cloud::gcp::GcpConfig> {
        let gcp = &self.gcp;
        let project = gcp
            .gcp_project
            .clone()
            .context("--gcp-project (or GCP_PROJECT) is required with --provider gcp")?;
        let cluster = gcp
            .gcp_cluster
            .clone()
            .or_else(|| self.cluster_name.clone())
            .context("--gcp-cluster (or GCP_CLUSTER) is required with --provider gcp")?;
        let region = match (&gcp.gcp_region, gcp.gcp_zones.first()) {
            (Some(region), _) => region.clone(),
            (None, Some(zone)) => zone
                .rsplit_once('-')
                .map_or(zone.as_str(), |(region, _)| region)
                .to_owned(),
            (None, None) => {
                anyhow::bail!("--gcp-region or --gcp-zones is required with --provider gcp")
            }
        };
        let mut config = karpenter_core::cloud::gcp::GcpConfig::new(project, cluster, region);
        config.zones = gcp.gcp_zones.clone();
        config.location = gcp.gcp_location.clone();
        config.subnetwork = gcp.gcp_subnetwork.clone();
        config.endpoint = gcp.gcp_endpoint.clone();
        config.node_template = gcp.gcp_node_template.clone();
        Ok(config)
    }

    /// The AWS provider's configuration, or which flag is missing (the region may come from
    /// the SDK's own settings).
    pub(crate) async fn aws_config(&self) -> anyhow::Result<karpenter_core::cloud::aws::AwsConfig> {
        use karpenter_core::cloud::aws::{AwsConfig, pricing::PriceTable};
        let aws = &self.aws;
        let cluster_name = self
            .cluster_name
            .clone()
            .context("--cluster-name (or CLUSTER_NAME) is required with --provider aws")?;
        let region = match &aws.aws_region {
            Some(region) => region.clone(),
            None => AwsConfig::default_region()
                .await
                .context("no AWS region: pass --aws-region or set AWS_REGION")?,
        };
        let mut config = AwsConfig::new(region, cluster_name);
        config.endpoint_url = aws.aws_endpoint_url.clone();
        config.interruption_queue = aws.interruption_queue.clone();
        config.cluster_endpoint = aws.cluster_endpoint.clone();
        if let Some(path) = &aws.aws_price_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the price file {}", path.display()))?;
            config.prices = PriceTable::shipped(&config.region)
                .with_overrides(&text)
                .with_context(|| format!("reading the price file {}", path.display()))?;
        }
        Ok(config)
    }
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
