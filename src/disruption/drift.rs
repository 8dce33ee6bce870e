//! Drift: whether a NodeClaim no longer matches what its NodePool would launch now, and why,
//! as upstream's `pkg/controllers/nodeclaim/disruption/drift.go` decides it, with its reason
//! names. The checks run in upstream's order and the first that finds drift wins: the pool's
//! template hash (`NodePoolDrifted`), the pool's requirements (`RequirementsDrifted`), then the
//! catalogue (`InstanceTypeNotFound`). The cloud's own verdict (a changed image, upstream's
//! `CloudProvider.IsDrifted`) needs an API call, so the controller asks the provider after
//! these and reports it as [`DriftReason::Cloud`].

use crate::apis::CapacityType;
use crate::apis::{NodeClaim, NodePool, labels};
use crate::scheduling::requirements::is_well_known;
use crate::scheduling::{InstanceType, Requirement, Requirements};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;
use std::fmt;

/// How old a claim must be before a catalogue without its instance type or offering counts as
/// drift, as upstream: a catalogue that lags a launch must not flag a node just made.
pub(crate) const INSTANCE_TYPE_NOT_FOUND_AFTER: SignedDuration = SignedDuration::from_hours(1);

/// Why a claim drifted, named as upstream names it (the `Drifted` condition's reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriftReason {
    /// The NodePool's template (labels, annotations, taints, node class, expiry...) changed
    /// since the claim was made: its `karpenter.sh/nodepool-hash` differs.
    NodePoolDrifted,
    /// The claim's labels no longer satisfy the NodePool's requirements.
    RequirementsDrifted,
    /// The catalogue no longer has the claim's instance type, or no offering of it in the
    /// claim's zone and capacity type.
    InstanceTypeNotFound,
    /// The cloud says the machine no longer matches its node class (e.g. a new image); the
    /// provider names the reason.
    Cloud(String),
}

impl DriftReason {
    /// The reason as the condition spells it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::NodePoolDrifted => "NodePoolDrifted",
            Self::RequirementsDrifted => "RequirementsDrifted",
            Self::InstanceTypeNotFound => "InstanceTypeNotFound",
            Self::Cloud(reason) => reason,
        }
    }
}

impl fmt::Display for DriftReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A drifted claim: the reason, and a sentence a user can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    pub reason: DriftReason,
    pub message: String,
}

/// Whether `claim`, a node of `pool`, has drifted at `now`. `catalogue` is the pool's node
/// class's whole catalogue (unavailable offerings included) when known; without it (or when it
/// is empty, which says more about the provider than about the claim) the instance type is not
/// judged.
pub fn drifted(
    claim: &NodeClaim,
    pool: &NodePool,
    catalogue: Option<&[InstanceType]>,
    now: Timestamp,
) -> Option<Drift> {
    let catalogue = catalogue.filter(|c| !c.is_empty());
    node_pool_drifted(claim, pool)
        .or_else(|| requirements_drifted(claim, pool, catalogue))
        .or_else(|| {
            let old_enough = claim
                .metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|created| {
                    now.duration_since(created.0) > INSTANCE_TYPE_NOT_FOUND_AFTER
                });
            catalogue
                .filter(|_| old_enough)
                .and_then(|catalogue| instance_type_not_found(claim, catalogue))
        })
}

/// Upstream's `areStaticFieldsDrifted`: the claim's hash differs from the pool's, judged only
/// when both were computed the same way (the claim's hash version is the current one). The
/// pool's hash is computed here rather than read from its annotation, so a change counts before
/// the hash controller has re-stamped the pool.
fn node_pool_drifted(claim: &NodeClaim, pool: &NodePool) -> Option<Drift> {
    let annotations = claim.metadata.annotations.as_ref()?;
    let claim_hash = annotations.get(labels::NODE_POOL_HASH)?;
    let version = annotations.get(labels::NODE_POOL_HASH_VERSION)?;
    if version != labels::NODE_POOL_HASH_VERSION_VALUE {
        return None;
    }
    let pool_hash = pool.hash();
    // A claim an earlier agent stamped with its own hash of the same template has not drifted
    // (the hash loop re-stamps it with upstream's).
    (*claim_hash != pool_hash && *claim_hash != pool.legacy_hash()).then(|| Drift {
        reason: DriftReason::NodePoolDrifted,
        message: format!(
            "NodePool {} has changed since this node was made (template hash {claim_hash}, now {pool_hash})",
            name(pool.metadata.name.as_deref()),
        ),
    })
}

