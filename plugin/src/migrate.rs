//! `kubectl karpenter migrate cluster-autoscaler`: reads the node groups Cluster Autoscaler
//! scales from the cluster's Nodes (`karpenter_core::migrate`), writes a NodePool per group and
//! the node class `init` makes (YAML on stdout, or files in `--output-dir`), and says on stderr
//! what it found, what it guessed, what the nodes cost today against what the NodePools would
//! launch for the same pods (`karpenter_core::simulate` with the shipped catalogue), and the
//! steps to finish. It names the pods Cluster Autoscaler was told never to evict
//! (`safe-to-evict: "false"`), which Karpenter would, with the commands that carry that over as
//! `karpenter.sh/do-not-disrupt: "true"`. `--yes` also does the steps that are safe to
//! automate: apply the objects, annotate those running pods, scale Cluster Autoscaler to zero,
//! cordon the groups' nodes. Draining, and changing workloads' templates (which rolls them),
//! stay the user's.

use crate::cluster::Cluster;
use crate::init;
use crate::table::{self, Cell, Table};
use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::cloud::kwok::catalogue;
use karpenter_core::migrate::safe_to_evict::{self, Unprotected};
use karpenter_core::migrate::{self, Cloud, NodeGroup};
use karpenter_core::scheduling::InstanceType;
use karpenter_core::setup::manifests::Manifest;
use karpenter_core::simulate::{self, Workloads};
use karpenter_core::state::CachedNode;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use std::path::PathBuf;

/// Flags of `migrate`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  kubectl karpenter migrate cluster-autoscaler --cluster demo > karpenter.yaml\n  kubectl karpenter migrate cluster-autoscaler --cluster demo --output-dir ./karpenter --yes"
)]
pub(crate) struct MigrateArgs {
    #[command(subcommand)]
    pub from: From,
}

/// What to migrate from.
#[derive(clap::Subcommand, Debug, Clone)]
pub(crate) enum From {
    /// Write NodePools that keep what Cluster Autoscaler's node groups give pods (labels, taints,
    /// zones, architectures, capacity type) with a wider choice of instance types.
    #[command(
        after_help = "Examples:\n  kubectl karpenter migrate cluster-autoscaler --cluster demo > karpenter.yaml\n  kubectl karpenter migrate cluster-autoscaler --cluster demo --output-dir ./karpenter --yes"
    )]
    ClusterAutoscaler(CasArgs),
}

/// Flags of `migrate cluster-autoscaler`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CasArgs {
    /// The cluster's name (the node class's role and discovery tags on AWS, its network tags on
    /// GKE), as given to `init`.
    #[arg(long, value_name = "NAME")]
    pub cluster: String,
    /// The cloud (default: the one the node groups' labels name).
    #[arg(long, value_enum)]
    pub provider: Option<ProviderFlag>,
    /// GCP: the project (for the node class's service account).
    #[arg(long, value_name = "PROJECT")]
    pub project: Option<String>,
    /// GCP: the cluster's location.
    #[arg(long, value_name = "LOCATION")]
    pub location: Option<String>,
    /// AWS: the cluster's region, for the EKS API (default: $AWS_REGION).
    #[arg(long, value_name = "REGION", env = "AWS_REGION")]
    pub region: Option<String>,
    /// Read the node groups from the Nodes' labels only, not from the EKS or GKE API (their
    /// maximum sizes and the groups with no node are then unknown).
    #[arg(long)]
    pub from_nodes: bool,
    /// Send AWS or GCP calls to this endpoint (tests: moto, the GCP fake).
    #[arg(long, value_name = "URL", hide = true)]
    pub endpoint_url: Option<String>,
    /// Write the NodePools and node class here (one file each) instead of stdout.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Also apply them, annotate the running pods Cluster Autoscaler would not evict
    /// `karpenter.sh/do-not-disrupt: "true"`, scale Cluster Autoscaler to zero and cordon the
    /// groups' nodes.
    #[arg(short = 'y', long)]
    pub yes: bool,
}

/// The clouds migrate knows.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProviderFlag {
    Aws,
    Gcp,
}

