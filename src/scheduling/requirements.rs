//! The requirements algebra: what a node's labels must satisfy.
//!
//! A [`Requirement`] is a set of allowed values for one label key, with the same meaning as
//! upstream Karpenter's `scheduling.Requirement`: a finite set (`In`, `DoesNotExist` = the empty
//! set) or the complement of one (`NotIn`, `Exists`), optionally bounded by integers (`Gt`, `Lt`,
//! `Gte`, `Lte`, stored as inclusive bounds), plus `minValues`. [`Requirements`] maps keys to
//! requirements; adding a requirement for a key already present intersects the two.
//!
//! NodePool requirements, pod node selectors and affinities, instance-type labels and the
//! requirements the scheduler writes into a NodeClaim all use this one type, so `explain` can
//! print any of them the same way. Deprecated beta label keys are normalized on the way in.

use crate::apis::labels;
use crate::apis::{LabelValue, NodeSelectorRequirementWithMinValues, RequirementOperator};
use crate::scheduling::LabelSet;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A requirement that cannot be built from its parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// `Gt`, `Lt`, `Gte` and `Lte` take exactly one integer.
    #[error("requirement {key} {operator} needs exactly one integer value, got {values:?}")]
    NotOneInteger {
        /// The label key.
        key: String,
        /// The numeric operator.
        operator: RequirementOperator,
        /// The values given.
        values: Vec<String>,
    },
    /// The operator is not one of the eight Karpenter knows.
    #[error("requirement on {key} has unknown operator {operator:?}")]
    UnknownOperator {
        /// The label key.
        key: String,
        /// The operator as written.
        operator: String,
    },
}

/// Label keys whose absence from a set of requirements means "any value" rather than "no label":
/// every node has them, so pods may constrain them even when a NodePool does not.
pub(crate) const WELL_KNOWN_LABELS: &[&str] = &[
    labels::NODE_POOL,
    labels::ZONE,
    labels::REGION,
    labels::INSTANCE_TYPE,
    labels::ARCH,
    labels::OS,
    labels::CAPACITY_TYPE,
    labels::WINDOWS_BUILD,
    labels::AWS_INSTANCE_CATEGORY,
    labels::AWS_INSTANCE_FAMILY,
    labels::AWS_INSTANCE_GENERATION,
    labels::AWS_INSTANCE_SIZE,
    labels::AWS_INSTANCE_CPU,
    labels::AWS_INSTANCE_CPU_MANUFACTURER,
    labels::AWS_INSTANCE_MEMORY,
    labels::AWS_INSTANCE_NETWORK_BANDWIDTH,
    labels::AWS_INSTANCE_EBS_BANDWIDTH,
    labels::AWS_INSTANCE_LOCAL_NVME,
    labels::AWS_INSTANCE_HYPERVISOR,
    labels::AWS_INSTANCE_GPU_NAME,
    labels::AWS_INSTANCE_GPU_MANUFACTURER,
    labels::AWS_INSTANCE_GPU_COUNT,
    labels::AWS_INSTANCE_GPU_MEMORY,
    labels::GCP_INSTANCE_FAMILY,
    labels::GCP_INSTANCE_SHAPE,
    labels::GCP_INSTANCE_GENERATION,
    labels::GCP_INSTANCE_SIZE,
    labels::GCP_INSTANCE_CPU,
    labels::GCP_INSTANCE_MEMORY,
    labels::GCP_INSTANCE_GPU_NAME,
    labels::GCP_INSTANCE_GPU_COUNT,
    labels::GCP_ZONE_ID,
];

/// Whether `key` is in [`WELL_KNOWN_LABELS`].
pub(crate) fn is_well_known(key: &str) -> bool {
    WELL_KNOWN_LABELS.contains(&key)
}

/// The allowed values of one label key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirement {
    key: String,
    /// When true the allowed values are everything *except* `values`.
    complement: bool,
    values: BTreeSet<String>,
    /// Inclusive integer bounds; only kept on complement sets (finite sets are filtered instead).
    gte: Option<i64>,
    lte: Option<i64>,
    min_values: Option<u32>,
}