/// Upstream's `areRequirementsDrifted`: the pool's requirements must be compatible with the
/// claim's labels. Upstream's claims carry every single-valued label of their instance type
/// (arch, family, CPU count...); this agent's claims carry the instance type, zone and capacity
/// type, so the rest are read from the catalogue when it is known, and a well-known label still
/// unknown is allowed (as `AllowUndefinedWellKnownLabels`), not taken for a mismatch.
fn requirements_drifted(
    claim: &NodeClaim,
    pool: &NodePool,
    catalogue: Option<&[InstanceType]>,
) -> Option<Drift> {
    // An unreadable requirement is refused by the CRD's rules; without a reading, no verdict.
    let wanted = Requirements::from_api(&pool.spec.template.spec.requirements).ok()?;
    let mut node_labels = claim_labels(claim).clone();
    if let Some(instance_type) = catalogue.and_then(|c| instance_type_of(claim, c)) {
        for (key, value) in instance_type.fixed_labels() {
            node_labels.entry(key).or_insert(value);
        }
    }
    let has = Requirements::from_labels(&node_labels);
    let incompatibility = has.compatible(&wanted, is_well_known).err()?;
    Some(Drift {
        reason: DriftReason::RequirementsDrifted,
        message: format!(
            "NodePool {} {}",
            name(pool.metadata.name.as_deref()),
            incompatibility.describe("this node")
        ),
    })
}

/// Upstream's `instanceTypeNotFound`: the claim has no instance type label, the catalogue no
/// longer lists its type, or no offering of it (available or not) matches the claim's zone and
/// capacity type. A `reserved` claim may have been demoted to on-demand after launch, so either
/// matches.
fn instance_type_not_found(claim: &NodeClaim, catalogue: &[InstanceType]) -> Option<Drift> {
    let claim_labels = claim_labels(claim);
    let Some(type_name) = claim_labels.get(labels::INSTANCE_TYPE) else {
        return Some(Drift {
            reason: DriftReason::InstanceTypeNotFound,
            message: format!("the node has no {} label", labels::INSTANCE_TYPE),
        });
    };
    let Some(instance_type) = instance_type_of(claim, catalogue) else {
        return Some(Drift {
            reason: DriftReason::InstanceTypeNotFound,
            message: format!("instance type {type_name} is no longer offered"),
        });
    };
    let mut offered_as = Requirements::from_labels(claim_labels);
    if claim_labels.get(labels::CAPACITY_TYPE).map(String::as_str)
        == Some(CapacityType::Reserved.as_str())
    {
        offered_as.remove(labels::CAPACITY_TYPE);
        offered_as.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            [CapacityType::Reserved, CapacityType::OnDemand],
        ));
    }
    if instance_type
        .offerings
        .iter()
        .any(|o| o.allowed_by(&offered_as))
    {
        return None;
    }
    let label = |key| claim_labels.get(key).map_or("?", String::as_str);
    Some(Drift {
        reason: DriftReason::InstanceTypeNotFound,
        message: format!(
            "instance type {type_name} is no longer offered as {} in {}",
            label(labels::CAPACITY_TYPE),
            label(labels::ZONE),
        ),
    })
}

fn instance_type_of<'c>(
    claim: &NodeClaim,
    catalogue: &'c [InstanceType],
) -> Option<&'c InstanceType> {
    let type_name = claim_labels(claim).get(labels::INSTANCE_TYPE)?;
    catalogue.iter().find(|it| it.name == *type_name)
}

fn claim_labels(claim: &NodeClaim) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    claim.metadata.labels.as_ref().unwrap_or(&NONE)
}

