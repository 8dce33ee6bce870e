//! The NodeClaim lifecycle, one reconcile per claim: launch the instance, register its Node
//! (labels, taints, finalizer), mark it initialized once Ready, delete claims whose instance never
//! registered, and, when a claim or its Node is deleted, drain the Node, delete the instance and
//! release the finalizers.
//!
//! Mirrors upstream's `nodeclaim/lifecycle` and `node/termination` controllers, in one place.

use super::{Context, Error, FIELD_MANAGER, conditions};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClaimStatus, labels};
use crate::cloud::{CloudError, CloudProvider, DeleteOutcome, Instance, ProviderId};
use crate::scheduling::InstanceType;
use crate::scheduling::Requirements;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, applier};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::{info, warn};

/// How many claims are reconciled at once. Unbounded, a scale-out of hundreds of claims opened
/// an API connection per claim in flight (the client speaks HTTP/1.1), each with its TLS and
/// HTTP buffers, and the pool then kept them all idle for 90 s: megabytes for no speed-up,
/// since the API server and the cloud throttle such bursts anyway.
const MAX_CONCURRENT_RECONCILES: u16 = 64;

/// Runs the lifecycle controller until SIGTERM/SIGINT. `triggers` names the claims to
/// reconcile: the agent's own claim and node watches feed it (see `controllers::start`), so the
/// controller reads the shared claim store instead of caching every claim and watching every
/// node a second time.
pub async fn run<P: CloudProvider + 'static>(
    ctx: Arc<Context<P>>,
    triggers: mpsc::UnboundedReceiver<ObjectRef<NodeClaim>>,
) {
    let store = ctx.claims.clone();
    let queue = tokio_stream_of(triggers);
    let config = controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES);
    let reconciles = applier(
        |claim, ctx| Box::pin(reconcile(claim, ctx)),
        error_policy,
        ctx,
        store,
        queue,
        config,
    )
    .for_each(|_| futures::future::ready(()));
    tokio::select! {
        () = reconciles => {}
        () = shutdown_signal() => info!("shutting down"),
    }
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = Result<T, std::convert::Infallible>> + Send + Unpin {
    Box::pin(futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|item| item.map(Ok))
    }))
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut terminate) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            let _ = interrupt.await;
            return;
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// The claims a Node event concerns: those whose providerID is the node's.
pub fn claims_of_node(
    claims: &kube::runtime::reflector::Store<NodeClaim>,
    node: &Node,
) -> Vec<ObjectRef<NodeClaim>> {
    let Some(provider_id) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) else {
        return Vec::new();
    };
    claims
        .state()
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
        .map(|c| ObjectRef::from_obj(&**c))
        .collect()
}

fn error_policy<P: CloudProvider>(
    claim: Arc<NodeClaim>,
    error: &Error,
    ctx: Arc<Context<P>>,
) -> Action {
    if error.is_conflict() {
        // Someone else wrote the object since we read it: read it again and retry at once.
        tracing::debug!(nodeclaim = %claim.name_any(), error = %error, "conflict; retrying");
        return Action::requeue(Duration::from_millis(200));
    }
    warn!(nodeclaim = %claim.name_any(), error = %error, cause = ?std::error::Error::source(error), "nodeclaim reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::metrics::ErrorLabels {
            kind: error.kind().to_owned(),
        })
        .inc();
    Action::requeue(Duration::from_secs(5))
}

