//! `kubectl karpenter status`: NodePools against their limits, NodeClaims with their state and
//! price, pending pods with the reason each waits, and what it all costs. At most one list request
//! per kind, made concurrently; the facts come from `karpenter_core::explain`.

use crate::cluster::{Cluster, lean};
use crate::output::{self, Format, age};
use crate::table::{Cell, Color, Table, truncate};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::{LabelSelector, NodeClaim, NodePool};
use karpenter_core::explain::{
    self, ClaimPhase, ClaimState, ClaimSummary, LimitUsage, StatusOptions, StatusReport,
};
use karpenter_core::resources;
use kube::api::ListParams;

/// Flags of `status`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  kubectl karpenter status\n  kubectl karpenter status -o wide --nodepool default\n  kubectl karpenter status nodes -w\n  kubectl karpenter status -l karpenter.sh/capacity-type=spot --sort-by '$/hour'\n  kubectl karpenter status -w -o json\n  kubectl karpenter status -o name --no-headers | xargs kubectl describe"
)]
pub(crate) struct StatusArgs {
    /// `nodes` for the node view: every Node, from a NodePool or not, with its pods' CPU and
    /// memory requests against its allocatable, summed per NodePool and for the nodes outside
    /// any.
    #[arg(value_enum, value_name = "VIEW")]
    pub view: Option<View>,
    /// Output format: table (default), wide, json, yaml, or name (the NodeClaims as
    /// nodeclaim.karpenter.sh/NAME, one a line).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Only this NodePool (pools and claims; pending pods and totals stay cluster-wide).
    #[arg(long, value_name = "NAME")]
    pub nodepool: Option<String>,
    /// After printing, follow NodeClaims as they launch and register (progress on stderr, one
    /// line per change on stdout) until interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Only pending pods in this namespace.
    #[arg(
        short = 'n',
        long,
        value_name = "NAMESPACE",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Pending pods in all namespaces (the default).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only the NodeClaims and Nodes whose labels match, as `kubectl get -l` (a claim carries its
    /// node's labels: karpenter.sh/nodepool, karpenter.sh/capacity-type,
    /// node.kubernetes.io/instance-type, topology.kubernetes.io/zone, ...).
    #[arg(short = 'l', long, value_name = "SELECTOR", value_parser = parse_selector)]
    pub selector: Option<LabelSelector>,
    /// Print the tables' rows without their header lines, and without the totals line.
    #[arg(long)]
    pub no_headers: bool,
    /// Sort the NodeClaims by a column of their table (and the pools and pending pods too, where
    /// their tables have it): nodeclaim, nodepool, type, capacity, zone, state, node, age or
    /// $/hour (also .metadata.name and .metadata.creationTimestamp).
    #[arg(long, value_name = "COLUMN", value_parser = parse_sort_by)]
    pub sort_by: Option<SortBy>,
}

/// What `status` shows instead of its default screen.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum View {
    /// Every Node with its requests against allocatable.
    Nodes,
}

/// A column `--sort-by` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SortBy {
    Name,
    NodePool,
    Type,
    Capacity,
    Zone,
    State,
    Node,
    Age,
    Price,
}

fn parse_selector(text: &str) -> Result<LabelSelector, String> {
    text.parse()
        .map_err(|e: karpenter_core::apis::SelectorError| e.to_string())
}

/// A column by its header (any case), or by the JSONPath kubectl users sort with.
fn parse_sort_by(text: &str) -> Result<SortBy, String> {
    let key = text
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .to_ascii_lowercase();
    Ok(match key.as_str() {
        "nodeclaim" | "name" | ".metadata.name" => SortBy::Name,
        "nodepool" => SortBy::NodePool,
        "type" | "instance-type" => SortBy::Type,
        "capacity" | "capacity-type" => SortBy::Capacity,
        "zone" => SortBy::Zone,
        "state" => SortBy::State,
        "node" => SortBy::Node,
        "age" | ".metadata.creationtimestamp" => SortBy::Age,
        "$/hour" | "price" => SortBy::Price,
        _ => {
            return Err(
                "not a column; sort by one of nodeclaim, nodepool, type, capacity, zone, state, \
                 node, age, $/hour (or .metadata.name, .metadata.creationTimestamp)"
                    .to_owned(),
            );
        }
    })
}

