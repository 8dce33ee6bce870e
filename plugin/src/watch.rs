//! `status --watch`: follows NodeClaims after the first screen. Each claim still coming up gets a
//! progress bar on stderr (Launched → Registered → Initialized), over a summary bar with the
//! pending pod count; stdout gets one NodeClaim row per state change, as `kubectl get -w` does.
//! Runs until interrupted.

use crate::cluster::Cluster;
use crate::status::{StatusArgs, claim_headers, claim_row};
use crate::table::{Table, render_row};
use futures::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use karpenter_core::apis::NodeClaim;
use karpenter_core::explain::{self, ClaimPhase, ClaimSummary};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

enum Change {
    Claim(ClaimChange),
    Pod(PodChange),
}

/// A NodeClaim event, boxed: claims are large and events many.
enum ClaimChange {
    Seen(Box<NodeClaim>),
    Gone(Box<NodeClaim>),
    Init,
    InitDone,
    Failed(watcher::Error),
}

impl ClaimChange {
    fn from(event: Result<watcher::Event<NodeClaim>, watcher::Error>) -> Self {
        match event {
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => Self::Seen(Box::new(c)),
            Ok(watcher::Event::Delete(c)) => Self::Gone(Box::new(c)),
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
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => Self::Seen { uid: uid(&pod), pending: explain::is_pending(&pod) },
            Ok(watcher::Event::Delete(pod)) => Self::Gone(uid(&pod)),
            Ok(watcher::Event::Init) => Self::Init,
            Ok(watcher::Event::InitDone) => Self::InitDone,
            Err(e) => Self::Failed(e),
        }
    }
}

/// Nodes by name and by provider id, from the first screen: the watch only follows claims.
struct Nodes<'a> {
    by_name: HashMap<&'a str, &'a Node>,
    by_provider_id: HashMap<&'a str, &'a Node>,
}

impl<'a> Nodes<'a> {
    fn new(nodes: &'a [Node]) -> Self {
        Self {
            by_name: nodes.iter().filter_map(|n| Some((n.metadata.name.as_deref()?, n))).collect(),
            by_provider_id: nodes.iter().filter_map(|n| Some((n.spec.as_ref()?.provider_id.as_deref()?, n))).collect(),
        }
    }

    fn summarize(&self, claim: &NodeClaim) -> ClaimSummary {
        let status = claim.status.as_ref();
        let node = status
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|id| self.by_provider_id.get(id))
            .or_else(|| status.and_then(|s| s.node_name.as_deref()).and_then(|n| self.by_name.get(n)));
        explain::claim_summary(claim, node.copied())
    }
}