/// One pass over one NodeClaim.
pub async fn reconcile<P: CloudProvider>(
    claim: Arc<NodeClaim>,
    ctx: Arc<Context<P>>,
) -> Result<Action, Error> {
    if claim.metadata.deletion_timestamp.is_some() {
        return terminate(&claim, &ctx).await;
    }
    if ctx.own_writes.is_stale(&claim) {
        // The watch has not delivered our last write yet; its event reconciles the claim again.
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    if !claim
        .finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        add_claim_finalizer(&claim, &ctx).await?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    let status = claim.status.clone().unwrap_or_default();
    if !conditions::is_true(&status.conditions, cond::LAUNCHED) {
        return launch(&claim, status, &ctx).await;
    }
    let Some(provider_id) = status.provider_id.clone() else {
        return Err(Error::Invalid {
            object: describe(&claim),
            reason: "Launched but has no providerID".to_owned(),
        });
    };
    let node = ctx.node_by_provider_id(&provider_id);
    if let Some(node) = &node
        && node.metadata.deletion_timestamp.is_some()
    {
        // Someone deleted the Node: the claim goes with it, through the claim's finalizer.
        info!(nodeclaim = %claim.name_any(), node = %node.name_any(), "node deleted, deleting its nodeclaim");
        delete_claim(&claim, &ctx).await?;
        return Ok(Action::await_change());
    }
    if !conditions::is_true(&status.conditions, cond::REGISTERED) {
        return match node {
            Some(node) => register(&claim, status, &node, &ctx).await,
            None => check_registration_deadline(&claim, &status, &ctx).await,
        };
    }
    let Some(node) = node else {
        // The Node vanished after registering: is the instance gone too?
        let id: Option<ProviderId> = provider_id.parse().ok();
        let instance = match &id {
            Some(id) => ctx
                .provider
                .get(id)
                .await
                .map_err(Error::cloud("looking up the instance"))?,
            None => None,
        };
        if instance.is_none() || instance.as_ref().is_some_and(|i| i.terminating) {
            info!(nodeclaim = %claim.name_any(), "instance is gone, deleting its nodeclaim");
            publish(
                &ctx,
                &claim,
                EventType::Warning,
                "InstanceTerminated",
                "the instance is gone; replacing it",
            )
            .await;
            delete_claim(&claim, &ctx).await?;
            return Ok(Action::await_change());
        }
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    if !conditions::is_true(&status.conditions, cond::INITIALIZED) {
        return initialize(&claim, status, &node, &ctx).await;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn describe(claim: &NodeClaim) -> String {
    format!("NodeClaim {}", claim.name_any())
}

async fn publish<P>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.to_owned()),
        action: reason.to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &claim.object_ref(&())).await {
        warn!(nodeclaim = %claim.name_any(), error = %e, "could not publish event");
    }
}

async fn add_claim_finalizer<P>(claim: &NodeClaim, ctx: &Context<P>) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut finalizers = claim.finalizers().to_vec();
    finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": claim.resource_version()}});
    api.patch(
        &claim.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::kube("adding the termination finalizer"))?;
    ctx.own_writes.wrote(claim);
    Ok(())
}

async fn write_status<P>(
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    // lastPodEventTime belongs to the pod-events loop: applying the (possibly older) copy read
    // with the claim would set it back, and owning it here would clear it when left out.
    let status = NodeClaimStatus {
        last_pod_event_time: None,
        ..status.clone()
    };
    let patch = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "status": status});
    api.patch_status(
        &claim.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(Error::kube("writing the nodeclaim status"))?;
    ctx.own_writes.wrote(claim);
    Ok(())
}

async fn delete_claim<P>(claim: &NodeClaim, ctx: &Context<P>) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api
        .delete(&claim.name_any(), &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(Error::kube("deleting the nodeclaim")(e)),
    }
}

/// The instance types a claim may launch as, cheapest first: those its requirements allow and
/// whose allocatable covers its requests.
pub fn launch_candidates(
    claim: &NodeClaim,
    catalogue: &[InstanceType],
) -> Result<Vec<InstanceType>, Error> {
    let requirements =
        Requirements::from_api(&claim.spec.requirements).map_err(|e| Error::Invalid {
            object: describe(claim),
            reason: e.to_string(),
        })?;
    let requests = crate::resources::ResourceList::from_quantities(&claim.spec.resources.requests)
        .map_err(|e| Error::Invalid {
            object: describe(claim),
            reason: e.to_string(),
        })?;
    let mut candidates: Vec<(f64, &InstanceType)> = catalogue
        .iter()
        .filter(|it| requirements.intersects(&it.requirements).is_ok())
        .filter(|it| requests.fits_in(&it.allocatable()))
        .filter_map(|it| it.cheapest_offering(&requirements).map(|o| (o.price, it)))
        .collect();
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    Ok(candidates.into_iter().map(|(_, it)| it.clone()).collect())
}

