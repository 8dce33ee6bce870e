//! The cache of offerings EC2 had no capacity for: the cloud-neutral one in
//! [`crate::cloud::unavailable`], shared with the gcp provider.

pub use crate::cloud::unavailable::{DEFAULT_TTL, UnavailableOfferings, key};