impl Requirement {
    /// Builds a requirement from an operator and its values. The key is normalized
    /// (`failure-domain.beta.kubernetes.io/zone` becomes `topology.kubernetes.io/zone`).
    pub fn new<S: AsRef<str>>(
        key: &str,
        operator: RequirementOperator,
        values: impl IntoIterator<Item = S>,
    ) -> Result<Self, RequirementError> {
        let key = labels::normalize(key).to_owned();
        let values: Vec<String> = values.into_iter().map(|v| v.as_ref().to_owned()).collect();
        let numeric = |values: &[String]| -> Result<i64, RequirementError> {
            match values {
                [one] => one
                    .parse::<i64>()
                    .map_err(|_| RequirementError::NotOneInteger {
                        key: key.clone(),
                        operator,
                        values: values.to_vec(),
                    }),
                _ => Err(RequirementError::NotOneInteger {
                    key: key.clone(),
                    operator,
                    values: values.to_vec(),
                }),
            }
        };
        let mut req = Self {
            key: key.clone(),
            complement: true,
            values: BTreeSet::new(),
            gte: None,
            lte: None,
            min_values: None,
        };
        match operator {
            RequirementOperator::In => {
                req.complement = false;
                req.values = values.into_iter().collect();
            }
            RequirementOperator::NotIn => req.values = values.into_iter().collect(),
            RequirementOperator::Exists => {}
            RequirementOperator::DoesNotExist => req.complement = false,
            RequirementOperator::Gt => req.gte = Some(numeric(&values)?.saturating_add(1)),
            RequirementOperator::Lt => req.lte = Some(numeric(&values)?.saturating_sub(1)),
            RequirementOperator::Gte => req.gte = Some(numeric(&values)?),
            RequirementOperator::Lte => req.lte = Some(numeric(&values)?),
        }
        Ok(req.canonical())
    }

