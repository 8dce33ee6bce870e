//! Requirement states: a NodePool's requirements narrowed by the pods of a claim, with the
//! instance types they still allow sorted by price, and the search for the cheapest one that
//! holds a claim's pods (within limits and `minValues`). Upstream's `nodeclaim.go` filters a
//! claim's instance types as pods are added (`filterInstanceTypesByRequirements`); here the
//! states are interned and their transitions memoized.

use super::ids::{BinId, Id, KeyId, PoolId, ReqId, ShapeId, StateId, TypeId};
use super::topology::{DomainSet, bits};
use super::{PRICE_EPSILON, Solver, fits_add};
use crate::scheduling::pod::PodView;
use crate::scheduling::requirements::{Requirement, Requirements};
use std::collections::BTreeSet;

/// A NodePool's requirements narrowed by some pods, with the types they allow.
pub(super) struct State {
    pub(super) pool: PoolId,
    pub(super) reqs: Requirements,
    /// The pool's types, cheapest first.
    pub(super) order: Vec<TypeId>,
    pub(super) price: Vec<f64>,
    /// Index of each type's cheapest offering in its `offerings`.
    pub(super) offering: Vec<u16>,
    /// `(order.len() + 1) × dims`: componentwise max allocatable of `order[i..]`.
    pub(super) suffix: Vec<u64>,
    /// Open claims in this state by (CPU slack, bin).
    pub(super) slack: BTreeSet<(u64, BinId)>,
    /// Per topology key ([`KeyId`]): the domains some type of this state can land in (lazy).
    pub(super) domains: Vec<Option<DomainSet>>,
    pub(super) min_values: bool,
}

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    pub(super) fn intern_state(&mut self, pool: PoolId, reqs: Requirements) -> Option<StateId> {
        if let Some(id) = self.state_ids.get(&(pool, reqs.clone())) {
            return Some(*id);
        }
        let dims = self.dims.len();
        let p = &self.pools[pool];
        let mut entries: Vec<(f64, &str, TypeId, u16)> = Vec::new();
        for (t, it) in p.types.enumerate() {
            if it.requirements.intersects(&reqs).is_err() {
                continue;
            }
            if let Some(o) = it.cheapest_offering(&reqs) {
                let index = it
                    .offerings
                    .iter()
                    .position(|x| std::ptr::eq(x, o))
                    .unwrap_or(0) as u16;
                entries.push((o.price, it.name.as_str(), t, index));
            }
        }
        if entries.is_empty() {
            return None;
        }
        entries.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        let order: Vec<TypeId> = entries.iter().map(|e| e.2).collect();
        let price = entries.iter().map(|e| e.0).collect();
        let offering = entries.into_iter().map(|e| e.3).collect();
        let mut suffix = vec![0; (order.len() + 1) * dims];
        for i in (0..order.len()).rev() {
            let t = order[i].index();
            for d in 0..dims {
                suffix[i * dims + d] = suffix[(i + 1) * dims + d].max(p.alloc[t * dims + d]);
            }
        }
        let min_values = reqs.has_min_values();
        let id = self.states.push(State {
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
    pub(super) fn transition(&mut self, st: StateId, req: ReqId) -> Option<StateId> {
        if let Some(r) = self.transitions.get(&(st, req)) {
            return *r;
        }
        let state = &self.states[st];
        let pod_reqs = &self.reqs[req];
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
    pub(super) fn narrow(
        &mut self,
        st: StateId,
        key: KeyId,
        domains: DomainSet,
    ) -> Option<StateId> {
        if let Some(r) = self.narrows.get(&(st, key, domains)) {
            return *r;
        }
        let values: Vec<&str> = bits(domains)
            .map(|d| self.universe[key][d].as_str())
            .collect();
        let mut reqs = self.states[st].reqs.clone();
        reqs.add(Requirement::in_values(&self.keys[key], values));
        let pool = self.states[st].pool;
        let result = if reqs == self.states[st].reqs {
            Some(st)
        } else {
            self.intern_state(pool, reqs)
        };
        self.narrows.insert((st, key, domains), result);
        result
    }

    /// Domains of `key` that some type of state `st` can land in.
    pub(super) fn state_domains(&mut self, st: StateId, key: KeyId) -> DomainSet {
        if let Some(Some(d)) = self.states[st].domains.get(key.index()) {
            return *d;
        }
        let state = &self.states[st];
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
                let it = pool.types[*t];
                it.requirements.allows(name, value) && it.cheapest_offering(&narrowed).is_some()
            });
            if reachable {
                out |= 1 << d;
            }
        }
        let domains = &mut self.states[st].domains;
        if domains.len() <= key.index() {
            domains.resize(key.index() + 1, None);
        }
        domains[key.index()] = Some(out);
        out
    }

    pub(super) fn type_alloc(&self, pool: PoolId, t: TypeId) -> &[u64] {
        let dims = self.dims.len();
        &self.pools[pool].alloc[t.index() * dims..(t.index() + 1) * dims]
    }

    /// The first position in `st`'s price order at or after `start` whose type holds
    /// `used + add` within the pool's limits (charging the difference from `old_type`).
    pub(super) fn find_type(
        &self,
        st: StateId,
        start: usize,
        used: &[u64],
        add: &[u64],
        old_type: Option<TypeId>,
    ) -> Option<usize> {
        let dims = self.dims.len();
        let state = &self.states[st];
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
    pub(super) fn size_for_copies(
        &self,
        st: StateId,
        pos: usize,
        shape: ShapeId,
        add: &[u64],
    ) -> usize {
        let state = &self.states[st];
        let price = state.price[pos];
        let sh = &self.shapes[shape];
        let info = &self.infos[sh.info];
        let left = u64::from(self.unplaced.get(sh.info.index()).copied().unwrap_or(0));
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

    /// For a state with `minValues`, the first requirement the types from position `from` on
    /// that hold `used + add` do not satisfy: (key, minValues, distinct values found).
    pub(super) fn min_values_shortfall(
        &self,
        st: StateId,
        from: usize,
        used: &[u64],
        add: &[u64],
    ) -> Option<(String, u32, usize)> {
        let state = &self.states[st];
        let pool = &self.pools[state.pool];
        let fitting = state.order[from..]
            .iter()
            .filter(|t| fits_add(used, add, self.type_alloc(state.pool, **t)))
            .map(|t| &pool.types[*t].requirements);
        state.reqs.min_values_shortfall(fitting)
    }
}
