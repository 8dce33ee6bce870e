//! `kubectl karpenter simulate`: the NodeClaims the agent would create for a set of manifests,
//! and their price, offline. The manifests are read as `convert` reads them; the plan and the
//! report come from `karpenter_core::simulate` (the agent's own scheduler) over the shipped
//! catalogue of `--provider`. Without a NodePool among the manifests, `init`'s starter NodePool
//! of that provider is used (and said so). With `--from-cluster` the cluster's objects are read
//! once each (pods, nodes, NodeClaims, NodePools, DaemonSets, namespaces) and go through the
//! agent's own scheduling input, so the plan is the one its next round would make.

use crate::cluster::Cluster;
use crate::manifests;
use crate::output::{self, Format};
use crate::table::{self, Cell, Table};
use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodCondition, PodStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::apis::{NodeClaim, NodePool};
use karpenter_core::cloud::aws::pricing::PriceTable;
use karpenter_core::cloud::gcp_prices;
use karpenter_core::cloud::kwok::catalogue;
use karpenter_core::disruption;
use karpenter_core::simulate::disruption::DisruptionPlan;
use karpenter_core::simulate::{self, Report};
use karpenter_core::state::{self, CachedNode, CachedPod, Gathered};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `simulate`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  kubectl karpenter simulate -f ./manifests/ --provider aws\n  kubectl karpenter simulate -f app.yaml --replicas shop/web=50 -o wide\n  kubectl karpenter simulate -f app.yaml --nodepool spot-only.yaml -o json\n  kubectl karpenter simulate --from-cluster --replicas shop/web=30\n  kubectl karpenter simulate --from-cluster --disruption --nodepool consolidate-now.yaml"
)]
pub(crate) struct SimulateArgs {
    /// Workloads (Deployments, StatefulSets, ReplicaSets, Jobs, CronJobs, DaemonSets, Pods) and
    /// NodePools: a file, a directory, or - for stdin; repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        required_unless_present = "from_cluster"
    )]
    pub files: Vec<PathBuf>,
    /// Plan the cluster's pending pods (and those of -f) as the agent's next round would: on
    /// today's nodes first, then on new nodes of its NodePools; and price today's nodes.
    #[arg(long)]
    pub from_cluster: bool,
    /// With --from-cluster: what the agent's disruption loop would do now (emptiness, drift,
    /// consolidation, one command after another), and what it would save.
    #[arg(long, requires = "from_cluster")]
    pub disruption: bool,
    /// With --disruption: simulate an agent run with --feature-gates
    /// SpotToSpotConsolidation=true (off by default, as upstream's).
    #[arg(long, requires = "disruption")]
    pub spot_to_spot: bool,
    /// Read directories' subdirectories too.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Whose catalogue and list prices to plan with: aws (us-west-2), gcp (us-central1) or kwok
    /// (both). Default: aws; with --from-cluster, each NodePool's node class's cloud.
    #[arg(long, value_enum)]
    pub provider: Option<Provider>,
    /// Plan in this region: its zones, and (aws) its on-demand prices from the AWS Pricing API
    /// when it can be read; otherwise the shipped region's prices, and a note says so.
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// Send AWS calls to this endpoint (tests).
    #[arg(long, value_name = "URL", hide = true)]
    pub endpoint_url: Option<String>,
    /// What if this Deployment, ReplicaSet or StatefulSet had N replicas; repeatable.
    #[arg(long = "replicas", value_name = "NAMESPACE/NAME=N")]
    pub replicas: Vec<String>,
    /// What if these NodePools were there: they replace the NodePools of the same name among the
    /// manifests, and join the others; repeatable.
    #[arg(long = "nodepool", value_name = "FILE")]
    pub node_pools: Vec<PathBuf>,
    /// table, wide (a row per node with its pods), json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = SimulateFormat::Table)]
    pub output: SimulateFormat,
}

/// How to print a simulation.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SimulateFormat {
    Table,
    Wide,
    Json,
    Yaml,
}

/// The clouds whose shipped catalogue a simulation can use.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    Aws,
    Gcp,
    Kwok,
}