async fn launch<P: CloudProvider>(
    claim: &NodeClaim,
    status: NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let catalogue = match ctx
        .provider
        .instance_types(&claim.spec.node_class_ref)
        .await
    {
        Ok(catalogue) => catalogue,
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            return give_up_launch(claim, ctx, "NodeClassNotReady", &reason).await;
        }
        Err(e) => return Err(Error::cloud("listing instance types")(e)),
    };
    let candidates = launch_candidates(claim, &catalogue)?;
    let started = std::time::Instant::now();
    match ctx.provider.create(claim, &candidates).await {
        Ok(instance) => {
            record_launch(claim, status, &instance, ctx).await?;
            ctx.metrics.nodeclaims_launched.inc();
            ctx.metrics
                .launch_seconds
                .observe(started.elapsed().as_secs_f64());
            info!(nodeclaim = %claim.name_any(), instance_type = %instance.instance_type, zone = %instance.zone,
                capacity_type = %instance.capacity_type, provider_id = %instance.provider_id, "launched");
            let note = format!(
                "launched {} ({}) in {} as {}",
                instance.instance_type, instance.capacity_type, instance.zone, instance.provider_id
            );
            publish(ctx, claim, EventType::Normal, "Launched", &note).await;
            Ok(Action::requeue(Duration::from_secs(5)))
        }
        Err(CloudError::InsufficientCapacity { offerings }) => {
            let note = format!(
                "no capacity for {}; the pods will be provisioned again",
                offerings.join(", ")
            );
            give_up_launch(claim, ctx, "InsufficientCapacity", &note).await
        }
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            give_up_launch(claim, ctx, "NodeClassNotReady", &reason).await
        }
        Err(e) => Err(Error::cloud("launching the instance")(e)),
    }
}

/// A launch that cannot succeed as planned deletes the claim, as upstream's `launch.go` does:
/// the provider has already cached the offerings that had no capacity, and provisioning plans
/// the claim's pods again once the claim is gone (the claim watch nudges it), so they land on
/// what is available now instead of waiting on this claim. Waiting in place would pin the pods
/// to a plan made before the failure.
async fn give_up_launch<P>(
    claim: &NodeClaim,
    ctx: &Context<P>,
    reason: &str,
    note: &str,
) -> Result<Action, Error> {
    warn!(nodeclaim = %claim.name_any(), reason, %note, "launch failed; deleting the nodeclaim");
    publish(ctx, claim, EventType::Warning, reason, note).await;
    delete_claim(claim, ctx).await?;
    Ok(Action::await_change())
}

async fn record_launch<P>(
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    instance: &Instance,
    ctx: &Context<P>,
) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let label_patch = json!({"metadata": {"labels": {
        labels::INSTANCE_TYPE: instance.instance_type,
        labels::ZONE: instance.zone,
        labels::CAPACITY_TYPE: instance.capacity_type,
    }}});
    api.patch(
        &claim.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&label_patch),
    )
    .await
    .map_err(Error::kube("labelling the nodeclaim"))?;
    status.provider_id = Some(instance.provider_id.to_string());
    status.image_id = instance.image_id.clone();
    status.capacity = instance.capacity.to_quantities();
    status.allocatable = instance.allocatable.to_quantities();
    conditions::set(
        &mut status.conditions,
        cond::LAUNCHED,
        true,
        "Launched",
        "",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::REGISTERED,
        false,
        "NotRegistered",
        "waiting for the node to register",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        "NotRegistered",
        "waiting for the node to register",
        claim.metadata.generation,
    );
    write_status(claim, &status, ctx).await
}

async fn check_registration_deadline<P>(
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let launched_at = conditions::since(&status.conditions, cond::LAUNCHED);
    let age = launched_at.map(|t| {
        k8s_openapi::jiff::Timestamp::now()
            .duration_since(t)
            .unsigned_abs()
    });
    if age.is_some_and(|age| age > ctx.settings.registration_ttl) {
        let note = format!(
            "the node did not register within {}s; deleting the claim",
            ctx.settings.registration_ttl.as_secs()
        );
        warn!(nodeclaim = %claim.name_any(), %note, "registration timed out");
        publish(ctx, claim, EventType::Warning, "RegistrationTimeout", &note).await;
        delete_claim(claim, ctx).await?;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(Duration::from_secs(10)))
}

