//! Cluster state as the agent watches it (upstream's `pkg/controllers/state`): the watches
//! ([`watches`]) that fill one shared handle on the cluster ([`Stores`]), the cached shape of each
//! watched object (pods, Nodes and NodeClaims trimmed to what the loops read), the cluster read
//! once for a decision ([`Gathered`]), what the stores add up to (each NodePool's usage), and
//! [`scheduling_input`], the pure function from a [`Snapshot`] to the scheduler's input.
//!
//! It sits between the controllers, which act and write, and the scheduler: the watches read the
//! API server through [`crate::client`] and write nothing; everything else here is a plain
//! function of what the stores hold.

pub(crate) mod claim_cache;
pub(crate) mod gather;
pub mod input;
pub(crate) mod node_cache;
pub(crate) mod pod_cache;
pub mod stores;
pub mod usage;
pub mod volumes;
pub mod watches;

pub use gather::Gathered;
pub use input::Snapshot;
pub use input::{Catalogues, daemon_set_pods, is_provisionable, scheduling_input};

pub use node_cache::CachedNode;
pub use node_cache::{Allocatable, NodeConditionState};
pub(crate) use pod_cache::ScheduledCondition;
pub use pod_cache::{CachedPod, ReplicaParts, WatchedPod};
pub use pod_cache::{CachedPodStatus, PodMeta};
pub use stores::namespace_labels;
pub use stores::{Stores, Writers};
pub(crate) use usage::usage_by_pool;

pub use watches::Observers;

pub use watches::{Observer, watches};
