//! The packing loop behind [`super::schedule`]. The module docs of [`super`] describe the
//! algorithm; this file is its implementation.
//!
//! Vocabulary: a *bin* is anything a pod can be placed on (an existing node, an in-flight
//! NodeClaim, or a claim opened in this run); a *state* is an interned set of requirements of
//! one NodePool together with the pool's compatible instance types sorted by price under those
//! requirements; a *shape* is an interned pod description at one relaxation level. Memo tables
//! map (state, pod requirements) to the narrowed state, so the hot path compares integers.

use super::InstanceType;
use super::explain::{Closest, PoolReason, PoolRejection, Shortfall, Unschedulable};
use super::pod::{HostPort, PodSpecInfo, PodTerm, PodView};
use super::requirements::{self, Requirement, Requirements};
use super::taints::{self, DisplayTaint};
use super::topology::{Group, GroupKey, Kind, List};
use super::{
    ExistingPlacement, Input, InstanceTypeOption, NewClaim, Plan, PreferencePolicy, Target,
};
use crate::apis::labels;
use crate::resources::{self, ResourceList};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

/// Claims examined per requirement state when looking for one with room at no extra cost.
const ZERO_SCAN: usize = 48;
/// Claims examined per requirement state when looking for the cheapest one to grow.
const GROW_SCAN: usize = 16;
/// Eligible claims examined for a pod with hostname anti-affinity or hostname spread.
const LIST_SCAN: usize = 64;
/// Existing nodes examined per pod.
const EXISTING_SCAN: usize = 512;
/// Prices closer than this are equal.
const PRICE_EPSILON: f64 = 1e-9;

/// How far a pod's preferences have been relaxed, in upstream's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Relax {
    required_term: u32,
    preferred_affinity: u32,
    preferred_anti: u32,
    preferred_node: u32,
    soft_spread: u32,
    tolerate_prefer_no_schedule: bool,
}

/// One distinct pod spec, with its groups resolved.
struct Info {
    spec: PodSpecInfo,
    requests: Rc<[u64]>,
    tolerations: Vec<Toleration>,
    spread_groups: Vec<u32>,
    affinity_groups: Vec<u32>,
    preferred_affinity_groups: Vec<u32>,
    anti_groups: Vec<u32>,
    preferred_anti_groups: Vec<u32>,
    /// Groups whose selector and namespaces select this pod.
    selected_by: Vec<u32>,
    /// Required anti-affinity groups (with owners) that select this pod.
    inverse: Vec<u32>,
}

/// A pod spec at one relaxation level.
struct Shape {
    info: u32,
    req: u32,
    strict_req: u32,
    tolerations: Vec<Toleration>,
    owned: Vec<u32>,
    owned_required_anti: Vec<u32>,
    host_affinity: Vec<u32>,
    /// Hostname groups that exclude bins: (group, true when it is the inverse list).
    exclusive: Vec<(u32, List)>,
    tolerates_pool: Vec<Option<bool>>,
    compat_states: Vec<u32>,
    states_checked: usize,
}

struct Pool<'a> {
    name: String,
    reqs: Requirements,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    startup_taints: Vec<Taint>,
    types: Vec<&'a InstanceType>,
    /// Allocatable minus DaemonSet overhead, `types.len() × dims`.
    alloc: Vec<u64>,
    daemon: Vec<ResourceList>,
    /// (resource, limit, remaining) for limited resources other than `nodes`.
    limits: Vec<(String, u64, u64)>,
    /// `types.len() × limits.len()`: what each type counts against each limit (its capacity).
    limit_cost: Vec<u64>,
    /// (limit, remaining) for `nodes`.
    node_limit: Option<(u64, u64)>,
    daemon_ports: Vec<HostPort>,
    base: Option<u32>,
    invalid: Option<String>,
}

struct State {
    pool: usize,
    reqs: Requirements,
    /// Pool type indexes, cheapest first.
    order: Vec<u32>,
    price: Vec<f64>,
    /// Index of each type's cheapest offering in its `offerings`.
    offering: Vec<u16>,
    /// `(order.len() + 1) × dims`: componentwise max allocatable of `order[i..]`.
    suffix: Vec<u64>,
    /// Open claims in this state by (CPU slack, bin).
    slack: BTreeSet<(u64, u32)>,
    /// Per topology key: the domains some type of this state can land in (lazy).
    domains: Vec<Option<DomainSet>>,
    min_values: bool,
}

enum BinKind {
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
        state: u32,
        pos: usize,
    },
}

struct Bin {
    kind: BinKind,
    used: Vec<u64>,
    pods: Vec<u32>,
    ports: Vec<HostPort>,
    /// Selected-pod counts not yet attributed to a domain: (group, count).
    pending: Vec<(u32, u32)>,
}

#[derive(Clone, Copy, Debug)]
struct Eval {
    state: u32,
    pos: usize,
    delta: f64,
}

/// A set of domains of one topology key, as bits of the key's sorted universe.
type DomainSet = u128;
/// Topology keys other than the hostname keep at most this many domains (zones, racks, ...).
const MAX_DOMAINS: usize = 128;

/// The domains in a set, lowest first.
fn bits(mut set: DomainSet) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (set != 0).then(|| {
            let d = set.trailing_zeros() as usize;
            set &= set - 1;
            d
        })
    })
}

/// Why a topology check failed, kept cheap: the sentence is built only for explanations.
#[derive(Clone, Copy, Debug)]
enum Why {
    HostFull(u32),
    NoMatchOnHost,
    MatchOnHost,
    NoLabel,
    Skew,
    ElsewhereOnly,
    NoDomain,
    NoMatchingPod,
    AllTaken,
    OwnerOnHost,
    OwnersEverywhere,
}

struct TopoFail {
    group: u32,
    why: Why,
}

impl TopoFail {
    /// Whether every claim of a state fails the same way as a fresh claim in it (so the state
    /// can be skipped without looking at its claims).
    fn holds_for_whole_state(&self) -> bool {
        matches!(
            self.why,
            Why::NoLabel
                | Why::Skew
                | Why::ElsewhereOnly
                | Why::NoDomain
                | Why::AllTaken
                | Why::OwnersEverywhere
        )
    }
}

enum HostView {
    Fixed { bin: u32 },
    Claim { bin: Option<u32>, state: u32 },
}

impl HostView {
    fn bin(&self) -> Option<u32> {
        match self {
            Self::Fixed { bin } => Some(*bin),
            Self::Claim { bin, .. } => *bin,
        }
    }
}

/// A shape's explanation: (existing-node reasons with counts, NodePool rejections).
type Explained = (Vec<(String, usize)>, Vec<PoolRejection>);