    /// `key In [values]`.
    pub fn in_values<S: AsRef<str>>(key: &str, values: impl IntoIterator<Item = S>) -> Self {
        Self {
            key: labels::normalize(key).to_owned(),
            complement: false,
            values: values.into_iter().map(|v| v.as_ref().to_owned()).collect(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `key Exists`.
    pub fn exists(key: &str) -> Self {
        Self {
            key: labels::normalize(key).to_owned(),
            complement: true,
            values: BTreeSet::new(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `key DoesNotExist`.
    pub(crate) fn does_not_exist(key: &str) -> Self {
        Self {
            complement: false,
            ..Self::exists(key)
        }
    }

    /// Sets `minValues`, builder style.
    #[must_use]
    pub(crate) fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    /// Reads a NodePool or NodeClaim requirement.
    pub fn from_api(req: &NodeSelectorRequirementWithMinValues) -> Result<Self, RequirementError> {
        let min = req.min_values.and_then(|m| u32::try_from(m).ok());
        Ok(Self::new(
            &req.key,
            req.operator,
            req.values.iter().map(LabelValue::as_str),
        )?
        .with_min_values(min))
    }

    /// Reads a pod's node selector requirement (operators are strings in core/v1).
    pub(crate) fn from_node_selector(
        req: &NodeSelectorRequirement,
    ) -> Result<Self, RequirementError> {
        let operator = match req.operator.as_str() {
            "In" => RequirementOperator::In,
            "NotIn" => RequirementOperator::NotIn,
            "Exists" => RequirementOperator::Exists,
            "DoesNotExist" => RequirementOperator::DoesNotExist,
            "Gt" => RequirementOperator::Gt,
            "Lt" => RequirementOperator::Lt,
            "Gte" => RequirementOperator::Gte,
            "Lte" => RequirementOperator::Lte,
            other => {
                return Err(RequirementError::UnknownOperator {
                    key: req.key.clone(),
                    operator: other.to_owned(),
                });
            }
        };
        Self::new(&req.key, operator, req.values.iter().flatten())
    }

    /// Filters finite sets by the bounds, and turns empty bounds into the empty set.
    fn canonical(mut self) -> Self {
        if let (Some(gte), Some(lte)) = (self.gte, self.lte)
            && gte > lte
        {
            self.complement = false;
            self.values.clear();
        }
        if !self.complement {
            let (gte, lte) = (self.gte, self.lte);
            if gte.is_some() || lte.is_some() {
                self.values.retain(|v| within_bounds(v, gte, lte));
            }
            self.gte = None;
            self.lte = None;
        }
        self
    }

    /// The (normalized) label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator that describes this set: `In`, `NotIn`, `Exists`, `DoesNotExist`, or
    /// `Gte`/`Lte` for bounded complements.
    pub fn operator(&self) -> RequirementOperator {
        match (self.complement, self.values.is_empty()) {
            (true, _) if self.gte.is_some() && self.values.is_empty() => RequirementOperator::Gte,
            (true, _) if self.lte.is_some() && self.values.is_empty() => RequirementOperator::Lte,
            (true, true) => RequirementOperator::Exists,
            (true, false) => RequirementOperator::NotIn,
            (false, false) => RequirementOperator::In,
            (false, true) => RequirementOperator::DoesNotExist,
        }
    }

    /// The listed values: the allowed ones for `In`, the excluded ones for `NotIn`.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }

    /// Whether this is a finite set of allowed values (`In` or `DoesNotExist`).
    pub fn is_finite(&self) -> bool {
        !self.complement
    }

    /// The number of allowed values, or `None` when unbounded.
    pub fn len(&self) -> Option<usize> {
        (!self.complement).then_some(self.values.len())
    }

    /// Whether no value is allowed (`DoesNotExist`, or an empty intersection).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// `minValues`, if set.
    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// Whether a label with this value satisfies the requirement.
    pub fn has(&self, value: &str) -> bool {
        let listed = self.values.contains(value);
        (listed != self.complement) && within_bounds(value, self.gte, self.lte)
    }

    /// A value a node's label can take to satisfy this requirement (upstream's
    /// `Requirement.Any()`): the first allowed value of a finite set; for `Exists`, `NotIn` and
    /// the bounds of `Gt`/`Lt`, the smallest non-negative integer the requirement allows
    /// (upstream draws a random one). `None` when no value can (`DoesNotExist`, an empty set).
    pub(crate) fn any_value(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().find(|v| self.has(v)).cloned();
        }
        let low = self.gte.unwrap_or(0).max(0);
        let high = self.lte.unwrap_or(i64::MAX);
        (low..=high)
            .take(self.values.len() + 1)
            .map(|n| n.to_string())
            .find(|v| self.has(v))
    }

    /// Whether a node *without* this label satisfies the requirement (`NotIn`, `DoesNotExist`).
    pub(crate) fn allows_absent(&self) -> bool {
        matches!(
            self.operator(),
            RequirementOperator::NotIn | RequirementOperator::DoesNotExist
        )
    }

    /// The values allowed by both requirements; `minValues` is the larger of the two.
    #[must_use]
    pub fn intersection(&self, other: &Self) -> Self {
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        let values: BTreeSet<String> = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values).cloned().collect(),
            (true, false) => other.values.difference(&self.values).cloned().collect(),
            (false, true) => self.values.difference(&other.values).cloned().collect(),
            (false, false) => self.values.intersection(&other.values).cloned().collect(),
        };
        Self {
            key: self.key.clone(),
            complement: self.complement && other.complement,
            values,
            gte,
            lte,
            min_values: max_opt(self.min_values, other.min_values),
        }
        .canonical()
    }

    /// Whether some value satisfies both requirements (cheaper than [`Self::intersection`]).
    pub(crate) fn has_intersection(&self, other: &Self) -> bool {
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| !self.values.contains(v) && within_bounds(v, gte, lte)),
            (false, true) => self
                .values
                .iter()
                .any(|v| !other.values.contains(v) && within_bounds(v, gte, lte)),
            (false, false) => self
                .values
                .iter()
                .any(|v| other.values.contains(v) && within_bounds(v, gte, lte)),
        }
    }

    /// Whether every value this requirement allows is allowed by `other` (set inclusion).
    pub(crate) fn is_subset_of(&self, other: &Self) -> bool {
        match (self.complement, other.complement) {
            (false, _) => self.values.iter().all(|v| other.has(v)),
            (true, false) => false,
            (true, true) => {
                other
                    .values
                    .iter()
                    .all(|v| self.values.contains(v) || !within_bounds(v, self.gte, self.lte))
                    && other.gte.is_none_or(|g| self.gte.is_some_and(|s| s >= g))
                    && other.lte.is_none_or(|l| self.lte.is_some_and(|s| s <= l))
            }
        }
    }

    /// The requirement in API form: one entry, or two for a range with both bounds.
    pub(crate) fn to_api(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        let min_values = self.min_values.and_then(|m| i32::try_from(m).ok());
        let entry = |operator, values: Vec<LabelValue>| NodeSelectorRequirementWithMinValues {
            key: self.key.clone(),
            operator,
            values,
            min_values,
        };
        let listed = || {
            self.values
                .iter()
                .map(|v| LabelValue(v.clone()))
                .collect::<Vec<_>>()
        };
        let mut out = Vec::new();
        if self.complement && (self.gte.is_some() || self.lte.is_some()) {
            if let Some(gte) = self.gte {
                out.push(entry(
                    RequirementOperator::Gte,
                    vec![LabelValue(gte.to_string())],
                ));
            }
            if let Some(lte) = self.lte {
                out.push(entry(
                    RequirementOperator::Lte,
                    vec![LabelValue(lte.to_string())],
                ));
            }
            if !self.values.is_empty() {
                out.push(entry(RequirementOperator::NotIn, listed()));
            }
            return out;
        }
        out.push(match self.operator() {
            RequirementOperator::NotIn => entry(RequirementOperator::NotIn, listed()),
            RequirementOperator::In => entry(RequirementOperator::In, listed()),
            RequirementOperator::DoesNotExist => {
                entry(RequirementOperator::DoesNotExist, Vec::new())
            }
            _ => entry(RequirementOperator::Exists, Vec::new()),
        });
        out
    }
}

impl fmt::Display for Requirement {
    /// `topology.kubernetes.io/zone In [a, b]`, long lists shortened to five values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.key)?;
        match self.operator() {
            RequirementOperator::Exists => f.write_str(" Exists")?,
            RequirementOperator::DoesNotExist => f.write_str(" DoesNotExist")?,
            RequirementOperator::Gte | RequirementOperator::Lte => {
                if let Some(g) = self.gte {
                    write!(f, " >={g}")?;
                }
                if let Some(l) = self.lte {
                    write!(f, " <={l}")?;
                }
            }
            op => {
                write!(f, " {op} [")?;
                for (i, v) in self.values.iter().take(5).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(v)?;
                }
                if self.values.len() > 5 {
                    write!(f, " and {} others", self.values.len() - 5)?;
                }
                f.write_str("]")?;
            }
        }
        if self.complement && !self.values.is_empty() && (self.gte.is_some() || self.lte.is_some())
        {
            write!(f, " NotIn {:?}", self.values)?;
        }
        if let Some(m) = self.min_values {
            write!(f, " minValues {m}")?;
        }
        Ok(())
    }
}

