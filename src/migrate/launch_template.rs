//! What an EKS managed node group's nodes boot with, as the EC2NodeClass of its NodePool: the
//! group's AMI type and disk size, and its launch template's image, volumes, security groups,
//! instance metadata options, user data and tags. Upstream's "Migrating from Cluster Autoscaler"
//! guide leaves these to the user; here each becomes the EC2NodeClass field upstream's v1 API
//! has for it, and what has none (a key pair) is a note.
//!
//! A group whose nodes boot as `init`'s node class would (AL2023 by alias, the 20 GiB root
//! volume, no launch template) shares that class; any other gets a class of its own, named as its
//! NodePool.

use super::{NodeGroup, pool_name};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A launch template version, as far as an EC2NodeClass can carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchTemplate {
    pub name: String,
    pub version: String,
    /// `ImageId`: a custom AMI.
    pub image_id: Option<String>,
    /// `InstanceType`: when set, the group's only type.
    pub instance_type: Option<String>,
    pub block_devices: Vec<BlockDevice>,
    /// `SecurityGroupIds`, or the groups of its network interfaces.
    pub security_groups: Vec<String>,
    pub metadata_options: Option<MetadataOptions>,
    /// `UserData`, decoded.
    pub user_data: Option<String>,
    /// The tags it puts on instances.
    pub tags: BTreeMap<String, String>,
    /// `KeyName`.
    pub key_name: Option<String>,
}

/// One of a launch template's EBS volumes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockDevice {
    pub device_name: String,
    pub volume_size_gib: Option<i32>,
    pub volume_type: Option<String>,
    pub iops: Option<i32>,
    pub throughput: Option<i32>,
    pub encrypted: Option<bool>,
    pub kms_key_id: Option<String>,
    pub delete_on_termination: Option<bool>,
    pub snapshot_id: Option<String>,
}

/// A launch template's instance metadata options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetadataOptions {
    pub http_endpoint: Option<String>,
    pub http_tokens: Option<String>,
    pub http_put_response_hop_limit: Option<i32>,
    pub http_protocol_ipv6: Option<String>,
}

/// The AMI family an EKS AMI type boots (`amiType` of the node group), with the alias that
/// selects its latest AMI; `None` for `CUSTOM` and types this does not know.
pub(crate) fn ami_family(ami_type: &str) -> Option<(&'static str, &'static str)> {
    if ami_type.starts_with("AL2023_") {
        Some(("AL2023", "al2023@latest"))
    } else if ami_type.starts_with("AL2_") {
        Some(("AL2", "al2@latest"))
    } else if ami_type.starts_with("BOTTLEROCKET_") {
        Some(("Bottlerocket", "bottlerocket@latest"))
    } else if ami_type.starts_with("WINDOWS_") && ami_type.contains("2019") {
        Some(("Windows2019", "windows2019@latest"))
    } else if ami_type.starts_with("WINDOWS_") && ami_type.contains("2022") {
        Some(("Windows2022", "windows2022@latest"))
    } else {
        None
    }
}

/// The root volume upstream's AL2023 and AL2 node classes get by default (20 GiB gp3, encrypted),
/// and EKS's default `diskSize`.
const DEFAULT_DISK_GIB: u32 = 20;

/// Tag keys an EC2NodeClass may not set (upstream's CRD rules), and AWS's reserved prefix.
fn restricted_tag(key: &str) -> bool {
    key == "eks:eks-cluster-name"
        || key.starts_with("kubernetes.io/cluster/")
        || key.starts_with("aws:")
        || key.starts_with("eks:")
        || [
            "karpenter.sh/nodepool",
            "karpenter.sh/nodeclaim",
            "karpenter.k8s.aws/ec2nodeclass",
        ]
        .contains(&key)
}

/// The device an AMI family boots from (Bottlerocket: its data volume, which holds images and
/// pods, is the one EKS's `diskSize` sizes).
fn root_device(family: &str) -> &'static str {
    if family == "Bottlerocket" {
        "/dev/xvdb"
    } else {
        "/dev/xvda"
    }
}

