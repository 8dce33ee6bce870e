//! Cluster state as the agent watches it: the cached shape of each watched object (pods and
//! Nodes trimmed to what the loops read) and what the stores add up to (each NodePool's usage).
//!
//! It sits between the controllers, which run the reflectors and own the API client, and the
//! scheduler: nothing here holds a client or awaits anything, so every function is a plain
//! function of what the stores hold (upstream's `pkg/controllers/state` cluster state, less
//! the informers that feed it).

pub mod node_cache;
pub mod pod_cache;
pub mod usage;

pub use node_cache::trim_node;
pub use pod_cache::{CachedPod, CachedPodStatus, SharedSpecs};
pub use usage::usage_by_pool;
