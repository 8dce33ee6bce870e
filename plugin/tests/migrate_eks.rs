//! `kubectl karpenter migrate cluster-autoscaler` reading EKS managed node groups from the EKS
//! API (moto, behind the project's proxy) as well as from the rig's Nodes: a group's maximum size
//! becomes its NodePool's CPU limit, its configured labels and taints carry over, a group scaled
//! to zero (no node to read) still gets its NodePool, a group's subnets give its zones, a group
//! on a launch template gets an EC2NodeClass with the template's volumes, metadata options,
//! security groups, user data and tags, and an API the caller may not read falls back to the
//! Nodes (or, for a launch template, to init's node class) with a note naming the missing
//! permission.

#![cfg(not(target_os = "windows"))]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, dead_code)]

#[path = "../../tests/aws/env.rs"]
mod env;
#[path = "../../tests/aws/moto.rs"]
mod moto;
#[path = "../../tests/aws/proxy.rs"]
mod proxy;

use aws_sdk_eks::types::{AmiTypes, CapacityTypes, NodegroupScalingConfig, Taint, TaintEffect};
use karpenter_test_support::rig::{self, rig};
use serde_json::{Value, json};
use std::process::{Command, Output};

const CLUSTER: &str = "migrate-eks";
const NODE: &str = "eks-general-1";

fn migrate(proxy: &proxy::Proxy) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args([
            "migrate",
            "cluster-autoscaler",
            "--cluster",
            CLUSTER,
            "--region",
            env::REGION,
        ])
        .args(["--endpoint-url", &proxy.url])
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("run kubectl-karpenter")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct CleanUp;

impl Drop for CleanUp {
    fn drop(&mut self) {
        let _ = rig()
            .kubectl()
            .args(["delete", "node", NODE, "--ignore-not-found"])
            .output();
    }
}

fn class<'a>(objects: &'a [Value], name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == "EC2NodeClass" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no EC2NodeClass {name}"))
}