/// Runs `simulate`.
pub(crate) fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    let mut objects = manifests::read(&args.files, args.recursive)?;
    let what_if = manifests::read(&args.node_pools, false)?;
    let replaced: Vec<&str> = what_if
        .iter()
        .filter(|(_, o)| o["kind"] == "NodePool")
        .filter_map(|(_, o)| o["metadata"]["name"].as_str())
        .collect();
    if what_if.iter().any(|(_, o)| o["kind"] != "NodePool") {
        bail!("--nodepool takes files of NodePools only");
    }
    objects.retain(|(_, o)| {
        !(o["kind"] == "NodePool"
            && o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| replaced.contains(&n)))
    });
    objects.extend(what_if);
    let replicas = replica_overrides(&args.replicas)?;
    let mut workloads = simulate::read(&objects, &replicas)?;
    for note in &workloads.notes {
        eprintln!("note: {note}");
    }
    let provider = args.provider.unwrap_or(Provider::Aws);
    if workloads.node_pools.is_empty() {
        let (pool, note) = starter_node_pool(provider)?;
        eprintln!("note: {note}");
        workloads.node_pools.push(pool);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let catalogue = runtime.block_on(catalogue_for(provider, args))?;
    let report = simulate::plan(&workloads, &catalogue);
    print(args, &report)
}

/// The shipped catalogue of `provider`, moved to `--region` if given.
async fn catalogue_for(
    provider: Provider,
    args: &SimulateArgs,
) -> anyhow::Result<Vec<karpenter_core::scheduling::InstanceType>> {
    use karpenter_core::simulate::region::ZoneStyle;
    let catalogue = shipped(provider);
    let Some(target) = &args.region else {
        return Ok(catalogue);
    };
    let style = match provider {
        Provider::Aws => ZoneStyle::Aws,
        Provider::Gcp => ZoneStyle::Gcp,
        Provider::Kwok => {
            bail!("--region: the kwok catalogue has no regions; pick --provider aws or gcp")
        }
    };
    let prices = match provider {
        Provider::Aws => {
            let why = match aws_prices(target, args.endpoint_url.as_deref()).await {
                Ok(prices) if !prices.is_empty() => {
                    return Ok(moved(catalogue, target, style, &prices, "AWS Pricing API"));
                }
                Ok(_) => format!("the AWS Pricing API has no on-demand price for {target}"),
                Err(e) => format!("the AWS Pricing API could not be read ({e:#})"),
            };
            // The shipped table has a few regions of its own (us-east-1, GovCloud, China).
            let table = PriceTable::shipped(target);
            if table.table_region() == target {
                eprintln!("note: {why}: on-demand prices are the shipped table's for {target}");
                let prices: std::collections::HashMap<String, f64> = catalogue
                    .iter()
                    .filter_map(|t| Some((t.name.clone(), table.on_demand(&t.name)?)))
                    .collect();
                return Ok(moved(catalogue, target, style, &prices, "shipped table"));
            }
            eprintln!("note: {why}: prices are us-west-2's");
            Default::default()
        }
        _ => {
            // Compute Engine's generated table has most regions (the Billing Catalog is the
            // agent's live source; it needs a project, which a plan from files does not have).
            let prices: std::collections::HashMap<String, f64> = catalogue
                .iter()
                .filter_map(|t| {
                    Some((
                        t.name.clone(),
                        gcp_prices::shipped(&t.name, target)?.on_demand,
                    ))
                })
                .collect();
            if !prices.is_empty() {
                return Ok(moved(catalogue, target, style, &prices, "shipped table"));
            }
            eprintln!(
                "note: the shipped Compute Engine prices have no figures for {target}: prices are us-central1's"
            );
            Default::default()
        }
    };
    Ok(moved(catalogue, target, style, &prices, ""))
}

/// `catalogue` moved to `target`, on-demand at `prices` (from `source`) where they have a type.
fn moved(
    mut catalogue: Vec<karpenter_core::scheduling::InstanceType>,
    target: &str,
    style: karpenter_core::simulate::region::ZoneStyle,
    prices: &std::collections::HashMap<String, f64>,
    source: &str,
) -> Vec<karpenter_core::scheduling::InstanceType> {
    use karpenter_core::simulate::region;
    let zones = region::zones(target, style);
    let repriced = region::in_region(&mut catalogue, target, &zones, prices);
    if repriced > 0 {
        eprintln!(
            "note: on-demand prices of {repriced} of {} types are {target}'s ({source}); spot prices keep their shipped discount",
            catalogue.len()
        );
    }
    catalogue
}

