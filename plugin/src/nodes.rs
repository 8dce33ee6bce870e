//! `kubectl karpenter status nodes`: every Node, from a NodePool or not, with its type, capacity
//! type, zone, price and pods, and its pods' CPU and memory requests against its allocatable (a
//! bar on a terminal, plain numbers when piped or with `NO_COLOR`), then the same summed per
//! NodePool and for the nodes outside any. The facts are `karpenter_core::explain::nodes_report`;
//! this module lists, lays out and, with `-w`, redraws in place as the cluster changes.

use crate::cluster::{Cluster, lean};
use crate::output::{self, Format, age};
use crate::status::{SortBy, StatusArgs, selected};
use crate::table::{Cell, Color, Table};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::NodeClaim;
use karpenter_core::explain::{self, ClusterObjects, NodesReport, Usage};
use karpenter_core::resources;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use std::time::Duration;

/// Pods that hold resources: everything not finished.
const LIVE_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Lists what the node view needs: the NodeClaims, the Nodes and every live pod, one request a
/// kind, concurrently, from the API server's cache.
pub(crate) async fn fetch(cluster: &Cluster, args: &StatusArgs) -> anyhow::Result<ClusterObjects> {
    let any = || ListParams::default().match_any();
    let (node_claims, nodes, pods) = tokio::try_join!(
        cluster.list_lean::<_, lean::LeanNodeClaim>(cluster.all::<NodeClaim>(), selected(args)),
        cluster.list_nodes(cluster.all::<Node>(), selected(args)),
        cluster.list_lean::<_, lean::LeanPod>(
            cluster.namespaced::<Pod>(None),
            any().fields(LIVE_PODS)
        ),
    )?;
    let list_prices = crate::prices::list_prices(
        node_claims
            .iter()
            .map(|c| &c.metadata)
            .chain(nodes.iter().map(|n| &n.metadata)),
    );
    Ok(ClusterObjects {
        node_claims,
        nodes: karpenter_core::state::CachedNode::all(nodes),
        pods,
        list_prices,
        ..ClusterObjects::default()
    })
}

/// The report, narrowed to `--nodepool` when given.
pub(crate) fn report(snapshot: &ClusterObjects, args: &StatusArgs) -> NodesReport {
    let mut report = explain::nodes_report(snapshot);
    if let Some(pool) = &args.nodepool {
        report.nodes.retain(|n| n.node_pool.as_ref() == Some(pool));
        report.groups.retain(|g| g.node_pool.as_ref() == Some(pool));
    }
    if let Some(by) = args.sort_by {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        report.nodes.sort_by(|a, b| match by {
            SortBy::Name | SortBy::Node => a.name.cmp(&b.name),
            SortBy::NodePool => text(&a.node_pool).cmp(&text(&b.node_pool)),
            SortBy::Type => text(&a.instance_type).cmp(&text(&b.instance_type)),
            SortBy::Capacity => text(&a.capacity_type).cmp(&text(&b.capacity_type)),
            SortBy::Zone => text(&a.zone).cmp(&text(&b.zone)),
            SortBy::State => b.ready.cmp(&a.ready),
            SortBy::Age => a.created_at.cmp(&b.created_at),
            SortBy::Price => {
                let price = |n: &explain::NodeRow| n.price.map(|p| p.per_hour);
                price(a)
                    .partial_cmp(&price(b))
                    .unwrap_or(std::cmp::Ordering::Equal)
            }
        });
    }
    report
}

/// Runs `status nodes`.
pub(crate) async fn run(cluster: &Cluster, args: &StatusArgs) -> anyhow::Result<()> {
    let snapshot = fetch(cluster, args).await?;
    print(&report(&snapshot, args), args, false)?;
    if args.watch {
        follow(cluster, args).await?;
    }
    Ok(())
}