fn without_taint(taints: &[Taint], key: &str) -> Vec<Taint> {
    taints.iter().filter(|t| t.key != key).cloned().collect()
}

async fn register<P>(
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    node: &Node,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node_name = node.name_any();
    let mut node_labels = claim.labels().clone();
    node_labels.insert(labels::NODE_REGISTERED.to_owned(), "true".to_owned());
    let node_taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let mut taints = without_taint(&node_taints, labels::UNREGISTERED_TAINT_KEY);
    for taint in &claim.spec.taints {
        if !taints
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            taints.push(taint.clone());
        }
    }
    let mut finalizers = node.finalizers().to_vec();
    if !finalizers
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
    }
    let patch = json!({
        "metadata": {"labels": node_labels, "finalizers": finalizers, "resourceVersion": node.resource_version()},
        "spec": {"taints": taints},
    });
    nodes
        .patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("registering the node"))?;
    status.node_name = Some(node_name.clone());
    conditions::set(
        &mut status.conditions,
        cond::REGISTERED,
        true,
        "Registered",
        "",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::INITIALIZED,
        false,
        "NotInitialized",
        "waiting for the node to be ready",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        "NotInitialized",
        "waiting for the node to be ready",
        claim.metadata.generation,
    );
    write_status(claim, &status, ctx).await?;
    info!(nodeclaim = %claim.name_any(), node = %node_name, "registered");
    Ok(Action::requeue(Duration::from_secs(2)))
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn initialize<P>(
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    node: &Node,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    if !node_is_ready(node) {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let node_taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let waiting: Vec<&str> = claim
        .spec
        .startup_taints
        .iter()
        .filter(|st| {
            node_taints
                .iter()
                .any(|t| t.key == st.key && t.effect == st.effect)
        })
        .map(|t| t.key.as_str())
        .collect();
    if !waiting.is_empty() {
        let message = format!(
            "waiting for startup taints to be removed: {}",
            waiting.join(", ")
        );
        conditions::set(
            &mut status.conditions,
            cond::INITIALIZED,
            false,
            "StartupTaintsExist",
            &message,
            claim.metadata.generation,
        );
        write_status(claim, &status, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    // Until the node lifecycle controller has taken its not-ready taints off (it lags the Ready
    // condition), pods cannot land: an initialized claim must be one they can land on.
    if let Some(taint) = node_taints
        .iter()
        .find(|t| crate::scheduling::taints::is_known_ephemeral(t))
    {
        let message = format!(
            "KnownEphemeralTaint \"{}\" still exists",
            crate::scheduling::taints::DisplayTaint(taint)
        );
        conditions::set(
            &mut status.conditions,
            cond::INITIALIZED,
            false,
            "KnownEphemeralTaintsExist",
            &message,
            claim.metadata.generation,
        );
        write_status(claim, &status, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"labels": {labels::NODE_INITIALIZED: "true"}}});
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::kube("labelling the node initialized"))?;
    conditions::set(
        &mut status.conditions,
        cond::INITIALIZED,
        true,
        "Initialized",
        "",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::READY,
        true,
        "Ready",
        "",
        claim.metadata.generation,
    );
    write_status(claim, &status, ctx).await?;
    ctx.metrics.nodeclaims_initialized.inc();
    info!(nodeclaim = %claim.name_any(), node = %node.name_any(), "initialized");
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn is_daemon_or_mirror(pod: &Pod) -> bool {
    let owned_by_daemonset = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    owned_by_daemonset || mirror
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Taints the node, evicts its pods and reports how many are still there.
async fn drain<P>(node: &Node, ctx: &Context<P>) -> Result<usize, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node_name = node.name_any();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY) {
        let mut taints = taints.clone();
        taints.push(Taint {
            key: labels::DISRUPTED_TAINT_KEY.to_owned(),
            effect: "NoSchedule".to_owned(),
            ..Taint::default()
        });
        let patch = json!({"spec": {"taints": taints}});
        nodes
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("tainting the node"))?;
    }
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .map_err(Error::kube("listing the node's pods"))?;
    let mut remaining = 0;
    for pod in on_node
        .items
        .iter()
        .filter(|p| !is_daemon_or_mirror(p) && !is_terminal(p))
    {
        remaining += 1;
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let namespaced: Api<Pod> =
            Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
        match namespaced
            .evict(&pod.name_any(), &EvictParams::default())
            .await
        {
            Ok(_) => {}
            // 429: a PodDisruptionBudget says not now; try again on the next pass.
            Err(kube::Error::Api(status)) if status.code == 429 || status.code == 404 => {}
            // The pod's namespace is being deleted, which refuses the Eviction object; the
            // namespace controller deletes the pod itself.
            Err(kube::Error::Api(status))
                if status.code == 403 && status.message.contains("being terminated") => {}
            Err(e) => return Err(Error::kube("evicting a pod")(e)),
        }
    }
    Ok(remaining)
}

