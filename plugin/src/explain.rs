//! `kubectl karpenter explain nodeclaim NAME`: why a NodeClaim exists, what it could have been,
//! what happened to it, and whether it can be disrupted now. Lists only the claim's surroundings
//! (its node, the pods on it, its pool's claims, Events on NodeClaims, PDBs); the facts come from
//! `karpenter_core::explain`.

use crate::cluster::Cluster;
use crate::output::{self, Format, age};
use crate::table::{Cell, Color, Table};
use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::{NodeClaim, NodePool, labels};
use karpenter_core::explain::{self, ClaimExplanation, human_duration};
use karpenter_core::state::CachedNode;
use kube::api::{Api, ListParams};
use std::fmt::Write as _;

/// Flags of `explain`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  kubectl karpenter explain nodeclaim default-abcde\n  kubectl karpenter explain node ip-10-0-1-23.us-west-2.compute.internal\n  kubectl karpenter explain nodeclaim/default-abcde -o yaml"
)]
pub(crate) struct ExplainArgs {
    /// What to explain: `nodeclaim NAME`, `nodeclaim/NAME`, or `node NAME` (its NodeClaim).
    #[arg(value_name = "RESOURCE")]
    pub resource: String,
    /// The object's name (unless given as RESOURCE/NAME).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Output format: text (default), json, yaml, or name (nodeclaim.karpenter.sh/NAME: with
    /// `explain node NAME`, which NodeClaim a node belongs to).
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ExplainFormat>,
}

/// `-o` of `explain`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExplainFormat {
    Json,
    Yaml,
    Name,
}

/// Most provisioned-for pods looked up one by one when they are not on the claim's node.
const MAX_POD_LOOKUPS: usize = 50;

enum Target {
    NodeClaim(String),
    Node(String),
}

/// Refuses arguments that name nothing explain can explain, before any request.
pub(crate) fn check(args: &ExplainArgs) -> anyhow::Result<()> {
    target(args).map(|_| ())
}

fn target(args: &ExplainArgs) -> anyhow::Result<Target> {
    let (kind, name) = match (args.resource.split_once('/'), &args.name) {
        (Some((kind, name)), None) => (kind.to_owned(), name.to_owned()),
        (Some(_), Some(_)) => {
            bail!("give the name either as RESOURCE/NAME or as a second argument, not both")
        }
        (None, Some(name)) => (args.resource.clone(), name.clone()),
        (None, None) => bail!(
            "which {0}? usage: kubectl karpenter explain {0} NAME",
            args.resource
        ),
    };
    match kind.to_lowercase().as_str() {
        "nodeclaim" | "nodeclaims" | "nodeclaim.karpenter.sh" | "nodeclaims.karpenter.sh" => {
            Ok(Target::NodeClaim(name))
        }
        "node" | "nodes" | "no" => Ok(Target::Node(name)),
        other => bail!("cannot explain {other:?}: explain takes nodeclaim NAME or node NAME"),
    }
}