/// Prints the view once; `redraw` clears the terminal first, so the view updates in place.
fn print(report: &NodesReport, args: &StatusArgs, redraw: bool) -> anyhow::Result<()> {
    let now = Timestamp::now();
    match args.output {
        Format::Json | Format::Yaml => output::print_data(args.output, "Nodes", report, now),
        Format::Name => output::print_stdout(
            &report
                .nodes
                .iter()
                .map(|n| format!("node/{}\n", n.name))
                .collect::<String>(),
        ),
        Format::Table | Format::Wide => {
            let terminal = crate::table::color_enabled();
            let text = render(
                report,
                now,
                Layout {
                    wide: args.output == Format::Wide,
                    bars: terminal,
                    headers: !args.no_headers,
                },
            );
            // Home and clear, then the view: the terminal shows one view, updated in place.
            let clear = if redraw && terminal {
                "\x1b[H\x1b[2J"
            } else {
                ""
            };
            output::print_stdout(&format!("{clear}{text}"))
        }
    }
}

/// Follows Nodes, NodeClaims and pods, and prints the view again (in place on a terminal) at
/// most once a second while anything changes, until interrupted.
async fn follow(cluster: &Cluster, args: &StatusArgs) -> anyhow::Result<()> {
    let (claims, claims_writer) = reflector::store::<NodeClaim>();
    let (nodes, nodes_writer) = reflector::store::<Node>();
    let (pods, pods_writer) = reflector::store::<Pod>();
    let claim_events = reflector(
        claims_writer,
        watcher(cluster.all::<NodeClaim>(), selected_watch(args)),
    )
    .default_backoff()
    .map(|_| ())
    .boxed();
    let node_events = reflector(
        nodes_writer,
        watcher(cluster.all::<Node>(), selected_watch(args)),
    )
    .default_backoff()
    .map(|_| ())
    .boxed();
    let pod_events = reflector(
        pods_writer,
        watcher(
            cluster.namespaced::<Pod>(None),
            watcher::Config::default().any_semantic().fields(LIVE_PODS),
        ),
    )
    .default_backoff()
    .map(|_| ())
    .boxed();
    let mut changes = futures::stream::select_all([claim_events, node_events, pod_events]);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut changed = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => break,
            change = changes.next() => {
                if change.is_none() {
                    break;
                }
                changed = true;
            }
            _ = tick.tick() => {
                if !changed {
                    continue;
                }
                changed = false;
                let snapshot = ClusterObjects {
                    node_claims: claims.state().iter().map(|c| (**c).clone()).collect(),
                    nodes: karpenter_core::state::CachedNode::all(
                        nodes.state().iter().map(|n| (**n).clone()),
                    ),
                    pods: pods.state().iter().map(|p| (**p).clone()).collect(),
                    list_prices: crate::prices::list_prices(
                        claims
                            .state()
                            .iter()
                            .map(|c| c.metadata.clone())
                            .chain(nodes.state().iter().map(|n| n.metadata.clone()))
                            .collect::<Vec<_>>()
                            .iter(),
                    ),
                    ..ClusterObjects::default()
                };
                print(&report(&snapshot, args), args, true)?;
            }
        }
    }
    Ok(())
}

/// A watch narrowed by `-l` as the lists are.
fn selected_watch(args: &StatusArgs) -> watcher::Config {
    let config = watcher::Config::default().any_semantic();
    match &args.selector {
        Some(selector) if !selector.is_empty() => config.labels(&selector.to_string()),
        _ => config,
    }
}

/// How [`render`] lays the view out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub wide: bool,
    /// Bars (a terminal) or plain numbers (piped, `NO_COLOR`).
    pub bars: bool,
    pub headers: bool,
}