fn within_bounds(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    let Ok(v) = value.parse::<i64>() else {
        return false;
    };
    gte.is_none_or(|g| v >= g) && lte.is_none_or(|l| v <= l)
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Why two sets of requirements cannot both hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility {
    /// The incoming side requires a custom label the other side never sets.
    Undefined {
        /// The incoming requirement.
        incoming: String,
    },
    /// Both sides constrain the key and no value satisfies both.
    Disjoint {
        /// The incoming requirement (usually the pod's).
        incoming: String,
        /// The existing requirement (usually the NodePool's or the node's).
        existing: String,
    },
}

impl Incompatibility {
    /// A one-line explanation, `existing_what` naming the other side (e.g. "NodePool default").
    pub fn describe(&self, existing_what: &str) -> String {
        match self {
            Self::Undefined { incoming } => {
                format!("requires {incoming}, a label {existing_what} does not set")
            }
            Self::Disjoint { incoming, existing } => {
                format!("requires {incoming}, but {existing_what} has {existing}")
            }
        }
    }
}

/// Requirements by label key. Adding a second requirement for a key intersects them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    /// No requirements (every node qualifies).
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads NodePool or NodeClaim requirements.
    pub fn from_api(
        reqs: &[NodeSelectorRequirementWithMinValues],
    ) -> Result<Self, RequirementError> {
        let mut out = Self::new();
        for req in reqs {
            out.add(Requirement::from_api(req)?);
        }
        Ok(out)
    }

    /// Reads one node selector term (its `matchExpressions`).
    pub(crate) fn from_node_selector(
        reqs: &[NodeSelectorRequirement],
    ) -> Result<Self, RequirementError> {
        let mut out = Self::new();
        for req in reqs {
            out.add(Requirement::from_node_selector(req)?);
        }
        Ok(out)
    }

    /// `key In [value]` for every label.
    pub(crate) fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Self {
        let mut out = Self::new();
        for (key, value) in labels {
            out.add(Requirement::in_values(key, [value]));
        }
        out
    }

    /// Adds a requirement, intersecting with any existing one for its key.
    pub fn add(&mut self, req: Requirement) {
        match self.0.get_mut(&req.key) {
            Some(existing) => *existing = existing.intersection(&req),
            None => {
                self.0.insert(req.key.clone(), req);
            }
        }
    }

    /// Adds every requirement of `other`.
    pub(crate) fn add_all(&mut self, other: &Self) {
        for req in other.0.values() {
            self.add(req.clone());
        }
    }

    /// `self ∩ other`.
    #[must_use]
    pub fn intersection(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.add_all(other);
        out
    }

    /// Drops the requirement on `key`, returning it.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.0.remove(key)
    }

    /// The requirement on `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    /// Whether `key` is constrained.
    pub fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Whether a node with this value for `key` could satisfy the requirements (an unconstrained
    /// key allows any value).
    pub fn allows(&self, key: &str, value: &str) -> bool {
        self.0.get(key).is_none_or(|r| r.has(value))
    }

    /// The requirements, ordered by key.
    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.0.values()
    }

    /// The constrained keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// How many keys are constrained.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing is constrained.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any requirement sets `minValues`.
    pub(crate) fn has_min_values(&self) -> bool {
        self.0.values().any(|r| r.min_values.is_some())
    }

    /// Whether `incoming` (a pod's requirements) can be met by a node constrained by `self`
    /// (a NodePool's or NodeClaim's requirements), upstream's `Compatible` with
    /// `AllowUndefinedWellKnownLabels`: a custom label the incoming side requires to exist must
    /// be defined here; keys defined on both sides must intersect.
    pub fn compatible(
        &self,
        incoming: &Self,
        well_known: impl Fn(&str) -> bool,
    ) -> Result<(), Incompatibility> {
        for req in incoming.iter() {
            if self.has(&req.key) || well_known(&req.key) || req.allows_absent() {
                continue;
            }
            return Err(Incompatibility::Undefined {
                incoming: req.to_string(),
            });
        }
        self.intersects(incoming)
    }

    /// Whether every key both sides define has a common value (`NotIn`/`DoesNotExist` on both
    /// sides count as compatible: a node without the label satisfies both).
    pub(crate) fn intersects(&self, incoming: &Self) -> Result<(), Incompatibility> {
        for req in incoming.iter() {
            let Some(existing) = self.0.get(&req.key) else {
                continue;
            };
            if existing.has_intersection(req) || (existing.allows_absent() && req.allows_absent()) {
                continue;
            }
            return Err(Incompatibility::Disjoint {
                incoming: req.to_string(),
                existing: existing.to_string(),
            });
        }
        Ok(())
    }

    /// Whether a node with exactly these labels satisfies every requirement.
    pub(crate) fn matches_labels(&self, labels: &LabelSet) -> Result<(), Incompatibility> {
        for req in self.iter() {
            let ok = match labels.get(&req.key) {
                Some(value) => req.has(value),
                None => req.allows_absent(),
            };
            if !ok {
                let existing = match labels.get(&req.key) {
                    Some(value) => format!("{}={value}", req.key),
                    None => format!("no {} label", req.key),
                };
                return Err(Incompatibility::Disjoint {
                    incoming: req.to_string(),
                    existing,
                });
            }
        }
        Ok(())
    }

    /// Whether every node satisfying `self` also satisfies `incoming` (used for in-flight
    /// NodeClaims, whose requirements can no longer change). Keys `self` leaves open count as
    /// "any value" when well known and "no label" otherwise.
    pub(crate) fn implies(
        &self,
        incoming: &Self,
        well_known: impl Fn(&str) -> bool,
    ) -> Result<(), Incompatibility> {
        for req in incoming.iter() {
            let ok = match self.0.get(&req.key) {
                Some(existing) => {
                    if existing.is_empty() {
                        req.allows_absent()
                    } else {
                        existing.is_subset_of(req)
                    }
                }
                None if well_known(&req.key) => {
                    req.operator() == RequirementOperator::Exists && req.values.is_empty()
                }
                None => req.allows_absent(),
            };
            if !ok {
                let existing = self
                    .0
                    .get(&req.key)
                    .map_or_else(|| format!("{} unset", req.key), ToString::to_string);
                return Err(Incompatibility::Disjoint {
                    incoming: req.to_string(),
                    existing,
                });
            }
        }
        Ok(())
    }

    /// The first requirement with `minValues` that a set of instance types (given by their
    /// requirements, e.g. the options of a NodeClaim) does not satisfy: `(key, minValues,
    /// distinct allowed values the types span)`. `None` when every `minValues` holds.
    pub(crate) fn min_values_shortfall<'a>(
        &self,
        types: impl IntoIterator<Item = &'a Self> + Clone,
    ) -> Option<(String, u32, usize)> {
        for req in self.iter() {
            let Some(min) = req.min_values else { continue };
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            for t in types.clone() {
                if let Some(tr) = t.get(&req.key) {
                    seen.extend(tr.values().filter(|v| req.has(v)));
                }
            }
            if seen.len() < min as usize {
                return Some((req.key.clone(), min, seen.len()));
            }
        }
        None
    }

    /// The requirements in API form, ready for a `NodeClaimSpec`.
    pub(crate) fn to_api(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        self.0.values().flat_map(Requirement::to_api).collect()
    }
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<I: IntoIterator<Item = Requirement>>(iter: I) -> Self {
        let mut out = Self::new();
        for req in iter {
            out.add(req);
        }
        out
    }
}

