//! What the solver places pods on: bins, each an existing node, an in-flight claim or a claim
//! of this round, with what its pods use. Placement fills them; topology reads where they are.

use super::ids::{GroupId, PodId, StateId};
use crate::scheduling::pod::HostPort;

/// What a bin is: existing capacity (with its allocatable and the domain it is in per topology
/// key), or a claim of this round (its requirement state and the position of its current
/// cheapest type in that state's price order).
pub(super) enum BinKind {
    Node {
        idx: usize,
        cap: Vec<u64>,
        domains: Vec<Option<u16>>,
    },
    InFlight {
        idx: usize,
        cap: Vec<u64>,
        domains: Vec<Option<u16>>,
    },
    Claim {
        state: StateId,
        pos: usize,
    },
}

/// Anything a pod can be placed on, with what its pods use.
pub(super) struct Bin {
    pub(super) kind: BinKind,
    pub(super) used: Vec<u64>,
    pub(super) pods: Vec<PodId>,
    pub(super) ports: Vec<HostPort>,
    /// Selected-pod counts not yet attributed to a domain: (group, count).
    pub(super) pending: Vec<(GroupId, u32)>,
}
