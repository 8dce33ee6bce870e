//! The core library of kubectl-karpenter, and the map of the house.
//!
//! Everything with logic lives here; the `karpenter-agent` (`agent/`) and `kubectl-karpenter`
//! (`plugin/`) binaries read their flags, environment and signals, and wire these pieces
//! together. The modules stand in layers, and an arrow only ever points down: a module may use
//! its own layer and the ones below, never one above nor a sibling at its own height
//! (`src/layers.rs` checks it, and fails on a module it does not know).
//!
//! | height | modules | what they own |
//! |---|---|---|
//! | 7 | [`controllers`], [`setup`] | the agent's control loops, which act and write; what `init aws\|gcp` does, as a plan of idempotent steps |
//! | 6 | [`explain`], [`simulate`], [`migrate`] | the facts behind `status` and `explain`; a plan and its price before anything runs; Cluster Autoscaler's node groups as NodePools (all pure) |
//! | 5 | [`disruption`] | which nodes to give back, and how (pure) |
//! | 4 | [`state`] | the watches, the one handle on the cluster they fill, the cluster read once, and the pure step to the scheduler's input; reads only |
//! | 3 | [`cloud`] | the provider seam and its implementations (`aws`, `gcp`, `kwok`, a fake); cloud calls, no Kubernetes writes |
//! | 2 | [`scheduling`], [`convert`] | the scheduler (pure, synchronous: no client, no SDK); manifests of retired API versions rewritten for v1 |
//! | 1 | [`apis`], [`client`] | Karpenter's v1 API types (no I/O); how the library talks to the API server |
//! | 0 | [`resources`], [`metrics`], [`interner`] | quantities and their arithmetic; the Prometheus registry; shared strings |
//!
//! The rest of the repository: `agent/` (the agent binary and its Helm chart), `plugin/` (the
//! kubectl plugin), `krew/` (its krew index), `examples/` (manifests to copy), `tests/`
//! (integration tests against a real control plane, the test rig, the GCP fake, benchmarks).

// Helpers shared by the AWS and GCP providers are unused in a build without them (the fast
// core-only build); both binaries turn both on, where every item is used or warned about.
#![cfg_attr(not(all(feature = "aws", feature = "gcp")), allow(dead_code))]

pub mod apis;
pub mod client;
pub mod cloud;
pub mod controllers;
pub mod convert;
pub mod disruption;
pub mod explain;
pub mod interner;
#[cfg(test)]
mod layers;
pub mod metrics;
pub mod migrate;
pub mod resources;
pub mod scheduling;
pub mod setup;
pub mod simulate;
pub mod state;

#[cfg(test)]
mod licence {
    #[test]
    fn the_license_file_is_the_licence_cargo_toml_names() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/LICENSE"))
            .expect("a LICENSE file at the repository root");
        assert_eq!(env!("CARGO_PKG_LICENSE"), "Apache-2.0");
        let head: Vec<&str> = text.lines().take(2).map(str::trim).collect();
        assert_eq!(head, ["Apache License", "Version 2.0, January 2004"]);
        assert!(text.contains("END OF TERMS AND CONDITIONS"));
    }
}
