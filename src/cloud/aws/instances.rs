//! This cluster's EC2 instances as the controllers see them: DescribeInstances (by id, or by
//! this cluster's ownership tag), TerminateInstances, and an EC2 instance read back as an
//! [`Instance`] with its type's capacity, labels and price. Upstream's `pkg/providers/instance`
//! (`Get`, `List`, `Delete`); launching is [`super::launch`]'s.

use super::AwsProvider;
use super::catalogue;
use super::catalogue_snapshot::CatalogueSnapshot;
use super::errors::{cloud_error, sdk_error_code};
use super::tags::{NODE_CLAIM_TAG, cluster_tag};
use crate::apis::CapacityType;
use crate::apis::labels;
use crate::cloud::provider::{CloudError, DeleteOutcome, Instance, ListedInstance, ProviderId};
use crate::scheduling::InstanceType;
use aws_sdk_ec2::types::{Filter, InstanceStateName};
use std::collections::{BTreeMap, HashMap};

impl AwsProvider {
    /// Terminates `instance_id`; one already terminated, or unknown to EC2, is gone.
    pub(super) async fn terminate_instance(
        &self,
        instance_id: &str,
    ) -> Result<DeleteOutcome, CloudError> {
        match self
            .clients
            .ec2
            .terminate_instances()
            .instance_ids(instance_id)
            .send()
            .await
        {
            Ok(out) => {
                let change = out.terminating_instances().first();
                let was_terminated = change
                    .and_then(|c| c.previous_state())
                    .and_then(|s| s.name())
                    == Some(&InstanceStateName::Terminated);
                if change.is_none() || was_terminated {
                    Ok(DeleteOutcome::Gone)
                } else {
                    tracing::info!(instance_id, "terminating instance");
                    Ok(DeleteOutcome::Terminating)
                }
            }
            Err(e) if sdk_error_code(&e) == Some("InvalidInstanceID.NotFound") => {
                Ok(DeleteOutcome::Gone)
            }
            Err(e) => Err(cloud_error("terminating the instance", e)),
        }
    }

    /// The instance `instance_id`, unless EC2 does not know it or it is terminated.
    pub(super) async fn instance(&self, instance_id: &str) -> Result<Option<Instance>, CloudError> {
        let instances = self
            .describe_instances(Vec::new(), vec![instance_id.to_owned()])
            .await?;
        let Some(instance) = instances.into_iter().next() else {
            return Ok(None);
        };
        if instance.state().and_then(|s| s.name()) == Some(&InstanceStateName::Terminated) {
            return Ok(None);
        }
        let snapshot = self.catalogue().await?;
        Ok(self.instance_from_ec2(&instance, &snapshot))
    }

    /// This cluster's NodePool instances that are not yet terminated.
    pub(super) async fn cluster_instances(&self) -> Result<Vec<ListedInstance>, CloudError> {
        let filters = vec![
            self.cluster_filter(),
            Filter::builder()
                .name("tag-key")
                .values(labels::NODE_POOL)
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .values("stopping")
                .values("stopped")
                .values("shutting-down")
                .build(),
        ];
        let instances = self.describe_instances(filters, Vec::new()).await?;
        let snapshot = self.catalogue().await?;
        Ok(instances
            .iter()
            .filter_map(|i| self.instance_from_ec2(i, &snapshot))
            .map(ListedInstance::from)
            .collect())
    }

