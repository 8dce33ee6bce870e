//! Disruption decisions: which nodes to give back, and how (upstream's
//! `pkg/controllers/disruption` and `pkg/controllers/nodeclaim/{disruption,expiration}`, less
//! the writes). Every function here is pure over the objects and clock it is given, so the
//! agent's disruption controller and `kubectl karpenter explain` compute the same answer.
//!
//! One file per concept: `consolidatable` (when `consolidateAfter` lets consolidation consider a
//! claim), `drift` (whether a claim no longer matches its NodePool), `expiration` (when a claim's
//! `expireAfter` is reached).

pub mod consolidatable;
pub mod drift;
pub mod expiration;

pub use consolidatable::{ConsolidatableAt, consolidatable_at};
pub use expiration::{expires_at, is_expired};
