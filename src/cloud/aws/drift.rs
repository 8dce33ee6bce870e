//! Whether an instance still matches its EC2NodeClass, as upstream's AWS provider judges it
//! (`isNodeClassDrifted` in `pkg/cloudprovider/drift.go` of the AWS provider), in its order:
//! the class's static fields (`NodeClassDrift`, from the hash the claim recorded at launch),
//! the image (`AMIDrift`), then the instance's security groups (`SecurityGroupDrift`) and
//! subnet (`SubnetDrift`) against what the class resolves to now. Capacity-reservation and
//! placement-group drift are not judged: this agent launches into neither.
//!
//! The rules are pure functions; `AwsProvider::is_drifted` reads the class (from the watch)
//! and the instance (DescribeInstances) they judge.

use super::AwsProvider;
use crate::apis::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus, NodeClaim};
use crate::cloud::node_class_hash::{self, NODE_CLASS_DRIFT};
use crate::cloud::provider::{CloudError, ProviderId};
use std::collections::{BTreeMap, BTreeSet};

/// Upstream's reason for an instance whose AMI the node class no longer resolves to.
pub(crate) const AMI_DRIFT: &str = "AMIDrift";
/// Upstream's reason for an instance whose security groups are not the class's.
pub(crate) const SECURITY_GROUP_DRIFT: &str = "SecurityGroupDrift";
/// Upstream's reason for an instance in a subnet the class no longer selects.
pub(crate) const SUBNET_DRIFT: &str = "SubnetDrift";

/// Upstream's annotation for the node class's hash, on the class and on its claims.
pub(crate) const EC2_NODE_CLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// Upstream's annotation for the version of that hash.
pub(crate) const EC2_NODE_CLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";

/// The fields upstream's `EC2NodeClassSpec` tags `hash:"ignore"`: selectors (dynamic: judged
/// by what they resolve to), `amiFamily` (hashed as resolved, below) and `ipPrefixCount`.
const NOT_HASHED: &[&str] = &[
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "ipPrefixCount",
    "amiSelectorTerms",
    "amiFamily",
];

/// The static hash of a class's spec. Upstream hashes the AMI family as resolved (`AMIFamily()`:
/// the field, else the alias's family), so writing `amiFamily: AL2023` beside an `al2023@latest`
/// alias is no change.
pub(crate) fn node_class_hash(spec: &EC2NodeClassSpec) -> String {
    let family = resolved_ami_family(spec);
    node_class_hash::hash(spec, NOT_HASHED, &[("amiFamily", &family)])
}

/// The annotations a claim launched from `spec` carries, as upstream's `Create` returns them.
pub(crate) fn claim_annotations(spec: &EC2NodeClassSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (EC2_NODE_CLASS_HASH.to_owned(), node_class_hash(spec)),
        (
            EC2_NODE_CLASS_HASH_VERSION.to_owned(),
            node_class_hash::HASH_VERSION.to_owned(),
        ),
    ])
}

/// `amiFamily` if set, else the family of the first alias, in upstream's spelling.
fn resolved_ami_family(spec: &EC2NodeClassSpec) -> String {
    let raw = spec.ami_family.clone().or_else(|| {
        spec.ami_selector_terms
            .iter()
            .find_map(|term| term.alias.as_deref())
            .and_then(|alias| alias.split('@').next())
            .map(str::to_owned)
    });
    let raw = raw.unwrap_or_default();
    match raw.to_ascii_lowercase().as_str() {
        "al2" => "AL2".to_owned(),
        "al2023" => "AL2023".to_owned(),
        "bottlerocket" => "Bottlerocket".to_owned(),
        "windows2019" => "Windows2019".to_owned(),
        "windows2022" => "Windows2022".to_owned(),
        "windows2025" => "Windows2025".to_owned(),
        "custom" => "Custom".to_owned(),
        _ => raw,
    }
}

/// Upstream's `areStaticFieldsDrifted`: `NodeClassDrift` when the hash the claim recorded at
/// launch is not the class's hash now (judged only for claims stamped with this agent's hash
/// version; see [`node_class_hash`](crate::cloud::node_class_hash)).
pub(crate) fn static_drift(claim: &NodeClaim, class: &EC2NodeClass) -> Option<&'static str> {
    let annotations = claim.metadata.annotations.as_ref()?;
    node_class_hash::drifted(
        annotations.get(EC2_NODE_CLASS_HASH).map(String::as_str),
        annotations
            .get(EC2_NODE_CLASS_HASH_VERSION)
            .map(String::as_str),
        &node_class_hash(&class.spec),
    )
    .then_some(NODE_CLASS_DRIFT)
}

/// `AMIDrift` when the claim's image (recorded at launch) is not among the node class's resolved
/// AMIs. No verdict without both: a node class that resolved no AMI is not ready, which says
/// nothing about the instance.
pub(crate) fn ami_drift(
    claim: &NodeClaim,
    status: Option<&EC2NodeClassStatus>,
) -> Option<&'static str> {
    let image = claim.status.as_ref()?.image_id.as_deref()?;
    let amis = &status?.amis;
    (!amis.is_empty() && !amis.iter().any(|ami| ami.id == image)).then_some(AMI_DRIFT)
}

