//! The GCP provider on its own against the fake: node class resolution and status, the
//! catalogue, what a launch sends (labels, scheduling, disks, image, metadata), the failed
//! operation check, stockout and quota fallback, preemption as get/list report it, delete.

use crate::rig::rig;
use crate::{apply, config, fake, node_class};
use karpenter_core::apis::CapacityType;
use karpenter_core::apis::{GCENodeClass, NodeClaim, NodeClassReference, labels};
use karpenter_core::cloud::gcp::GcpProvider;
use karpenter_core::cloud::{CloudError, CloudProvider, DeleteOutcome, ProviderId};
use karpenter_core::controllers::lifecycle::launch_candidates;
use karpenter_core::controllers::nodeclass_status;
use kube::Api;
use serde_json::Value;

async fn provider(fake: &gcp_fake::FakeGcp, project: &str, cluster: &str) -> GcpProvider {
    GcpProvider::new(config(fake, project, cluster), rig().client().await)
        .await
        .expect("provider")
}

pub(crate) fn reference(name: &str) -> NodeClassReference {
    NodeClassReference {
        group: labels::GCP_GROUP.to_owned(),
        kind: "GCENodeClass".to_owned(),
        name: name.to_owned(),
    }
}

/// A NodeClaim (not stored anywhere) for `class`, limited to `types`, `zones` and `capacity`.
pub(crate) fn claim(
    name: &str,
    class: &str,
    types: &[&str],
    zones: &[&str],
    capacity: &str,
) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": "0b6c1b7e-2f5e-4d7b-9a39-3c5e6d7f8a90", "labels": {labels::NODE_POOL: "test-pool", "team.example.com/owner": "ops"}},
        "spec": {
            "requirements": [
                {"key": labels::INSTANCE_TYPE, "operator": "In", "values": types},
                {"key": labels::ZONE, "operator": "In", "values": zones},
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": [capacity]},
            ],
            "resources": {"requests": {"cpu": "1"}},
            "nodeClassRef": {"group": labels::GCP_GROUP, "kind": "GCENodeClass", "name": class},
        },
    }))
    .expect("claim")
}

async fn launch(
    provider: &GcpProvider,
    claim: &NodeClaim,
) -> Result<karpenter_core::cloud::Instance, CloudError> {
    let catalogue = provider
        .instance_types(&claim.spec.node_class_ref)
        .await
        .expect("catalogue");
    let candidates = launch_candidates(claim, &catalogue).expect("candidates");
    assert!(
        !candidates.is_empty(),
        "no candidates for {:?}",
        claim.spec.requirements
    );
    provider.create(claim, &candidates).await
}