/// The on-demand prices of `region` from the AWS Pricing API (credentials from the default
/// chain), within 30 seconds.
async fn aws_prices(
    region: &str,
    endpoint_url: Option<&str>,
) -> anyhow::Result<std::collections::HashMap<String, f64>> {
    use karpenter_core::cloud::aws::{AwsConfig, Clients, price_feed};
    let mut config = AwsConfig::new(region, "simulate");
    config.endpoint_url = endpoint_url.map(str::to_owned);
    let fetch = async {
        let sdk = config.sdk_config().await;
        let clients = Clients::new(&sdk, region, "simulate");
        price_feed::fetch(&clients.pricing, region).await
    };
    let parsed = tokio::time::timeout(std::time::Duration::from_secs(30), fetch)
        .await
        .context("no answer within 30 s")??;
    Ok(parsed.prices)
}

/// The shipped catalogue of a provider.
fn shipped(provider: Provider) -> Vec<karpenter_core::scheduling::InstanceType> {
    match provider {
        Provider::Aws => catalogue::aws_catalogue(),
        Provider::Gcp => catalogue::gcp_catalogue(),
        Provider::Kwok => catalogue::catalogue(),
    }
}

/// Prints a report as `-o` asks.
fn print(args: &SimulateArgs, report: &Report) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now();
    match args.output {
        SimulateFormat::Json => output::print_data(Format::Json, "Simulation", report, now),
        SimulateFormat::Yaml => output::print_data(Format::Yaml, "Simulation", report, now),
        SimulateFormat::Wide => output::print_stdout(&render(report, true)),
        SimulateFormat::Table => output::print_stdout(&render(report, false)),
    }
}

/// Runs `simulate --from-cluster`: the cluster's pending pods, plus -f's and the what-ifs,
/// through the agent's own scheduling input.
pub(crate) async fn run_cluster(cluster: &Cluster, args: &SimulateArgs) -> anyhow::Result<()> {
    let client = cluster.client();
    let list = ListParams::default();
    let mut pods: Vec<Arc<CachedPod>> = Api::<Pod>::all(client.clone())
        .list(&list)
        .await
        .context("listing pods")?
        .items
        .into_iter()
        .map(|p| Arc::new(CachedPod::from(p)))
        .collect();
    let nodes: Vec<Arc<CachedNode>> = CachedNode::all(
        Api::<Node>::all(client.clone())
            .list(&list)
            .await
            .context("listing nodes")?
            .items,
    )
    .into_iter()
    .map(Arc::new)
    .collect();
    let claims: Vec<Arc<NodeClaim>> = Api::<NodeClaim>::all(client.clone())
        .list(&list)
        .await
        .context("listing NodeClaims")?
        .items
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut pools: Vec<NodePool> = Api::<NodePool>::all(client.clone())
        .list(&list)
        .await
        .context("listing NodePools")?
        .items;
    let daemon_sets = Api::<DaemonSet>::all(client.clone())
        .list(&list)
        .await
        .context("listing DaemonSets")?
        .items;
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&list)
        .await
        .context("listing namespaces")?
        .items;

    // What -f adds, and the what-ifs.
    let mut replicas = replica_overrides(&args.replicas)?;
    let mut extra: Vec<Pod> = Vec::new();
    for (key, wanted) in replicas.clone() {
        let Some((namespace, name)) = key.split_once('/') else {
            continue;
        };
        let found = workload_template(&client, namespace, name).await?;
        let Some((current, template)) = found else {
            continue;
        };
        replicas.remove(&key);
        if wanted < current {
            bail!(
                "--replicas {key}={wanted}: {key} runs {current} today; a simulation adds replicas, it does not remove them"
            );
        }
        for i in current..wanted {
            let pod: Value = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-whatif-{i}"), "namespace": namespace,
                    "labels": template["metadata"]["labels"]},
                "spec": template["spec"],
            });
            extra.push(serde_json::from_value(pod).context("reading a pod template")?);
        }
    }
    let objects = manifests::read(&args.files, args.recursive)?;
    let what_if = manifests::read(&args.node_pools, false)?;
    let workloads = simulate::read(&objects, &replicas)?;
    for note in &workloads.notes {
        eprintln!("note: {note}");
    }
    extra.extend(workloads.pods);
    for pod in extra {
        pods.push(Arc::new(CachedPod::from(unschedulable(pod))));
    }
    let mut added: Vec<NodePool> = workloads.node_pools;
    for (_, object) in what_if {
        added.push(serde_json::from_value(object).context("--nodepool takes files of NodePools")?);
    }
    pools.retain(|p| !added.iter().any(|a| a.metadata.name == p.metadata.name));
    pools.extend(added);
    let pools: Vec<Arc<NodePool>> = pools.into_iter().map(Arc::new).collect();

    let mut cluster = Gathered {
        pods,
        nodes,
        claims,
        pools,
        daemon_set_pods: state::daemon_set_pods(&daemon_sets),
        namespace_labels: state::namespace_labels(&namespaces),
        ..Gathered::default()
    };
    let failed = cluster
        .fetch_catalogues(|class| async move {
            let provider = args.provider.unwrap_or(match class.kind.as_str() {
                "EC2NodeClass" => Provider::Aws,
                "GCENodeClass" => Provider::Gcp,
                _ => Provider::Kwok,
            });
            catalogue_for(provider, args).await.map(Into::into)
        })
        .await;
    if let Some((_, e)) = failed.into_iter().next() {
        return Err(e);
    }
    let snapshot = cluster.snapshot();
    let mut report = simulate::plan_cluster(&snapshot, &shipped(Provider::Kwok));
    if args.disruption {
        let pdbs = Api::<PodDisruptionBudget>::all(client.clone())
            .list(&list)
            .await
            .context("listing PodDisruptionBudgets")?
            .items;
        let options = disruption::Options {
            spot_to_spot: args.spot_to_spot,
            ..disruption::Options::default()
        };
        report.disruption = Some(simulate::disruption::plan(
            &snapshot,
            &pdbs,
            k8s_openapi::jiff::Timestamp::now(),
            options,
        ));
    }
    print(args, &report)
}