/// Pending pods shown in the table before the rest are summarised (all with `-o wide`).
const PENDING_ROWS: usize = 20;

/// Lists what `status` needs: at most one request per kind, concurrently (Events, when needed,
/// once the pods and claims they would explain are in).
///
/// Every list asks for `resourceVersion=0` ("any version"): the API server answers from its watch
/// cache instead of first confirming the newest revision with etcd (a quorum read), and for a
/// resource it does not cache (Events) etcd may answer from any member. The answer can be a
/// moment old; for a screen a person reads once, or the first screen of `-w`, that is the right
/// trade, and on a busy cluster it is the difference between waiting on etcd and not.
///
/// Nodes, NodeClaims and Pods decode into lean shapes ([`crate::cluster::lean`]): on 1,000 nodes
/// the Node list is ~4 MB of JSON, half of it `managedFields`, which `status` never reads.
pub(crate) async fn fetch(
    cluster: &Cluster,
    args: &StatusArgs,
) -> anyhow::Result<explain::ClusterObjects> {
    let wide = args.output == Format::Wide;
    // Without -o wide only unbound pods matter: the API server filters the rest out (from an
    // index on spec.nodeName in its cache), so a cluster of 10,000 running pods costs nothing.
    let pod_fields = if wide {
        "status.phase!=Succeeded,status.phase!=Failed"
    } else {
        "spec.nodeName="
    };
    let pod_scope = if wide {
        None
    } else {
        args.namespace.as_deref()
    };
    let any = || ListParams::default().match_any();
    let pools = cluster.all::<NodePool>();
    let claims = cluster.all::<NodeClaim>();
    let nodes = cluster.all::<Node>();
    let pods = cluster.namespaced::<Pod>(pod_scope);
    // Events are the one kind the API server does not cache: every list of them reads etcd, all
    // of a namespace's events (or all of the cluster's) before the field selector filters; on a
    // loaded rig of 20,000 pods that took 9-16 s. So they are listed only once the pods and
    // claims show a pending pod whose reason an Event could give (most waiting pods have a claim
    // coming up for them), and only in its namespace when all such pods share one.
    let claims_pods_and_events = async {
        let (node_claims, pods): (Vec<NodeClaim>, Vec<Pod>) = tokio::try_join!(
            cluster.list_lean::<_, lean::LeanNodeClaim>(claims, selected(args)),
            cluster.list_lean::<_, lean::LeanPod>(pods, any().fields(pod_fields)),
        )?;
        let mut waiting = explain::namespaces_an_event_could_explain(&pods, &node_claims);
        // With -o wide the pods of every namespace are listed, but -n still picks the ones shown.
        if let Some(ns) = args.namespace.as_deref() {
            waiting.retain(|w| *w == ns);
        }
        let scope = match (args.namespace.as_deref(), waiting.len()) {
            (_, 0) => return anyhow::Ok((node_claims, pods, Vec::new())),
            (Some(ns), _) => Some(ns),
            (None, 1) => waiting.first().copied(),
            (None, _) => None,
        };
        let events = cluster
            .list(
                cluster.namespaced::<Event>(scope),
                any().fields(&format!("reason={}", explain::FAILED_SCHEDULING)),
            )
            .await?;
        Ok((node_claims, pods, events))
    };
    let (node_pools, nodes, (node_claims, pods, events)) = tokio::try_join!(
        cluster.list(pools, any()),
        cluster.list_nodes(nodes, selected(args)),
        claims_pods_and_events,
    )?;
    let list_prices = crate::prices::list_prices(
        node_claims
            .iter()
            .map(|c| &c.metadata)
            .chain(nodes.iter().map(|n| &n.metadata)),
    );
    Ok(explain::ClusterObjects {
        node_pools,
        node_claims,
        nodes: karpenter_core::state::CachedNode::all(nodes),
        pods,
        events,
        pod_disruption_budgets: Vec::new(),
        list_prices,
    })
}