/// The node table, then the totals per NodePool and for the nodes outside any.
pub(crate) fn render(report: &NodesReport, now: Timestamp, layout: Layout) -> String {
    let new_table = |columns: &[&str]| {
        let table = Table::new(columns);
        if layout.headers {
            table
        } else {
            table.without_headers()
        }
    };
    let mut columns = vec![
        "node", "nodepool", "type", "capacity", "zone", "$/hour", "pods", "cpu", "memory",
    ];
    if layout.wide {
        columns.extend(["nodeclaim", "ready", "age"]);
    }
    let mut nodes = new_table(&columns);
    for node in &report.nodes {
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let mut row: Vec<Cell> = vec![
            node.name.as_str().into(),
            dash(&node.node_pool).into(),
            dash(&node.instance_type).into(),
            dash(&node.capacity_type).into(),
            dash(&node.zone).into(),
            node.price
                .map_or_else(|| "-".to_owned(), |p| format!("${:.4}", p.per_hour))
                .into(),
            node.usage.pods.to_string().into(),
            use_of(
                resources::CPU,
                node.usage.cpu_requested,
                node.usage.cpu_allocatable,
                layout.bars,
            ),
            use_of(
                resources::MEMORY,
                node.usage.memory_requested,
                node.usage.memory_allocatable,
                layout.bars,
            ),
        ];
        if layout.wide {
            row.push(dash(&node.node_claim).into());
            row.push(Cell::colored(
                if node.ready { "True" } else { "False" },
                (!node.ready).then_some(Color::Red),
            ));
            row.push(age(node.created_at, now).into());
        }
        nodes.row(row);
    }
    let mut groups = new_table(&["nodepool", "nodes", "pods", "cpu", "memory", "$/hour"]);
    for group in &report.groups {
        let Usage {
            pods,
            cpu_requested,
            cpu_allocatable,
            memory_requested,
            memory_allocatable,
        } = group.usage;
        let mut price = format!("${:.4}", group.price_per_hour);
        if group.unpriced == group.nodes {
            price = "-".to_owned();
        } else if group.unpriced > 0 {
            price.push_str(&format!(" ({} unpriced)", group.unpriced));
        }
        groups.row(vec![
            group
                .node_pool
                .clone()
                .unwrap_or_else(|| "(no nodepool)".to_owned())
                .into(),
            group.nodes.to_string().into(),
            pods.to_string().into(),
            use_of(resources::CPU, cpu_requested, cpu_allocatable, layout.bars),
            use_of(
                resources::MEMORY,
                memory_requested,
                memory_allocatable,
                layout.bars,
            ),
            price.into(),
        ]);
    }
    if report.nodes.is_empty() {
        return if layout.headers {
            "No Nodes found.\n".to_owned()
        } else {
            String::new()
        };
    }
    [nodes.render(layout.bars), groups.render(layout.bars)].join("\n")
}

/// Requests against allocatable: `██████░░░░  62%` on a terminal, `2.5/4 (62%)` otherwise. A
/// node whose kubelet has not reported allocatable shows its requests alone.
fn use_of(resource: &str, requested: u64, allocatable: u64, bars: bool) -> Cell {
    const WIDTH: u64 = 10;
    let human = |amount| resources::human(resource, amount);
    if allocatable == 0 {
        return Cell::from(if requested == 0 {
            "-".to_owned()
        } else {
            human(requested)
        });
    }
    let percent = requested.saturating_mul(100) / allocatable;
    if !bars {
        return Cell::from(format!(
            "{}/{} ({percent}%)",
            human(requested),
            human(allocatable)
        ));
    }
    let filled = (requested.saturating_mul(WIDTH) / allocatable).min(WIDTH);
    let bar: String = std::iter::repeat_n('█', usize::try_from(filled).unwrap_or(0))
        .chain(std::iter::repeat_n(
            '░',
            usize::try_from(WIDTH - filled).unwrap_or(0),
        ))
        .collect();
    let color = match percent {
        0..=49 => Color::Green,
        50..=89 => Color::Yellow,
        _ => Color::Red,
    };
    Cell::colored(format!("{bar} {percent:>3}%"), Some(color))
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::fixtures;
    use karpenter_core::resources::ResourceList;

    /// The fixture cluster with what its kubelets would report as allocatable.
    fn cluster() -> ClusterObjects {
        let mut cluster = fixtures::cluster();
        for node in &mut cluster.nodes {
            node.allocatable = ResourceList::new()
                .with(resources::CPU, 3920)
                .with(resources::MEMORY, 15 << 30)
                .into();
        }
        cluster
    }

    #[test]
    fn piped_the_node_view_shows_requests_against_allocatable_as_numbers() {
        let report = explain::nodes_report(&cluster());
        insta::assert_snapshot!(render(
            &report,
            fixtures::now(),
            Layout {
                wide: false,
                bars: false,
                headers: true
            }
        ));
    }

    #[test]
    fn on_a_terminal_the_node_view_draws_bars() {
        let report = explain::nodes_report(&cluster());
        insta::assert_snapshot!(render(
            &report,
            fixtures::now(),
            Layout {
                wide: true,
                bars: true,
                headers: true
            }
        ));
    }
}
