//! The packing loop behind [`super::schedule`]. The module docs of [`super`] describe the
//! algorithm; this folder is its implementation, split the way upstream Karpenter splits
//! `pkg/controllers/provisioning/scheduling`:
//!
//! * this file: the [`Solver`] and its round driver (upstream's `scheduler.go`: `Solve`, the
//!   queue of pods and the relaxation loop around each one);
//! * [`setup`]: resource dimensions, pod descriptions, topology groups and existing capacity,
//!   interned once per round;
//! * [`pools`]: NodePools with their instance types, DaemonSet overhead and limits (upstream's
//!   daemon overhead and remaining-resources bookkeeping in `scheduler.go`);
//! * [`instance_types`]: requirement states and the instance types each still allows, as a
//!   claim grows, with `minValues` (upstream's `nodeclaim.go` filtering and
//!   `instance_selection`);
//! * [`shapes`]: a pod at one relaxation level (upstream's `preferences.go`);
//! * [`topology`]: spread and pod (anti-)affinity checks against the group counts of
//!   [`crate::scheduling::topology`] (upstream's `topology.go`; the groups are its
//!   `topologygroup.go`);
//! * [`placement`]: placing a pod on an existing node, an in-flight claim or a claim of this
//!   round, or opening one (upstream's `existingnode.go`, `nodeclaim.go` and `trySchedule`);
//! * [`output`]: the [`Plan`] and its [`super::NewClaim`]s;
//! * [`reasons`]: why a pod could not be placed;
//! * [`ids`]: the typed indexes into the solver's tables.
//!
//! Vocabulary: a *bin* is anything a pod can be placed on (an existing node, an in-flight
//! NodeClaim, or a claim opened in this run); a *state* is an interned set of requirements of
//! one NodePool together with the pool's compatible instance types sorted by price under those
//! requirements; a *shape* is an interned pod description at one relaxation level. Memo tables
//! map (state, pod requirements) to the narrowed state, so the hot path compares integers.

mod bins;
mod ids;
mod instance_types;
mod output;
mod placement;
mod pools;
mod reasons;
mod setup;
mod shapes;
mod topology;

use self::bins::Bin;
use self::ids::{BinId, GroupId, Id, InfoId, KeyId, PodId, PoolId, ReqId, ShapeId, StateId, Table};
use self::instance_types::State;
use self::pools::Pool;
use self::reasons::Explained;
use self::shapes::{Info, Relax, Shape};
use self::topology::DomainSet;
use super::pod::{PodSpecInfo, PodView};
use super::requirements::{self, Requirements};
use super::topology::{Group, GroupKey, Kind};
use super::{Input, Plan};
// FxHash: the memo tables hash small integer keys millions of times; SipHash's DoS resistance
// buys nothing here, and a fixed hasher keeps runs identical. No output depends on the order of
// these maps: they are only looked up, never iterated.
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;

/// Prices closer than this are equal.
const PRICE_EPSILON: f64 = 1e-9;

/// One greedy solve of a round: the interned tables and the placement state.
pub(crate) struct Solver<'i, 'a, P> {
    input: &'i Input<'a, P>,
    dims: Vec<String>,
    dim_index: FxHashMap<String, usize>,
    cpu: usize,
    memory: usize,
    well_known: FxHashSet<String>,
    pools: Table<PoolId, Pool<'a>>,
    infos: Table<InfoId, Info>,
    info_ids: FxHashMap<PodSpecInfo, InfoId>,
    pod_info: Table<PodId, InfoId>,
    reqs: Table<ReqId, Requirements>,
    req_ids: FxHashMap<Requirements, ReqId>,
    shapes: Table<ShapeId, Shape>,
    shape_ids: FxHashMap<(InfoId, Relax), ShapeId>,
    states: Table<StateId, State>,
    state_ids: FxHashMap<(PoolId, Requirements), StateId>,
    transitions: FxHashMap<(StateId, ReqId), Option<StateId>>,
    narrows: FxHashMap<(StateId, KeyId, DomainSet), Option<StateId>>,
    filter_ok: FxHashMap<(StateId, ReqId), bool>,
    pod_masks: FxHashMap<(ReqId, KeyId), DomainSet>,
    /// Output of the last topology check: keys to narrow and their allowed domains.
    narrowed: Vec<(KeyId, DomainSet)>,
    keys: Table<KeyId, String>,
    key_ids: FxHashMap<String, KeyId>,
    /// Per topology key: the values it can take, sorted (a domain is an index into it).
    universe: Table<KeyId, Vec<String>>,
    groups: Table<GroupId, Group>,
    group_ids: FxHashMap<GroupKey, GroupId>,
    tracked_groups: Vec<GroupId>,
    bins: Table<BinId, Bin>,
    existing_index: BTreeSet<(u64, BinId)>,
    existing_req_ok: FxHashMap<(BinId, ReqId), bool>,
    placement: Table<PodId, Option<BinId>>,
    relaxed: Table<PodId, bool>,
    any_prefer_no_schedule: bool,
    scratch: Vec<BinId>,
    state_buf: Vec<StateId>,
    /// Explanations already built, by shape: (existing-node reasons, NodePool rejections).
    explained: FxHashMap<ShapeId, Explained>,
    /// Per pod description ([`InfoId`]): pods not placed yet (what a fresh claim is sized for).
    unplaced: Vec<u32>,
    /// When set, at most this many new claims may be opened (the single-node check).
    max_new_claims: Option<usize>,
    new_claims: usize,
}

