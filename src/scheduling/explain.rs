//! Why a pod could not be placed, in terms a user can act on: which constraint, which NodePool,
//! which instance types came closest and what they lacked.
//!
//! The scheduler fills these in only for pods it gave up on, after the packing is done, so the
//! fast path never formats a string.

use crate::resources;
use std::fmt;

/// A pod the plan could not place, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Unschedulable {
    /// Index of the pod in [`super::Input::pods`].
    pub pod: usize,
    /// `namespace/name` of the pod.
    pub pod_name: String,
    /// Why no existing node or in-flight NodeClaim took it: `(reason, how many rejected it so)`.
    pub existing: Vec<(String, usize)>,
    /// Why no new NodeClaim could be made for it, one entry per NodePool in weight order.
    pub node_pools: Vec<PoolRejection>,
    /// The pod's own spec is unusable (bad quantity or operator).
    pub invalid: Option<String>,
    /// Its persistent volumes keep it waiting (a claim not bound yet, a volume gone).
    pub volume_error: Option<String>,
    /// What its persistent volumes allow, when they constrain the node (a zonal volume's zone).
    pub volume_topology: Option<String>,
}

/// Why one NodePool could not launch a node for a pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolRejection {
    /// The NodePool's name.
    pub node_pool: String,
    /// What stopped it.
    pub reason: PoolReason,
}

/// What stopped a NodePool from launching a node for a pod.
#[derive(Clone, Debug, PartialEq)]
pub enum PoolReason {
    /// The NodePool's own spec is unusable.
    InvalidNodePool(String),
    /// The NodePool is not Ready (its node class is missing or not ready).
    NotReady(String),
    /// A `taints` entry the pod does not tolerate (startup taints never count).
    TaintNotTolerated(String),
    /// The pod's node selector or required node affinity conflicts with the NodePool.
    Requirements(String),
    /// No instance type of the NodePool has labels the pod's requirements allow.
    NoInstanceType {
        /// The combined requirements nothing matched.
        requirements: String,
    },
    /// Types match, but none has an available offering in an allowed zone and capacity type.
    NoAvailableOffering {
        /// The combined requirements.
        requirements: String,
        /// How many matching types have offerings that are unavailable right now.
        unavailable_types: usize,
    },
    /// The pod is bigger than every allowed type.
    TooLarge {
        /// One entry per resource no allowed type has enough of.
        shortfalls: Vec<Shortfall>,
        /// Up to three types that came closest, with what each lacked.
        closest: Vec<Closest>,
    },
    /// Launching even the smallest type that fits would exceed the NodePool's limits.
    LimitReached {
        /// The limited resource (`cpu`, `memory`, `nodes`, ...).
        resource: String,
        /// The limit.
        limit: u64,
        /// What is left under the limit.
        remaining: u64,
        /// What the smallest fitting type would add.
        needed: u64,
    },
    /// Fewer distinct values than a requirement's `minValues` remain among the fitting types.
    MinValues {
        /// The requirement's key.
        key: String,
        /// Its `minValues`.
        min_values: u32,
        /// How many distinct values the fitting types span.
        available: usize,
    },
    /// A topology spread or pod (anti-)affinity constraint cannot be met on a new node.
    Topology(String),
    /// A DaemonSet on this NodePool's nodes binds the same host port.
    HostPort(String),
}

/// A resource no allowed instance type has enough of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The resource name.
    pub resource: String,
    /// What the pod requests.
    pub requested: u64,
    /// The allowed type with the most of it.
    pub largest_type: String,
    /// How much of it that type offers to pods (allocatable minus DaemonSets).
    pub largest: u64,
}

/// An instance type that came close, and what it lacked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closest {
    /// The type.
    pub name: String,
    /// `(resource, requested, available)` for each resource it lacked.
    pub lacks: Vec<(String, u64, u64)>,
}