/// The EC2NodeClass `group` needs, built on `base` (`init`'s), or `None` when `base` fits it as
/// it is. Notes say what was carried over that a user should check, and what could not be.
pub fn node_class(group: &NodeGroup, base: &Value, notes: &mut Vec<String>) -> Option<Value> {
    let ami_type = group.ami_type.as_deref();
    let family = ami_type.and_then(ami_family);
    let template = group.launch_template.as_ref();
    let custom_disk = group.disk_size_gib.filter(|s| *s != DEFAULT_DISK_GIB);
    let same_family = family.is_none_or(|(f, _)| f == "AL2023") && ami_type != Some("CUSTOM");
    if template.is_none() && custom_disk.is_none() && same_family {
        return None;
    }
    let what = format!("{} {}", group.kind, group.name);
    let name = pool_name(&group.name);
    let mut class = base.clone();
    class["metadata"] = json!({"name": name});
    let spec = &mut class["spec"];
    let family_name = match family {
        Some((f, alias)) => {
            spec["amiSelectorTerms"] = json!([{"alias": alias}]);
            f
        }
        None => "Custom",
    };
    if let Some(size) = custom_disk {
        spec["blockDeviceMappings"] = json!([{
            "deviceName": root_device(family_name),
            "rootVolume": family_name != "Bottlerocket",
            "ebs": {"volumeSize": format!("{size}Gi"), "volumeType": "gp3", "encrypted": true},
        }]);
    }
    let Some(template) = template else {
        if family.is_none() {
            // CUSTOM without a launch template cannot be: EKS requires one. Keep init's AMI.
            notes.push(format!(
                "{what}: AMI type {} is not one Karpenter has an alias for; the node class boots AL2023",
                ami_type.unwrap_or("unknown")
            ));
            spec["amiSelectorTerms"] = json!([{"alias": "al2023@latest"}]);
        }
        return Some(class);
    };
    let source = format!(
        "launch template {} version {}",
        template.name, template.version
    );
    if let Some(image) = &template.image_id {
        spec["amiSelectorTerms"] = json!([{"id": image}]);
        spec["amiFamily"] = json!(family_name);
        if family_name == "Custom" {
            notes.push(format!(
                "{what}: boots custom AMI {image} from {source} (amiFamily: Custom): Karpenter adds no bootstrap, so its user data (carried over) must join the node to the cluster, with the kubelet flag --register-with-taints=karpenter.sh/unregistered:NoExecute, or Karpenter never sees the node register"
            ));
        } else {
            notes.push(format!(
                "{what}: pinned to AMI {image} from {source}; Karpenter upgrades nothing pinned by id (amiSelectorTerms alias {} follows EKS's releases)",
                family.map_or("", |(_, a)| a)
            ));
        }
    }
    if !template.block_devices.is_empty() {
        spec["blockDeviceMappings"] = template
            .block_devices
            .iter()
            .map(|d| block_device(d, family_name))
            .collect();
    }
    if !template.security_groups.is_empty() {
        spec["securityGroupSelectorTerms"] = template
            .security_groups
            .iter()
            .map(|id| json!({"id": id}))
            .collect();
    }
    if let Some(m) = &template.metadata_options {
        // Every field, as upstream's defaults fill the ones the template leaves out.
        spec["metadataOptions"] = json!({
            "httpEndpoint": m.http_endpoint.as_deref().unwrap_or("enabled"),
            "httpProtocolIPv6": m.http_protocol_ipv6.as_deref().unwrap_or("disabled"),
            "httpPutResponseHopLimit": m.http_put_response_hop_limit.unwrap_or(1),
            "httpTokens": m.http_tokens.as_deref().unwrap_or("required"),
        });
    }
    if let Some(user_data) = template
        .user_data
        .as_deref()
        .filter(|u| !u.trim().is_empty())
    {
        spec["userData"] = json!(user_data);
        if family_name != "Custom" {
            notes.push(format!(
                "{what}: user data from {source} carried over; Karpenter merges it with its own bootstrap as EKS did ({} format)",
                if family_name == "Bottlerocket" { "TOML" } else { "MIME multipart" }
            ));
        }
    }
    let (kept, dropped): (BTreeMap<_, _>, BTreeMap<_, _>) = template
        .tags
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(k, _)| !restricted_tag(k));
    if !kept.is_empty() {
        spec["tags"] = json!(kept);
    }
    if !dropped.is_empty() {
        notes.push(format!(
            "{what}: tags {} of {source} left out: Karpenter sets its own, and the node class may not",
            dropped.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(key) = &template.key_name {
        notes.push(format!(
            "{what}: key pair {key} of {source} has no EC2NodeClass field: reach nodes with SSM Session Manager (the node role has AmazonSSMManagedInstanceCore), or install the key from spec.userData"
        ));
    }
    Some(class)
}

fn block_device(d: &BlockDevice, family: &str) -> Value {
    let mut ebs = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            ebs.insert(key.to_owned(), v);
        }
    };
    put(
        "volumeSize",
        d.volume_size_gib.map(|s| json!(format!("{s}Gi"))),
    );
    put("volumeType", d.volume_type.clone().map(Value::from));
    put("iops", d.iops.map(Value::from));
    put("throughput", d.throughput.map(Value::from));
    put("encrypted", d.encrypted.map(Value::from));
    put("kmsKeyID", d.kms_key_id.clone().map(Value::from));
    put(
        "deleteOnTermination",
        d.delete_on_termination.map(Value::from),
    );
    put("snapshotID", d.snapshot_id.clone().map(Value::from));
    let mut mapping = json!({"deviceName": d.device_name, "ebs": ebs});
    if d.device_name == root_device(family) && family != "Bottlerocket" {
        mapping["rootVolume"] = json!(true);
    }
    mapping
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::Cloud;

    fn base() -> Value {
        json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "KarpenterNodeRole-demo", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                     "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}})
    }

    fn group(ami_type: &str) -> NodeGroup {
        NodeGroup {
            name: "general".to_owned(),
            kind: "EKS managed node group".to_owned(),
            cloud: Some(Cloud::Aws),
            ami_type: Some(ami_type.to_owned()),
            ..NodeGroup::default()
        }
    }

    #[test]
    fn a_group_that_boots_as_init_would_shares_its_node_class() {
        let mut notes = Vec::new();
        assert_eq!(
            node_class(&group("AL2023_x86_64_STANDARD"), &base(), &mut notes),
            None
        );
        let mut twenty = group("AL2023_ARM_64_STANDARD");
        twenty.disk_size_gib = Some(20);
        assert_eq!(node_class(&twenty, &base(), &mut notes), None);
        assert!(notes.is_empty());
    }

    #[test]
    fn an_al2_group_with_a_bigger_disk_gets_a_class_of_its_own() {
        let mut g = group("AL2_x86_64");
        g.disk_size_gib = Some(100);
        let class = node_class(&g, &base(), &mut Vec::new()).unwrap();
        assert_eq!(class["metadata"]["name"], "general");
        assert_eq!(
            class["spec"]["amiSelectorTerms"],
            json!([{"alias": "al2@latest"}])
        );
        assert_eq!(
            class["spec"]["blockDeviceMappings"],
            json!([{"deviceName": "/dev/xvda", "rootVolume": true,
                    "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true}}])
        );
        assert_eq!(class["spec"]["role"], "KarpenterNodeRole-demo");
    }

    #[test]
    fn a_custom_ami_launch_template_becomes_a_custom_family_class_with_its_user_data_and_says_what_to_check()
     {
        let mut g = group("CUSTOM");
        g.launch_template = Some(LaunchTemplate {
            name: "gpu-nodes".to_owned(),
            version: "3".to_owned(),
            image_id: Some("ami-0123456789abcdef0".to_owned()),
            user_data: Some("#!/bin/bash\n/etc/eks/bootstrap.sh demo\n".to_owned()),
            security_groups: vec!["sg-1".to_owned()],
            metadata_options: Some(MetadataOptions {
                http_put_response_hop_limit: Some(2),
                ..MetadataOptions::default()
            }),
            tags: [("team", "ml"), ("eks:nodegroup-name", "x")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
            key_name: Some("ops".to_owned()),
            ..LaunchTemplate::default()
        });
        let mut notes = Vec::new();
        let class = node_class(&g, &base(), &mut notes).unwrap();
        let spec = &class["spec"];
        assert_eq!(spec["amiFamily"], "Custom");
        assert_eq!(
            spec["amiSelectorTerms"],
            json!([{"id": "ami-0123456789abcdef0"}])
        );
        assert_eq!(
            spec["userData"],
            "#!/bin/bash\n/etc/eks/bootstrap.sh demo\n"
        );
        assert_eq!(spec["securityGroupSelectorTerms"], json!([{"id": "sg-1"}]));
        assert_eq!(spec["metadataOptions"]["httpPutResponseHopLimit"], 2);
        assert_eq!(spec["metadataOptions"]["httpTokens"], "required");
        assert_eq!(spec["tags"], json!({"team": "ml"}));
        let notes = notes.join("\n");
        assert!(
            notes.contains("--register-with-taints=karpenter.sh/unregistered:NoExecute"),
            "{notes}"
        );
        assert!(notes.contains("tags eks:nodegroup-name"), "{notes}");
        assert!(notes.contains("key pair ops"), "{notes}");
    }
}
