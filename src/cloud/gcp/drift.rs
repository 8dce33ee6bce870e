//! Whether a VM still matches its GCENodeClass: the class's static fields (`NodeClassDrift`,
//! from the hash the claim recorded at launch under `karpenter.k8s.gcp/gcenodeclass-hash`, the
//! GCP provider's annotation) and then its image (`ImageDrift`: the image the VM booted is no
//! longer one the class resolves to). The split follows the AWS provider's
//! (`pkg/cloudprovider/drift.go`): selectors are dynamic and judged by what they resolve to,
//! everything else is static.

use crate::apis::{GCENodeClass, GCENodeClassSpec, GCENodeClassStatus, NodeClaim};
use crate::cloud::node_class_hash::{self, NODE_CLASS_DRIFT};
use std::collections::BTreeMap;

/// The reason for a VM whose image the class no longer resolves to.
pub(crate) const IMAGE_DRIFT: &str = "ImageDrift";

/// The GCP provider's annotation for the node class's hash.
pub(crate) const GCE_NODE_CLASS_HASH: &str = "karpenter.k8s.gcp/gcenodeclass-hash";
/// The GCP provider's annotation for the version of that hash.
pub(crate) const GCE_NODE_CLASS_HASH_VERSION: &str = "karpenter.k8s.gcp/gcenodeclass-hash-version";

/// The dynamic fields: the image selectors are judged by the image they resolve to.
const NOT_HASHED: &[&str] = &["imageSelectorTerms", "imageFamily"];

/// The static hash of a class's spec.
pub(crate) fn node_class_hash(spec: &GCENodeClassSpec) -> String {
    node_class_hash::hash(spec, NOT_HASHED, &[])
}

/// The annotations a claim launched from `spec` carries.
pub(crate) fn claim_annotations(spec: &GCENodeClassSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (GCE_NODE_CLASS_HASH.to_owned(), node_class_hash(spec)),
        (
            GCE_NODE_CLASS_HASH_VERSION.to_owned(),
            node_class_hash::HASH_VERSION.to_owned(),
        ),
    ])
}

/// `NodeClassDrift` when the hash the claim recorded at launch is not the class's hash now.
pub(crate) fn static_drift(claim: &NodeClaim, class: &GCENodeClass) -> Option<&'static str> {
    let annotations = claim.metadata.annotations.as_ref()?;
    node_class_hash::drifted(
        annotations.get(GCE_NODE_CLASS_HASH).map(String::as_str),
        annotations
            .get(GCE_NODE_CLASS_HASH_VERSION)
            .map(String::as_str),
        &node_class_hash(&class.spec),
    )
    .then_some(NODE_CLASS_DRIFT)
}

/// `ImageDrift` when the claim's image (recorded at launch) is not among the class's resolved
/// images. A class that resolved none is not ready, which says nothing about the VM.
pub(crate) fn image_drift(
    claim: &NodeClaim,
    status: Option<&GCENodeClassStatus>,
) -> Option<&'static str> {
    let image = claim.status.as_ref()?.image_id.as_deref()?;
    let images = &status?.images;
    (!images.is_empty() && !images.iter().any(|i| i.source_image == image)).then_some(IMAGE_DRIFT)
}

/// Both checks, in order.
pub fn drift(claim: &NodeClaim, class: &GCENodeClass) -> Option<&'static str> {
    static_drift(claim, class).or_else(|| image_drift(claim, class.status.as_ref()))
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(spec: serde_json::Value, images: &[&str]) -> GCENodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.gcp/v1alpha1", "kind": "GCENodeClass",
            "metadata": {"name": "default"}, "spec": spec,
            "status": {"images": images.iter().map(|i| json!({"sourceImage": i, "requirements": []})).collect::<Vec<_>>()},
        }))
        .expect("a class")
    }

    fn spec() -> serde_json::Value {
        json!({"imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}],
            "disks": [{"category": "pd-balanced", "sizeGiB": 60, "boot": true}]})
    }

    fn claim(image: &str, stamped_from: &GCENodeClass) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.gcp", "kind": "GCENodeClass", "name": "default"}},
            "status": {"imageID": image},
        }))
        .expect("a claim");
        claim.metadata.annotations = Some(claim_annotations(&stamped_from.spec));
        claim
    }

    #[test]
    fn a_vm_on_the_image_and_spec_it_was_made_from_has_not_drifted() {
        let class = class(spec(), &["projects/p/global/images/cos-1"]);
        assert_eq!(
            drift(&claim("projects/p/global/images/cos-1", &class), &class),
            None
        );
    }

    #[test]
    fn a_new_image_drifts_the_vm() {
        let old = class(spec(), &["projects/p/global/images/cos-1"]);
        let new = class(spec(), &["projects/p/global/images/cos-2"]);
        assert_eq!(
            drift(&claim("projects/p/global/images/cos-1", &old), &new),
            Some("ImageDrift")
        );
    }

    #[test]
    fn a_changed_disk_drifts_the_vm_before_its_image_is_judged() {
        let old = class(spec(), &["projects/p/global/images/cos-1"]);
        let mut bigger = spec();
        bigger["disks"][0]["sizeGiB"] = json!(100);
        let new = class(bigger, &["projects/p/global/images/cos-2"]);
        assert_eq!(
            drift(&claim("projects/p/global/images/cos-1", &old), &new),
            Some("NodeClassDrift")
        );
    }

    #[test]
    fn a_class_that_resolved_no_image_says_nothing() {
        let old = class(spec(), &["projects/p/global/images/cos-1"]);
        let none = class(spec(), &[]);
        assert_eq!(
            drift(&claim("projects/p/global/images/cos-1", &old), &none),
            None
        );
    }
}