impl fmt::Display for Requirements {
    /// `a In [x], b Exists`, ordered by key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, req) in self.0.values().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{req}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use RequirementOperator::*;
    use proptest::prelude::*;

    fn req(key: &str, op: RequirementOperator, values: &[&str]) -> Requirement {
        match Requirement::new(key, op, values.iter().copied()) {
            Ok(r) => r,
            Err(e) => panic!("bad test requirement: {e}"),
        }
    }

    #[test]
    fn all_eight_operators_have_node_selector_meaning() {
        assert!(req("k", In, &["a", "b"]).has("a"));
        assert!(!req("k", In, &["a", "b"]).has("c"));
        assert!(req("k", NotIn, &["a"]).has("c"));
        assert!(!req("k", NotIn, &["a"]).has("a"));
        assert!(req("k", Exists, &[]).has("anything"));
        assert!(!req("k", DoesNotExist, &[]).has("anything"));
        assert!(req("k", Gt, &["4"]).has("5") && !req("k", Gt, &["4"]).has("4"));
        assert!(req("k", Lt, &["4"]).has("3") && !req("k", Lt, &["4"]).has("4"));
        assert!(req("k", Gte, &["4"]).has("4") && !req("k", Gte, &["4"]).has("3"));
        assert!(req("k", Lte, &["4"]).has("4") && !req("k", Lte, &["4"]).has("5"));
        assert!(
            !req("k", Gt, &["4"]).has("five"),
            "bounds reject non-integers"
        );
    }

