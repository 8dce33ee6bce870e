//! The agent, in-process, with the EC2 provider against moto and the rig: pending pods get moto
//! instances; the test stands in for the kubelet and registers each instance's Node (kwok keeps
//! it Ready); deleting a claim terminates its instance; instances no claim owns are collected;
//! an interruption event on the queue replaces the node.

use crate::cloud_agent::{
    assert_tenant_pods_share_one_labelled_node, claims_of, clean_up, running, tenant_requirement,
    tenant_workload, workload,
};
use crate::env::Env;
use crate::rig::rig;
use crate::{apply, exclusive, node_class, wait_for};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, labels};
use karpenter_core::cloud::ProviderId;
use karpenter_core::cloud::aws::{AwsConfig, AwsProvider};
use karpenter_core::controllers::{self, Settings};
use karpenter_core::metrics::Metrics;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

/// The agent plus a stand-in kubelet, running until dropped.
struct Agent {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    provider: Arc<AwsProvider>,
    _running: controllers::Running<karpenter_core::cloud::Metered<AwsProvider>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts the agent as `karpenter-agent run --provider aws` wires it: the common controllers,
/// then the EC2 loops (node class status, and the interruption queue when `queue` is set).
async fn start(env: &Env, queue: Option<String>) -> Agent {
    start_with(
        env,
        queue,
        Settings {
            garbage_collection_interval: Duration::from_secs(2),
            garbage_collection_grace: Duration::from_secs(2),
            ..Settings::default()
        },
    )
    .await
}

async fn start_with(env: &Env, queue: Option<String>, settings: Settings) -> Agent {
    karpenter_test_support::logging::init();
    let client = rig().agent_client().await;
    let mut config = AwsConfig::new(crate::env::REGION, env.cluster.clone());
    config.interruption_queue = queue;
    let provider = Arc::new(AwsProvider::with_sdk_config(
        config,
        &env.sdk,
        client.clone(),
    ));
    let mut running = controllers::start(
        client.clone(),
        provider.clone(),
        settings,
        Arc::new(Metrics::new()),
    )
    .await;
    controllers::aws::start(&mut running)
        .await
        .expect("the EC2 loops start");
    let mut tasks = vec![tokio::spawn(crate::kubelet::ec2_kubelet(
        client.clone(),
        env.cluster.clone(),
        env.ec2.clone(),
    ))];
    if std::env::var_os("KARPENTER_TEST_LOG").is_some() {
        tasks.push(tokio::spawn(dump_state()));
    }
    Agent {
        tasks,
        provider,
        _running: running,
    }
}

/// Prints the claims, nodes, pods and events every 20 s (with `KARPENTER_TEST_LOG=1`).
async fn dump_state() {
    loop {
        tokio::time::sleep(Duration::from_secs(20)).await;
        if let Ok(out) = rig()
            .kubectl()
            .args(["get", "nodeclaims,nodes,pods,events", "-A", "-o", "wide"])
            .output()
        {
            eprintln!(
                "--- state\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

fn pool(name: &str, types: &[&str]) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    metadata:
      labels: {{test-pool: {name}}}
    spec:
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [{}]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {name}}}
"#,
        types.join(", ")
    )
}

fn instance_id(claim: &NodeClaim) -> String {
    match claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .map(str::parse::<ProviderId>)
    {
        Some(Ok(ProviderId::Aws { instance_id, .. })) => instance_id,
        other => panic!(
            "claim {} has no AWS provider id: {other:?}",
            claim.name_any()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_pod_gets_a_moto_instance_of_the_next_type_when_one_has_no_capacity_and_instances_go_with_their_claims()
 {
    let _guard = exclusive();
    let env = Env::new("agent-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    env.proxy.insufficient_capacity("m5.large");
    let agent = start(&env, None).await;
    apply(&node_class("agent-demo", &env.cluster, &role));
    // m5.large and m6i.large cost the same, so the scheduler offers the claim both, cheapest
    // (by name) first; with no m5.large capacity, the one CreateFleet call lands on m6i.large.
    apply(&pool("agent-demo", &["m5.large", "m6i.large"]));
    apply(&workload("agent-demo-app", "agent-demo", 1));

    wait_for(
        "the pod to run on an EC2 node",
        Duration::from_secs(120),
        || async { (running(&client, "agent-demo-app").await.len() == 1).then_some(()) },
    )
    .await;
    // Initialized can trail the pod by a moment (it waits for the node's not-ready taint to go).
    let claim = wait_for("an initialized claim", Duration::from_secs(60), || async {
        claims_of(&client, "agent-demo")
            .await
            .into_iter()
            .find(|c| c.is_true("Initialized"))
    })
    .await;
    assert_eq!(
        claim
            .labels()
            .get(labels::INSTANCE_TYPE)
            .map(String::as_str),
        Some("m6i.large"),
        "m5.large had no capacity"
    );
    let id = instance_id(&claim);
    assert_eq!(env.state(&id).await, "running");
    assert!(
        agent
            .provider
            .unavailable_offerings()
            .keys()
            .iter()
            .all(|k| k.starts_with("on-demand:m5.large:"))
    );

    // An instance tagged for this cluster that no claim owns is collected.
    let orphan = env
        .ec2
        .run_instances()
        .image_id(&env.amd64_ami)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .subnet_id(&env.subnet_ids[0])
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("kubernetes.io/cluster/agent-demo")
                        .value("owned")
                        .build(),
                )
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key(labels::NODE_POOL)
                        .value("agent-demo")
                        .build(),
                )
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("karpenter.sh/nodeclaim")
                        .value("agent-demo-gone")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("run an orphan");
    let orphan_id = orphan.instances()[0].instance_id().expect("id").to_owned();
    wait_for(
        "the orphan to be terminated",
        Duration::from_secs(60),
        || async { (env.state(&orphan_id).await == "terminated").then_some(()) },
    )
    .await;
    assert_eq!(
        env.state(&id).await,
        "running",
        "garbage collection left the owned instance alone"
    );

    // Deleting the claim terminates its instance and removes its node.
    rig().kubectl_ok(&["delete", "nodeclaim", &claim.name_any(), "--wait=false"]);
    wait_for(
        "the instance to be terminated",
        Duration::from_secs(60),
        || async { (env.state(&id).await == "terminated").then_some(()) },
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for("the node to be gone", Duration::from_secs(60), || async {
        nodes
            .get_opt(&format!("ip-{id}"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    clean_up(&client, "agent-demo-app", "agent-demo", "ec2nodeclass").await;
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_interruption_on_the_queue_replaces_the_node() {
    let _guard = exclusive();
    let env = Env::new("interrupt-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    let queue = env
        .sqs
        .create_queue()
        .queue_name("interrupt-demo")
        .send()
        .await
        .expect("queue");
    let queue_url = queue.queue_url().expect("url").to_owned();
    let agent = start(&env, Some("interrupt-demo".to_owned())).await;
    apply(&node_class("interrupt-demo", &env.cluster, &role));
    apply(&pool("interrupt-demo", &["m5.large"]));
    apply(&workload("interrupt-demo-app", "interrupt-demo", 1));

    let first = wait_for(
        "a ready claim with the pod running on its node",
        Duration::from_secs(120),
        || async {
            let claim = claims_of(&client, "interrupt-demo")
                .await
                .into_iter()
                .find(|c| c.is_true("Initialized"))?;
            let node = claim.status.as_ref()?.node_name.clone()?;
            let pods = running(&client, "interrupt-demo-app").await;
            pods.iter()
                .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(&node))
                .then_some(claim)
        },
    )
    .await;
    let first_id = instance_id(&first);
    let event = serde_json::json!({
        "version": "0", "id": "7f3c0ab4", "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": "2026-01-01T00:00:00Z", "region": "us-west-2",
        "resources": [format!("arn:aws:ec2:us-west-2a:instance/{first_id}")],
        "detail": {"instance-id": first_id, "instance-action": "terminate"},
    });
    env.sqs
        .send_message()
        .queue_url(&queue_url)
        .message_body(event.to_string())
        .send()
        .await
        .expect("send the event");

    let replacement = wait_for(
        "a replacement claim with the pod running",
        Duration::from_secs(180),
        || async {
            let claims = claims_of(&client, "interrupt-demo").await;
            let replacement = claims
                .into_iter()
                .find(|c| c.name_any() != first.name_any() && c.is_true("Initialized"))?;
            (running(&client, "interrupt-demo-app").await.len() == 1).then_some(replacement)
        },
    )
    .await;
    assert_ne!(instance_id(&replacement), first_id);
    wait_for(
        "the interrupted instance to be terminated",
        Duration::from_secs(60),
        || async { (env.state(&first_id).await == "terminated").then_some(()) },
    )
    .await;
    // The claim lets go once EC2 says the instance is gone (asked again every 5 s).
    let claims: Api<NodeClaim> = Api::all(client.clone());
    wait_for(
        "the interrupted claim to be gone",
        Duration::from_secs(60),
        || async {
            claims
                .get_opt(&first.name_any())
                .await
                .expect("get")
                .is_none()
                .then_some(())
        },
    )
    .await;
    // The spot offering of the interrupted type and zone is avoided for a while.
    let zone = first
        .labels()
        .get(labels::ZONE)
        .cloned()
        .unwrap_or_default();
    assert!(
        agent
            .provider
            .unavailable_offerings()
            .keys()
            .contains(&format!("spot:m5.large:{zone}"))
    );
    clean_up(
        &client,
        "interrupt-demo-app",
        "interrupt-demo",
        "ec2nodeclass",
    )
    .await;
    drop(agent);
}

/// When the claim's only type has no capacity, the lifecycle deletes the claim and provisioning
/// plans again at once (the claim watch nudges it), with the offering cached as unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_only_type_has_no_capacity_is_replaced_by_one_of_the_next_type() {
    let _guard = exclusive();
    let env = Env::new("replan-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    env.proxy.insufficient_capacity("m5.large");
    let agent = start(&env, None).await;
    apply(&node_class("replan-demo", &env.cluster, &role));
    // m5.xlarge costs twice m5.large: the scheduler offers the first claim m5.large alone.
    apply(&pool("replan-demo", &["m5.large", "m5.xlarge"]));
    apply(&workload("replan-demo-app", "replan-demo", 1));
    wait_for(
        "the pod to run on the next type",
        Duration::from_secs(120),
        || async {
            let claims = claims_of(&client, "replan-demo").await;
            let on_next = claims.iter().any(|c| {
                c.labels().get(labels::INSTANCE_TYPE).map(String::as_str) == Some("m5.xlarge")
            });
            (on_next && running(&client, "replan-demo-app").await.len() == 1).then_some(())
        },
    )
    .await;
    clean_up(&client, "replan-demo-app", "replan-demo", "ec2nodeclass").await;
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_keeps_an_ec2_node_class_status_current_from_not_ready_to_ready() {
    let _guard = exclusive();
    // Nothing is tagged for discovery yet.
    let env = Env::new("status-demo", false).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    let agent = start(&env, None).await;
    apply(&node_class("status-demo", &env.cluster, &role));
    let classes: Api<EC2NodeClass> = Api::all(client.clone());
    let condition = |class: &EC2NodeClass, type_: &str| {
        class
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned())
    };
    let not_ready = wait_for(
        "the node class to say it is not ready",
        Duration::from_secs(60),
        || async {
            let class = classes.get("status-demo").await.ok()?;
            condition(&class, "Ready").filter(|c| c.status == "False")
        },
    )
    .await;
    assert!(
        not_ready
            .message
            .contains("no subnets match subnetSelectorTerms"),
        "{}",
        not_ready.message
    );

    // Tag the subnets and security group; the agent notices on its own, with no change to the object.
    let tag = aws_sdk_ec2::types::Tag::builder()
        .key("karpenter.sh/discovery")
        .value(&env.cluster)
        .build();
    let mut tagging = env
        .ec2
        .create_tags()
        .resources(&env.security_group_id)
        .tags(tag);
    for subnet in &env.subnet_ids {
        tagging = tagging.resources(subnet);
    }
    tagging.send().await.expect("tag for discovery");
    let status = wait_for(
        "the node class to become ready",
        Duration::from_secs(90),
        || async {
            let class = classes.get("status-demo").await.ok()?;
            condition(&class, "Ready").filter(|c| c.status == "True")?;
            class.status
        },
    )
    .await;
    assert_eq!(status.subnets.len(), 3);
    assert_eq!(
        status
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        [env.security_group_id.as_str()]
    );
    assert!(
        status.amis.iter().any(|a| a.id == env.amd64_ami),
        "{:?}",
        status.amis
    );
    assert!(status.instance_profile.is_some());
    rig().kubectl_ok(&["delete", "ec2nodeclass", "status-demo", "--wait=false"]);
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_replaces_a_half_empty_instance_with_a_cheaper_one_and_terminates_the_old() {
    let _guard = exclusive();
    let env = Env::new("agent-shrink", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    let _agent = start_with(
        &env,
        None,
        Settings {
            garbage_collection_interval: Duration::from_secs(2),
            garbage_collection_grace: Duration::from_secs(2),
            disruption_poll: Duration::from_secs(2),
            disruption_validation: Duration::from_secs(2),
            ..Settings::default()
        },
    )
    .await;
    apply(&node_class("agent-shrink", &env.cluster, &role));
    apply(&pool("agent-shrink", &["m5.large", "m5.xlarge"]));
    // Three 1-CPU pods: one m5.xlarge ($0.192/h) holds them for less than three m5.large.
    apply(&workload("agent-shrink-app", "agent-shrink", 3));
    wait_for("3 running pods", Duration::from_secs(180), || async {
        (running(&client, "agent-shrink-app").await.len() == 3).then_some(())
    })
    .await;
    let big = wait_for(
        "one initialized m5.xlarge claim",
        Duration::from_secs(60),
        || async {
            let claims = claims_of(&client, "agent-shrink").await;
            (claims.len() == 1 && claims[0].is_true("Initialized")).then(|| claims[0].clone())
        },
    )
    .await;
    assert_eq!(
        big.labels().get(labels::INSTANCE_TYPE).map(String::as_str),
        Some("m5.xlarge")
    );
    let big_id = instance_id(&big);
    rig().kubectl_ok(&[
        "-n",
        "agent-shrink-app",
        "scale",
        "deployment",
        "app",
        "--replicas=1",
    ]);
    let small = wait_for(
        "the pod to run alone on an m5.large that replaced the m5.xlarge",
        Duration::from_secs(240),
        || async {
            let claims = claims_of(&client, "agent-shrink").await;
            let live: Vec<&NodeClaim> = claims
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .collect();
            let replaced = live.len() == 1
                && live[0].name_any() != big.name_any()
                && live[0]
                    .labels()
                    .get(labels::INSTANCE_TYPE)
                    .map(String::as_str)
                    == Some("m5.large");
            let running = running(&client, "agent-shrink-app").await.len() == 1;
            (replaced && running && claims.len() == 1).then(|| live[0].clone())
        },
    )
    .await;
    wait_for(
        "the m5.xlarge instance to be terminated",
        Duration::from_secs(60),
        || async { (env.state(&big_id).await == "terminated").then_some(()) },
    )
    .await;
    assert_eq!(env.state(&instance_id(&small)).await, "running");
    clean_up(&client, "agent-shrink-app", "agent-shrink", "ec2nodeclass").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_select_a_pools_custom_label_run_on_one_moto_node_that_carries_it() {
    let _guard = exclusive();
    let env = Env::new("tenant-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    let _agent = start(&env, None).await;
    apply(&node_class("tenant-demo", &env.cluster, &role));
    apply(&pool("tenant-demo", &["m5.large"]).replace(
        "      nodeClassRef:",
        &format!("{}\n      nodeClassRef:", tenant_requirement()),
    ));
    apply(&tenant_workload("tenant-demo-app"));
    assert_tenant_pods_share_one_labelled_node(&client, "tenant-demo-app", "tenant-demo").await;
    clean_up(&client, "tenant-demo-app", "tenant-demo", "ec2nodeclass").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_repeated_after_a_crash_leaves_exactly_one_instance_for_its_claim() {
    let _guard = exclusive();
    let env = Env::new("crash-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    apply(&node_class("crash-demo", &env.cluster, &role));
    apply(&pool("crash-demo", &["m5.large"]));
    // A claim as provisioning writes it, launched once by a provider whose agent then "dies"
    // before recording the launch.
    apply(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: crash-demo-abcde
  labels: {karpenter.sh/nodepool: crash-demo, test-pool: crash-demo}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
    - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: crash-demo}
"#,
    );
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let stored = claims.get("crash-demo-abcde").await.expect("the claim");
    let first = {
        let provider = crate::provider::provider(&env).await;
        karpenter_core::controllers::nodeclass_status::sync_node_class(
            &client,
            &provider,
            "crash-demo",
        )
        .await
        .expect("node class status");
        crate::cloud_agent::launch_unrecorded(&provider, &stored).await
    };

    // The restarted agent launches the claim again and records that launch; garbage
    // collection then removes whatever the claim does not record.
    let _agent = start(&env, None).await;
    let recorded = wait_for(
        "exactly one live instance, the one the claim records",
        Duration::from_secs(120),
        || async {
            let claim = claims.get("crash-demo-abcde").await.ok()?;
            let recorded = match claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())?
                .parse::<ProviderId>()
                .ok()?
            {
                ProviderId::Aws { instance_id, .. } => instance_id,
                _ => return None,
            };
            let live: Vec<String> = env
                .instances()
                .await
                .into_iter()
                .filter(|i| {
                    i.tags().iter().any(|t| {
                        t.key() == Some("karpenter.sh/nodeclaim")
                            && t.value() == Some("crash-demo-abcde")
                    })
                })
                .filter(|i| {
                    i.state()
                        .and_then(|s| s.name())
                        .is_some_and(|s| s.as_str() == "running" || s.as_str() == "pending")
                })
                .filter_map(|i| i.instance_id().map(str::to_owned))
                .collect();
            (live == [recorded.clone()]).then_some(recorded)
        },
    )
    .await;
    eprintln!("first launch {}, recorded {recorded}", first.provider_id);
    crate::cloud_agent::delete_claim_then_pool(
        &client,
        "crash-demo-abcde",
        "crash-demo",
        "ec2nodeclass",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_launch_backs_off_says_why_on_the_claim_and_succeeds_once_ec2_lets_it_through()
{
    let _guard = exclusive();
    let env = Env::new("throttle-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    // The SDK tries a call 3 times: 7 refusals fail two launches and the first attempt of a
    // third, so both the SDK's retries and the agent's backoff between launches are needed.
    env.proxy.throttle("CreateFleet", 7);
    let metrics = Arc::new(Metrics::new());
    let agent = start_metered(&env, metrics.clone()).await;
    apply(&node_class("throttle-demo", &env.cluster, &role));
    apply(&pool("throttle-demo", &["m5.large"]));
    apply(&workload("throttle-demo-app", "throttle-demo", 1));
    wait_for(
        "the pod to run once EC2 stops throttling",
        Duration::from_secs(180),
        || async { (running(&client, "throttle-demo-app").await.len() == 1).then_some(()) },
    )
    .await;

    let fleets = env
        .proxy
        .actions()
        .iter()
        .filter(|a| *a == "CreateFleet")
        .count();
    assert!(
        (8..=9).contains(&fleets),
        "7 throttled CreateFleet calls and one that launched, not a busy loop: {fleets}"
    );
    let claims = claims_of(&client, "throttle-demo").await;
    assert_eq!(claims.len(), 1, "one claim, launched once it could be");
    let said_why = events(&client).await.into_iter().any(|e| {
        e.reason.as_deref() == Some("LaunchFailed")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                == claims[0].metadata.name.as_deref()
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains("RequestLimitExceeded"))
    });
    assert!(said_why, "the claim's Events say the launch was throttled");
    let text = metrics.encode().expect("metrics encode");
    assert!(
        text.contains(r#"karpenter_cloudprovider_errors_total{controller="nodeclaim.lifecycle",method="Create",provider="aws""#),
        "the failed launches are counted:\n{text}"
    );
    clean_up(
        &client,
        "throttle-demo-app",
        "throttle-demo",
        "ec2nodeclass",
    )
    .await;
    drop(agent);
}

/// [`start`] with the agent's metrics in the test's hands.
async fn start_metered(env: &Env, metrics: Arc<Metrics>) -> Agent {
    karpenter_test_support::logging::init();
    let client = rig().agent_client().await;
    let provider = Arc::new(AwsProvider::with_sdk_config(
        AwsConfig::new(crate::env::REGION, env.cluster.clone()),
        &env.sdk,
        client.clone(),
    ));
    let mut running = controllers::start(
        client.clone(),
        provider.clone(),
        Settings::default(),
        metrics,
    )
    .await;
    controllers::aws::start(&mut running)
        .await
        .expect("the EC2 loops start");
    Agent {
        tasks: vec![tokio::spawn(crate::kubelet::ec2_kubelet(
            client,
            env.cluster.clone(),
            env.ec2.clone(),
        ))],
        provider,
        _running: running,
    }
}

/// A NodePool of `weight` whose nodes carry `test-pool: fallback-demo`, on the one node class.
fn weighted_pool(name: &str, weight: u32) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  weight: {weight}
  template:
    metadata:
      labels: {{test-pool: fallback-demo}}
    spec:
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: fallback-demo}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_launches_are_always_refused_gives_up_says_it_is_unhealthy_and_a_lighter_pool_takes_its_pods()
 {
    let _guard = exclusive();
    let env = Env::new("fallback-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    // The controller's policy lets it launch only for the fallback pool, as a condition on the
    // request's `karpenter.sh/nodepool` tag would.
    env.proxy
        .deny_tagged("CreateFleet", labels::NODE_POOL, "fallback-demo-primary");
    let agent = start_with(
        &env,
        None,
        Settings {
            launch_ttl: Duration::from_secs(20),
            garbage_collection_interval: Duration::from_secs(2),
            garbage_collection_grace: Duration::from_secs(2),
            ..Settings::default()
        },
    )
    .await;
    apply(&node_class("fallback-demo", &env.cluster, &role));
    apply(&weighted_pool("fallback-demo-primary", 50));
    apply(&weighted_pool("fallback-demo", 10));
    apply(&workload("fallback-demo-app", "fallback-demo", 1));

    let pods = wait_for(
        "the pod to run on a node of the fallback pool",
        Duration::from_secs(240),
        || async {
            let pods = running(&client, "fallback-demo-app").await;
            (pods.len() == 1).then_some(pods)
        },
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .get(
            pods[0]
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .expect("bound"),
        )
        .await
        .expect("the pod's node");
    assert_eq!(
        node.labels().get(labels::NODE_POOL).map(String::as_str),
        Some("fallback-demo"),
        "the heavier pool could not launch, so the lighter one did"
    );

    let pools: Api<karpenter_core::apis::NodePool> = Api::all(client.clone());
    let condition = wait_for(
        "the failing pool's NodeRegistrationHealthy to go False",
        Duration::from_secs(30),
        || async {
            let pool = pools.get("fallback-demo-primary").await.ok()?;
            pool.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "NodeRegistrationHealthy" && c.status == "False")
        },
    )
    .await;
    assert_eq!(condition.reason, "LaunchFailed", "{condition:?}");
    assert!(
        condition.message.contains("UnauthorizedOperation"),
        "the condition says what refused the launch: {condition:?}"
    );
    let timeouts = events(&client)
        .await
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("LaunchTimeout")
                && e.type_.as_deref() == Some("Warning")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("UnauthorizedOperation"))
        })
        .count();
    assert!(
        timeouts >= 2,
        "each claim given up on says why ({timeouts} LaunchTimeout Events)"
    );
    assert!(
        claims_of(&client, "fallback-demo-primary").await.is_empty(),
        "no claim of the failing pool is left waiting"
    );
    let primary_instances = env
        .instances()
        .await
        .into_iter()
        .filter(|i| {
            i.tags().iter().any(|t| {
                t.key() == Some(labels::NODE_POOL) && t.value() == Some("fallback-demo-primary")
            })
        })
        .count();
    assert_eq!(
        primary_instances, 0,
        "nothing was launched for the refused pool"
    );

    rig().kubectl_ok(&["delete", "nodepool", "fallback-demo-primary"]);
    clean_up(
        &client,
        "fallback-demo-app",
        "fallback-demo",
        "ec2nodeclass",
    )
    .await;
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_that_launched_nothing_is_tried_again_under_a_new_client_token_not_replayed_for_ever()
 {
    let _guard = exclusive();
    let env = Env::new("token-demo", true).await;
    let role = env.node_role().await;
    let client = rig().client().await;
    // EC2 answers the first fleet with no instance; the proxy, as EC2, replays that answer to
    // any request repeating its client token.
    env.proxy.fail_next_fleet(
        "InvalidParameterValue",
        "The launch template's network interface is invalid.",
    );
    let agent = start(&env, None).await;
    apply(&node_class("token-demo", &env.cluster, &role));
    apply(&pool("token-demo", &["m5.large"]));
    apply(&workload("token-demo-app", "token-demo", 1));
    wait_for(
        "the pod to run once a fresh request launches",
        Duration::from_secs(120),
        || async { (running(&client, "token-demo-app").await.len() == 1).then_some(()) },
    )
    .await;

    let claims = claims_of(&client, "token-demo").await;
    assert_eq!(
        claims.len(),
        1,
        "the same claim launched, not a replacement"
    );
    let uid = claims[0].metadata.uid.clone().expect("a uid");
    let tokens = env.proxy.fleet_tokens();
    assert_eq!(
        tokens,
        vec![uid.clone(), format!("{uid}-1")],
        "the claim's UID first, then a new token after the answer that launched nothing"
    );
    clean_up(&client, "token-demo-app", "token-demo", "ec2nodeclass").await;
    drop(agent);
}

/// Every Event in the cluster, as `kubectl get events -A` lists them (events.k8s.io/v1).
async fn events(client: &kube::Client) -> Vec<k8s_openapi::api::events::v1::Event> {
    Api::all(client.clone())
        .list(&Default::default())
        .await
        .expect("list events")
        .items
}
