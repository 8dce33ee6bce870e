//! `status --watch`: follows NodeClaims, and the Nodes behind them, after the first screen. Each
//! claim still coming up gets a progress bar on stderr (Launched → Registered → Initialized), over
//! a summary bar with the pending pod count; stdout gets one NodeClaim row per change, as
//! `kubectl get -w` does (a name line with `-o name`, a `NodeClaimChange` document with
//! `-o json|yaml`: the change's type, ADDED, MODIFIED or DELETED, and the claim as `status -o json`
//! shows it). A Node that becomes Ready, stops being
//! Ready or is deleted changes its claim's row too. Runs until interrupted.
//!
//! [`Follow`] holds what is known and decides which rows changed; `run` feeds it the watch
//! events and draws.

use crate::cluster::Cluster;
use crate::output::{Format, node_claim_name};
use crate::prices::Labelled;
use crate::status::{StatusArgs, claim_headers, claim_row};
use crate::table::{Table, render_row};
use futures::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::{LabelSelector, NodeClaim, labels};
use karpenter_core::explain::{self, ClaimPhase, ClaimSummary};
use karpenter_core::interner::Interner;
use karpenter_core::state::CachedNode;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// One watch event of any kind, boxed where objects are large.
enum Change {
    Claim(Event<NodeClaim>),
    Node(Event<Node>),
    Pod(PodChange),
}

/// A watch event reduced to what the watch acts on.
enum Event<K> {
    Seen(Box<K>),
    Gone(Box<K>),
    Init,
    InitDone,
    Failed(watcher::Error),
}

impl<K> Event<K> {
    fn from(event: Result<watcher::Event<K>, watcher::Error>) -> Self {
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Self::Seen(Box::new(o)),
            Ok(watcher::Event::Delete(o)) => Self::Gone(Box::new(o)),
            Ok(watcher::Event::Init) => Self::Init,
            Ok(watcher::Event::InitDone) => Self::InitDone,
            Err(e) => Self::Failed(e),
        }
    }
}

/// What the watch needs of a pod event: whether it waits for a node.
enum PodChange {
    Seen { uid: String, pending: bool },
    Gone(String),
    Init,
    InitDone,
    Failed(watcher::Error),
}

impl PodChange {
    fn from(event: Result<watcher::Event<Pod>, watcher::Error>) -> Self {
        let uid = |pod: &Pod| pod.metadata.uid.clone().unwrap_or_default();
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => Self::Seen {
                uid: uid(&pod),
                pending: explain::is_pending(&pod),
            },
            Ok(watcher::Event::Delete(pod)) => Self::Gone(uid(&pod)),
            Ok(watcher::Event::Init) => Self::Init,
            Ok(watcher::Event::InitDone) => Self::InitDone,
            Err(e) => Self::Failed(e),
        }
    }
}

/// What a row shows that can change; a new row prints when it does.
fn row_key(s: &ClaimSummary) -> (String, Option<String>, Option<String>) {
    (
        s.state.to_string(),
        s.node_name.clone(),
        s.instance_type.clone(),
    )
}

/// The claims (of the pool asked about), every Node, and the row last shown for each claim.
struct Follow {
    node_pool: Option<String>,
    /// `-l`: the claims the first screen listed, and the only ones the watch is sent.
    selector: Option<LabelSelector>,
    claims: BTreeMap<String, NodeClaim>,
    nodes: HashMap<String, CachedNode>,
    node_by_provider_id: HashMap<String, String>,
    shown: BTreeMap<String, ClaimSummary>,
    /// The Nodes' shared label and condition strings: the watch holds every Node for as long
    /// as it runs.
    strings: Interner,
}

impl Follow {
    /// Starts from the first screen's objects, whose rows were just printed.
    fn new(
        snapshot: &explain::ClusterObjects,
        node_pool: Option<String>,
        selector: Option<LabelSelector>,
    ) -> Self {
        let mut follow = Self {
            node_pool,
            selector,
            claims: BTreeMap::new(),
            nodes: HashMap::new(),
            node_by_provider_id: HashMap::new(),
            shown: BTreeMap::new(),
            strings: Interner::default(),
        };
        for node in &snapshot.nodes {
            follow.put_node(node.clone());
        }
        for claim in &snapshot.node_claims {
            if follow.wanted(claim) {
                let name = claim.metadata.name.clone().unwrap_or_default();
                follow.claims.insert(name.clone(), claim.clone());
                let summary = follow.summarize(&name);
                if let Some(s) = summary {
                    follow.shown.insert(name, s);
                }
            }
        }
        follow
    }

