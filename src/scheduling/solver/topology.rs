//! Topology checks: whether a pod's spread constraints and pod (anti-)affinity terms allow a
//! host, which domains a claim must narrow to, and counting a placed pod in its groups. The
//! groups and their counts live in [`crate::scheduling::topology`]; this is upstream's
//! `topology.go` (`AddRequirements`, `Record`), with deferred counts for claims whose domain is
//! still open.

use super::Solver;
use super::bins::BinKind;
use super::ids::{BinId, GroupId, Id, InfoId, KeyId, ReqId, ShapeId, StateId};
use crate::scheduling::pod::PodView;
use crate::scheduling::topology::Kind;

/// A set of domains of one topology key, as bits of the key's sorted universe.
pub(super) type DomainSet = u128;
/// Topology keys other than the hostname keep at most this many domains (zones, racks, ...).
pub(super) const MAX_DOMAINS: usize = 128;

/// The domains in a set, lowest first.
pub(super) fn bits(mut set: DomainSet) -> impl Iterator<Item = usize> {
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
pub(super) enum Why {
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

/// A failed topology check: which group, and why.
pub(super) struct TopoFail {
    pub(super) group: GroupId,
    pub(super) why: Why,
}

impl TopoFail {
    /// Whether every claim of a state fails the same way as a fresh claim in it (so the state
    /// can be skipped without looking at its claims).
    pub(super) fn holds_for_whole_state(&self) -> bool {
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

/// The host a topology check looks at: existing capacity, or a claim (open, or about to be
/// opened) in a requirement state.
pub(super) enum HostView {
    Fixed { bin: BinId },
    Claim { bin: Option<BinId>, state: StateId },
}

impl HostView {
    fn bin(&self) -> Option<BinId> {
        match self {
            Self::Fixed { bin } => Some(*bin),
            Self::Claim { bin, .. } => *bin,
        }
    }
}

impl<'i, 'a, P: PodView> Solver<'i, 'a, P> {
    /// The topology key of a group; `None` for the hostname.
    pub(super) fn group_key(&self, g: GroupId) -> Option<KeyId> {
        self.groups[g].key_id.map(KeyId::new)
    }

    pub(super) fn domain_id(&self, key: KeyId, value: &str) -> Option<u16> {
        self.universe[key]
            .binary_search_by(|v| v.as_str().cmp(value))
            .ok()
            .map(|i| i as u16)
    }

    /// The domains of `key` the pod's node selector and required node affinity allow.
    fn pod_mask(&mut self, req: ReqId, key: KeyId) -> DomainSet {
        if let Some(m) = self.pod_masks.get(&(req, key)) {
            return *m;
        }
        let reqs = &self.reqs[req];
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

    fn allowed_mask(&mut self, host: &HostView, key: KeyId) -> DomainSet {
        if let Some((_, m)) = self.narrowed.iter().find(|(k, _)| *k == key) {
            return *m;
        }
        match host {
            HostView::Fixed { bin } => match &self.bins[*bin].kind {
                BinKind::Node { domains, .. } | BinKind::InFlight { domains, .. } => domains
                    .get(key.index())
                    .copied()
                    .flatten()
                    .map_or(0, |d| 1 << d),
                BinKind::Claim { .. } => 0,
            },
            HostView::Claim { state, .. } => self.state_domains(*state, key),
        }
    }

    fn set_narrowed(&mut self, key: KeyId, domains: DomainSet) {
        match self.narrowed.iter_mut().find(|(k, _)| *k == key) {
            Some((_, d)) => *d = domains,
            None => self.narrowed.push((key, domains)),
        }
    }

    /// Checks a shape's topology constraints on a host. For a claim, leaves in `self.narrowed`
    /// the topology keys the placement must narrow (key, allowed domains).
    pub(super) fn topology_check(
        &mut self,
        host: &HostView,
        shape: ShapeId,
    ) -> Result<(), TopoFail> {
        self.narrowed.clear();
        let info_id = self.shapes[shape].info;
        let n_owned = self.shapes[shape].owned.len();
        let n_inverse = self.infos[info_id].inverse.len();
        if n_owned == 0 && n_inverse == 0 {
            return Ok(());
        }
        let strict = self.shapes[shape].strict_req;
        let bin = host.bin();
        let fixed = matches!(host, HostView::Fixed { .. });
        for i in 0..n_owned {
            let g = self.shapes[shape].owned[i];
            let selects_self = self.infos[info_id].selected_by.binary_search(&g).is_ok();
            let Some(k) = self.group_key(g) else {
                let group = &self.groups[g];
                let count = bin.map_or(0, |b| group.host_count(b.raw()));
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
            let group = &self.groups[g];
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
            let Some(k) = self.group_key(g) else {
                if bin.is_some_and(|b| self.groups[g].owner_host_count(b.raw()) > 0) {
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
            let group = &self.groups[g];
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

    /// Counts a pod placed on a bin in every group that selects it, and as an owner of its
    /// required anti-affinity terms.
    pub(super) fn record(&mut self, bin: BinId, info: InfoId, owners_of_shape: Option<ShapeId>) {
        let n_selected = self.infos[info].selected_by.len();
        for i in 0..n_selected {
            let g = self.infos[info].selected_by[i];
            let Some(k) = self.group_key(g) else {
                let group = &mut self.groups[g];
                *group.host.entry(bin.raw()).or_insert(0) += 1;
                group.host_total += 1;
                continue;
            };
            if !self.counts_on(bin, g) {
                continue;
            }
            match self.bin_domain(bin, k) {
                Some(d) => self.groups[g].counts[d as usize] += 1,
                None => {
                    if matches!(self.bins[bin].kind, BinKind::Claim { .. }) {
                        let pending = &mut self.bins[bin].pending;
                        match pending.iter_mut().find(|(pg, _)| *pg == g) {
                            Some((_, c)) => *c += 1,
                            None => pending.push((g, 1)),
                        }
                    }
                }
            }
        }
        let n_owned = match owners_of_shape {
            Some(s) => self.shapes[s].owned_required_anti.len(),
            None => self.infos[info].anti_groups.len(),
        };
        for i in 0..n_owned {
            let g = match owners_of_shape {
                Some(s) => self.shapes[s].owned_required_anti[i],
                None => self.infos[info].anti_groups[i],
            };
            match self.group_key(g) {
                None => *self.groups[g].owner_host.entry(bin.raw()).or_insert(0) += 1,
                Some(k) => match self.bin_domain(bin, k) {
                    Some(d) => self.groups[g].owner_counts[d as usize] += 1,
                    None => {
                        // Not pinned yet: block every domain the claim might land in.
                        if let BinKind::Claim { state, .. } = self.bins[bin].kind {
                            for d in bits(self.state_domains(state, k)) {
                                self.groups[g].owner_counts[d] += 1;
                            }
                        }
                    }
                },
            }
        }
    }

    /// Whether a spread group with a node filter counts pods on this bin.
    fn counts_on(&mut self, bin: BinId, g: GroupId) -> bool {
        let Some(filter) = self.groups[g].ident.filter.map(ReqId::from_raw) else {
            return true;
        };
        if self.reqs[filter].is_empty() {
            return true;
        }
        match &self.bins[bin].kind {
            BinKind::Node { idx, .. } => self.reqs[filter]
                .matches_labels(&self.input.nodes[*idx].labels)
                .is_ok(),
            BinKind::InFlight { idx, .. } => self.input.in_flight[*idx]
                .requirements
                .intersects(&self.reqs[filter])
                .is_ok(),
            BinKind::Claim { state, .. } => {
                let st = *state;
                if let Some(ok) = self.filter_ok.get(&(st, filter)) {
                    return *ok;
                }
                let ok = self.states[st].reqs.intersects(&self.reqs[filter]).is_ok();
                self.filter_ok.insert((st, filter), ok);
                ok
            }
        }
    }

    fn bin_domain(&mut self, bin: BinId, key: KeyId) -> Option<u16> {
        match &self.bins[bin].kind {
            BinKind::Node { domains, .. } | BinKind::InFlight { domains, .. } => {
                domains.get(key.index()).copied().flatten()
            }
            BinKind::Claim { state, .. } => {
                let d = self.state_domains(*state, key);
                (d.count_ones() == 1).then(|| d.trailing_zeros() as u16)
            }
        }
    }

    /// Attributes pending counts of a claim to the domains its state now pins.
    pub(super) fn flush_pending(&mut self, bin: BinId) {
        if self.bins[bin].pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.bins[bin].pending);
        let mut keep = Vec::new();
        for (g, c) in pending {
            let Some(k) = self.group_key(g) else {
                continue;
            };
            match self.bin_domain(bin, k) {
                Some(d) => self.groups[g].counts[d as usize] += c,
                None => keep.push((g, c)),
            }
        }
        self.bins[bin].pending = keep;
    }

    /// Applies the narrowing the last topology check left, starting from state `st`.
    pub(super) fn apply_narrowing(&mut self, mut st: StateId) -> Option<StateId> {
        for i in 0..self.narrowed.len() {
            let (k, domains) = self.narrowed[i];
            st = self.narrow(st, k, domains)?;
        }
        Some(st)
    }

    fn pending_count(&self, bin: Option<BinId>, group: GroupId) -> u32 {
        bin.and_then(|b| {
            self.bins[b]
                .pending
                .iter()
                .find(|(g, _)| *g == group)
                .map(|(_, c)| *c)
        })
        .unwrap_or(0)
    }
}
