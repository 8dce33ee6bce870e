//! Cluster state as the agent watches it (upstream's `pkg/controllers/state`): the watches
//! ([`watches`]) that fill one shared handle on the cluster ([`Stores`]), the cached shape of each
//! watched object (pods, Nodes and NodeClaims trimmed to what the loops read), the cluster read
//! once for a decision ([`Gathered`]), what the stores add up to (each NodePool's usage), and
//! [`scheduling_input`], the pure function from a [`Snapshot`] to the scheduler's input.
//!
//! It sits between the controllers, which act and write, and the scheduler: the watches read the
//! API server through [`crate::client`] and write nothing; everything else here is a plain
//! function of what the stores hold.

pub mod claim_cache;
pub mod gather;
pub mod input;
pub mod node_cache;
pub mod pod_cache;
pub mod stores;
pub mod usage;
pub mod volumes;
pub mod watches;

pub use claim_cache::trim_claim;
pub use gather::Gathered;
pub use input::{
    Catalogues, Snapshot, daemon_set_pods, is_provisionable, live_pools, node_classes,
    provisionable_pods, scheduling_input,
};
pub use node_cache::{Allocatable, CachedNode, NodeConditionState};
pub use pod_cache::{
    CachedPod, CachedPodStatus, PodMeta, ReplicaParts, ScheduledCondition, WatchedPod,
};
pub use stores::{Stores, Writers, namespace_labels};
pub use usage::usage_by_pool;
pub use volumes::VolumeStores;
pub use watches::{Observer, Observers, Watch, watches};
