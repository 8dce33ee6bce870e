//! The agent, in-process, with the GCP provider against the fake and the rig: pending pods get
//! fake VMs; the test stands in for the kubelet and registers each VM's Node with its
//! `gce://project/zone/name` providerID (kwok keeps it Ready); deleting a claim deletes its VM;
//! VMs no claim owns are collected; a failed operation is retried; a stockout moves the claim to
//! the next type with an Event saying why; a preempted VM's node is replaced.

use crate::cloud_agent::{
    assert_tenant_pods_share_one_labelled_node, claims_of, clean_up, kubelet, running,
    tenant_requirement, tenant_workload, workload,
};
use crate::rig::rig;
use crate::tls_bootstrap;
use crate::{apply, config, exclusive, fake, node_class, wait_for};
use k8s_openapi::api::core::v1::{Event, Node};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::ProviderId;
use karpenter_core::cloud::gcp::{GcpConfig, GcpProvider};
use karpenter_core::controllers::{self, Settings};
use karpenter_core::metrics::Metrics;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The agent plus a stand-in kubelet, running until dropped.
struct Agent {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    provider: Arc<GcpProvider>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn start(fake: &gcp_fake::FakeGcp, config: GcpConfig) -> Agent {
    start_with(
        fake,
        config,
        Settings {
            garbage_collection_interval: Duration::from_secs(2),
            garbage_collection_grace: Duration::from_secs(2),
            ..Settings::default()
        },
    )
    .await
}

async fn start_with(fake: &gcp_fake::FakeGcp, config: GcpConfig, settings: Settings) -> Agent {
    karpenter_test_support::logging::init();
    let client = rig().gcp_agent_client().await;
    let bootstrap = tls_bootstrap::bootstrap_client().await;
    let cluster = config.cluster_name.clone();
    let provider = Arc::new(
        GcpProvider::new(config, client.clone())
            .await
            .expect("provider"),
    );
    let tasks = vec![
        tokio::spawn({
            let (client, provider) = (client.clone(), provider.clone());
            async move {
                // As `karpenter-agent run --provider gcp` starts them.
                let mut running =
                    controllers::start(client, provider, settings, Arc::new(Metrics::new())).await;
                controllers::gcp::start(&mut running);
                running.run_until(std::future::pending()).await;
            }
        }),
        tokio::spawn(kubelet(client, cluster, gce_node_name, {
            let state = fake.shared();
            move |id| {
                let (state, bootstrap) = (state.clone(), bootstrap.clone());
                async move {
                    let labels = kube_labels_of(&state, &id)?;
                    // No client certificate, no Node: the kubelet registers only once the
                    // agent approved its request.
                    let name = gce_node_name(&id)?;
                    tls_bootstrap::client_certificate_issued(&bootstrap, &name)
                        .await
                        .then_some(labels)
                }
            }
        })),
    ];
    Agent { tasks, provider }
}

fn pool(name: &str, types: &[&str], capacity: &str) -> String {
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
        - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity}]}}
        - {{key: topology.kubernetes.io/zone, operator: In, values: [us-central1-a]}}
      nodeClassRef: {{group: karpenter.k8s.gcp, kind: GCENodeClass, name: {name}}}
"#,
        types.join(", ")
    )
}

fn vm_of(claim: &NodeClaim) -> (String, String, String) {
    match claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .map(str::parse::<ProviderId>)
    {
        Some(Ok(ProviderId::Gce {
            project,
            zone,
            name,
        })) => (project, zone, name),
        other => panic!(
            "claim {} has no GCE provider id: {other:?}",
            claim.name_any()
        ),
    }
}

async fn events_for(client: &kube::Client, claim: &str) -> Vec<Event> {
    let api: Api<Event> = Api::all(client.clone());
    let events = api
        .list(&ListParams::default())
        .await
        .expect("events")
        .items;
    events
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(claim))
        .collect()
}