impl fmt::Display for Unschedulable {
    /// One paragraph: `pod ns/name: NodePool a: ...; NodePool b: ...; existing nodes: ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pod {} cannot be scheduled", self.pod_name)?;
        if let Some(invalid) = &self.invalid {
            return write!(f, ": invalid pod spec: {invalid}");
        }
        if let Some(volumes) = &self.volume_error {
            return write!(f, ": {volumes}");
        }
        if self.node_pools.is_empty() {
            f.write_str(": no NodePool is available")?;
        }
        for r in &self.node_pools {
            write!(f, "; {r}")?;
        }
        if !self.existing.is_empty() {
            f.write_str("; existing nodes: ")?;
            for (i, (reason, n)) in self.existing.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{n} {reason}")?;
            }
        }
        if let Some(topology) = &self.volume_topology {
            write!(f, "; its volumes allow only nodes with {topology}")?;
        }
        Ok(())
    }
}

impl fmt::Display for PoolRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pool = &self.node_pool;
        write!(f, "NodePool {pool}: ")?;
        match &self.reason {
            PoolReason::InvalidNodePool(m) => write!(f, "invalid NodePool: {m}"),
            PoolReason::NotReady(m) => write!(f, "it is not ready: {m}"),
            PoolReason::TaintNotTolerated(t) => write!(f, "the pod does not tolerate taint {t}"),
            PoolReason::Requirements(m) => write!(f, "the pod {m}"),
            PoolReason::NoInstanceType { requirements } => {
                write!(f, "no instance type matches {requirements}")
            }
            PoolReason::NoAvailableOffering {
                requirements,
                unavailable_types,
            } => write!(
                f,
                "no instance type matching {requirements} has an available offering ({unavailable_types} matching types have offerings that are unavailable right now)"
            ),
            PoolReason::TooLarge {
                shortfalls,
                closest,
            } => {
                for (i, s) in shortfalls.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(
                        f,
                        "needs {} {}; the largest type allowed by NodePool {pool}, {}, has {} allocatable",
                        resources::human(&s.resource, s.requested),
                        s.resource,
                        s.largest_type,
                        resources::human(&s.resource, s.largest),
                    )?;
                }
                if !closest.is_empty() {
                    f.write_str(" (closest: ")?;
                    for (i, c) in closest.iter().enumerate() {
                        if i > 0 {
                            f.write_str("; ")?;
                        }
                        write!(f, "{} lacks ", c.name)?;
                        for (j, (r, need, have)) in c.lacks.iter().enumerate() {
                            if j > 0 {
                                f.write_str(", ")?;
                            }
                            write!(f, "{} {r}", resources::human(r, need.saturating_sub(*have)))?;
                        }
                    }
                    f.write_str(")")?;
                }
                Ok(())
            }
            PoolReason::LimitReached {
                resource,
                limit,
                remaining,
                needed,
            } => write!(
                f,
                "limit {resource}={} reached: {} left, the smallest fitting node adds {}",
                resources::human(resource, *limit),
                resources::human(resource, *remaining),
                resources::human(resource, *needed)
            ),
            PoolReason::MinValues {
                key,
                min_values,
                available,
            } => write!(
                f,
                "requirement {key} needs minValues {min_values} but the types that fit span only {available} values"
            ),
            PoolReason::Topology(m) => f.write_str(m),
            PoolReason::HostPort(m) => write!(f, "host port {m} is already bound by a DaemonSet"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn too_large_reads_like_a_sentence() {
        let r = PoolRejection {
            node_pool: "default".to_owned(),
            reason: PoolReason::TooLarge {
                shortfalls: vec![Shortfall {
                    resource: "cpu".to_owned(),
                    requested: 96_000,
                    largest_type: "m5.24xlarge".to_owned(),
                    largest: 95_690,
                }],
                closest: vec![Closest {
                    name: "m5.24xlarge".to_owned(),
                    lacks: vec![("cpu".to_owned(), 96_000, 95_690)],
                }],
            },
        };
        assert_eq!(
            r.to_string(),
            "NodePool default: needs 96 cpu; the largest type allowed by NodePool default, m5.24xlarge, has 95.69 allocatable (closest: m5.24xlarge lacks 0.31 cpu)"
        );
    }
}
