//! Volume topology: which nodes a pod's persistent volumes let it run on, as upstream's
//! `pkg/controllers/provisioning/scheduling/volumetopology.go` reads them.
//!
//! A pod's `persistentVolumeClaim` and generic ephemeral volumes name claims. A bound claim's
//! PersistentVolume constrains the node by its `nodeAffinity` (a zonal EBS or PD volume names
//! its zone); an unbound claim whose StorageClass binds `WaitForFirstConsumer` constrains it by
//! the class's `allowedTopologies`. Each node-selector term (or topology term) is one
//! alternative, and a pod with several volumes needs one alternative of each, so the result is
//! the cross product, keeping only the combinations that do not contradict each other (when
//! none are left, every combination is kept and the pod fails on the contradiction, as
//! upstream). The scheduler adds the chosen alternative to the pod's node requirements but not
//! to the requirements topology spread counts with, as upstream.
//!
//! Claims the kube-scheduler would not schedule either make the pod wait, with the reason in
//! [`VolumeError`]: a missing or deleted claim or volume, a claim lost, a claim that names a
//! volume but is not bound yet, an unbound claim without a StorageClass or whose class binds
//! `Immediate`ly (the volume is provisioned first, wherever the driver likes).
//!
//! The objects come through [`VolumeObjects`], so this module stays pure: the agent answers
//! from its reflectors, tests from maps.

use super::pod::PodView;
use super::requirements::{Requirement, RequirementError, Requirements};
use crate::apis::labels;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Volume};
use k8s_openapi::api::storage::v1::StorageClass;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

/// The annotation the PersistentVolume controller sets once it has bound a claim; the
/// kube-scheduler treats a claim that names a volume without it as unbound.
pub(crate) const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// How many combinations of alternatives a pod's volumes may produce before the rest are
/// dropped. Each is a scheduling attempt; a pod with three volumes of four terms each would
/// otherwise try 64.
const MAX_ALTERNATIVES: usize = 16;

/// Where the claims, volumes and classes come from.
pub trait VolumeObjects {
    /// The claim `namespace/name`.
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    /// The PersistentVolume `name`.
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    /// The StorageClass `name`.
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
}

/// Why a pod's volumes keep it from being scheduled now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    #[error("persistentvolumeclaim {claim} not found")]
    ClaimNotFound { claim: String },
    #[error("persistentvolumeclaim {claim} is being deleted")]
    ClaimDeleting { claim: String },
    #[error(
        "persistentvolumeclaim {claim} is Lost: its persistentvolume {volume} no longer exists"
    )]
    ClaimLost { claim: String, volume: String },
    #[error("persistentvolume {volume} of persistentvolumeclaim {claim} not found")]
    VolumeNotFound { claim: String, volume: String },
    #[error("persistentvolume {volume} of persistentvolumeclaim {claim} is being deleted")]
    VolumeDeleting { claim: String, volume: String },
    #[error(
        "persistentvolumeclaim {claim} names persistentvolume {volume} but is not bound yet (no {BIND_COMPLETED} annotation)"
    )]
    NotBound { claim: String, volume: String },
    #[error(
        "persistentvolumeclaim {claim} is unbound and names no StorageClass (and the cluster has no default one)"
    )]
    NoStorageClass { claim: String },
    #[error("storageclass {class} of persistentvolumeclaim {claim} not found")]
    ClassNotFound { claim: String, class: String },
    #[error(
        "persistentvolumeclaim {claim} is unbound and its StorageClass {class} binds Immediately: waiting for its volume to be provisioned"
    )]
    ImmediateUnbound { claim: String, class: String },
    #[error("persistentvolume {volume} has an invalid node affinity: {source}")]
    InvalidAffinity {
        volume: String,
        #[source]
        source: RequirementError,
    },
}

/// The node requirements a pod's volumes allow: any one alternative will do; none means the
/// volumes do not constrain the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Alternatives(pub Vec<Requirements>);

impl fmt::Display for Alternatives {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, alt) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" or ")?;
            }
            write!(f, "{alt}")?;
        }
        Ok(())
    }
}

/// Each pod's volume topology, by `namespace/name`. Pods without claims are not in it.
#[derive(Clone, Debug, Default)]
pub struct VolumeTopology(HashMap<String, Result<Alternatives, VolumeError>>);

impl VolumeTopology {
    /// Reads the volumes of every pod that has claims.
    pub fn resolve<'p, P: PodView + 'p>(
        pods: impl IntoIterator<Item = &'p P>,
        objects: &impl VolumeObjects,
    ) -> Self {
        let mut out = HashMap::new();
        for pod in pods {
            if claim_names(pod).next().is_none() {
                continue;
            }
            out.insert(pod_key(pod), requirements(pod, objects));
        }
        Self(out)
    }