/// FxHash: the memo tables hash small integer keys millions of times; SipHash's DoS resistance
/// buys nothing here, and a fixed hasher keeps runs identical.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        for b in chunks.remainder() {
            self.add(u64::from(*b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_u128(&mut self, i: u128) {
        self.add(i as u64);
        self.add((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
type FxSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

pub(crate) struct Solver<'i, 'a, P> {
    input: &'i Input<'a, P>,
    dims: Vec<String>,
    dim_index: FxMap<String, usize>,
    cpu: usize,
    memory: usize,
    well_known: FxSet<String>,
    pools: Vec<Pool<'a>>,
    infos: Vec<Info>,
    info_ids: FxMap<PodSpecInfo, u32>,
    pod_info: Vec<u32>,
    reqs: Vec<Requirements>,
    req_ids: FxMap<Requirements, u32>,
    shapes: Vec<Shape>,
    shape_ids: FxMap<(u32, Relax), u32>,
    states: Vec<State>,
    state_ids: FxMap<(usize, Requirements), u32>,
    transitions: FxMap<(u32, u32), Option<u32>>,
    narrows: FxMap<(u32, usize, DomainSet), Option<u32>>,
    filter_ok: FxMap<(u32, u32), bool>,
    pod_masks: FxMap<(u32, usize), DomainSet>,
    /// Output of the last topology check: keys to narrow and their allowed domains.
    narrowed: Vec<(usize, DomainSet)>,
    keys: Vec<String>,
    key_ids: FxMap<String, usize>,
    universe: Vec<Vec<String>>,
    groups: Vec<Group>,
    group_ids: FxMap<GroupKey, u32>,
    tracked_groups: Vec<u32>,
    bins: Vec<Bin>,
    existing_index: BTreeSet<(u64, u32)>,
    existing_req_ok: FxMap<(u32, u32), bool>,
    placement: Vec<Option<u32>>,
    relaxed: Vec<bool>,
    any_prefer_no_schedule: bool,
    scratch: Vec<u32>,
    state_buf: Vec<u32>,
    /// Explanations already built, by shape: (existing-node reasons, NodePool rejections).
    explained: FxMap<u32, Explained>,
    /// Per pod description: pods not placed yet (what a fresh claim is sized for).
    unplaced: Vec<u32>,
    /// When set, at most this many new claims may be opened (the single-node check).
    max_new_claims: Option<usize>,
    new_claims: usize,
}

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
            dim_index: FxMap::default(),
            cpu: 0,
            memory: 0,
            well_known: requirements::WELL_KNOWN_LABELS
                .iter()
                .map(|k| (*k).to_owned())
                .collect(),
            pools: Vec::new(),
            infos: Vec::new(),
            info_ids: FxMap::default(),
            pod_info: Vec::new(),
            reqs: Vec::new(),
            req_ids: FxMap::default(),
            shapes: Vec::new(),
            shape_ids: FxMap::default(),
            states: Vec::new(),
            state_ids: FxMap::default(),
            transitions: FxMap::default(),
            narrows: FxMap::default(),
            filter_ok: FxMap::default(),
            pod_masks: FxMap::default(),
            narrowed: Vec::new(),
            keys: Vec::new(),
            key_ids: FxMap::default(),
            universe: Vec::new(),
            groups: Vec::new(),
            group_ids: FxMap::default(),
            tracked_groups: Vec::new(),
            bins: Vec::new(),
            existing_index: BTreeSet::new(),
            existing_req_ok: FxMap::default(),
            placement: vec![None; input.pods.len()],
            relaxed: vec![false; input.pods.len()],
            any_prefer_no_schedule: false,
            scratch: Vec::new(),
            state_buf: Vec::new(),
            explained: FxMap::default(),
            unplaced: Vec::new(),
            max_new_claims,
            new_claims: 0,
        };
        s.init(pool_order);
        s
    }

    // ---------------------------------------------------------------- set-up

    fn dim(&mut self, name: &str) -> usize {
        if let Some(i) = self.dim_index.get(name) {
            return *i;
        }
        self.dims.push(name.to_owned());
        self.dim_index.insert(name.to_owned(), self.dims.len() - 1);
        self.dims.len() - 1
    }

    fn vector(&self, list: &ResourceList) -> Vec<u64> {
        let mut v = vec![0; self.dims.len()];
        for (name, amount) in list.iter() {
            if let Some(i) = self.dim_index.get(name) {
                v[*i] = amount;
            }
        }
        v
    }

    fn intern_req(&mut self, reqs: Requirements) -> u32 {
        if let Some(id) = self.req_ids.get(&reqs) {
            return *id;
        }
        let id = self.reqs.len() as u32;
        self.reqs.push(reqs.clone());
        self.req_ids.insert(reqs, id);
        id
    }

    fn intern_info(&mut self, spec: PodSpecInfo) -> u32 {
        if let Some(id) = self.info_ids.get(&spec) {
            return *id;
        }
        let id = self.infos.len() as u32;
        self.info_ids.insert(spec.clone(), id);
        let tolerations = spec.tolerations();
        self.infos.push(Info {
            spec,
            requests: Rc::from(Vec::new()),
            tolerations,
            spread_groups: Vec::new(),
            affinity_groups: Vec::new(),
            preferred_affinity_groups: Vec::new(),
            anti_groups: Vec::new(),
            preferred_anti_groups: Vec::new(),
            selected_by: Vec::new(),
            inverse: Vec::new(),
        });
        id
    }

    fn key_id(&mut self, key: &str) -> Option<usize> {
        if key == labels::HOSTNAME {
            return None;
        }
        if let Some(i) = self.key_ids.get(key) {
            return Some(*i);
        }
        self.keys.push(key.to_owned());
        self.universe.push(Vec::new());
        self.key_ids.insert(key.to_owned(), self.keys.len() - 1);
        Some(self.keys.len() - 1)
    }

    fn intern_group(&mut self, ident: GroupKey) -> u32 {
        if let Some(id) = self.group_ids.get(&ident) {
            return *id;
        }
        let key_id = self.key_id(&ident.key);
        let id = self.groups.len() as u32;
        self.group_ids.insert(ident.clone(), id);
        self.groups.push(Group::new(ident, key_id, 0));
        id
    }

    fn term_group(&mut self, kind: Kind, term: &PodTerm) -> u32 {
        self.intern_group(GroupKey {
            kind,
            key: term.key.clone(),
            namespaces: term.namespaces.clone(),
            selector: term.selector.clone(),
            filter: None,
        })
    }

    fn init(&mut self, pool_order: &[usize]) {
        let input = self.input;
        // Resource dimensions: cpu, memory and pods always, then whatever anything mentions.
        self.cpu = self.dim(resources::CPU);
        self.memory = self.dim(resources::MEMORY);
        self.dim(resources::PODS);

        // Pending pods.
        for pod in &input.pods {
            let id = self.intern_info(PodSpecInfo::from_pod(*pod));
            self.pod_info.push(id);
            if self.unplaced.len() <= id as usize {
                self.unplaced.resize(id as usize + 1, 0);
            }
            self.unplaced[id as usize] += 1;
        }
        let existing_pods: Vec<Vec<u32>> = input
            .nodes
            .iter()
            .map(|n| &n.pods)
            .chain(input.in_flight.iter().map(|c| &c.pods))
            .map(|pods| {
                pods.iter()
                    .map(|p| self.intern_info(PodSpecInfo::from_pod(*p)))
                    .collect()
            })
            .collect();
        let daemon_infos: Vec<PodSpecInfo> = input
            .daemon_set_pods
            .iter()
            .map(|p| PodSpecInfo::from_pod(*p))
            .collect();
        let mut names: BTreeSet<String> = BTreeSet::new();
        for info in &self.infos {
            names.extend(info.spec.requests.names().map(str::to_owned));
        }
        for d in &daemon_infos {
            names.extend(d.requests.names().map(str::to_owned));
        }
        for p in &input.node_pools {
            for it in p.instance_types {
                names.extend(it.capacity.names().map(str::to_owned));
                for req in it.requirements.keys() {
                    if !self.well_known.contains(req) {
                        self.well_known.insert(req.to_owned());
                    }
                }
            }
        }
        for n in &input.nodes {
            names.extend(n.allocatable.names().map(str::to_owned));
        }
        for name in &names {
            self.dim(name);
        }
        for i in 0..self.infos.len() {
            let v: Rc<[u64]> = Rc::from(self.vector(&self.infos[i].spec.requests));
            self.infos[i].requests = v;
        }

        self.init_pools(pool_order, &daemon_infos);
        self.any_prefer_no_schedule = self
            .pools
            .iter()
            .flat_map(|p| &p.taints)
            .any(|t| t.effect == taints::PREFER_NO_SCHEDULE)
            || input
                .nodes
                .iter()
                .flat_map(|n| &n.taints)
                .any(|t| t.effect == taints::PREFER_NO_SCHEDULE);

        // Topology groups of every term of every pod, pending or bound.
        for i in 0..self.infos.len() {
            let spec = self.infos[i].spec.clone();
            let strict = spec.required_terms.first().map_or_else(
                || spec.node_selector.clone(),
                |t| spec.node_selector.intersection(t),
            );
            let filter = self.intern_req(strict);
            let mut spread = Vec::new();
            for term in &spec.spread {
                spread.push(self.intern_group(GroupKey {
                    kind: Kind::Spread {
                        max_skew: term.max_skew,
                        min_domains: term.min_domains,
                    },
                    key: term.key.clone(),
                    namespaces: super::pod::Namespaces::Listed(
                        [spec.namespace.clone()].into_iter().collect(),
                    ),
                    selector: term.selector.clone(),
                    filter: term.honor_node_affinity.then_some(filter),
                }));
            }
            let affinity = spec
                .affinity
                .iter()
                .map(|t| self.term_group(Kind::Affinity, t))
                .collect();
            let pref_affinity = spec
                .preferred_affinity
                .iter()
                .map(|t| self.term_group(Kind::Affinity, t))
                .collect();
            let anti: Vec<u32> = spec
                .anti_affinity
                .iter()
                .map(|t| self.term_group(Kind::Anti, t))
                .collect();
            let pref_anti = spec
                .preferred_anti_affinity
                .iter()
                .map(|t| self.term_group(Kind::Anti, t))
                .collect();
            for g in &anti {
                self.groups[*g as usize].has_required_owners = true;
            }
            let info = &mut self.infos[i];
            info.spread_groups = spread;
            info.affinity_groups = affinity;
            info.preferred_affinity_groups = pref_affinity;
            info.anti_groups = anti;
            info.preferred_anti_groups = pref_anti;
        }
        self.init_universe();
        for g in &mut self.groups {
            let n = g.key_id.map_or(0, |k| self.universe[k].len());
            g.counts = vec![0; n];
            g.owner_counts = vec![0; n];
        }
        // Which groups select which pods.
        let ns_labels = &input.namespace_labels;
        for info in &mut self.infos {
            for (gid, g) in self.groups.iter().enumerate() {
                if g.ident.namespaces.contains(&info.spec.namespace, ns_labels)
                    && g.ident.selector.matches(&info.spec.labels)
                {
                    info.selected_by.push(gid as u32);
                    if g.ident.kind == Kind::Anti && g.has_required_owners {
                        info.inverse.push(gid as u32);
                    }
                }
            }
        }
        // Hostname groups whose pending owners or selected pods need eligible-claim lists.
        let pending: BTreeSet<u32> = self.pod_info.iter().copied().collect();
        for i in pending {
            let info = &self.infos[i as usize];
            for g in &info.spread_groups {
                let own = if info.selected_by.binary_search(g).is_ok() {
                    List::OwnerSelf
                } else {
                    List::Owner
                };
                self.groups[*g as usize].track[own as usize] = true;
            }
            for g in info.anti_groups.iter().chain(&info.preferred_anti_groups) {
                self.groups[*g as usize].track[List::Owner as usize] = true;
            }
            for g in &info.inverse {
                self.groups[*g as usize].track[List::Inverse as usize] = true;
            }
        }
        self.tracked_groups = (0..self.groups.len() as u32)
            .filter(|g| {
                let g = &self.groups[*g as usize];
                g.is_hostname() && g.track.iter().any(|t| *t)
            })
            .collect();

        self.init_existing(&existing_pods, &daemon_infos);
    }

    fn init_pools(&mut self, pool_order: &[usize], daemons: &[PodSpecInfo]) {
        let input = self.input;
        for &i in pool_order {
            let p = &input.node_pools[i];
            let np = p.node_pool;
            let pool_name = np.metadata.name.clone().unwrap_or_default();
            let template = &np.spec.template;
            let mut invalid = None;
            let mut reqs =
                Requirements::from_api(&template.spec.requirements).unwrap_or_else(|e| {
                    invalid = Some(e.to_string());
                    Requirements::new()
                });
            let mut pool_labels = template.metadata.labels.clone();
            pool_labels.insert(labels::NODE_POOL.to_owned(), pool_name.clone());
            for (k, v) in &pool_labels {
                reqs.add(Requirement::in_values(k, [v]));
            }
            let taints = template.spec.taints.clone();
            let mut types = Vec::new();
            for it in p.instance_types {
                if it.requirements.intersects(&reqs).is_ok() {
                    types.push(it);
                }
            }
            // DaemonSet overhead and host ports per type.
            let dims = self.dims.len();
            let mut alloc = Vec::with_capacity(types.len() * dims);
            let mut daemon_lists = Vec::with_capacity(types.len());
            let mut daemon_ports = Vec::new();
            for it in &types {
                let mut overhead = ResourceList::new();
                if !daemons.is_empty() {
                    let type_reqs = reqs.intersection(&it.requirements);
                    for d in daemons {
                        if daemon_runs_on(d, &taints, &type_reqs) {
                            overhead = overhead.saturating_add(&d.requests);
                        }
                    }
                }
                let capacity = self.vector(&it.capacity);
                let reserved = self.vector(&it.overhead.total().saturating_add(&overhead));
                alloc.extend(
                    capacity
                        .iter()
                        .zip(&reserved)
                        .map(|(c, r)| c.saturating_sub(*r)),
                );
                daemon_lists.push(overhead);
            }
            for d in daemons {
                if daemon_runs_on(d, &taints, &reqs) {
                    daemon_ports.extend(d.host_ports.iter().cloned());
                }
            }
            // Limits.
            let mut limits = Vec::new();
            let mut node_limit = None;
            for (name, q) in &np.spec.limits {
                let Ok(limit) = resources::parse(name, &q.0) else {
                    invalid = Some(format!("limit {name}={} is not a quantity", q.0));
                    continue;
                };
                let remaining = limit.saturating_sub(p.usage.get(name));
                if name == resources::NODES {
                    node_limit = Some((limit, remaining));
                } else {
                    limits.push((name.clone(), limit, remaining));
                }
            }
            let mut limit_cost = Vec::with_capacity(types.len() * limits.len());
            for it in &types {
                for (name, _, _) in &limits {
                    limit_cost.push(it.capacity.get(name));
                }
            }
            self.pools.push(Pool {
                name: pool_name,
                reqs,
                labels: pool_labels,
                taints,
                startup_taints: template.spec.startup_taints.clone(),
                types,
                alloc,
                daemon: daemon_lists,
                limits,
                limit_cost,
                node_limit,
                daemon_ports,
                base: None,
                invalid,
            });
        }
        for i in 0..self.pools.len() {
            if self.pools[i].invalid.is_none() {
                let reqs = self.pools[i].reqs.clone();
                self.pools[i].base = self.intern_state(i, reqs);
            }
        }
    }

    /// The values each topology key can take: from the NodePools' requirements and template
    /// labels, their types' labels and available offerings, and existing nodes. Sorted, and
    /// capped at [`MAX_DOMAINS`] per key.
    fn init_universe(&mut self) {
        for k in 0..self.keys.len() {
            let key = self.keys[k].clone();
            let mut values: BTreeSet<String> = BTreeSet::new();
            for pool in &self.pools {
                if pool.invalid.is_some() {
                    continue;
                }
                if let Some(req) = pool.reqs.get(&key).filter(|r| r.is_finite()) {
                    values.extend(req.values().map(str::to_owned));
                    continue;
                }
                let mut of_pool: BTreeSet<String> = BTreeSet::new();
                for it in &pool.types {
                    if key == labels::ZONE {
                        of_pool.extend(
                            it.offerings
                                .iter()
                                .filter(|o| o.available)
                                .map(|o| o.zone.clone()),
                        );
                    } else if key == labels::CAPACITY_TYPE {
                        of_pool.extend(
                            it.offerings
                                .iter()
                                .filter(|o| o.available)
                                .map(|o| o.capacity_type.clone()),
                        );
                    } else if let Some(req) = it.requirements.get(&key).filter(|r| r.is_finite()) {
                        of_pool.extend(req.values().map(str::to_owned));
                    }
                }
                values.extend(of_pool.into_iter().filter(|v| pool.reqs.allows(&key, v)));
            }
            for n in &self.input.nodes {
                if let Some(v) = n.labels.get(&key) {
                    values.insert(v.clone());
                }
            }
            for c in &self.input.in_flight {
                if let Some(req) = c.requirements.get(&key)
                    && req.len() == Some(1)
                {
                    values.extend(req.values().map(str::to_owned));
                }
            }
            self.universe[k] = values.into_iter().take(MAX_DOMAINS).collect();
        }
    }

    fn domain_id(&self, key: usize, value: &str) -> Option<u16> {
        self.universe[key]
            .binary_search_by(|v| v.as_str().cmp(value))
            .ok()
            .map(|i| i as u16)
    }

    fn init_existing(&mut self, existing_pods: &[Vec<u32>], daemons: &[PodSpecInfo]) {
        let input = self.input;
        let dims = self.dims.len();
        let n_nodes = input.nodes.len();
        for (i, node) in input.nodes.iter().enumerate() {
            let domains = (0..self.keys.len())
                .map(|k| {
                    node.labels
                        .get(&self.keys[k])
                        .and_then(|v| self.domain_id(k, v))
                })
                .collect();
            let cap = self.vector(&node.allocatable);
            self.bins.push(Bin {
                kind: BinKind::Node {
                    idx: i,
                    cap,
                    domains,
                },
                used: vec![0; dims],
                pods: Vec::new(),
                ports: Vec::new(),
                pending: Vec::new(),
            });
        }
        for (i, claim) in input.in_flight.iter().enumerate() {
            let domains = (0..self.keys.len())
                .map(|k| {
                    let req = claim.requirements.get(&self.keys[k])?;
                    if req.len() == Some(1) {
                        req.values().next().and_then(|v| self.domain_id(k, v))
                    } else {
                        None
                    }
                })
                .collect();
            let cap = self.vector(&claim.allocatable);
            let mut used: Vec<u64> = vec![0; dims];
            let mut ports = Vec::new();
            for d in daemons {
                if daemon_runs_on(d, &claim.taints, &claim.requirements) {
                    let v = self.vector(&d.requests);
                    for (u, x) in used.iter_mut().zip(v) {
                        *u = (*u).saturating_add(x);
                    }
                    ports.extend(d.host_ports.iter().cloned());
                }
            }
            self.bins.push(Bin {
                kind: BinKind::InFlight {
                    idx: i,
                    cap,
                    domains,
                },
                used,
                pods: Vec::new(),
                ports,
                pending: Vec::new(),
            });
        }
        for (b, infos) in existing_pods.iter().enumerate() {
            for info in infos {
                let req = self.infos[*info as usize].requests.clone();
                let bin = &mut self.bins[b];
                for (u, x) in bin.used.iter_mut().zip(req.iter()) {
                    *u = u.saturating_add(*x);
                }
                bin.ports
                    .extend(self.infos[*info as usize].spec.host_ports.iter().cloned());
                self.record(b as u32, *info, None);
            }
        }
        for b in 0..(n_nodes + input.in_flight.len()) {
            let free = self.bin_cap(b as u32).map_or(0, |cap| {
                cap[self.cpu].saturating_sub(self.bins[b].used[self.cpu])
            });
            self.existing_index.insert((free, b as u32));
        }
    }

    /// Whether the pending pods can certainly not all share one node: some hostname
    /// anti-affinity term has a pending owner and at least two pending pods it selects.
    pub(crate) fn single_node_hopeless(&self) -> bool {
        self.groups.iter().enumerate().any(|(g, group)| {
            if !group.is_hostname() || group.ident.kind != Kind::Anti || !group.has_required_owners
            {
                return false;
            }
            let g = g as u32;
            let owners = self
                .pod_info
                .iter()
                .filter(|i| self.infos[**i as usize].anti_groups.contains(&g))
                .count();
            let selected = self
                .pod_info
                .iter()
                .filter(|i| {
                    self.infos[**i as usize]
                        .selected_by
                        .binary_search(&g)
                        .is_ok()
                })
                .count();
            owners >= 1 && selected >= 2
        })
    }

    // ------------------------------------------------------------ states

    fn intern_state(&mut self, pool: usize, reqs: Requirements) -> Option<u32> {
        if let Some(id) = self.state_ids.get(&(pool, reqs.clone())) {
            return Some(*id);
        }
        let dims = self.dims.len();
        let p = &self.pools[pool];
        let mut entries: Vec<(f64, &str, u32, u16)> = Vec::new();
        for (t, it) in p.types.iter().enumerate() {
            if it.requirements.intersects(&reqs).is_err() {
                continue;
            }
            if let Some(o) = it.cheapest_offering(&reqs) {
                let index = it
                    .offerings
                    .iter()
                    .position(|x| std::ptr::eq(x, o))
                    .unwrap_or(0) as u16;
                entries.push((o.price, it.name.as_str(), t as u32, index));
            }
        }
        if entries.is_empty() {
            return None;
        }
        entries.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        let order: Vec<u32> = entries.iter().map(|e| e.2).collect();
        let price = entries.iter().map(|e| e.0).collect();
        let offering = entries.into_iter().map(|e| e.3).collect();
        let mut suffix = vec![0; (order.len() + 1) * dims];
        for i in (0..order.len()).rev() {
            let t = order[i] as usize;
            for d in 0..dims {
                suffix[i * dims + d] = suffix[(i + 1) * dims + d].max(p.alloc[t * dims + d]);
            }
        }
        let min_values = reqs.has_min_values();
        let id = self.states.len() as u32;
        self.states.push(State {
            pool,
            reqs: reqs.clone(),
            order,
            price,
            offering,
            suffix,
            slack: BTreeSet::new(),
            domains: vec![None; self.keys.len()],
            min_values,
        });
        self.state_ids.insert((pool, reqs), id);
        Some(id)
    }

    /// The state reached by adding pod requirements `req` to state `st`, if compatible and
    /// some type remains.
    fn transition(&mut self, st: u32, req: u32) -> Option<u32> {
        if let Some(r) = self.transitions.get(&(st, req)) {
            return *r;
        }
        let state = &self.states[st as usize];
        let pod_reqs = &self.reqs[req as usize];
        let result = if state
            .reqs
            .compatible(pod_reqs, |k| self.well_known.contains(k))
            .is_err()
        {
            None
        } else {
            let merged = state.reqs.intersection(pod_reqs);
            if merged == state.reqs {
                Some(st)
            } else {
                let pool = state.pool;
                self.intern_state(pool, merged)
            }
        };
        self.transitions.insert((st, req), result);
        result
    }

    /// The state with topology key `key` restricted to `domains`.
    fn narrow(&mut self, st: u32, key: usize, domains: DomainSet) -> Option<u32> {
        if let Some(r) = self.narrows.get(&(st, key, domains)) {
            return *r;
        }
        let values: Vec<&str> = bits(domains)
            .map(|d| self.universe[key][d].as_str())
            .collect();
        let mut reqs = self.states[st as usize].reqs.clone();
        reqs.add(Requirement::in_values(&self.keys[key], values));
        let pool = self.states[st as usize].pool;
        let result = if reqs == self.states[st as usize].reqs {
            Some(st)
        } else {
            self.intern_state(pool, reqs)
        };
        self.narrows.insert((st, key, domains), result);
        result
    }

    /// Domains of `key` that some type of state `st` can land in.
    fn state_domains(&mut self, st: u32, key: usize) -> DomainSet {
        if let Some(Some(d)) = self.states[st as usize].domains.get(key) {
            return *d;
        }
        let state = &self.states[st as usize];
        let pool = &self.pools[state.pool];
        let name = self.keys[key].as_str();
        let mut out: DomainSet = 0;
        for (d, value) in self.universe[key].iter().enumerate() {
            if !state.reqs.allows(name, value) {
                continue;
            }
            let mut narrowed = state.reqs.clone();
            narrowed.add(Requirement::in_values(name, [value]));
            let reachable = state.order.iter().any(|t| {
                let it = pool.types[*t as usize];
                it.requirements.allows(name, value) && it.cheapest_offering(&narrowed).is_some()
            });
            if reachable {
                out |= 1 << d;
            }
        }
        let domains = &mut self.states[st as usize].domains;
        if domains.len() <= key {
            domains.resize(key + 1, None);
        }
        domains[key] = Some(out);
        out
    }

    fn type_alloc(&self, pool: usize, t: u32) -> &[u64] {
        let dims = self.dims.len();
        &self.pools[pool].alloc[t as usize * dims..(t as usize + 1) * dims]
    }

    /// The first position in `st`'s price order at or after `start` whose type holds
    /// `used + add` within the pool's limits (charging the difference from `old_type`).
    fn find_type(
        &self,
        st: u32,
        start: usize,
        used: &[u64],
        add: &[u64],
        old_type: Option<u32>,
    ) -> Option<usize> {
        let dims = self.dims.len();
        let state = &self.states[st as usize];
        let pool = &self.pools[state.pool];
        for i in start..state.order.len() {
            if !fits_add(used, add, &state.suffix[i * dims..(i + 1) * dims]) {
                return None;
            }
            let t = state.order[i];
            if !fits_add(used, add, self.type_alloc(state.pool, t)) {
                continue;
            }
            if !self.within_limits(pool, t, old_type) {
                continue;
            }
            if state.min_values && self.min_values_shortfall(st, i, used, add).is_some() {
                continue;
            }
            return Some(i);
        }
        None
    }

    /// Sizes a fresh claim for the copies of its first pod still to place (a Deployment's
    /// replicas): from position `pos` (the cheapest type for the pod alone) on, the type with
    /// the lowest price per copy it holds, counting at most the copies left. Pods that need a
    /// host to themselves, or host ports, or a host shared with other pods, size for
    /// themselves alone.
    ///
    /// Why: pod by pod, the cheapest node for one pod is the smallest, and a pod that no
    /// longer fits opens another small one rather than grow a claim to the next size up; when
    /// the catalogue's small types carry more overhead per pod (a 2-vCPU node holds one 1-CPU
    /// pod, a 16-vCPU one holds 15), that buys many small nodes where one large node holds the
    /// same pods for less. Oversizing costs nothing in the end: a claim's options are the
    /// types that hold what it was finally given.
    fn size_for_copies(&self, st: u32, pos: usize, shape: u32, add: &[u64]) -> usize {
        let state = &self.states[st as usize];
        let price = state.price[pos];
        let sh = &self.shapes[shape as usize];
        let info = &self.infos[sh.info as usize];
        let left = u64::from(self.unplaced.get(sh.info as usize).copied().unwrap_or(0));
        if left <= 1
            || !sh.exclusive.is_empty()
            || !sh.host_affinity.is_empty()
            || !info.spec.host_ports.is_empty()
        {
            return pos;
        }
        let copies = |alloc: &[u64]| {
            add.iter()
                .zip(alloc)
                .filter(|(a, _)| **a > 0)
                .map(|(a, c)| c / a)
                .min()
                .unwrap_or(left)
                .clamp(1, left)
        };
        let pool = &self.pools[state.pool];
        let mut best = (
            pos,
            price / copies(self.type_alloc(state.pool, state.order[pos])) as f64,
        );
        let dims = self.dims.len();
        let zero = vec![0; dims];
        for i in pos + 1..state.order.len() {
            // Prices only grow along the order: no later type can beat `best` once even all
            // `left` copies on it would not.
            if state.price[i] / left as f64 >= best.1 - PRICE_EPSILON {
                break;
            }
            let t = state.order[i];
            let alloc = self.type_alloc(state.pool, t);
            if !fits_add(&zero, add, alloc) || !self.within_limits(pool, t, None) {
                continue;
            }
            if state.min_values && self.min_values_shortfall(st, i, &zero, add).is_some() {
                continue;
            }
            let per_copy = state.price[i] / copies(alloc) as f64;
            if per_copy < best.1 - PRICE_EPSILON {
                best = (i, per_copy);
            }
        }
        best.0
    }

    fn within_limits(&self, pool: &Pool<'_>, t: u32, old_type: Option<u32>) -> bool {
        let n = pool.limits.len();
        (0..n).all(|j| {
            let new = pool.limit_cost[t as usize * n + j];
            let old = old_type.map_or(0, |o| pool.limit_cost[o as usize * n + j]);
            new.saturating_sub(old) <= pool.limits[j].2
        })
    }

    /// For a state with `minValues`, the first requirement the types from position `from` on
    /// that hold `used + add` do not satisfy: (key, minValues, distinct values found).
    fn min_values_shortfall(
        &self,
        st: u32,
        from: usize,
        used: &[u64],
        add: &[u64],
    ) -> Option<(String, u32, usize)> {
        let state = &self.states[st as usize];
        let pool = &self.pools[state.pool];
        let fitting = state.order[from..]
            .iter()
            .filter(|t| fits_add(used, add, self.type_alloc(state.pool, **t)))
            .map(|t| &pool.types[*t as usize].requirements);
        state.reqs.min_values_shortfall(fitting)
    }

    // ------------------------------------------------------------ shapes

    fn shape(&mut self, info_id: u32, relax: Relax) -> u32 {
        if let Some(s) = self.shape_ids.get(&(info_id, relax)) {
            return *s;
        }
        let info = &self.infos[info_id as usize];
        let spec = &info.spec;
        let mut strict = spec.node_selector.clone();
        if let Some(term) = spec.required_terms.get(relax.required_term as usize) {
            strict.add_all(term);
        }
        let mut full = strict.clone();
        if let Some(pref) = spec.preferred_terms.get(relax.preferred_node as usize) {
            full.add_all(pref);
        }
        let mut tolerations = info.tolerations.clone();
        if relax.tolerate_prefer_no_schedule {
            tolerations.push(taints::tolerate_prefer_no_schedule());
        }
        let hard = spec.hard_spread_count();
        let mut owned: Vec<u32> = Vec::new();
        owned.extend(&info.spread_groups[..hard]);
        owned.extend(
            info.spread_groups[hard..]
                .iter()
                .skip(relax.soft_spread as usize),
        );
        owned.extend(&info.affinity_groups);
        owned.extend(
            info.preferred_affinity_groups
                .iter()
                .skip(relax.preferred_affinity as usize),
        );
        owned.extend(&info.anti_groups);
        owned.extend(
            info.preferred_anti_groups
                .iter()
                .skip(relax.preferred_anti as usize),
        );
        owned.sort_unstable();
        owned.dedup();
        let owned_required_anti = info.anti_groups.clone();
        let inverse = info.inverse.clone();
        let mut host_affinity = Vec::new();
        let mut exclusive = Vec::new();
        for g in &owned {
            let group = &self.groups[*g as usize];
            if !group.is_hostname() {
                continue;
            }
            match group.ident.kind {
                Kind::Affinity => host_affinity.push(*g),
                Kind::Anti => exclusive.push((*g, List::Owner)),
                Kind::Spread { .. } => {
                    let own = if info.selected_by.binary_search(g).is_ok() {
                        List::OwnerSelf
                    } else {
                        List::Owner
                    };
                    exclusive.push((*g, own));
                }
            }
        }
        for g in &inverse {
            if self.groups[*g as usize].is_hostname() {
                exclusive.push((*g, List::Inverse));
            }
        }
        let req = self.intern_req(full);
        let strict_req = self.intern_req(strict);
        let id = self.shapes.len() as u32;
        self.shapes.push(Shape {
            info: info_id,
            req,
            strict_req,
            tolerations,
            owned,
            owned_required_anti,
            host_affinity,
            exclusive,
            tolerates_pool: vec![None; self.pools.len()],
            compat_states: Vec::new(),
            states_checked: 0,
        });
        self.shape_ids.insert((info_id, relax), id);
        id
    }

    fn initial_relax(&self, info: &Info) -> Relax {
        match self.input.options.preference_policy {
            PreferencePolicy::Respect => Relax::default(),
            PreferencePolicy::Ignore => Relax {
                preferred_affinity: info.preferred_affinity_groups.len() as u32,
                preferred_anti: info.preferred_anti_groups.len() as u32,
                preferred_node: info.spec.preferred_terms.len() as u32,
                soft_spread: (info.spec.spread.len() - info.spec.hard_spread_count()) as u32,
                ..Relax::default()
            },
        }
    }

    /// The next relaxation in upstream's order: the next required node-affinity term, then
    /// preferred pod affinity, preferred pod anti-affinity, preferred node affinity,
    /// `ScheduleAnyway` spreads, and finally tolerating `PreferNoSchedule` taints.
    fn next_relax(&self, info: &Info, r: Relax) -> Option<Relax> {
        let spec = &info.spec;
        if (r.required_term as usize) + 1 < spec.required_terms.len() {
            return Some(Relax {
                required_term: r.required_term + 1,
                ..r
            });
        }
        if (r.preferred_affinity as usize) < info.preferred_affinity_groups.len() {
            return Some(Relax {
                preferred_affinity: r.preferred_affinity + 1,
                ..r
            });
        }
        if (r.preferred_anti as usize) < info.preferred_anti_groups.len() {
            return Some(Relax {
                preferred_anti: r.preferred_anti + 1,
                ..r
            });
        }
        if (r.preferred_node as usize) < spec.preferred_terms.len() {
            return Some(Relax {
                preferred_node: r.preferred_node + 1,
                ..r
            });
        }
        if (r.soft_spread as usize) < spec.spread.len() - spec.hard_spread_count() {
            return Some(Relax {
                soft_spread: r.soft_spread + 1,
                ..r
            });
        }
        if !r.tolerate_prefer_no_schedule && self.any_prefer_no_schedule {
            return Some(Relax {
                tolerate_prefer_no_schedule: true,
                ..r
            });
        }
        None
    }

    fn tolerates(&mut self, shape: u32, pool: usize) -> bool {
        if let Some(ok) = self.shapes[shape as usize].tolerates_pool[pool] {
            return ok;
        }
        let ok = taints::first_untolerated(
            &self.pools[pool].taints,
            &self.shapes[shape as usize].tolerations,
        )
        .is_none();
        self.shapes[shape as usize].tolerates_pool[pool] = Some(ok);
        ok
    }

    fn refresh_compat(&mut self, shape: u32) {
        loop {
            let checked = self.shapes[shape as usize].states_checked;
            if checked >= self.states.len() {
                return;
            }
            let st = checked as u32;
            self.shapes[shape as usize].states_checked += 1;
            let pool = self.states[checked].pool;
            if !self.tolerates(shape, pool) {
                continue;
            }
            let req = self.shapes[shape as usize].req;
            if self.transition(st, req).is_some() {
                self.shapes[shape as usize].compat_states.push(st);
            }
        }
    }

    // ------------------------------------------------------------ bins

    fn bin_cap(&self, bin: u32) -> Option<&[u64]> {
        match &self.bins[bin as usize].kind {
            BinKind::Node { cap, .. } | BinKind::InFlight { cap, .. } => Some(cap),
            BinKind::Claim { .. } => None,
        }
    }

    fn claim_slack(&self, bin: u32) -> u64 {
        let b = &self.bins[bin as usize];
        match b.kind {
            BinKind::Claim { state, pos } => {
                let s = &self.states[state as usize];
                let t = s.order[pos];
                self.type_alloc(s.pool, t)[self.cpu].saturating_sub(b.used[self.cpu])
            }
            _ => 0,
        }
    }

    fn pending_count(&self, bin: Option<u32>, group: u32) -> u32 {
        bin.and_then(|b| {
            self.bins[b as usize]
                .pending
                .iter()
                .find(|(g, _)| *g == group)
                .map(|(_, c)| *c)
        })
        .unwrap_or(0)
    }

    fn ports_conflict(have: &[HostPort], add: &[HostPort]) -> bool {
        add.iter().any(|a| have.iter().any(|h| h.conflicts(a)))
    }

    // ------------------------------------------------------------ topology

    /// The domains of `key` the pod's node selector and required node affinity allow.
    fn pod_mask(&mut self, req: u32, key: usize) -> DomainSet {
        if let Some(m) = self.pod_masks.get(&(req, key)) {
            return *m;
        }
        let reqs = &self.reqs[req as usize];
        let name = &self.keys[key];
        let mut mask = 0;
        for (d, value) in self.universe[key].iter().enumerate() {
            if reqs.allows(name, value) {
                mask |= 1 << d;
            }
        }
        self.pod_masks.insert((req, key), mask);
        mask
    }

    fn allowed_mask(&mut self, host: &HostView, key: usize) -> DomainSet {
        if let Some((_, m)) = self.narrowed.iter().find(|(k, _)| *k == key) {
            return *m;
        }
        match host {
            HostView::Fixed { bin } => match &self.bins[*bin as usize].kind {
                BinKind::Node { domains, .. } | BinKind::InFlight { domains, .. } => {
                    domains.get(key).copied().flatten().map_or(0, |d| 1 << d)
                }
                BinKind::Claim { .. } => 0,
            },
            HostView::Claim { state, .. } => self.state_domains(*state, key),
        }
    }

    fn set_narrowed(&mut self, key: usize, domains: DomainSet) {
        match self.narrowed.iter_mut().find(|(k, _)| *k == key) {
            Some((_, d)) => *d = domains,
            None => self.narrowed.push((key, domains)),
        }
    }

    /// Checks a shape's topology constraints on a host. For a claim, leaves in `self.narrowed`
    /// the topology keys the placement must narrow (key, allowed domains).
    fn topology_check(&mut self, host: &HostView, shape: u32) -> Result<(), TopoFail> {
        self.narrowed.clear();
        let info_id = self.shapes[shape as usize].info as usize;
        let n_owned = self.shapes[shape as usize].owned.len();
        let n_inverse = self.infos[info_id].inverse.len();
        if n_owned == 0 && n_inverse == 0 {
            return Ok(());
        }
        let strict = self.shapes[shape as usize].strict_req;
        let bin = host.bin();
        let fixed = matches!(host, HostView::Fixed { .. });
        for i in 0..n_owned {
            let g = self.shapes[shape as usize].owned[i];
            let selects_self = self.infos[info_id].selected_by.binary_search(&g).is_ok();
            let Some(k) = self.groups[g as usize].key_id else {
                let group = &self.groups[g as usize];
                let count = bin.map_or(0, |b| group.host_count(b));
                let why = match group.ident.kind {
                    Kind::Spread { max_skew, .. } => {
                        (count + u32::from(selects_self) > max_skew).then_some(Why::HostFull(count))
                    }
                    Kind::Affinity => (count == 0 && !(group.host_total == 0 && selects_self))
                        .then_some(Why::NoMatchOnHost),
                    Kind::Anti => (count > 0).then_some(Why::MatchOnHost),
                };
                if let Some(why) = why {
                    return Err(TopoFail { group: g, why });
                }
                continue;
            };
            let allowed = self.allowed_mask(host, k);
            let pod_mask = self.pod_mask(strict, k);
            let pend = self.pending_count(bin, g);
            let group = &self.groups[g as usize];
            let candidates = allowed & pod_mask;
            let choice = match group.ident.kind {
                Kind::Spread {
                    max_skew,
                    min_domains,
                } => {
                    let mut min = u32::MAX;
                    for d in bits(pod_mask) {
                        min = min.min(group.counts[d]);
                    }
                    if min == u32::MAX || min_domains.is_some_and(|m| pod_mask.count_ones() < m) {
                        min = 0;
                    }
                    let limit = i64::from(min) + i64::from(max_skew) - i64::from(selects_self);
                    let best = bits(candidates)
                        .map(|d| (i64::from(group.counts[d]) + i64::from(pend), d))
                        .filter(|(count, _)| *count <= limit)
                        .min();
                    match best {
                        Some((_, d)) => 1 << d,
                        None => {
                            return Err(TopoFail {
                                group: g,
                                why: if allowed == 0 {
                                    Why::NoLabel
                                } else {
                                    Why::Skew
                                },
                            });
                        }
                    }
                }
                Kind::Affinity => {
                    if let Some(d) = bits(candidates).find(|d| group.counts[*d] > 0) {
                        1 << d
                    } else if bits(pod_mask).any(|d| group.counts[d] > 0) {
                        return Err(TopoFail {
                            group: g,
                            why: Why::ElsewhereOnly,
                        });
                    } else if pend > 0 || selects_self {
                        match bits(candidates).next() {
                            Some(d) => 1 << d,
                            None => {
                                return Err(TopoFail {
                                    group: g,
                                    why: Why::NoDomain,
                                });
                            }
                        }
                    } else {
                        return Err(TopoFail {
                            group: g,
                            why: Why::NoMatchingPod,
                        });
                    }
                }
                Kind::Anti => {
                    if pend > 0 {
                        return Err(TopoFail {
                            group: g,
                            why: Why::MatchOnHost,
                        });
                    }
                    if fixed && allowed == 0 {
                        continue;
                    }
                    match bits(candidates).find(|d| group.counts[*d] == 0) {
                        Some(d) => 1 << d,
                        None => {
                            return Err(TopoFail {
                                group: g,
                                why: Why::AllTaken,
                            });
                        }
                    }
                }
            };
            self.set_narrowed(k, choice);
        }
        for i in 0..n_inverse {
            let g = self.infos[info_id].inverse[i];
            let Some(k) = self.groups[g as usize].key_id else {
                if bin.is_some_and(|b| self.groups[g as usize].owner_host_count(b) > 0) {
                    return Err(TopoFail {
                        group: g,
                        why: Why::OwnerOnHost,
                    });
                }
                continue;
            };
            let allowed = self.allowed_mask(host, k);
            if fixed && allowed == 0 {
                continue;
            }
            let group = &self.groups[g as usize];
            let free = bits(allowed)
                .filter(|d| group.owner_counts[*d] == 0)
                .fold(0, |m, d| m | (1 << d));
            if free == 0 {
                return Err(TopoFail {
                    group: g,
                    why: Why::OwnersEverywhere,
                });
            }
            if free != allowed {
                self.set_narrowed(k, free);
            }
        }
        Ok(())
    }

    /// A sentence for a failed topology check.
    fn describe(&self, f: &TopoFail) -> String {
        let group = &self.groups[f.group as usize];
        let why = match f.why {
            Why::HostFull(n) => format!("the node already has {n} matching pods"),
            Why::NoMatchOnHost => "no matching pod is on the node".to_owned(),
            Why::MatchOnHost => "a matching pod is already on the node".to_owned(),
            Why::NoLabel => format!("the node has no {} label", group.ident.key),
            Why::Skew => {
                let counts: Vec<String> = group
                    .key_id
                    .map(|k| {
                        self.universe[k]
                            .iter()
                            .zip(&group.counts)
                            .map(|(v, c)| format!("{v}={c}"))
                            .collect()
                    })
                    .unwrap_or_default();
                format!(
                    "every allowed domain would exceed the skew (counts: {})",
                    counts.join(", ")
                )
            }
            Why::ElsewhereOnly => {
                "the matching pods are in domains this node cannot be in".to_owned()
            }
            Why::NoDomain => format!("no allowed {} domain", group.ident.key),
            Why::NoMatchingPod => "no matching pod exists or is being placed".to_owned(),
            Why::AllTaken => format!(
                "every allowed {} domain already has a matching pod",
                group.ident.key
            ),
            Why::OwnerOnHost => "a pod on the node has anti-affinity to this pod".to_owned(),
            Why::OwnersEverywhere => {
                "pods with anti-affinity to this pod occupy every allowed domain".to_owned()
            }
        };
        format!("{group}: {why}")
    }

    /// Counts a pod placed on a bin in every group that selects it, and as an owner of its
    /// required anti-affinity terms.
    fn record(&mut self, bin: u32, info: u32, owners_of_shape: Option<u32>) {
        let n_selected = self.infos[info as usize].selected_by.len();
        for i in 0..n_selected {
            let g = self.infos[info as usize].selected_by[i];
            let Some(k) = self.groups[g as usize].key_id else {
                let group = &mut self.groups[g as usize];
                *group.host.entry(bin).or_insert(0) += 1;
                group.host_total += 1;
                continue;
            };
            if !self.counts_on(bin, g) {
                continue;
            }
            match self.bin_domain(bin, k) {
                Some(d) => self.groups[g as usize].counts[d as usize] += 1,
                None => {
                    if matches!(self.bins[bin as usize].kind, BinKind::Claim { .. }) {
                        let pending = &mut self.bins[bin as usize].pending;
                        match pending.iter_mut().find(|(pg, _)| *pg == g) {
                            Some((_, c)) => *c += 1,
                            None => pending.push((g, 1)),
                        }
                    }
                }
            }
        }
        let n_owned = match owners_of_shape {
            Some(s) => self.shapes[s as usize].owned_required_anti.len(),
            None => self.infos[info as usize].anti_groups.len(),
        };
        for i in 0..n_owned {
            let g = match owners_of_shape {
                Some(s) => self.shapes[s as usize].owned_required_anti[i],
                None => self.infos[info as usize].anti_groups[i],
            };
            match self.groups[g as usize].key_id {
                None => *self.groups[g as usize].owner_host.entry(bin).or_insert(0) += 1,
                Some(k) => match self.bin_domain(bin, k) {
                    Some(d) => self.groups[g as usize].owner_counts[d as usize] += 1,
                    None => {
                        // Not pinned yet: block every domain the claim might land in.
                        if let BinKind::Claim { state, .. } = self.bins[bin as usize].kind {
                            for d in bits(self.state_domains(state, k)) {
                                self.groups[g as usize].owner_counts[d] += 1;
                            }
                        }
                    }
                },
            }
        }
    }

    /// Whether a spread group with a node filter counts pods on this bin.
    fn counts_on(&mut self, bin: u32, g: u32) -> bool {
        let Some(filter) = self.groups[g as usize].ident.filter else {
            return true;
        };
        if self.reqs[filter as usize].is_empty() {
            return true;
        }
        match &self.bins[bin as usize].kind {
            BinKind::Node { idx, .. } => self.reqs[filter as usize]
                .matches_labels(&self.input.nodes[*idx].labels)
                .is_ok(),
            BinKind::InFlight { idx, .. } => self.input.in_flight[*idx]
                .requirements
                .intersects(&self.reqs[filter as usize])
                .is_ok(),
            BinKind::Claim { state, .. } => {
                let st = *state;
                if let Some(ok) = self.filter_ok.get(&(st, filter)) {
                    return *ok;
                }
                let ok = self.states[st as usize]
                    .reqs
                    .intersects(&self.reqs[filter as usize])
                    .is_ok();
                self.filter_ok.insert((st, filter), ok);
                ok
            }
        }
    }

    fn bin_domain(&mut self, bin: u32, key: usize) -> Option<u16> {
        match &self.bins[bin as usize].kind {
            BinKind::Node { domains, .. } | BinKind::InFlight { domains, .. } => {
                domains.get(key).copied().flatten()
            }
            BinKind::Claim { state, .. } => {
                let d = self.state_domains(*state, key);
                (d.count_ones() == 1).then(|| d.trailing_zeros() as u16)
            }
        }
    }

    /// Attributes pending counts of a claim to the domains its state now pins.
    fn flush_pending(&mut self, bin: u32) {
        if self.bins[bin as usize].pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.bins[bin as usize].pending);
        let mut keep = Vec::new();
        for (g, c) in pending {
            let Some(k) = self.groups[g as usize].key_id else {
                continue;
            };
            match self.bin_domain(bin, k) {
                Some(d) => self.groups[g as usize].counts[d as usize] += c,
                None => keep.push((g, c)),
            }
        }
        self.bins[bin as usize].pending = keep;
    }

    /// Applies the narrowing the last topology check left, starting from state `st`.
    fn apply_narrowing(&mut self, mut st: u32) -> Option<u32> {
        for i in 0..self.narrowed.len() {
            let (k, domains) = self.narrowed[i];
            st = self.narrow(st, k, domains)?;
        }
        Some(st)
    }

    // ------------------------------------------------------------ evaluation

    fn eval_claim(&mut self, bin: u32, shape: u32, add: &[u64]) -> Option<Eval> {
        let BinKind::Claim {
            state: st0,
            pos: pos0,
        } = self.bins[bin as usize].kind
        else {
            return None;
        };
        let pool = self.states[st0 as usize].pool;
        if !self.tolerates(shape, pool) {
            return None;
        }
        let info = self.shapes[shape as usize].info as usize;
        if !self.infos[info].spec.host_ports.is_empty()
            && Self::ports_conflict(
                &self.bins[bin as usize].ports,
                &self.infos[info].spec.host_ports,
            )
        {
            return None;
        }
        let req = self.shapes[shape as usize].req;
        let st1 = self.transition(st0, req)?;
        let dims = self.dims.len();
        let start1 = if st1 == st0 { pos0 } else { 0 };
        if !fits_add(
            &self.bins[bin as usize].used,
            add,
            &self.states[st1 as usize].suffix[start1 * dims..(start1 + 1) * dims],
        ) {
            return None;
        }
        self.topology_check(
            &HostView::Claim {
                bin: Some(bin),
                state: st1,
            },
            shape,
        )
        .ok()?;
        let st = self.apply_narrowing(st1)?;
        let start = if st == st0 { pos0 } else { 0 };
        let old_type = self.states[st0 as usize].order[pos0];
        let pos = self.find_type(
            st,
            start,
            &self.bins[bin as usize].used,
            add,
            Some(old_type),
        )?;
        let price = self.states[st as usize].price[pos];
        let delta = price - self.states[st0 as usize].price[pos0];
        Some(Eval {
            state: st,
            pos,
            delta,
        })
    }

    fn eval_new(&mut self, pool: usize, shape: u32, add: &[u64]) -> Option<Eval> {
        let base = self.pools[pool].base?;
        if !self.tolerates(shape, pool) {
            return None;
        }
        if self.pools[pool].node_limit.is_some_and(|(_, r)| r == 0) {
            return None;
        }
        let info = self.shapes[shape as usize].info as usize;
        if Self::ports_conflict(
            &self.pools[pool].daemon_ports,
            &self.infos[info].spec.host_ports,
        ) {
            return None;
        }
        let req = self.shapes[shape as usize].req;
        let st1 = self.transition(base, req)?;
        let dims = self.dims.len();
        let zero = vec![0; dims];
        if !fits_add(&zero, add, &self.states[st1 as usize].suffix[..dims]) {
            return None;
        }
        self.topology_check(
            &HostView::Claim {
                bin: None,
                state: st1,
            },
            shape,
        )
        .ok()?;
        let st = self.apply_narrowing(st1)?;
        let pos = self.find_type(st, 0, &zero, add, None)?;
        // Whether to open the claim is decided by the price of the pod alone; its size, by the
        // copies still to come.
        let alone = self.states[st as usize].price[pos];
        let pos = self.size_for_copies(st, pos, shape, add);
        Some(Eval {
            state: st,
            pos,
            delta: alone,
        })
    }

    fn existing_fits(&mut self, bin: u32, shape: u32, add: &[u64]) -> bool {
        let info = self.shapes[shape as usize].info as usize;
        let Some(cap) = self.bin_cap(bin) else {
            return false;
        };
        if !fits_add(&self.bins[bin as usize].used, add, cap) {
            return false;
        }
        let (taints, node_reqs): (&[Taint], Option<&Requirements>) =
            match &self.bins[bin as usize].kind {
                BinKind::Node { idx, .. } => (&self.input.nodes[*idx].taints, None),
                BinKind::InFlight { idx, .. } => (
                    &self.input.in_flight[*idx].taints,
                    Some(&self.input.in_flight[*idx].requirements),
                ),
                BinKind::Claim { .. } => return false,
            };
        if taints::first_untolerated(taints, &self.shapes[shape as usize].tolerations).is_some() {
            return false;
        }
        let req = self.shapes[shape as usize].req;
        let ok = match self.existing_req_ok.get(&(bin, req)) {
            Some(ok) => *ok,
            None => {
                let pod_reqs = &self.reqs[req as usize];
                let ok = match (&self.bins[bin as usize].kind, node_reqs) {
                    (BinKind::Node { idx, .. }, _) => pod_reqs
                        .matches_labels(&self.input.nodes[*idx].labels)
                        .is_ok(),
                    (_, Some(r)) => r.implies(pod_reqs, |k| self.well_known.contains(k)).is_ok(),
                    _ => false,
                };
                self.existing_req_ok.insert((bin, req), ok);
                ok
            }
        };
        if !ok
            || Self::ports_conflict(
                &self.bins[bin as usize].ports,
                &self.infos[info].spec.host_ports,
            )
        {
            return false;
        }
        self.topology_check(&HostView::Fixed { bin }, shape).is_ok()
    }

    // ------------------------------------------------------------ search

    fn find_existing(&mut self, shape: u32, add: &[u64]) -> Option<u32> {
        let cpu = add[self.cpu];
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend(
            self.existing_index
                .range((cpu, 0)..)
                .take(EXISTING_SCAN)
                .map(|(_, b)| *b),
        );
        let found = buf
            .iter()
            .copied()
            .find(|b| self.existing_fits(*b, shape, add));
        self.scratch = buf;
        found
    }

    fn find_claim(&mut self, shape: u32, add: &[u64]) -> Option<(u32, Eval)> {
        // Hostname affinity: only claims that already hold a matching pod.
        let n_affinity = self.shapes[shape as usize].host_affinity.len();
        for i in 0..n_affinity {
            let g = self.shapes[shape as usize].host_affinity[i];
            if self.groups[g as usize].host_total > 0 {
                let mut bins: Vec<u32> = self.groups[g as usize].host.keys().copied().collect();
                bins.sort_unstable();
                return self.best_of(bins.into_iter().take(LIST_SCAN), shape, add);
            }
        }
        // Hostname anti-affinity / spread: only claims still eligible for the group.
        let exclusive = self.shapes[shape as usize]
            .exclusive
            .iter()
            .min_by_key(|(g, list)| self.groups[*g as usize].eligible[*list as usize].len())
            .copied();
        if let Some((g, list)) = exclusive {
            return self.scan_eligible(g, list, shape, add);
        }
        self.refresh_compat(shape);
        let cpu = add[self.cpu];
        let mut best: Option<(u32, Eval, u64)> = None;
        let mut growth: Option<(u32, Eval)> = None;
        let mut buf = std::mem::take(&mut self.scratch);
        let mut states = std::mem::take(&mut self.state_buf);
        states.clear();
        // States whose claims could take the pod at all (a fresh claim in them passes the
        // topology checks that do not depend on the claim's own pods).
        for i in 0..self.shapes[shape as usize].compat_states.len() {
            let st = self.shapes[shape as usize].compat_states[i];
            if self.states[st as usize].slack.is_empty() {
                continue;
            }
            let st1 = self.transition(st, self.shapes[shape as usize].req);
            let Some(st1) = st1 else { continue };
            if let Err(f) = self.topology_check(
                &HostView::Claim {
                    bin: None,
                    state: st1,
                },
                shape,
            ) && f.holds_for_whole_state()
            {
                continue;
            }
            states.push(st);
        }
        // Room at no extra cost, best fit on CPU first.
        for st in &states {
            buf.clear();
            buf.extend(
                self.states[*st as usize]
                    .slack
                    .range((cpu, 0)..)
                    .take(ZERO_SCAN)
                    .map(|(_, b)| *b),
            );
            for b in &buf {
                let Some(e) = self.eval_claim(*b, shape, add) else {
                    continue;
                };
                if e.delta <= PRICE_EPSILON {
                    let slack = self.claim_slack(*b);
                    if best
                        .as_ref()
                        .is_none_or(|(bb, _, bs)| (slack, *b) < (*bs, *bb))
                    {
                        best = Some((*b, e, slack));
                    }
                    break;
                }
                if growth
                    .as_ref()
                    .is_none_or(|(_, ge)| e.delta < ge.delta - PRICE_EPSILON)
                {
                    growth = Some((*b, e));
                }
            }
        }
        if best.is_none() {
            // Otherwise the claim whose price grows least, most slack first.
            for st in &states {
                buf.clear();
                buf.extend(
                    self.states[*st as usize]
                        .slack
                        .range(..(cpu, 0))
                        .rev()
                        .take(GROW_SCAN)
                        .map(|(_, b)| *b),
                );
                for b in &buf {
                    let Some(e) = self.eval_claim(*b, shape, add) else {
                        continue;
                    };
                    if growth
                        .as_ref()
                        .is_none_or(|(_, ge)| e.delta < ge.delta - PRICE_EPSILON)
                    {
                        growth = Some((*b, e));
                    }
                }
            }
        }
        self.scratch = buf;
        self.state_buf = states;
        best.map(|(b, e, _)| (b, e)).or(growth)
    }

    fn best_of(
        &mut self,
        bins: impl Iterator<Item = u32>,
        shape: u32,
        add: &[u64],
    ) -> Option<(u32, Eval)> {
        let mut best: Option<(u32, Eval)> = None;
        for b in bins {
            if !matches!(self.bins[b as usize].kind, BinKind::Claim { .. }) {
                continue;
            }
            if let Some(e) = self.eval_claim(b, shape, add)
                && best
                    .as_ref()
                    .is_none_or(|(_, be)| e.delta < be.delta - PRICE_EPSILON)
            {
                best = Some((b, e));
            }
        }
        best
    }

    fn scan_eligible(
        &mut self,
        g: u32,
        which: List,
        shape: u32,
        add: &[u64],
    ) -> Option<(u32, Eval)> {
        let mut list = std::mem::take(&mut self.groups[g as usize].eligible[which as usize]);
        let mut best: Option<(u32, Eval)> = None;
        let (mut read, mut write, mut examined) = (0, 0, 0);
        while read < list.len() && examined < LIST_SCAN {
            let b = list[read];
            read += 1;
            if self.groups[g as usize].blocked(which, b) {
                continue;
            }
            list[write] = b;
            write += 1;
            examined += 1;
            if let Some(e) = self.eval_claim(b, shape, add) {
                let zero = e.delta <= PRICE_EPSILON;
                if best
                    .as_ref()
                    .is_none_or(|(_, be)| e.delta < be.delta - PRICE_EPSILON)
                {
                    best = Some((b, e));
                }
                if zero {
                    break;
                }
            }
        }
        list.drain(write..read);
        self.groups[g as usize].eligible[which as usize] = list;
        best
    }

    fn find_new(&mut self, shape: u32, add: &[u64]) -> Option<(usize, Eval)> {
        if self.max_new_claims.is_some_and(|m| self.new_claims >= m) {
            return None;
        }
        (0..self.pools.len()).find_map(|p| self.eval_new(p, shape, add).map(|e| (p, e)))
    }

    // ------------------------------------------------------------ commit

    fn commit_existing(&mut self, bin: u32, pod: usize, shape: u32) {
        let info = self.shapes[shape as usize].info;
        let add = self.infos[info as usize].requests.clone();
        let cpu = self.cpu;
        let old_free = self.bin_cap(bin).map_or(0, |c| {
            c[cpu].saturating_sub(self.bins[bin as usize].used[cpu])
        });
        self.existing_index.remove(&(old_free, bin));
        let b = &mut self.bins[bin as usize];
        for (u, x) in b.used.iter_mut().zip(add.iter()) {
            *u = u.saturating_add(*x);
        }
        b.pods.push(pod as u32);
        b.ports
            .extend(self.infos[info as usize].spec.host_ports.iter().cloned());
        let free = self.bin_cap(bin).map_or(0, |c| {
            c[cpu].saturating_sub(self.bins[bin as usize].used[cpu])
        });
        self.existing_index.insert((free, bin));
        self.record(bin, info, Some(shape));
        self.placement[pod] = Some(bin);
    }

    fn charge(&mut self, pool: usize, new_type: u32, old_type: Option<u32>) {
        let p = &mut self.pools[pool];
        let n = p.limits.len();
        for j in 0..n {
            let new = p.limit_cost[new_type as usize * n + j];
            let old = old_type.map_or(0, |o| p.limit_cost[o as usize * n + j]);
            p.limits[j].2 = p.limits[j]
                .2
                .saturating_sub(new.saturating_sub(old))
                .saturating_add(old.saturating_sub(new));
        }
        if old_type.is_none()
            && let Some((_, r)) = &mut p.node_limit
        {
            *r = r.saturating_sub(1);
        }
    }

    fn commit_claim(&mut self, bin: u32, pod: usize, shape: u32, e: Eval) {
        let info = self.shapes[shape as usize].info;
        let add = self.infos[info as usize].requests.clone();
        let BinKind::Claim {
            state: st0,
            pos: pos0,
        } = self.bins[bin as usize].kind
        else {
            return;
        };
        let slack0 = self.claim_slack(bin);
        self.states[st0 as usize].slack.remove(&(slack0, bin));
        let pool = self.states[st0 as usize].pool;
        let old_type = self.states[st0 as usize].order[pos0];
        let new_type = self.states[e.state as usize].order[e.pos];
        self.charge(pool, new_type, Some(old_type));
        let b = &mut self.bins[bin as usize];
        b.kind = BinKind::Claim {
            state: e.state,
            pos: e.pos,
        };
        for (u, x) in b.used.iter_mut().zip(add.iter()) {
            *u = u.saturating_add(*x);
        }
        b.pods.push(pod as u32);
        b.ports
            .extend(self.infos[info as usize].spec.host_ports.iter().cloned());
        let slack = self.claim_slack(bin);
        self.states[e.state as usize].slack.insert((slack, bin));
        self.flush_pending(bin);
        self.record(bin, info, Some(shape));
        self.placement[pod] = Some(bin);
    }

    fn open_claim(&mut self, pool: usize, pod: usize, shape: u32, e: Eval) {
        let info = self.shapes[shape as usize].info;
        let add = self.infos[info as usize].requests.clone();
        let bin = self.bins.len() as u32;
        self.new_claims += 1;
        let new_type = self.states[e.state as usize].order[e.pos];
        self.charge(pool, new_type, None);
        let mut ports = self.pools[pool].daemon_ports.clone();
        ports.extend(self.infos[info as usize].spec.host_ports.iter().cloned());
        self.bins.push(Bin {
            kind: BinKind::Claim {
                state: e.state,
                pos: e.pos,
            },
            used: add.to_vec(),
            pods: vec![pod as u32],
            ports,
            pending: Vec::new(),
        });
        let slack = self.claim_slack(bin);
        self.states[e.state as usize].slack.insert((slack, bin));
        for i in 0..self.tracked_groups.len() {
            let group = &mut self.groups[self.tracked_groups[i] as usize];
            for (list, track) in group.eligible.iter_mut().zip(group.track) {
                if track {
                    list.push(bin);
                }
            }
        }
        self.record(bin, info, Some(shape));
        self.placement[pod] = Some(bin);
    }

    // ------------------------------------------------------------ main loop

    fn try_place(&mut self, pod: usize, shape: u32) -> bool {
        let info = self.shapes[shape as usize].info;
        let add = self.infos[info as usize].requests.clone();
        if !self.existing_index.is_empty()
            && let Some(bin) = self.find_existing(shape, &add)
        {
            self.commit_existing(bin, pod, shape);
            return true;
        }
        let best = self.find_claim(shape, &add);
        if let Some((bin, e)) = best
            && e.delta <= PRICE_EPSILON
        {
            self.commit_claim(bin, pod, shape, e);
            return true;
        }
        let fresh = self.find_new(shape, &add);
        match (best, fresh) {
            (Some((bin, e)), Some((pool, f))) => {
                if e.delta <= f.delta + PRICE_EPSILON {
                    self.commit_claim(bin, pod, shape, e);
                } else {
                    self.open_claim(pool, pod, shape, f);
                }
                true
            }
            (Some((bin, e)), None) => {
                self.commit_claim(bin, pod, shape, e);
                true
            }
            (None, Some((pool, f))) => {
                self.open_claim(pool, pod, shape, f);
                true
            }
            (None, None) => false,
        }
    }

    fn place(&mut self, pod: usize) -> bool {
        let info_id = self.pod_info[pod];
        if self.infos[info_id as usize].spec.invalid.is_some() {
            return false;
        }
        let initial = self.initial_relax(&self.infos[info_id as usize]);
        let mut relax = initial;
        loop {
            let shape = self.shape(info_id, relax);
            if self.try_place(pod, shape) {
                self.relaxed[pod] = relax != initial;
                if let Some(n) = self.unplaced.get_mut(info_id as usize) {
                    *n = n.saturating_sub(1);
                }
                return true;
            }
            match self.next_relax(&self.infos[info_id as usize], relax) {
                Some(r) => relax = r,
                None => return false,
            }
        }
    }

    pub(crate) fn run(mut self) -> Plan {
        let mut queue: Vec<usize> = (0..self.input.pods.len()).collect();
        {
            // Pods that need a node to themselves (required hostname anti-affinity) go first: the
            // nodes they open are paid for anyway, and every later pod can fill their slack.
            let alone: Vec<bool> = self
                .infos
                .iter()
                .map(|i| {
                    i.anti_groups
                        .iter()
                        .any(|g| self.groups[*g as usize].is_hostname())
                })
                .collect();
            let infos = &self.infos;
            let pod_info = &self.pod_info;
            let (cpu, memory) = (self.cpu, self.memory);
            queue.sort_by(|a, b| {
                let (ia, ib) = (pod_info[*a] as usize, pod_info[*b] as usize);
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

    // ------------------------------------------------------------ output

    fn finish(mut self) -> Plan {
        let mut plan = Plan::default();
        let n_existing = self.input.nodes.len() + self.input.in_flight.len();
        for b in 0..n_existing {
            let bin = &self.bins[b];
            if bin.pods.is_empty() {
                continue;
            }
            let (target, name) = match &bin.kind {
                BinKind::Node { idx, .. } => (Target::Node, self.input.nodes[*idx].name.clone()),
                BinKind::InFlight { idx, .. } => (
                    Target::InFlightClaim,
                    self.input.in_flight[*idx].name.clone(),
                ),
                BinKind::Claim { .. } => continue,
            };
            plan.existing.push(ExistingPlacement {
                target,
                name,
                pods: bin.pods.iter().map(|p| *p as usize).collect(),
            });
        }
        for b in n_existing..self.bins.len() {
            if let Some(claim) = self.new_claim(b) {
                plan.new_claims.push(claim);
            }
        }
        for pod in 0..self.input.pods.len() {
            if self.placement[pod].is_none() {
                let u = self.explain(pod);
                plan.unschedulable.push(u);
            } else if self.relaxed[pod] {
                plan.relaxed.push(pod);
            }
        }
        plan
    }

    fn new_claim(&mut self, b: usize) -> Option<NewClaim> {
        let BinKind::Claim { state, pos } = self.bins[b].kind else {
            return None;
        };
        let st = &self.states[state as usize];
        let pool = &self.pools[st.pool];
        let used = &self.bins[b].used;
        let zero = vec![0; self.dims.len()];
        // The type the pool's limits were charged for; a claim sized for copies that went
        // elsewhere shrinks to the cheapest type that holds what it got.
        let chosen = st.order[pos];
        let pos = self
            .find_type(state, 0, used, &zero, Some(chosen))
            .unwrap_or(pos);
        let cheapest = st.price[pos];
        let ratio = self.input.options.max_price_ratio;
        // Types that hold the pods, cheapest first, within the limits' leftover headroom.
        let mut fitting: Vec<usize> = Vec::new();
        for i in pos..st.order.len() {
            let t = st.order[i];
            if fits_add(used, &zero, self.type_alloc(st.pool, t))
                && self.within_limits(pool, t, Some(chosen))
            {
                fitting.push(i);
            }
        }
        let mut options: Vec<usize> = fitting
            .iter()
            .copied()
            .filter(|i| ratio.is_none_or(|r| st.price[*i] <= cheapest * r + PRICE_EPSILON))
            .collect();
        if st.min_values {
            for req in st.reqs.iter() {
                let Some(min) = req.min_values() else {
                    continue;
                };
                let distinct = |opts: &[usize]| {
                    opts.iter()
                        .filter_map(|i| {
                            pool.types[st.order[*i] as usize]
                                .requirements
                                .get(req.key())
                        })
                        .flat_map(|r| r.values().filter(|v| req.has(v)).map(str::to_owned))
                        .collect::<BTreeSet<_>>()
                        .len()
                };
                let extra: Vec<usize> = fitting
                    .iter()
                    .copied()
                    .filter(|i| !options.contains(i))
                    .collect();
                let mut extra = extra.into_iter();
                while distinct(&options) < min as usize {
                    match extra.next() {
                        Some(i) => options.push(i),
                        None => break,
                    }
                }
            }
            options.sort_unstable();
        }
        options.truncate(self.input.options.max_instance_types.max(1));
        // Reserve the headroom the most expensive option could use.
        let n = pool.limits.len();
        let mut extra_charge = vec![0_u64; n];
        for i in &options {
            let t = st.order[*i] as usize;
            for (j, e) in extra_charge.iter_mut().enumerate() {
                *e = (*e).max(
                    pool.limit_cost[t * n + j]
                        .saturating_sub(pool.limit_cost[chosen as usize * n + j]),
                );
            }
        }
        let instance_types: Vec<InstanceTypeOption> = options
            .iter()
            .map(|i| {
                let it = pool.types[st.order[*i] as usize];
                let offering = &it.offerings[st.offering[*i] as usize];
                let (zone, capacity_type) = (offering.zone.clone(), offering.capacity_type.clone());
                InstanceTypeOption {
                    name: it.name.clone(),
                    price: st.price[*i],
                    zone,
                    capacity_type,
                    allocatable: it.allocatable(),
                }
            })
            .collect();
        let mut requirements = st.reqs.clone();
        requirements.add(Requirement::in_values(
            labels::INSTANCE_TYPE,
            instance_types.iter().map(|o| o.name.as_str()),
        ));
        let pod_requests: ResourceList = self
            .dims
            .iter()
            .zip(used.iter())
            .filter(|(_, v)| **v > 0)
            .map(|(n, v)| (n.clone(), *v))
            .collect();
        let claim = NewClaim {
            node_pool: pool.name.clone(),
            requirements,
            taints: pool.taints.clone(),
            startup_taints: pool.startup_taints.clone(),
            labels: pool.labels.clone(),
            pods: self.bins[b].pods.iter().map(|p| *p as usize).collect(),
            pod_requests,
            daemon_requests: pool.daemon[chosen as usize].clone(),
            instance_types,
        };
        let pool_ix = st.pool;
        let p = &mut self.pools[pool_ix];
        for (j, e) in extra_charge.into_iter().enumerate() {
            p.limits[j].2 = p.limits[j].2.saturating_sub(e);
        }
        Some(claim)
    }

    fn pod_name(&self, pod: usize) -> String {
        let meta = self.input.pods[pod].pod_meta();
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or("")
        )
    }

    fn explain(&mut self, pod: usize) -> Unschedulable {
        let info_id = self.pod_info[pod];
        let mut out = Unschedulable {
            pod,
            pod_name: self.pod_name(pod),
            existing: Vec::new(),
            node_pools: Vec::new(),
            invalid: self.infos[info_id as usize].spec.invalid.clone(),
        };
        if out.invalid.is_some() {
            return out;
        }
        // Explain at the most relaxed level: that is what was tried last.
        let mut relax = self.initial_relax(&self.infos[info_id as usize]);
        while let Some(r) = self.next_relax(&self.infos[info_id as usize], relax) {
            relax = r;
        }
        let shape = self.shape(info_id, relax);
        // Identical pods fail identically: explain each shape once.
        if let Some((existing, node_pools)) = self.explained.get(&shape) {
            out.existing = existing.clone();
            out.node_pools = node_pools.clone();
            return out;
        }
        let add = self.infos[info_id as usize].requests.clone();
        let mut existing: BTreeMap<String, usize> = BTreeMap::new();
        for b in 0..(self.input.nodes.len() + self.input.in_flight.len()) {
            let reason = self.existing_reason(b as u32, shape, &add);
            *existing.entry(reason).or_insert(0) += 1;
        }
        out.existing = existing.into_iter().collect();
        for p in 0..self.pools.len() {
            let reason = self.pool_reason(p, shape, &add);
            out.node_pools.push(PoolRejection {
                node_pool: self.pools[p].name.clone(),
                reason,
            });
        }
        self.explained
            .insert(shape, (out.existing.clone(), out.node_pools.clone()));
        out
    }

    fn existing_reason(&mut self, bin: u32, shape: u32, add: &[u64]) -> String {
        let (taints, labels_ok) = match &self.bins[bin as usize].kind {
            BinKind::Node { idx, .. } => {
                let node = &self.input.nodes[*idx];
                (
                    &node.taints,
                    self.reqs[self.shapes[shape as usize].req as usize]
                        .matches_labels(&node.labels),
                )
            }
            BinKind::InFlight { idx, .. } => {
                let c = &self.input.in_flight[*idx];
                (
                    &c.taints,
                    c.requirements
                        .implies(&self.reqs[self.shapes[shape as usize].req as usize], |k| {
                            self.well_known.contains(k)
                        }),
                )
            }
            BinKind::Claim { .. } => return String::new(),
        };
        if let Some(t) = taints::first_untolerated(taints, &self.shapes[shape as usize].tolerations)
        {
            return format!("have taint {} the pod does not tolerate", DisplayTaint(t));
        }
        if let Err(e) = labels_ok {
            return format!("do not match: the pod {}", e.describe("the node"));
        }
        if let Some(cap) = self.bin_cap(bin) {
            let used = &self.bins[bin as usize].used;
            if let Some(d) =
                (0..self.dims.len()).find(|d| used[*d].saturating_add(add[*d]) > cap[*d])
            {
                return format!("lack {}", self.dims[d]);
            }
        }
        let info = self.shapes[shape as usize].info;
        if Self::ports_conflict(
            &self.bins[bin as usize].ports,
            &self.infos[info as usize].spec.host_ports,
        ) {
            return "have a conflicting host port".to_owned();
        }
        match self.topology_check(&HostView::Fixed { bin }, shape) {
            Err(f) => format!("violate {}", self.describe(&f)),
            Ok(_) => "were passed over".to_owned(),
        }
    }

    fn pool_reason(&mut self, p: usize, shape: u32, add: &[u64]) -> PoolReason {
        if let Some(m) = &self.pools[p].invalid {
            return PoolReason::InvalidNodePool(m.clone());
        }
        let pool = &self.pools[p];
        if let Some(t) =
            taints::first_untolerated(&pool.taints, &self.shapes[shape as usize].tolerations)
        {
            return PoolReason::TaintNotTolerated(DisplayTaint(t).to_string());
        }
        let pod_reqs = self.reqs[self.shapes[shape as usize].req as usize].clone();
        if let Err(e) = pool
            .reqs
            .compatible(&pod_reqs, |k| self.well_known.contains(k))
        {
            return PoolReason::Requirements(e.describe(&format!("NodePool {}", pool.name)));
        }
        let combined = pool.reqs.intersection(&pod_reqs);
        let shown = {
            let mut r = combined.clone();
            r.remove(labels::NODE_POOL);
            r.to_string()
        };
        let matching: Vec<usize> = (0..pool.types.len())
            .filter(|t| pool.types[*t].requirements.intersects(&combined).is_ok())
            .collect();
        if matching.is_empty() {
            return PoolReason::NoInstanceType {
                requirements: shown,
            };
        }
        let offered: Vec<usize> = matching
            .iter()
            .copied()
            .filter(|t| pool.types[*t].cheapest_offering(&combined).is_some())
            .collect();
        if offered.is_empty() {
            let unavailable = matching
                .iter()
                .filter(|t| {
                    pool.types[**t]
                        .offerings
                        .iter()
                        .any(|o| !o.available && o.allowed_by(&combined))
                })
                .count();
            return PoolReason::NoAvailableOffering {
                requirements: shown,
                unavailable_types: unavailable,
            };
        }
        let dims = self.dims.len();
        let alloc = |t: usize| &pool.alloc[t * dims..(t + 1) * dims];
        let zero = vec![0; dims];
        let fitting: Vec<usize> = offered
            .iter()
            .copied()
            .filter(|t| fits_add(&zero, add, alloc(*t)))
            .collect();
        if fitting.is_empty() {
            let mut shortfalls = Vec::new();
            for (d, requested) in add.iter().copied().enumerate().filter(|(_, r)| *r > 0) {
                let Some(best) = offered
                    .iter()
                    .copied()
                    .max_by_key(|t| (alloc(*t)[d], std::cmp::Reverse(pool.types[*t].name.clone())))
                else {
                    continue;
                };
                if alloc(best)[d] < requested {
                    shortfalls.push(Shortfall {
                        resource: self.dims[d].clone(),
                        requested,
                        largest_type: pool.types[best].name.clone(),
                        largest: alloc(best)[d],
                    });
                }
            }
            // (shortfall score, type name, what it lacks)
            type Ranked = (u64, String, Vec<(String, u64, u64)>);
            let mut ranked: Vec<Ranked> = offered
                .iter()
                .map(|t| {
                    let a = alloc(*t);
                    let lacks: Vec<(String, u64, u64)> = (0..dims)
                        .filter(|d| add[*d] > a[*d])
                        .map(|d| (self.dims[d].clone(), add[d], a[d]))
                        .collect();
                    // Shortfall as parts per million of the request, summed over resources.
                    let score = (0..dims)
                        .filter(|d| add[*d] > a[*d])
                        .map(|d| {
                            ((add[d] - a[d]) as u128 * 1_000_000 / u128::from(add[d].max(1))) as u64
                        })
                        .sum();
                    (score, pool.types[*t].name.clone(), lacks)
                })
                .collect();
            ranked.sort();
            let closest = ranked
                .into_iter()
                .take(3)
                .map(|(_, name, lacks)| Closest { name, lacks })
                .collect();
            return PoolReason::TooLarge {
                shortfalls,
                closest,
            };
        }
        if let Some((limit, 0)) = pool.node_limit {
            return PoolReason::LimitReached {
                resource: resources::NODES.to_owned(),
                limit,
                remaining: 0,
                needed: 1,
            };
        }
        if !fitting
            .iter()
            .any(|t| self.within_limits(pool, *t as u32, None))
        {
            let cheapest = fitting
                .iter()
                .copied()
                .min_by(|a, b| {
                    let pa = pool.types[*a]
                        .cheapest_offering(&combined)
                        .map_or(f64::MAX, |o| o.price);
                    let pb = pool.types[*b]
                        .cheapest_offering(&combined)
                        .map_or(f64::MAX, |o| o.price);
                    pa.total_cmp(&pb)
                })
                .unwrap_or(fitting[0]);
            let n = pool.limits.len();
            if let Some(j) = (0..n).find(|j| pool.limit_cost[cheapest * n + j] > pool.limits[*j].2)
            {
                let (name, limit, remaining) = pool.limits[j].clone();
                return PoolReason::LimitReached {
                    resource: name,
                    limit,
                    remaining,
                    needed: pool.limit_cost[cheapest * n + j],
                };
            }
        }
        let info = self.shapes[shape as usize].info;
        if let Some(port) = self.infos[info as usize]
            .spec
            .host_ports
            .iter()
            .find(|hp| pool.daemon_ports.iter().any(|d| d.conflicts(hp)))
        {
            return PoolReason::HostPort(port.to_string());
        }
        let Some(base) = pool.base else {
            return PoolReason::NoInstanceType {
                requirements: shown,
            };
        };
        let Some(st) = self.transition(base, self.shapes[shape as usize].req) else {
            return PoolReason::NoInstanceType {
                requirements: shown,
            };
        };
        if self.states[st as usize].min_values
            && let Some((key, min_values, available)) = self.min_values_shortfall(st, 0, &zero, add)
        {
            return PoolReason::MinValues {
                key,
                min_values,
                available,
            };
        }
        match self.topology_check(
            &HostView::Claim {
                bin: None,
                state: st,
            },
            shape,
        ) {
            Err(f) => PoolReason::Topology(self.describe(&f)),
            Ok(_) => PoolReason::Topology(
                "the pod's constraints conflict with pods placed earlier in this round".to_owned(),
            ),
        }
    }
}

/// Whether a DaemonSet pod would run on a node with these taints and requirements.
fn daemon_runs_on(daemon: &PodSpecInfo, taints: &[Taint], reqs: &Requirements) -> bool {
    if taints::first_untolerated(taints, &daemon.tolerations()).is_some() {
        return false;
    }
    let mut daemon_reqs = daemon.node_selector.clone();
    if let Some(t) = daemon.required_terms.first() {
        daemon_reqs.add_all(t);
    }
    reqs.intersects(&daemon_reqs).is_ok()
}