/// How the NodeClaims and Nodes are listed: all of them, or those `-l` selects (the API server
/// filters). Nodes are selected too, as they carry their claims' labels: otherwise the nodes of
/// the claims left out would count as nodes outside any NodePool.
pub(crate) fn selected(args: &StatusArgs) -> ListParams {
    let params = ListParams::default().match_any();
    match &args.selector {
        Some(selector) if !selector.is_empty() => params.labels(&selector.to_string()),
        _ => params,
    }
}

/// Orders the report's tables by `by`, ties kept in name order.
fn sort(report: &mut StatusReport, by: SortBy) {
    use std::cmp::Ordering;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    report.node_claims.sort_by(|a, b| match by {
        SortBy::Name => a.name.cmp(&b.name),
        SortBy::NodePool => text(&a.node_pool).cmp(&text(&b.node_pool)),
        SortBy::Type => text(&a.instance_type).cmp(&text(&b.instance_type)),
        SortBy::Capacity => text(&a.capacity_type).cmp(&text(&b.capacity_type)),
        SortBy::Zone => text(&a.zone).cmp(&text(&b.zone)),
        SortBy::State => a.state.to_string().cmp(&b.state.to_string()),
        SortBy::Node => text(&a.node_name).cmp(&text(&b.node_name)),
        SortBy::Age => a.created_at.cmp(&b.created_at),
        SortBy::Price => {
            let price = |c: &ClaimSummary| c.price.map(|p| p.per_hour);
            price(a).partial_cmp(&price(b)).unwrap_or(Ordering::Equal)
        }
    });
    match by {
        SortBy::Age => {
            report.node_pools.sort_by_key(|p| p.created_at);
            report.pending_pods.sort_by_key(|p| p.created_at);
        }
        SortBy::Price => report.node_pools.sort_by(|a, b| {
            a.price_per_hour
                .partial_cmp(&b.price_per_hour)
                .unwrap_or(Ordering::Equal)
        }),
        SortBy::Name => {
            report.node_pools.sort_by(|a, b| a.name.cmp(&b.name));
            report
                .pending_pods
                .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        }
        _ => {}
    }
}

/// Builds the report from what [`fetch`] listed, judging expiry at `now`.
pub(crate) fn report(
    snapshot: &explain::ClusterObjects,
    args: &StatusArgs,
    now: Timestamp,
) -> StatusReport {
    let options = StatusOptions {
        node_pool: args.nodepool.clone(),
        all_pods_listed: args.output == Format::Wide,
        now: Some(now),
    };
    let mut report = explain::status_report(snapshot, &options);
    if let Some(ns) = &args.namespace {
        report.pending_pods.retain(|p| &p.namespace == ns);
        report.totals.pending_pods = report.pending_pods.len();
    }
    if let Some(by) = args.sort_by {
        sort(&mut report, by);
    }
    report
}

/// Runs `status`.
pub(crate) async fn run(cluster: &Cluster, args: &StatusArgs) -> anyhow::Result<()> {
    let snapshot = fetch(cluster, args).await?;
    let now = Timestamp::now();
    let report = report(&snapshot, args, now);
    if let Some(pool) = &args.nodepool
        && report.node_pools.is_empty()
    {
        let mut names: Vec<String> = snapshot
            .node_pools
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        anyhow::bail!(
            "nodepool {pool:?} not found; nodepools that exist: {}",
            output::name_list(&names)
        );
    }
    match args.output {
        Format::Json | Format::Yaml => output::print_data(args.output, "Status", &report, now)?,
        Format::Name => output::print_stdout(&names(&report))?,
        Format::Table | Format::Wide => {
            if report.node_pools.is_empty() && report.node_claims.is_empty() {
                eprintln!("No NodePools or NodeClaims found.");
            }
            output::print_stdout(&render_with(
                &report,
                now,
                Layout {
                    wide: args.output == Format::Wide,
                    color: crate::table::color_enabled(),
                    headers: !args.no_headers,
                },
            ))?;
        }
    }
    if args.watch {
        crate::watch::run(cluster, &snapshot, args).await?;
    }
    Ok(())
}

