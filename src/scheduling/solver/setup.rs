//! Setting up a round: the resource dimensions, the distinct pod descriptions, the topology
//! groups of every term of every pod (pending or bound) and the existing nodes and in-flight
//! claims, each interned into a small integer once so the placement loop compares integers.

use super::Solver;
use super::bins::{Bin, BinKind};
use super::ids::{BinId, GroupId, Id, InfoId, KeyId, ReqId};
use super::pools::daemon_runs_on;
use super::shapes::Info;
use super::topology::MAX_DOMAINS;
use crate::apis::labels;
use crate::resources::{self, ResourceList};
use crate::scheduling::NamespaceLabels;
use crate::scheduling::pod::{Namespaces, PodSpecInfo, PodTerm, PodView, ShapeKey};
use crate::scheduling::requirements::Requirements;
use crate::scheduling::taints;
use crate::scheduling::topology::{Group, GroupKey, Kind, List};
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use std::rc::Rc;

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    fn dim(&mut self, name: &str) -> usize {
        if let Some(i) = self.dim_index.get(name) {
            return *i;
        }
        self.dims.push(name.to_owned());
        self.dim_index.insert(name.to_owned(), self.dims.len() - 1);
        self.dims.len() - 1
    }

    pub(super) fn vector(&self, list: &ResourceList) -> Vec<u64> {
        let mut v = vec![0; self.dims.len()];
        for (name, amount) in list.iter() {
            if let Some(i) = self.dim_index.get(name) {
                v[*i] = amount;
            }
        }
        v
    }

    pub(super) fn intern_req(&mut self, reqs: Requirements) -> ReqId {
        if let Some(id) = self.req_ids.get(&reqs) {
            return *id;
        }
        let id = self.reqs.push(reqs.clone());
        self.req_ids.insert(reqs, id);
        id
    }

    fn intern_info(&mut self, spec: PodSpecInfo) -> InfoId {
        if let Some(id) = self.info_ids.get(&spec) {
            return *id;
        }
        let id = self.infos.next_id();
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

    fn key_id(&mut self, key: &str) -> Option<KeyId> {
        if key == labels::HOSTNAME {
            return None;
        }
        if let Some(i) = self.key_ids.get(key) {
            return Some(*i);
        }
        let id = self.keys.push(key.to_owned());
        self.universe.push(Vec::new());
        self.key_ids.insert(key.to_owned(), id);
        Some(id)
    }

    fn intern_group(&mut self, ident: GroupKey) -> GroupId {
        if let Some(id) = self.group_ids.get(&ident) {
            return *id;
        }
        let key_id = self.key_id(&ident.key);
        let id = self.groups.next_id();
        self.group_ids.insert(ident.clone(), id);
        self.groups
            .push(Group::new(ident, key_id.map(KeyId::index), 0));
        id
    }

    fn term_group(&mut self, kind: Kind, term: &PodTerm) -> GroupId {
        self.intern_group(GroupKey {
            kind,
            key: term.key.clone(),
            namespaces: term.namespaces.clone(),
            selector: term.selector.clone(),
            filter: None,
        })
    }

    pub(super) fn init(&mut self, pool_order: &[usize]) {
        let input = self.input;
        // Resource dimensions: cpu, memory and pods always, then whatever anything mentions.
        self.cpu = self.dim(resources::CPU);
        self.memory = self.dim(resources::MEMORY);
        self.dim(resources::PODS);

        // Pods that share their spec and labels (see `PodView::shape_key`) are read once, not
        // parsed and hashed again each: bound pods are most of a large cluster's pods (20,000
        // at 5,000 nodes) and come from a few templates, as do the pods of a burst. Hashed
        // with Fx: the keys are addresses, and SipHash was a tenth of the round at that size.
        let mut shapes: FxHashMap<(ShapeKey, &str), InfoId> = FxHashMap::default();

        // Pending pods. A pod with volumes has terms of its own (its claims' zones).
        for pod in &input.pods {
            let volumes = input.volume_topology.get(*pod);
            let shared = pod
                .shape_key()
                .filter(|_| volumes.is_none())
                .map(|key| (key, pod.pod_namespace().unwrap_or("default")));
            if let Some(id) = shared.and_then(|key| shapes.get(&key)) {
                self.pod_info.push(*id);
                self.unplaced[id.index()] += 1;
                continue;
            }
            let mut spec = PodSpecInfo::from_pod(*pod);
            match volumes {
                Some(Ok(alternatives)) => spec.volume_terms = alternatives.0.clone(),
                Some(Err(e)) => spec.volume_error = Some(e.to_string()),
                None => {}
            }
            let id = self.intern_info(spec);
            if let Some(key) = shared {
                shapes.insert(key, id);
            }
            self.pod_info.push(id);
            if self.unplaced.len() <= id.index() {
                self.unplaced.resize(id.index() + 1, 0);
            }
            self.unplaced[id.index()] += 1;
        }
        // Bound pods.
        let existing_pods: Vec<Vec<InfoId>> = input
            .nodes
            .iter()
            .map(|n| &n.pods)
            .chain(input.in_flight.iter().map(|c| &c.pods))
            .map(|pods| {
                pods.iter()
                    .map(|p| {
                        let Some(key) = p.shape_key() else {
                            return self.intern_info(PodSpecInfo::from_pod(*p));
                        };
                        let namespace = p.pod_namespace().unwrap_or("default");
                        *shapes
                            .entry((key, namespace))
                            .or_insert_with(|| self.intern_info(PodSpecInfo::from_pod(*p)))
                    })
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
        for i in self.infos.ids() {
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
        for i in self.infos.ids() {
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
                    namespaces: Namespaces::Listed([spec.namespace.clone()].into_iter().collect()),
                    selector: term.selector.clone(),
                    filter: term.honor_node_affinity.then_some(filter.raw()),
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
            let anti: Vec<GroupId> = spec
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
                self.groups[*g].has_required_owners = true;
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
            let n = g.key_id.map_or(0, |k| self.universe[KeyId::new(k)].len());
            g.counts = vec![0; n];
            g.owner_counts = vec![0; n];
        }
        // Which groups select which pods.
        let ns_labels: &NamespaceLabels = &input.namespace_labels;
        for info in &mut self.infos {
            for (gid, g) in self.groups.enumerate() {
                if g.ident.namespaces.contains(&info.spec.namespace, ns_labels)
                    && g.ident.selector.matches(&info.spec.labels)
                {
                    info.selected_by.push(gid);
                    if g.ident.kind == Kind::Anti && g.has_required_owners {
                        info.inverse.push(gid);
                    }
                }
            }
        }
        // Hostname groups whose pending owners or selected pods need eligible-claim lists.
        let pending: BTreeSet<InfoId> = self.pod_info.iter().copied().collect();
        for i in pending {
            let info = &self.infos[i];
            for g in &info.spread_groups {
                let own = if info.selected_by.binary_search(g).is_ok() {
                    List::OwnerSelf
                } else {
                    List::Owner
                };
                self.groups[*g].track[own as usize] = true;
            }
            for g in info.anti_groups.iter().chain(&info.preferred_anti_groups) {
                self.groups[*g].track[List::Owner as usize] = true;
            }
            for g in &info.inverse {
                self.groups[*g].track[List::Inverse as usize] = true;
            }
        }
        self.tracked_groups = self
            .groups
            .ids()
            .filter(|g| {
                let g = &self.groups[*g];
                g.is_hostname() && g.track.iter().any(|t| *t)
            })
            .collect();

        self.init_existing(&existing_pods, &daemon_infos);
    }

    /// The values each topology key can take: from the NodePools' requirements and template
    /// labels, their types' labels and available offerings, and existing nodes. Sorted, and
    /// capped at [`MAX_DOMAINS`] per key.
    fn init_universe(&mut self) {
        for k in self.keys.ids() {
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
                for it in pool.types.iter() {
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
                                .map(|o| o.capacity_type.as_str().to_owned()),
                        );
                    } else if let Some(req) = it.requirements.get(&key).filter(|r| r.is_finite()) {
                        of_pool.extend(req.values().map(str::to_owned));
                    }
                }
                values.extend(of_pool.into_iter().filter(|v| pool.reqs.allows(&key, v)));
            }
            for n in &self.input.nodes {
                if let Some(v) = n.labels.get(&key) {
                    values.insert(v.to_owned());
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

    fn init_existing(&mut self, existing_pods: &[Vec<InfoId>], daemons: &[PodSpecInfo]) {
        let input = self.input;
        let dims = self.dims.len();
        let n_nodes = input.nodes.len();
        for (i, node) in input.nodes.iter().enumerate() {
            let domains = self
                .keys
                .ids()
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
            let domains = self
                .keys
                .ids()
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
            let b = BinId::new(b);
            for info in infos {
                let req = self.infos[*info].requests.clone();
                let bin = &mut self.bins[b];
                for (u, x) in bin.used.iter_mut().zip(req.iter()) {
                    *u = u.saturating_add(*x);
                }
                bin.ports
                    .extend(self.infos[*info].spec.host_ports.iter().cloned());
                self.record(b, *info, None);
            }
        }
        for b in (0..(n_nodes + input.in_flight.len())).map(BinId::new) {
            let free = self.bin_cap(b).map_or(0, |cap| {
                cap[self.cpu].saturating_sub(self.bins[b].used[self.cpu])
            });
            self.existing_index.insert((free, b));
        }
    }
}
