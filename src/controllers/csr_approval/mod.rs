//! Approves the certificate requests of the kubelets on the agent's own machines, on clouds
//! whose control plane does not (GKE approves only the VMs of its own instance groups; EKS
//! approves its nodes itself, so the AWS provider reports no identities and this loop approves
//! nothing there).
//!
//! Pending CertificateSigningRequests are watched; each one the [`policy`] recognises as a
//! kubelet's is matched to a NodeClaim (by its node name or its machine's name), the cloud is
//! asked who that machine is ([`CloudProvider::kubelet_identity`]), and only a request every rule
//! allows is approved, through the `approval` subresource with reason `AutoApproved`. A request
//! for one of the agent's nodes that breaks a rule stays pending with a Warning Event on the
//! NodeClaim saying why; requests for other nodes are left alone. Nothing is ever denied: a
//! request the agent does not approve may be someone else's to decide.

pub(crate) mod policy;
pub(crate) mod request;

use super::Context;
use crate::apis::NodeClaim;
use crate::cloud::{CloudProvider, ProviderId};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use policy::{Csr, Kind, NodeFacts, Recognised};
use request::CertificateRequest;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// How often pending requests are looked at again without a watch event (a machine the cloud
/// did not report as running yet may be running now).
const RECHECK: Duration = Duration::from_secs(5);

/// Requests older than this are not looked at any more: the kubelet has given up on them and
/// asked again (kube-controller-manager's cleaner removes pending ones after a day).
const GIVE_UP_AFTER: Duration = Duration::from_secs(30 * 60);

/// The Event reason on a NodeClaim whose kubelet's request is not approved.
pub(crate) const NOT_APPROVED_REASON: &str = "KubeletCertificateNotApproved";

/// Watches CertificateSigningRequests and approves those of the agent's own kubelets, until
/// cancelled.
pub(crate) async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    use futures::StreamExt;
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    let (store, writer) = reflector::store();
    let wake = Arc::new(tokio::sync::Notify::new());
    let watch = {
        let wake = wake.clone();
        reflector::reflector(
            writer,
            watcher(api.clone(), watcher::Config::default())
                .default_backoff()
                .modify(|csr: &mut CertificateSigningRequest| csr.managed_fields_mut().clear()),
        )
        .for_each(move |event| {
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::InitDone) => wake.notify_one(),
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %e, "watching certificate signing requests failed; retrying")
                }
            }
            futures::future::ready(())
        })
    };
    let approve = async {
        loop {
            let _ = tokio::time::timeout(RECHECK, wake.notified()).await;
            pass(&ctx, &api, &store).await;
        }
    };
    tokio::select! {
        () = watch => {}
        () = approve => {}
    }
}

/// One look at every pending request.
async fn pass<P: CloudProvider>(
    ctx: &Context<P>,
    api: &Api<CertificateSigningRequest>,
    store: &Store<CertificateSigningRequest>,
) {
    let all = store.state();
    let now = k8s_openapi::jiff::Timestamp::now();
    for object in all.iter().filter(|csr| is_pending(csr)) {
        let created = object.creation_timestamp().map(|t| t.0);
        if created.is_some_and(|t| now.duration_since(t).unsigned_abs() > GIVE_UP_AFTER) {
            continue;
        }
        let spec = &object.spec;
        if spec.signer_name != policy::CLIENT_SIGNER && spec.signer_name != policy::SERVING_SIGNER {
            continue;
        }
        let Ok(request) = CertificateRequest::from_pem(&spec.request.0) else {
            continue;
        };
        let groups = spec.groups.clone().unwrap_or_default();
        let usages = spec.usages.clone().unwrap_or_default();
        let csr = Csr {
            signer: &spec.signer_name,
            username: spec.username.as_deref().unwrap_or_default(),
            groups: &groups,
            usages: &usages,
            request: &request,
            created,
        };
        let node_name = request
            .common_name
            .as_deref()
            .and_then(|cn| cn.strip_prefix("system:node:"))
            .unwrap_or_default();
        // Only the agent's own nodes are its business; a request naming any other node is
        // left for whoever approves that one, without a word.
        let Some((claim, id)) = own_claim(ctx, node_name) else {
            continue;
        };
        let decision = match policy::recognise(&csr) {
            Ok(None) => continue,
            Ok(Some(recognised)) => check(ctx, &csr, &recognised, &id, &all, object)
                .await
                .map(|()| recognised),
            Err(refusal) => Err(refusal.why),
        };
        match decision {
            Ok(recognised) => {
                if let Err(e) = approve(api, object, &recognised, &claim, &id).await {
                    warn!(csr = %object.name_any(), error = %e, "could not approve certificate request");
                }
            }
            Err(why) => {
                let note = format!(
                    "Certificate request {} of node {node_name} is not approved: {why}",
                    object.name_any()
                );
                let event = Event {
                    type_: EventType::Warning,
                    reason: NOT_APPROVED_REASON.to_owned(),
                    note: Some(note.clone()),
                    action: "ApproveCertificate".to_owned(),
                    secondary: None,
                };
                ctx.notices
                    .publish(&event, &claim.object_ref(&()), &note)
                    .await;
            }
        }
    }
}