    /// Sets one pod's entry.
    pub fn insert(&mut self, pod_key: String, entry: Result<Alternatives, VolumeError>) {
        self.0.insert(pod_key, entry);
    }

    /// A pod's entry; `None` when it has no claims.
    pub fn get<P: PodView + ?Sized>(&self, pod: &P) -> Option<&Result<Alternatives, VolumeError>> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(&pod_key(pod))
    }

    /// How many pods have claims.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no pod has claims.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `namespace/name`.
fn pod_key<P: PodView + ?Sized>(pod: &P) -> String {
    format!(
        "{}/{}",
        pod.pod_namespace().unwrap_or("default"),
        pod.pod_name().unwrap_or_default()
    )
}

/// The claim each volume of the pod uses: its `persistentVolumeClaim.claimName`, or for a
/// generic ephemeral volume the claim its controller creates, `<pod>-<volume>`.
pub(crate) fn claim_names<P: PodView + ?Sized>(pod: &P) -> impl Iterator<Item = String> + '_ {
    let pod_name = pod.pod_name().unwrap_or_default();
    pod.pod_spec()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(move |v: &Volume| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(pvc.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{pod_name}-{}", v.name))
            }
        })
}

/// The node requirements a pod's volumes allow (upstream's `GetRequirements`, after its
/// `ValidatePersistentVolumeClaims`).
pub(crate) fn requirements<P: PodView + ?Sized>(
    pod: &P,
    objects: &impl VolumeObjects,
) -> Result<Alternatives, VolumeError> {
    let namespace = pod.pod_namespace().unwrap_or("default");
    // `None` is the single unconstrained combination upstream starts from.
    let mut combined: Vec<Option<Requirements>> = vec![None];
    for claim_name in claim_names(pod) {
        let alternatives = claim_requirements(namespace, &claim_name, objects)?;
        if alternatives.is_empty() {
            continue;
        }
        combined = cross(&combined, &alternatives);
    }
    let alternatives: Vec<Requirements> = combined.into_iter().flatten().collect();
    Ok(Alternatives(union_single_key(alternatives)))
}

/// One claim's alternatives; empty when it does not constrain the node.
fn claim_requirements(
    namespace: &str,
    name: &str,
    objects: &impl VolumeObjects,
) -> Result<Vec<Requirements>, VolumeError> {
    let claim_ref = format!("{namespace}/{name}");
    let claim = objects
        .claim(namespace, name)
        .ok_or_else(|| VolumeError::ClaimNotFound {
            claim: claim_ref.clone(),
        })?;
    // The kube-scheduler's own refusals (its volumebinding plugin).
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(VolumeError::ClaimDeleting { claim: claim_ref });
    }
    let spec = claim.spec.as_ref();
    let volume_name = spec
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
        return Err(VolumeError::ClaimLost {
            claim: claim_ref,
            volume: volume_name.unwrap_or_default().to_owned(),
        });
    }
    let class_name = spec
        .and_then(|s| s.storage_class_name.as_deref())
        .filter(|c| !c.is_empty());
    if let Some(volume_name) = volume_name {
        let volume = objects
            .volume(volume_name)
            .ok_or_else(|| VolumeError::VolumeNotFound {
                claim: claim_ref.clone(),
                volume: volume_name.to_owned(),
            })?;
        if volume.metadata.deletion_timestamp.is_some() {
            return Err(VolumeError::VolumeDeleting {
                claim: claim_ref,
                volume: volume_name.to_owned(),
            });
        }
        let bound = claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED));
        if !bound {
            return Err(VolumeError::NotBound {
                claim: claim_ref,
                volume: volume_name.to_owned(),
            });
        }
        return volume_requirements(&volume);
    }
    let class_name = class_name.ok_or_else(|| VolumeError::NoStorageClass {
        claim: claim_ref.clone(),
    })?;
    let class = objects
        .class(class_name)
        .ok_or_else(|| VolumeError::ClassNotFound {
            claim: claim_ref.clone(),
            class: class_name.to_owned(),
        })?;
    // `Immediate` is the API's default binding mode.
    if class.volume_binding_mode.as_deref().unwrap_or("Immediate") == "Immediate" {
        return Err(VolumeError::ImmediateUnbound {
            claim: claim_ref,
            class: class_name.to_owned(),
        });
    }
    Ok(class_requirements(&class))
}