    fn wanted(&self, claim: &NodeClaim) -> bool {
        let pool = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODE_POOL));
        let selected = self.selector.as_ref().is_none_or(|selector| {
            selector.matches(claim.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
        });
        selected
            && self
                .node_pool
                .as_ref()
                .is_none_or(|wanted| pool == Some(wanted))
    }

    /// What the watch keeps of a Node it was sent.
    fn cached(&mut self, node: Node) -> CachedNode {
        CachedNode::new(node, &mut self.strings)
    }

    fn put_node(&mut self, node: CachedNode) {
        let name = node.name.clone();
        if let Some(id) = node.provider_id.clone() {
            self.node_by_provider_id.insert(id, name.clone());
        }
        self.nodes.insert(name, node);
    }

    /// The claim's Node: by provider id, else by `status.nodeName`.
    fn node_of(&self, claim: &NodeClaim) -> Option<&CachedNode> {
        let status = claim.status.as_ref()?;
        status
            .provider_id
            .as_deref()
            .and_then(|id| self.node_by_provider_id.get(id))
            .and_then(|name| self.nodes.get(name))
            .or_else(|| status.node_name.as_deref().and_then(|n| self.nodes.get(n)))
    }

    fn summarize(&self, name: &str) -> Option<ClaimSummary> {
        let claim = self.claims.get(name)?;
        let node = self.node_of(claim);
        let list = crate::prices::list_prices(
            std::iter::once(&claim.metadata as &dyn Labelled)
                .chain(node.map(|n| n as &dyn Labelled)),
        );
        Some(explain::claim_summary(claim, node, &list))
    }

    /// Re-reads a claim's row; returns it when it differs from the one shown.
    fn refresh(&mut self, name: &str) -> Option<ClaimSummary> {
        let summary = self.summarize(name)?;
        let changed = self
            .shown
            .get(name)
            .is_none_or(|old| row_key(old) != row_key(&summary));
        self.shown.insert(name.to_owned(), summary.clone());
        changed.then_some(summary)
    }

    /// A claim was created or changed.
    fn claim_seen(&mut self, claim: NodeClaim) -> Option<ClaimSummary> {
        if !self.wanted(&claim) {
            return None;
        }
        let name = claim.metadata.name.clone().unwrap_or_default();
        self.claims.insert(name.clone(), claim);
        self.refresh(&name)
    }

    /// A claim was deleted: its last row, when it was shown.
    fn claim_gone(&mut self, name: &str) -> Option<ClaimSummary> {
        let claim = self.claims.remove(name);
        let last = self.shown.remove(name);
        match (claim, last) {
            (Some(claim), _) => {
                let node = self.node_of(&claim);
                let list = crate::prices::list_prices(
                    std::iter::once(&claim.metadata as &dyn Labelled)
                        .chain(node.map(|n| n as &dyn Labelled)),
                );
                Some(explain::claim_summary(&claim, node, &list))
            }
            (None, last) => last,
        }
    }

    /// Names of the claims whose row reads `node`.
    fn claims_on(&self, node: &CachedNode) -> Vec<String> {
        let name = Some(node.name.as_str());
        let id = node.provider_id.as_deref();
        self.claims
            .iter()
            .filter(|(_, c)| {
                let status = c.status.as_ref();
                (id.is_some() && status.and_then(|s| s.provider_id.as_deref()) == id)
                    || (name.is_some() && status.and_then(|s| s.node_name.as_deref()) == name)
            })
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// A Node was created or changed: the rows of its claims that changed with it.
    fn node_seen(&mut self, node: CachedNode) -> Vec<ClaimSummary> {
        let affected = self.claims_on(&node);
        self.put_node(node);
        affected.iter().filter_map(|c| self.refresh(c)).collect()
    }

    /// A Node was deleted: the rows of its claims that changed with it.
    fn node_gone(&mut self, name: &str) -> Vec<ClaimSummary> {
        let Some(node) = self.nodes.remove(name) else {
            return Vec::new();
        };
        if let Some(id) = node.provider_id.as_deref()
            && self.node_by_provider_id.get(id).map(String::as_str) == Some(name)
        {
            self.node_by_provider_id.remove(id);
        }
        self.claims_on(&node)
            .iter()
            .filter_map(|c| self.refresh(c))
            .collect()
    }

    fn ready(&self) -> usize {
        self.shown
            .values()
            .filter(|s| s.state.phase == ClaimPhase::Ready)
            .count()
    }
}

