//! `kubectl karpenter init aws`: flags to [`AwsOptions`], then the shared plan/confirm/apply flow
//! of [`crate::init`]. The steps are `karpenter_core::setup::aws`'s.

use crate::cluster::Cluster;
use crate::init::{self, CommonArgs, Setup};
use karpenter_core::setup::Plan;
use karpenter_core::setup::aws::{self as setup_aws, Auth, AwsOptions};

/// How the agent gets AWS credentials.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthFlag {
    /// IAM Roles for Service Accounts, through the cluster's OIDC provider (created if missing).
    Irsa,
    /// EKS Pod Identity (needs the eks-pod-identity-agent add-on).
    PodIdentity,
}

/// Flags of `init aws`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct AwsArgs {
    /// The EKS cluster's name.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The cluster's region (default: $AWS_REGION, then $AWS_DEFAULT_REGION).
    #[arg(long, value_name = "REGION", env = "AWS_REGION")]
    pub region: Option<String>,
    /// How the agent gets its AWS credentials.
    #[arg(long, value_enum, default_value_t = AuthFlag::Irsa)]
    pub auth: AuthFlag,
    /// Send AWS calls to this endpoint (tests: moto). $AWS_ENDPOINT_URL works too.
    #[arg(long, value_name = "URL", hide = true)]
    pub endpoint_url: Option<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs `init aws`.
pub(crate) async fn run(cluster: &Cluster, args: &AwsArgs, verbose: u8) -> anyhow::Result<()> {
    let name = init::value_or_ask(args.cluster.as_deref(), "--cluster", "EKS cluster name")?;
    let default_region = std::env::var("AWS_DEFAULT_REGION").ok();
    let region = init::value_or_ask(
        args.region.as_deref().or(default_region.as_deref()),
        "--region",
        "AWS region",
    )?;
    let mut options = AwsOptions::new(name.clone(), region.clone());
    options.auth = match args.auth {
        AuthFlag::Irsa => Auth::Irsa,
        AuthFlag::PodIdentity => Auth::PodIdentity,
    };
    options.namespace = args.common.namespace.clone();
    if let Some(image) = &args.common.image {
        options.image = image.clone();
    }
    options.endpoint_url = args.endpoint_url.clone();
    options.kube = Some(cluster.client());
    // With --gitops the agent's objects are written to files, not applied.
    options.apply_manifests = !args.common.gitops;
    let image = options.image.clone();
    // The NodePool is scaffolded for the user to read and apply, not applied behind their back.
    options.scaffold_node_pool = false;
    let scaffold = setup_aws::node_pool_manifests(&options);
    let plan = Plan::for_aws(options).await;
    let scaffold = init::scaffold_of(&plan, scaffold, &args.common);
    let mut next_steps = vec![init::next_step(&args.common)];
    next_steps.push(init::image_note(&image));
    let setup = Setup {
        title: format!("EKS cluster {name} in {region}"),
        plan: &plan,
        scaffold,
        next_steps,
    };
    init::execute(setup, &args.common, verbose).await
}