/// Deletes pods still bound to a node that is gone. A pod the kube-scheduler bound in the
/// moment between the drain and the instance's deletion can never run; without this it waits
/// for the pod garbage collector (40 s and more) before its controller replaces it.
async fn release_stranded_pods<P>(node_name: &str, ctx: &Context<P>) -> Result<(), Error> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let stranded = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .map_err(Error::kube("listing pods left on the deleted node"))?;
    for pod in stranded.items.iter().filter(|p| !is_daemon_or_mirror(p)) {
        let namespaced: Api<Pod> =
            Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
        if let Err(e) = namespaced
            .delete(
                &pod.name_any(),
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await
            && !super::is_not_found(&e)
        {
            return Err(Error::kube("deleting a pod left on the deleted node")(e));
        }
        info!(pod = %pod.name_any(), node = %node_name, "deleted a pod left on the deleted node");
    }
    Ok(())
}

async fn terminate<P: CloudProvider>(claim: &NodeClaim, ctx: &Context<P>) -> Result<Action, Error> {
    if !claim
        .finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
    let node = provider_id
        .as_deref()
        .and_then(|id| ctx.node_by_provider_id(id));
    if let Some(node) = &node {
        let remaining = drain(node, ctx).await?;
        if remaining > 0 {
            info!(nodeclaim = %claim.name_any(), node = %node.name_any(), pods = remaining, "draining");
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
    }
    if let Some(id) = provider_id
        .as_deref()
        .and_then(|id| id.parse::<ProviderId>().ok())
    {
        let outcome = ctx
            .provider
            .delete(&id)
            .await
            .map_err(Error::cloud("deleting the instance"))?;
        if outcome == DeleteOutcome::Terminating {
            info!(nodeclaim = %claim.name_any(), provider_id = %id, "instance terminating");
        }
    }
    if let Some(node) = &node {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        let finalizers: Vec<String> = node
            .finalizers()
            .iter()
            .filter(|f| *f != labels::TERMINATION_FINALIZER)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"finalizers": finalizers}});
        if let Err(e) = nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            && !super::is_not_found(&e)
        {
            return Err(Error::kube("releasing the node's finalizer")(e));
        }
        if let Err(e) = nodes
            .delete(&node.name_any(), &DeleteParams::background())
            .await
            && !super::is_not_found(&e)
        {
            return Err(Error::kube("deleting the node")(e));
        }
    }
    if let Some(node) = &node {
        release_stranded_pods(&node.name_any(), ctx).await?;
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let finalizers: Vec<String> = claim
        .finalizers()
        .iter()
        .filter(|f| *f != labels::TERMINATION_FINALIZER)
        .cloned()
        .collect();
    let patch = json!({"metadata": {"finalizers": finalizers}});
    if let Err(e) = api
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        && !super::is_not_found(&e)
    {
        return Err(Error::kube("releasing the nodeclaim's finalizer")(e));
    }
    ctx.metrics.nodeclaims_terminated.inc();
    info!(nodeclaim = %claim.name_any(), "terminated");
    Ok(Action::await_change())
}
