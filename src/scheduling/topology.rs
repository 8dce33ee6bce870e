//! Topology groups: the pods a spread constraint or (anti-)affinity term counts, per domain.
//!
//! Like upstream, one group is shared by every pod whose term is identical (a Deployment's
//! replicas), counts are kept per domain (zone values, or individual nodes and claims for
//! `kubernetes.io/hostname`), and a required anti-affinity term also keeps where its *owners*
//! are, so that pods it selects avoid them (anti-affinity is symmetric). Domains are interned
//! per topology key into small integers.

use super::pod::Namespaces;
use super::selector::Selector;
use std::collections::HashMap;
use std::fmt;

/// What a group constrains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Topology spread.
    Spread {
        max_skew: u32,
        min_domains: Option<u32>,
    },
    /// Pod affinity: go where selected pods are.
    Affinity,
    /// Pod anti-affinity: avoid where selected pods are.
    Anti,
}

/// Which eligible-claim list of a hostname group a pod searches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum List {
    /// Owners of the term that it does not select.
    Owner = 0,
    /// Owners of the term that it also selects (a spread counts them too).
    OwnerSelf = 1,
    /// Pods a required anti-affinity term selects (avoid its owners).
    Inverse = 2,
}

/// Identity of a group, for sharing it between pods.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GroupKey {
    pub kind: Kind,
    pub key: String,
    pub namespaces: Namespaces,
    pub selector: Selector,
    /// Spread with `nodeAffinityPolicy: Honor`: the owner's node requirements (interned id).
    pub filter: Option<u32>,
}

/// Counts for one group.
#[derive(Debug)]
pub(crate) struct Group {
    pub ident: GroupKey,
    /// Index of the topology key in the solver's key table; `None` for the hostname key.
    pub key_id: Option<usize>,
    /// Selected pods per domain id (non-hostname keys).
    pub counts: Vec<u32>,
    /// Owners (required anti-affinity only) per domain id.
    pub owner_counts: Vec<u32>,
    /// Selected pods per bin (hostname key).
    pub host: HashMap<u32, u32>,
    /// Owners per bin (hostname key).
    pub owner_host: HashMap<u32, u32>,
    /// Selected pods on any host (hostname key).
    pub host_total: u64,
    /// Whether some pod owns this group as a required anti-affinity term.
    pub has_required_owners: bool,
    /// New-claim bins that may still be eligible (hostname key), by [`List`], lazily pruned.
    pub eligible: [Vec<u32>; 3],
    /// Whether new claims are added to each list.
    pub track: [bool; 3],
}

impl Group {
    pub(super) fn new(ident: GroupKey, key_id: Option<usize>, domains: usize) -> Self {
        Self {
            ident,
            key_id,
            counts: vec![0; domains],
            owner_counts: vec![0; domains],
            host: HashMap::new(),
            owner_host: HashMap::new(),
            host_total: 0,
            has_required_owners: false,
            eligible: [Vec::new(), Vec::new(), Vec::new()],
            track: [false; 3],
        }
    }

    pub(crate) fn is_hostname(&self) -> bool {
        self.key_id.is_none()
    }

    /// Whether a bin can no longer take pods through `list` (counts only grow, so for good).
    pub(super) fn blocked(&self, list: List, bin: u32) -> bool {
        match (list, self.ident.kind) {
            (List::Inverse, _) => self.owner_host_count(bin) > 0,
            (_, Kind::Anti) => self.host_count(bin) > 0,
            (List::Owner, Kind::Spread { max_skew, .. }) => self.host_count(bin) > max_skew,
            (List::OwnerSelf, Kind::Spread { max_skew, .. }) => self.host_count(bin) >= max_skew,
            (_, Kind::Affinity) => false,
        }
    }

    pub(crate) fn host_count(&self, bin: u32) -> u32 {
        self.host.get(&bin).copied().unwrap_or(0)
    }

    pub(crate) fn owner_host_count(&self, bin: u32) -> u32 {
        self.owner_host.get(&bin).copied().unwrap_or(0)
    }
}

impl fmt::Display for Group {
    /// `topology spread on topology.kubernetes.io/zone (maxSkew 1) over pods app=web`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.ident.key;
        match self.ident.kind {
            Kind::Spread {
                max_skew,
                min_domains,
            } => {
                write!(f, "topology spread on {key} (maxSkew {max_skew}")?;
                if let Some(m) = min_domains {
                    write!(f, ", minDomains {m}")?;
                }
                write!(f, ") over pods {}", self.ident.selector)
            }
            Kind::Affinity => write!(f, "pod affinity on {key} to pods {}", self.ident.selector),
            Kind::Anti => write!(
                f,
                "pod anti-affinity on {key} to pods {}",
                self.ident.selector
            ),
        }
    }
}