/// Upstream's `areSecurityGroupsDrifted` then `isSubnetDrifted`: the instance's security groups
/// must be exactly the class's, and its subnet one the class selects. A class that resolved
/// none of either says nothing (upstream returns an error there, which is no verdict either).
pub(crate) fn network_drift(
    status: Option<&EC2NodeClassStatus>,
    subnet: Option<&str>,
    security_groups: &[String],
) -> Option<&'static str> {
    let status = status?;
    let wanted: BTreeSet<&str> = status
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    let has: BTreeSet<&str> = security_groups.iter().map(String::as_str).collect();
    if !wanted.is_empty() && wanted != has {
        return Some(SECURITY_GROUP_DRIFT);
    }
    let subnet = subnet?;
    (!status.subnets.is_empty() && !status.subnets.iter().any(|s| s.id == subnet))
        .then_some(SUBNET_DRIFT)
}

impl AwsProvider {
    /// Upstream's AWS `IsDrifted` for a claim of an EC2NodeClass: static fields, image, then
    /// the instance's security groups and subnet.
    pub(super) async fn is_drifted(&self, claim: &NodeClaim) -> Result<Option<String>, CloudError> {
        let reference = &claim.spec.node_class_ref;
        let Some(class) = self
            .classes
            .get(&reference.name)
            .await
            .map_err(|e| CloudError::api("reading the EC2NodeClass", e))?
        else {
            return Ok(None);
        };
        if let Some(reason) =
            static_drift(claim, &class).or_else(|| ami_drift(claim, class.status.as_ref()))
        {
            return Ok(Some(reason.to_owned()));
        }
        let Some(ProviderId::Aws { instance_id, .. }) = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|id| id.parse().ok())
        else {
            return Ok(None);
        };
        let instances = self
            .describe_instances(Vec::new(), vec![instance_id])
            .await?;
        let Some(instance) = instances.first() else {
            return Ok(None);
        };
        let groups: Vec<String> = instance
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect();
        Ok(network_drift(class.status.as_ref(), instance.subnet_id(), &groups).map(str::to_owned))
    }
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

    fn class(spec: serde_json::Value) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"}, "spec": spec,
        }))
        .expect("a class")
    }

    fn default_spec() -> serde_json::Value {
        json!({
            "role": "KarpenterNodeRole-demo",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            "tags": {"team": "web"},
        })
    }

    fn stamped(spec: &serde_json::Value) -> NodeClaim {
        let mut claim = claim("ami-1");
        claim.metadata.annotations = Some(claim_annotations(&class(spec.clone()).spec));
        claim
    }

    #[test]
    fn changing_a_static_field_of_the_class_drifts_its_claims() {
        let claim = stamped(&default_spec());
        assert_eq!(static_drift(&claim, &class(default_spec())), None);
        let mut changed = default_spec();
        changed["userData"] = json!("echo hello");
        assert_eq!(
            static_drift(&claim, &class(changed)),
            Some("NodeClassDrift")
        );
    }

    #[test]
    fn changing_a_selector_or_spelling_out_the_aliased_family_is_not_static_drift() {
        let claim = stamped(&default_spec());
        let mut selectors = default_spec();
        selectors["subnetSelectorTerms"] = json!([{"id": "subnet-2"}]);
        selectors["amiFamily"] = json!("AL2023");
        assert_eq!(static_drift(&claim, &class(selectors)), None);
    }

    #[test]
    fn claims_stamped_by_upstream_are_not_judged_by_this_hash() {
        let mut claim = claim("ami-1");
        claim.metadata.annotations = Some(BTreeMap::from([
            (EC2_NODE_CLASS_HASH.to_owned(), "123".to_owned()),
            (EC2_NODE_CLASS_HASH_VERSION.to_owned(), "v6".to_owned()),
        ]));
        assert_eq!(static_drift(&claim, &class(default_spec())), None);
    }

    fn network(subnets: &[&str], groups: &[&str]) -> EC2NodeClassStatus {
        serde_json::from_value(json!({
            "subnets": subnets.iter().map(|id| json!({"id": id, "zone": "us-west-2a"})).collect::<Vec<_>>(),
            "securityGroups": groups.iter().map(|id| json!({"id": id})).collect::<Vec<_>>(),
        }))
        .expect("a status")
    }

    #[test]
    fn an_instance_whose_security_groups_differ_from_the_class_has_drifted() {
        let status = network(&["subnet-1"], &["sg-1", "sg-2"]);
        let groups = |ids: &[&str]| ids.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            network_drift(Some(&status), Some("subnet-1"), &groups(&["sg-2", "sg-1"])),
            None
        );
        assert_eq!(
            network_drift(Some(&status), Some("subnet-1"), &groups(&["sg-1"])),
            Some("SecurityGroupDrift")
        );
        assert_eq!(
            network_drift(Some(&status), Some("subnet-9"), &groups(&["sg-1", "sg-2"])),
            Some("SubnetDrift")
        );
        assert_eq!(
            network_drift(Some(&network(&[], &[])), Some("subnet-9"), &[]),
            None,
            "a class that resolved nothing is no verdict"
        );
    }
}
