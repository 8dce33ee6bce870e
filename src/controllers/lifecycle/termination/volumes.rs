//! Waiting for the drained pods' volumes to detach before the instance goes (upstream's
//! `awaitVolumeDetachment`, `pendingVolumeAttachments` and `filterVolumeAttachments` in
//! `pkg/controllers/node/termination/controller.go`). A StatefulSet's replacement pod cannot
//! attach its volume elsewhere while the old attachment stands (multi-attach); terminating the
//! instance first leaves the attach-detach controller to wait out its own six-minute timeout.
//!
//! Every VolumeAttachment on the node counts except those of volumes that pods the drain leaves
//! on the node use (pods that tolerate the drain's taint, static pods, pods stuck terminating):
//! those stay attached until the node goes. The wait ends at the claim's
//! `terminationGracePeriod` deadline, as upstream's.

use crate::controllers::{Context, Error};
use crate::disruption::protection::{is_stuck_terminating, tolerates_disrupted_taint};
use crate::scheduling::PodView;
use crate::scheduling::volume_topology::claim_names;
use crate::state::{CachedNode, CachedPod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use std::collections::HashSet;

/// Whether the drain moves the pod off the node (upstream's `IsDrainable`).
fn is_drainable(pod: &CachedPod, now: Timestamp) -> bool {
    !tolerates_disrupted_taint(pod) && !is_stuck_terminating(pod, now) && !pod.is_mirror()
}

/// The names of the VolumeAttachments on `node` that termination waits for, sorted.
pub(super) async fn pending<P>(ctx: &Context<P>, node: &CachedNode) -> Result<Vec<String>, Error> {
    let api: Api<VolumeAttachment> = Api::all(ctx.client.clone());
    // VolumeAttachments have no field selector for their node; a cluster has few of them.
    let on_node: Vec<VolumeAttachment> = api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing volume attachments"))?
        .items
        .into_iter()
        .filter(|va| va.spec.node_name == node.name)
        .collect();
    if on_node.is_empty() {
        return Ok(Vec::new());
    }
    let now = Timestamp::now();
    let claims = &ctx.cluster.volumes.claims;
    let staying: HashSet<String> = ctx
        .cluster
        .pods
        .state()
        .iter()
        .filter(|p| p.node_name.as_deref() == Some(node.name.as_str()))
        .filter(|p| !is_drainable(p, now))
        .flat_map(|p| {
            let namespace = p.pod_namespace().unwrap_or_default().to_owned();
            claim_names(p.as_ref())
                .map(move |name| ObjectRef::new(&name).within(&namespace))
                .collect::<Vec<_>>()
        })
        .filter_map(|claim| claims.get(&claim)?.spec.as_ref()?.volume_name.clone())
        .collect();
    let mut names: Vec<String> = on_node
        .iter()
        .filter(|va| {
            va.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !staying.contains(pv))
        })
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    Ok(names)
}
