//! The seam between the controllers and a cloud: launch one machine for a NodeClaim, delete it,
//! look it up, list this cluster's machines, and describe the instance types on offer.
//!
//! Kept narrow on purpose (upstream's `CloudProvider` minus repair policies and interface creep):
//! `delete` returns what happened as a value (`Gone` is a normal outcome, not an error), `get`
//! returns an `Option`, and errors are a small set the controllers act on differently.

use crate::apis::{CapacityType, NodeClaim, NodeClassReference};
use crate::resources::ResourceList;
use crate::scheduling::InstanceType;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

/// The id a cloud gives a machine, as a Node's `spec.providerID` spells it:
/// `aws:///<zone>/<instance-id>`, `gce://<project>/<zone>/<name>`, `kwok://<name>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderId {
    Aws {
        zone: String,
        instance_id: String,
    },
    Gce {
        project: String,
        zone: String,
        name: String,
    },
    Kwok {
        name: String,
    },
}

/// A provider id that none of the known schemes matches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unrecognised provider id {0:?}: expected aws:///ZONE/ID, gce://PROJECT/ZONE/NAME or kwok://NAME"
)]
pub struct InvalidProviderId(pub String);

impl FromStr for ProviderId {
    type Err = InvalidProviderId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidProviderId(text.to_owned());
        if let Some(rest) = text.strip_prefix("aws:///") {
            let (zone, id) = rest.split_once('/').ok_or_else(invalid)?;
            if zone.is_empty() || id.is_empty() || id.contains('/') {
                return Err(invalid());
            }
            return Ok(Self::Aws {
                zone: zone.to_owned(),
                instance_id: id.to_owned(),
            });
        }
        if let Some(rest) = text.strip_prefix("gce://") {
            let parts: Vec<&str> = rest.split('/').collect();
            return match parts.as_slice() {
                [project, zone, name]
                    if !project.is_empty() && !zone.is_empty() && !name.is_empty() =>
                {
                    Ok(Self::Gce {
                        project: (*project).to_owned(),
                        zone: (*zone).to_owned(),
                        name: (*name).to_owned(),
                    })
                }
                _ => Err(invalid()),
            };
        }
        if let Some(name) = text.strip_prefix("kwok://") {
            if name.is_empty() || name.contains('/') {
                return Err(invalid());
            }
            return Ok(Self::Kwok {
                name: name.to_owned(),
            });
        }
        Err(invalid())
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Aws { zone, instance_id } => write!(f, "aws:///{zone}/{instance_id}"),
            Self::Gce {
                project,
                zone,
                name,
            } => write!(f, "gce://{project}/{zone}/{name}"),
            Self::Kwok { name } => write!(f, "kwok://{name}"),
        }
    }
}

impl ProviderId {
    /// The cloud's own name for the machine: the EC2 instance id, the GCE instance name (which
    /// is also the name its kubelet registers the Node as), the kwok node name.
    pub(crate) fn machine_name(&self) -> &str {
        match self {
            Self::Aws { instance_id, .. } => instance_id,
            Self::Gce { name, .. } | Self::Kwok { name } => name,
        }
    }
}

/// What the cloud says of the machine behind a kubelet's certificate request: the Node name its
/// kubelet registers as, and the names and addresses a serving certificate for it may carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletIdentity {
    pub node_name: String,
    /// Host names the machine answers to (its own name and the cloud's internal DNS names).
    pub dns_names: Vec<String>,
    /// Its internal and external addresses.
    pub ip_addresses: Vec<std::net::IpAddr>,
    /// When it was created.
    pub created: Option<k8s_openapi::jiff::Timestamp>,
    /// Whether it is running (not being created, stopped or deleted).
    pub running: bool,
}

/// A machine the cloud launched for a NodeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub provider_id: ProviderId,
    /// The NodeClaim it was launched for (from its tags or labels), if it says.
    pub node_claim: Option<String>,
    /// The NodePool of that NodeClaim, if it says.
    pub node_pool: Option<String>,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    /// The image it booted, if known.
    pub image_id: Option<String>,
    /// What the machine has and what pods may use of it.
    pub capacity: ResourceList,
    pub allocatable: ResourceList,
    /// Labels the node will carry (instance type, zone, capacity type, arch, os, family...).
    pub labels: BTreeMap<String, String>,
    /// Annotations the claim takes from its launch, as upstream's `Create` returns them (the
    /// node class's hash, for static drift). Empty for a machine that was looked up.
    pub annotations: BTreeMap<String, String>,
    /// Hourly price of the offering it was launched as, if known.
    pub price: Option<f64>,
    /// When it was launched.
    pub created: Option<k8s_openapi::jiff::Timestamp>,
    /// Whether the cloud is stopping or has stopped it (preempted, interrupted, terminated).
    pub terminating: bool,
}

/// A machine as a listing gives it: which it is, the NodeClaim it was launched for, when, and
/// whether it is going away, which is all garbage collection reads. A listing is of every
/// machine the agent launched, thousands on a large cluster, and a whole [`Instance`] (its
/// labels, capacity and allocatable) is ~5 KB: at 5,000 kwok nodes the listing held 25 MiB of
/// the agent's heap for a whole pass (heaptrack, `tests/kwok/heap.sh`), for four fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedInstance {
    pub provider_id: ProviderId,
    /// The NodeClaim it was launched for (from its tags or labels), if it says.
    pub node_claim: Option<String>,
    /// When it was launched.
    pub created: Option<k8s_openapi::jiff::Timestamp>,
    /// Whether the cloud is stopping or has stopped it (preempted, interrupted, terminated).
    pub terminating: bool,
}

