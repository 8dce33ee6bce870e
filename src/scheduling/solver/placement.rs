//! Placing one pod: on an existing node or in-flight claim (upstream's `existingnode.go`), on a
//! claim opened earlier in this round (upstream's `nodeclaim.go`), or on a new claim (upstream's
//! `trySchedule` in `scheduler.go`), choosing by price as the module docs of
//! [`crate::scheduling`] describe.

use super::bins::{Bin, BinKind};
use super::ids::{BinId, GroupId, Id, PodId, PoolId, ShapeId, StateId};
use super::topology::HostView;
use super::{PRICE_EPSILON, Solver, fits_add};
use crate::scheduling::pod::{HostPort, PodView};
use crate::scheduling::requirements::Requirements;
use crate::scheduling::taints;
use crate::scheduling::topology::List;
use k8s_openapi::api::core::v1::Taint;

/// Claims examined per requirement state when looking for one with room at no extra cost.
const ZERO_SCAN: usize = 48;
/// Claims examined per requirement state when looking for the cheapest one to grow.
const GROW_SCAN: usize = 16;
/// Eligible claims examined for a pod with hostname anti-affinity or hostname spread.
const LIST_SCAN: usize = 64;
/// Existing nodes examined per pod.
const EXISTING_SCAN: usize = 512;