/// Lists what explaining `name` needs.
pub(crate) async fn fetch(
    cluster: &Cluster,
    args: &ExplainArgs,
) -> anyhow::Result<(String, explain::ClusterObjects)> {
    let claims_api = cluster.all::<NodeClaim>();
    let claim = match target(args)? {
        Target::NodeClaim(name) => match cluster.get_opt(&claims_api, &name).await? {
            Some(claim) => claim,
            None => {
                let all = cluster
                    .list(claims_api.clone(), ListParams::default())
                    .await?;
                let snapshot = explain::ClusterObjects {
                    node_claims: all,
                    ..explain::ClusterObjects::default()
                };
                // Not found: the error names the claims that do exist.
                return Ok((name, snapshot));
            }
        },
        Target::Node(node_name) => {
            let all = cluster
                .list(claims_api.clone(), ListParams::default())
                .await?;
            let found = all.iter().find(|c| {
                c.status
                    .as_ref()
                    .is_some_and(|s| s.node_name.as_deref() == Some(&node_name))
            });
            match found {
                Some(claim) => claim.clone(),
                None => {
                    let nodes: Vec<String> = all
                        .iter()
                        .filter_map(|c| c.status.as_ref()?.node_name.clone())
                        .collect();
                    bail!(
                        "node {node_name:?} has no NodeClaim (not launched by a NodePool); nodes with a NodeClaim: {}",
                        output::name_list(&nodes)
                    );
                }
            }
        }
    };
    let name = claim.metadata.name.clone().unwrap_or_default();
    let status = claim.status.clone().unwrap_or_default();
    let pool_name = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODE_POOL))
        .cloned();

    let nodes_api = cluster.all::<Node>();
    let node = async {
        match (&status.node_name, &status.provider_id) {
            (Some(n), _) => Ok(cluster
                .get_opt(&nodes_api, n)
                .await?
                .into_iter()
                .collect::<Vec<_>>()),
            (None, Some(id)) => {
                let all = cluster
                    .list(nodes_api.clone(), ListParams::default())
                    .await?;
                Ok(all
                    .into_iter()
                    .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
                    .collect())
            }
            (None, None) => anyhow::Ok(Vec::new()),
        }
    };
    let pools_api = cluster.all::<NodePool>();
    let pool = async {
        match &pool_name {
            Some(p) => Ok(cluster
                .get_opt(&pools_api, p)
                .await?
                .into_iter()
                .collect::<Vec<_>>()),
            None => anyhow::Ok(Vec::new()),
        }
    };
    let pool_claims = async {
        match &pool_name {
            Some(p) => {
                cluster
                    .list(
                        claims_api.clone(),
                        ListParams::default().labels(&format!("{}={p}", labels::NODE_POOL)),
                    )
                    .await
            }
            None => Ok(vec![claim.clone()]),
        }
    };
    let events_api = cluster.namespaced::<Event>(None);
    let claim_events = cluster.list(
        events_api.clone(),
        ListParams::default().fields("involvedObject.kind=NodeClaim"),
    );
    let node_events = async {
        match &status.node_name {
            Some(n) => {
                cluster
                    .list(
                        events_api.clone(),
                        ListParams::default()
                            .fields(&format!("involvedObject.kind=Node,involvedObject.name={n}")),
                    )
                    .await
            }
            None => Ok(Vec::new()),
        }
    };
    let pods_api = cluster.namespaced::<Pod>(None);
    let pods_on_node = async {
        match &status.node_name {
            Some(n) => {
                cluster
                    .list(
                        pods_api.clone(),
                        ListParams::default().fields(&format!("spec.nodeName={n}")),
                    )
                    .await
            }
            None => Ok(Vec::new()),
        }
    };
    let pdbs = cluster.list(
        cluster.namespaced::<PodDisruptionBudget>(None),
        ListParams::default(),
    );
    let (node, pool, mut node_claims, mut events, node_events, mut pods, pdbs) = tokio::try_join!(
        node,
        pool,
        pool_claims,
        claim_events,
        node_events,
        pods_on_node,
        pdbs
    )?;
    events.extend(node_events);
    if !node_claims
        .iter()
        .any(|c| c.metadata.name.as_deref() == Some(&name))
    {
        node_claims.push(claim.clone());
    }

    // The pods it was made for that are not on its node: where are they now?
    let on_node: std::collections::HashSet<String> = pods
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    let missing: Vec<String> = claim
        .provisioned_for()
        .unwrap_or_default()
        .into_iter()
        .filter(|k| !on_node.contains(k))
        .take(MAX_POD_LOOKUPS)
        .collect();
    let lookups = futures::stream::iter(missing.into_iter().filter_map(|key| {
        let (ns, pod) = key.split_once('/')?;
        let api: Api<Pod> = cluster.namespaced(Some(ns));
        let pod = pod.to_owned();
        Some(async move { cluster.get_opt(&api, &pod).await })
    }))
    .buffer_unordered(8)
    .collect::<Vec<_>>()
    .await;
    for found in lookups {
        pods.extend(found?);
    }

    let list_prices = crate::prices::list_prices(
        node_claims
            .iter()
            .map(|c| &c.metadata)
            .chain(node.iter().map(|n| &n.metadata)),
    );
    Ok((
        name,
        explain::ClusterObjects {
            node_pools: pool,
            node_claims,
            nodes: CachedNode::all(node),
            pods,
            events,
            pod_disruption_budgets: pdbs,
            list_prices,
        },
    ))
}

