//! The EC2 provider on its own: node class resolution and status, the catalogue, launching with
//! CreateFleet (and falling back when EC2 has no capacity), listing and terminating.

use crate::env::{Env, ZONES};
use crate::rig::rig;
use crate::{apply, node_class};
use karpenter_core::apis::CapacityType;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodeClassReference, labels};
use karpenter_core::cloud::aws::{AwsConfig, AwsProvider};
use karpenter_core::cloud::{CloudError, CloudProvider, DeleteOutcome, ProviderId};
use karpenter_core::controllers::lifecycle::launch_candidates;
use karpenter_core::controllers::nodeclass_status;
use kube::Api;

pub(crate) async fn provider(env: &Env) -> AwsProvider {
    let config = AwsConfig::new(crate::env::REGION, env.cluster.clone());
    AwsProvider::with_sdk_config(config, &env.sdk, rig().client().await)
}

pub(crate) fn reference(name: &str) -> NodeClassReference {
    NodeClassReference {
        group: labels::AWS_GROUP.to_owned(),
        kind: "EC2NodeClass".to_owned(),
        name: name.to_owned(),
    }
}

/// A NodeClaim (not stored anywhere) for `class`, limited to `types` and on-demand.
pub(crate) fn claim(name: &str, class: &str, types: &[&str]) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {labels::NODE_POOL: "test-pool"}},
        "spec": {
            "requirements": [
                {"key": labels::INSTANCE_TYPE, "operator": "In", "values": types},
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": [CapacityType::OnDemand]},
            ],
            "resources": {"requests": {"cpu": "1"}},
            "nodeClassRef": {"group": labels::AWS_GROUP, "kind": "EC2NodeClass", "name": class},
        },
    }))
    .expect("claim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_class_resolves_and_its_status_names_subnets_security_groups_amis_and_the_instance_profile()
 {
    // The agent tests' node-class status controller writes every class's status: this test
    // writes and reads its own class's, so no agent may run meanwhile.
    let _guard = crate::exclusive();
    let env = Env::new("resolve-demo", true).await;
    let role = env.node_role().await;
    apply(&node_class("resolve-demo", &env.cluster, &role));
    let provider = provider(&env).await;

    let types = provider
        .instance_types(&reference("resolve-demo"))
        .await
        .expect("instance types");
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large in the catalogue");
    let zones: Vec<&str> = m5
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| o.zone.as_str())
        .collect();
    assert_eq!(zones, ZONES, "on-demand offerings in every subnet's zone");
    assert!(m5.offerings.iter().all(|o| o.available));
    assert_eq!(
        m5.offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::OnDemand)
            .map(|o| o.price),
        Some(0.096)
    );
    assert!(
        types
            .iter()
            .any(|t| t.requirements.allows(labels::ARCH, "arm64")),
        "the arm64 AMI brings arm64 types"
    );
    // Upstream's generated table prices metal sizes too (it once had no entry for them).
    let metal = types
        .iter()
        .find(|t| t.name == "m5.metal")
        .expect("m5.metal listed");
    assert!(
        metal
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .all(|o| o.available && o.known_price() == Some(4.608)),
        "{:?}",
        metal.offerings
    );
    // t8i came after the table was generated: offered on demand all the same, at no known
    // price, so it ranks after every priced type.
    let newer = types
        .iter()
        .find(|t| t.name == "t8i.medium")
        .expect("t8i.medium listed");
    let newer_on_demand: Vec<_> = newer
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .collect();
    assert!(
        !newer_on_demand.is_empty()
            && newer_on_demand
                .iter()
                .all(|o| o.available && o.known_price().is_none()),
        "{newer_on_demand:?}"
    );

    // The provider resolves; the node class status controller writes what it resolved.
    nodeclass_status::sync_node_class(&rig().client().await, &provider, "resolve-demo")
        .await
        .expect("status written");
    let classes: Api<EC2NodeClass> = Api::all(rig().client().await);
    let status = classes
        .get("resolve-demo")
        .await
        .expect("node class")
        .status
        .expect("status");
    assert_eq!(status.subnets.len(), 3);
    assert_eq!(
        status
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        [env.security_group_id.as_str()]
    );
    let amis: Vec<&str> = status.amis.iter().map(|a| a.id.as_str()).collect();
    assert!(
        amis.contains(&env.amd64_ami.as_str()) && amis.contains(&env.arm64_ami.as_str()),
        "{amis:?}"
    );
    let profile = status.instance_profile.clone().expect("instance profile");
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{:?}",
        status.conditions
    );
    let iam_profile = env
        .iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .expect("profile exists in IAM");
    assert_eq!(
        iam_profile
            .instance_profile()
            .map(|p| p.roles()[0].role_name()),
        Some(role.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_class_whose_subnets_match_nothing_is_not_ready_and_says_why() {
    // The agent tests' node-class status controller writes every class's status: this test
    // writes and reads its own class's, so no agent may run meanwhile.
    let _guard = crate::exclusive();
    let env = Env::new("unready-demo", false).await;
    let role = env.node_role().await;
    apply(&node_class("unready-demo", &env.cluster, &role));
    let provider = provider(&env).await;
    let error = provider
        .instance_types(&reference("unready-demo"))
        .await
        .expect_err("no subnets are tagged");
    assert!(
        matches!(&error, CloudError::NodeClassNotReady { reason, .. } if reason.contains("no subnets")),
        "{error}"
    );
    nodeclass_status::sync_node_class(&rig().client().await, &provider, "unready-demo")
        .await
        .expect_err("the status says why it is not ready");
    let classes: Api<EC2NodeClass> = Api::all(rig().client().await);
    let status = classes
        .get("unready-demo")
        .await
        .expect("node class")
        .status
        .expect("status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .contains("no subnets match subnetSelectorTerms"),
        "{}",
        ready.message
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "SubnetsReady" && c.status == "False")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_launches_tagged_from_a_launch_template_is_listed_and_terminates_idempotently()
{
    let env = Env::new("launch-demo", true).await;
    let role = env.node_role().await;
    apply(&node_class("launch-demo", &env.cluster, &role));
    let provider = provider(&env).await;
    let catalogue = provider
        .instance_types(&reference("launch-demo"))
        .await
        .expect("instance types");
    let claim = claim("launch-demo-a", "launch-demo", &["m5.large", "m5.xlarge"]);
    let candidates = launch_candidates(&claim, &catalogue).expect("candidates");
    assert_eq!(
        candidates
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["m5.large", "m5.xlarge"]
    );

    let instance = provider.create(&claim, &candidates).await.expect("launch");
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.capacity_type, "on-demand");
    assert_eq!(instance.node_claim.as_deref(), Some("launch-demo-a"));
    let ProviderId::Aws { instance_id, zone } = &instance.provider_id else {
        panic!("{}", instance.provider_id)
    };
    assert!(ZONES.contains(&zone.as_str()));

    // The fleet request: instant, one instance, lowest-price on-demand, overrides per subnet.
    let request = env
        .proxy
        .fleet_requests()
        .pop()
        .expect("a CreateFleet request");
    for expected in [
        "Type=instant",
        "TotalTargetCapacity=1",
        "OnDemandOptions.AllocationStrategy=lowest-price",
        "DefaultTargetCapacityType=on-demand",
    ] {
        assert!(request.contains(expected), "{expected} not in {request}");
    }
    assert_eq!(
        request.matches("InstanceType=").count(),
        6,
        "2 types x 3 subnets: {request}"
    );

    let described = env.instances().await;
    let launched = described
        .iter()
        .find(|i| i.instance_id() == Some(instance_id))
        .expect("instance in moto");
    let tags: std::collections::BTreeMap<&str, &str> = launched
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value()?)))
        .collect();
    assert_eq!(tags.get("karpenter.sh/nodeclaim"), Some(&"launch-demo-a"));
    assert_eq!(tags.get("karpenter.sh/nodepool"), Some(&"test-pool"));
    assert_eq!(
        tags.get("karpenter.k8s.aws/ec2nodeclass"),
        Some(&"launch-demo")
    );
    assert_eq!(tags.get("eks:eks-cluster-name"), Some(&"launch-demo"));
    assert_eq!(
        tags.get("kubernetes.io/cluster/launch-demo"),
        Some(&"owned")
    );
    assert_eq!(launched.image_id(), Some(env.amd64_ami.as_str()));

    // moto drops the launch template's settings on fleet instances, so read the template itself.
    let templates = env
        .ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:karpenter.k8s.aws/ec2nodeclass")
                .values("launch-demo")
                .build(),
        )
        .send()
        .await
        .expect("launch templates");
    let template = templates
        .launch_templates()
        .first()
        .expect("a launch template");
    let versions = env
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(template.launch_template_id().unwrap_or_default())
        .versions("$Latest")
        .send()
        .await
        .expect("versions");
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .expect("data");
    assert_eq!(data.image_id(), Some(env.amd64_ami.as_str()));
    assert!(
        data.iam_instance_profile()
            .and_then(|p| p.name())
            .is_some_and(|n| n.starts_with("launch-demo_"))
    );
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.http_tokens())
            .map(|t| t.as_str()),
        Some("required")
    );
    assert_eq!(
        data.security_group_ids(),
        std::slice::from_ref(&env.security_group_id)
    );
    assert!(data.user_data().is_some_and(|u| !u.is_empty()));

    let listed = provider.list().await.expect("list");
    assert!(
        listed.iter().any(|i| i.provider_id == instance.provider_id),
        "{listed:?}"
    );
    assert!(
        provider
            .get(&instance.provider_id)
            .await
            .expect("get")
            .is_some()
    );
    assert_eq!(
        provider
            .delete(&instance.provider_id)
            .await
            .expect("delete"),
        DeleteOutcome::Terminating
    );
    assert_eq!(
        provider
            .delete(&instance.provider_id)
            .await
            .expect("delete again"),
        DeleteOutcome::Gone
    );
    assert_eq!(
        provider.get(&instance.provider_id).await.expect("get"),
        None
    );
    assert!(
        !provider
            .list()
            .await
            .expect("list")
            .iter()
            .any(|i| i.provider_id == instance.provider_id)
    );
    let unknown = ProviderId::Aws {
        zone: "us-west-2a".into(),
        instance_id: "i-0000000000000dead".into(),
    };
    assert_eq!(
        provider.delete(&unknown).await.expect("delete unknown"),
        DeleteOutcome::Gone
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_capacity_for_the_cheapest_type_launches_the_next_and_marks_the_offering_unavailable() {
    let env = Env::new("ice-demo", true).await;
    let role = env.node_role().await;
    apply(&node_class("ice-demo", &env.cluster, &role));
    let provider = provider(&env).await;
    let catalogue = provider
        .instance_types(&reference("ice-demo"))
        .await
        .expect("instance types");
    let claim_a = claim(
        "ice-demo-a",
        "ice-demo",
        &["m5.large", "m5.xlarge", "m5.2xlarge"],
    );
    let candidates = launch_candidates(&claim_a, &catalogue).expect("candidates");

    env.proxy.insufficient_capacity("m5.large");
    let instance = provider
        .create(&claim_a, &candidates)
        .await
        .expect("launch falls back");
    assert_eq!(
        instance.instance_type, "m5.xlarge",
        "the next cheapest type"
    );
    let cached = provider.unavailable_offerings().keys();
    assert_eq!(
        cached,
        ZONES
            .iter()
            .map(|z| format!("on-demand:m5.large:{z}"))
            .collect::<Vec<_>>()
    );
    let after = provider
        .instance_types(&reference("ice-demo"))
        .await
        .expect("instance types");
    let m5 = after
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large still listed");
    assert!(
        m5.offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .all(|o| !o.available),
        "{:?}",
        m5.offerings
    );
    // The next plan leaves m5.large out.
    let next = launch_candidates(&claim_a, &after).expect("candidates");
    assert_eq!(next.first().map(|c| c.name.as_str()), Some("m5.xlarge"));

    env.proxy.insufficient_capacity("m5.xlarge");
    env.proxy.insufficient_capacity("m5.2xlarge");
    let error = provider
        .create(
            &claim("ice-demo-b", "ice-demo", &["m5.xlarge", "m5.2xlarge"]),
            &next,
        )
        .await
        .expect_err("nothing left");
    assert!(
        matches!(&error, CloudError::InsufficientCapacity { offerings } if offerings.len() == 6),
        "{error:?}"
    );
    provider
        .delete(&instance.provider_id)
        .await
        .expect("clean up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_drifts_once_its_node_class_user_data_changes_and_not_before() {
    // The agent tests' node-class status controller writes every class's status: this test
    // writes and reads its own class's, so no agent may run meanwhile.
    let _guard = crate::exclusive();
    let env = Env::new("drift-demo", true).await;
    let role = env.node_role().await;
    apply(&node_class("drift-demo", &env.cluster, &role));
    let provider = provider(&env).await;
    let client = rig().client().await;
    nodeclass_status::sync_node_class(&client, &provider, "drift-demo")
        .await
        .expect("status written");
    let catalogue = provider
        .instance_types(&reference("drift-demo"))
        .await
        .expect("instance types");
    let mut claim = claim("drift-demo-a", "drift-demo", &["m5.large"]);
    let candidates = launch_candidates(&claim, &catalogue).expect("candidates");
    let instance = provider.create(&claim, &candidates).await.expect("launch");

    // What the lifecycle records on the claim from the launch.
    assert_eq!(
        instance
            .annotations
            .get("karpenter.k8s.aws/ec2nodeclass-hash-version")
            .map(String::as_str),
        Some("kubectl-karpenter/v1")
    );
    claim.metadata.annotations = Some(instance.annotations.clone());
    claim.status = Some(karpenter_core::apis::NodeClaimStatus {
        provider_id: Some(instance.provider_id.to_string()),
        image_id: instance.image_id.clone(),
        ..Default::default()
    });
    assert_eq!(
        provider.drift(&claim).await.expect("drift"),
        None,
        "an instance just launched from the class matches it (image, subnet, security groups)"
    );

    let classes: Api<EC2NodeClass> = Api::all(client.clone());
    classes
        .patch(
            "drift-demo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"userData": "echo changed"}})),
        )
        .await
        .expect("user data changed");
    karpenter_test_support::cloud_agent::drifts(&provider, &claim, "NodeClassDrift").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_class_stays_while_a_node_claim_uses_it_then_its_launch_templates_go() {
    // No other test's agent may reconcile this test's node class.
    let _guard = crate::exclusive();
    let env = Env::new("finalize-demo", true).await;
    let role = env.node_role().await;
    apply(&node_class("finalize-demo", &env.cluster, &role));
    let provider = provider(&env).await;
    let client = rig().client().await;
    let classes: Api<EC2NodeClass> = Api::all(client.clone());
    let class = classes.get("finalize-demo").await.expect("node class");
    nodeclass_status::reconcile_node_class(&client, &provider, &class)
        .await
        .expect("the class resolves and gets its finalizer");
    let catalogue = provider
        .instance_types(&reference("finalize-demo"))
        .await
        .expect("instance types");
    let claim = claim("finalize-demo-a", "finalize-demo", &["m5.large"]);
    let candidates = launch_candidates(&claim, &catalogue).expect("candidates");
    let instance = provider.create(&claim, &candidates).await.expect("launch");
    let claims: Api<NodeClaim> = Api::all(client.clone());
    claims
        .create(&kube::api::PostParams::default(), &claim)
        .await
        .expect("the claim, as the agent would have stored it");
    let templates = || async {
        env.ec2
            .describe_launch_templates()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name(format!("tag:{}", labels::AWS_EC2_NODE_CLASS))
                    .values("finalize-demo")
                    .build(),
            )
            .send()
            .await
            .expect("launch templates")
            .launch_templates()
            .len()
    };
    assert_eq!(templates().await, 1);

    rig().kubectl_ok(&["delete", "ec2nodeclass", "finalize-demo", "--wait=false"]);
    let class = classes
        .get("finalize-demo")
        .await
        .expect("held by its finalizer");
    nodeclass_status::reconcile_node_class(&client, &provider, &class)
        .await
        .expect("waits");
    assert!(
        classes
            .get_opt("finalize-demo")
            .await
            .expect("read")
            .is_some(),
        "the class went while a NodeClaim still used it"
    );
    assert_eq!(templates().await, 1, "its launch template went early");

    provider
        .delete(&instance.provider_id)
        .await
        .expect("terminate");
    claims
        .delete("finalize-demo-a", &kube::api::DeleteParams::default())
        .await
        .expect("delete the claim");
    let class = classes.get("finalize-demo").await.expect("still held");
    nodeclass_status::reconcile_node_class(&client, &provider, &class)
        .await
        .expect("cleaned up");
    assert!(
        classes
            .get_opt("finalize-demo")
            .await
            .expect("read")
            .is_none(),
        "the class is let go once no claim uses it"
    );
    assert_eq!(templates().await, 0, "its launch templates are deleted");
}

/// A price list product as the Price List API gives it: Linux, shared tenancy, on-demand.
fn product(region: &str, instance_type: &str, usd: &str, os: &str) -> serde_json::Value {
    serde_json::json!({
        "serviceCode": "AmazonEC2",
        "product": {
            "productFamily": "Compute Instance",
            "sku": format!("SKU{instance_type}{region}{os}"),
            "attributes": {
                "servicecode": "AmazonEC2", "regionCode": region, "instanceType": instance_type,
                "operatingSystem": os, "tenancy": "Shared", "preInstalledSw": "NA",
                "capacitystatus": "Used", "marketoption": "OnDemand", "licenseModel": "No License required",
            },
        },
        "terms": {"OnDemand": {"SKU.JRTCKXETXF": {"priceDimensions": {"SKU.JRTCKXETXF.6YS6EN2CT7": {
            "unit": "Hrs", "description": "per On Demand Linux instance hour", "pricePerUnit": {"USD": usd},
        }}}}},
    })
}

fn on_demand_price(types: &[karpenter_core::scheduling::InstanceType], name: &str) -> Option<f64> {
    types
        .iter()
        .find(|t| t.name == name)?
        .offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .and_then(|o| o.known_price())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_demand_prices_come_from_the_pricing_api_for_the_region_and_the_shipped_table_fills_the_rest()
 {
    let _guard = crate::exclusive();
    let env = Env::new("pricing-demo", true).await;
    let role = env.node_role().await;
    apply(&node_class("pricing-demo", &env.cluster, &role));
    // The region's prices, another region's, a Windows price, a product whose price is not a
    // number, and enough other products that the answer takes two pages.
    let mut products = vec![
        product(crate::env::REGION, "m5.large", "0.1070000000", "Linux"),
        product(crate::env::REGION, "c5.large", "0.0900000000", "Linux"),
        product("eu-west-1", "c5.xlarge", "0.2000000000", "Linux"),
        product(crate::env::REGION, "m5.xlarge", "0.5000000000", "Windows"),
        product(crate::env::REGION, "r5.large", "n/a", "Linux"),
    ];
    products.extend((0..120).map(|i| {
        product(
            crate::env::REGION,
            &format!("zz{i}.large"),
            "1.0000000000",
            "Linux",
        )
    }));
    env.proxy.price_list(products);

    let metrics = std::sync::Arc::new(karpenter_core::metrics::Metrics::new());
    let with_feed = provider(&env).await;
    with_feed.report_prices_to(metrics.clone());
    let types = with_feed
        .instance_types(&reference("pricing-demo"))
        .await
        .expect("instance types");
    let text = metrics.encode().expect("metrics encode");
    assert!(
        text.contains(r#"karpenter_cloudprovider_pricing_refreshes_total{outcome="updated"} 1"#),
        "{text}"
    );
    assert!(
        !text.contains("karpenter_cloudprovider_pricing_last_update_timestamp_seconds 0.0"),
        "the update time is set: {text}"
    );
    assert_eq!(on_demand_price(&types, "m5.large"), Some(0.107));
    assert_eq!(on_demand_price(&types, "c5.large"), Some(0.09));
    // No Linux price for the region: the shipped table's.
    assert_eq!(on_demand_price(&types, "c5.xlarge"), Some(0.17));
    assert_eq!(on_demand_price(&types, "m5.xlarge"), Some(0.192));
    assert_eq!(on_demand_price(&types, "r5.large"), Some(0.126));
    // The shipped table has z1d (the Pricing API's answer here does not).
    assert_eq!(on_demand_price(&types, "z1d.large"), Some(0.186));
    // t8i is in neither the answer nor the table: still offered on demand, at no known price.
    let newer = types.iter().find(|t| t.name == "t8i.medium");
    let newer_on_demand: Vec<_> = newer
        .map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !newer_on_demand.is_empty(),
        "t8i.medium is offered on demand"
    );
    assert!(
        newer_on_demand
            .iter()
            .all(|o| o.available && o.known_price().is_none()),
        "{newer_on_demand:?}"
    );
    let asked: Vec<serde_json::Value> = env
        .proxy
        .sent()
        .into_iter()
        .filter(|s| s.action == "GetProducts")
        .filter_map(|s| s.json)
        .collect();
    assert_eq!(asked.len(), 2, "two pages of at most 100");
    let filters = asked[0]["Filters"].to_string();
    for want in [
        r#""Field":"regionCode","Type":"TERM_MATCH","Value":"us-west-2""#,
        r#""Field":"operatingSystem","Type":"TERM_MATCH","Value":"Linux""#,
        r#""Field":"tenancy","Type":"TERM_MATCH","Value":"Shared""#,
    ] {
        assert!(filters.contains(want), "{want} in {filters}");
    }

    // Without pricing:GetProducts, the shipped table prices everything, and the failed
    // refresh is counted.
    env.proxy.deny("GetProducts");
    let denied = provider(&env).await;
    denied.report_prices_to(metrics.clone());
    let types = denied
        .instance_types(&reference("pricing-demo"))
        .await
        .expect("instance types without the Pricing API");
    let text = metrics.encode().expect("metrics encode");
    assert!(
        text.contains(r#"karpenter_cloudprovider_pricing_refreshes_total{outcome="failed"} 1"#),
        "{text}"
    );
    assert_eq!(on_demand_price(&types, "m5.large"), Some(0.096));
}
