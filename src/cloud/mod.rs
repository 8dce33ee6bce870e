//! What the cloud offers and how to get it.
//!
//! Providers build the scheduler's instance-type values ([`crate::scheduling::InstanceType`]);
//! [`catalogue`] holds the helpers they share, `node_class_resolution` the node class resolution
//! (and its cache) the aws and gcp providers share. The `CloudProvider` trait (create, delete, get,
//! list, instance types, drift) and the aws/, gcp/, kwok/ and fake providers build on these types
//! and live beside this module.

pub mod catalogue;

#[cfg(feature = "aws")]
pub mod aws;
/// A provider that records its calls and fails on cue: for tests (the library's own, and with
/// the `fake` feature the integration tests'), never in a shipped binary.
#[cfg(any(test, feature = "fake"))]
pub mod fake;
#[cfg(feature = "gcp")]
pub mod gcp;
pub mod gcp_prices;
pub mod unavailable;

pub(crate) mod kubelet_flags;
pub mod kubelet_labels;
pub mod kwok;
pub(crate) mod last_good;
pub(crate) mod metered;
pub(crate) mod node_class_hash;
#[cfg(any(feature = "aws", feature = "gcp"))]
pub(crate) mod node_class_resolution;
pub(crate) mod node_classes;
pub mod provider;
pub mod repair;

pub use metered::Metered;

pub use provider::KubeletIdentity;
pub use provider::{
    CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId,
};
pub use repair::RepairPolicy;