/// What placing a pod on a claim would do: the claim's new state and type, and the price change.
#[derive(Clone, Copy, Debug)]
pub(super) struct Eval {
    pub(super) state: StateId,
    pub(super) pos: usize,
    pub(super) delta: f64,
}

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    pub(super) fn bin_cap(&self, bin: BinId) -> Option<&[u64]> {
        match &self.bins[bin].kind {
            BinKind::Node { cap, .. } | BinKind::InFlight { cap, .. } => Some(cap),
            BinKind::Claim { .. } => None,
        }
    }

    fn claim_slack(&self, bin: BinId) -> u64 {
        let b = &self.bins[bin];
        match b.kind {
            BinKind::Claim { state, pos } => {
                let s = &self.states[state];
                let t = s.order[pos];
                self.type_alloc(s.pool, t)[self.cpu].saturating_sub(b.used[self.cpu])
            }
            _ => 0,
        }
    }

    pub(super) fn ports_conflict(have: &[HostPort], add: &[HostPort]) -> bool {
        add.iter().any(|a| have.iter().any(|h| h.conflicts(a)))
    }

    fn eval_claim(&mut self, bin: BinId, shape: ShapeId, add: &[u64]) -> Option<Eval> {
        let BinKind::Claim {
            state: st0,
            pos: pos0,
        } = self.bins[bin].kind
        else {
            return None;
        };
        let pool = self.states[st0].pool;
        if !self.tolerates(shape, pool) {
            return None;
        }
        let info = self.shapes[shape].info;
        if !self.infos[info].spec.host_ports.is_empty()
            && Self::ports_conflict(&self.bins[bin].ports, &self.infos[info].spec.host_ports)
        {
            return None;
        }
        let req = self.shapes[shape].req;
        let st1 = self.transition(st0, req)?;
        let dims = self.dims.len();
        let start1 = if st1 == st0 { pos0 } else { 0 };
        if !fits_add(
            &self.bins[bin].used,
            add,
            &self.states[st1].suffix[start1 * dims..(start1 + 1) * dims],
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
        let old_type = self.states[st0].order[pos0];
        let pos = self.find_type(st, start, &self.bins[bin].used, add, Some(old_type))?;
        let price = self.states[st].price[pos];
        let delta = price - self.states[st0].price[pos0];
        Some(Eval {
            state: st,
            pos,
            delta,
        })
    }

    fn eval_new(&mut self, pool: PoolId, shape: ShapeId, add: &[u64]) -> Option<Eval> {
        let base = self.pools[pool].base?;
        if !self.tolerates(shape, pool) {
            return None;
        }
        if self.pools[pool].node_limit.is_some_and(|(_, r)| r == 0) {
            return None;
        }
        let info = self.shapes[shape].info;
        if Self::ports_conflict(
            &self.pools[pool].daemon_ports,
            &self.infos[info].spec.host_ports,
        ) {
            return None;
        }
        let req = self.shapes[shape].req;
        let st1 = self.transition(base, req)?;
        let dims = self.dims.len();
        let zero = vec![0; dims];
        if !fits_add(&zero, add, &self.states[st1].suffix[..dims]) {
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
        let alone = self.states[st].price[pos];
        let pos = self.size_for_copies(st, pos, shape, add);
        Some(Eval {
            state: st,
            pos,
            delta: alone,
        })
    }

    fn existing_fits(&mut self, bin: BinId, shape: ShapeId, add: &[u64]) -> bool {
        let info = self.shapes[shape].info;
        let Some(cap) = self.bin_cap(bin) else {
            return false;
        };
        if !fits_add(&self.bins[bin].used, add, cap) {
            return false;
        }
        let (taints, node_reqs): (&[Taint], Option<&Requirements>) = match &self.bins[bin].kind {
            BinKind::Node { idx, .. } => (&self.input.nodes[*idx].taints, None),
            BinKind::InFlight { idx, .. } => (
                &self.input.in_flight[*idx].taints,
                Some(&self.input.in_flight[*idx].requirements),
            ),
            BinKind::Claim { .. } => return false,
        };
        if taints::first_untolerated(taints, &self.shapes[shape].tolerations).is_some() {
            return false;
        }
        let req = self.shapes[shape].req;
        let ok = match self.existing_req_ok.get(&(bin, req)) {
            Some(ok) => *ok,
            None => {
                let pod_reqs = &self.reqs[req];
                let ok = match (&self.bins[bin].kind, node_reqs) {
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
        if !ok || Self::ports_conflict(&self.bins[bin].ports, &self.infos[info].spec.host_ports) {
            return false;
        }
        self.topology_check(&HostView::Fixed { bin }, shape).is_ok()
    }

    fn find_existing(&mut self, shape: ShapeId, add: &[u64]) -> Option<BinId> {
        let cpu = add[self.cpu];
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend(
            self.existing_index
                .range((cpu, BinId::new(0))..)
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

    fn find_claim(&mut self, shape: ShapeId, add: &[u64]) -> Option<(BinId, Eval)> {
        // Hostname affinity: only claims that already hold a matching pod.
        let n_affinity = self.shapes[shape].host_affinity.len();
        for i in 0..n_affinity {
            let g = self.shapes[shape].host_affinity[i];
            if self.groups[g].host_total > 0 {
                // The group counts hosts in a hash map: sort for a deterministic order.
                let mut bins: Vec<BinId> = self.groups[g]
                    .host
                    .keys()
                    .copied()
                    .map(BinId::from_raw)
                    .collect();
                bins.sort_unstable();
                return self.best_of(bins.into_iter().take(LIST_SCAN), shape, add);
            }
        }
        // Hostname anti-affinity / spread: only claims still eligible for the group.
        let exclusive = self.shapes[shape]
            .exclusive
            .iter()
            .min_by_key(|(g, list)| self.groups[*g].eligible[*list as usize].len())
            .copied();
        if let Some((g, list)) = exclusive {
            return self.scan_eligible(g, list, shape, add);
        }
        self.refresh_compat(shape);
        let cpu = add[self.cpu];
        let mut best: Option<(BinId, Eval, u64)> = None;
        let mut growth: Option<(BinId, Eval)> = None;
        let mut buf = std::mem::take(&mut self.scratch);
        let mut states = std::mem::take(&mut self.state_buf);
        states.clear();
        // States whose claims could take the pod at all (a fresh claim in them passes the
        // topology checks that do not depend on the claim's own pods).
        for i in 0..self.shapes[shape].compat_states.len() {
            let st = self.shapes[shape].compat_states[i];
            if self.states[st].slack.is_empty() {
                continue;
            }
            let st1 = self.transition(st, self.shapes[shape].req);
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
                self.states[*st]
                    .slack
                    .range((cpu, BinId::new(0))..)
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
                    self.states[*st]
                        .slack
                        .range(..(cpu, BinId::new(0)))
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
        bins: impl Iterator<Item = BinId>,
        shape: ShapeId,
        add: &[u64],
    ) -> Option<(BinId, Eval)> {
        let mut best: Option<(BinId, Eval)> = None;
        for b in bins {
            if !matches!(self.bins[b].kind, BinKind::Claim { .. }) {
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
        g: GroupId,
        which: List,
        shape: ShapeId,
        add: &[u64],
    ) -> Option<(BinId, Eval)> {
        let mut list = std::mem::take(&mut self.groups[g].eligible[which as usize]);
        let mut best: Option<(BinId, Eval)> = None;
        let (mut read, mut write, mut examined) = (0, 0, 0);
        while read < list.len() && examined < LIST_SCAN {
            let raw = list[read];
            read += 1;
            if self.groups[g].blocked(which, raw) {
                continue;
            }
            list[write] = raw;
            let b = BinId::from_raw(raw);
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
        self.groups[g].eligible[which as usize] = list;
        best
    }

    fn find_new(&mut self, shape: ShapeId, add: &[u64]) -> Option<(PoolId, Eval)> {
        if self.max_new_claims.is_some_and(|m| self.new_claims >= m) {
            return None;
        }
        self.pools
            .ids()
            .find_map(|p| self.eval_new(p, shape, add).map(|e| (p, e)))
    }

    fn commit_existing(&mut self, bin: BinId, pod: PodId, shape: ShapeId) {
        let info = self.shapes[shape].info;
        let add = self.infos[info].requests.clone();
        let cpu = self.cpu;
        let old_free = self
            .bin_cap(bin)
            .map_or(0, |c| c[cpu].saturating_sub(self.bins[bin].used[cpu]));
        self.existing_index.remove(&(old_free, bin));
        let b = &mut self.bins[bin];
        for (u, x) in b.used.iter_mut().zip(add.iter()) {
            *u = u.saturating_add(*x);
        }
        b.pods.push(pod);
        b.ports
            .extend(self.infos[info].spec.host_ports.iter().cloned());
        let free = self
            .bin_cap(bin)
            .map_or(0, |c| c[cpu].saturating_sub(self.bins[bin].used[cpu]));
        self.existing_index.insert((free, bin));
        self.record(bin, info, Some(shape));
        self.placement[pod] = Some(bin);
    }

    fn commit_claim(&mut self, bin: BinId, pod: PodId, shape: ShapeId, e: Eval) {
        let info = self.shapes[shape].info;
        let add = self.infos[info].requests.clone();
        let BinKind::Claim {
            state: st0,
            pos: pos0,
        } = self.bins[bin].kind
        else {
            return;
        };
        let slack0 = self.claim_slack(bin);
        self.states[st0].slack.remove(&(slack0, bin));
        let pool = self.states[st0].pool;
        let old_type = self.states[st0].order[pos0];
        let new_type = self.states[e.state].order[e.pos];
        self.charge(pool, new_type, Some(old_type));
        let b = &mut self.bins[bin];
        b.kind = BinKind::Claim {
            state: e.state,
            pos: e.pos,
        };
        for (u, x) in b.used.iter_mut().zip(add.iter()) {
            *u = u.saturating_add(*x);
        }
        b.pods.push(pod);
        b.ports
            .extend(self.infos[info].spec.host_ports.iter().cloned());
        let slack = self.claim_slack(bin);
        self.states[e.state].slack.insert((slack, bin));
        self.flush_pending(bin);
        self.record(bin, info, Some(shape));
        self.placement[pod] = Some(bin);
    }

    fn open_claim(&mut self, pool: PoolId, pod: PodId, shape: ShapeId, e: Eval) {
        let info = self.shapes[shape].info;
        let add = self.infos[info].requests.clone();
        let bin = self.bins.next_id();
        self.new_claims += 1;
        let new_type = self.states[e.state].order[e.pos];
        self.charge(pool, new_type, None);
        let mut ports = self.pools[pool].daemon_ports.clone();
        ports.extend(self.infos[info].spec.host_ports.iter().cloned());
        self.bins.push(Bin {
            kind: BinKind::Claim {
                state: e.state,
                pos: e.pos,
            },
            used: add.to_vec(),
            pods: vec![pod],
            ports,
            pending: Vec::new(),
        });
        let slack = self.claim_slack(bin);
        self.states[e.state].slack.insert((slack, bin));
        for i in 0..self.tracked_groups.len() {
            let group = &mut self.groups[self.tracked_groups[i]];
            for (list, track) in group.eligible.iter_mut().zip(group.track) {
                if track {
                    list.push(bin.raw());
                }
            }
        }
        self.record(bin, info, Some(shape));
        self.placement[pod] = Some(bin);
    }

    pub(super) fn try_place(&mut self, pod: PodId, shape: ShapeId) -> bool {
        let info = self.shapes[shape].info;
        let add = self.infos[info].requests.clone();
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
}