/// Runs `migrate`.
pub(crate) async fn run(cluster: &Cluster, args: &MigrateArgs) -> anyhow::Result<()> {
    let From::ClusterAutoscaler(args) = &args.from;
    let client = cluster.client();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?
        .items;
    let (mut groups, outside) = migrate::node_groups(&nodes);
    let mut api_notes = Vec::new();
    // GKE when asked, else when a node says so, or when nothing says and a GCP project is given.
    let on_gcp = match args.provider {
        Some(ProviderFlag::Gcp) => true,
        Some(ProviderFlag::Aws) => false,
        None => {
            groups.iter().any(|g| g.cloud == Some(Cloud::Gcp))
                || (groups.is_empty() && args.project.is_some())
        }
    };
    let on_aws = !on_gcp;
    if on_aws && !args.from_nodes {
        match &args.region {
            None => api_notes.push(
                "no --region (or AWS_REGION): the node groups are read from the Nodes only"
                    .to_owned(),
            ),
            Some(region) => {
                let mut options = karpenter_core::setup::aws::AwsOptions::new(
                    args.cluster.clone(),
                    region.clone(),
                );
                options.endpoint_url = args.endpoint_url.clone();
                match karpenter_core::setup::aws::node_groups(&options).await {
                    Ok(from_api) => {
                        api_notes.push(format!(
                            "read {} managed node groups from the EKS API (maximum sizes, instance types, labels and taints as configured)",
                            from_api.len()
                        ));
                        groups = migrate::merge(groups, from_api);
                    }
                    Err(e) => api_notes.push(format!(
                        "the EKS API could not be read ({}): the node groups are read from the Nodes only (--from-nodes skips the API)",
                        init::setup_error(e, 0)
                    )),
                }
            }
        }
    } else if on_gcp && !args.from_nodes {
        // Without both, the node class cannot be written either, and the error below says so.
        if let (Some(project), Some(location)) = (&args.project, &args.location) {
            let mut options = karpenter_core::setup::gcp::GcpOptions::new(
                project.clone(),
                args.cluster.clone(),
                location.clone(),
            );
            options.endpoint = args.endpoint_url.clone();
            match karpenter_core::setup::gcp::node_pools(&options).await {
                    Ok(from_api) => {
                        api_notes.push(format!(
                            "read {} node pools from the GKE API (autoscaling limits, machine types, zones, labels and taints as configured)",
                            from_api.len()
                        ));
                        groups = migrate::merge(groups, from_api);
                    }
                    Err(e) => api_notes.push(format!(
                        "the GKE API could not be read ({}): the node pools are read from the Nodes only (--from-nodes skips the API)",
                        init::setup_error(e, 0)
                    )),
                }
        }
    }
    if groups.is_empty() {
        bail!(
            "none of the {} nodes is in a node group Cluster Autoscaler scales (labels eks.amazonaws.com/nodegroup, alpha.eksctl.io/nodegroup-name, cloud.google.com/gke-nodepool)",
            nodes.len()
        );
    }
    let cloud = if on_gcp { Cloud::Gcp } else { Cloud::Aws };
    let node_class = node_class(cloud, args)?;
    let class_ref = json!({
        "group": node_class.object["apiVersion"].as_str().unwrap_or_default().split('/').next(),
        "kind": node_class.object["kind"],
        "name": node_class.name,
    });
    let catalogue = match cloud {
        Cloud::Aws => catalogue::aws_catalogue(),
        Cloud::Gcp => catalogue::gcp_catalogue(),
    };
    // A group with no node today: the size of its largest instance type.
    for group in &mut groups {
        if group.node_cpu_millis == 0 {
            group.node_cpu_millis = group
                .instance_types
                .iter()
                .filter_map(|t| catalogue.iter().find(|it| &it.name == t))
                .map(|it| it.capacity.get(karpenter_core::resources::CPU))
                .max()
                .unwrap_or(0);
        }
    }
    let mut notes = api_notes;
    notes.extend(groups.iter().flat_map(|g| g.notes.iter().cloned()));
    // An EKS group that boots otherwise than init's node class (another AMI, disk, launch
    // template) gets a class of its own.
    let mut own_classes = Vec::new();
    let mut shared_used = false;
    let pools: Vec<Manifest> = groups
        .iter()
        .map(|g| {
            let own = match cloud {
                Cloud::Aws => {
                    migrate::launch_template::node_class(g, &node_class.object, &mut notes)
                }
                Cloud::Gcp => None,
            };
            let reference = match &own {
                Some(class) => {
                    let mut reference = class_ref.clone();
                    reference["name"] = class["metadata"]["name"].clone();
                    reference
                }
                None => {
                    shared_used = true;
                    class_ref.clone()
                }
            };
            own_classes.extend(own.map(|c| Manifest::new(c, "ec2nodeclasses")));
            Manifest::new(migrate::node_pool(g, &reference, &mut notes), "nodepools")
        })
        .collect();

    eprintln!(
        "Found {} node groups, on {} nodes ({outside} nodes in none, left alone):",
        groups.len(),
        nodes.len() - outside
    );
    eprintln!("{}", groups_table(&groups));
    for note in &notes {
        eprintln!("note: {note}");
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing pods")?
        .items;
    for note in migrate::pods_selecting_groups(&pods) {
        eprintln!("note: {note}");
    }
    let unprotected = safe_to_evict::unprotected_pods(&pods);
    if !unprotected.is_empty() {
        eprintln!("{}", unprotected_report(&unprotected));
    }
    eprintln!("{}", prices(&groups, &nodes, &pods, &pools, &catalogue)?);

    let mut objects = Vec::new();
    if shared_used {
        objects.push(node_class);
    }
    objects.extend(own_classes);
    objects.extend(pools);
    init::write_objects(&objects, args.output_dir.as_deref())?;
    if args.yes {
        automate(&client, &objects, &groups, &unprotected).await?;
    }
    for line in steps(cloud, args, &groups, &unprotected) {
        eprintln!("{line}");
    }
    Ok(())
}

/// The node class `init` scaffolds for the cloud.
fn node_class(cloud: Cloud, args: &CasArgs) -> anyhow::Result<Manifest> {
    let scaffold = match cloud {
        Cloud::Aws => karpenter_core::setup::aws::node_pool_manifests(
            &karpenter_core::setup::aws::AwsOptions::new(args.cluster.clone(), ""),
        ),
        Cloud::Gcp => {
            let (Some(project), Some(location)) = (&args.project, &args.location) else {
                bail!(
                    "--project and --location are required for GKE (the node class's service account and zones)"
                );
            };
            karpenter_core::setup::gcp::node_pool_manifests(
                &karpenter_core::setup::gcp::GcpOptions::new(
                    project.clone(),
                    args.cluster.clone(),
                    location.clone(),
                ),
                None,
            )
        }
    };
    scaffold
        .into_iter()
        .find(|m| m.resource.kind != "NodePool")
        .context("init scaffolds a node class")
}

fn groups_table(groups: &[NodeGroup]) -> String {
    let mut t = Table::new(&[
        "GROUP",
        "KIND",
        "NODES",
        "MAX",
        "INSTANCE TYPES",
        "ZONES",
        "CAPACITY",
        "NODEPOOL",
    ]);
    let join = |set: &std::collections::BTreeSet<String>| {
        set.iter().cloned().collect::<Vec<_>>().join(",")
    };
    for g in groups {
        t.row(vec![
            Cell::from(g.name.as_str()),
            Cell::from(g.kind.as_str()),
            Cell::from(g.nodes.len().to_string()),
            Cell::from(g.max_size.map_or("-".to_owned(), |m| m.to_string())),
            Cell::from(join(&g.instance_types)),
            Cell::from(join(&g.zones)),
            Cell::from(join(&g.capacity_types)),
            Cell::from(migrate::pool_name(&g.name)),
        ]);
    }
    t.render(table::color_enabled())
}

/// What the groups' nodes cost today (their types' list prices) against what the NodePools
/// would launch for the pods on them.
fn prices(
    groups: &[NodeGroup],
    nodes: &[Node],
    pods: &[Pod],
    pools: &[Manifest],
    catalogue: &[InstanceType],
) -> anyhow::Result<String> {
    let in_groups: std::collections::BTreeSet<&str> = groups
        .iter()
        .flat_map(|g| g.nodes.iter().map(String::as_str))
        .collect();
    let group_nodes: Vec<std::sync::Arc<CachedNode>> = CachedNode::all(
        nodes
            .iter()
            .filter(|n| in_groups.contains(n.metadata.name.as_deref().unwrap_or_default()))
            .cloned(),
    )
    .into_iter()
    .map(std::sync::Arc::new)
    .collect();
    let today = simulate::fleet(&group_nodes, catalogue);
    let mut workloads = Workloads::default();
    let mut daemon_sets = std::collections::BTreeSet::new();
    for pod in pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if !node.is_some_and(|n| in_groups.contains(n)) {
            continue;
        }
        let owner = pod
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .map(|o| (o.kind.clone(), o.name.clone()));
        let mut pending = pod.clone();
        if let Some(spec) = pending.spec.as_mut() {
            spec.node_name = None;
        }
        pending.status = None;
        match owner {
            Some((kind, name)) if kind == "DaemonSet" => {
                if daemon_sets.insert(name) {
                    workloads.daemon_set_pods.push(pending);
                }
            }
            _ => workloads.pods.push(pending),
        }
    }
    for pool in pools {
        workloads.node_pools.push(
            serde_json::from_value(pool.object.clone()).context("reading a written NodePool")?,
        );
    }
    let report = simulate::plan(&workloads, catalogue);
    let mut text = format!(
        "Price (list prices of the shipped catalogue): today ${:.4}/hour for {}",
        today.price_per_hour,
        plural(today.nodes, "node")
    );
    if today.unpriced > 0 {
        text.push_str(&format!(" ({} of unknown price left out)", today.unpriced));
    }
    text.push_str(&format!(
        "; the NodePools would launch {} for their {} at ${:.4}/hour (${:.2}/month)",
        plural(report.claims.len(), "node"),
        plural(report.pods, "pod"),
        report.price_per_hour,
        report.price_per_month
    ));
    for unplaced in &report.unplaced {
        text.push_str(&format!(
            "\nnote: {} would not fit: {}",
            unplaced.pod,
            table::truncate(&unplaced.reason, 200)
        ));
    }
    Ok(text)
}