/// A Deployment's or StatefulSet's replicas today and its pod template, if it exists.
async fn workload_template(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<(u32, Value)>> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    if let Some(d) = deployments
        .get_opt(name)
        .await
        .context("reading a Deployment")?
    {
        let spec = d.spec.unwrap_or_default();
        let current = spec.replicas.unwrap_or(1).max(0).unsigned_abs();
        return Ok(Some((current, serde_json::to_value(spec.template)?)));
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    if let Some(s) = sets.get_opt(name).await.context("reading a StatefulSet")? {
        let spec = s.spec.unwrap_or_default();
        let current = spec.replicas.unwrap_or(1).max(0).unsigned_abs();
        return Ok(Some((current, serde_json::to_value(spec.template)?)));
    }
    Ok(None)
}

/// A pod as the kube-scheduler leaves one it cannot place: what the agent provisions for.
fn unschedulable(mut pod: Pod) -> Pod {
    pod.status = Some(PodStatus {
        phase: Some("Pending".to_owned()),
        conditions: Some(vec![PodCondition {
            type_: "PodScheduled".to_owned(),
            status: "False".to_owned(),
            reason: Some("Unschedulable".to_owned()),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    });
    pod
}

/// `--replicas ns/name=N` flags as a map.
fn replica_overrides(flags: &[String]) -> anyhow::Result<BTreeMap<String, u32>> {
    let mut out = BTreeMap::new();
    for flag in flags {
        let Some((name, count)) = flag.split_once('=') else {
            bail!("--replicas {flag}: expected NAMESPACE/NAME=N");
        };
        let name = if name.contains('/') {
            name.to_owned()
        } else {
            format!("default/{name}")
        };
        let count: u32 = count
            .parse()
            .with_context(|| format!("--replicas {flag}: {count} is not a count"))?;
        out.insert(name, count);
    }
    Ok(out)
}

/// The NodePool `init` scaffolds for `provider`, and a note saying it is used.
fn starter_node_pool(
    provider: Provider,
) -> anyhow::Result<(karpenter_core::apis::NodePool, String)> {
    let pool: Value = match provider {
        Provider::Aws => {
            let options = karpenter_core::setup::aws::AwsOptions::new("simulated", "us-west-2");
            karpenter_core::setup::aws::node_pool_manifests(&options)
                .into_iter()
                .find(|m| m.resource.kind == "NodePool")
                .map(|m| m.object)
                .context("init aws scaffolds a NodePool")?
        }
        Provider::Gcp => {
            let options = karpenter_core::setup::gcp::GcpOptions::new(
                "simulated",
                "simulated",
                "us-central1",
            );
            karpenter_core::setup::gcp::node_pool_manifests(&options, None)
                .into_iter()
                .find(|m| m.resource.kind == "NodePool")
                .map(|m| m.object)
                .context("init gcp scaffolds a NodePool")?
        }
        Provider::Kwok => serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            }}},
        }),
    };
    let pool = serde_json::from_value(pool).context("reading the starter NodePool")?;
    Ok((
        pool,
        "no NodePool among the manifests: planned with the starter NodePool `kubectl karpenter init` writes (pass -f or --nodepool with yours)".to_owned(),
    ))
}

