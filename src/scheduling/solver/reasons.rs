//! Why a pod could not be placed: for each existing node and in-flight claim and for each
//! NodePool, the first check it fails, in the [`crate::scheduling::Unschedulable`] vocabulary.
//! Built only for pods left over at the end of a round, once per shape.

use super::bins::BinKind;
use super::ids::{BinId, Id, PodId, PoolId, ShapeId, TypeId};
use super::topology::{HostView, TopoFail, Why};
use super::{Solver, fits_add};
use crate::apis::labels;
use crate::resources;
use crate::scheduling::explain::{Closest, PoolReason, PoolRejection, Shortfall, Unschedulable};
use crate::scheduling::pod::PodView;
use crate::scheduling::taints::{self, DisplayTaint};
use std::collections::BTreeMap;

/// A shape's explanation: (existing-node reasons with counts, NodePool rejections).
pub(super) type Explained = (Vec<(String, usize)>, Vec<PoolRejection>);

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    pub(super) fn explain(&mut self, pod: PodId) -> Unschedulable {
        let info_id = self.pod_info[pod];
        let mut out = Unschedulable {
            pod: pod.index(),
            pod_name: self.pod_name(pod),
            existing: Vec::new(),
            node_pools: Vec::new(),
            invalid: self.infos[info_id].spec.invalid.clone(),
            volume_error: self.infos[info_id].spec.volume_error.clone(),
            volume_topology: {
                let terms = &self.infos[info_id].spec.volume_terms;
                (!terms.is_empty()).then(|| {
                    crate::scheduling::volume_topology::Alternatives(terms.clone()).to_string()
                })
            },
        };
        if out.invalid.is_some() || out.volume_error.is_some() {
            return out;
        }
        // Explain at the most relaxed level: that is what was tried last.
        let mut relax = self.initial_relax(&self.infos[info_id]);
        while let Some(r) = self.next_relax(&self.infos[info_id], relax) {
            relax = r;
        }
        let shape = self.shape(info_id, relax);
        // Identical pods fail identically: explain each shape once.
        if let Some((existing, node_pools)) = self.explained.get(&shape) {
            out.existing = existing.clone();
            out.node_pools = node_pools.clone();
            return out;
        }
        let add = self.infos[info_id].requests.clone();
        let mut existing: BTreeMap<String, usize> = BTreeMap::new();
        for b in (0..(self.input.nodes.len() + self.input.in_flight.len())).map(BinId::new) {
            let reason = self.existing_reason(b, shape, &add);
            *existing.entry(reason).or_insert(0) += 1;
        }
        out.existing = existing.into_iter().collect();
        for p in self.pools.ids() {
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

    fn existing_reason(&mut self, bin: BinId, shape: ShapeId, add: &[u64]) -> String {
        let (taints, labels_ok) = match &self.bins[bin].kind {
            BinKind::Node { idx, .. } => {
                let node = &self.input.nodes[*idx];
                (
                    &node.taints,
                    self.reqs[self.shapes[shape].req].matches_labels(&node.labels),
                )
            }
            BinKind::InFlight { idx, .. } => {
                let c = &self.input.in_flight[*idx];
                (
                    &c.taints,
                    c.requirements
                        .implies(&self.reqs[self.shapes[shape].req], |k| {
                            self.well_known.contains(k)
                        }),
                )
            }
            BinKind::Claim { .. } => return String::new(),
        };
        if let Some(t) = taints::first_untolerated(taints, &self.shapes[shape].tolerations) {
            return format!("have taint {} the pod does not tolerate", DisplayTaint(t));
        }
        if let Err(e) = labels_ok {
            return format!("do not match: the pod {}", e.describe("the node"));
        }
        if let Some(cap) = self.bin_cap(bin) {
            let used = &self.bins[bin].used;
            if let Some(d) =
                (0..self.dims.len()).find(|d| used[*d].saturating_add(add[*d]) > cap[*d])
            {
                return format!("lack {}", self.dims[d]);
            }
        }
        let info = self.shapes[shape].info;
        if Self::ports_conflict(&self.bins[bin].ports, &self.infos[info].spec.host_ports) {
            return "have a conflicting host port".to_owned();
        }
        match self.topology_check(&HostView::Fixed { bin }, shape) {
            Err(f) => format!("violate {}", self.describe(&f)),
            Ok(_) => "were passed over".to_owned(),
        }
    }

    fn pool_reason(&mut self, p: PoolId, shape: ShapeId, add: &[u64]) -> PoolReason {
        if let Some(m) = &self.pools[p].invalid {
            return PoolReason::InvalidNodePool(m.clone());
        }
        if let Some(m) = &self.pools[p].not_ready {
            return PoolReason::NotReady(m.clone());
        }
        let pool = &self.pools[p];
        if let Some(t) = taints::first_untolerated(&pool.taints, &self.shapes[shape].tolerations) {
            return PoolReason::TaintNotTolerated(DisplayTaint(t).to_string());
        }
        let pod_reqs = self.reqs[self.shapes[shape].req].clone();
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
        let matching: Vec<TypeId> = pool
            .types
            .ids()
            .filter(|t| pool.types[*t].requirements.intersects(&combined).is_ok())
            .collect();
        if matching.is_empty() {
            return PoolReason::NoInstanceType {
                requirements: shown,
            };
        }
        let offered: Vec<TypeId> = matching
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
        let alloc = |t: TypeId| &pool.alloc[t.index() * dims..(t.index() + 1) * dims];
        let zero = vec![0; dims];
        let fitting: Vec<TypeId> = offered
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
        if !fitting.iter().any(|t| self.within_limits(pool, *t, None)) {
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
            if let Some(j) =
                (0..n).find(|j| pool.limit_cost[cheapest.index() * n + j] > pool.limits[*j].2)
            {
                let (name, limit, remaining) = pool.limits[j].clone();
                return PoolReason::LimitReached {
                    resource: name,
                    limit,
                    remaining,
                    needed: pool.limit_cost[cheapest.index() * n + j],
                };
            }
        }
        let info = self.shapes[shape].info;
        if let Some(port) = self.infos[info]
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
        let Some(st) = self.transition(base, self.shapes[shape].req) else {
            return PoolReason::NoInstanceType {
                requirements: shown,
            };
        };
        if self.states[st].min_values
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

    /// A sentence for a failed topology check.
    fn describe(&self, f: &TopoFail) -> String {
        let group = &self.groups[f.group];
        let why = match f.why {
            Why::HostFull(n) => format!("the node already has {n} matching pods"),
            Why::NoMatchOnHost => "no matching pod is on the node".to_owned(),
            Why::MatchOnHost => "a matching pod is already on the node".to_owned(),
            Why::NoLabel => format!("the node has no {} label", group.ident.key),
            Why::Skew => {
                let counts: Vec<String> = self
                    .group_key(f.group)
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
}