/// Follows NodeClaims until interrupted.
pub async fn run(cluster: &Cluster, snapshot: &explain::Cluster, args: &StatusArgs) -> anyhow::Result<()> {
    let wide = args.output == crate::output::Format::Wide;
    let structured = matches!(args.output, crate::output::Format::Json | crate::output::Format::Yaml);
    let progress = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{spinner} {prefix:<32} [{bar:12}] {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let summary = progress.add(ProgressBar::new_spinner());
    summary.enable_steady_tick(Duration::from_millis(200));

    // Column widths for the rows: the header's, widened for typical values.
    let widths: Vec<usize> = Table::new(&claim_headers(wide)).widths().into_iter().map(|w| w.max(12)).collect();

    let claims = watcher(cluster.all::<NodeClaim>(), watcher::Config::default()).default_backoff().map(|e| Change::Claim(ClaimChange::from(e))).boxed();
    let pod_scope = cluster.namespaced::<Pod>(args.namespace.as_deref());
    let pods = watcher(pod_scope, watcher::Config::default().fields("spec.nodeName=")).default_backoff().map(|e| Change::Pod(PodChange::from(e))).boxed();
    let mut changes = futures::stream::select(claims, pods);

    let nodes = Nodes::new(&snapshot.nodes);
    let mut known: BTreeMap<String, (ClaimPhase, String)> = snapshot
        .node_claims
        .iter()
        .map(|c| nodes.summarize(c))
        .filter(|s| args.nodepool.as_ref().is_none_or(|pool| s.node_pool.as_ref() == Some(pool)))
        .map(|s| (s.name.clone(), (s.state.phase, s.state.to_string())))
        .collect();
    let mut bars: BTreeMap<String, ProgressBar> = BTreeMap::new();
    let mut pending: HashSet<String> = snapshot.pods.iter().filter(|p| explain::is_pending(p)).filter_map(|p| p.metadata.uid.clone()).collect();
    let mut pending_init: HashSet<String> = HashSet::new();
    let mut seen_in_init: HashSet<String> = HashSet::new();

    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let ready = known.values().filter(|(p, _)| *p == ClaimPhase::Ready).count();
        summary.set_message(format!(
            "{} nodeclaims: {ready} ready, {} coming up · {} pending pods",
            known.len(),
            bars.len(),
            pending.len()
        ));
        let change = tokio::select! {
            _ = &mut ctrl_c => break,
            change = changes.next() => change,
        };
        let Some(change) = change else { break };
        let now = Timestamp::now();
        match change {
            Change::Claim(ClaimChange::Seen(claim)) => {
                let s = nodes.summarize(&claim);
                if args.nodepool.as_ref().is_some_and(|pool| s.node_pool.as_ref() != Some(pool)) {
                    continue;
                }
                seen_in_init.insert(s.name.clone());
                let state = s.state.to_string();
                let changed = known.get(&s.name).is_none_or(|(_, old)| *old != state);
                known.insert(s.name.clone(), (s.state.phase, state.clone()));
                let coming_up = matches!(s.state.phase, ClaimPhase::Pending | ClaimPhase::Launching | ClaimPhase::Registering | ClaimPhase::Initializing);
                if coming_up {
                    let bar = bars.entry(s.name.clone()).or_insert_with(|| {
                        let bar = progress.add(ProgressBar::new(3).with_style(style.clone()).with_prefix(s.name.clone()));
                        bar.enable_steady_tick(Duration::from_millis(200));
                        bar
                    });
                    bar.set_position(s.state.phase.steps_done());
                    let what = s.instance_type.clone().unwrap_or_default();
                    bar.set_message(format!("{state} {what} {}", explain::age(s.created_at, now)));
                } else if let Some(bar) = bars.remove(&s.name) {
                    bar.set_position(3);
                    bar.finish_with_message(format!("{state} after {}", explain::age(s.created_at, now)));
                }
                if changed && !structured {
                    let line = render_row(&claim_row(&s, now, wide), &widths, false);
                    let _ = progress.suspend(|| crate::output::print_stdout(&format!("{line}\n")));
                }
            }
            Change::Claim(ClaimChange::Gone(claim)) => {
                let name = claim.metadata.name.clone().unwrap_or_default();
                if known.remove(&name).is_none() {
                    continue;
                }
                if let Some(bar) = bars.remove(&name) {
                    bar.abandon_with_message("deleted");
                }
                if !structured {
                    let mut s = nodes.summarize(&claim);
                    s.state.phase = ClaimPhase::Terminating;
                    let mut row = claim_row(&s, now, wide);
                    if let Some(cell) = row.iter_mut().find(|c| c.text.starts_with("Terminating")) {
                        cell.text = "Deleted".to_owned();
                    }
                    let line = render_row(&row, &widths, false);
                    let _ = progress.suspend(|| crate::output::print_stdout(&format!("{line}\n")));
                }
            }
            Change::Claim(ClaimChange::Init) => seen_in_init.clear(),
            Change::Claim(ClaimChange::InitDone) => {
                // A re-list: claims that vanished meanwhile are gone.
                known.retain(|name, _| seen_in_init.contains(name));
            }
            Change::Pod(PodChange::Seen { uid, pending: is_pending }) => {
                pending_init.insert(uid.clone());
                if is_pending {
                    pending.insert(uid);
                } else {
                    pending.remove(&uid);
                }
            }
            Change::Pod(PodChange::Gone(uid)) => {
                pending.remove(&uid);
            }
            Change::Pod(PodChange::Init) => pending_init.clear(),
            Change::Pod(PodChange::InitDone) => pending.retain(|uid| pending_init.contains(uid)),
            Change::Claim(ClaimChange::Failed(e)) | Change::Pod(PodChange::Failed(e)) => {
                summary.println(format!("watch interrupted ({e}); retrying"));
            }
        }
    }
    for bar in bars.values() {
        bar.abandon();
    }
    summary.finish_and_clear();
    Ok(())
}