    fn instance_from_ec2(
        &self,
        instance: &aws_sdk_ec2::types::Instance,
        snapshot: &CatalogueSnapshot,
    ) -> Option<Instance> {
        let id = instance.instance_id()?;
        let zone = instance
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_owned();
        let instance_type = instance
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default();
        let tags: HashMap<&str, &str> = instance
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?, t.value()?)))
            .collect();
        let capacity_type = capacity_type_of(instance);
        let info = snapshot.types.get(&instance_type);
        let it = info.map(|info| {
            catalogue::instance_type(
                info,
                &self.config.region,
                catalogue::DEFAULT_ROOT_VOLUME_BYTES,
                None,
            )
        });
        let mut node_labels = it
            .as_ref()
            .map(InstanceType::fixed_labels)
            .unwrap_or_default();
        node_labels.insert(labels::INSTANCE_TYPE.to_owned(), instance_type.clone());
        node_labels.insert(labels::ZONE.to_owned(), zone.clone());
        node_labels.insert(labels::CAPACITY_TYPE.to_owned(), capacity_type.to_string());
        let price = self.price_of(snapshot, capacity_type, &instance_type, &zone);
        Some(Instance {
            provider_id: ProviderId::Aws {
                zone: zone.clone(),
                instance_id: id.to_owned(),
            },
            node_claim: tags.get(NODE_CLAIM_TAG).map(|s| (*s).to_owned()),
            node_pool: tags.get(labels::NODE_POOL).map(|s| (*s).to_owned()),
            instance_type,
            zone,
            capacity_type: capacity_type.to_owned(),
            image_id: instance.image_id().map(str::to_owned),
            capacity: it
                .as_ref()
                .map(|it| it.capacity.clone())
                .unwrap_or_default(),
            allocatable: it
                .as_ref()
                .map(InstanceType::allocatable)
                .unwrap_or_default(),
            labels: node_labels,
            annotations: BTreeMap::new(),
            price,
            created: instance
                .launch_time()
                .and_then(|t| k8s_openapi::jiff::Timestamp::from_second(t.secs()).ok()),
            terminating: is_terminating(instance),
        })
    }

    /// What an instance of `instance_type` in `zone` costs: the latest spot price, or the
    /// on-demand one.
    fn price_of(
        &self,
        snapshot: &CatalogueSnapshot,
        capacity_type: CapacityType,
        instance_type: &str,
        zone: &str,
    ) -> Option<f64> {
        if capacity_type == CapacityType::Spot {
            snapshot
                .spot
                .get(&(instance_type.to_owned(), zone.to_owned()))
                .copied()
        } else {
            self.config
                .prices
                .on_demand_with(&snapshot.on_demand, instance_type)
        }
    }

    /// Instances this cluster owns (`kubernetes.io/cluster/<name>: owned`).
    fn cluster_filter(&self) -> Filter {
        Filter::builder()
            .name(format!("tag:{}", cluster_tag(&self.config.cluster_name)))
            .values("owned")
            .build()
    }

    /// The live instance of this cluster tagged for the claim `name`, if any.
    pub(crate) async fn launched_for(&self, name: &str) -> Result<Option<Instance>, CloudError> {
        let filters = vec![
            self.cluster_filter(),
            Filter::builder()
                .name(format!("tag:{NODE_CLAIM_TAG}"))
                .values(name)
                .build(),
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .build(),
        ];
        let instances = self.describe_instances(filters, Vec::new()).await?;
        let snapshot = self.catalogue().await?;
        Ok(instances
            .iter()
            .find_map(|i| self.instance_from_ec2(i, &snapshot)))
    }

    pub(super) async fn describe_instances(
        &self,
        filters: Vec<Filter>,
        ids: Vec<String>,
    ) -> Result<Vec<aws_sdk_ec2::types::Instance>, CloudError> {
        let mut instances = Vec::new();
        let mut token = None;
        loop {
            let out = match self
                .clients
                .ec2
                .describe_instances()
                .set_filters((!filters.is_empty()).then(|| filters.clone()))
                .set_instance_ids((!ids.is_empty()).then(|| ids.clone()))
                .set_next_token(token)
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) if sdk_error_code(&e) == Some("InvalidInstanceID.NotFound") => {
                    return Ok(Vec::new());
                }
                Err(e) => return Err(cloud_error("describing instances", e)),
            };
            for reservation in out.reservations() {
                instances.extend(reservation.instances().iter().cloned());
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                return Ok(instances);
            }
        }
    }
}

fn capacity_type_of(instance: &aws_sdk_ec2::types::Instance) -> CapacityType {
    if instance
        .instance_lifecycle()
        .is_some_and(|l| l.as_str() == "spot")
    {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    }
}

/// Whether the instance is going or gone (stopping and stopped count).
fn is_terminating(instance: &aws_sdk_ec2::types::Instance) -> bool {
    let state = instance.state().and_then(|s| s.name());
    matches!(
        state,
        Some(
            InstanceStateName::ShuttingDown
                | InstanceStateName::Terminated
                | InstanceStateName::Stopping
                | InstanceStateName::Stopped
        )
    )
}
