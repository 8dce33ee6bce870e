//! What the scheduler reads from a pod: its resource requests (init containers, sidecars and
//! overhead included), node requirements (nodeSelector, required and preferred node affinity),
//! tolerations, topology spread constraints, pod (anti-)affinity terms and host ports.
//!
//! Everything is parsed once into [`PodSpecInfo`], which is hashable so that identical pods
//! (a Deployment's replicas) are scheduled from one shared, memoized description.

use super::requirements::Requirements;
use super::selector::Selector;
use crate::apis::labels;
use crate::resources::{self, QuantityError, ResourceList};
use k8s_openapi::api::core::v1::{Container, Pod, PodAffinityTerm, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// What the scheduler reads of a pod: its metadata and spec. The API's [`Pod`] is one; the
/// agent's pod cache keeps a smaller one (`state::pod_cache`).
pub trait PodView {
    /// `metadata.name`.
    fn pod_name(&self) -> Option<&str>;
    /// `metadata.namespace`.
    fn pod_namespace(&self) -> Option<&str>;
    /// `metadata.labels`.
    fn pod_labels(&self) -> Option<&BTreeMap<String, String>>;
    /// `spec`.
    fn pod_spec(&self) -> Option<&PodSpec>;
    /// Where the pod's spec and labels are shared with other pods' (a cached pod shares them
    /// with its replicas): two pods of one namespace with the same key read the same
    /// [`PodSpecInfo`]. `None`, the default, reads every pod on its own.
    fn shape_key(&self) -> Option<ShapeKey> {
        None
    }
    /// `status.phase`.
    fn pod_phase(&self) -> Option<&str>;
    /// `metadata.ownerReferences`.
    fn pod_owners(&self) -> &[OwnerReference];
    /// The annotation `key` (a cached pod keeps only those some loop reads).
    fn pod_annotation(&self, key: &str) -> Option<&str>;
    /// `status.startTime`: when the kubelet started the pod.
    fn pod_started_at(&self) -> Option<Timestamp>;
    /// `metadata.deletionTimestamp`: when the pod was asked to stop.
    fn pod_deleted_at(&self) -> Option<Timestamp>;
    /// Whether `metadata.deletionTimestamp` is set.
    fn is_terminating(&self) -> bool {
        self.pod_deleted_at().is_some()
    }
    /// Whether the `Ready` condition is True.
    fn is_ready(&self) -> bool;

    /// Whether the pod runs or will: not finished and not being deleted (upstream's
    /// `pod.IsActive`).
    fn is_active(&self) -> bool {
        !self.is_terminal() && !self.is_terminating()
    }

    /// Whether the pod has finished (`Succeeded` or `Failed`): it holds nothing on its node any
    /// more (upstream's `pod.IsTerminal`).
    fn is_terminal(&self) -> bool {
        matches!(self.pod_phase(), Some("Succeeded" | "Failed"))
    }

    /// Whether a DaemonSet owns the pod: it runs on every node and moves with none (upstream's
    /// `pod.IsOwnedByDaemonSet`).
    fn is_daemon_set_pod(&self) -> bool {
        self.pod_owners()
            .iter()
            .any(|o| o.api_version == "apps/v1" && o.kind == "DaemonSet")
    }

    /// Whether an owner controls the pod (a ReplicaSet, a StatefulSet, a Job...): something
    /// recreates it when it is evicted. A pod without one is gone for good.
    fn has_controller(&self) -> bool {
        self.pod_owners().iter().any(|o| o.controller == Some(true))
    }

    /// Whether the pod is a static pod's mirror: the kubelet owns it and the API server cannot
    /// remove it (upstream's `pod.IsOwnedByNode`; the kubelet also marks a mirror with
    /// [`labels::MIRROR_POD`]).
    fn is_mirror(&self) -> bool {
        self.pod_owners()
            .iter()
            .any(|o| o.api_version == "v1" && o.kind == "Node")
            || self.pod_annotation(labels::MIRROR_POD).is_some()
    }
}

/// The addresses of a pod's shared spec and labels (see [`PodView::shape_key`]). Only
/// compared while the pods it was taken from are borrowed, so an address is never reused.
pub(crate) type ShapeKey = (usize, usize);

impl PodView for Pod {
    fn pod_name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }

    fn pod_namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    fn pod_labels(&self) -> Option<&BTreeMap<String, String>> {
        self.metadata.labels.as_ref()
    }

    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()
    }

    fn pod_phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }

    fn pod_owners(&self) -> &[OwnerReference] {
        self.metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
    }

    fn pod_annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    fn pod_started_at(&self) -> Option<Timestamp> {
        Some(self.status.as_ref()?.start_time.as_ref()?.0)
    }

    fn pod_deleted_at(&self) -> Option<Timestamp> {
        self.metadata.deletion_timestamp.as_ref().map(|t| t.0)
    }

    fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }
}