/// Whether `used + add` fits within `cap` in every dimension.
fn fits_add(used: &[u64], add: &[u64], cap: &[u64]) -> bool {
    used.iter()
        .zip(add)
        .zip(cap)
        .all(|((u, a), c)| u.saturating_add(*a) <= *c)
}

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    /// A solver that tries NodePools for new claims in `pool_order` (indexes into
    /// `input.node_pools`) and opens at most `max_new_claims` claims when set.
    pub(crate) fn new(
        input: &'i Input<'a, P>,
        pool_order: &[usize],
        max_new_claims: Option<usize>,
    ) -> Self {
        let mut s = Self {
            input,
            dims: Vec::new(),
            dim_index: FxHashMap::default(),
            cpu: 0,
            memory: 0,
            well_known: requirements::WELL_KNOWN_LABELS
                .iter()
                .map(|k| (*k).to_owned())
                .collect(),
            pools: Table::new(),
            infos: Table::new(),
            info_ids: FxHashMap::default(),
            pod_info: Table::new(),
            reqs: Table::new(),
            req_ids: FxHashMap::default(),
            shapes: Table::new(),
            shape_ids: FxHashMap::default(),
            states: Table::new(),
            state_ids: FxHashMap::default(),
            transitions: FxHashMap::default(),
            narrows: FxHashMap::default(),
            filter_ok: FxHashMap::default(),
            pod_masks: FxHashMap::default(),
            narrowed: Vec::new(),
            keys: Table::new(),
            key_ids: FxHashMap::default(),
            universe: Table::new(),
            groups: Table::new(),
            group_ids: FxHashMap::default(),
            tracked_groups: Vec::new(),
            bins: Table::new(),
            existing_index: BTreeSet::new(),
            existing_req_ok: FxHashMap::default(),
            placement: Table::filled(input.pods.len(), None),
            relaxed: Table::filled(input.pods.len(), false),
            any_prefer_no_schedule: false,
            scratch: Vec::new(),
            state_buf: Vec::new(),
            explained: FxHashMap::default(),
            unplaced: Vec::new(),
            max_new_claims,
            new_claims: 0,
        };
        s.init(pool_order);
        s
    }

    /// Whether the pending pods can certainly not all share one node: some hostname
    /// anti-affinity term has a pending owner and at least two pending pods it selects.
    pub(crate) fn single_node_hopeless(&self) -> bool {
        self.groups.enumerate().any(|(g, group)| {
            if !group.is_hostname() || group.ident.kind != Kind::Anti || !group.has_required_owners
            {
                return false;
            }
            let owners = self
                .pod_info
                .iter()
                .filter(|i| self.infos[**i].anti_groups.contains(&g))
                .count();
            let selected = self
                .pod_info
                .iter()
                .filter(|i| self.infos[**i].selected_by.binary_search(&g).is_ok())
                .count();
            owners >= 1 && selected >= 2
        })
    }

    fn place(&mut self, pod: PodId) -> bool {
        let info_id = self.pod_info[pod];
        let spec = &self.infos[info_id].spec;
        if spec.invalid.is_some() || spec.volume_error.is_some() {
            return false;
        }
        let initial = self.initial_relax(&self.infos[info_id]);
        let mut relax = initial;
        loop {
            let shape = self.shape(info_id, relax);
            if self.try_place(pod, shape) {
                // Trying another of the volumes' alternatives relaxes no preference.
                let preferences = |r: Relax| Relax {
                    volume_term: 0,
                    ..r
                };
                self.relaxed[pod] = preferences(relax) != preferences(initial);
                if let Some(n) = self.unplaced.get_mut(info_id.index()) {
                    *n = n.saturating_sub(1);
                }
                return true;
            }
            match self.next_relax(&self.infos[info_id], relax) {
                Some(r) => relax = r,
                None => return false,
            }
        }
    }

    pub(crate) fn run(mut self) -> Plan {
        let mut queue: Vec<PodId> = self.pod_info.ids().collect();
        {
            // Pods that need a node to themselves (required hostname anti-affinity) go first: the
            // nodes they open are paid for anyway, and every later pod can fill their slack.
            let alone: Table<InfoId, bool> = self
                .infos
                .iter()
                .map(|i| i.anti_groups.iter().any(|g| self.groups[*g].is_hostname()))
                .collect();
            let infos = &self.infos;
            let pod_info = &self.pod_info;
            let (cpu, memory) = (self.cpu, self.memory);
            queue.sort_by(|a, b| {
                let (ia, ib) = (pod_info[*a], pod_info[*b]);
                let ra = &infos[ia].requests;
                let rb = &infos[ib].requests;
                alone[ib]
                    .cmp(&alone[ia])
                    .then(rb[cpu].cmp(&ra[cpu]))
                    .then(rb[memory].cmp(&ra[memory]))
                    .then(ia.cmp(&ib))
                    .then(a.cmp(b))
            });
        }
        loop {
            let mut failed = Vec::new();
            let before = queue.len();
            for pod in queue {
                if !self.place(pod) {
                    failed.push(pod);
                }
            }
            if failed.is_empty() || failed.len() == before {
                break;
            }
            queue = failed;
        }
        self.finish()
    }
}
