//! The core library of kubectl-karpenter.
//!
//! Everything with logic lives here; the `karpenter-agent` and `kubectl-karpenter` binaries only
//! parse flags and wire these pieces together. The arrows run one way: controllers, setup and
//! explanations sit on top of scheduling, cloud providers and cluster state, which sit on top of
//! the API types ([`apis`]) and resource arithmetic.

pub mod apis;
pub mod cloud;
pub mod controllers;
pub mod disruption;
pub mod explain;
#[cfg(test)]
mod layers;
pub mod metrics;
pub mod resources;
pub mod scheduling;
pub mod setup;
pub mod state;