/// `1 node`, `3 nodes`.
fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// What Karpenter would do to the pods Cluster Autoscaler was told never to evict.
fn unprotected_report(pods: &[Unprotected]) -> String {
    let mut out = format!(
        "warning: {} {} cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\", which kept Cluster Autoscaler from removing their nodes; Karpenter does not read it and may evict them to consolidate or replace a drifted node. Its annotation is karpenter.sh/do-not-disrupt: \"true\" (--yes adds it to the running pods; the steps below say how for their workloads):",
        plural(pods.len(), "pod"),
        if pods.len() == 1 { "says" } else { "say" }
    );
    for pod in pods {
        let owner = pod.owner.as_ref().map_or_else(
            || "no controller".to_owned(),
            |o| format!("{} {}", o.kind, o.name),
        );
        out.push_str(&format!("\n  {}/{} ({owner})", pod.namespace, pod.name));
    }
    out
}

/// The steps `--yes` may take: apply the objects, protect the pods Cluster Autoscaler would
/// not evict, scale Cluster Autoscaler to zero, cordon.
async fn automate(
    client: &kube::Client,
    objects: &[Manifest],
    groups: &[NodeGroup],
    unprotected: &[Unprotected],
) -> anyhow::Result<()> {
    for object in objects {
        object
            .apply(client)
            .await
            .map_err(|e| init::setup_error(e, 0))?;
        eprintln!("+ applied {}", object.id());
    }
    // Before anything can disrupt them: the NodePools exist from here on.
    for pod in unprotected {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
        let patch = json!({"metadata": {"annotations": {karpenter_core::apis::labels::DO_NOT_DISRUPT: "true"}}});
        match pods
            .patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => eprintln!(
                "+ annotated pod {}/{} karpenter.sh/do-not-disrupt=true",
                pod.namespace, pod.name
            ),
            // Gone since it was listed: its replacement is the template's business (step 2).
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("annotating pod {}/{}", pod.namespace, pod.name));
            }
        }
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    let all = deployments
        .list(&ListParams::default())
        .await
        .context("listing kube-system's Deployments")?;
    let autoscalers: Vec<String> = all
        .items
        .iter()
        .filter(|d| {
            let name = d.metadata.name.as_deref().unwrap_or_default();
            let labels = d.metadata.labels.clone().unwrap_or_default();
            name.contains("cluster-autoscaler")
                || labels
                    .get("app.kubernetes.io/name")
                    .is_some_and(|v| v.contains("cluster-autoscaler"))
        })
        .filter_map(|d| d.metadata.name.clone())
        .collect();
    if autoscalers.is_empty() {
        eprintln!(
            "~ no Cluster Autoscaler Deployment in kube-system to scale down (GKE runs its own: see step 3)"
        );
    }
    for name in autoscalers {
        deployments
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await
            .with_context(|| format!("scaling kube-system/{name} to zero"))?;
        eprintln!("+ scaled Deployment kube-system/{name} to 0 replicas");
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for name in groups.iter().flat_map(|g| &g.nodes) {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .with_context(|| format!("cordoning node {name}"))?;
    }
    eprintln!(
        "+ cordoned the {} nodes of the node groups: new pods go to Karpenter's nodes",
        groups.iter().map(|g| g.nodes.len()).sum::<usize>()
    );
    Ok(())
}