/// A bound volume's `nodeAffinity.required` terms. A local or hostPath volume's hostname term
/// is dropped: the pod is being placed on a new node, which can never be that host (upstream
/// keeps a hostname-only term as an unconstrained alternative).
fn volume_requirements(volume: &PersistentVolume) -> Result<Vec<Requirements>, VolumeError> {
    let Some(spec) = volume.spec.as_ref() else {
        return Ok(Vec::new());
    };
    let Some(required) = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
    else {
        return Ok(Vec::new());
    };
    let node_local = spec.local.is_some() || spec.host_path.is_some();
    let mut out = Vec::new();
    for term in &required.node_selector_terms {
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let kept: Vec<_> = expressions
            .iter()
            .filter(|e| !(node_local && e.key == labels::HOSTNAME))
            .cloned()
            .collect();
        if kept.is_empty() {
            if !expressions.is_empty() {
                // Any node will do for this term, so the volume does not constrain the node.
                return Ok(Vec::new());
            }
            continue;
        }
        let reqs = Requirements::from_node_selector(&kept).map_err(|source| {
            VolumeError::InvalidAffinity {
                volume: volume.metadata.name.clone().unwrap_or_default(),
                source,
            }
        })?;
        out.push(reqs);
    }
    Ok(out)
}

/// An unbound `WaitForFirstConsumer` claim's StorageClass `allowedTopologies`, each term one
/// alternative of `key In values` requirements.
fn class_requirements(class: &StorageClass) -> Vec<Requirements> {
    let mut out = Vec::new();
    for term in class.allowed_topologies.iter().flatten() {
        let mut reqs = Requirements::new();
        for expr in term.match_label_expressions.iter().flatten() {
            reqs.add(Requirement::in_values(&expr.key, &expr.values));
        }
        if !reqs.is_empty() {
            out.push(reqs);
        }
    }
    out
}

/// Every combination of one of `so_far` and one of `next`, keeping only those that do not
/// contradict each other unless none is left (upstream's `mergeVolumeRequirementAlternatives`).
fn cross(so_far: &[Option<Requirements>], next: &[Requirements]) -> Vec<Option<Requirements>> {
    let merge = |a: &Option<Requirements>, b: &Requirements| match a {
        None => b.clone(),
        Some(a) => a.intersection(b),
    };
    let mut compatible = Vec::new();
    for a in so_far {
        for b in next {
            let ok = a.as_ref().is_none_or(|a| a.intersects(b).is_ok());
            if ok {
                compatible.push(Some(merge(a, b)));
            }
        }
    }
    if compatible.is_empty() {
        for a in so_far {
            for b in next {
                compatible.push(Some(merge(a, b)));
            }
        }
    }
    compatible.truncate(MAX_ALTERNATIVES);
    compatible
}

/// Alternatives that each constrain only the same key to a finite set are one requirement on
/// that key, the union of the sets: `zone In [a]` or `zone In [b]` is `zone In [a, b]`. This
/// is the common case (one zonal term per volume, or a class allowing several zones in
/// separate terms), and as one requirement the scheduler picks the best zone in one attempt
/// instead of trying the alternatives in order.
fn union_single_key(alternatives: Vec<Requirements>) -> Vec<Requirements> {
    match single_key_union(&alternatives) {
        Some(union) => vec![union],
        None => alternatives,
    }
}