/// `-o name`: the NodeClaims shown, one `nodeclaim.karpenter.sh/NAME` a line.
pub(crate) fn names(report: &StatusReport) -> String {
    report
        .node_claims
        .iter()
        .map(|c| output::node_claim_name(&c.name) + "\n")
        .collect()
}

fn state_color(state: &ClaimState) -> Option<Color> {
    match state.phase {
        ClaimPhase::Ready if !state.drifted => Some(Color::Green),
        ClaimPhase::NotReady | ClaimPhase::Terminating => Some(Color::Red),
        _ if state.detail.is_some() => Some(Color::Red),
        _ => Some(Color::Yellow),
    }
}

fn money(price: f64) -> String {
    format!("${price:.4}")
}

fn usage(resource: &str, usage: &LimitUsage) -> String {
    let used = resources::human(resource, usage.used_amount);
    match usage.limit_amount {
        Some(0) => format!("{used}/0"),
        Some(limit) => {
            let pct = usage.used_amount.saturating_mul(100) / limit;
            format!("{used}/{} ({pct}%)", resources::human(resource, limit))
        }
        None => used,
    }
}

/// One NodeClaim as a table row; shared with `--watch`, which prints a row per change.
pub(crate) fn claim_row(claim: &ClaimSummary, now: Timestamp, wide: bool) -> Vec<Cell> {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    let mut row = vec![Cell::from(claim.name.as_str())];
    if wide {
        row.push(dash(&claim.node_pool).into());
    }
    row.extend([
        dash(&claim.instance_type).into(),
        dash(&claim.capacity_type).into(),
        dash(&claim.zone).into(),
        Cell::colored(claim.state.to_string(), state_color(&claim.state)),
        dash(&claim.node_name).into(),
        age(claim.created_at, now).into(),
        match (claim.price, &claim.instance_type) {
            (Some(p), _) => money(p.per_hour),
            // Launched as a type no price table lists: it runs, at a price nobody told us.
            (None, Some(_)) => "unknown".to_owned(),
            (None, None) => "-".to_owned(),
        }
        .into(),
    ]);
    if wide {
        let capacity = match (
            claim.capacity.get(resources::CPU),
            claim.capacity.get(resources::MEMORY),
        ) {
            (Some(cpu), Some(memory)) => format!("{cpu}/{memory}"),
            _ => "-".to_owned(),
        };
        row.push(capacity.into());
        let pods = claim
            .usage
            .as_ref()
            .map_or_else(|| "-".to_owned(), |u| u.pods.to_string());
        row.push(pods.into());
        row.push(dash(&claim.provider_id).into());
    }
    row
}

/// The claims table's headers.
pub(crate) fn claim_headers(wide: bool) -> Vec<&'static str> {
    if wide {
        vec![
            "nodeclaim",
            "nodepool",
            "type",
            "capacity",
            "zone",
            "state",
            "node",
            "age",
            "$/hour",
            "cpu/memory",
            "pods",
            "provider id",
        ]
    } else {
        vec![
            "nodeclaim",
            "type",
            "capacity",
            "zone",
            "state",
            "node",
            "age",
            "$/hour",
        ]
    }
}

/// How [`render_with`] lays the tables out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub wide: bool,
    pub color: bool,
    /// Header lines and the totals line; off with `--no-headers`.
    pub headers: bool,
}

/// [`render_with`] with headers, as the snapshot tests render it.
#[cfg(test)]
pub(crate) fn render(report: &StatusReport, now: Timestamp, wide: bool, color: bool) -> String {
    render_with(
        report,
        now,
        Layout {
            wide,
            color,
            headers: true,
        },
    )
}

