//! One drain pass over a terminating node (upstream's `terminator.Taint`, `terminator.Drain`
//! and its eviction queue): taint it `karpenter.sh/disrupted:NoSchedule`, read its pods, let
//! [`drain_plan`](super::drain_plan) say what to do with each, and do it: evictions through the
//! Eviction API (a PodDisruptionBudget's 429 is asked again next pass), direct deletes when the
//! deadline is near. Events say what the drain waits for, once per state (`Context::notices`).

use super::drain_plan::{self, Step};
use super::events;
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, labels};
use crate::controllers::{Context, Error};
use crate::scheduling::PodView;
use crate::state::CachedNode;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::info;

/// Upstream's label that takes a draining node out of external load balancers before it goes.
const EXCLUDE_FROM_LOAD_BALANCERS: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The message the Eviction API answers when a pod has more than one PodDisruptionBudget: it
/// cannot be evicted until that is fixed, like a budget that allows nothing.
const MULTIPLE_BUDGETS: &str = "This pod has more than one PodDisruptionBudget";

/// What a pass left behind.
pub(super) enum Drain {
    /// No pod is left to wait for.
    Done,
    /// Pods are still on the node; look again shortly.
    Waiting,
}

/// One pass: taints the node, then evicts or deletes what the plan says. `deadline` is the
/// claim's termination deadline, if it has one.
pub(super) async fn pass<P>(
    claim: &NodeClaim,
    node: &CachedNode,
    deadline: Option<Timestamp>,
    ctx: &Context<P>,
) -> Result<Drain, Error> {
    taint(node, ctx).await?;
    if let Some(deadline) = deadline {
        let text = deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        ctx.notices
            .publish(
                &events::grace_period_expiring(&text),
                &node.object_ref(),
                &text,
            )
            .await;
    }
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={}", node.name)))
        .await
        .map_err(Error::kube("listing the node's pods"))?
        .items;
    let now = Timestamp::now();
    let plan = drain_plan::plan(&on_node, deadline, now);
    if plan.is_drained() {
        return Ok(Drain::Done);
    }
    let mut refused = Vec::new();
    for (pod, step) in &plan.pods {
        match step {
            Step::Evict => match evict(pod, ctx).await? {
                Eviction::Evicted => {
                    let event = events::evicted(&disruption_reason(claim), pod.has_controller());
                    ctx.notices.publish(&event, &pod.object_ref(&()), "").await;
                }
                Eviction::Refused => refused.push(describe(pod)),
                Eviction::Gone => {}
            },
            Step::Delete {
                grace_period_seconds,
            } => {
                if let Some(deadline) = deadline {
                    let own = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds);
                    let event = events::deleted_for_deadline(deadline, *grace_period_seconds, own);
                    ctx.notices.publish(&event, &pod.object_ref(&()), "").await;
                }
                delete(pod, *grace_period_seconds, ctx).await?;
            }
            Step::Wait(_) => {}
        }
    }
    let waiting = plan.pods.len();
    info!(
        nodeclaim = %claim.name_any(),
        node = %node.name,
        pods = waiting,
        evicting = plan.count(|s| *s == Step::Evict),
        refused = refused.len(),
        do_not_disrupt = plan.count(|s| matches!(s, Step::Wait(drain_plan::Waiting::DoNotDisrupt))),
        "draining"
    );
    let event = events::failed_to_drain(waiting);
    let state = event.note.clone().unwrap_or_default();
    ctx.notices
        .publish(&event, &node.object_ref(), &state)
        .await;
    if !refused.is_empty() {
        let event = events::refused_by_budget(&refused);
        let state = event.note.clone().unwrap_or_default();
        ctx.notices
            .publish(&event, &node.object_ref(), &state)
            .await;
    }
    Ok(Drain::Waiting)
}

/// Adds `karpenter.sh/disrupted:NoSchedule` (replacing another effect of the same key) and the
/// load-balancer exclusion label, unless the node has both.
async fn taint<P>(node: &CachedNode, ctx: &Context<P>) -> Result<(), Error> {
    let mut taints = node.taints.clone();
    let tainted = taints
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY && t.effect == "NoSchedule");
    let labelled = node.labels.contains_key(EXCLUDE_FROM_LOAD_BALANCERS);
    if tainted && labelled {
        return Ok(());
    }
    taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
    taints.push(Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    });
    // The resourceVersion makes a concurrent change to the taints fail this patch (and the
    // reconcile retry) instead of being overwritten.
    let patch = json!({
        "metadata": {
            "labels": {EXCLUDE_FROM_LOAD_BALANCERS: "karpenter"},
            "resourceVersion": node.resource_version,
        },
        "spec": {"taints": taints},
    });
    Api::<Node>::all(ctx.client.clone())
        .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("tainting the node"))?;
    info!(node = %node.name, taint = labels::DISRUPTED_TAINT_KEY, "tainted node");
    Ok(())
}

enum Eviction {
    Evicted,
    /// A PodDisruptionBudget does not allow it now.
    Refused,
    /// Gone already, or going without us.
    Gone,
}

/// Asks the Eviction API to evict the pod (this very pod: its UID is a precondition).
async fn evict<P>(pod: &Pod, ctx: &Context<P>) -> Result<Eviction, Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    match api.evict(&pod.name_any(), &params).await {
        Ok(_) => {
            info!(pod = %describe(pod), "evicted pod");
            Ok(Eviction::Evicted)
        }
        // 429: a PodDisruptionBudget says not now.
        Err(kube::Error::Api(status))
            if status.code == 429 || status.message.starts_with(MULTIPLE_BUDGETS) =>
        {
            Ok(Eviction::Refused)
        }
        // 404: gone already; 409: a new pod took the name (the UID precondition failed).
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            Ok(Eviction::Gone)
        }
        // The pod's namespace is being deleted, which refuses the Eviction object; the
        // namespace controller deletes the pod itself.
        Err(kube::Error::Api(status))
            if status.code == 403 && status.message.contains("being terminated") =>
        {
            Ok(Eviction::Gone)
        }
        Err(e) => Err(Error::kube("evicting a pod")(e)),
    }
}

/// Deletes the pod with the given grace period, past its PodDisruptionBudgets.
async fn delete<P>(pod: &Pod, grace_period_seconds: u32, ctx: &Context<P>) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let params = DeleteParams {
        grace_period_seconds: Some(grace_period_seconds),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => {
            info!(pod = %describe(pod), grace_period_seconds, "deleted pod at the node's termination deadline");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(e) => Err(Error::kube(
            "deleting a pod at the node's termination deadline",
        )(e)),
    }
}

/// Why the node goes, for the `Evicted` Event: the claim's disruption reason when a disruption
/// method deleted it, else upstream's "Forceful Termination".
fn disruption_reason(claim: &NodeClaim) -> String {
    claim
        .condition(cond::DISRUPTION_REASON)
        .filter(|c| c.status == "True")
        .map_or_else(|| "Forceful Termination".to_owned(), |c| c.reason.clone())
}

fn describe(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}
