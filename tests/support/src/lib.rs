//! What the integration tests share, as one crate linked into every test binary that needs it
//! (the root package's `tests/*` and `plugin/tests`): the rig ([`rig`]), agents and workloads on
//! it for the cloud providers' tests ([`cloud_agent`]), where test logs go ([`logging`]), and the
//! contract every cloud provider passes ([`contract`]).
//!
//! The contract lives here rather than in the core library so it can ask for launch candidates
//! through the controllers' own `launch_candidates`; the in-memory fake runs it from
//! `tests/integration` (without the rig).
//!
//! A test binary links this crate once, so its statics (the rig started on first use, the lock
//! that keeps agents one at a time, the global subscriber) are one per test process, as they
//! were when each binary included these files with `#[path]`.

// Test support: a failed set-up is a failed test, and panicking with the reason is how it says so.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

pub mod cloud_agent;
pub mod contract;
pub mod logging;
pub mod rig;