/// Renders the report as kubectl-style tables, one section per kind, then the totals.
pub(crate) fn render_with(report: &StatusReport, now: Timestamp, layout: Layout) -> String {
    let Layout {
        wide,
        color,
        headers,
    } = layout;
    let new_table = |columns: &[&str]| {
        let table = Table::new(columns);
        if headers {
            table
        } else {
            table.without_headers()
        }
    };
    let mut sections: Vec<String> = Vec::new();

    if !report.node_pools.is_empty() {
        let mut table = new_table(&["nodepool", "nodes", "cpu", "memory", "$/hour", "age"]);
        for pool in &report.node_pools {
            let mut nodes = match pool.node_limit {
                Some(limit) => format!("{}/{limit}", pool.nodes),
                None => pool.nodes.to_string(),
            };
            if let Some(replicas) = pool.replicas {
                nodes.push_str(&format!(" (static: {replicas})"));
            }
            let price = if pool.nodes > 0 && pool.unpriced == pool.nodes {
                "-".to_owned()
            } else {
                money(pool.price_per_hour)
            };
            table.row(vec![
                pool.name.as_str().into(),
                nodes.into(),
                usage(resources::CPU, &pool.cpu).into(),
                usage(resources::MEMORY, &pool.memory).into(),
                price.into(),
                age(pool.created_at, now).into(),
            ]);
        }
        let mut text = table.render(color);
        for pool in report.node_pools.iter().filter(|_| headers) {
            if let Some(why) = &pool.not_ready {
                text.push_str(&format!(
                    "NodePool {} is not ready and launches nothing: {why}\n",
                    pool.name
                ));
            }
        }
        sections.push(text);
    }

    if !report.node_claims.is_empty() {
        let mut table = new_table(&claim_headers(wide));
        for claim in &report.node_claims {
            table.row(claim_row(claim, now, wide));
        }
        sections.push(table.render(color));
    }

    if !report.pending_pods.is_empty() {
        let mut table = new_table(&["namespace", "pending pod", "age", "reason", "message"]);
        let shown = if wide {
            report.pending_pods.len()
        } else {
            PENDING_ROWS.min(report.pending_pods.len())
        };
        for pod in &report.pending_pods[..shown] {
            let reason_color = match pod.reason.as_str() {
                "WaitingForNodeClaim" => Some(Color::Yellow),
                _ => Some(Color::Red),
            };
            let message = if wide {
                pod.message.replace('\n', " ")
            } else {
                truncate(&pod.message, 100)
            };
            table.row(vec![
                pod.namespace.as_str().into(),
                pod.name.as_str().into(),
                age(pod.created_at, now).into(),
                Cell::colored(pod.reason.as_str(), reason_color),
                message.into(),
            ]);
        }
        let mut text = table.render(color);
        if headers && shown < report.pending_pods.len() {
            text.push_str(&format!(
                "... and {} more pending pods (-o wide or -o json shows all)\n",
                report.pending_pods.len() - shown
            ));
        }
        sections.push(text);
    }

    if !headers {
        return sections.join("\n");
    }
    let t = &report.totals;
    let mut total = format!(
        "TOTAL   {} {}, {} {}",
        t.node_claims,
        plural(t.node_claims, "nodeclaim", "nodeclaims"),
        t.nodes,
        plural(t.nodes, "node", "nodes"),
    );
    if t.other_nodes > 0 {
        total.push_str(&format!(" ({} not from a NodePool)", t.other_nodes));
    }
    total.push_str(&format!(
        ", {} pending {}   {}/hour   {}/month",
        t.pending_pods,
        plural(t.pending_pods, "pod", "pods"),
        money(t.price_per_hour),
        format_args!("${:.2}", t.price_per_month),
    ));
    if t.unpriced > 0 {
        total.push_str(&format!("   ({} without a known price)", t.unpriced));
    }
    total.push('\n');
    sections.push(total);
    sections.join("\n")
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn args(output: Format) -> StatusArgs {
        StatusArgs {
            output,
            nodepool: None,
            watch: false,
            namespace: None,
            all_namespaces: false,
            view: None,
            selector: None,
            no_headers: false,
            sort_by: None,
        }
    }

    #[test]
    fn the_status_screen_shows_pools_claims_pending_pods_and_costs() {
        let report = report(&fixtures::cluster(), &args(Format::Table), fixtures::now());
        insta::assert_snapshot!(render(&report, fixtures::now(), false, false));
    }

    #[test]
    fn the_wide_status_adds_pool_capacity_pods_and_provider_ids() {
        let report = report(&fixtures::cluster(), &args(Format::Wide), fixtures::now());
        insta::assert_snapshot!(render(&report, fixtures::now(), true, false));
    }

    #[test]
    fn json_output_carries_the_same_facts_as_the_table() {
        let report = report(&fixtures::cluster(), &args(Format::Json), fixtures::now());
        let text =
            output::render_data(Format::Json, "Status", &report, fixtures::now()).expect("json");
        insta::assert_snapshot!(text);
    }

    /// The fixture's `general` pool, to change.
    fn general_pool(cluster: &mut karpenter_core::explain::ClusterObjects) -> &mut NodePool {
        cluster
            .node_pools
            .iter_mut()
            .find(|p| p.metadata.name.as_deref() == Some("general"))
            .expect("the general pool")
    }

    #[test]
    fn a_static_pool_shows_its_replicas_beside_its_nodes() {
        let mut cluster = fixtures::cluster();
        general_pool(&mut cluster).spec.replicas = Some(3);
        let report = report(&cluster, &args(Format::Table), fixtures::now());
        let screen = render(&report, fixtures::now(), false, false);
        let line = screen
            .lines()
            .find(|l| l.starts_with("general"))
            .expect("a row for general");
        assert!(line.contains("1 (static: 3)"), "{line}");
    }

    #[test]
    fn a_pool_whose_node_class_is_not_ready_says_why_under_the_pools() {
        let mut cluster = fixtures::cluster();
        general_pool(&mut cluster).status = Some(
            serde_json::from_value(serde_json::json!({"conditions": [{
                "type": "Ready", "status": "False", "reason": "NodeClassNotReady",
                "message": "karpenter.k8s.aws/EC2NodeClass default: no subnet matches",
                "lastTransitionTime": "2026-03-02T09:00:00Z"}]}))
            .expect("a status"),
        );
        let report = report(&cluster, &args(Format::Table), fixtures::now());
        let screen = render(&report, fixtures::now(), false, false);
        assert!(
            screen.contains(
                "NodePool general is not ready and launches nothing: karpenter.k8s.aws/EC2NodeClass default: no subnet matches"
            ),
            "{screen}"
        );
    }

    #[test]
    fn the_status_of_a_cluster_upstream_karpenter_runs() {
        let report = report(
            &fixtures::upstream_cluster(),
            &args(Format::Table),
            fixtures::now(),
        );
        insta::assert_snapshot!(render(&report, fixtures::now(), false, false));
    }

    #[test]
    fn name_output_lists_the_claims_as_kubectl_names_them() {
        let report = report(&fixtures::cluster(), &args(Format::Name), fixtures::now());
        let text = names(&report);
        assert!(!text.is_empty());
        assert!(
            text.lines()
                .all(|l| l.starts_with("nodeclaim.karpenter.sh/")),
            "{text}"
        );
        assert_eq!(text.lines().count(), report.node_claims.len());
    }

    #[test]
    fn a_namespace_flag_keeps_only_that_namespaces_pending_pods() {
        let mut a = args(Format::Table);
        a.namespace = Some("batch".to_owned());
        let report = report(&fixtures::cluster(), &a, fixtures::now());
        assert!(report.pending_pods.iter().all(|p| p.namespace == "batch"));
        assert_eq!(report.totals.pending_pods, 2);
    }

    #[test]
    fn colour_marks_states_but_never_moves_a_column() {
        let report = report(&fixtures::cluster(), &args(Format::Table), fixtures::now());
        let plain = render(&report, fixtures::now(), false, false);
        let colored = render(&report, fixtures::now(), false, true);
        assert!(colored.contains("\x1b[32mReady\x1b[0m"));
        let stripped = colored
            .replace("\x1b[32m", "")
            .replace("\x1b[33m", "")
            .replace("\x1b[31m", "")
            .replace("\x1b[0m", "");
        assert_eq!(stripped, plain);
    }
}