fn coming_up(phase: ClaimPhase) -> bool {
    matches!(
        phase,
        ClaimPhase::Pending
            | ClaimPhase::Launching
            | ClaimPhase::Registering
            | ClaimPhase::Initializing
    )
}

/// The progress bars on stderr and the rows on stdout.
struct Screen {
    progress: MultiProgress,
    style: ProgressStyle,
    bars: BTreeMap<String, ProgressBar>,
    widths: Vec<usize>,
    format: Format,
}

impl Screen {
    fn print(&self, line: String) {
        let _ = self
            .progress
            .suspend(|| crate::output::print_stdout(&format!("{line}\n")));
    }

    /// Shows a claim's new row, and moves or ends its bar. `change` is `ADDED` for a claim not
    /// shown before, else `MODIFIED`.
    fn show(&mut self, change: &str, s: &ClaimSummary, now: Timestamp) {
        let state = s.state.to_string();
        if coming_up(s.state.phase) {
            let bar = self.bars.entry(s.name.clone()).or_insert_with(|| {
                let bar = self.progress.add(
                    ProgressBar::new(3)
                        .with_style(self.style.clone())
                        .with_prefix(s.name.clone()),
                );
                bar.enable_steady_tick(Duration::from_millis(200));
                bar
            });
            bar.set_position(s.state.phase.steps_done());
            let what = s.instance_type.clone().unwrap_or_default();
            bar.set_message(format!(
                "{state} {what} {}",
                crate::output::age(s.created_at, now)
            ));
        } else if let Some(bar) = self.bars.remove(&s.name) {
            bar.set_position(3);
            bar.finish_with_message(format!(
                "{state} after {}",
                crate::output::age(s.created_at, now)
            ));
        }
        match self.format {
            Format::Table | Format::Wide => self.print(render_row(
                &claim_row(s, now, self.format == Format::Wide),
                &self.widths,
                false,
            )),
            Format::Name => self.print(node_claim_name(&s.name)),
            Format::Json | Format::Yaml => self.document(change, s, now),
        }
    }

    /// One document a change, as `kubectl get -w -o json|yaml --output-watch-events` prints
    /// them: the change's type and the claim's row as `status -o json` shows it.
    fn document(&self, change: &str, s: &ClaimSummary, now: Timestamp) {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Change<'a> {
            #[serde(rename = "type")]
            type_: &'a str,
            node_claim: &'a ClaimSummary,
        }
        let change = Change {
            type_: change,
            node_claim: s,
        };
        match crate::output::render_data(self.format, "NodeClaimChange", &change, now) {
            Ok(text) => {
                let text = if self.format == Format::Yaml {
                    format!("---\n{text}")
                } else {
                    text
                };
                self.print(text.trim_end().to_owned());
            }
            Err(e) => eprintln!("error: {e}"),
        }
    }

    /// Shows that a claim is gone.
    fn deleted(&mut self, mut s: ClaimSummary, now: Timestamp) {
        if let Some(bar) = self.bars.remove(&s.name) {
            bar.abandon_with_message("deleted");
        }
        match self.format {
            Format::Table | Format::Wide => {
                s.state.phase = ClaimPhase::Terminating;
                let mut row = claim_row(&s, now, self.format == Format::Wide);
                if let Some(cell) = row.iter_mut().find(|c| c.text.starts_with("Terminating")) {
                    cell.text = "Deleted".to_owned();
                }
                self.print(render_row(&row, &self.widths, false));
            }
            Format::Name => self.print(node_claim_name(&s.name)),
            Format::Json | Format::Yaml => self.document("DELETED", &s, now),
        }
    }
}