    #[test]
    fn numeric_operators_need_one_integer() {
        assert!(Requirement::new("k", Gt, ["a"]).is_err());
        assert!(Requirement::new("k", Lt, ["1", "2"]).is_err());
        assert!(Requirement::new("k", Gte, Vec::<String>::new()).is_err());
    }

    #[test]
    fn intersection_combines_sets_and_bounds() {
        let zones = req("zone", In, &["a", "b", "c"]).intersection(&req("zone", NotIn, &["b"]));
        assert_eq!(zones.operator(), In);
        assert_eq!(zones.values().collect::<Vec<_>>(), ["a", "c"]);
        let cpu = req("cpu", Gt, &["2"]).intersection(&req("cpu", Lt, &["8"]));
        assert!(cpu.has("3") && cpu.has("7") && !cpu.has("8") && !cpu.has("2"));
        let filtered = req("cpu", In, &["2", "4", "16"]).intersection(&req("cpu", Lte, &["4"]));
        assert_eq!(filtered.values().collect::<Vec<_>>(), ["2", "4"]);
        assert!(
            req("cpu", Gt, &["8"])
                .intersection(&req("cpu", Lt, &["4"]))
                .is_empty()
        );
        assert_eq!(
            req("k", In, &["a"])
                .with_min_values(Some(2))
                .intersection(&req("k", Exists, &[]))
                .min_values(),
            Some(2)
        );
    }