fn pool<'a>(objects: &'a [Value], name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == "NodePool" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no NodePool {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_node_groups_from_the_eks_api_give_limits_from_their_maximum_size_and_pools_for_empty_groups()
 {
    let _clean = CleanUp;
    let env = env::Env::new(CLUSTER, true).await;
    let eks = aws_sdk_eks::Client::new(&env.sdk);
    let role = "arn:aws:iam::123456789012:role/eks-nodes";
    eks.create_nodegroup()
        .cluster_name(CLUSTER)
        .nodegroup_name("general")
        .node_role(role)
        .set_subnets(Some(env.subnet_ids.clone()))
        .scaling_config(
            NodegroupScalingConfig::builder()
                .min_size(1)
                .max_size(10)
                .desired_size(1)
                .build(),
        )
        .instance_types("m5.large")
        .capacity_type(CapacityTypes::OnDemand)
        .ami_type(AmiTypes::Al2X8664)
        .labels("team", "web")
        .taints(
            Taint::builder()
                .key("dedicated")
                .value("web")
                .effect(TaintEffect::NoSchedule)
                .build(),
        )
        .send()
        .await
        .expect("create node group general");
    eks.create_nodegroup()
        .cluster_name(CLUSTER)
        .nodegroup_name("spot-arm")
        .node_role(role)
        .set_subnets(Some(env.subnet_ids.clone()))
        .scaling_config(
            NodegroupScalingConfig::builder()
                .min_size(0)
                .max_size(5)
                .desired_size(0)
                .build(),
        )
        .instance_types("m6g.xlarge")
        .capacity_type(CapacityTypes::Spot)
        .ami_type(AmiTypes::Al2Arm64)
        .send()
        .await
        .expect("create node group spot-arm");
    // A group on a launch template, as platform teams run them: its own type, a bigger root
    // volume, IMDS reachable from pods, a security group of its own, user data, tags, a key.
    let user_data = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript\n\n#!/bin/bash\necho tuned\n--//--\n";
    use aws_sdk_ec2::types::{
        LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
        LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateTagSpecificationRequest,
        RequestLaunchTemplateData, ResourceType, VolumeType,
    };
    use base64::Engine;
    env.ec2
        .create_launch_template()
        .launch_template_name("tuned-nodes")
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .instance_type(aws_sdk_ec2::types::InstanceType::M52xlarge)
                .block_device_mappings(
                    LaunchTemplateBlockDeviceMappingRequest::builder()
                        .device_name("/dev/xvda")
                        .ebs(
                            LaunchTemplateEbsBlockDeviceRequest::builder()
                                .volume_size(100)
                                .volume_type(VolumeType::Gp3)
                                .encrypted(true)
                                .build(),
                        )
                        .build(),
                )
                .metadata_options(
                    LaunchTemplateInstanceMetadataOptionsRequest::builder()
                        .http_put_response_hop_limit(2)
                        .build(),
                )
                .security_group_ids(&env.security_group_id)
                .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
                .tag_specifications(
                    LaunchTemplateTagSpecificationRequest::builder()
                        .resource_type(ResourceType::Instance)
                        .tags(
                            aws_sdk_ec2::types::Tag::builder()
                                .key("team")
                                .value("batch")
                                .build(),
                        )
                        .build(),
                )
                .key_name("ops")
                .build(),
        )
        .send()
        .await
        .expect("create launch template");
    eks.create_nodegroup()
        .cluster_name(CLUSTER)
        .nodegroup_name("tuned")
        .node_role(role)
        .subnets(&env.subnet_ids[0])
        .scaling_config(
            NodegroupScalingConfig::builder()
                .min_size(0)
                .max_size(4)
                .desired_size(0)
                .build(),
        )
        .launch_template(
            aws_sdk_eks::types::LaunchTemplateSpecification::builder()
                .name("tuned-nodes")
                .version("1")
                .build(),
        )
        .ami_type(AmiTypes::Al2023X8664Standard)
        .send()
        .await
        .expect("create node group tuned");
    let tuned_zone = env
        .ec2
        .describe_subnets()
        .subnet_ids(&env.subnet_ids[0])
        .send()
        .await
        .expect("describe subnet")
        .subnets()[0]
        .availability_zone()
        .unwrap()
        .to_owned();
    // The one node of "general" today, as its kubelet and EKS label it.
    let node = format!(
        r#"
apiVersion: v1
kind: Node
metadata:
  name: {NODE}
  labels:
    kubernetes.io/hostname: {NODE}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-west-2a
    eks.amazonaws.com/nodegroup: general
    eks.amazonaws.com/capacityType: ON_DEMAND
    team: web
spec:
  taints: [{{key: dedicated, value: web, effect: NoSchedule}}]
status:
  capacity: {{cpu: "2", memory: 8Gi, pods: "29"}}
  allocatable: {{cpu: "2", memory: 7Gi, pods: "29"}}
"#
    );
    let applied = rig().kubectl_with_input(&["apply", "-f", "-"], &node);
    assert!(applied.status.success(), "{}", text(&applied.stderr));

    let out = migrate(&env.proxy);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("read 3 managed node groups from the EKS API"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Found 3 node groups, on 1 nodes"),
        "{stderr}"
    );
    let objects: Vec<Value> = serde_saphyr::from_multiple(&stdout).expect("YAML");
    let general = pool(&objects, "general");
    // 10 nodes of 2 CPUs at most.
    assert_eq!(general["spec"]["limits"]["cpu"], "20");
    assert_eq!(
        general["spec"]["template"]["spec"]["taints"],
        json!([{"key": "dedicated", "value": "web", "effect": "NoSchedule"}])
    );
    assert_eq!(
        general["spec"]["template"]["metadata"]["labels"],
        json!({"team": "web"})
    );
    let spot = pool(&objects, "spot-arm");
    // 5 m6g.xlarge (4 vCPUs) at most, though none runs today.
    assert_eq!(spot["spec"]["limits"]["cpu"], "20");
    let requirements = spot["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .unwrap();
    assert!(
        requirements
            .contains(&json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}))
    );
    assert!(requirements.contains(
        &json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]})
    ));
    // AL2 groups boot AL2, as EKS booted them.
    let general_class = class(&objects, "general");
    assert_eq!(
        general_class["spec"]["amiSelectorTerms"],
        json!([{"alias": "al2@latest"}])
    );
    assert_eq!(
        general["spec"]["template"]["spec"]["nodeClassRef"]["name"],
        "general"
    );
    let tuned = pool(&objects, "tuned");
    // 4 m5.2xlarge (the template's type) at most, in its one subnet's zone.
    assert_eq!(tuned["spec"]["limits"]["cpu"], "32");
    let zone = tuned["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "topology.kubernetes.io/zone")
        .expect("a zone requirement");
    assert_eq!(zone["values"], json!([tuned_zone]));
    let tuned_class = class(&objects, "tuned");
    let spec = &tuned_class["spec"];
    assert_eq!(
        spec["blockDeviceMappings"],
        json!([{"deviceName": "/dev/xvda", "rootVolume": true,
                "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true}}])
    );
    assert_eq!(spec["metadataOptions"]["httpPutResponseHopLimit"], 2);
    assert_eq!(
        spec["securityGroupSelectorTerms"],
        json!([{"id": env.security_group_id}])
    );
    assert_eq!(spec["userData"], user_data);
    assert_eq!(spec["tags"], json!({"team": "batch"}));
    assert_eq!(
        spec["amiSelectorTerms"],
        json!([{"alias": "al2023@latest"}])
    );
    assert!(stderr.contains("key pair ops"), "{stderr}");
    let dry = rig().kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &stdout);
    assert!(dry.status.success(), "{}", text(&dry.stderr));

    // Without ec2:DescribeLaunchTemplateVersions the group gets init's node class, and the
    // note says why.
    env.proxy.deny("DescribeLaunchTemplateVersions");
    let out = migrate(&env.proxy);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tuned: its launch template could not be read (permission denied: ec2:DescribeLaunchTemplateVersions"),
        "{stderr}"
    );
    let objects: Vec<Value> = serde_saphyr::from_multiple(&text(&out.stdout)).expect("YAML");
    assert_eq!(
        pool(&objects, "tuned")["spec"]["template"]["spec"]["nodeClassRef"]["name"],
        "default"
    );

    // Without eks:ListNodegroups the Nodes are read alone, and the note says why.
    env.proxy.deny("ListNodegroups");
    let out = migrate(&env.proxy);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the EKS API could not be read (permission denied: eks:ListNodegroups"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Found 1 node groups, on 1 nodes"),
        "{stderr}"
    );
}