fn gce(id: &ProviderId) -> (String, String, String) {
    match id {
        ProviderId::Gce {
            project,
            zone,
            name,
        } => (project.clone(), zone.clone(), name.clone()),
        other => panic!("not a GCE provider id: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalogue_lists_priced_machine_types_in_the_region_and_the_node_class_resolves_its_images()
 {
    // The agent tests' node-class status controller writes every class's status: this test
    // writes and reads its own class's, so no agent may run meanwhile.
    let _guard = crate::exclusive();
    let fake = fake("catalogue-demo").await;
    // A zone of another region, and a small page size so the client has to page.
    fake.state().compute.add_machine_type(
        "catalogue-demo",
        "europe-west1-b",
        gcp_fake::compute::MachineType::new("e2-standard-2", 2, 8192),
    );
    fake.state().compute.page_size = Some(7);
    apply(&node_class("catalogue-demo", "catalogue-demo"));
    let provider = provider(&fake, "catalogue-demo", "catalogue-demo").await;

    let types = provider
        .instance_types(&reference("catalogue-demo"))
        .await
        .expect("instance types");
    assert_eq!(
        types.len(),
        gcp_fake::compute::default_machine_types().len(),
        "every seeded type is priced"
    );
    let e2 = types
        .iter()
        .find(|t| t.name == "e2-standard-2")
        .expect("e2-standard-2");
    let mut zones: Vec<&str> = e2
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| o.zone.as_str())
        .collect();
    zones.sort_unstable();
    assert_eq!(
        zones,
        [
            "us-central1-a",
            "us-central1-b",
            "us-central1-c",
            "us-central1-f"
        ],
        "only the region's zones"
    );
    let price = |ct: &str| {
        e2.offerings
            .iter()
            .find(|o| o.capacity_type == ct)
            .map(|o| o.price)
    };
    assert_eq!(price("on-demand"), Some(0.06701142));
    assert!(price("spot") < price("on-demand"));
    assert!(e2.requirements.allows(labels::GCP_INSTANCE_FAMILY, "e2"));
    assert!(
        types
            .iter()
            .any(|t| t.name == "t2a-standard-2" && t.requirements.allows(labels::ARCH, "arm64")),
        "the arm64 image brings Arm types"
    );
    let g2 = types
        .iter()
        .find(|t| t.name == "g2-standard-4")
        .expect("g2");
    assert_eq!(g2.capacity.get("nvidia.com/gpu"), 1);
    assert!(
        g2.requirements
            .allows(labels::GCP_INSTANCE_GPU_NAME, "nvidia-l4")
    );
    let pages = fake
        .state()
        .requests
        .iter()
        .filter(|r| r.ends_with("/aggregated/machineTypes"))
        .count();
    assert!(pages > 1, "the aggregated list was paged ({pages} pages)");

    // The provider resolves; the node class status controller writes what it resolved.
    nodeclass_status::sync_node_class(&rig().client().await, &provider, "catalogue-demo")
        .await
        .expect("status written");
    let classes: Api<GCENodeClass> = Api::all(rig().client().await);
    let status = classes
        .get("catalogue-demo")
        .await
        .expect("node class")
        .status
        .expect("status");
    let images: Vec<&str> = status
        .images
        .iter()
        .map(|i| i.source_image.as_str())
        .collect();
    assert_eq!(
        images,
        [
            "projects/cos-cloud/global/images/cos-stable-117-18613-0-79",
            "projects/cos-cloud/global/images/cos-arm64-stable-117-18613-0-79"
        ]
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    // An image family that does not exist makes the class not ready, and says so.
    apply(
        r#"
apiVersion: karpenter.k8s.gcp/v1alpha1
kind: GCENodeClass
metadata: {name: catalogue-missing}
spec:
  imageSelectorTerms: [{id: projects/nowhere/global/images/family/none}]
"#,
    );
    let err = provider
        .instance_types(&reference("catalogue-missing"))
        .await
        .expect_err("no image");
    assert!(
        matches!(err, CloudError::NodeClassNotReady { .. }),
        "{err:?}"
    );
    nodeclass_status::sync_node_class(&rig().client().await, &provider, "catalogue-missing")
        .await
        .expect_err("the status says why it is not ready");
    let status = classes
        .get("catalogue-missing")
        .await
        .expect("node class")
        .status
        .expect("status");
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False" && c.message.contains("nowhere")),
        "{status:?}"
    );
    rig().kubectl_ok(&[
        "delete",
        "gcenodeclass",
        "catalogue-demo",
        "catalogue-missing",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_launch_sends_the_node_class_and_claim_settings_and_instances_are_listed_by_cluster_and_deleted()
 {
    let fake = fake("launch-demo").await;
    // Operations stay RUNNING for two polls, so the poller really polls zoneOperations.get.
    fake.state().compute.operation_polls = 2;
    // A second disk preloaded with an image, GKE's secondary boot disk, encrypted with a key.
    apply(&node_class("launch-demo", "launch-demo").replace(
        "disks: [{category: pd-balanced, sizeGiB: 60, boot: true}]",
        "disks: [{category: pd-balanced, sizeGiB: 60, boot: true}, {category: pd-ssd, \
         secondaryBootImage: projects/cos-cloud/global/images/cos-stable-117-18613-0-79, \
         secondaryBootMode: CONTAINER_IMAGE_CACHE, \
         kmsKeyName: projects/launch-demo/locations/us-central1/keyRings/nodes/cryptoKeys/disks, \
         kmsKeyServiceAccount: kms@launch-demo.iam.gserviceaccount.com}]",
    ));
    let provider = provider(&fake, "launch-demo", "launch-demo").await;

    let spot_claim = claim(
        "launch-demo-abc12",
        "launch-demo",
        &["e2-standard-2", "n2-standard-2"],
        &["us-central1-b"],
        "spot",
    );
    let instance = launch(&provider, &spot_claim).await.expect("launched");
    let (project, zone, name) = gce(&instance.provider_id);
    assert_eq!(
        (project.as_str(), zone.as_str(), name.as_str()),
        (
            "launch-demo",
            "us-central1-b",
            "launch-demo-launch-demo-abc12"
        )
    );
    assert_eq!(
        instance.instance_type, "e2-standard-2",
        "the cheapest spot offering"
    );
    assert_eq!(instance.capacity_type, "spot");
    assert_eq!(instance.node_claim.as_deref(), Some("launch-demo-abc12"));
    assert_eq!(
        instance.image_id.as_deref(),
        Some("projects/cos-cloud/global/images/cos-stable-117-18613-0-79")
    );
    assert!(instance.price.is_some_and(|p| p > 0.0 && p < 0.067));
    assert!(!instance.terminating);
    let polls = fake
        .state()
        .requests
        .iter()
        .filter(|r| r.contains("/zones/us-central1-b/operations/"))
        .count();
    assert!(
        polls >= 2,
        "the poller polled the zone operation ({polls} polls)"
    );

    let vm = fake
        .state()
        .compute
        .instance("launch-demo", "us-central1-b", &name)
        .expect("the fake has the VM");
    assert_eq!(vm["status"], "RUNNING");
    assert!(
        vm["machineType"]
            .as_str()
            .unwrap()
            .ends_with("/zones/us-central1-b/machineTypes/e2-standard-2")
    );
    for (key, value) in [
        ("karpenter-k8s-gcp-cluster", "launch-demo"),
        ("karpenter-sh-nodepool", "test-pool"),
        ("karpenter-sh-nodeclaim", "launch-demo-abc12"),
        ("karpenter-k8s-gcp-gcenodeclass", "launch-demo"),
        ("team", "platform"),
    ] {
        assert_eq!(vm["labels"][key], value, "label {key}");
    }
    assert_eq!(vm["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(vm["scheduling"]["instanceTerminationAction"], "DELETE");
    assert_eq!(vm["scheduling"]["automaticRestart"], false);
    let boot = &vm["disks"][0];
    assert_eq!(boot["boot"], true);
    assert_eq!(boot["diskSizeGb"], "60");
    assert_eq!(
        boot["initializeParams"]["sourceImage"],
        "projects/cos-cloud/global/images/cos-stable-117-18613-0-79"
    );
    assert_eq!(
        boot["initializeParams"]["diskType"],
        "zones/us-central1-b/diskTypes/pd-balanced"
    );
    let preload = &vm["disks"][1];
    assert_eq!(preload["boot"], false);
    assert_eq!(preload["deviceName"], "gke-cos-stable-117-18613-0-79-disk");
    assert_eq!(
        preload["initializeParams"]["sourceImage"],
        "projects/cos-cloud/global/images/cos-stable-117-18613-0-79"
    );
    assert_eq!(
        preload["diskEncryptionKey"]["kmsKeyServiceAccount"],
        "kms@launch-demo.iam.gserviceaccount.com"
    );
    assert_eq!(vm["tags"]["items"][0], "gke-node");
    assert_eq!(
        vm["serviceAccounts"][0]["email"],
        "nodes@launch-demo.iam.gserviceaccount.com"
    );
    let metadata: Vec<(&str, &str)> = vm["metadata"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["key"].as_str().unwrap(), i["value"].as_str().unwrap()))
        .collect();
    assert!(metadata.contains(&("serial-port-logging-enable", "true")));
    assert!(metadata.contains(&("karpenter-nodeclaim", "launch-demo-abc12")));
    assert!(
        metadata
            .iter()
            .any(|(k, v)| *k == "kube-labels" && v.contains("team.example.com/owner=ops")),
        "{metadata:?}"
    );
    assert!(
        metadata.iter().any(|(k, v)| *k == "kube-labels"
            && v.contains("cloud.google.com/gke-secondary-boot-disk-cos-stable-117-18613-0-79=CONTAINER_IMAGE_CACHE.launch-demo")),
        "GKE's bootstrap is told to use the secondary boot disk: {metadata:?}"
    );
    assert!(
        metadata
            .iter()
            .any(|(k, v)| *k == "kube-node-taints" && v.contains("karpenter.sh/unregistered"))
    );

    // get and list see it; an instance of another cluster in the project is not listed.
    let got = provider
        .get(&instance.provider_id)
        .await
        .expect("get")
        .expect("found");
    assert_eq!(got.instance_type, "e2-standard-2");
    let other = GcpProvider::new(
        config(&fake, "launch-demo", "other-cluster"),
        rig().client().await,
    )
    .await
    .expect("provider");
    let other_claim = claim(
        "other-xyz",
        "launch-demo",
        &["e2-standard-2"],
        &["us-central1-a"],
        "on-demand",
    );
    let other_instance = launch(&other, &other_claim)
        .await
        .expect("other cluster's launch");
    assert_eq!(other_instance.capacity_type, "on-demand");
    let other_vm = fake
        .state()
        .compute
        .instance("launch-demo", "us-central1-a", "other-cluster-other-xyz")
        .expect("other VM");
    assert_eq!(other_vm["scheduling"]["provisioningModel"], "STANDARD");
    let listed = provider.list().await.expect("list");
    assert_eq!(
        listed.iter().map(|i| &i.provider_id).collect::<Vec<_>>(),
        [&instance.provider_id]
    );

    // A retried launch of the same claim adopts the VM instead of making a second one.
    let again = launch(&provider, &spot_claim)
        .await
        .expect("relaunch adopts");
    assert_eq!(again.provider_id, instance.provider_id);
    assert_eq!(fake.state().compute.instances("launch-demo").len(), 2);

    // Delete: terminating (the operation is not waited for), then gone; again is Gone too.
    fake.state().compute.operation_polls = 0;
    assert_eq!(
        provider
            .delete(&instance.provider_id)
            .await
            .expect("delete"),
        DeleteOutcome::Terminating
    );
    assert!(
        fake.state()
            .compute
            .instance("launch-demo", "us-central1-b", &name)
            .is_none()
    );
    assert_eq!(
        provider
            .delete(&instance.provider_id)
            .await
            .expect("delete again"),
        DeleteOutcome::Gone
    );
    assert!(
        provider
            .get(&instance.provider_id)
            .await
            .expect("get")
            .is_none()
    );
    rig().kubectl_ok(&["delete", "gcenodeclass", "launch-demo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stockout_or_quota_error_marks_offerings_unavailable_and_the_launch_moves_to_the_next_one()
 {
    let fake = fake("stockout-demo").await;
    apply(&node_class("stockout-demo", "stockout-demo"));
    let provider = provider(&fake, "stockout-demo", "stockout-demo").await;

    // e2-standard-2 (cheapest) has no capacity in zone a: the same launch takes n2d-standard-2.
    fake.state()
        .compute
        .stockout("us-central1-a", "e2-standard-2", true);
    let claim1 = claim(
        "stockout-one",
        "stockout-demo",
        &["e2-standard-2", "n2d-standard-2"],
        &["us-central1-a"],
        "on-demand",
    );
    let instance = launch(&provider, &claim1)
        .await
        .expect("launched on the next type");
    assert_eq!(
        (instance.instance_type.as_str(), instance.zone.as_str()),
        ("n2d-standard-2", "us-central1-a")
    );
    assert_eq!(
        provider.unavailable_offerings().keys(),
        ["on-demand:e2-standard-2:us-central1-a"]
    );
    let inserts = fake
        .state()
        .requests
        .iter()
        .filter(|r| r.starts_with("POST") && r.ends_with("/instances"))
        .count();
    assert_eq!(inserts, 2, "one failed insert, one that worked");
    assert!(
        fake.state()
            .compute
            .instance(
                "stockout-demo",
                "us-central1-a",
                "stockout-demo-stockout-one"
            )
            .is_some()
    );
    let types = provider
        .instance_types(&reference("stockout-demo"))
        .await
        .expect("catalogue");
    let e2 = types
        .iter()
        .find(|t| t.name == "e2-standard-2")
        .expect("e2");
    let unavailable: Vec<(&str, &str)> = e2
        .offerings
        .iter()
        .filter(|o| !o.available)
        .map(|o| (o.capacity_type.as_str(), o.zone.as_str()))
        .collect();
    assert_eq!(
        unavailable,
        [("on-demand", "us-central1-a")],
        "the catalogue says which offering has no capacity"
    );

    // A quota error on n2d-standard-2 rules it out in every zone; with nothing left the launch
    // reports insufficient capacity naming what failed.
    fake.state()
        .compute
        .quota_exceeded(None, Some("n2d-standard-2"), "N2D_CPUS");
    let claim2 = claim(
        "stockout-two",
        "stockout-demo",
        &["n2d-standard-2"],
        &["us-central1-b", "us-central1-c"],
        "on-demand",
    );
    let err = launch(&provider, &claim2)
        .await
        .expect_err("quota exceeded");
    match err {
        CloudError::InsufficientCapacity { offerings } => {
            assert_eq!(offerings, ["on-demand:n2d-standard-2:us-central1-b"])
        }
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    let keys = provider.unavailable_offerings().keys();
    for zone in [
        "us-central1-a",
        "us-central1-b",
        "us-central1-c",
        "us-central1-f",
    ] {
        assert!(
            keys.contains(&format!("on-demand:n2d-standard-2:{zone}")),
            "{keys:?}"
        );
    }
    rig().kubectl_ok(&["delete", "gcenodeclass", "stockout-demo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_that_finishes_with_an_error_is_a_failed_launch_and_a_preempted_vm_is_reported_terminating()
 {
    let fake = fake("opfail-demo").await;
    apply(&node_class("opfail-demo", "opfail-demo"));
    let provider = provider(&fake, "opfail-demo", "opfail-demo").await;

    fake.state().compute.fail_next_insert(
        "RESOURCE_OPERATION_RATE_EXCEEDED",
        "Operation rate exceeded for resource",
        403,
    );
    let claim = claim(
        "opfail-one",
        "opfail-demo",
        &["e2-standard-4"],
        &["us-central1-c"],
        "on-demand",
    );
    let err = launch(&provider, &claim)
        .await
        .expect_err("a DONE operation with an error is a failure");
    let chain = format!(
        "{err} / {}",
        std::error::Error::source(&err)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(matches!(err, CloudError::Api { .. }), "{err:?}");
    assert!(
        chain.contains("RESOURCE_OPERATION_RATE_EXCEEDED"),
        "{chain}"
    );
    assert!(
        provider.unavailable_offerings().keys().is_empty(),
        "not a capacity problem"
    );
    assert!(
        fake.state().compute.instances("opfail-demo").is_empty(),
        "no VM was made"
    );

    // The retry works (the fault was for one insert).
    let instance = launch(&provider, &claim).await.expect("the retry launches");
    let (project, zone, name) = gce(&instance.provider_id);

    // Preemption: the VM is TERMINATED; get and list report it as terminating.
    assert!(
        fake.state()
            .compute
            .preempt(&project, &zone, &name, "TERMINATED")
    );
    let got = provider
        .get(&instance.provider_id)
        .await
        .expect("get")
        .expect("still exists");
    assert!(got.terminating);
    let listed = provider.list().await.expect("list");
    assert!(
        listed
            .iter()
            .any(|i| i.provider_id == instance.provider_id && i.terminating)
    );
    // A spot VM with termination action DELETE disappears instead.
    fake.state().compute.remove_instance(&project, &zone, &name);
    assert!(
        provider
            .get(&instance.provider_id)
            .await
            .expect("get")
            .is_none()
    );
    let vm: Option<Value> = fake.state().compute.instance(&project, &zone, &name);
    assert!(vm.is_none());
    rig().kubectl_ok(&["delete", "gcenodeclass", "opfail-demo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_take_gke_bootstrap_metadata_network_and_tags_from_the_clusters_node_template() {
    let fake = fake("template-demo").await;
    let subnetwork = "projects/template-demo/regions/us-central1/subnetworks/gke-subnet";
    for (name, kube_env) in [
        ("gke-template-demo-default-pool-0ld", "OLD"),
        ("gke-template-demo-default-pool-n3w", "NEW"),
    ] {
        fake.state().compute.add_instance_template(
            "template-demo",
            name,
            serde_json::json!({
                "machineType": "e2-medium",
                "metadata": {"items": [
                    {"key": "kube-env", "value": kube_env},
                    {"key": "user-data", "value": "#cloud-config"},
                    {"key": "kube-labels", "value": "cloud.google.com/gke-nodepool=default-pool,cloud.google.com/gke-os-distribution=cos"},
                ]},
                "tags": {"items": ["gke-template-demo-1234-node"]},
                "serviceAccounts": [{"email": "gke-nodes@template-demo.iam.gserviceaccount.com", "scopes": []}],
                "networkInterfaces": [{"network": "projects/template-demo/global/networks/vpc", "subnetwork": subnetwork,
                    "aliasIpRanges": [{"subnetworkRangeName": "pods", "ipCidrRange": "/24"}]}],
            }),
        );
        // The second one is newer.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    fake.state().compute.add_instance_template(
        "template-demo",
        "gke-other-cluster-pool-x",
        serde_json::json!({"metadata": {"items": [{"key": "kube-env", "value": "OTHER"}]}}),
    );
    apply(
        r#"
apiVersion: karpenter.k8s.gcp/v1alpha1
kind: GCENodeClass
metadata: {name: template-demo}
spec:
  imageSelectorTerms: [{alias: ContainerOptimizedOS@latest}]
  networkTags: [extra-tag]
"#,
    );
    let provider = provider(&fake, "template-demo", "template-demo").await;
    let claim = claim(
        "template-demo-x1",
        "template-demo",
        &["e2-standard-2"],
        &["us-central1-a"],
        "on-demand",
    );
    let instance = launch(&provider, &claim).await.expect("launched");
    let (_, zone, name) = gce(&instance.provider_id);
    let vm = fake
        .state()
        .compute
        .instance("template-demo", &zone, &name)
        .expect("VM");
    let metadata: std::collections::BTreeMap<&str, &str> = vm["metadata"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["key"].as_str().unwrap(), i["value"].as_str().unwrap()))
        .collect();
    assert_eq!(
        metadata.get("kube-env"),
        Some(&"NEW"),
        "the newest template of this cluster"
    );
    assert_eq!(metadata.get("user-data"), Some(&"#cloud-config"));
    let kube_labels = metadata["kube-labels"];
    assert!(
        kube_labels.contains("cloud.google.com/gke-os-distribution=cos")
            && kube_labels.contains("karpenter.sh/nodepool=test-pool"),
        "{kube_labels}"
    );
    assert!(
        !kube_labels.contains("gke-nodepool"),
        "not GKE's pool: {kube_labels}"
    );
    assert_eq!(vm["networkInterfaces"][0]["subnetwork"], subnetwork);
    assert_eq!(
        vm["networkInterfaces"][0]["aliasIpRanges"][0]["subnetworkRangeName"],
        "pods"
    );
    assert!(
        vm["networkInterfaces"][0].get("accessConfigs").is_none(),
        "private like the template"
    );
    assert_eq!(
        vm["tags"]["items"],
        serde_json::json!(["gke-template-demo-1234-node", "extra-tag"])
    );
    assert_eq!(
        vm["serviceAccounts"][0]["email"],
        "gke-nodes@template-demo.iam.gserviceaccount.com"
    );
    rig().kubectl_ok(&["delete", "gcenodeclass", "template-demo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_drifts_once_its_node_class_resolves_another_image_or_changes_its_disks() {
    // The agent tests' node-class status controller writes every class's status: this test
    // writes and reads its own class's, so no agent may run meanwhile.
    let _guard = crate::exclusive();
    let fake = fake("drift-demo").await;
    apply(&node_class("drift-demo", "drift-demo"));
    let provider = provider(&fake, "drift-demo", "drift-demo").await;
    let client = rig().client().await;
    nodeclass_status::sync_node_class(&client, &provider, "drift-demo")
        .await
        .expect("status written");
    let mut claim = claim(
        "drift-demo-abc12",
        "drift-demo",
        &["e2-standard-2"],
        &["us-central1-b"],
        "on-demand",
    );
    let instance = launch(&provider, &claim).await.expect("launched");
    claim.metadata.annotations = Some(instance.annotations.clone());
    claim.status = Some(karpenter_core::apis::NodeClaimStatus {
        provider_id: Some(instance.provider_id.to_string()),
        image_id: instance.image_id.clone(),
        ..Default::default()
    });
    assert_eq!(provider.drift(&claim).await.expect("drift"), None);

    // A newer image for the class: the VM booted the old one.
    let classes: Api<GCENodeClass> = Api::all(client.clone());
    classes
        .patch_status(
            "drift-demo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {"images": [
                {"sourceImage": "projects/cos-cloud/global/images/cos-stable-121-0-0-1", "requirements": []}
            ]}})),
        )
        .await
        .expect("status patched");
    karpenter_test_support::cloud_agent::drifts(&provider, &claim, "ImageDrift").await;

    // A bigger boot disk is a static change, judged before the image.
    classes
        .patch(
            "drift-demo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"disks": [
                {"category": "pd-balanced", "sizeGiB": 100, "boot": true}
            ]}})),
        )
        .await
        .expect("disks changed");
    karpenter_test_support::cloud_agent::drifts(&provider, &claim, "NodeClassDrift").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_of_one_name_in_one_project_never_see_each_others_vms_or_templates() {
    let fake = fake("twins").await;
    apply(&node_class("twins", "twins"));
    // GKE names clusters by project, location and name: a regional and a zonal `twins`.
    for (name, location, kube_env) in [
        ("gke-twins-pool-zonal", "us-central1-a", "ZONAL"),
        ("gke-twins-pool-regional", "us-central1", "REGIONAL"),
    ] {
        fake.state().compute.add_instance_template(
            "twins",
            name,
            serde_json::json!({"metadata": {"items": [
                {"key": "kube-env", "value": kube_env},
                {"key": "cluster-name", "value": "twins"},
                {"key": "cluster-location", "value": location},
            ]}}),
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let regional = provider(&fake, "twins", "twins").await;
    let mut zonal_config = config(&fake, "twins", "twins");
    zonal_config.location = Some("us-central1-a".to_owned());
    zonal_config.zones = vec!["us-central1-a".to_owned()];
    let zonal = GcpProvider::new(zonal_config, rig().client().await)
        .await
        .expect("provider");

    async fn template(p: &GcpProvider) -> Option<String> {
        p.node_template()
            .await
            .expect("template")
            .and_then(|t| t.metadata("kube-env").map(str::to_owned))
    }
    assert_eq!(template(&regional).await.as_deref(), Some("REGIONAL"));
    assert_eq!(
        template(&zonal).await.as_deref(),
        Some("ZONAL"),
        "the newest gke-twins-* template is the regional cluster's"
    );

    let on_regional = launch(
        &regional,
        &claim(
            "twins-r1",
            "twins",
            &["e2-standard-2"],
            &["us-central1-b"],
            "on-demand",
        ),
    )
    .await
    .expect("regional launch");
    let on_zonal = launch(
        &zonal,
        &claim(
            "twins-z1",
            "twins",
            &["e2-standard-2"],
            &["us-central1-a"],
            "on-demand",
        ),
    )
    .await
    .expect("zonal launch");
    let (_, zone, name) = gce(&on_zonal.provider_id);
    let vm = fake
        .state()
        .compute
        .instance("twins", &zone, &name)
        .expect("the zonal cluster's VM");
    for (key, value) in [
        ("karpenter-k8s-gcp-cluster", "twins"),
        ("karpenter-k8s-gcp-location", "us-central1-a"),
        ("goog-k8s-cluster-name", "twins"),
        ("goog-k8s-cluster-location", "us-central1-a"),
    ] {
        assert_eq!(vm["labels"][key], value, "label {key}");
    }
    let ids = |list: Vec<karpenter_core::cloud::ListedInstance>| {
        list.into_iter().map(|i| i.provider_id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(regional.list().await.expect("list")),
        std::slice::from_ref(&on_regional.provider_id),
        "the regional cluster lists only its own VM (garbage collection reads this list)"
    );
    assert_eq!(
        ids(zonal.list().await.expect("list")),
        std::slice::from_ref(&on_zonal.provider_id)
    );
    regional
        .delete(&on_regional.provider_id)
        .await
        .expect("delete");
    zonal.delete(&on_zonal.provider_id).await.expect("delete");
    rig().kubectl_ok(&["delete", "gcenodeclass", "twins"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cos_at_latest_boots_the_gke_node_image_of_the_clusters_node_pool_and_follows_its_upgrades()
{
    // The agent tests' node-class status controller writes every class's status: this test
    // writes and reads its own class's, so no agent may run meanwhile.
    let _guard = crate::exclusive();
    let project = "gkeimage-demo";
    let fake = fake(project).await;
    let template = |name: &str, image: &str| {
        fake.state().compute.add_instance_template(
            project,
            name,
            serde_json::json!({
                "metadata": {"items": [{"key": "kube-env", "value": "KUBE_ENV"}]},
                "disks": [{"boot": true, "initializeParams": {
                    "sourceImage": format!("https://www.googleapis.com/compute/v1/projects/gke-node-images/global/images/{image}"),
                    "diskSizeGb": "100"}}],
            }),
        );
    };
    template(
        "gke-gkeimage-demo-default-pool-1",
        "gke-1334-gke1000000-cos-121-18867-90-4-c-pre",
    );
    apply(&node_class(project, project));
    let mut settings = config(&fake, project, project);
    // Read the node template afresh every time, as after its cache expires.
    settings.catalogue_ttl = std::time::Duration::ZERO;
    let provider = GcpProvider::new(settings, rig().client().await)
        .await
        .expect("provider");
    let client = rig().client().await;
    let classes: Api<GCENodeClass> = Api::all(client.clone());
    let images = || async {
        nodeclass_status::sync_node_class(&client, &provider, project)
            .await
            .expect("status written");
        let status = classes
            .get(project)
            .await
            .expect("class")
            .status
            .expect("status");
        status
            .images
            .iter()
            .map(|i| i.source_image.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        images().await,
        [
            "projects/gke-node-images/global/images/gke-1334-gke1000000-cos-121-18867-90-4-c-pre",
            "projects/gke-node-images/global/images/gke-1334-gke1000000-cos-arm64-121-18867-90-4-c-pre",
        ],
        "the node pool's image and its Arm sibling, not the public cos-cloud family"
    );
    let mut claim = claim(
        "gkeimage-demo-a1",
        project,
        &["e2-standard-2"],
        &["us-central1-a"],
        "on-demand",
    );
    let instance = launch(&provider, &claim).await.expect("launched");
    let (_, zone, name) = gce(&instance.provider_id);
    let vm = fake
        .state()
        .compute
        .instance(project, &zone, &name)
        .expect("VM");
    assert_eq!(
        vm["disks"][0]["initializeParams"]["sourceImage"],
        "projects/gke-node-images/global/images/gke-1334-gke1000000-cos-121-18867-90-4-c-pre"
    );
    claim.metadata.annotations = Some(instance.annotations.clone());
    claim.status = Some(karpenter_core::apis::NodeClaimStatus {
        provider_id: Some(instance.provider_id.to_string()),
        image_id: instance.image_id.clone(),
        ..Default::default()
    });
    assert_eq!(provider.drift(&claim).await.expect("drift"), None);

    // GKE upgrades the node pool to a version published for x86 only: new nodes boot it, no
    // Arm node is offered with an image that does not exist, and the old VM has drifted.
    fake.state().compute.add_image(
        "gke-node-images",
        gcp_fake::compute::Image::new(
            "gke-1340-gke2000000-cos-125-19216-0-9-c-pre",
            None,
            "X86_64",
        ),
    );
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    template(
        "gke-gkeimage-demo-default-pool-2",
        "gke-1340-gke2000000-cos-125-19216-0-9-c-pre",
    );
    // The node class cache is keyed on the template's image, so the change is seen at once.
    assert_eq!(
        images().await,
        ["projects/gke-node-images/global/images/gke-1340-gke2000000-cos-125-19216-0-9-c-pre"]
    );
    karpenter_test_support::cloud_agent::drifts(&provider, &claim, "ImageDrift").await;
    let _ = provider.delete(&instance.provider_id).await;
    rig().kubectl_ok(&["delete", "gcenodeclass", project]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_and_slow_insert_is_retried_with_backoff_and_launches_one_vm() {
    let fake = fake("ratelimit-demo").await;
    apply(&node_class("ratelimit-demo", "ratelimit-demo"));
    let provider = provider(&fake, "ratelimit-demo", "ratelimit-demo").await;
    fake.state().compute.rate_limit_inserts(2);
    // And slow: every insert is answered half a second late.
    fake.state().compute.insert_latency = Some(std::time::Duration::from_millis(500));
    let claim = claim(
        "ratelimit-one",
        "ratelimit-demo",
        &["e2-standard-4"],
        &["us-central1-c"],
        "on-demand",
    );
    let instance = launch(&provider, &claim)
        .await
        .expect("the client retries the 429s and the third insert launches");
    let (project, _, _) = gce(&instance.provider_id);
    assert_eq!(
        fake.state().compute.instances(&project).len(),
        1,
        "one VM, not one per attempt"
    );
    assert!(
        fake.state().compute.faults.is_empty(),
        "both refusals were used up: the client did retry"
    );
    rig().kubectl_ok(&["delete", "gcenodeclass", "ratelimit-demo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prices_come_from_the_cloud_billing_catalog_for_the_region_and_the_shipped_table_fills_the_rest()
 {
    let _guard = crate::exclusive();
    let fake = fake("billing-demo").await;
    // A family no price source knows: offered anyway, after every priced type.
    fake.state().compute.add_machine_type(
        "billing-demo",
        "us-central1-a",
        gcp_fake::compute::MachineType::new("zz9-standard-2", 2, 8192),
    );
    apply(&node_class("billing-demo", "billing-demo"));
    let price = |types: &[karpenter_core::scheduling::InstanceType], name: &str, ct: &str| {
        types
            .iter()
            .find(|t| t.name == name)?
            .offerings
            .iter()
            .find(|o| o.capacity_type == ct)
            .and_then(|o| o.known_price())
    };

    // The Cloud Billing API is not enabled in the project: the shipped table prices, and the
    // failed refresh is counted.
    let metrics = std::sync::Arc::new(karpenter_core::metrics::Metrics::new());
    let without = provider(&fake, "billing-demo", "billing-demo").await;
    without.report_prices_to(metrics.clone());
    let types = without
        .instance_types(&reference("billing-demo"))
        .await
        .expect("instance types without the catalog");
    let text = metrics.encode().expect("metrics encode");
    assert!(
        text.contains(r#"karpenter_cloudprovider_pricing_refreshes_total{outcome="failed"} 1"#),
        "{text}"
    );
    assert_eq!(
        price(&types, "e2-standard-2", "on-demand"),
        Some(0.06701142)
    );
    let zz9 = types.iter().find(|t| t.name == "zz9-standard-2");
    assert!(
        zz9.is_some_and(|t| !t.offerings.is_empty()
            && t.offerings
                .iter()
                .all(|o| o.available && o.known_price().is_none())),
        "{zz9:?}"
    );

    // Enabled, with the region's E2 rates over several pages, another region's, and a SKU
    // that does not parse.
    {
        let mut state = fake.state();
        state.service_usage.enabled.insert((
            "billing-demo".to_owned(),
            "cloudbilling.googleapis.com".to_owned(),
        ));
        let billing = &mut state.billing;
        billing.page_limit = 2;
        let region = "us-central1";
        billing.add_sku(
            "E2 Instance Core running in Americas",
            "OnDemand",
            region,
            "h",
            0.03,
        );
        billing.add_sku(
            "E2 Instance Ram running in Americas",
            "OnDemand",
            region,
            "GiBy.h",
            0.004,
        );
        billing.add_sku(
            "Spot Preemptible E2 Instance Core running in Americas",
            "Preemptible",
            region,
            "h",
            0.01,
        );
        billing.add_sku(
            "Spot Preemptible E2 Instance Ram running in Americas",
            "Preemptible",
            region,
            "GiBy.h",
            0.001,
        );
        billing.add_sku(
            "E2 Instance Core running in Belgium",
            "OnDemand",
            "europe-west1",
            "h",
            0.5,
        );
        billing
            .skus
            .push(serde_json::json!({"description": "not a SKU"}));
    }
    let with = provider(&fake, "billing-demo", "billing-demo").await;
    with.report_prices_to(metrics.clone());
    let types = with
        .instance_types(&reference("billing-demo"))
        .await
        .expect("instance types");
    let text = metrics.encode().expect("metrics encode");
    assert!(
        text.contains(r#"karpenter_cloudprovider_pricing_refreshes_total{outcome="updated"} 1"#),
        "{text}"
    );
    let close = |got: Option<f64>, want: f64| got.is_some_and(|p| (p - want).abs() < 1e-9);
    // 2 vCPUs and 8 GiB at the region's rates.
    let e2 = price(&types, "e2-standard-2", "on-demand");
    assert!(close(e2, 2.0 * 0.03 + 8.0 * 0.004), "{e2:?}");
    let e2_spot = price(&types, "e2-standard-2", "spot");
    assert!(close(e2_spot, 2.0 * 0.01 + 8.0 * 0.001), "{e2_spot:?}");
    // No N2 rate in the answer: the table's price stays.
    assert_eq!(price(&types, "n2-standard-2", "on-demand"), Some(0.097118));
    let pages = fake
        .state()
        .requests
        .iter()
        .filter(|r| r.ends_with("/skus"))
        .count();
    // One refused call, then three pages of at most two.
    assert_eq!(pages, 4, "the catalog was paged");
    rig().kubectl_ok(&["delete", "gcenodeclass", "billing-demo"]);
}
