//! The core library of kubectl-karpenter.
//!
//! Everything with logic lives here; the `karpenter-agent` and `kubectl-karpenter` binaries only
//! parse flags and wire these pieces together. The arrows run one way: controllers, setup and
//! explanations sit on top of scheduling, cloud providers and cluster state, which sit on top of
//! the API types ([`apis`]) and resource arithmetic.

pub mod apis;
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
pub mod proxy;
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
