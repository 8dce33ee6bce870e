//! What the agent keeps of each NodeClaim: the object less the annotations only `kubectl
//! karpenter explain` reads, which it reads from the API server (the pods a claim was made for
//! and the instance types that fitted them: up to 20 options and a name per pod, a third of a
//! claim's size), and `kubectl apply`'s copy of the whole object. Every write the loops make to
//! a claim is a patch naming its own fields, so what is trimmed here is never written back.

use super::node_cache::LAST_APPLIED;
use crate::apis::{NodeClaim, labels};

/// Drops what no loop reads from a cached NodeClaim.
pub(crate) fn trim_claim(claim: &mut NodeClaim) {
    if let Some(annotations) = claim.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        annotations.remove(labels::PROVISIONED_FOR);
        annotations.remove(labels::INSTANCE_TYPE_OPTIONS);
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    #[test]
    fn a_cached_claim_keeps_the_hash_and_drops_what_only_explain_reads() {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "annotations": {
                labels::NODE_POOL_HASH: "123",
                labels::PROVISIONED_FOR: "[\"default/web-1\"]",
                labels::INSTANCE_TYPE_OPTIONS: "[{\"name\":\"m5.large\"}]",
            }},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        }))
        .expect("a claim");
        trim_claim(&mut claim);
        let kept: Vec<&String> = claim.annotations().keys().collect();
        assert_eq!(kept, vec![labels::NODE_POOL_HASH]);
    }
}
