//! `kubectl karpenter init gcp`: flags to [`GcpOptions`], then the shared plan/confirm/apply flow
//! of [`crate::init`]. The steps are `karpenter_core::setup::gcp`'s.

use crate::cluster::Cluster;
use crate::init::{self, CommonArgs, Setup};
use karpenter_core::setup::Plan;
use karpenter_core::setup::gcp::{self as setup_gcp, GcpAuth, GcpOptions};

/// How the agent gets Google credentials.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthFlag {
    /// GKE Workload Identity: no key exists anywhere (the cluster needs Workload Identity on).
    WorkloadIdentity,
    /// A service account key, created by init and kept only in a Kubernetes Secret.
    Key,
}

/// Flags of `init gcp`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct GcpArgs {
    /// The Google Cloud project id.
    #[arg(long, value_name = "PROJECT", env = "CLOUDSDK_CORE_PROJECT")]
    pub project: Option<String>,
    /// The GKE cluster's name.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The cluster's region or zone.
    #[arg(long, value_name = "LOCATION")]
    pub location: Option<String>,
    /// How the agent gets its Google credentials.
    #[arg(long, value_enum, default_value_t = AuthFlag::WorkloadIdentity)]
    pub auth: AuthFlag,
    /// Send Google calls to this endpoint, without credentials (tests: the project's fake).
    #[arg(long, value_name = "URL", hide = true)]
    pub endpoint_url: Option<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs `init gcp`.
pub(crate) async fn run(cluster: &Cluster, args: &GcpArgs, verbose: u8) -> anyhow::Result<()> {
    let project = init::value_or_ask(
        args.project.as_deref(),
        "--project",
        "Google Cloud project id",
    )?;
    let name = init::value_or_ask(args.cluster.as_deref(), "--cluster", "GKE cluster name")?;
    let location = init::value_or_ask(
        args.location.as_deref(),
        "--location",
        "GKE cluster location (region or zone)",
    )?;
    let mut options = GcpOptions::new(project.clone(), name.clone(), location.clone());
    options.auth = match args.auth {
        AuthFlag::WorkloadIdentity => GcpAuth::WorkloadIdentity,
        AuthFlag::Key => GcpAuth::Key,
    };
    if options.auth == GcpAuth::Key && args.common.gitops {
        anyhow::bail!(
            "--auth key keeps the service account key only in a Kubernetes Secret, which --gitops would have to write to a file: use Workload Identity (the default) with --gitops"
        );
    }
    options.namespace = args.common.namespace.clone();
    if let Some(image) = &args.common.image {
        options.image = image.clone();
    }
    options.endpoint = args.endpoint_url.clone();
    options.kube = Some(cluster.client());
    // With --gitops the agent's objects are written to files, not applied.
    options.apply_manifests = !args.common.gitops;
    let image = options.image.clone();
    // The scaffold uses the cluster's subnetwork when it can be read; when it cannot, the
    // gke-cluster step says why.
    let cluster = setup_gcp::read_cluster(&options).await.ok();
    let scaffold = setup_gcp::node_pool_manifests(&options, cluster.as_ref());
    let plan = Plan::for_gcp(options)
        .await
        .map_err(|e| init::setup_error(e, verbose))?;
    let scaffold = init::scaffold_of(&plan, scaffold, &args.common);
    let mut next_steps = vec![init::next_step(&args.common)];
    next_steps.push(init::image_note(&image));
    let setup = Setup {
        title: format!("GKE cluster {name} in {location}, project {project}"),
        plan: &plan,
        scaffold,
        next_steps,
    };
    init::execute(setup, &args.common, verbose).await
}
