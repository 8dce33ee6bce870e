//! The agent with only the permissions `init aws` grants it: every call of its lifecycle
//! (node class resolution and instance profile, catalogue, launch template and fleet, describe,
//! terminate, interruption queue, and the clean-up after a deleted node class) is allowed by the controller policy `init aws` writes, tag
//! conditions included.
//!
//! moto enforces IAM (its `/moto-api/reset-auth` switch) on a server of this test's own, but
//! only half of a policy: it compares actions, passes `*` as the resource of every EC2 and SSM
//! call, and ignores conditions (an Allow with a condition allows, a Deny with one denies). So
//! the agent's credentials carry init's policy with every statement's resources widened to `*`
//! and its conditions dropped, which moto can judge: a call whose action the policy lacks fails
//! the run as it would on AWS. What moto cannot judge, the test judges itself: each request the
//! agent sent (the proxy keeps them) becomes the calls AWS would authorize (one per resource,
//! with the request's tags and the resources' own tags, plus the implied `ec2:CreateTags` of
//! tag-on-create and `iam:PassRole`), and each must be allowed by a statement of init's policy
//! as written: its resource ARNs and its `StringEquals`/`StringLike`/`...IfExists`/`ForAllValues`
//! conditions on `aws:RequestTag`, `aws:ResourceTag`, `aws:TagKeys`, `aws:RequestedRegion`,
//! `ec2:CreateAction` and `iam:PassedToService`.

use crate::env::{Env, REGION};
use crate::moto::Moto;
use crate::provider::{claim, reference};
use crate::proxy::Sent;
use crate::rig::rig;
use crate::{apply, node_class};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::cloud::aws::interruption::InterruptionQueue;
use karpenter_core::cloud::aws::{AwsConfig, AwsProvider};
use karpenter_core::cloud::unavailable::UnavailableOfferings;
use karpenter_core::cloud::{CloudProvider, ProviderId};
use karpenter_core::controllers::lifecycle::launch_candidates;
use karpenter_core::controllers::nodeclass_status;
use karpenter_core::setup::aws::{AwsOptions, CONTROLLER_POLICY_NAME};
use karpenter_core::setup::{Mode, Plan};
use kube::Api;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// moto's account.
const ACCOUNT: &str = "123456789012";
const CLUSTER: &str = "iam-demo";

async fn sdk(url: &str, key: &str, secret: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(url)
        .region(Region::new(REGION))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            key, secret, None, None, "test",
        ))
        .load()
        .await
}

/// A user with `policy` as its only policy, and its access key.
async fn user(iam: &aws_sdk_iam::Client, name: &str, policy: &Value) -> (String, String) {
    iam.create_user()
        .user_name(name)
        .send()
        .await
        .expect("create user");
    iam.put_user_policy()
        .user_name(name)
        .policy_name("only")
        .policy_document(policy.to_string())
        .send()
        .await
        .expect("put user policy");
    let key = iam
        .create_access_key()
        .user_name(name)
        .send()
        .await
        .expect("access key");
    let key = key.access_key().expect("key");
    (
        key.access_key_id().to_owned(),
        key.secret_access_key().to_owned(),
    )
}

/// `policy` as moto can judge it: the same actions, every resource, no conditions.
fn actions_only(policy: &Value) -> Value {
    let statements: Vec<Value> = statements(policy)
        .iter()
        .map(|s| json!({"Effect": s["Effect"], "Action": s["Action"], "Resource": "*"}))
        .collect();
    json!({"Version": "2012-10-17", "Statement": statements})
}

