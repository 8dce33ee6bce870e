//! What a round writes: the plan's new claims as NodeClaim objects (upstream's
//! `NodeClaimTemplate.ToNodeClaim`, with the NodePool hash of `pkg/apis/v1/nodepool.go`), handed
//! to `creates.rs`; what it tells the pods nothing can hold is `unschedulable.rs`.

use crate::apis::{NodeClaim, NodePool, RecordedInstanceType, labels, nodeclaim_annotations};
use crate::scheduling::{Input, NewClaim, Plan};
use crate::state::CachedPod;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use rand::Rng;

/// A new claim name for `pool`: upstream's `generateName` of the pool's name and five
/// characters from the API server's alphabet. Chosen here, not by the server, so the round can
/// count the claim under its name before the create is answered; a name another claim holds
/// already is answered 409, and `creates.rs` picks another (at 5,000 claims, one of 14.3
/// million suffixes repeats about once per scale-out: seen at 20,000 pods).
pub(super) fn claim_name(pool: &str) -> String {
    format!("{pool}-{}", random_suffix())
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// The NodeClaim object for a planned claim.
pub(crate) fn node_claim_for(plan: &NewClaim, pool: &NodePool, pods: &[&CachedPod]) -> NodeClaim {
    let mut annotations = pool.spec.template.metadata.annotations.clone();
    annotations.insert(labels::NODE_POOL_HASH.to_owned(), pool.hash());
    annotations.insert(
        labels::NODE_POOL_HASH_VERSION.to_owned(),
        labels::NODE_POOL_HASH_VERSION_VALUE.to_owned(),
    );
    let pod_names: Vec<String> = plan
        .pods
        .iter()
        .filter_map(|&i| pods.get(i))
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    annotations.insert(
        labels::PROVISIONED_FOR.to_owned(),
        nodeclaim_annotations::provisioned_for_value(&pod_names),
    );
    let options: Vec<RecordedInstanceType> = plan
        .instance_types
        .iter()
        .take(nodeclaim_annotations::RECORDED_INSTANCE_TYPES)
        .map(|o| RecordedInstanceType {
            name: o.name.clone(),
            price: o.known_price(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.to_string(),
        })
        .collect();
    annotations.insert(
        labels::INSTANCE_TYPE_OPTIONS.to_owned(),
        nodeclaim_annotations::instance_type_options_value(&options),
    );
    let mut claim_labels = plan.node_labels();
    claim_labels.insert(labels::NODE_POOL.to_owned(), pool.name_any());
    NodeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&pool.name_any())),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![labels::TERMINATION_FINALIZER.to_owned()]),
            owner_references: pool.controller_owner_ref(&()).map(|mut owner| {
                // The pool owns its claims for garbage collection, but deleting a pool must not
                // block on them.
                owner.block_owner_deletion = Some(false);
                owner.controller = Some(false);
                vec![owner]
            }),
            ..ObjectMeta::default()
        },
        spec: plan.to_node_claim_spec(pool),
        status: None,
    }
}

/// A claim the round decided on, with what its create reports.
pub(super) struct ClaimToCreate {
    pub claim: NodeClaim,
    pub node_pool: String,
    /// The pods it was planned for: to time how long each waited for a claim, and to tell
    /// them when the API server refused it.
    pub pods: Vec<ObjectReference>,
    pub cheapest: Option<String>,
}

/// The plan's new claims as the objects to create, each with what its create reports.
pub(super) fn claims_to_create(plan: &Plan, input: &Input<'_, CachedPod>) -> Vec<ClaimToCreate> {
    plan.new_claims
        .iter()
        .filter_map(|planned| {
            let pool = input
                .node_pools
                .iter()
                .map(|p| p.node_pool)
                .find(|p| p.name_any() == planned.node_pool)?;
            Some(ClaimToCreate {
                claim: node_claim_for(planned, pool, &input.pods),
                node_pool: planned.node_pool.clone(),
                pods: planned
                    .pods
                    .iter()
                    .filter_map(|&i| Some(input.pods.get(i)?.object_ref()))
                    .collect(),
                cheapest: planned.instance_types.first().map(|o| o.name.clone()),
            })
        })
        .collect()
}
