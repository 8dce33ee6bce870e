//! Cluster state as the agent watches it: the cached shape of each watched object (pods, Nodes
//! and NodeClaims trimmed to what the loops read), what the stores add up to (each NodePool's usage),
//! and [`scheduling_input`], the pure function from the stores' contents to the scheduler's
//! input.
//!
//! It sits between the controllers, which run the reflectors and own the API client, and the
//! scheduler: nothing here holds a client or awaits anything, so every function is a plain
//! function of what the stores hold (upstream's `pkg/controllers/state` cluster state, less
//! the informers that feed it).

pub mod claim_cache;
pub mod input;
pub mod node_cache;
pub mod pod_cache;
pub mod usage;

pub use claim_cache::trim_claim;
pub use input::{
    Catalogues, Snapshot, daemon_set_pods, is_provisionable, live_pools, node_classes,
    provisionable_pods, scheduling_input,
};
pub use node_cache::{Allocatable, CachedNode, NodeConditionState};
pub use pod_cache::{
    CachedPod, CachedPodStatus, PodMeta, ReplicaParts, ScheduledCondition, WatchedPod,
};
pub use usage::usage_by_pool;