fn statements(policy: &Value) -> Vec<Value> {
    match &policy["Statement"] {
        Value::Array(list) => list.clone(),
        one => vec![one.clone()],
    }
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(list) => list
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// IAM's wildcard match: `*` any run of characters, `?` one; case-sensitive, as moto and IAM
/// (for resources and condition values) are.
fn glob(pattern: &str, value: &str) -> bool {
    fn go(p: &[char], v: &[char]) -> bool {
        match p.split_first() {
            None => v.is_empty(),
            Some(('*', rest)) => (0..=v.len()).any(|i| go(rest, &v[i..])),
            Some(('?', rest)) => !v.is_empty() && go(rest, &v[1..]),
            Some((c, rest)) => v.first() == Some(c) && go(rest, &v[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    go(&p, &v)
}

/// One authorization AWS makes for a request: an action on one resource, in a context.
#[derive(Debug)]
struct Call {
    action: String,
    resource: String,
    request_tags: BTreeMap<String, String>,
    resource_tags: BTreeMap<String, String>,
    create_action: Option<String>,
    passed_to: Option<String>,
}

impl Call {
    fn new(action: &str, resource: String) -> Self {
        Self {
            action: action.to_owned(),
            resource,
            request_tags: BTreeMap::new(),
            resource_tags: BTreeMap::new(),
            create_action: None,
            passed_to: None,
        }
    }

    /// The values of a condition key in this call's context (empty when absent).
    fn context(&self, key: &str) -> Vec<String> {
        if let Some(tag) = key.strip_prefix("aws:RequestTag/") {
            return self.request_tags.get(tag).cloned().into_iter().collect();
        }
        if let Some(tag) = key.strip_prefix("aws:ResourceTag/") {
            return self.resource_tags.get(tag).cloned().into_iter().collect();
        }
        match key {
            "aws:TagKeys" => self.request_tags.keys().cloned().collect(),
            "aws:RequestedRegion" => vec![REGION.to_owned()],
            "ec2:CreateAction" => self.create_action.clone().into_iter().collect(),
            "iam:PassedToService" => self.passed_to.clone().into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// Whether one condition block holds.
    fn holds(&self, conditions: &Value) -> Result<(), String> {
        let Some(operators) = conditions.as_object() else {
            return Ok(());
        };
        for (operator, keys) in operators {
            for (key, expected) in keys.as_object().into_iter().flatten() {
                let expected = strings(expected);
                let actual = self.context(key);
                let matches = |value: &String| match operator.trim_end_matches("IfExists") {
                    "StringEquals" | "ForAllValues:StringEquals" => expected.contains(value),
                    "StringLike" | "ForAllValues:StringLike" => {
                        expected.iter().any(|p| glob(p, value))
                    }
                    other => panic!("the test does not know condition operator {other}"),
                };
                let ok = if operator.starts_with("ForAllValues:") {
                    actual.iter().all(matches)
                } else if operator.ends_with("IfExists") {
                    actual.is_empty() || actual.iter().any(matches)
                } else {
                    actual.iter().any(matches)
                };
                if !ok {
                    return Err(format!("{operator} {key} {expected:?} (has {actual:?})"));
                }
            }
        }
        Ok(())
    }

    /// Whether an Allow statement of `policy` allows this call; else why each candidate did not.
    fn allowed_by(&self, policy: &Value) -> Result<(), String> {
        let mut why = Vec::new();
        for s in statements(policy) {
            if s["Effect"] != "Allow"
                || !strings(&s["Action"]).iter().any(|a| glob(a, &self.action))
            {
                continue;
            }
            if !strings(&s["Resource"])
                .iter()
                .any(|r| glob(r, &self.resource))
            {
                continue;
            }
            match self.holds(&s["Condition"]) {
                Ok(()) => return Ok(()),
                Err(e) => why.push(format!("{}: {e}", s["Sid"].as_str().unwrap_or("?"))),
            }
        }
        if why.is_empty() {
            why.push("no statement allows this action on this resource".to_owned());
        }
        Err(why.join("; "))
    }
}

/// Tags of the `prefix.N` tag specifications of a form, by resource type.
fn tag_specifications(
    fields: &[(String, String)],
    prefix: &str,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.clone());
    let mut out = BTreeMap::new();
    for n in 1.. {
        let Some(kind) = get(&format!("{prefix}.{n}.ResourceType")) else {
            break;
        };
        let mut tags = BTreeMap::new();
        for m in 1.. {
            let Some(key) = get(&format!("{prefix}.{n}.Tag.{m}.Key")) else {
                break;
            };
            tags.insert(
                key,
                get(&format!("{prefix}.{n}.Tag.{m}.Value")).unwrap_or_default(),
            );
        }
        out.insert(kind, tags);
    }
    out
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// What the test read back of the resources the agent touched (as an admin): their tags.
#[derive(Default)]
struct Tags {
    launch_templates: HashMap<String, BTreeMap<String, String>>,
    instances: HashMap<String, BTreeMap<String, String>>,
    instance_profiles: HashMap<String, (BTreeMap<String, String>, Option<String>)>,
}

fn ec2_arn(kind: &str, id: &str) -> String {
    format!("arn:aws:ec2:{REGION}:{ACCOUNT}:{kind}/{id}")
}

/// `action` on the launch template `template` (name or id), with its tags.
fn template_call(action: &str, template: &str, tags: &Tags) -> Call {
    let mut call = Call::new(action, ec2_arn("launch-template", template));
    call.resource_tags = tags
        .launch_templates
        .get(template)
        .cloned()
        .unwrap_or_default();
    call
}

/// The authorizations AWS makes for one request.
fn calls(sent: &Sent, tags: &Tags) -> Vec<Call> {
    let action = format!("{}:{}", sent.service, sent.action);
    let f = &sent.fields;
    let mut out = Vec::new();
    // Tag-on-create: each created resource is authorized with its request tags, and tagging it
    // is an `ec2:CreateTags` with `ec2:CreateAction`.
    // `kinds` are created by the call whether or not it tags them: untagged, they are
    // authorized with no request tags (and the policy's tag conditions refuse them).
    let created = |kinds: &[&str], out: &mut Vec<Call>| {
        let mut specs = tag_specifications(f, "TagSpecification");
        for kind in kinds {
            specs.entry((*kind).to_owned()).or_default();
        }
        for (kind, request_tags) in specs {
            for act in [action.as_str(), "ec2:CreateTags"] {
                let mut call = Call::new(act, ec2_arn(&kind, "new"));
                call.request_tags = request_tags.clone();
                call.create_action = Some(sent.action.clone());
                out.push(call);
            }
        }
    };
    match action.as_str() {
        "ec2:CreateLaunchTemplate" => created(&["launch-template"], &mut out),
        "ec2:CreateFleet" => {
            created(&["fleet", "instance", "volume"], &mut out);
            let template = field(
                f,
                "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateName",
            )
            .or_else(|| {
                field(
                    f,
                    "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId",
                )
            })
            .unwrap_or_default();
            out.push(template_call(&action, template, tags));
            for (k, v) in f {
                if k.ends_with(".SubnetId") {
                    out.push(Call::new(&action, ec2_arn("subnet", v)));
                }
            }
        }
        "ec2:TerminateInstances" | "ec2:CreateTags" => {
            for (k, v) in f {
                if k.starts_with("InstanceId.") || k.starts_with("ResourceId.") {
                    let mut call = Call::new(&action, ec2_arn("instance", v));
                    call.resource_tags = tags.instances.get(v).cloned().unwrap_or_default();
                    out.push(call);
                }
            }
        }
        "ec2:DeleteLaunchTemplate" => {
            let template = field(f, "LaunchTemplateName")
                .or_else(|| field(f, "LaunchTemplateId"))
                .unwrap_or_default();
            out.push(template_call(&action, template, tags));
        }
        a if a.starts_with("ec2:Describe") => out.push(Call::new(&action, "*".to_owned())),
        a if a.starts_with("sqs:") => {
            let json = sent.json.clone().unwrap_or_default();
            let name = json["QueueName"]
                .as_str()
                .or_else(|| json["QueueUrl"].as_str().and_then(|u| u.rsplit('/').next()))
                .unwrap_or_default()
                .to_owned();
            out.push(Call::new(
                &action,
                format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"),
            ));
        }
        "ssm:GetParameter" => {
            let json = sent.json.clone().unwrap_or_default();
            let name = json["Name"].as_str().unwrap_or_default();
            out.push(Call::new(
                &action,
                format!("arn:aws:ssm:{REGION}::parameter{name}"),
            ));
        }
        a if a.starts_with("iam:") && field(f, "InstanceProfileName").is_some() => {
            let name = field(f, "InstanceProfileName").unwrap_or_default();
            let mut call = Call::new(
                &action,
                format!("arn:aws:iam::{ACCOUNT}:instance-profile/{name}"),
            );
            let (resource_tags, _) = tags
                .instance_profiles
                .get(name)
                .cloned()
                .unwrap_or_default();
            if sent.action != "CreateInstanceProfile" {
                call.resource_tags = resource_tags;
            }
            for n in 1.. {
                let Some(key) = field(f, &format!("Tags.member.{n}.Key")) else {
                    break;
                };
                let value = field(f, &format!("Tags.member.{n}.Value")).unwrap_or_default();
                call.request_tags.insert(key.to_owned(), value.to_owned());
            }
            out.push(call);
            // Putting a role in a profile passes it.
            if let Some(role) =
                field(f, "RoleName").filter(|_| sent.action == "AddRoleToInstanceProfile")
            {
                let mut pass = Call::new(
                    "iam:PassRole",
                    format!("arn:aws:iam::{ACCOUNT}:role/{role}"),
                );
                pass.passed_to = Some("ec2.amazonaws.com".to_owned());
                out.push(pass);
            }
        }
        _ => out.push(Call::new(&action, "*".to_owned())),
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_launches_describes_terminates_and_reads_its_queue_with_only_the_policy_init_aws_writes()
 {
    // No other test's agent may reconcile this test's node class.
    let _guard = crate::exclusive();
    let moto = Moto::start();
    let env = Env::on(&moto.url, CLUSTER, false).await;
    let mut options = AwsOptions::new(CLUSTER.to_owned(), REGION);
    options.endpoint_url = Some(env.proxy.url.clone());
    Plan::for_aws_with(options.clone(), &env.sdk)
        .await
        .run(Mode::Apply, |_| {})
        .await
        .expect("init aws");
    let written = env
        .iam
        .get_role_policy()
        .role_name(options.controller_role())
        .policy_name(CONTROLLER_POLICY_NAME)
        .send()
        .await
        .expect("the controller policy init wrote");
    let document = written.policy_document();
    let policy: Value = serde_json::from_str(document)
        .or_else(|_| serde_json::from_str(&crate::proxy::url_decode(document)))
        .expect("a JSON policy");

    let (agent_key, agent_secret) = user(&env.iam, "karpenter-agent", &actions_only(&policy)).await;
    let admin_policy = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]});
    let (admin_key, admin_secret) = user(&env.iam, "test-admin", &admin_policy).await;
    moto.enforce_iam(true);
    let agent = sdk(&env.proxy.url, &agent_key, &agent_secret).await;
    let admin = sdk(&env.proxy.url, &admin_key, &admin_secret).await;

    // The agent's lifecycle, as the agent's identity.
    apply(&node_class(CLUSTER, CLUSTER, &options.node_role()));
    let mut config = AwsConfig::new(REGION, CLUSTER.to_owned());
    // moto cannot authenticate EKS's GET requests (its signature check hashes the headers as
    // the body), so the endpoint the agent would read with eks:DescribeCluster is given; that
    // one call is the policy's `AllowAPIServerEndpointDiscovery`, which this test cannot run.
    config.cluster_endpoint = Some("https://iam-demo.example.invalid".to_owned());
    config.cluster_ca_bundle = Some("Y2E=".to_owned());
    let provider = AwsProvider::with_sdk_config(config, &agent, rig().client().await);
    let classes: Api<EC2NodeClass> = Api::all(rig().client().await);
    let class = classes.get(CLUSTER).await.expect("the node class");
    nodeclass_status::reconcile_node_class(&rig().client().await, &provider, &class)
        .await
        .expect("the node class resolves, its instance profile made");
    let catalogue = provider
        .instance_types(&reference(CLUSTER))
        .await
        .expect("the catalogue");
    let claim = claim("iam-demo-a", CLUSTER, &["m5.large"]);
    let candidates = launch_candidates(&claim, &catalogue).expect("candidates");
    let instance = provider
        .create(&claim, &candidates)
        .await
        .expect("a launch with init's permissions");
    provider.get(&instance.provider_id).await.expect("describe");
    provider.list().await.expect("list");
    provider
        .delete(&instance.provider_id)
        .await
        .expect("terminate");
    let ProviderId::Aws { instance_id, .. } = &instance.provider_id else {
        panic!("{}", instance.provider_id)
    };
    let admin_sqs = aws_sdk_sqs::Client::new(&admin);
    let queue_url = admin_sqs
        .get_queue_url()
        .queue_name(options.queue_name())
        .send()
        .await
        .expect("the queue init made")
        .queue_url()
        .unwrap_or_default()
        .to_owned();
    let event = json!({"version": "0", "id": "1", "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2", "region": REGION, "resources": [format!("arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{instance_id}")],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}});
    admin_sqs
        .send_message()
        .queue_url(&queue_url)
        .message_body(event.to_string())
        .send()
        .await
        .expect("send an interruption");
    let mut queue = InterruptionQueue::new(
        aws_sdk_sqs::Client::new(&agent),
        &options.queue_name(),
        Arc::new(UnavailableOfferings::default()),
    )
    .await
    .expect("the queue");
    queue.wait = Duration::from_secs(1);
    let messages = queue.receive().await.expect("receive");
    assert_eq!(messages.len(), 1);
    for message in &messages {
        queue.delete(message).await.expect("delete the message");
    }

    // What moto cannot judge: each request against init's policy as written.
    let admin_ec2 = aws_sdk_ec2::Client::new(&admin);
    let mut tags = Tags::default();
    let described = admin_ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("launch templates");
    for t in described.launch_templates() {
        let tag_map: BTreeMap<String, String> = t
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
            .collect();
        for key in [t.launch_template_id(), t.launch_template_name()]
            .into_iter()
            .flatten()
        {
            tags.launch_templates
                .insert(key.to_owned(), tag_map.clone());
        }
    }
    let described = admin_ec2
        .describe_instances()
        .send()
        .await
        .expect("instances");
    for i in described.reservations().iter().flat_map(|r| r.instances()) {
        let tag_map = i
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
            .collect();
        tags.instances
            .insert(i.instance_id().unwrap_or_default().to_owned(), tag_map);
    }
    let admin_iam = aws_sdk_iam::Client::new(&admin);
    let profiles = admin_iam
        .list_instance_profiles()
        .send()
        .await
        .expect("instance profiles");
    for p in profiles.instance_profiles() {
        let tag_map = p
            .tags()
            .iter()
            .map(|t| (t.key().to_owned(), t.value().to_owned()))
            .collect();
        tags.instance_profiles.insert(
            p.instance_profile_name().to_owned(),
            (tag_map, p.roles().first().map(|r| r.role_name().to_owned())),
        );
    }
    // The node class deleted: its launch templates and instance profile go, then the class.
    rig().kubectl_ok(&["delete", "ec2nodeclass", CLUSTER, "--wait=false"]);
    let class = classes
        .get(CLUSTER)
        .await
        .expect("the class, held by its finalizer");
    assert!(class.metadata.deletion_timestamp.is_some());
    nodeclass_status::reconcile_node_class(&rig().client().await, &provider, &class)
        .await
        .expect("the node class is cleaned up after");
    assert!(
        classes.get_opt(CLUSTER).await.expect("read").is_none(),
        "the finalizer came off"
    );
    let left = admin_ec2
        .describe_launch_templates()
        .send()
        .await
        .expect("launch templates");
    assert!(
        left.launch_templates().is_empty(),
        "launch templates left: {:?}",
        left.launch_templates()
    );
    let profile =
        karpenter_core::cloud::aws::nodeclass::instance_profile_name(CLUSTER, REGION, CLUSTER);
    assert!(
        admin_iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
            .is_err(),
        "the class's instance profile {profile} is left"
    );

    let sent: Vec<Sent> = env
        .proxy
        .sent()
        .into_iter()
        .filter(|s| s.access_key == agent_key)
        .collect();
    let actions: std::collections::BTreeSet<String> = sent
        .iter()
        .map(|s| format!("{}:{}", s.service, s.action))
        .collect();
    for expected in [
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
        "ec2:DescribeInstances",
        "ec2:TerminateInstances",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "iam:CreateInstanceProfile",
        "ec2:DeleteLaunchTemplate",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:DeleteInstanceProfile",
    ] {
        assert!(
            actions.contains(expected),
            "the agent never called {expected}: {actions:?}"
        );
    }
    let refused: Vec<String> = sent
        .iter()
        .flat_map(|s| calls(s, &tags))
        .filter_map(|call| {
            call.allowed_by(&policy)
                .err()
                .map(|why| format!("{} on {}: {why}", call.action, call.resource))
        })
        .collect();
    assert!(
        refused.is_empty(),
        "init's policy would refuse:\n{}",
        refused.join("\n")
    );
    // moto does refuse the agent what the policy lacks (so the calls above were judged).
    let denied = aws_sdk_ec2::Client::new(&agent)
        .describe_vpcs()
        .send()
        .await
        .expect_err("ec2:DescribeVpcs is not in the policy");
    let denied = format!("{denied:?}");
    assert!(denied.contains("AccessDenied"), "{denied}");

    moto.enforce_iam(false);
}