/// The resources a pod needs on a node, as the kube-scheduler computes them:
/// `max(sum(containers) + sum(sidecars), max_i(init_i + sidecars started before i)) + overhead`,
/// plus one `pods`. A resource missing from `requests` falls back to its limit (what the API
/// server defaults requests to).
pub(crate) fn pod_requests(spec: &PodSpec) -> Result<ResourceList, QuantityError> {
    let mut app = ResourceList::new();
    for c in &spec.containers {
        app = app.saturating_add(&container_requests(c)?);
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let req = container_requests(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.saturating_add(&req);
            init_peak = init_peak.max_by_resource(&sidecars);
        } else {
            init_peak = init_peak.max_by_resource(&req.saturating_add(&sidecars));
        }
    }
    let mut total = app.saturating_add(&sidecars).max_by_resource(&init_peak);
    if let Some(overhead) = &spec.overhead {
        total = total.saturating_add(&ResourceList::from_quantities(overhead)?);
    }
    total.set(resources::PODS, 1);
    Ok(total)
}

fn container_requests(c: &Container) -> Result<ResourceList, QuantityError> {
    let Some(res) = &c.resources else {
        return Ok(ResourceList::new());
    };
    let empty = BTreeMap::<String, Quantity>::new();
    let requests = res.requests.as_ref().unwrap_or(&empty);
    let mut out = ResourceList::from_quantities(requests)?;
    for (name, q) in res.limits.iter().flatten() {
        if !requests.contains_key(name) {
            out.add_amount(name, resources::parse(name, &q.0)?);
        }
    }
    Ok(out)
}

/// A host port a pod binds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct HostPort {
    /// Host IP; empty or `0.0.0.0`/`::` means all addresses.
    pub ip: String,
    /// The port.
    pub port: i32,
    /// TCP, UDP or SCTP.
    pub protocol: String,
}

impl HostPort {
    fn unspecified(&self) -> bool {
        matches!(self.ip.as_str(), "" | "0.0.0.0" | "::")
    }

    /// Whether two pods binding these ports cannot share a node.
    pub(super) fn conflicts(&self, other: &Self) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.unspecified() || other.unspecified())
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.port, self.protocol)?;
        if !self.unspecified() {
            write!(f, " on {}", self.ip)?;
        }
        Ok(())
    }
}

