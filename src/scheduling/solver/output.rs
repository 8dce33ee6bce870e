//! The [`Plan`] of a finished round: placements on existing capacity, and each new claim sized
//! when it closes, with its cheapest-first options (cut at the price ratio, extended for
//! `minValues`, capped by what is left of the NodePool's limits).

use super::bins::BinKind;
use super::ids::{BinId, Id, PodId};
use super::{PRICE_EPSILON, Solver, fits_add};
use crate::apis::labels;
use crate::resources::ResourceList;
use crate::scheduling::pod::PodView;
use crate::scheduling::requirements::Requirement;
use crate::scheduling::{ExistingPlacement, InstanceTypeOption, NewClaim, Plan, Target};
use std::collections::BTreeSet;

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    pub(super) fn finish(mut self) -> Plan {
        let mut plan = Plan::default();
        let n_existing = self.input.nodes.len() + self.input.in_flight.len();
        for b in (0..n_existing).map(BinId::new) {
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
                pods: bin.pods.iter().map(|p| p.index()).collect(),
            });
        }
        for b in (n_existing..self.bins.len()).map(BinId::new) {
            if let Some(claim) = self.new_claim(b) {
                plan.new_claims.push(claim);
            }
        }
        for pod in self.placement.ids() {
            if self.placement[pod].is_none() {
                let u = self.explain(pod);
                plan.unschedulable.push(u);
            } else if self.relaxed[pod] {
                plan.relaxed.push(pod.index());
            }
        }
        plan
    }

    fn new_claim(&mut self, b: BinId) -> Option<NewClaim> {
        let BinKind::Claim { state, pos } = self.bins[b].kind else {
            return None;
        };
        let st = &self.states[state];
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
                        .filter_map(|i| pool.types[st.order[*i]].requirements.get(req.key()))
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
            let t = st.order[*i].index();
            for (j, e) in extra_charge.iter_mut().enumerate() {
                *e = (*e).max(
                    pool.limit_cost[t * n + j]
                        .saturating_sub(pool.limit_cost[chosen.index() * n + j]),
                );
            }
        }
        let instance_types: Vec<InstanceTypeOption> = options
            .iter()
            .map(|i| {
                let it = pool.types[st.order[*i]];
                let offering = &it.offerings[st.offering[*i] as usize];
                let (zone, capacity_type) = (offering.zone.clone(), offering.capacity_type);
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
            pods: self.bins[b].pods.iter().map(|p| p.index()).collect(),
            pod_requests,
            daemon_requests: pool.daemon[chosen].clone(),
            instance_types,
        };
        let pool_ix = st.pool;
        let p = &mut self.pools[pool_ix];
        for (j, e) in extra_charge.into_iter().enumerate() {
            p.limits[j].2 = p.limits[j].2.saturating_sub(e);
        }
        Some(claim)
    }

    pub(super) fn pod_name(&self, pod: PodId) -> String {
        let pod = &self.input.pods[pod.index()];
        format!(
            "{}/{}",
            pod.pod_namespace().unwrap_or("default"),
            pod.pod_name().unwrap_or("")
        )
    }
}
