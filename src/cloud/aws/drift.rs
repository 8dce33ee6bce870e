//! Whether an instance still matches its EC2NodeClass, as upstream's AWS provider judges it
//! (`pkg/cloudprovider/drift.go` of the AWS provider). Only the image is judged here
//! (`AMIDrift`: the AMI the instance booted is no longer one the node class resolves to);
//! upstream's subnet, security-group and node-class-hash drift are not.

use crate::apis::{EC2NodeClassStatus, NodeClaim};

/// Upstream's reason for an instance whose AMI the node class no longer resolves to.
pub const AMI_DRIFT: &str = "AMIDrift";

/// `AMIDrift` when the claim's image (recorded at launch) is not among the node class's resolved
/// AMIs. No verdict without both: a node class that resolved no AMI is not ready, which says
/// nothing about the instance.
pub fn ami_drift(claim: &NodeClaim, status: Option<&EC2NodeClassStatus>) -> Option<&'static str> {
    let image = claim.status.as_ref()?.image_id.as_deref()?;
    let amis = &status?.amis;
    (!amis.is_empty() && !amis.iter().any(|ami| ami.id == image)).then_some(AMI_DRIFT)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(image: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"imageID": image},
        }))
        .expect("a claim")
    }

    fn status(amis: &[&str]) -> EC2NodeClassStatus {
        serde_json::from_value(json!({
            "amis": amis.iter().map(|id| json!({"id": id, "requirements": []})).collect::<Vec<_>>(),
        }))
        .expect("a status")
    }

    #[test]
    fn an_instance_on_an_ami_the_class_no_longer_resolves_to_has_drifted() {
        let status = status(&["ami-new"]);
        assert_eq!(
            ami_drift(&claim("ami-old"), Some(&status)),
            Some("AMIDrift")
        );
    }

    #[test]
    fn an_instance_on_a_current_ami_has_not_drifted() {
        let status = status(&["ami-arm", "ami-old"]);
        assert_eq!(ami_drift(&claim("ami-old"), Some(&status)), None);
    }

    #[test]
    fn a_class_that_resolved_no_ami_says_nothing_about_drift() {
        assert_eq!(ami_drift(&claim("ami-old"), Some(&status(&[]))), None);
        assert_eq!(ami_drift(&claim("ami-old"), None), None);
    }
}
