//! Every well-known label, annotation, taint and finalizer key, as upstream Karpenter spells it.
//!
//! Code never writes these keys inline: a typo in a key is a silent bug on a live cluster.

/// The group of the core API (`NodePool`, `NodeClaim`).
pub const GROUP: &str = "karpenter.sh";
/// The `coordination.k8s.io` Lease the agent's replicas elect their leader on, in the agent's
/// namespace (upstream's `LeaderElectionID`).
pub const LEADER_ELECTION_LEASE: &str = "karpenter-leader-election";

// --- Karpenter's own labels (karpenter.sh) ---
/// The NodePool a NodeClaim (and its Node) was created from.
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
/// `spot`, `on-demand` or `reserved`.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Set on a Node once Karpenter has seen it registered.
pub const NODE_REGISTERED: &str = "karpenter.sh/registered";
/// Set on a Node once it is Ready and its startup taints are gone.
pub const NODE_INITIALIZED: &str = "karpenter.sh/initialized";
/// Opt a Node out of taint synchronisation from its NodeClaim.
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";

/// The values of [`CAPACITY_TYPE`].
pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

// --- Well-known Kubernetes labels ---
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

/// Other keys for a well-known label (deprecated beta keys, CSI drivers' zone keys) and the
/// stable key each one means; requirements on either match both.
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
    ("failure-domain.beta.kubernetes.io/region", REGION),
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
    // The zone keys of the EBS and Persistent Disk CSI drivers, which their volumes' node
    // affinity names (upstream's AWS provider adds the first in `operator.go`).
    ("topology.ebs.csi.aws.com/zone", ZONE),
    ("topology.gke.io/zone", ZONE),
];

// --- Annotations ---
/// On a pod or a node: never disrupt it voluntarily.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// The annotation the kubelet puts on a static pod's mirror in the API.
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";
/// Set to `true` on a Node or NodeClaim to keep node repair off it (upstream's annotation,
/// independent of `do-not-disrupt`).
pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
/// Hash of the NodePool's `spec.template`, stamped on its NodeClaims to detect drift.
pub const NODE_POOL_HASH: &str = "karpenter.sh/nodepool-hash";
/// The version of the hashing scheme behind [`NODE_POOL_HASH`].
pub const NODE_POOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// The hashing scheme version upstream Karpenter v1 writes.
pub const NODE_POOL_HASH_VERSION_VALUE: &str = "v3";
/// When a NodeClaim's termination grace period runs out.
pub const NODE_CLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
/// Set when the scheduler had to relax a requirement's `minValues`.
pub const NODE_CLAIM_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

// --- Finalizers ---
/// Holds a NodeClaim or Node until its instance is gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

// --- Taints ---
/// Put on a node that is being disrupted, so nothing new lands on it.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// Put on a node until Karpenter has registered it.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";

// --- AWS (karpenter.k8s.aws) ---
pub const AWS_GROUP: &str = "karpenter.k8s.aws";
pub const AWS_INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const AWS_INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const AWS_INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const AWS_INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const AWS_INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const AWS_INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const AWS_INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const AWS_INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const AWS_INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const AWS_INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const AWS_INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const AWS_INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const AWS_INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const AWS_INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const AWS_INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const AWS_EC2_NODE_CLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Tag that marks subnets and security groups a cluster's nodes may use.
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";

// --- GCP (karpenter.k8s.gcp) ---
pub const GCP_GROUP: &str = "karpenter.k8s.gcp";
pub const GCP_INSTANCE_FAMILY: &str = "karpenter.k8s.gcp/instance-family";
pub const GCP_INSTANCE_SHAPE: &str = "karpenter.k8s.gcp/instance-shape";
pub const GCP_INSTANCE_GENERATION: &str = "karpenter.k8s.gcp/instance-generation";
pub const GCP_INSTANCE_SIZE: &str = "karpenter.k8s.gcp/instance-size";
pub const GCP_INSTANCE_CPU: &str = "karpenter.k8s.gcp/instance-cpu";
pub const GCP_INSTANCE_MEMORY: &str = "karpenter.k8s.gcp/instance-memory";
pub const GCP_INSTANCE_GPU_NAME: &str = "karpenter.k8s.gcp/instance-gpu-name";
pub const GCP_INSTANCE_GPU_COUNT: &str = "karpenter.k8s.gcp/instance-gpu-count";
pub const GCP_ZONE_ID: &str = "topology.k8s.gcp/zone-id";
pub const GCE_NODE_CLASS: &str = "karpenter.k8s.gcp/gcenodeclass";

// --- kwok simulation (karpenter.kwok.sh) ---
pub const KWOK_GROUP: &str = "karpenter.kwok.sh";
/// The label the kwok controller selects the Nodes it keeps alive by.
pub const KWOK_NODE: &str = "kwok.x-k8s.io/node";
/// The value of [`KWOK_NODE`] on simulated nodes.
pub const KWOK_NODE_FAKE: &str = "fake";
/// Hourly price of a node, read by eks-node-viewer and by `kubectl karpenter status`.
pub const INSTANCE_PRICE: &str = "eks-node-viewer/instance-price";

// --- This project's own annotations on NodeClaims (what `kubectl karpenter explain` reads) ---
/// JSON list of the pods (`namespace/name`) a NodeClaim was created for.
pub const PROVISIONED_FOR: &str = "kubectl-karpenter.io/provisioned-for";
/// JSON list of the instance types that fitted, cheapest first, with prices.
pub const INSTANCE_TYPE_OPTIONS: &str = "kubectl-karpenter.io/instance-type-options";

/// Label keys a NodePool may not set: they belong to the node or to Karpenter itself.
pub const RESTRICTED_LABELS: &[&str] = &[NODE_POOL, HOSTNAME];

/// Returns the stable key for a deprecated beta label key, or the key itself.
pub fn normalize(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(beta, _)| *beta == key)
        .map_or(key, |(_, stable)| stable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_keys_normalize_to_their_stable_key() {
        assert_eq!(normalize("failure-domain.beta.kubernetes.io/zone"), ZONE);
        assert_eq!(normalize("beta.kubernetes.io/arch"), ARCH);
        assert_eq!(normalize(ZONE), ZONE);
        assert_eq!(normalize("example.com/team"), "example.com/team");
    }
}