/// The host ports of a pod's containers (and restartable init containers).
pub(crate) fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut out: Vec<HostPort> = spec
        .containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|hp| *hp > 0)?;
            Some(HostPort {
                ip: p.host_ip.clone().unwrap_or_default(),
                port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Which namespaces a pod-affinity term looks at.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Namespaces {
    /// Exactly these.
    Listed(BTreeSet<String>),
    /// Those whose labels match, plus the listed ones. An empty selector means all namespaces.
    Selected(Selector, BTreeSet<String>),
}

impl Namespaces {
    /// Whether a pod in `namespace` is in scope.
    pub(super) fn contains(
        &self,
        namespace: &str,
        namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> bool {
        match self {
            Self::Listed(names) => names.contains(namespace),
            Self::Selected(selector, names) => {
                names.contains(namespace) || {
                    let empty = BTreeMap::new();
                    selector.matches(namespace_labels.get(namespace).unwrap_or(&empty))
                }
            }
        }
    }
}

/// A pod (anti-)affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PodTerm {
    /// The topology key (`kubernetes.io/hostname`, `topology.kubernetes.io/zone`, ...).
    pub key: String,
    /// Which pods it is about.
    pub selector: Selector,
    /// In which namespaces.
    pub namespaces: Namespaces,
}

/// A topology spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SpreadTerm {
    /// The topology key.
    pub key: String,
    /// The most the matching-pod counts of two domains may differ by.
    pub max_skew: u32,
    /// With fewer eligible domains than this, the global minimum counts as zero.
    pub min_domains: Option<u32>,
    /// `DoNotSchedule` (true) or `ScheduleAnyway` (false, a preference).
    pub hard: bool,
    /// The pods counted (with `matchLabelKeys` folded in).
    pub selector: Selector,
    /// `nodeAffinityPolicy: Honor` (the default): only domains the pod's node selector and
    /// required node affinity allow count.
    pub honor_node_affinity: bool,
}

/// A toleration's `(key, operator, value, effect)`.
pub(crate) type TolerationKey = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// Everything the scheduler reads from one pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PodSpecInfo {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's labels (what selectors match).
    pub labels: BTreeMap<String, String>,
    /// Requests, see [`pod_requests`].
    pub requests: ResourceList,
    /// `nodeSelector` as requirements.
    pub node_selector: Requirements,
    /// Required node affinity: one requirement set per term, any of which may hold.
    pub required_terms: Vec<Requirements>,
    /// Preferred node affinity terms, heaviest first.
    pub preferred_terms: Vec<Requirements>,
    /// Tolerations as `(key, operator, value, effect)` (hashable, unlike the API type).
    pub tolerations: Vec<TolerationKey>,
    /// Topology spread constraints, hard ones first then soft ones, each in pod order.
    pub spread: Vec<SpreadTerm>,
    /// Required pod affinity terms.
    pub affinity: Vec<PodTerm>,
    /// Preferred pod affinity terms, heaviest first.
    pub preferred_affinity: Vec<PodTerm>,
    /// Required pod anti-affinity terms.
    pub anti_affinity: Vec<PodTerm>,
    /// Preferred pod anti-affinity terms, heaviest first.
    pub preferred_anti_affinity: Vec<PodTerm>,
    /// Host ports.
    pub host_ports: Vec<HostPort>,
    /// Why the pod's spec cannot be scheduled at all (a bad quantity or operator), if so.
    pub invalid: Option<String>,
    /// What its persistent volumes allow (see [`super::volume_topology`]): one alternative
    /// must hold, tried in order; empty when they do not constrain the node. Not part of the
    /// requirements topology spread counts with.
    pub volume_terms: Vec<Requirements>,
    /// Why its volumes keep it waiting (a claim not bound yet, a volume gone), if so.
    pub volume_error: Option<String>,
}

