//! `init aws` end to end against moto and the rig: a dry run changes nothing, a run that fails
//! half-way (a permission the caller lacks) names the permission and completes when re-run, and
//! a run after that finds everything in place and says so.

use crate::env::Env;
use crate::exclusive;
use crate::rig::rig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use karpenter_core::setup::aws::{Auth, AwsOptions, CONTROLLER_POLICY_NAME, NODE_POLICIES};
use karpenter_core::setup::{Mode, Outcome, Plan, SetupError};
use kube::Api;

fn options(env: &Env, kube: Option<kube::Client>) -> AwsOptions {
    let mut options = AwsOptions::new(env.cluster.clone(), crate::env::REGION);
    options.endpoint_url = Some(env.proxy.url.clone());
    options.namespace = format!("{}-system", env.cluster);
    options.image = "karpenter-agent:test".to_owned();
    options.kube = kube;
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_aws_dry_runs_then_fails_half_way_naming_the_permission_then_completes_and_a_rerun_changes_nothing()
 {
    let _guard = exclusive();
    let env = Env::new("init-demo", false).await;
    let client = rig().client().await;
    // What init made before it rendered the chart: the agent's pods selected by name only (a
    // Deployment's selector cannot change in place).
    crate::apply(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: init-demo-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: karpenter-agent, namespace: init-demo-system}
spec:
  replicas: 0
  selector: {matchLabels: {app.kubernetes.io/name: karpenter-agent}}
  template:
    metadata: {labels: {app.kubernetes.io/name: karpenter-agent}}
    spec:
      containers: [{name: agent, image: karpenter-agent:old}]
"#,
    );
    let plan = Plan::for_aws_with(options(&env, Some(client.clone())), &env.sdk).await;
    let names: Vec<String> = plan.steps.iter().map(|s| s.name().to_owned()).collect();
    assert_eq!(
        names,
        [
            "eks-cluster",
            "node-role",
            "node-instance-profile",
            "spot-service-linked-role",
            "oidc-provider",
            "controller-role",
            "controller-policy",
            "discovery-tags",
            "interruption-queue",
            "interruption-rules",
            "node-access",
            "kubernetes-agent",
            "default-nodepool"
        ]
    );
    assert!(
        plan.describe()
            .iter()
            .any(|l| l.contains("KarpenterNodeRole-init-demo"))
    );
    assert!(
        plan.manifests()
            .iter()
            .any(|m| m.id() == "Deployment init-demo-system/karpenter-agent")
    );

    // A dry run checks every step and changes nothing.
    let dry = plan.run(Mode::DryRun, |_| {}).await.expect("dry run");
    assert!(
        matches!(dry.steps[0].outcome, Outcome::InPlace(_)),
        "{dry:#?}"
    );
    // The spot service-linked role is account-wide, and moto gives every cluster the same OIDC
    // issuer: other tests in this moto may have made those two already.
    let shared = ["eks-cluster", "spot-service-linked-role", "oidc-provider"];
    assert!(
        dry.steps
            .iter()
            .filter(|p| !shared.contains(&p.step.as_str()))
            .all(|p| matches!(p.outcome, Outcome::WouldApply(_))),
        "{dry:#?}"
    );
    assert!(dry.summary().starts_with("dry run"), "{}", dry.summary());
    assert!(
        env.iam
            .get_role()
            .role_name("KarpenterNodeRole-init-demo")
            .send()
            .await
            .is_err(),
        "the dry run created the node role"
    );

    // The caller may not put the controller policy: the run stops there and says why.
    env.proxy.deny("PutRolePolicy");
    let error = plan
        .run(Mode::Apply, |_| {})
        .await
        .expect_err("PutRolePolicy is denied");
    let text = format!("{error}: {}", error.root());
    assert!(
        text.contains("controller-policy") && text.contains("iam:PutRolePolicy"),
        "{text}"
    );
    assert!(
        matches!(error.root(), SetupError::PermissionDenied { action, .. } if action == "iam:PutRolePolicy")
    );
    let role = env
        .iam
        .get_role()
        .role_name("KarpenterNodeRole-init-demo")
        .send()
        .await;
    assert!(role.is_ok(), "the steps before the failure were applied");

    // Re-run with the permission: the earlier steps are in place, the rest is done.
    env.proxy.allow_all();
    let second = plan
        .run(Mode::Apply, |p| eprintln!("{p}"))
        .await
        .expect("the re-run completes");
    let outcome = |name: &str| {
        second
            .steps
            .iter()
            .find(|p| p.step == name)
            .map(|p| p.outcome.clone())
            .expect(name)
    };
    assert!(matches!(outcome("node-role"), Outcome::InPlace(_)));
    assert!(matches!(outcome("controller-policy"), Outcome::Applied(_)));
    assert!(matches!(outcome("kubernetes-agent"), Outcome::Applied(_)));

    // And once more: everything is in place, nothing changes, and the summary says so.
    let before = env.proxy.actions().len();
    let third = plan.run(Mode::Apply, |_| {}).await.expect("third run");
    assert!(third.all_in_place(), "{third:#?}");
    assert!(
        third.summary().contains("nothing changed"),
        "{}",
        third.summary()
    );
    let writes: Vec<String> = env.proxy.actions()[before..]
        .iter()
        .filter(|a| {
            ["Create", "Put", "Attach", "Add", "Set", "Update", "Tag"]
                .iter()
                .any(|w| a.starts_with(w))
        })
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "a run with everything in place wrote: {writes:?}"
    );

    // What it made.
    let attached = env
        .iam
        .list_attached_role_policies()
        .role_name("KarpenterNodeRole-init-demo")
        .send()
        .await
        .expect("policies");
    let mut names: Vec<&str> = attached
        .attached_policies()
        .iter()
        .filter_map(|p| p.policy_name())
        .collect();
    names.sort_unstable();
    let mut expected = NODE_POLICIES.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected);
    let policy = env
        .iam
        .get_role_policy()
        .role_name("KarpenterControllerRole-init-demo")
        .policy_name(CONTROLLER_POLICY_NAME)
        .send()
        .await
        .expect("policy");
    assert!(crate::proxy::url_decode(policy.policy_document()).contains("AllowScopedDeletion"));
    let trust = env
        .iam
        .get_role()
        .role_name("KarpenterControllerRole-init-demo")
        .send()
        .await
        .expect("role");
    let trust = crate::proxy::url_decode(
        trust
            .role()
            .and_then(|r| r.assume_role_policy_document())
            .unwrap_or_default(),
    );
    assert!(
        trust.contains("AssumeRoleWithWebIdentity") && trust.contains("system:serviceaccount"),
        "{trust}"
    );
    let subnets = env
        .ec2
        .describe_subnets()
        .set_subnet_ids(Some(env.subnet_ids.clone()))
        .send()
        .await
        .expect("subnets");
    assert!(subnets.subnets().iter().all(|s| {
        s.tags()
            .iter()
            .any(|t| t.key() == Some("karpenter.sh/discovery") && t.value() == Some("init-demo"))
    }));
    let queue = env
        .sqs
        .get_queue_url()
        .queue_name("init-demo")
        .send()
        .await
        .expect("queue");
    assert!(queue.queue_url().is_some());
    let events = aws_sdk_eventbridge::Client::new(&env.sdk);
    let rules = events
        .list_rules()
        .name_prefix("karpenter-init-demo-")
        .send()
        .await
        .expect("rules");
    assert_eq!(rules.rules().len(), 5);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "init-demo-system");
    let sa = accounts.get("karpenter").await.expect("service account");
    let annotation = sa
        .metadata
        .annotations
        .unwrap_or_default()
        .get("eks.amazonaws.com/role-arn")
        .cloned();
    assert_eq!(
        annotation.as_deref(),
        Some("arn:aws:iam::123456789012:role/KarpenterControllerRole-init-demo")
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "init-demo-system");
    let deployment = deployments
        .get("karpenter-agent")
        .await
        .expect("deployment");
    // The chart's Deployment, as `helm install` makes it: two leader-electing replicas, JSON logs,
    // in place of the old one with its old selector.
    let spec = deployment.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(
        spec.selector
            .match_labels
            .clone()
            .unwrap_or_default()
            .get("app.kubernetes.io/instance")
            .map(String::as_str),
        Some("karpenter-agent")
    );
    let container = &spec.template.spec.expect("pod spec").containers[0];
    assert_eq!(
        container.args.clone().unwrap_or_default(),
        ["run", "--provider", "aws"]
    );
    let env: Vec<(String, String)> = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .collect();
    for (name, value) in [
        ("LOG_FORMAT", "json"),
        ("LEADER_ELECT", "true"),
        ("CLUSTER_NAME", "init-demo"),
        ("INTERRUPTION_QUEUE", "init-demo"),
    ] {
        assert!(
            env.contains(&(name.to_owned(), value.to_owned())),
            "{name}={value} not in {env:?}"
        );
    }

    rig().kubectl_ok(&["delete", "namespace", "init-demo-system", "--wait=false"]);
    rig().kubectl_ok(&["delete", "nodepool", "default", "--wait=false"]);
    rig().kubectl_ok(&["delete", "ec2nodeclass", "default", "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_aws_stopped_half_way_completes_on_the_next_run() {
    let env = Env::new("half-demo", false).await;
    let plan = Plan::for_aws_with(options(&env, None), &env.sdk).await;
    let mut seen = Vec::new();
    let first = plan
        .run_until(Mode::Apply, 4, &mut |p| seen.push(p.step.clone()))
        .await
        .expect("first half");
    assert_eq!(first.steps.len(), 4);
    let rest = plan.run(Mode::Apply, |_| {}).await.expect("second run");
    let in_place: Vec<&str> = rest
        .steps
        .iter()
        .filter(|p| matches!(p.outcome, Outcome::InPlace(_)))
        .map(|p| p.step.as_str())
        .collect();
    assert!(
        in_place.starts_with(&[
            "eks-cluster",
            "node-role",
            "node-instance-profile",
            "spot-service-linked-role"
        ]),
        "{in_place:?}"
    );
    // moto gives every cluster the same OIDC issuer, so another test may have registered it.
    let applied_or_shared = |p: &&karpenter_core::setup::Progress| {
        matches!(p.outcome, Outcome::Applied(_)) || p.step == "oidc-provider"
    };
    assert!(
        rest.steps[4..].iter().all(|p| applied_or_shared(&p)),
        "{rest:#?}"
    );
    assert!(
        plan.run(Mode::DryRun, |_| {})
            .await
            .expect("check")
            .all_in_place()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_aws_names_a_missing_cluster_and_pod_identity_fails_clearly_where_moto_has_no_api() {
    let env = Env::new("podid-demo", false).await;
    let mut missing = options(&env, None);
    missing.cluster_name = "no-such-cluster".to_owned();
    let error = Plan::for_aws_with(missing, &env.sdk)
        .await
        .run(Mode::DryRun, |_| {})
        .await
        .expect_err("no cluster");
    assert!(error.to_string().contains("eks-cluster"));
    assert!(
        error
            .root()
            .to_string()
            .contains("EKS cluster no-such-cluster in us-west-2 does not exist"),
        "{}",
        error.root()
    );

    let mut pod_identity = options(&env, None);
    pod_identity.auth = Auth::PodIdentity;
    let plan = Plan::for_aws_with(pod_identity, &env.sdk).await;
    assert!(!plan.steps.iter().any(|s| s.name() == "oidc-provider"));
    let error = plan
        .run(Mode::Apply, |_| {})
        .await
        .expect_err("moto has no Pod Identity API");
    assert!(
        error.to_string().contains("pod-identity-association"),
        "{error}"
    );
    assert!(
        error
            .root()
            .to_string()
            .contains("eks:ListPodIdentityAssociations"),
        "{}",
        error.root()
    );
    let role = env
        .iam
        .get_role()
        .role_name("KarpenterControllerRole-podid-demo")
        .send()
        .await
        .expect("controller role");
    let trust = crate::proxy::url_decode(
        role.role()
            .and_then(|r| r.assume_role_policy_document())
            .unwrap_or_default(),
    );
    assert!(
        trust.contains("pods.eks.amazonaws.com") && trust.contains("sts:TagSession"),
        "{trust}"
    );
}
