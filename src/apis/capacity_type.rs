//! [`CapacityType`]: the values of `karpenter.sh/capacity-type`, how an instance is bought.
//! Every offering, launched instance, claim option and price carries one; its label value is
//! written and read here only (upstream's `karpenter.sh/capacity-type` values in
//! `pkg/apis/v1/labels.go`).

use super::labels;
use serde::{Deserialize, Serialize};

/// How an instance is bought.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    /// `on-demand`.
    OnDemand,
    /// `spot`: cheaper, and the cloud may take it back.
    Spot,
    /// `reserved`: capacity reserved ahead (an EC2 capacity reservation).
    Reserved,
}

impl CapacityType {
    /// Every capacity type.
    pub const ALL: [Self; 3] = [Self::OnDemand, Self::Spot, Self::Reserved];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnDemand => labels::CAPACITY_TYPE_ON_DEMAND,
            Self::Spot => labels::CAPACITY_TYPE_SPOT,
            Self::Reserved => labels::CAPACITY_TYPE_RESERVED,
        }
    }
}

/// Requirement values (`karpenter.sh/capacity-type In [spot, on-demand]`) take it as is.
impl AsRef<str> for CapacityType {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// A capacity type equals its label value.
impl PartialEq<str> for CapacityType {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for CapacityType {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for CapacityType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `karpenter.sh/capacity-type` value that is none of [`CapacityType`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a capacity type (on-demand, spot or reserved)")]
pub struct UnknownCapacityType(pub String);

impl std::str::FromStr for CapacityType {
    type Err = UnknownCapacityType;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == text)
            .ok_or_else(|| UnknownCapacityType(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_capacity_type_reads_back_from_its_label_value_and_its_json() {
        for capacity_type in CapacityType::ALL {
            assert_eq!(capacity_type.as_str().parse(), Ok(capacity_type));
            let json = serde_json::to_string(&capacity_type).expect("serializes");
            assert_eq!(json, format!("\"{capacity_type}\""));
        }
        assert_eq!(
            "preemptible".parse::<CapacityType>(),
            Err(UnknownCapacityType("preemptible".to_owned()))
        );
    }
}
