//! The Karpenter API types, with the same groups, versions and fields as upstream Karpenter, so
//! manifests written for upstream apply unchanged and clusters already running it just work:
//!
//! | kind | group/version |
//! |---|---|
//! | [`NodePool`], [`NodeClaim`] | `karpenter.sh/v1` |
//! | [`EC2NodeClass`] | `karpenter.k8s.aws/v1` |
//! | [`GCENodeClass`] | `karpenter.k8s.gcp/v1alpha1` |
//! | [`KWOKNodeClass`] | `karpenter.kwok.sh/v1alpha1` |
//!
//! Defaults and validation live in the CRD schemas (OpenAPI plus CEL rules), so the API server
//! rejects a bad manifest with a message that names the field, before any controller sees it.

pub mod budget;
mod capacity_type;
mod common;
pub mod ec2nodeclass;
pub mod gcenodeclass;
mod human_duration;
pub mod kwoknodeclass;
mod label_selector;
pub mod labels;
pub mod nodeclaim;
pub mod nodeclaim_annotations;
pub mod nodepool;
mod nodepool_hash;
mod upstream_schema;

pub use capacity_type::{CapacityType, UnknownCapacityType};
pub use common::{
    InvalidDuration, KubeletConfiguration, LabelValue, NillableDuration, NodeClassReference,
    NodeSelectorRequirementWithMinValues, RequirementOperator, parse_duration,
};
pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use gcenodeclass::{GCENodeClass, GCENodeClassSpec, GCENodeClassStatus};
pub use human_duration::human_duration;
pub use kwoknodeclass::{KWOKNodeClass, KWOKNodeClassSpec, KWOKNodeClassStatus};
pub use label_selector::{LabelSelector, SelectorError};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, ResourceRequirements};
pub use nodeclaim_annotations::RecordedInstanceType;
pub use nodepool::{
    Budget, ConsolidationPolicy, Disruption, DisruptionReason, NodeClaimTemplate,
    NodeClaimTemplateSpec, NodePool, NodePoolSpec, NodePoolStatus, TemplateMetadata,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Failure to render the CRDs.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// A CRD could not be written as YAML.
    #[error("failed to render the {name} CRD as YAML")]
    Render {
        name: String,
        #[source]
        source: serde_saphyr::ser::Error,
    },
}

/// Every CRD this project serves, in the order they should be applied.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        NodePool::crd(),
        NodeClaim::crd(),
        EC2NodeClass::crd(),
        GCENodeClass::crd(),
        KWOKNodeClass::crd(),
    ]
    .into_iter()
    .map(without_quantity_essays)
    .collect()
}

/// k8s-openapi documents every `Quantity` with a page-long essay on its wire format. Repeated
/// under every resource map it drowns the fields users read in `kubectl explain`, so it goes.
/// Then the schema gets what upstream's markers give k8s-openapi's types ([`upstream_schema`]).
fn without_quantity_essays(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                if map.get("x-kubernetes-int-or-string") == Some(&serde_json::Value::Bool(true)) {
                    map.remove("description");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    // Serializing a CRD to JSON and back cannot fail: it is plain data with string keys.
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    strip(&mut value);
    upstream_schema::apply(&mut value);
    serde_json::from_value(value).unwrap_or(crd)
}

/// The CRDs as one multi-document YAML stream, as `karpenter-agent crds` prints it and the
/// chart ships it.
pub fn crds_yaml() -> Result<String, CrdError> {
    let mut out = String::new();
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let doc =
            serde_saphyr::to_string(&crd).map_err(|source| CrdError::Render { name, source })?;
        out.push_str("---\n");
        out.push_str(&doc);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_is_cluster_scoped_and_in_the_karpenter_category() {
        for crd in crds() {
            assert_eq!(crd.spec.scope, "Cluster", "{:?}", crd.metadata.name);
            assert_eq!(
                crd.spec.names.categories.as_deref(),
                Some(&["karpenter".to_owned()][..])
            );
        }
    }

    #[test]
    fn crd_names_match_upstream() {
        let names: Vec<_> = crds().into_iter().filter_map(|c| c.metadata.name).collect();
        assert_eq!(
            names,
            [
                "nodepools.karpenter.sh",
                "nodeclaims.karpenter.sh",
                "ec2nodeclasses.karpenter.k8s.aws",
                "gcenodeclasses.karpenter.k8s.gcp",
                "kwoknodeclasses.karpenter.kwok.sh",
            ]
        );
    }
}