fn single_key_union(alternatives: &[Requirements]) -> Option<Requirements> {
    if alternatives.len() < 2 {
        return None;
    }
    let mut key: Option<&str> = None;
    let mut values: BTreeSet<&str> = BTreeSet::new();
    for alt in alternatives {
        let mut reqs = alt.iter();
        let (Some(req), None) = (reqs.next(), reqs.next()) else {
            return None;
        };
        if !req.is_finite() || req.min_values().is_some() || key.is_some_and(|k| k != req.key()) {
            return None;
        }
        key = Some(req.key());
        values.extend(req.values());
    }
    let mut union = Requirements::new();
    union.add(Requirement::in_values(key?, values));
    Some(union)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    #[derive(Default)]
    struct Objects {
        claims: HashMap<String, Arc<PersistentVolumeClaim>>,
        volumes: HashMap<String, Arc<PersistentVolume>>,
        classes: HashMap<String, Arc<StorageClass>>,
    }

    impl Objects {
        fn claim(mut self, v: serde_json::Value) -> Self {
            let c: PersistentVolumeClaim = serde_json::from_value(v).unwrap();
            let key = format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap_or("default"),
                c.metadata.name.as_deref().unwrap()
            );
            self.claims.insert(key, Arc::new(c));
            self
        }
        fn volume(mut self, v: serde_json::Value) -> Self {
            let pv: PersistentVolume = serde_json::from_value(v).unwrap();
            self.volumes
                .insert(pv.metadata.name.clone().unwrap(), Arc::new(pv));
            self
        }
        fn class(mut self, v: serde_json::Value) -> Self {
            let sc: StorageClass = serde_json::from_value(v).unwrap();
            self.classes
                .insert(sc.metadata.name.clone().unwrap(), Arc::new(sc));
            self
        }
    }

    impl VolumeObjects for Objects {
        fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.claims.get(&format!("{namespace}/{name}")).cloned()
        }
        fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
            self.volumes.get(name).cloned()
        }
        fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
            self.classes.get(name).cloned()
        }
    }

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "db-0", "namespace": "shop"},
            "spec": {"containers": [{"name": "db"}], "volumes": volumes}
        }))
        .unwrap()
    }

    fn bound_claim(name: &str, volume: &str) -> serde_json::Value {
        json!({"metadata": {"name": name, "namespace": "shop",
                "annotations": {BIND_COMPLETED: "yes"}},
               "spec": {"volumeName": volume, "storageClassName": "gp3"},
               "status": {"phase": "Bound"}})
    }

    fn zonal_volume(name: &str, key: &str, zones: &[&str]) -> serde_json::Value {
        json!({"metadata": {"name": name},
               "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                   {"matchExpressions": [{"key": key, "operator": "In", "values": zones}]}]}}}})
    }

    fn wait_class(name: &str, zones: &[&str]) -> serde_json::Value {
        json!({"metadata": {"name": name}, "provisioner": "ebs.csi.aws.com",
               "volumeBindingMode": "WaitForFirstConsumer",
               "allowedTopologies": [{"matchLabelExpressions": [
                   {"key": "topology.kubernetes.io/zone", "values": zones}]}]})
    }

    fn claim_volume(name: &str, claim: &str) -> serde_json::Value {
        json!({"name": name, "persistentVolumeClaim": {"claimName": claim}})
    }

    #[test]
    fn a_pod_on_a_bound_zonal_volume_needs_the_volumes_zone() {
        let objects = Objects::default()
            .claim(bound_claim("data", "pv-1"))
            .volume(zonal_volume("pv-1", labels::ZONE, &["us-east-1b"]));
        let alts = requirements(&pod(json!([claim_volume("data", "data")])), &objects).unwrap();
        assert_eq!(
            alts.to_string(),
            "topology.kubernetes.io/zone In [us-east-1b]"
        );
    }

    #[test]
    fn the_ebs_drivers_zone_key_means_the_well_known_zone() {
        let objects = Objects::default()
            .claim(bound_claim("data", "pv-1"))
            .volume(zonal_volume(
                "pv-1",
                "topology.ebs.csi.aws.com/zone",
                &["us-east-1b"],
            ));
        let alts = requirements(&pod(json!([claim_volume("data", "data")])), &objects).unwrap();
        assert_eq!(
            alts.to_string(),
            "topology.kubernetes.io/zone In [us-east-1b]"
        );
    }

    #[test]
    fn an_unbound_wait_for_first_consumer_claim_needs_an_allowed_zone() {
        let objects = Objects::default()
            .claim(json!({"metadata": {"name": "data", "namespace": "shop"},
                          "spec": {"storageClassName": "zonal"}}))
            .class(wait_class("zonal", &["us-east-1a", "us-east-1c"]));
        let alts = requirements(&pod(json!([claim_volume("data", "data")])), &objects).unwrap();
        assert_eq!(
            alts.to_string(),
            "topology.kubernetes.io/zone In [us-east-1a, us-east-1c]"
        );
    }

    #[test]
    fn a_wait_for_first_consumer_class_without_topologies_does_not_constrain() {
        let mut class = wait_class("any", &[]);
        class["allowedTopologies"] = json!(null);
        let objects = Objects::default()
            .claim(json!({"metadata": {"name": "data", "namespace": "shop"},
                          "spec": {"storageClassName": "any"}}))
            .class(class);
        let alts = requirements(&pod(json!([claim_volume("data", "data")])), &objects).unwrap();
        assert!(alts.0.is_empty());
    }

    #[test]
    fn two_volumes_need_the_zones_they_share() {
        let objects = Objects::default()
            .claim(bound_claim("a", "pv-a"))
            .claim(bound_claim("b", "pv-b"))
            .volume(zonal_volume("pv-a", labels::ZONE, &["z1", "z2"]))
            .volume(zonal_volume("pv-b", labels::ZONE, &["z2", "z3"]));
        let alts = requirements(
            &pod(json!([claim_volume("a", "a"), claim_volume("b", "b")])),
            &objects,
        )
        .unwrap();
        assert_eq!(alts.to_string(), "topology.kubernetes.io/zone In [z2]");
    }

    #[test]
    fn separate_terms_on_one_key_become_one_choice_of_values() {
        let mut pv = zonal_volume("pv-1", labels::ZONE, &["z1"]);
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
            .as_array_mut()
            .unwrap()
            .push(json!({"matchExpressions": [{"key": labels::ZONE, "operator": "In", "values": ["z3"]}]}));
        let objects = Objects::default()
            .claim(bound_claim("data", "pv-1"))
            .volume(pv);
        let alts = requirements(&pod(json!([claim_volume("data", "data")])), &objects).unwrap();
        assert_eq!(alts.0.len(), 1);
        assert_eq!(alts.to_string(), "topology.kubernetes.io/zone In [z1, z3]");
    }

    #[test]
    fn terms_on_different_keys_stay_alternatives() {
        let mut pv = zonal_volume("pv-1", labels::ZONE, &["z1"]);
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
            .as_array_mut()
            .unwrap()
            .push(
                json!({"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r7"]}]}),
            );
        let objects = Objects::default()
            .claim(bound_claim("data", "pv-1"))
            .volume(pv);
        let alts = requirements(&pod(json!([claim_volume("data", "data")])), &objects).unwrap();
        assert_eq!(alts.0.len(), 2);
    }

    #[test]
    fn a_local_volumes_hostname_does_not_pin_a_new_node() {
        let mut pv = zonal_volume("pv-1", labels::HOSTNAME, &["old-node"]);
        pv["spec"]["local"] = json!({"path": "/mnt/disk"});
        let objects = Objects::default()
            .claim(bound_claim("data", "pv-1"))
            .volume(pv);
        let alts = requirements(&pod(json!([claim_volume("data", "data")])), &objects).unwrap();
        assert!(alts.0.is_empty());
    }

    #[test]
    fn an_ephemeral_volume_reads_the_claim_its_controller_names() {
        let objects = Objects::default()
            .claim(bound_claim("db-0-scratch", "pv-1"))
            .volume(zonal_volume("pv-1", labels::ZONE, &["z9"]));
        let p = pod(json!([{"name": "scratch", "ephemeral": {}}]));
        assert_eq!(
            requirements(&p, &objects).unwrap().to_string(),
            "topology.kubernetes.io/zone In [z9]"
        );
    }

    #[test]
    fn claims_the_kube_scheduler_would_not_schedule_make_the_pod_wait_with_a_reason() {
        let p = pod(json!([claim_volume("data", "data")]));
        let err = |objects: Objects| requirements(&p, &objects).unwrap_err().to_string();
        assert_eq!(
            err(Objects::default()),
            "persistentvolumeclaim shop/data not found"
        );
        let mut unannotated = bound_claim("data", "pv-1");
        unannotated["metadata"]["annotations"] = json!({});
        assert!(
            err(Objects::default().claim(unannotated).volume(zonal_volume(
                "pv-1",
                labels::ZONE,
                &["z1"]
            )))
            .contains("is not bound yet")
        );
        assert_eq!(
            err(Objects::default().claim(bound_claim("data", "pv-gone"))),
            "persistentvolume pv-gone of persistentvolumeclaim shop/data not found"
        );
        let mut immediate = wait_class("fast", &["z1"]);
        immediate["volumeBindingMode"] = json!("Immediate");
        assert!(
            err(Objects::default()
                .claim(json!({"metadata": {"name": "data", "namespace": "shop"},
                              "spec": {"storageClassName": "fast"}}))
                .class(immediate))
            .contains("binds Immediately")
        );
        assert!(
            err(Objects::default()
                .claim(json!({"metadata": {"name": "data", "namespace": "shop"}, "spec": {}})))
            .contains("names no StorageClass")
        );
        assert_eq!(
            err(Objects::default()
                .claim(json!({"metadata": {"name": "data", "namespace": "shop"},
                       "spec": {"storageClassName": "nope"}}))),
            "storageclass nope of persistentvolumeclaim shop/data not found"
        );
    }

    #[test]
    fn pods_without_claims_are_not_looked_up() {
        let p = pod(json!([{"name": "tmp", "emptyDir": {}}]));
        let topology = VolumeTopology::resolve([&p], &Objects::default());
        assert!(topology.is_empty());
        assert!(topology.get(&p).is_none());
    }
}
