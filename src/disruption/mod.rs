//! Disruption decisions: which nodes to give back, and how (upstream's
//! `pkg/controllers/disruption` and `pkg/controllers/nodeclaim/{disruption,expiration}`, less
//! the writes). Every function here is pure over the objects and clock it is given, so the
//! agent's disruption controller and `kubectl karpenter explain` compute the same answer.
//!
//! One file per concept: `consolidatable` (when `consolidateAfter` lets consolidation consider a
//! claim), `drift` (whether a claim no longer matches its NodePool), `expiration` (when a claim's
//! `expireAfter` is reached), `repair` (whether a node is unhealthy past its cloud's
//! toleration), `budgets` (how many nodes a pool lets go now), `protection` (what protects a
//! node or its pods now, and until when, shared with the drain), `disruptability` (what
//! blocks a claim, the one answer the agent and `explain` share), `candidate` (a judged claim
//! with its price and disruption cost), `consolidation` (the simulation without some nodes and
//! its verdict), `room` (a quick test that rules a simulation out), `balanced` (whether a move is worth it under `consolidationPolicy: Balanced`),
//! `methods` (repair, emptiness, static drift, drift, multi- and single-node consolidation),
//! `decision` (one pass over them, and the re-check before a command is carried out) and
//! `static_scale` (what a static pool launches or removes to keep its count).

pub mod balanced;
pub mod budgets;
pub mod candidate;
pub mod consolidatable;
pub mod consolidation;
pub mod decision;
pub mod disruptability;
pub mod drift;
pub(crate) mod expiration;
mod methods;
pub mod protection;
pub mod repair;
pub mod room;
pub(crate) mod static_scale;
#[cfg(test)]
mod tests;

pub use budgets::Allowance;
pub(crate) use budgets::reason_name;
pub use candidate::{Candidate, candidates as judge};

pub use consolidation::Outcome;
pub(crate) use consolidation::Replacement;
pub(crate) use decision::validate;
pub use decision::{Command, Decision, Disrupted, Input, Method, Options, decide};
pub use disruptability::Blocker;
pub use disruptability::BlockerKind;
pub use disruptability::disruptability;
pub use disruptability::{ClaimView, Disruptability};

pub use drift::{Drift, drifted};
pub(crate) use expiration::{expires_at, is_expired};
pub(crate) use static_scale::static_scale;