/// Runs `explain`.
pub(crate) async fn run(cluster: &Cluster, args: &ExplainArgs) -> anyhow::Result<()> {
    let (name, snapshot) = fetch(cluster, args).await?;
    let now = Timestamp::now();
    let explanation = match explain::explain_node_claim(&snapshot, &name, now) {
        Ok(e) => e,
        Err(not_found) => {
            if not_found.existing.is_empty() {
                bail!("nodeclaim {name:?} not found: the cluster has no NodeClaims");
            }
            bail!(
                "nodeclaim {name:?} not found; nodeclaims that exist: {}",
                output::name_list(&not_found.existing)
            );
        }
    };
    match args.output {
        Some(ExplainFormat::Json) => {
            output::print_data(Format::Json, "NodeClaimExplanation", &explanation, now)
        }
        Some(ExplainFormat::Yaml) => {
            output::print_data(Format::Yaml, "NodeClaimExplanation", &explanation, now)
        }
        Some(ExplainFormat::Name) => {
            output::print_stdout(&(output::node_claim_name(&explanation.name) + "\n"))
        }
        None => output::print_stdout(&render(&explanation, now, crate::table::color_enabled())),
    }
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Renders an explanation like `kubectl describe`: fields, then one section per question.
pub(crate) fn render(e: &ClaimExplanation, now: Timestamp, color: bool) -> String {
    let mut out = String::new();
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    let paint = |text: &str, c: Color| {
        if color {
            format!(
                "\x1b[{}m{text}\x1b[0m",
                match c {
                    Color::Green => "32",
                    Color::Yellow => "33",
                    Color::Red => "31",
                }
            )
        } else {
            text.to_owned()
        }
    };
    let instance = match (&e.instance_type, &e.capacity_type, &e.zone) {
        (Some(t), Some(ct), Some(z)) => format!("{t} ({ct}, {z})"),
        (Some(t), _, _) => t.clone(),
        _ => "- (not launched)".to_owned(),
    };
    let price = match e.price {
        Some(p) => format!(
            "${:.4}/hour (${:.2}/month), from {}",
            p.per_hour,
            p.per_hour * explain::HOURS_PER_MONTH,
            match p.source {
                explain::PriceSource::NodeLabel =>
                    format!("the node's {} label", labels::INSTANCE_PRICE),
                explain::PriceSource::InstanceTypeOptions =>
                    "the recorded instance type options".to_owned(),
                explain::PriceSource::ListPrice =>
                    "the shipped list prices (nothing recorded one)".to_owned(),
            }
        ),
        None => "unknown".to_owned(),
    };
    let fields = [
        ("Name", e.name.clone()),
        ("NodePool", dash(&e.node_pool)),
        ("Instance", instance),
        ("Price", price),
        ("Node", dash(&e.node_name)),
        ("Provider ID", dash(&e.provider_id)),
        ("State", e.state.to_string()),
        ("Age", age(e.created_at, now)),
    ];
    for (k, v) in fields {
        let _ = writeln!(out, "{:<13}{v}", format!("{k}:"));
    }

    let _ = writeln!(out, "\nWhy it exists:\n  {}", e.why.summary);
    if !e.why.pods.is_empty() {
        let mut table = Table::new(&["namespace", "pod", "now"]);
        for p in &e.why.pods {
            table.row(vec![
                p.namespace.as_str().into(),
                p.name.as_str().into(),
                p.now.as_str().into(),
            ]);
        }
        out.push_str(&indent(&table.render(false), 4));
    }

    let _ = writeln!(out, "\nWhat was possible:\n  {}", e.choice.summary);
    if !e.choice.options.is_empty() {
        let mut table = Table::new(&["", "instance type", "capacity", "zone", "$/hour", "outcome"]);
        for o in &e.choice.options {
            let mark = if o.launched {
                Cell::colored("*", Some(Color::Green))
            } else {
                Cell::from("")
            };
            table.row(vec![
                mark,
                o.option.name.as_str().into(),
                o.option.capacity_type.as_str().into(),
                o.option.zone.as_str().into(),
                o.option
                    .price
                    .map_or_else(|| "unknown".to_owned(), |p| format!("${p:.4}"))
                    .into(),
                o.outcome.as_str().into(),
            ]);
        }
        out.push_str(&indent(&table.render(color), 4));
    }
    if !e.choice.allowed_instance_types.is_empty() {
        let _ = writeln!(
            out,
            "    allowed by its requirements: {}",
            e.choice.allowed_instance_types.join(", ")
        );
    }

    let _ = writeln!(out, "\nLifecycle:");
    if e.timeline.is_empty() {
        let _ = writeln!(out, "  nothing recorded");
    } else {
        let mut table = Table::new(&["age", "source", "what", "detail"]);
        for entry in &e.timeline {
            let when = entry.at.map_or_else(
                || "-".to_owned(),
                |at| human_duration(now.duration_since(at)),
            );
            let source_color = (entry.source == "Warning").then_some(Color::Red);
            table.row(vec![
                when.into(),
                Cell::colored(entry.source.as_str(), source_color),
                entry.what.as_str().into(),
                entry.detail.replace('\n', " ").into(),
            ]);
        }
        out.push_str(&indent(&table.render(color), 2));
    }

    let verdict = if e.disruption.disruptable_now {
        paint("yes", Color::Green)
    } else {
        paint("no", Color::Red)
    };
    let _ = writeln!(out, "\nCan it be disrupted now? {verdict}");
    if !e.disruption.blockers.is_empty() {
        let _ = writeln!(out, "  Blocked by:");
        for b in &e.disruption.blockers {
            let _ = writeln!(out, "    - {}", b.message);
        }
    }
    for note in &e.disruption.notes {
        let _ = writeln!(out, "  Note: {note}");
    }
    out
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn explained(name: &str) -> ClaimExplanation {
        explain::explain_node_claim(&fixtures::cluster(), name, fixtures::now())
            .expect("claim exists")
    }

    #[test]
    fn explaining_a_claim_of_ours_tells_its_pods_options_life_and_blockers() {
        insta::assert_snapshot!(render(&explained("default-abcde"), fixtures::now(), false));
    }

    #[test]
    fn explaining_a_claim_upstream_made_says_what_is_not_recorded() {
        insta::assert_snapshot!(render(&explained("general-x7k2p"), fixtures::now(), false));
    }

    #[test]
    fn explaining_a_ready_claim_upstream_made_derives_what_it_can_from_the_objects() {
        let e = explain::explain_node_claim(
            &fixtures::upstream_cluster(),
            "general-q9z8w",
            fixtures::now(),
        )
        .expect("claim exists");
        insta::assert_snapshot!(render(&e, fixtures::now(), false));
    }

    #[test]
    fn yaml_output_carries_the_same_facts() {
        let text = output::render_data(
            Format::Yaml,
            "NodeClaimExplanation",
            &explained("default-abcde"),
            fixtures::now(),
        )
        .expect("yaml");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn resources_are_named_as_kubectl_names_them() {
        let args = |resource: &str, name: Option<&str>| ExplainArgs {
            resource: resource.to_owned(),
            name: name.map(str::to_owned),
            output: None,
        };
        assert!(
            matches!(target(&args("nodeclaim", Some("a"))), Ok(Target::NodeClaim(n)) if n == "a")
        );
        assert!(
            matches!(target(&args("nodeclaims/a", None)), Ok(Target::NodeClaim(n)) if n == "a")
        );
        assert!(matches!(target(&args("node", Some("n1"))), Ok(Target::Node(n)) if n == "n1"));
        assert!(target(&args("pod", Some("x"))).is_err());
        assert!(target(&args("nodeclaim", None)).is_err());
    }
}
