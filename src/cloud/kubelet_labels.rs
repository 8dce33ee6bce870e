//! Which labels a kubelet may put on its own Node: what a launch can pass in its bootstrap
//! (`--node-labels`) and what a stand-in kubelet may apply. The rule is the kubelet's own
//! (`IsKubeletLabel` in k8s.io/kubernetes `pkg/kubelet/apis/well_known_labels.go`, enforced
//! for the node's credentials by the NodeRestriction admission plugin): any key outside the
//! `kubernetes.io` and `k8s.io` domains; inside them only the kubelet's well-known keys and the
//! `kubelet.kubernetes.io` and `node.kubernetes.io` namespaces. Everything else a NodeClaim
//! carries reaches the Node through the agent's registration, as upstream's.

use std::collections::BTreeMap;

/// Keys in the restricted domains that a kubelet sets itself.
const KUBELET_KEYS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// Namespaces in the restricted domains a kubelet may label under.
const KUBELET_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// Whether a kubelet may set `key` on its Node.
pub(crate) fn kubelet_may_set(key: &str) -> bool {
    if KUBELET_KEYS.contains(&key) {
        return true;
    }
    let Some((namespace, _)) = key.split_once('/') else {
        return true;
    };
    let namespace = namespace.to_ascii_lowercase();
    let in_domain =
        |domain: &str| namespace == domain || namespace.ends_with(&format!(".{domain}"));
    if !(in_domain("kubernetes.io") || in_domain("k8s.io")) {
        return true;
    }
    KUBELET_NAMESPACES.iter().any(|allowed| in_domain(allowed))
}

/// The labels of `labels` a kubelet may set.
pub fn kubelet_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| kubelet_may_set(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubelet_sets_custom_and_its_own_well_known_labels_but_not_karpenters_or_other_kubernetes_ones()
     {
        for key in [
            "tenant",
            "example.com/team",
            "karpenter.sh/nodepool",
            "karpenter.k8s.aws/instance-family",
            "kubernetes.io/arch",
            "node.kubernetes.io/instance-type",
            "node.kubernetes.io/lifecycle",
            "kubelet.kubernetes.io/custom",
            "topology.kubernetes.io/zone",
        ] {
            assert!(kubelet_may_set(key), "{key}");
        }
        for key in [
            "node-role.kubernetes.io/worker",
            "kubernetes.io/custom",
            "example.k8s.io/x",
            "node-restriction.kubernetes.io/pool",
        ] {
            assert!(!kubelet_may_set(key), "{key}");
        }
    }
}
