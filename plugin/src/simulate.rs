//! `kubectl karpenter simulate`: the NodeClaims the agent would create for a set of manifests,
//! and their price, offline. The manifests are read as `convert` reads them; the plan and the
//! report come from `karpenter_core::simulate` (the agent's own scheduler) over the shipped
//! catalogue of `--provider`. Without a NodePool among the manifests, `init`'s starter NodePool
//! of that provider is used (and said so).

use crate::manifests;
use crate::output::{self, Format};
use crate::table::{self, Cell, Table};
use anyhow::{Context as _, bail};
use karpenter_core::cloud::kwok::catalogue;
use karpenter_core::simulate::{self, Report};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Flags of `simulate`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  kubectl karpenter simulate -f ./manifests/ --provider aws\n  kubectl karpenter simulate -f app.yaml --replicas shop/web=50 -o wide\n  kubectl karpenter simulate -f app.yaml --nodepool spot-only.yaml -o json"
)]
pub struct SimulateArgs {
    /// Workloads (Deployments, StatefulSets, ReplicaSets, Jobs, CronJobs, DaemonSets, Pods) and
    /// NodePools: a file, a directory, or - for stdin; repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        required = true
    )]
    pub files: Vec<PathBuf>,
    /// Read directories' subdirectories too.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Whose catalogue and list prices to plan with: aws (us-west-2), gcp (us-central1) or kwok
    /// (both).
    #[arg(long, value_enum, default_value_t = Provider::Aws)]
    pub provider: Provider,
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
pub enum SimulateFormat {
    Table,
    Wide,
    Json,
    Yaml,
}

/// The clouds whose shipped catalogue a simulation can use.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    Aws,
    Gcp,
    Kwok,
}

/// Runs `simulate`.
pub fn run(args: &SimulateArgs) -> anyhow::Result<()> {
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
    if workloads.node_pools.is_empty() {
        let (pool, note) = starter_node_pool(args.provider)?;
        eprintln!("note: {note}");
        workloads.node_pools.push(pool);
    }
    let catalogue = match args.provider {
        Provider::Aws => catalogue::aws_catalogue(),
        Provider::Gcp => catalogue::gcp_catalogue(),
        Provider::Kwok => catalogue::catalogue(),
    };
    let report = simulate::plan(&workloads, &catalogue);
    let now = k8s_openapi::jiff::Timestamp::now();
    match args.output {
        SimulateFormat::Json => output::print_data(Format::Json, "Simulation", &report, now),
        SimulateFormat::Yaml => output::print_data(Format::Yaml, "Simulation", &report, now),
        SimulateFormat::Wide => output::print_stdout(&render(&report, true)),
        SimulateFormat::Table => output::print_stdout(&render(&report, false)),
    }
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

/// The report as tables: the nodes (grouped by pool, type, capacity type and zone; `wide`: one
/// row per node with its pods), the pods that cannot be placed, and the total.
fn render(report: &Report, wide: bool) -> String {
    let color = table::color_enabled();
    let mut text = String::new();
    if wide {
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
                Cell::from(dollars(claim.price_per_hour)),
                Cell::from(output::name_list(&claim.pods)),
            ]);
        }
        text.push_str(&nodes.render(color));
    } else {
        // (pool, type, capacity type, zone) -> (nodes, pods, $/hour)
        type Group<'a> = (&'a str, &'a str, &'a str, &'a str);
        let mut groups: BTreeMap<Group<'_>, (usize, usize, f64)> = BTreeMap::new();
        for claim in &report.claims {
            let group = groups
                .entry((
                    &claim.node_pool,
                    &claim.instance_type,
                    &claim.capacity_type,
                    &claim.zone,
                ))
                .or_default();
            group.0 += 1;
            group.1 += claim.pods.len();
            group.2 += claim.price_per_hour;
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
                Cell::from(dollars(price)),
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
    text.push_str(&format!(
        "\nTOTAL   {} nodes for {placed} of {} pods   {}/hour   ${:.2}/month\n",
        report.claims.len(),
        report.pods,
        dollars(report.price_per_hour),
        report.price_per_month
    ));
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