/// Whether a request has neither been approved nor denied (nor failed).
fn is_pending(csr: &CertificateSigningRequest) -> bool {
    let conditions = csr.status.as_ref().and_then(|s| s.conditions.as_ref());
    !conditions.is_some_and(|c| {
        c.iter()
            .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied" | "Failed"))
    })
}

/// The NodeClaim (not being deleted) whose node or machine is called `node_name`, and its
/// machine's provider ID.
fn own_claim<P>(ctx: &Context<P>, node_name: &str) -> Option<(Arc<NodeClaim>, ProviderId)> {
    if node_name.is_empty() {
        return None;
    }
    ctx.cluster.claims.state().into_iter().find_map(|claim| {
        if claim.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let status = claim.status.as_ref()?;
        let id: ProviderId = status.provider_id.as_deref()?.parse().ok()?;
        let named =
            status.node_name.as_deref() == Some(node_name) || id.machine_name() == node_name;
        named.then_some((claim.clone(), id))
    })
}

/// The machine check, with what the cluster and the cloud say of the node.
async fn check<P: CloudProvider>(
    ctx: &Context<P>,
    csr: &Csr<'_>,
    recognised: &Recognised,
    id: &ProviderId,
    all: &[Arc<CertificateSigningRequest>],
    object: &CertificateSigningRequest,
) -> Result<(), String> {
    let registered = ctx
        .cluster
        .nodes
        .state()
        .iter()
        .any(|n| n.name == recognised.node_name);
    // The keys of bootstrap client requests for this node that were approved already.
    let approved: Vec<CertificateRequest> = if recognised.kind == Kind::BootstrapClient {
        all.iter()
            .filter(|other| other.metadata.uid != object.metadata.uid && !is_pending(other))
            .filter(|other| approved_condition(other))
            .filter(|other| other.spec.signer_name == policy::CLIENT_SIGNER)
            .filter(|other| {
                other
                    .spec
                    .username
                    .as_deref()
                    .is_none_or(|u| !u.starts_with("system:node:"))
            })
            .filter_map(|other| CertificateRequest::from_pem(&other.spec.request.0).ok())
            .filter(|other| {
                other.common_name.as_deref()
                    == Some(format!("system:node:{}", recognised.node_name).as_str())
            })
            .collect()
    } else {
        Vec::new()
    };
    let facts = NodeFacts {
        registered,
        approved_bootstrap_keys: approved.iter().map(|r| r.public_key.as_slice()).collect(),
    };
    let machine = ctx
        .provider
        .kubelet_identity(id)
        .await
        .map_err(|e| format!("the cloud could not say who machine {id} is: {e}"))?;
    policy::check_machine(csr, recognised, machine.as_ref(), &facts).map_err(|r| r.why)
}

/// Whether a request carries an Approved condition.
fn approved_condition(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Approved" && c.status == "True")
        })
}

/// Approves `object` through its `approval` subresource, on the version the watch delivered
/// (a conflict means someone else decided meanwhile; the next pass sees what).
async fn approve(
    api: &Api<CertificateSigningRequest>,
    object: &CertificateSigningRequest,
    recognised: &Recognised,
    claim: &NodeClaim,
    id: &ProviderId,
) -> Result<(), kube::Error> {
    let name = object.name_any();
    let what = match recognised.kind {
        Kind::BootstrapClient => "first client certificate",
        Kind::RenewedClient => "renewed client certificate",
        Kind::Serving => "serving certificate",
    };
    let mut approved = object.clone();
    approved.metadata.managed_fields = None;
    let status = approved.status.get_or_insert_with(Default::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".to_owned(),
            status: "True".to_owned(),
            reason: Some("AutoApproved".to_owned()),
            message: Some(format!(
                "Approved by karpenter-agent: the {what} of node {}, machine {id} of NodeClaim {}",
                recognised.node_name,
                claim.name_any()
            )),
            last_update_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            last_transition_time: None,
        });
    api.replace_subresource("approval", &name, &PostParams::default(), &approved)
        .await?;
    info!(
        csr = %name,
        node = %recognised.node_name,
        nodeclaim = %claim.name_any(),
        kind = what,
        "approved kubelet certificate request"
    );
    Ok(())
}