fn name(name: Option<&str>) -> &str {
    name.unwrap_or("(unnamed)")
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::resources::ResourceList;
    use crate::scheduling::Offering;
    use serde_json::json;

    const NOW: &str = "2026-12-01T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().expect("time")
    }

    fn pool(labels: serde_json::Value, requirements: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {
                "metadata": {"labels": labels},
                "spec": {"requirements": requirements, "expireAfter": "720h",
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
            }},
        }))
        .expect("a NodePool")
    }

    fn on_demand() -> serde_json::Value {
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}])
    }

    /// A claim of `pool` as provisioning made it and launch labelled it, created `age` ago.
    fn claim_of(pool: &NodePool, age: SignedDuration, capacity_type: &str) -> NodeClaim {
        let created = now().checked_sub(age).expect("time");
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "creationTimestamp": created.to_string(),
                "labels": {
                    "team": "web",
                    "karpenter.sh/nodepool": "default",
                    "node.kubernetes.io/instance-type": "c-4x-amd64-linux",
                    "topology.kubernetes.io/zone": "test-zone-a",
                    "karpenter.sh/capacity-type": capacity_type,
                },
                "annotations": {
                    "karpenter.sh/nodepool-hash": pool.hash(),
                    "karpenter.sh/nodepool-hash-version": "v3",
                },
            },
            "spec": {"requirements": [], "expireAfter": "720h",
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
        }))
        .expect("a NodeClaim")
    }

    fn catalogue() -> Vec<InstanceType> {
        let mut it = InstanceType::new("c-4x-amd64-linux", ResourceList::default());
        it.requirements
            .add(Requirement::in_values("kubernetes.io/arch", ["amd64"]));
        it.offerings = vec![
            Offering::new("test-zone-a", CapacityType::OnDemand, 0.2),
            Offering {
                available: false,
                ..Offering::new("test-zone-a", CapacityType::Spot, 0.1)
            },
        ];
        vec![it]
    }

    fn web() -> NodePool {
        pool(json!({"team": "web"}), on_demand())
    }

    const DAY: SignedDuration = SignedDuration::from_hours(24);

    #[test]
    fn a_claim_made_from_the_current_template_has_not_drifted() {
        let pool = web();
        let claim = claim_of(&pool, DAY, "on-demand");
        assert_eq!(drifted(&claim, &pool, Some(&catalogue()), now()), None);
    }

    #[test]
    fn changing_the_template_labels_drifts_the_pools_claims() {
        let claim = claim_of(&web(), DAY, "on-demand");
        let changed = pool(json!({"team": "api"}), on_demand());
        let drift = drifted(&claim, &changed, None, now()).expect("drifted");
        assert_eq!(drift.reason, DriftReason::NodePoolDrifted);
        assert_eq!(drift.reason.as_str(), "NodePoolDrifted");
        assert!(
            drift.message.contains("NodePool default has changed"),
            "{}",
            drift.message
        );
    }

    #[test]
    fn a_hash_from_another_hash_version_is_not_compared() {
        let mut claim = claim_of(&web(), DAY, "on-demand");
        claim
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert(labels::NODE_POOL_HASH_VERSION.to_owned(), "v2".to_owned());
        let changed = pool(json!({"team": "api"}), on_demand());
        assert_eq!(drifted(&claim, &changed, None, now()), None);
    }

    #[test]
    fn a_claim_stamped_by_an_earlier_agent_has_not_drifted_until_the_template_changes() {
        let web = web();
        let mut claim = claim_of(&web, DAY, "on-demand");
        claim
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert(labels::NODE_POOL_HASH.to_owned(), web.legacy_hash());
        assert_eq!(drifted(&claim, &web, None, now()), None);
        let changed = pool(json!({"team": "api"}), on_demand());
        assert_eq!(
            drifted(&claim, &changed, None, now()).map(|d| d.reason),
            Some(DriftReason::NodePoolDrifted)
        );
    }

    #[test]
    fn a_claim_without_a_hash_is_not_judged_by_it() {
        let mut claim = claim_of(&web(), DAY, "on-demand");
        claim.metadata.annotations = None;
        let changed = pool(json!({"team": "api"}), on_demand());
        assert_eq!(drifted(&claim, &changed, None, now()), None);
    }

    #[test]
    fn a_pool_that_no_longer_allows_the_claims_capacity_type_drifts_it() {
        let claim = claim_of(&web(), DAY, "on-demand");
        // Requirements are not in the hash, so only the requirement check can see this.
        let spot_only = pool(
            json!({"team": "web"}),
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]),
        );
        let drift = drifted(&claim, &spot_only, None, now()).expect("drifted");
        assert_eq!(drift.reason, DriftReason::RequirementsDrifted);
        assert!(
            drift.message.contains("karpenter.sh/capacity-type"),
            "{}",
            drift.message
        );
    }

    #[test]
    fn a_custom_label_the_node_lacks_drifts_it() {
        let claim = claim_of(&web(), DAY, "on-demand");
        let wants_gpu = pool(
            json!({"team": "web"}),
            json!([{"key": "example.com/gpu", "operator": "Exists"}]),
        );
        let drift = drifted(&claim, &wants_gpu, None, now()).expect("drifted");
        assert_eq!(drift.reason, DriftReason::RequirementsDrifted);
    }

    #[test]
    fn a_well_known_label_the_claim_does_not_carry_is_read_from_its_instance_type() {
        let claim = claim_of(&web(), DAY, "on-demand");
        let arm = pool(
            json!({"team": "web"}),
            json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]),
        );
        // Without the catalogue the arch is unknown, which is not a mismatch...
        assert_eq!(drifted(&claim, &arm, None, now()), None);
        // ...with it, the node is amd64 and the pool now wants arm64.
        let drift = drifted(&claim, &arm, Some(&catalogue()), now()).expect("drifted");
        assert_eq!(drift.reason, DriftReason::RequirementsDrifted);
        let amd = pool(
            json!({"team": "web"}),
            json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]),
        );
        assert_eq!(drifted(&claim, &amd, Some(&catalogue()), now()), None);
    }

    #[test]
    fn an_instance_type_gone_from_the_catalogue_drifts_an_hour_old_claim_only() {
        let pool = web();
        let other = vec![InstanceType::new(
            "m-2x-amd64-linux",
            ResourceList::default(),
        )];
        let young = claim_of(&pool, SignedDuration::from_mins(30), "on-demand");
        assert_eq!(drifted(&young, &pool, Some(&other), now()), None);
        let old = claim_of(&pool, DAY, "on-demand");
        let drift = drifted(&old, &pool, Some(&other), now()).expect("drifted");
        assert_eq!(drift.reason, DriftReason::InstanceTypeNotFound);
        assert!(
            drift.message.contains("c-4x-amd64-linux"),
            "{}",
            drift.message
        );
    }

    #[test]
    fn an_unavailable_offering_still_counts_as_offered() {
        let spot = pool(json!({"team": "web"}), json!([]));
        let claim = claim_of(&spot, DAY, "spot");
        assert_eq!(drifted(&claim, &spot, Some(&catalogue()), now()), None);
    }

    #[test]
    fn a_zone_no_longer_offered_drifts_the_claim() {
        let pool = web();
        let mut claim = claim_of(&pool, DAY, "on-demand");
        claim
            .metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert(labels::ZONE.to_owned(), "test-zone-b".to_owned());
        let drift = drifted(&claim, &pool, Some(&catalogue()), now()).expect("drifted");
        assert_eq!(drift.reason, DriftReason::InstanceTypeNotFound);
        assert!(drift.message.contains("test-zone-b"), "{}", drift.message);
    }

    #[test]
    fn a_reserved_claim_may_have_become_on_demand() {
        let pool = pool(json!({"team": "web"}), json!([]));
        let claim = claim_of(&pool, DAY, "reserved");
        assert_eq!(drifted(&claim, &pool, Some(&catalogue()), now()), None);
    }

    #[test]
    fn an_empty_catalogue_is_not_taken_to_mean_every_type_is_gone() {
        let pool = web();
        let claim = claim_of(&pool, DAY, "on-demand");
        assert_eq!(drifted(&claim, &pool, Some(&[]), now()), None);
    }
}