fn dollars(price: f64) -> String {
    format!("${price:.4}")
}

/// A price that may be unknown (a type no price table lists: it launches, ranked last).
fn dollars_or_unknown(price: Option<f64>) -> String {
    price.map_or_else(|| "unknown".to_owned(), dollars)
}

/// The report as tables: the nodes (grouped by pool, type, capacity type and zone; `wide`: one
/// row per node with its pods), the pods that cannot be placed, and the total.
fn render(report: &Report, wide: bool) -> String {
    let color = table::color_enabled();
    let mut text = String::new();
    if report.claims.is_empty() {
        // No table of nothing: the TOTAL line says no new nodes.
    } else if wide {
        let mut nodes = Table::new(&[
            "NODEPOOL",
            "INSTANCE TYPE",
            "CAPACITY",
            "ZONE",
            "$/HOUR",
            "PODS",
        ]);
        for claim in &report.claims {
            nodes.row(vec![
                Cell::from(claim.node_pool.as_str()),
                Cell::from(claim.instance_type.as_str()),
                Cell::from(claim.capacity_type.as_str()),
                Cell::from(claim.zone.as_str()),
                Cell::from(dollars_or_unknown(claim.price_per_hour)),
                Cell::from(output::name_list(&claim.pods)),
            ]);
        }
        text.push_str(&nodes.render(color));
    } else {
        // (pool, type, capacity type, zone) -> (nodes, pods, $/hour if known)
        type Group<'a> = (&'a str, &'a str, &'a str, &'a str);
        let mut groups: BTreeMap<Group<'_>, (usize, usize, Option<f64>)> = BTreeMap::new();
        for claim in &report.claims {
            let group = groups
                .entry((
                    &claim.node_pool,
                    &claim.instance_type,
                    claim.capacity_type.as_str(),
                    &claim.zone,
                ))
                .or_default();
            group.0 += 1;
            group.1 += claim.pods.len();
            // One type and capacity type: all of a group's prices are known, or none is.
            group.2 = match (group.0, group.2, claim.price_per_hour) {
                (1, _, price) => price,
                (_, Some(sum), Some(price)) => Some(sum + price),
                _ => None,
            };
        }
        let mut nodes = Table::new(&[
            "NODEPOOL",
            "INSTANCE TYPE",
            "CAPACITY",
            "ZONE",
            "NODES",
            "PODS",
            "$/HOUR",
        ]);
        for ((pool, instance_type, capacity, zone), (count, pods, price)) in groups {
            nodes.row(vec![
                Cell::from(pool),
                Cell::from(instance_type),
                Cell::from(capacity),
                Cell::from(zone),
                Cell::from(count.to_string()),
                Cell::from(pods.to_string()),
                Cell::from(dollars_or_unknown(price)),
            ]);
        }
        text.push_str(&nodes.render(color));
    }
    if !report.unplaced.is_empty() {
        let mut unplaced = Table::new(&["POD", "WHY IT CANNOT BE PLACED"]);
        for u in &report.unplaced {
            let reason = if wide {
                u.reason.clone()
            } else {
                table::truncate(&u.reason, 140)
            };
            unplaced.row(vec![Cell::from(u.pod.as_str()), Cell::from(reason)]);
        }
        text.push('\n');
        text.push_str(&unplaced.render(color));
    }
    let placed = report.pods - report.unplaced.len();
    if report.placed_on_existing > 0 {
        text.push_str(&format!(
            "\n{} of the pods fit on nodes already there",
            report.placed_on_existing
        ));
    }
    let unpriced = if report.unpriced > 0 {
        format!("   ({} of unknown price left out)", report.unpriced)
    } else {
        String::new()
    };
    text.push_str(&format!(
        "\nTOTAL   {} new nodes for {placed} of {} pods   {}/hour   ${:.2}/month{unpriced}\n",
        report.claims.len(),
        report.pods,
        dollars(report.price_per_hour),
        report.price_per_month
    ));
    if let Some(fleet) = &report.current {
        let unpriced = if fleet.unpriced > 0 {
            format!("   ({} of unknown price left out)", fleet.unpriced)
        } else {
            String::new()
        };
        text.push_str(&format!(
            "TODAY   {} nodes   {}/hour   ${:.2}/month{unpriced}\n",
            fleet.nodes,
            dollars(fleet.price_per_hour),
            fleet.price_per_month
        ));
    }
    if let Some(plan) = &report.disruption {
        text.push_str(&render_disruption(plan, report.current.as_ref(), wide));
    }
    text
}