/// The labels GKE's node bootstrap gives the kubelet: the VM's `kube-labels` metadata item, as
/// the launch wrote it into the fake.
fn kube_labels_of(
    state: &gcp_fake::Shared,
    id: &ProviderId,
) -> Option<std::collections::BTreeMap<String, String>> {
    let ProviderId::Gce {
        project,
        zone,
        name,
    } = id
    else {
        return None;
    };
    let state = gcp_fake::lock(state);
    let vm = state
        .compute
        .projects
        .get(project)?
        .instances
        .get(&(zone.clone(), name.clone()))?;
    let items = vm["metadata"]["items"].as_array()?;
    let list = items
        .iter()
        .find(|i| i["key"] == "kube-labels")
        .and_then(|i| i["value"].as_str())
        .unwrap_or_default();
    Some(crate::cloud_agent::kube_labels(list))
}

/// GKE names a Node after its VM.
fn gce_node_name(id: &ProviderId) -> Option<String> {
    match id {
        ProviderId::Gce { name, .. } => Some(name.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_pod_gets_a_fake_gce_vm_that_goes_with_its_claim_and_vms_no_claim_owns_are_collected()
 {
    let _guard = exclusive();
    let (project, cluster) = ("agent-demo", "gcp-agent");
    let fake = fake(project).await;
    let client = rig().client().await;
    // The first insert's operation finishes with an error: the agent must not take it for a launch.
    fake.state().compute.fail_next_insert(
        "INTERNAL_ERROR",
        "Internal error. Please try again.",
        500,
    );
    let agent = start(&fake, config(&fake, project, cluster)).await;
    apply(&node_class(cluster, project));
    apply(&pool(
        cluster,
        &["e2-standard-2", "n2d-standard-2"],
        "on-demand",
    ));
    apply(&workload("gcp-agent-app", cluster, 1));

    wait_for(
        "the pod to run on a GCE node",
        Duration::from_secs(120),
        || async { (running(&client, "gcp-agent-app").await.len() == 1).then_some(()) },
    )
    .await;
    // Initialized can trail the pod by a moment (it waits for the node's not-ready taint to go).
    let claim = wait_for("an initialized claim", Duration::from_secs(60), || async {
        claims_of(&client, cluster)
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
        Some("e2-standard-2")
    );
    let (vm_project, zone, name) = vm_of(&claim);
    assert_eq!(
        (vm_project.as_str(), zone.as_str()),
        (project, "us-central1-a")
    );
    let vm = fake
        .state()
        .compute
        .instance(project, &zone, &name)
        .expect("the VM");
    assert_eq!(vm["status"], "RUNNING");
    assert_eq!(vm["labels"]["karpenter-sh-nodeclaim"], claim.name_any());
    let inserts = fake
        .state()
        .requests
        .iter()
        .filter(|r| r.starts_with("POST") && r.ends_with("/instances"))
        .count();
    assert!(
        inserts >= 2,
        "the failed operation was retried ({inserts} inserts)"
    );
    assert_eq!(
        fake.state().compute.instances(project).len(),
        1,
        "one VM for one claim"
    );

    // A VM labelled for this cluster that no claim owns is collected.
    let orphan = json!({"name": "gcp-agent-orphan", "zone": format!("https://www.googleapis.com/compute/v1/projects/{project}/zones/us-central1-b"),
        "machineType": "zones/us-central1-b/machineTypes/e2-standard-2", "status": "RUNNING", "id": "123", "creationTimestamp": "2026-01-01T00:00:00.000Z",
        "labels": {"karpenter-k8s-gcp-cluster": cluster, "karpenter-sh-nodepool": cluster, "karpenter-sh-nodeclaim": "gcp-agent-gone"}});
    let other_cluster = json!({"name": "someone-elses", "zone": format!("https://www.googleapis.com/compute/v1/projects/{project}/zones/us-central1-b"),
        "machineType": "zones/us-central1-b/machineTypes/e2-standard-2", "status": "RUNNING", "id": "124", "creationTimestamp": "2026-01-01T00:00:00.000Z",
        "labels": {"karpenter-k8s-gcp-cluster": "another", "karpenter-sh-nodepool": "x"}});
    {
        let mut state = fake.state();
        let instances = &mut state
            .compute
            .projects
            .get_mut(project)
            .expect("project")
            .instances;
        instances.insert(
            ("us-central1-b".to_owned(), "gcp-agent-orphan".to_owned()),
            orphan,
        );
        instances.insert(
            ("us-central1-b".to_owned(), "someone-elses".to_owned()),
            other_cluster,
        );
    }
    wait_for(
        "the orphan to be deleted",
        Duration::from_secs(60),
        || async {
            fake.state()
                .compute
                .instance(project, "us-central1-b", "gcp-agent-orphan")
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        fake.state()
            .compute
            .instance(project, "us-central1-b", "someone-elses")
            .is_some(),
        "another cluster's VM is left alone"
    );
    assert!(
        fake.state()
            .compute
            .instance(project, &zone, &name)
            .is_some(),
        "garbage collection left the owned VM alone"
    );

    // Deleting the claim deletes its VM and its node.
    rig().kubectl_ok(&["delete", "nodeclaim", &claim.name_any(), "--wait=false"]);
    wait_for("the VM to be deleted", Duration::from_secs(60), || async {
        fake.state()
            .compute
            .instance(project, &zone, &name)
            .is_none()
            .then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for("the node to be gone", Duration::from_secs(60), || async {
        nodes.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    clean_up(&client, "gcp-agent-app", cluster, "gcenodeclass").await;
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stockout_of_the_cheapest_type_sends_the_claim_to_the_next_type_with_an_event_saying_why()
{
    let _guard = exclusive();
    let (project, cluster) = ("stockout-agent", "gcp-stockout");
    let fake = fake(project).await;
    let client = rig().client().await;
    fake.state()
        .compute
        .stockout("us-central1-a", "e2-standard-2", false);
    // One offering per launch, so the claim fails and provisioning plans again around the hole.
    let mut config = config(&fake, project, cluster);
    config.max_launch_attempts = 1;
    let agent = start(&fake, config).await;
    apply(&node_class(cluster, project));
    apply(&pool(
        cluster,
        &["e2-standard-2", "n2d-standard-2"],
        "on-demand",
    ));
    apply(&workload("gcp-stockout-app", cluster, 1));

    wait_for("the pod to run", Duration::from_secs(120), || async {
        (running(&client, "gcp-stockout-app").await.len() == 1).then_some(())
    })
    .await;
    // Initialized can trail the pod by a moment (it waits for the node's not-ready taint to go).
    let claim = wait_for("an initialized claim", Duration::from_secs(60), || async {
        claims_of(&client, cluster)
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
        Some("n2d-standard-2"),
        "e2-standard-2 had no capacity"
    );
    // Counted now: a consolidation later (the pool consolidates) may launch again.
    let stocked_out = fake
        .state()
        .requests
        .iter()
        .filter(|r| r.starts_with("POST") && r.ends_with("/instances"))
        .count();
    assert_eq!(stocked_out, 2, "one insert stocked out, the next worked");
    assert!(
        agent
            .provider
            .unavailable_offerings()
            .keys()
            .contains(&"on-demand:e2-standard-2:us-central1-a".to_owned())
    );
    // The first claim is gone, with an Event that names the offering.
    let api: Api<Event> = Api::all(client.clone());
    let events = api
        .list(&ListParams::default())
        .await
        .expect("events")
        .items;
    let why = events.iter().find(|e| {
        e.reason.as_deref() == Some("InsufficientCapacity")
            && e.message
                .as_deref()
                .is_some_and(|m| m.contains("on-demand:e2-standard-2:us-central1-a"))
    });
    assert!(
        why.is_some(),
        "an InsufficientCapacity event names the offering: {:?}",
        events
            .iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    clean_up(&client, "gcp-stockout-app", cluster, "gcenodeclass").await;
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_spot_vm_has_its_node_replaced() {
    let _guard = exclusive();
    let (project, cluster) = ("preempt-agent", "gcp-preempt");
    let fake = fake(project).await;
    let client = rig().client().await;
    let agent = start(&fake, config(&fake, project, cluster)).await;
    apply(&node_class(cluster, project));
    apply(&pool(cluster, &["e2-standard-2"], "spot"));
    apply(&workload("gcp-preempt-app", cluster, 1));

    let first = wait_for(
        "the pod to run on a spot VM",
        Duration::from_secs(120),
        || async {
            let claim = claims_of(&client, cluster)
                .await
                .into_iter()
                .find(|c| c.is_true("Initialized"))?;
            (running(&client, "gcp-preempt-app").await.len() == 1).then_some(claim)
        },
    )
    .await;
    assert_eq!(
        first
            .labels()
            .get(labels::CAPACITY_TYPE)
            .map(String::as_str),
        Some("spot")
    );
    let (_, zone, name) = vm_of(&first);
    assert_eq!(
        fake.state()
            .compute
            .instance(project, &zone, &name)
            .expect("VM")["scheduling"]["provisioningModel"],
        "SPOT"
    );

    // GCE preempts it: the VM stops (TERMINATED) and its Node stays, NotReady at worst.
    assert!(
        fake.state()
            .compute
            .preempt(project, &zone, &name, "TERMINATED")
    );
    let replacement = wait_for(
        "a replacement claim with the pod running",
        Duration::from_secs(180),
        || async {
            let claims = claims_of(&client, cluster).await;
            let replacement = claims
                .into_iter()
                .find(|c| c.name_any() != first.name_any() && c.is_true("Initialized"))?;
            (running(&client, "gcp-preempt-app").await.len() == 1).then_some(replacement)
        },
    )
    .await;
    assert_ne!(vm_of(&replacement).2, name);
    wait_for(
        "the preempted VM to be deleted",
        Duration::from_secs(60),
        || async {
            fake.state()
                .compute
                .instance(project, &zone, &name)
                .is_none()
                .then_some(())
        },
    )
    .await;
    // The claim lets go once Compute Engine says the VM is gone (asked again every 5 s).
    let claims: Api<NodeClaim> = Api::all(client.clone());
    wait_for(
        "the preempted claim to be gone",
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
    let events = events_for(&client, &first.name_any()).await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("InstanceTerminated")),
        "an event says why: {events:?}"
    );
    clean_up(&client, "gcp-preempt-app", cluster, "gcenodeclass").await;
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidation_replaces_a_half_empty_vm_with_a_cheaper_one_and_deletes_the_old() {
    let _guard = exclusive();
    let (project, cluster) = ("shrink-demo", "gcp-shrink");
    let fake = fake(project).await;
    let client = rig().client().await;
    let _agent = start_with(
        &fake,
        config(&fake, project, cluster),
        Settings {
            garbage_collection_interval: Duration::from_secs(2),
            garbage_collection_grace: Duration::from_secs(2),
            disruption_poll: Duration::from_secs(2),
            disruption_validation: Duration::from_secs(2),
            ..Settings::default()
        },
    )
    .await;
    apply(&node_class(cluster, project));
    apply(&pool(
        cluster,
        &["e2-standard-2", "e2-standard-4"],
        "on-demand",
    ));
    // Three 1-CPU pods: one e2-standard-4 holds them for less than three e2-standard-2.
    apply(&workload("gcp-shrink-app", cluster, 3));
    wait_for("3 running pods", Duration::from_secs(180), || async {
        (running(&client, "gcp-shrink-app").await.len() == 3).then_some(())
    })
    .await;
    let big = wait_for(
        "one initialized e2-standard-4 claim",
        Duration::from_secs(60),
        || async {
            let claims = claims_of(&client, cluster).await;
            (claims.len() == 1 && claims[0].is_true("Initialized")).then(|| claims[0].clone())
        },
    )
    .await;
    assert_eq!(
        big.labels().get(labels::INSTANCE_TYPE).map(String::as_str),
        Some("e2-standard-4")
    );
    let (_, zone, big_vm) = vm_of(&big);
    rig().kubectl_ok(&[
        "-n",
        "gcp-shrink-app",
        "scale",
        "deployment",
        "app",
        "--replicas=1",
    ]);
    wait_for(
        "the pod to run alone on an e2-standard-2 that replaced the e2-standard-4",
        Duration::from_secs(240),
        || async {
            let claims = claims_of(&client, cluster).await;
            let replaced = claims.len() == 1
                && claims[0].metadata.deletion_timestamp.is_none()
                && claims[0].name_any() != big.name_any()
                && claims[0]
                    .labels()
                    .get(labels::INSTANCE_TYPE)
                    .map(String::as_str)
                    == Some("e2-standard-2");
            let running = running(&client, "gcp-shrink-app").await.len() == 1;
            (replaced && running).then_some(())
        },
    )
    .await;
    wait_for(
        "the old VM to be deleted",
        Duration::from_secs(60),
        || async {
            fake.state()
                .compute
                .instance(project, &zone, &big_vm)
                .is_none()
                .then_some(())
        },
    )
    .await;
    clean_up(&client, "gcp-shrink-app", cluster, "gcenodeclass").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_select_a_pools_custom_label_run_on_one_gce_node_that_carries_it() {
    let _guard = exclusive();
    let (project, cluster) = ("tenant-demo", "tenant-demo");
    let fake = fake(project).await;
    let client = rig().client().await;
    let _agent = start(&fake, config(&fake, project, cluster)).await;
    apply(&node_class(cluster, project));
    apply(&pool(cluster, &["e2-standard-2"], "on-demand").replace(
        "      nodeClassRef:",
        &format!("{}\n      nodeClassRef:", tenant_requirement()),
    ));
    apply(&tenant_workload("tenant-demo-app"));
    assert_tenant_pods_share_one_labelled_node(&client, "tenant-demo-app", cluster).await;
    clean_up(&client, "tenant-demo-app", cluster, "gcenodeclass").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_repeated_after_a_crash_leaves_exactly_one_vm_for_its_claim() {
    let _guard = exclusive();
    let (project, cluster) = ("crash-demo", "crash-demo");
    let fake = fake(project).await;
    let client = rig().client().await;
    apply(&node_class(cluster, project));
    apply(&pool(cluster, &["e2-standard-2"], "on-demand"));
    apply(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: crash-demo-abcde
  labels: {karpenter.sh/nodepool: crash-demo, test-pool: crash-demo}
spec:
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [e2-standard-2]}
    - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
    - {key: topology.kubernetes.io/zone, operator: In, values: [us-central1-a]}
  nodeClassRef: {group: karpenter.k8s.gcp, kind: GCENodeClass, name: crash-demo}
"#,
    );
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let stored = claims.get("crash-demo-abcde").await.expect("the claim");
    {
        // The first launch, by an agent that "dies" before recording it.
        let provider = GcpProvider::new(config(&fake, project, cluster), client.clone())
            .await
            .expect("provider");
        crate::cloud_agent::launch_unrecorded(&provider, &stored).await;
    }
    let _agent = start(&fake, config(&fake, project, cluster)).await;
    wait_for(
        "exactly one VM, the one the claim records",
        Duration::from_secs(120),
        || async {
            let claim = claims.get("crash-demo-abcde").await.ok()?;
            let recorded = claim.status.as_ref()?.provider_id.clone()?;
            let vms = fake.state().compute.instances(project);
            let names: Vec<String> = vms
                .iter()
                .filter_map(|vm| vm["name"].as_str().map(str::to_owned))
                .collect();
            (names.len() == 1 && recorded.ends_with(&format!("/{}", names[0]))).then_some(())
        },
    )
    .await;
    crate::cloud_agent::delete_claim_then_pool(
        &client,
        "crash-demo-abcde",
        cluster,
        "gcenodeclass",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_approves_the_certificates_of_its_own_vms_kubelets_and_no_one_elses() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    let _guard = exclusive();
    let (project, cluster) = ("csr-demo", "csr-demo");
    let fake = fake(project).await;
    let client = rig().client().await;
    let _agent = start(&fake, config(&fake, project, cluster)).await;
    apply(&node_class(cluster, project));
    apply(&pool(cluster, &["e2-standard-2"], "on-demand"));
    apply(&workload("csr-demo-app", cluster, 1));
    wait_for("the pod Running", Duration::from_secs(120), || async {
        (!running(&client, "csr-demo-app").await.is_empty()).then_some(())
    })
    .await;

    // The VM's kubelet joined with a client certificate the agent approved and KCM signed.
    let claim = claims_of(&client, cluster).await.remove(0);
    let (_, zone, vm) = vm_of(&claim);
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let first = csrs
        .get(&format!("node-csr-{vm}"))
        .await
        .expect("its request");
    assert_eq!(
        tls_bootstrap::approval(&first).as_deref(),
        Some("AutoApproved")
    );
    assert!(tls_bootstrap::issued(&first), "{first:?}");

    // The node asks for a serving certificate naming its VM's internal DNS name and address.
    let network_ip =
        fake.state().compute.instances(project)[0]["networkInterfaces"][0]["networkIP"]
            .as_str()
            .expect("an address")
            .to_owned();
    let node = rig()
        .client_as(
            &format!("system:node:{vm}"),
            &["system:nodes", "system:authenticated"],
        )
        .await;
    let serving = ["digital signature", "key encipherment", "server auth"];
    let own_names = vec![
        vm.clone(),
        format!("{vm}.{zone}.c.{project}.internal"),
        network_ip,
    ];
    tls_bootstrap::submit(
        &node,
        &format!("serving-{vm}"),
        "kubernetes.io/kubelet-serving",
        &serving,
        tls_bootstrap::certificate_request(
            &format!("system:node:{vm}"),
            "system:nodes",
            &own_names,
        ),
    )
    .await
    .expect("the node may ask");
    // The same node asks to be the API server too; and someone with the bootstrap credential
    // asks for a node the agent never launched.
    tls_bootstrap::submit(
        &node,
        &format!("serving-{vm}-apiserver"),
        "kubernetes.io/kubelet-serving",
        &serving,
        tls_bootstrap::certificate_request(
            &format!("system:node:{vm}"),
            "system:nodes",
            &["kubernetes.default.svc".to_owned()],
        ),
    )
    .await
    .expect("the node may ask");
    tls_bootstrap::client_certificate_issued(
        &tls_bootstrap::bootstrap_client().await,
        "csr-demo-stranger",
    )
    .await;

    wait_for(
        "the serving certificate approved and signed",
        Duration::from_secs(60),
        || async {
            let csr = csrs.get(&format!("serving-{vm}")).await.ok()?;
            tls_bootstrap::issued(&csr).then_some(())
        },
    )
    .await;
    let events = wait_for(
        "a Warning on the claim saying why the other request is not approved",
        Duration::from_secs(60),
        || async {
            let events = events_for(&client, &claim.name_any()).await;
            events
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("KubeletCertificateNotApproved")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("kubernetes.default.svc"))
                })
                .then_some(events)
        },
    )
    .await;
    assert!(!events.is_empty());
    // Two more passes of the agent later, neither is approved, nor denied: not its to decide.
    tokio::time::sleep(Duration::from_secs(12)).await;
    for name in [
        format!("serving-{vm}-apiserver"),
        "node-csr-csr-demo-stranger".to_owned(),
    ] {
        let csr = csrs.get(&name).await.expect("the request");
        let conditions = csr.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(conditions.is_empty(), "{name}: {conditions:?}");
    }
    for name in [
        format!("serving-{vm}"),
        format!("serving-{vm}-apiserver"),
        "node-csr-csr-demo-stranger".to_owned(),
    ] {
        let _ = csrs.delete(&name, &Default::default()).await;
    }
    clean_up(&client, "csr-demo-app", cluster, "gcenodeclass").await;
}