    #[test]
    fn beta_keys_are_normalized() {
        let r = req("failure-domain.beta.kubernetes.io/zone", In, &["a"]);
        assert_eq!(r.key(), labels::ZONE);
    }

    #[test]
    fn custom_labels_must_be_defined_but_well_known_ones_need_not_be() {
        let pool: Requirements = [req(labels::ARCH, In, &["amd64"])].into_iter().collect();
        let wants_zone: Requirements = [req(labels::ZONE, In, &["a"])].into_iter().collect();
        assert_eq!(pool.compatible(&wants_zone, is_well_known), Ok(()));
        let wants_team: Requirements = [req("example.com/team", In, &["x"])].into_iter().collect();
        assert!(matches!(
            pool.compatible(&wants_team, is_well_known),
            Err(Incompatibility::Undefined { .. })
        ));
        let avoids_team: Requirements = [req("example.com/team", NotIn, &["x"])]
            .into_iter()
            .collect();
        assert_eq!(pool.compatible(&avoids_team, is_well_known), Ok(()));
        let wants_arm: Requirements = [req(labels::ARCH, In, &["arm64"])].into_iter().collect();
        let err = pool.compatible(&wants_arm, is_well_known);
        assert!(
            matches!(err, Err(Incompatibility::Disjoint { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn labels_satisfy_requirements_like_the_kube_scheduler() {
        let labels: LabelSet = [("zone", "a")].into_iter().collect();
        let ok: Requirements = [
            req("zone", In, &["a"]),
            req("gpu", DoesNotExist, &[]),
            req("x", NotIn, &["y"]),
        ]
        .into_iter()
        .collect();
        assert_eq!(ok.matches_labels(&labels), Ok(()));
        let missing: Requirements = [req("gpu", Exists, &[])].into_iter().collect();
        assert!(missing.matches_labels(&labels).is_err());
    }

    #[test]
    fn an_in_flight_claim_implies_only_what_all_its_nodes_satisfy() {
        let claim: Requirements = [
            req(labels::ZONE, In, &["a", "b"]),
            req(labels::ARCH, In, &["amd64"]),
        ]
        .into_iter()
        .collect();
        let wants_a: Requirements = [req(labels::ZONE, In, &["a"])].into_iter().collect();
        assert!(claim.implies(&wants_a, is_well_known).is_err());
        let wants_ab: Requirements = [
            req(labels::ZONE, In, &["a", "b", "c"]),
            req(labels::ARCH, Exists, &[]),
        ]
        .into_iter()
        .collect();
        assert_eq!(claim.implies(&wants_ab, is_well_known), Ok(()));
        let wants_os: Requirements = [req(labels::OS, In, &["linux"])].into_iter().collect();
        assert!(claim.implies(&wants_os, is_well_known).is_err());
    }

    #[test]
    fn api_round_trip_keeps_operators_and_min_values() -> Result<(), RequirementError> {
        let reqs: Requirements = [
            req("a", In, &["x", "y"]).with_min_values(Some(2)),
            req("b", NotIn, &["z"]),
            req("c", Exists, &[]),
            req("d", DoesNotExist, &[]),
            req("e", Gt, &["3"]).intersection(&req("e", Lt, &["10"])),
        ]
        .into_iter()
        .collect();
        let api = reqs.to_api();
        assert_eq!(api.len(), 6, "a range is written as two entries");
        assert_eq!(Requirements::from_api(&api)?, reqs);
        assert_eq!(
            reqs.to_string(),
            "a In [x, y] minValues 2, b NotIn [z], c Exists, d DoesNotExist, e >=4 <=9"
        );
        Ok(())
    }

    #[test]
    fn min_values_count_distinct_allowed_values_across_types() {
        let pool: Requirements = [
            req(labels::INSTANCE_TYPE, Exists, &[]).with_min_values(Some(2)),
            req("family", In, &["m5", "c5"]).with_min_values(Some(2)),
        ]
        .into_iter()
        .collect();
        let ty = |name: &str, family: &str| -> Requirements {
            [
                Requirement::in_values(labels::INSTANCE_TYPE, [name]),
                Requirement::in_values("family", [family]),
            ]
            .into_iter()
            .collect()
        };
        let (a, b, c) = (
            ty("m5.large", "m5"),
            ty("m5.xlarge", "m5"),
            ty("c5.large", "c5"),
        );
        assert_eq!(
            pool.min_values_shortfall([&a, &b]),
            Some(("family".to_owned(), 2, 1))
        );
        assert_eq!(pool.min_values_shortfall([&a, &c]), None);
        let only_c5: Requirements =
            [req(labels::INSTANCE_TYPE, Exists, &[]).with_min_values(Some(2))]
                .into_iter()
                .collect();
        assert_eq!(
            only_c5.min_values_shortfall([&c]),
            Some((labels::INSTANCE_TYPE.to_owned(), 2, 1))
        );
    }

    fn arb_req() -> impl Strategy<Value = Requirement> {
        let values =
            prop::collection::btree_set(prop::sample::select(vec!["1", "2", "3", "a", "b"]), 0..4);
        (0..8_u8, values, 0_i64..5).prop_map(|(op, values, n)| {
            let values: Vec<_> = values.into_iter().collect();
            let n = n.to_string();
            match op {
                0 => req("k", In, &values),
                1 => req("k", NotIn, &values),
                2 => req("k", Exists, &[]),
                3 => req("k", DoesNotExist, &[]),
                4 => req("k", Gt, &[&n]),
                5 => req("k", Lt, &[&n]),
                6 => req("k", Gte, &[&n]),
                _ => req("k", Lte, &[&n]),
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn intersection_allows_exactly_what_both_allow(a in arb_req(), b in arb_req(), v in prop::sample::select(vec!["0", "1", "2", "3", "4", "5", "a", "b", "c"])) {
            let both = a.intersection(&b);
            prop_assert_eq!(both.has(v), a.has(v) && b.has(v));
            if a.has(v) && b.has(v) {
                prop_assert!(a.has_intersection(&b));
            }
            prop_assert_eq!(both.is_subset_of(&a) || !both.is_finite(), true);
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod any_value_tests {
    use super::*;
    use crate::apis::RequirementOperator;

    fn req(op: RequirementOperator, values: &[&str]) -> Requirement {
        Requirement::new("tenant", op, values.iter().copied()).expect("a requirement")
    }

    #[test]
    fn a_label_value_is_chosen_that_satisfies_the_requirement() {
        assert_eq!(
            req(RequirementOperator::In, &["acme", "beta"])
                .any_value()
                .as_deref(),
            Some("acme")
        );
        assert_eq!(
            req(RequirementOperator::Exists, &[]).any_value().as_deref(),
            Some("0")
        );
        assert_eq!(
            req(RequirementOperator::NotIn, &["0", "1"])
                .any_value()
                .as_deref(),
            Some("2")
        );
        assert_eq!(
            req(RequirementOperator::Gt, &["5"]).any_value().as_deref(),
            Some("6")
        );
        assert_eq!(
            req(RequirementOperator::DoesNotExist, &[]).any_value(),
            None
        );
    }
}
