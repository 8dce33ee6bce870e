//! Each NodePool's `karpenter.sh/nodepool-hash` and `-version` annotations, kept current as
//! upstream's `pkg/controllers/nodepool/hash/controller.go` keeps them, for people and tools to
//! read. When the pool's hash version is not the current one (a pool last stamped by an older
//! hashing scheme), its claims are re-stamped first, so a changed scheme does not make every
//! node look drifted (upstream's designs/drift-hash-versioning.md).

use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodePool, labels};
use crate::cloud::CloudProvider;
use crate::controllers::{Context, Error};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeMap;

/// Stamps `pool` (and, after a hash-version change, its claims) with its current hash.
pub(super) async fn reconcile<P: CloudProvider>(
    ctx: &Context<P>,
    pool: &NodePool,
) -> Result<(), Error> {
    let hash = pool.hash();
    let annotations = pool.annotations();
    let version_current = annotations
        .get(labels::NODE_POOL_HASH_VERSION)
        .is_some_and(|v| v == labels::NODE_POOL_HASH_VERSION_VALUE);
    restamp_claims(ctx, pool, &hash, version_current).await?;
    if version_current && annotations.get(labels::NODE_POOL_HASH) == Some(&hash) {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {
        labels::NODE_POOL_HASH: hash,
        labels::NODE_POOL_HASH_VERSION: labels::NODE_POOL_HASH_VERSION_VALUE,
    }}});
    match Api::<NodePool>::all(ctx.client.clone())
        .patch(
            &pool.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if crate::controllers::is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::kube("stamping the nodepool hash")(e)),
    }
}

async fn restamp_claims<P>(
    ctx: &Context<P>,
    pool: &NodePool,
    hash: &str,
    pool_version_current: bool,
) -> Result<(), Error> {
    let name = pool.name_any();
    let legacy = pool.legacy_hash();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for claim in ctx.cluster.claims.state() {
        if claim.labels().get(labels::NODE_POOL) != Some(&name) {
            continue;
        }
        let Some(annotations) = restamped(&claim, hash, &legacy, pool_version_current) else {
            continue;
        };
        let patch = json!({"metadata": {"annotations": annotations}});
        match api
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if crate::controllers::is_not_found(&e) => {}
            Err(e) => return Err(Error::kube("re-stamping the nodeclaim hash")(e)),
        }
    }
    Ok(())
}

/// The annotations that bring `claim` to the current hash, or `None` if it has it.
///
/// After a hash-version change of the pool (`pool_version_current` false), a claim of another
/// version takes the current version and the pool's hash; one already `Drifted` keeps its old
/// hash: what it drifted from cannot be recomputed under the new scheme, so it stays drifted
/// (as upstream). A claim an earlier agent stamped with its own hash of the unchanged template
/// (`legacy_hash`) takes upstream's.
fn restamped(
    claim: &NodeClaim,
    pool_hash: &str,
    legacy_hash: &str,
    pool_version_current: bool,
) -> Option<BTreeMap<&'static str, String>> {
    let annotations = claim.annotations();
    let version = annotations.get(labels::NODE_POOL_HASH_VERSION);
    if version.is_some_and(|v| v == labels::NODE_POOL_HASH_VERSION_VALUE) {
        let legacy = annotations.get(labels::NODE_POOL_HASH).map(String::as_str)
            == Some(legacy_hash)
            && legacy_hash != pool_hash;
        return legacy.then(|| BTreeMap::from([(labels::NODE_POOL_HASH, pool_hash.to_owned())]));
    }
    if pool_version_current {
        return None;
    }
    let mut annotations = BTreeMap::from([(
        labels::NODE_POOL_HASH_VERSION,
        labels::NODE_POOL_HASH_VERSION_VALUE.to_owned(),
    )]);
    if claim.condition(cond::DRIFTED).is_none() {
        annotations.insert(labels::NODE_POOL_HASH, pool_hash.to_owned());
    }
    Some(annotations)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(version: &str, conditions: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "annotations": {
                "karpenter.sh/nodepool-hash": "123", "karpenter.sh/nodepool-hash-version": version}},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"}},
            "status": {"conditions": conditions},
        }))
        .expect("a claim")
    }

    #[test]
    fn a_claim_of_an_older_hash_version_takes_the_pools_current_hash() {
        let stamped = restamped(&claim("v2", json!([])), "456", "789", false).expect("re-stamped");
        assert_eq!(stamped[labels::NODE_POOL_HASH], "456");
        assert_eq!(stamped[labels::NODE_POOL_HASH_VERSION], "v3");
    }

    #[test]
    fn a_drifted_claim_of_an_older_hash_version_keeps_its_hash_and_stays_drifted() {
        let drifted = json!([{"type": "Drifted", "status": "True", "reason": "NodePoolDrifted",
            "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}]);
        let stamped = restamped(&claim("v2", drifted), "456", "789", false).expect("re-stamped");
        assert!(!stamped.contains_key(labels::NODE_POOL_HASH));
        assert_eq!(stamped[labels::NODE_POOL_HASH_VERSION], "v3");
    }

    #[test]
    fn a_claim_of_the_current_hash_version_is_left_alone() {
        assert_eq!(
            restamped(&claim("v3", json!([])), "456", "789", false),
            None
        );
    }

    #[test]
    fn a_claim_of_an_older_version_waits_for_the_pools_version_change() {
        assert_eq!(restamped(&claim("v2", json!([])), "456", "789", true), None);
    }

    #[test]
    fn a_claim_stamped_by_an_earlier_agent_takes_upstreams_hash_of_the_same_template() {
        let stamped = restamped(&claim("v3", json!([])), "456", "123", true).expect("re-stamped");
        assert_eq!(stamped[labels::NODE_POOL_HASH], "456");
        assert!(!stamped.contains_key(labels::NODE_POOL_HASH_VERSION));
    }
}
