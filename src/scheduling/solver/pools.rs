//! NodePools as the solver sees them: the instance types each may launch, what DaemonSets take
//! on each type, and what is left of `spec.limits`. Follows upstream's daemon overhead
//! (`getDaemonOverhead`, `isDaemonPodCompatible`) and remaining-resources bookkeeping in
//! `scheduler.go`, except that a claim is charged for the type it will most likely launch.

use super::Solver;
use super::ids::{Id, PoolId, StateId, Table, TypeId};
use crate::apis::labels;
use crate::resources::{self, ResourceList};
use crate::scheduling::InstanceType;
use crate::scheduling::pod::{HostPort, PodSpecInfo, PodView};
use crate::scheduling::requirements::{Requirement, Requirements};
use crate::scheduling::taints;
use k8s_openapi::api::core::v1::Taint;
use std::collections::BTreeMap;

/// A NodePool prepared for the round.
pub(super) struct Pool<'a> {
    pub(super) name: String,
    pub(super) reqs: Requirements,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) taints: Vec<Taint>,
    pub(super) startup_taints: Vec<Taint>,
    pub(super) types: Table<TypeId, &'a InstanceType>,
    /// Allocatable minus DaemonSet overhead, `types.len() × dims`.
    pub(super) alloc: Vec<u64>,
    /// What DaemonSets request on each type.
    pub(super) daemon: Table<TypeId, ResourceList>,
    /// (resource, limit, remaining) for limited resources other than `nodes`.
    pub(super) limits: Vec<(String, u64, u64)>,
    /// `types.len() × limits.len()`: what each type counts against each limit (its capacity).
    pub(super) limit_cost: Vec<u64>,
    /// (limit, remaining) for `nodes`.
    pub(super) node_limit: Option<(u64, u64)>,
    pub(super) daemon_ports: Vec<HostPort>,
    /// The state of a claim with no pods yet (`None` when no type is available).
    pub(super) base: Option<StateId>,
    pub(super) invalid: Option<String>,
    /// Why the pool may not launch now (see `PoolInput::not_ready`).
    pub(super) not_ready: Option<String>,
}

/// Whether a DaemonSet pod would run on a node with these taints and requirements.
pub(super) fn daemon_runs_on(daemon: &PodSpecInfo, taints: &[Taint], reqs: &Requirements) -> bool {
    if taints::first_untolerated(taints, &daemon.tolerations()).is_some() {
        return false;
    }
    let mut daemon_reqs = daemon.node_selector.clone();
    if let Some(t) = daemon.required_terms.first() {
        daemon_reqs.add_all(t);
    }
    reqs.intersects(&daemon_reqs).is_ok()
}

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    pub(super) fn init_pools(&mut self, pool_order: &[usize], daemons: &[PodSpecInfo]) {
        let input = self.input;
        for &i in pool_order {
            let p = &input.node_pools[i];
            let np = p.node_pool;
            let pool_name = np.metadata.name.clone().unwrap_or_default();
            let template = &np.spec.template;
            let mut invalid = None;
            let not_ready = p.not_ready.clone();
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
            let types: Table<TypeId, &InstanceType> = p
                .instance_types
                .iter()
                .filter(|it| it.requirements.intersects(&reqs).is_ok())
                .collect();
            // DaemonSet overhead and host ports per type.
            let dims = self.dims.len();
            let mut alloc = Vec::with_capacity(types.len() * dims);
            let mut daemon_lists = Table::new();
            let mut daemon_ports = Vec::new();
            for it in types.iter() {
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
            for it in types.iter() {
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
                not_ready,
            });
        }
        for i in self.pools.ids() {
            if self.pools[i].invalid.is_none() && self.pools[i].not_ready.is_none() {
                let reqs = self.pools[i].reqs.clone();
                self.pools[i].base = self.intern_state(i, reqs);
            }
        }
    }

    pub(super) fn within_limits(
        &self,
        pool: &Pool<'_>,
        t: TypeId,
        old_type: Option<TypeId>,
    ) -> bool {
        let n = pool.limits.len();
        (0..n).all(|j| {
            let new = pool.limit_cost[t.index() * n + j];
            let old = old_type.map_or(0, |o| pool.limit_cost[o.index() * n + j]);
            new.saturating_sub(old) <= pool.limits[j].2
        })
    }

    pub(super) fn charge(&mut self, pool: PoolId, new_type: TypeId, old_type: Option<TypeId>) {
        let p = &mut self.pools[pool];
        let n = p.limits.len();
        for j in 0..n {
            let new = p.limit_cost[new_type.index() * n + j];
            let old = old_type.map_or(0, |o| p.limit_cost[o.index() * n + j]);
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
}
