//! How the library talks to the API server: the client both binaries build (no automatic
//! retries for the agent, every request but a watch bounded in time, named in `User-Agent`,
//! its writes fenced by the leader's Lease),
//! the proxy it goes through (as kubectl picks one), watches that survive an object the agent
//! cannot decode, and metadata lists that decode only the fields their callers read.
//!
//! Everything here is plumbing under the layers that use it: `state` watches through it,
//! `cloud`'s kwok provider lists through it, `controllers` read and write through it, and the
//! plugin builds its client here without importing any control loop. The API types below it
//! (`apis`) do no I/O.

mod agent;
pub mod fence;
pub(crate) mod lenient_watch;
pub(crate) mod metadata_list;
pub mod proxy;

pub use agent::{agent_client, bounded_client, fenced_agent_client, identify};
pub use fence::Fence;