impl From<Instance> for ListedInstance {
    fn from(instance: Instance) -> Self {
        Self {
            provider_id: instance.provider_id,
            node_claim: instance.node_claim,
            created: instance.created,
            terminating: instance.terminating,
        }
    }
}

/// What a delete found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The machine is shutting down.
    Terminating,
    /// There is no such machine (any more).
    Gone,
}

/// Why a cloud call failed, in terms a controller can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloudError {
    /// None of the offerings could be launched: they are now cached as unavailable and the claim
    /// should be retried with what is left.
    #[error("insufficient capacity for {}", offerings.join(", "))]
    InsufficientCapacity {
        /// The offerings that failed, as `capacity-type:instance-type:zone`.
        offerings: Vec<String>,
    },
    /// The node class is missing or not ready yet: requeue.
    #[error("node class {name} is not ready: {reason}")]
    NodeClassNotReady { name: String, reason: String },
    /// The cloud asked us to slow down: back off.
    #[error("throttled by the cloud API")]
    Throttled {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Any other failure of the cloud or Kubernetes API: retry.
    #[error("{action} failed")]
    Api {
        action: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl CloudError {
    /// An API failure while doing `action`.
    pub fn api(
        action: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Api {
            action: action.into(),
            source: Box::new(source),
        }
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InsufficientCapacity { .. } => "insufficient_capacity",
            Self::NodeClassNotReady { .. } => "node_class_not_ready",
            Self::Throttled { .. } => "throttled",
            Self::Api { .. } => "api",
        }
    }
}

/// A cloud Karpenter can launch nodes in.
///
/// Methods return `Send` futures so controllers can run them on any runtime thread.
pub trait CloudProvider: Send + Sync {
    /// A short name for logs and metrics (`aws`, `gcp`, `kwok`).
    fn name(&self) -> &'static str;

    /// Launches one machine for `claim`, trying `candidates` (already filtered to what fits the
    /// claim and ordered cheapest first) and returning what it launched.
    fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> impl Future<Output = Result<Instance, CloudError>> + Send;

    /// Deletes a machine; idempotent.
    fn delete(
        &self,
        id: &ProviderId,
    ) -> impl Future<Output = Result<DeleteOutcome, CloudError>> + Send;

    /// Looks a machine up.
    fn get(
        &self,
        id: &ProviderId,
    ) -> impl Future<Output = Result<Option<Instance>, CloudError>> + Send;

    /// Every machine this agent launched in this cluster, for garbage collection.
    fn list(&self) -> impl Future<Output = Result<Vec<ListedInstance>, CloudError>> + Send;

    /// The whole catalogue for a node class, unavailable offerings included, so explanations
    /// can say why nothing fits. Shared, not copied: every launch in flight holds one.
    fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> impl Future<Output = Result<std::sync::Arc<[InstanceType]>, CloudError>> + Send;

    /// Whether `id` names one of this provider's machines (by scheme), so controllers leave
    /// claims of another cloud alone. Providers named other than `aws`, `gcp` and `kwok` own none
    /// unless they say otherwise.
    fn owns(&self, id: &ProviderId) -> bool {
        matches!(
            (self.name(), id),
            ("aws", ProviderId::Aws { .. })
                | ("gcp", ProviderId::Gce { .. })
                | ("kwok", ProviderId::Kwok { .. })
        )
    }

    /// The Node conditions that make a node of this cloud unhealthy, and for how long each is
    /// tolerated before the node is repaired (replaced). None unless the provider says.
    fn repair_policies(&self) -> Vec<super::RepairPolicy> {
        Vec::new()
    }

    /// Who the kubelet on machine `id` is, so the agent can approve that kubelet's certificate
    /// requests: `None` when the cloud has no such machine of this cluster, and for clouds whose
    /// own control plane approves its kubelets (EKS) or that have no kubelets (kwok).
    fn kubelet_identity(
        &self,
        _id: &ProviderId,
    ) -> impl Future<Output = Result<Option<KubeletIdentity>, CloudError>> + Send {
        async { Ok(None) }
    }

    /// The `metadata.generation` of the node class `node_class` names, from the provider's view
    /// of its classes (`None`: unknown, or no such class). A NodePool's
    /// `NodeRegistrationHealthy` starts over when it changes, as upstream's.
    fn node_class_generation(
        &self,
        _node_class: &NodeClassReference,
    ) -> impl Future<Output = Option<i64>> + Send {
        async { None }
    }

    /// Why a claim's machine no longer matches its node class, if it does not.
    fn drift(
        &self,
        _claim: &NodeClaim,
    ) -> impl Future<Output = Result<Option<String>, CloudError>> + Send {
        async { Ok(None) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_print_and_parse_as_upstream_spells_them() {
        for text in [
            "aws:///us-west-2a/i-0123456789abcdef0",
            "gce://my-project/us-central1-a/node-1",
            "kwok://default-abc12",
        ] {
            let id: ProviderId = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(id.to_string(), text);
        }
    }

    #[test]
    fn malformed_provider_ids_are_rejected_with_the_expected_forms() {
        for text in [
            "",
            "aws://us-west-2a/i-1",
            "aws:///zone-only",
            "gce://p/z",
            "kwok://",
            "azure:///x",
        ] {
            let err = text.parse::<ProviderId>().expect_err(text);
            assert!(err.to_string().contains("expected aws:///ZONE/ID"), "{err}");
        }
    }
}