/// Follows NodeClaims and Nodes until interrupted.
pub(crate) async fn run(
    cluster: &Cluster,
    snapshot: &explain::ClusterObjects,
    args: &StatusArgs,
) -> anyhow::Result<()> {
    let wide = args.output == Format::Wide;
    let progress = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} {prefix:<32} [{bar:12}] {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let summary = progress.add(ProgressBar::new_spinner());
    summary.enable_steady_tick(Duration::from_millis(200));
    // Column widths for the rows: the header's, widened for typical values.
    let widths: Vec<usize> = Table::new(&claim_headers(wide))
        .widths()
        .into_iter()
        .map(|w| w.max(12))
        .collect();
    let mut screen = Screen {
        progress,
        style,
        bars: BTreeMap::new(),
        widths,
        format: args.output,
    };

    // The watches re-list first (from the API server's cache: resourceVersion=0, as `status`
    // lists); what the first screen already showed prints again only if it changed since.
    let config = || watcher::Config::default().any_semantic();
    let claim_config = match &args.selector {
        Some(selector) if !selector.is_empty() => config().labels(&selector.to_string()),
        _ => config(),
    };
    let claims = watcher(cluster.all::<NodeClaim>(), claim_config)
        .default_backoff()
        .map(|e| Change::Claim(Event::from(e)))
        .boxed();
    let nodes = watcher(cluster.all::<Node>(), config())
        .default_backoff()
        .map(|e| Change::Node(Event::from(e)))
        .boxed();
    let pod_scope = cluster.namespaced::<Pod>(args.namespace.as_deref());
    let pods = watcher(pod_scope, config().fields("spec.nodeName="))
        .default_backoff()
        .map(|e| Change::Pod(PodChange::from(e)))
        .boxed();
    let mut changes = futures::stream::select_all([claims, nodes, pods]);

    let mut follow = Follow::new(snapshot, args.nodepool.clone(), args.selector.clone());
    let mut pending: HashSet<String> = snapshot
        .pods
        .iter()
        .filter(|p| explain::is_pending(p))
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    let mut pods_in_init: HashSet<String> = HashSet::new();
    let mut claims_in_init: HashSet<String> = HashSet::new();
    let mut nodes_in_init: HashSet<String> = HashSet::new();

    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        summary.set_message(format!(
            "{} nodeclaims: {} ready, {} coming up · {} pending pods",
            follow.shown.len(),
            follow.ready(),
            screen.bars.len(),
            pending.len()
        ));
        let change = tokio::select! {
            _ = &mut ctrl_c => break,
            change = changes.next() => change,
        };
        let Some(change) = change else { break };
        let now = Timestamp::now();
        match change {
            Change::Claim(Event::Seen(claim)) => {
                let name = claim.metadata.name.clone().unwrap_or_default();
                let change = if follow.shown.contains_key(&name) {
                    "MODIFIED"
                } else {
                    "ADDED"
                };
                claims_in_init.insert(name);
                if let Some(s) = follow.claim_seen(*claim) {
                    screen.show(change, &s, now);
                }
            }
            Change::Claim(Event::Gone(claim)) => {
                if let Some(s) =
                    follow.claim_gone(claim.metadata.name.as_deref().unwrap_or_default())
                {
                    screen.deleted(s, now);
                }
            }
            Change::Claim(Event::Init) => claims_in_init.clear(),
            Change::Claim(Event::InitDone) => {
                // A re-list: claims that vanished meanwhile are gone.
                let vanished: Vec<String> = follow
                    .claims
                    .keys()
                    .filter(|n| !claims_in_init.contains(*n))
                    .cloned()
                    .collect();
                for name in vanished {
                    if let Some(s) = follow.claim_gone(&name) {
                        screen.deleted(s, now);
                    }
                }
            }
            Change::Node(Event::Seen(node)) => {
                nodes_in_init.insert(node.metadata.name.clone().unwrap_or_default());
                let node = follow.cached(*node);
                for s in follow.node_seen(node) {
                    screen.show("MODIFIED", &s, now);
                }
            }
            Change::Node(Event::Gone(node)) => {
                for s in follow.node_gone(node.metadata.name.as_deref().unwrap_or_default()) {
                    screen.show("MODIFIED", &s, now);
                }
            }
            Change::Node(Event::Init) => nodes_in_init.clear(),
            Change::Node(Event::InitDone) => {
                let vanished: Vec<String> = follow
                    .nodes
                    .keys()
                    .filter(|n| !nodes_in_init.contains(*n))
                    .cloned()
                    .collect();
                for name in vanished {
                    for s in follow.node_gone(&name) {
                        screen.show("MODIFIED", &s, now);
                    }
                }
            }
            Change::Pod(PodChange::Seen {
                uid,
                pending: is_pending,
            }) => {
                pods_in_init.insert(uid.clone());
                if is_pending {
                    pending.insert(uid);
                } else {
                    pending.remove(&uid);
                }
            }
            Change::Pod(PodChange::Gone(uid)) => {
                pending.remove(&uid);
            }
            Change::Pod(PodChange::Init) => pods_in_init.clear(),
            Change::Pod(PodChange::InitDone) => pending.retain(|uid| pods_in_init.contains(uid)),
            Change::Claim(Event::Failed(e))
            | Change::Node(Event::Failed(e))
            | Change::Pod(PodChange::Failed(e)) => {
                summary.println(format!("watch interrupted ({e}); retrying"));
            }
        }
    }
    for bar in screen.bars.values() {
        bar.abandon();
    }
    summary.finish_and_clear();
    Ok(())
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn named(summaries: &[ClaimSummary]) -> Vec<(String, String)> {
        summaries
            .iter()
            .map(|s| (s.name.clone(), s.state.to_string()))
            .collect()
    }

    fn ready_claim_and_node() -> (explain::ClusterObjects, String, CachedNode) {
        let cluster = fixtures::cluster();
        let claim = cluster
            .node_claims
            .iter()
            .find(|c| c.status.as_ref().is_some_and(|s| s.node_name.is_some()))
            .expect("a registered claim in the fixtures");
        let node_name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("node name");
        let node = cluster
            .nodes
            .iter()
            .find(|n| n.name == node_name)
            .expect("its node")
            .clone();
        (
            cluster.clone(),
            claim.metadata.name.clone().expect("name"),
            node,
        )
    }

    fn set_ready(node: &mut CachedNode, status: &str) {
        for c in node.conditions.iter_mut().filter(|c| &*c.type_ == "Ready") {
            c.status = status.into();
        }
    }

    #[test]
    fn a_node_that_stops_and_becomes_ready_again_changes_its_claims_row() {
        let (cluster, claim, mut node) = ready_claim_and_node();
        let mut follow = Follow::new(&cluster, None, None);
        assert_eq!(follow.shown[&claim].state.to_string(), "Ready");

        set_ready(&mut node, "False");
        assert_eq!(
            named(&follow.node_seen(node.clone())),
            [(claim.clone(), "NotReady(NodeNotReady)".to_owned())]
        );
        assert!(
            follow.node_seen(node.clone()).is_empty(),
            "the same node again changes nothing"
        );

        set_ready(&mut node, "True");
        assert_eq!(
            named(&follow.node_seen(node)),
            [(claim, "Ready".to_owned())]
        );
    }

    #[test]
    fn a_deleted_node_changes_its_claims_row() {
        let (cluster, claim, node) = ready_claim_and_node();
        let mut follow = Follow::new(&cluster, None, None);
        let rows = follow.node_gone(&node.name);
        assert_eq!(named(&rows), [(claim, "NotReady(NodeDeleted)".to_owned())]);
    }

    #[test]
    fn a_claim_event_prints_only_when_its_row_changes() {
        let (cluster, claim, _) = ready_claim_and_node();
        let mut follow = Follow::new(&cluster, None, None);
        let same = cluster
            .node_claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(&claim))
            .expect("claim")
            .clone();
        assert!(follow.claim_seen(same.clone()).is_none());
        let mut deleting = same;
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(fixtures::now()),
        );
        assert_eq!(
            named(&follow.claim_seen(deleting).into_iter().collect::<Vec<_>>()),
            [(claim.clone(), "Terminating".to_owned())]
        );
        assert!(follow.claim_gone(&claim).is_some());
        assert!(follow.claim_gone(&claim).is_none(), "gone once");
    }

    #[test]
    fn claims_of_other_pools_are_not_followed() {
        let (cluster, _, node) = ready_claim_and_node();
        let mut follow = Follow::new(&cluster, Some("no-such-pool".to_owned()), None);
        assert!(follow.shown.is_empty());
        assert!(follow.node_gone(&node.name).is_empty());
    }

    #[test]
    fn claims_the_selector_leaves_out_are_not_followed() {
        let (cluster, _, _) = ready_claim_and_node();
        let spot = "karpenter.sh/capacity-type=spot".parse().ok();
        let everything = Follow::new(&cluster, None, None);
        let only_spot = Follow::new(&cluster, None, spot);
        assert!(!everything.shown.is_empty());
        assert!(
            only_spot.shown.len() < everything.shown.len(),
            "the on-demand claims are left out"
        );
    }
}
