//! `kubectl karpenter migrate cluster-autoscaler` reading EKS managed node groups from the EKS
//! API (moto, behind the project's proxy) as well as from the rig's Nodes: a group's maximum size
//! becomes its NodePool's CPU limit, its configured labels and taints carry over, a group scaled
//! to zero (no node to read) still gets its NodePool, and an API the caller may not read falls
//! back to the Nodes with a note naming the missing permission.

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
        stderr.contains("read 2 managed node groups from the EKS API"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Found 2 node groups, on 1 nodes"),
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
    let dry = rig().kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &stdout);
    assert!(dry.status.success(), "{}", text(&dry.stderr));

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
