//! A small AWS account for one test, in the shared moto: a VPC with three subnets and a security
//! group (tagged for discovery unless asked not to), an EKS cluster, the EKS-optimised AMI
//! parameters (served by the proxy), and clients that go through the test's own proxy.

use crate::proxy::Proxy;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use std::sync::atomic::{AtomicU8, Ordering};

pub(crate) const REGION: &str = "us-west-2";
pub(crate) const ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];
/// The Kubernetes version the rig reports, so the AMI alias asks for its parameters.
pub(crate) const K8S_VERSION: &str = "1.34";

pub(crate) struct Env {
    pub cluster: String,
    pub proxy: Proxy,
    pub sdk: SdkConfig,
    pub ec2: aws_sdk_ec2::Client,
    pub iam: aws_sdk_iam::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub subnet_ids: Vec<String>,
    pub security_group_id: String,
    /// The amd64 and arm64 AMIs the `al2023@latest` alias resolves to.
    pub amd64_ami: String,
    pub arm64_ami: String,
}

pub(crate) async fn sdk_config(url: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(url)
        .region(Region::new(REGION))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await
}

fn tags(resource: ResourceType, pairs: &[(&str, &str)]) -> TagSpecification {
    pairs
        .iter()
        .fold(
            TagSpecification::builder().resource_type(resource),
            |b, (k, v)| b.tags(Tag::builder().key(*k).value(*v).build()),
        )
        .build()
}

impl Env {
    /// A fresh account for `cluster`; `discovery_tags` tags the subnets and security group with
    /// `karpenter.sh/discovery=<cluster>` (init aws does that itself).
    pub(crate) async fn new(cluster: &str, discovery_tags: bool) -> Self {
        Self::on(&crate::moto::moto().url, cluster, discovery_tags).await
    }

    /// The same, in the moto server at `moto_url`.
    pub(crate) async fn on(moto_url: &str, cluster: &str, discovery_tags: bool) -> Self {
        static NEXT_NET: AtomicU8 = AtomicU8::new(1);
        let proxy = Proxy::start(moto_url).await;
        let sdk = sdk_config(&proxy.url).await;
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        let net = NEXT_NET.fetch_add(1, Ordering::SeqCst);
        let mut discovery: Vec<(&str, &str)> = vec![("Name", cluster)];
        if discovery_tags {
            discovery.push(("karpenter.sh/discovery", cluster));
        }
        let vpc = ec2
            .create_vpc()
            .cidr_block(format!("10.{net}.0.0/16"))
            .send()
            .await
            .expect("create vpc");
        let vpc_id = vpc
            .vpc()
            .and_then(|v| v.vpc_id())
            .expect("vpc id")
            .to_owned();
        let mut subnet_ids = Vec::new();
        for (i, zone) in ZONES.iter().enumerate() {
            let subnet = ec2
                .create_subnet()
                .vpc_id(&vpc_id)
                .cidr_block(format!("10.{net}.{i}.0/24"))
                .availability_zone(*zone)
                .tag_specifications(tags(ResourceType::Subnet, &discovery))
                .send()
                .await
                .expect("create subnet");
            subnet_ids.push(
                subnet
                    .subnet()
                    .and_then(|s| s.subnet_id())
                    .expect("subnet id")
                    .to_owned(),
            );
        }
        let sg = ec2
            .create_security_group()
            .group_name(format!("{cluster}-nodes"))
            .description("nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(tags(ResourceType::SecurityGroup, &discovery))
            .send()
            .await
            .expect("create security group");
        let security_group_id = sg.group_id().expect("group id").to_owned();
        aws_sdk_eks::Client::new(&sdk)
            .create_cluster()
            .name(cluster)
            .version(K8S_VERSION)
            .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
            .resources_vpc_config(
                aws_sdk_eks::types::VpcConfigRequest::builder()
                    .set_subnet_ids(Some(subnet_ids.clone()))
                    .security_group_ids(&security_group_id)
                    .build(),
            )
            .send()
            .await
            .expect("create eks cluster");
        let arm = ec2
            .describe_images()
            .filters(
                Filter::builder()
                    .name("name")
                    .values("al2023-ami-2023*-kernel-6.1-arm64")
                    .build(),
            )
            .send()
            .await
            .expect("describe images");
        let arm64_ami = arm
            .images()
            .iter()
            .find_map(|i| i.image_id())
            .expect("an arm64 AL2023 image in moto")
            .to_owned();
        let amd64_ami = "ami-ekslinux".to_owned();
        let base = format!("/aws/service/eks/optimized-ami/{K8S_VERSION}/amazon-linux-2023");
        proxy.public_parameter(
            &format!("{base}/x86_64/standard/recommended/image_id"),
            &amd64_ami,
        );
        proxy.public_parameter(
            &format!("{base}/arm64/standard/recommended/image_id"),
            &arm64_ami,
        );
        Self {
            cluster: cluster.to_owned(),
            iam: aws_sdk_iam::Client::new(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            ec2,
            proxy,
            sdk,
            subnet_ids,
            security_group_id,
            amd64_ami,
            arm64_ami,
        }
    }

    /// The node role an EC2NodeClass names (what `init aws` would have made).
    pub(crate) async fn node_role(&self) -> String {
        let name = format!("KarpenterNodeRole-{}", self.cluster);
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
        let _ = self
            .iam
            .create_role()
            .role_name(&name)
            .assume_role_policy_document(trust)
            .send()
            .await;
        name
    }

    /// Instances of this cluster in moto, terminated ones included.
    pub(crate) async fn instances(&self) -> Vec<aws_sdk_ec2::types::Instance> {
        let out = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:kubernetes.io/cluster/{}", self.cluster))
                    .values("owned")
                    .build(),
            )
            .send()
            .await
            .expect("describe instances");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances().iter().cloned())
            .collect()
    }

    /// The state of an instance (`running`, `terminated`...).
    pub(crate) async fn state(&self, instance_id: &str) -> String {
        let out = self
            .ec2
            .describe_instances()
            .instance_ids(instance_id)
            .send()
            .await
            .expect("describe instance");
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find_map(|i| {
                i.state()
                    .and_then(|s| s.name())
                    .map(|n| n.as_str().to_owned())
            })
            .unwrap_or_default()
    }
}
