//! The plan's new claims as NodeClaim objects (upstream's `NodeClaimTemplate.ToNodeClaim` and
//! the NodePool hash of `pkg/apis/v1/nodepool.go`): labels, annotations, the finalizer and the
//! owner reference every claim this agent creates carries.

use crate::apis::{NodeClaim, NodePool, labels};
use crate::scheduling::NewClaim;
use crate::state::CachedPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use rand::Rng;

/// A deterministic hash of a NodePool's template, less the fields upstream leaves out
/// (requirements), stamped on its claims so drift can be detected later.
pub fn node_pool_hash(pool: &NodePool) -> String {
    let mut template = serde_json::to_value(&pool.spec.template).unwrap_or_default();
    if let Some(spec) = template
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    {
        spec.remove("requirements");
    }
    // FNV-1a over the canonical JSON text (serde_json orders object keys).
    let text = template.to_string();
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash.to_string()
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// The NodeClaim object for a planned claim.
pub fn node_claim_for(plan: &NewClaim, pool: &NodePool, pods: &[&CachedPod]) -> NodeClaim {
    let mut annotations = pool.spec.template.metadata.annotations.clone();
    annotations.insert(labels::NODE_POOL_HASH.to_owned(), node_pool_hash(pool));
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
        serde_json::Value::from(pod_names).to_string(),
    );
    let options: Vec<serde_json::Value> = plan
        .instance_types
        .iter()
        .take(20)
        .map(|o| serde_json::json!({"name": o.name, "price": o.price, "zone": o.zone, "capacityType": o.capacity_type}))
        .collect();
    annotations.insert(
        labels::INSTANCE_TYPE_OPTIONS.to_owned(),
        serde_json::Value::from(options).to_string(),
    );
    let mut claim_labels = plan.labels.clone();
    claim_labels.insert(labels::NODE_POOL.to_owned(), pool.name_any());
    NodeClaim {
        metadata: ObjectMeta {
            name: Some(format!("{}-{}", pool.name_any(), random_suffix())),
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