/// What is left to do, in order.
fn steps(
    cloud: Cloud,
    args: &CasArgs,
    groups: &[NodeGroup],
    unprotected: &[Unprotected],
) -> Vec<String> {
    let cluster = &args.cluster;
    let mut out = vec!["\nTo finish the migration:".to_owned()];
    let init = match cloud {
        Cloud::Aws => format!("kubectl karpenter init aws --cluster {cluster}"),
        Cloud::Gcp => format!(
            "kubectl karpenter init gcp --project {} --cluster {cluster} --location {}",
            args.project.as_deref().unwrap_or("PROJECT"),
            args.location.as_deref().unwrap_or("LOCATION")
        ),
    };
    out.push(format!(
        "  1. {init}   (the agent, its cloud identity and the nodes' role; skip if done)"
    ));
    // GKE runs Cluster Autoscaler in its control plane: it is turned off pool by pool, in the
    // GKE API, which --yes does not write to.
    let gke_autoscaling_off = |out: &mut Vec<String>| {
        out.push("  3. turn GKE's own Cluster Autoscaler off for the pools it scales:".to_owned());
        for g in groups.iter().filter(|g| g.autoscaled != Some(false)) {
            out.push(format!(
                "     gcloud container node-pools update {} --cluster {cluster} --location {} --no-enable-autoscaling",
                g.name,
                args.location.as_deref().unwrap_or("LOCATION")
            ));
        }
    };
    if args.yes {
        out.push(match cloud {
            Cloud::Aws => "  2. done: the NodePools and node class are applied, Cluster Autoscaler is at zero, the groups' nodes are cordoned",
            Cloud::Gcp => "  2. done: the NodePools and node class are applied, the groups' nodes are cordoned",
        }.to_owned());
        if cloud == Cloud::Gcp {
            gke_autoscaling_off(&mut out);
        }
    } else {
        let written = match &args.output_dir {
            Some(dir) => format!("kubectl apply -f {}", dir.display()),
            None => "kubectl apply -f FILE (the YAML printed above)".to_owned(),
        };
        out.push(format!("  2. {written}"));
        if !unprotected.is_empty() {
            out.push("     and protect the pods Cluster Autoscaler would not evict:".to_owned());
            out.extend(
                unprotected
                    .iter()
                    .map(|p| format!("     {}", p.annotate_command())),
            );
        }
        match cloud {
            Cloud::Aws => out.push(
                "  3. kubectl -n kube-system scale deployment cluster-autoscaler --replicas 0"
                    .to_owned(),
            ),
            Cloud::Gcp => gke_autoscaling_off(&mut out),
        }
        out.push("     then cordon the groups' nodes, so new pods go to Karpenter's:".to_owned());
        for g in groups {
            out.push(format!("     kubectl cordon -l {}", g.selector));
        }
    }
    let mut templates: Vec<String> = unprotected
        .iter()
        .filter_map(Unprotected::template_command)
        .collect();
    templates.sort();
    templates.dedup();
    if !templates.is_empty() {
        out.push(
            "     so their workloads' next pods are protected too, when a rollout suits you:"
                .to_owned(),
        );
        out.extend(templates.iter().map(|t| format!("     {t}")));
    }
    out.push("  4. drain the old nodes one at a time, so Karpenter launches for their pods as they move (PodDisruptionBudgets are honoured):".to_owned());
    for g in groups {
        out.push(format!(
            "     kubectl drain -l {} --ignore-daemonsets --delete-emptydir-data",
            g.selector
        ));
    }
    out.push("  5. scale the groups to zero so they launch nothing more:".to_owned());
    for g in groups {
        out.push(match cloud {
            Cloud::Aws => format!(
                "     aws eks update-nodegroup-config --cluster-name {cluster} --nodegroup-name {} --scaling-config minSize=0,maxSize=1,desiredSize=0",
                g.name
            ),
            Cloud::Gcp => format!(
                "     gcloud container clusters resize {cluster} --node-pool {} --num-nodes 0 --location {}",
                g.name,
                args.location.as_deref().unwrap_or("LOCATION")
            ),
        });
    }
    out.push("  Then watch: kubectl karpenter status -w".to_owned());
    out
}