impl PodSpecInfo {
    /// Reads a pod.
    pub(crate) fn from_pod<P: PodView + ?Sized>(pod: &P) -> Self {
        let namespace = pod.pod_namespace().unwrap_or("default").to_owned();
        let labels = pod.pod_labels().cloned().unwrap_or_default();
        let empty = PodSpec::default();
        let spec = pod.pod_spec().unwrap_or(&empty);
        let mut invalid = None;
        let requests = pod_requests(spec).unwrap_or_else(|e| {
            invalid = Some(e.to_string());
            ResourceList::new().with(resources::PODS, 1)
        });
        let node_selector = Requirements::from_labels(spec.node_selector.iter().flatten());
        let affinity = spec.affinity.as_ref();
        let node_affinity = affinity.and_then(|a| a.node_affinity.as_ref());
        let mut required_terms = Vec::new();
        for term in node_affinity
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .iter()
            .flat_map(|r| &r.node_selector_terms)
        {
            match Requirements::from_node_selector(
                term.match_expressions.as_deref().unwrap_or_default(),
            ) {
                Ok(r) => required_terms.push(r),
                Err(e) => invalid = Some(e.to_string()),
            }
        }
        let mut preferred: Vec<(i32, usize, Requirements)> = Vec::new();
        for (i, p) in node_affinity
            .and_then(|n| {
                n.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .iter()
            .flat_map(|v| v.iter())
            .enumerate()
        {
            // An unparsable preference is dropped rather than failing the pod.
            if let Ok(r) = Requirements::from_node_selector(
                p.preference
                    .match_expressions
                    .as_deref()
                    .unwrap_or_default(),
            ) {
                preferred.push((p.weight, i, r));
            }
        }
        preferred.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| {
                (
                    t.key.clone(),
                    t.operator.clone(),
                    t.value.clone(),
                    t.effect.clone(),
                )
            })
            .collect();
        let mut hard_spread = Vec::new();
        let mut soft_spread = Vec::new();
        for c in spec.topology_spread_constraints.iter().flatten() {
            let mut selector = Selector::from_api(c.label_selector.as_ref());
            for key in c.match_label_keys.iter().flatten() {
                if let Some(value) = labels.get(key) {
                    selector = selector.and_equals(key, value);
                }
            }
            let term = SpreadTerm {
                key: labels::normalize(&c.topology_key).to_owned(),
                max_skew: u32::try_from(c.max_skew).unwrap_or(1).max(1),
                min_domains: c.min_domains.and_then(|m| u32::try_from(m).ok()),
                hard: c.when_unsatisfiable != "ScheduleAnyway",
                selector,
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            };
            if term.hard {
                hard_spread.push(term)
            } else {
                soft_spread.push(term)
            }
        }
        hard_spread.extend(soft_spread);
        let term = |t: &PodAffinityTerm| PodTerm {
            key: labels::normalize(&t.topology_key).to_owned(),
            selector: Selector::from_api(t.label_selector.as_ref()),
            namespaces: match (&t.namespaces, &t.namespace_selector) {
                (names, Some(sel)) => Namespaces::Selected(
                    Selector::from_api(Some(sel)),
                    names.iter().flatten().cloned().collect(),
                ),
                (Some(names), None) if !names.is_empty() => {
                    Namespaces::Listed(names.iter().cloned().collect())
                }
                _ => Namespaces::Listed([namespace.clone()].into_iter().collect()),
            },
        };
        let weighted = |terms: Vec<(i32, PodTerm)>| {
            let mut terms: Vec<(usize, (i32, PodTerm))> = terms.into_iter().enumerate().collect();
            terms.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
            terms.into_iter().map(|(_, (_, t))| t).collect::<Vec<_>>()
        };
        let pod_affinity = affinity
            .and_then(|a| a.pod_affinity.clone())
            .unwrap_or_default();
        let pod_anti = affinity
            .and_then(|a| a.pod_anti_affinity.clone())
            .unwrap_or_default();
        Self {
            labels: labels.clone(),
            requests,
            node_selector,
            required_terms,
            preferred_terms: preferred.into_iter().map(|(_, _, r)| r).collect(),
            tolerations,
            spread: hard_spread,
            affinity: pod_affinity
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(term)
                .collect(),
            preferred_affinity: weighted(
                pod_affinity
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .map(|w| (w.weight, term(&w.pod_affinity_term)))
                    .collect(),
            ),
            anti_affinity: pod_anti
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(term)
                .collect(),
            preferred_anti_affinity: weighted(
                pod_anti
                    .preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .map(|w| (w.weight, term(&w.pod_affinity_term)))
                    .collect(),
            ),
            host_ports: host_ports(spec),
            invalid,
            volume_terms: Vec::new(),
            volume_error: None,
            namespace,
        }
    }

    /// The tolerations in API form.
    pub(super) fn tolerations(&self) -> Vec<Toleration> {
        self.tolerations
            .iter()
            .map(|(key, operator, value, effect)| Toleration {
                key: key.clone(),
                operator: operator.clone(),
                value: value.clone(),
                effect: effect.clone(),
                toleration_seconds: None,
            })
            .collect()
    }

    /// How many spread constraints are hard (`DoNotSchedule`); the rest are soft.
    pub(crate) fn hard_spread_count(&self) -> usize {
        self.spread.iter().take_while(|s| s.hard).count()
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, ResourceRequirements};

    fn container(cpu: &str, mem: &str) -> Container {
        Container {
            name: "c".to_owned(),
            resources: Some(ResourceRequirements {
                requests: Some(
                    [
                        ("cpu".to_owned(), Quantity(cpu.to_owned())),
                        ("memory".to_owned(), Quantity(mem.to_owned())),
                    ]
                    .into_iter()
                    .collect(),
                ),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }
    }

    #[test]
    fn requests_take_the_larger_of_app_containers_and_init_containers() -> Result<(), QuantityError>
    {
        let mut spec = PodSpec {
            containers: vec![container("1", "1Gi"), container("500m", "1Gi")],
            ..PodSpec::default()
        };
        spec.init_containers = Some(vec![container("4", "512Mi")]);
        spec.overhead = Some(
            [("cpu".to_owned(), Quantity("100m".to_owned()))]
                .into_iter()
                .collect(),
        );
        let r = pod_requests(&spec)?;
        assert_eq!(
            r.get("cpu"),
            4100,
            "the init container's 4 cpu dominates, plus overhead"
        );
        assert_eq!(r.get("memory"), 2 << 30);
        assert_eq!(r.get("pods"), 1);
        Ok(())
    }

    #[test]
    fn sidecars_add_to_app_containers_and_to_later_init_containers() -> Result<(), QuantityError> {
        let mut sidecar = container("1", "1Gi");
        sidecar.restart_policy = Some("Always".to_owned());
        let spec = PodSpec {
            containers: vec![container("1", "1Gi")],
            init_containers: Some(vec![sidecar, container("2500m", "100Mi")]),
            ..PodSpec::default()
        };
        let r = pod_requests(&spec)?;
        assert_eq!(
            r.get("cpu"),
            3500,
            "init container 2.5 cpu runs next to the 1 cpu sidecar"
        );
        assert_eq!(r.get("memory"), 2 << 30, "app + sidecar memory");
        Ok(())
    }

    #[test]
    fn limits_stand_in_for_missing_requests() -> Result<(), QuantityError> {
        let c = Container {
            name: "gpu".to_owned(),
            resources: Some(ResourceRequirements {
                limits: Some(
                    [("nvidia.com/gpu".to_owned(), Quantity("2".to_owned()))]
                        .into_iter()
                        .collect(),
                ),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        };
        let r = pod_requests(&PodSpec {
            containers: vec![c],
            ..PodSpec::default()
        })?;
        assert_eq!(r.get("nvidia.com/gpu"), 2);
        Ok(())
    }

    #[test]
    fn host_ports_conflict_on_same_port_protocol_and_overlapping_ip() {
        let mut c = container("1", "1Gi");
        c.ports = Some(vec![ContainerPort {
            container_port: 80,
            host_port: Some(8080),
            ..ContainerPort::default()
        }]);
        let ports = host_ports(&PodSpec {
            containers: vec![c],
            ..PodSpec::default()
        });
        assert_eq!(
            ports,
            vec![HostPort {
                ip: String::new(),
                port: 8080,
                protocol: "TCP".to_owned()
            }]
        );
        let specific = HostPort {
            ip: "10.0.0.1".to_owned(),
            port: 8080,
            protocol: "TCP".to_owned(),
        };
        let other_ip = HostPort {
            ip: "10.0.0.2".to_owned(),
            ..specific.clone()
        };
        let udp = HostPort {
            protocol: "UDP".to_owned(),
            ..ports[0].clone()
        };
        assert!(ports[0].conflicts(&specific));
        assert!(!specific.conflicts(&other_ip));
        assert!(!ports[0].conflicts(&udp));
    }
}
