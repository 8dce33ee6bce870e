//! Shapes: a distinct pod description at one relaxation level, and the relaxation order itself
//! (the alternatives its volumes allow, one by one, as upstream's `tryVolumeAlternative`; then
//! upstream's `preferences.go`: required node-affinity terms one by one, then preferred pod
//! affinity, preferred pod anti-affinity, preferred node affinity, `ScheduleAnyway` spreads, and
//! finally tolerating `PreferNoSchedule` taints).

use super::Solver;
use super::ids::{GroupId, Id, InfoId, PoolId, ReqId, ShapeId, StateId};
use crate::scheduling::PreferencePolicy;
use crate::scheduling::pod::{PodSpecInfo, PodView};
use crate::scheduling::taints;
use crate::scheduling::topology::{Kind, List};
use k8s_openapi::api::core::v1::Toleration;
use std::rc::Rc;

/// How far a pod's preferences have been relaxed, in upstream's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Relax {
    pub(super) volume_term: u32,
    pub(super) required_term: u32,
    pub(super) preferred_affinity: u32,
    pub(super) preferred_anti: u32,
    pub(super) preferred_node: u32,
    pub(super) soft_spread: u32,
    pub(super) tolerate_prefer_no_schedule: bool,
}

/// One distinct pod spec, with its groups resolved.
pub(super) struct Info {
    pub(super) spec: PodSpecInfo,
    pub(super) requests: Rc<[u64]>,
    pub(super) tolerations: Vec<Toleration>,
    pub(super) spread_groups: Vec<GroupId>,
    pub(super) affinity_groups: Vec<GroupId>,
    pub(super) preferred_affinity_groups: Vec<GroupId>,
    pub(super) anti_groups: Vec<GroupId>,
    pub(super) preferred_anti_groups: Vec<GroupId>,
    /// Groups whose selector and namespaces select this pod.
    pub(super) selected_by: Vec<GroupId>,
    /// Required anti-affinity groups (with owners) that select this pod.
    pub(super) inverse: Vec<GroupId>,
}

/// A pod spec at one relaxation level.
pub(super) struct Shape {
    pub(super) info: InfoId,
    pub(super) req: ReqId,
    pub(super) strict_req: ReqId,
    pub(super) tolerations: Vec<Toleration>,
    pub(super) owned: Vec<GroupId>,
    pub(super) owned_required_anti: Vec<GroupId>,
    pub(super) host_affinity: Vec<GroupId>,
    /// Hostname groups that exclude bins: (group, true when it is the inverse list).
    pub(super) exclusive: Vec<(GroupId, List)>,
    /// By [`PoolId`].
    pub(super) tolerates_pool: Vec<Option<bool>>,
    pub(super) compat_states: Vec<StateId>,
    pub(super) states_checked: usize,
}

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    pub(super) fn shape(&mut self, info_id: InfoId, relax: Relax) -> ShapeId {
        if let Some(s) = self.shape_ids.get(&(info_id, relax)) {
            return *s;
        }
        let info = &self.infos[info_id];
        let spec = &info.spec;
        let mut strict = spec.node_selector.clone();
        if let Some(term) = spec.required_terms.get(relax.required_term as usize) {
            strict.add_all(term);
        }
        let mut full = strict.clone();
        // The volumes' topology narrows the node but not the domains topology spread counts
        // (upstream keeps it out of the pod's strict requirements for the same reason).
        if let Some(term) = spec.volume_terms.get(relax.volume_term as usize) {
            full.add_all(term);
        }
        if let Some(pref) = spec.preferred_terms.get(relax.preferred_node as usize) {
            full.add_all(pref);
        }
        let mut tolerations = info.tolerations.clone();
        if relax.tolerate_prefer_no_schedule {
            tolerations.push(taints::tolerate_prefer_no_schedule());
        }
        let hard = spec.hard_spread_count();
        let mut owned: Vec<GroupId> = Vec::new();
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
            let group = &self.groups[*g];
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
            if self.groups[*g].is_hostname() {
                exclusive.push((*g, List::Inverse));
            }
        }
        let req = self.intern_req(full);
        let strict_req = self.intern_req(strict);
        let id = self.shapes.push(Shape {
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

    pub(super) fn initial_relax(&self, info: &Info) -> Relax {
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

    /// The next relaxation in upstream's order: the next alternative of the volumes' topology,
    /// the next required node-affinity term (with each volume alternative again), then
    /// preferred pod affinity, preferred pod anti-affinity, preferred node affinity,
    /// `ScheduleAnyway` spreads, and finally tolerating `PreferNoSchedule` taints.
    pub(super) fn next_relax(&self, info: &Info, r: Relax) -> Option<Relax> {
        let spec = &info.spec;
        if (r.volume_term as usize) + 1 < spec.volume_terms.len() {
            return Some(Relax {
                volume_term: r.volume_term + 1,
                ..r
            });
        }
        if (r.required_term as usize) + 1 < spec.required_terms.len() {
            return Some(Relax {
                required_term: r.required_term + 1,
                volume_term: 0,
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

    pub(super) fn tolerates(&mut self, shape: ShapeId, pool: PoolId) -> bool {
        if let Some(ok) = self.shapes[shape].tolerates_pool[pool.index()] {
            return ok;
        }
        let ok =
            taints::first_untolerated(&self.pools[pool].taints, &self.shapes[shape].tolerations)
                .is_none();
        self.shapes[shape].tolerates_pool[pool.index()] = Some(ok);
        ok
    }

    pub(super) fn refresh_compat(&mut self, shape: ShapeId) {
        loop {
            let checked = self.shapes[shape].states_checked;
            if checked >= self.states.len() {
                return;
            }
            let st = StateId::new(checked);
            self.shapes[shape].states_checked += 1;
            let pool = self.states[st].pool;
            if !self.tolerates(shape, pool) {
                continue;
            }
            let req = self.shapes[shape].req;
            if self.transition(st, req).is_some() {
                self.shapes[shape].compat_states.push(st);
            }
        }
    }
}
