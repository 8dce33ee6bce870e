//! How a VM says whose it is: the labels that name its cluster (and the cluster's location),
//! NodePool, NodeClaim and GCENodeClass, the metadata keys that keep the exact names labels may
//! have lost characters of, and GCE's rules for label keys and values. Launch writes them,
//! listing and lookups read them back.

/// VM label naming the cluster (GCE label keys cannot hold `/` or `.`).
pub(crate) const CLUSTER_LABEL: &str = "karpenter-k8s-gcp-cluster";
/// VM label naming the cluster's location (its region, or its zone for a zonal cluster). GKE
/// names a cluster by project, location and name, so two clusters of one name can share a
/// project; their agents tell their VMs apart by this.
pub(crate) const LOCATION_LABEL: &str = "karpenter-k8s-gcp-location";
/// GKE's own labels on its node VMs, which cost reports group by (set on ours too).
pub(crate) const GKE_CLUSTER_NAME_LABEL: &str = "goog-k8s-cluster-name";
pub(crate) const GKE_CLUSTER_LOCATION_LABEL: &str = "goog-k8s-cluster-location";
/// VM label naming the NodePool.
pub(crate) const NODE_POOL_LABEL: &str = "karpenter-sh-nodepool";
/// VM label naming the NodeClaim.
pub(crate) const NODE_CLAIM_LABEL: &str = "karpenter-sh-nodeclaim";
/// VM label naming the GCENodeClass.
pub(crate) const NODE_CLASS_LABEL: &str = "karpenter-k8s-gcp-gcenodeclass";
/// Metadata key holding the NodeClaim's exact name (labels may have lost characters).
pub(crate) const NODE_CLAIM_METADATA: &str = "karpenter-nodeclaim";
/// Metadata key holding the NodePool's exact name.
pub(crate) const NODE_POOL_METADATA: &str = "karpenter-nodepool";

/// A GCE label key: lowercase letters, digits, `_` and `-`, starting with a letter, at most 63.
pub(crate) fn gce_label_key(key: &str) -> String {
    let mut out = gce_label_value(key);
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, "k-");
        out.truncate(63);
    }
    out
}

/// A GCE label value: lowercase letters, digits, `_` and `-`, at most 63 characters.
pub(crate) fn gce_label_value(value: &str) -> String {
    let mut out: String = value
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(63);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_gce_rules() {
        assert_eq!(gce_label_value("Default.Pool_x"), "default-pool_x");
        assert_eq!(gce_label_key("1team"), "k-1team");
        assert_eq!(gce_label_value(&"x".repeat(80)).len(), 63);
    }
}