/// What disruption would do: its commands in order, the saving, and what keeps the rest
/// (`wide`: per node; otherwise counted by reason).
fn render_disruption(plan: &DisruptionPlan, today: Option<&simulate::Fleet>, wide: bool) -> String {
    let color = table::color_enabled();
    let mut text =
        String::from("\nDISRUPTION (what the agent would do now, one command after another)\n");
    if plan.steps.is_empty() {
        text.push_str("nothing to do now\n");
    } else {
        let mut steps = Table::new(&[
            "STEP",
            "METHOD",
            "DECISION",
            "REMOVES",
            "LAUNCHES",
            "SAVES $/HOUR",
        ]);
        for (i, step) in plan.steps.iter().enumerate() {
            let removed: Vec<String> = step
                .removed
                .iter()
                .map(|r| format!("{} ({} {})", r.node_claim, r.instance_type, r.capacity_type))
                .collect();
            let launched: Vec<String> = step
                .launched
                .iter()
                .map(|l| {
                    format!(
                        "{} {} in {} ({} pods)",
                        l.instance_type, l.capacity_type, l.zone, l.pods
                    )
                })
                .collect();
            steps.row(vec![
                Cell::from((i + 1).to_string()),
                Cell::from(step.method.as_str()),
                Cell::from(format!("{} ({})", step.decision, step.reason)),
                Cell::from(output::name_list(&removed)),
                Cell::from(if launched.is_empty() {
                    "-".to_owned()
                } else {
                    launched.join(", ")
                }),
                Cell::from(dollars_or_unknown(step.savings_per_hour)),
            ]);
        }
        text.push_str(&steps.render(color));
        if plan.truncated {
            text.push_str(&format!("(stopped after {} commands)\n", plan.steps.len()));
        }
    }
    let removed: usize = plan.steps.iter().map(|s| s.removed.len()).sum();
    let launched: usize = plan.steps.iter().map(|s| s.launched.len()).sum();
    text.push_str(&format!(
        "SAVES   {removed} nodes removed, {launched} launched   {}/hour   ${:.2}/month",
        dollars(plan.savings_per_hour),
        plan.savings_per_month
    ));
    if let Some(fleet) = today {
        text.push_str(&format!(
            "   (today {}/hour, then {}/hour)",
            dollars(fleet.price_per_hour),
            dollars(fleet.price_per_hour - plan.savings_per_hour)
        ));
    }
    text.push('\n');
    if plan.kept.is_empty() {
        return text;
    }
    if wide {
        let mut kept = Table::new(&["NODECLAIM", "NODEPOOL", "WHY IT STAYS"]);
        for k in &plan.kept {
            kept.row(vec![
                Cell::from(k.node_claim.as_str()),
                Cell::from(k.node_pool.as_str()),
                Cell::from(k.why.as_str()),
            ]);
        }
        text.push('\n');
        text.push_str(&kept.render(color));
    } else {
        let mut by_why: BTreeMap<&str, usize> = BTreeMap::new();
        for k in &plan.kept {
            *by_why.entry(k.why.as_str()).or_default() += 1;
        }
        let mut kept = Table::new(&["NODES", "WHY THEY STAY"]);
        for (why, count) in by_why {
            kept.row(vec![
                Cell::from(count.to_string()),
                Cell::from(table::truncate(why, 140)),
            ]);
        }
        text.push('\n');
        text.push_str(&kept.render(color));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_overrides_read_namespace_name_and_count_and_refuse_anything_else() {
        let map = replica_overrides(&["shop/web=5".to_owned(), "api=2".to_owned()]).unwrap();
        assert_eq!(map.get("shop/web"), Some(&5));
        assert_eq!(map.get("default/api"), Some(&2));
        let error = replica_overrides(&["shop/web".to_owned()]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--replicas shop/web: expected NAMESPACE/NAME=N"
        );
    }
}
