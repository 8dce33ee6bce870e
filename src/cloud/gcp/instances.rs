//! This cluster's VMs as the seam sees them: read one by zone and name, list the cluster's by
//! label, delete one (idempotently: a VM already gone is [`DeleteOutcome::Gone`]), and turn
//! what `instances.get`/`aggregatedList` returned into an [`Instance`] (its NodeClaim and
//! NodePool from the metadata or labels launch wrote, its capacity from the catalogue, spot or
//! standard, and whether GCE is stopping or has preempted it).

use super::GcpProvider;
use super::catalogue;
use super::errors::cloud_error;
use super::instance_types::CatalogueSnapshot;
use super::last_segment;
use super::launch;
use super::vm_labels::{
    CLUSTER_LABEL, NODE_CLAIM_LABEL, NODE_CLAIM_METADATA, NODE_POOL_LABEL, NODE_POOL_METADATA,
    gce_label_value,
};
use crate::apis::CapacityType;
use crate::apis::labels;
use crate::cloud::provider::{CloudError, DeleteOutcome, Instance, ListedInstance, ProviderId};
use crate::scheduling::InstanceType;
use std::collections::{BTreeMap, HashMap};

impl GcpProvider {
    /// Reads one instance by zone and name (`None` when it does not exist).
    pub(crate) async fn instance_by_name(
        &self,
        zone: &str,
        name: &str,
    ) -> Result<Option<Instance>, CloudError> {
        let found = self
            .clients
            .instances
            .get()
            .set_project(&self.config.project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await;
        match found {
            Ok(instance) => {
                let snapshot = self.catalogue().await?;
                Ok(self.instance_from_api(&instance, &snapshot))
            }
            Err(e) if e.http_status_code() == Some(404) => Ok(None),
            Err(e) => Err(cloud_error("reading the instance", e)),
        }
    }

    /// The instance `id` names, if it is in this provider's project.
    pub(super) async fn get_instance(
        &self,
        id: &ProviderId,
    ) -> Result<Option<Instance>, CloudError> {
        let ProviderId::Gce {
            project,
            zone,
            name,
        } = id
        else {
            return Ok(None);
        };
        if *project != self.config.project {
            return Ok(None);
        }
        self.instance_by_name(zone, name).await
    }

    /// Deletes the instance `id` names.
    pub(super) async fn delete_instance(
        &self,
        id: &ProviderId,
    ) -> Result<DeleteOutcome, CloudError> {
        let ProviderId::Gce {
            project,
            zone,
            name,
        } = id
        else {
            return Ok(DeleteOutcome::Gone);
        };
        let sent = self
            .clients
            .instances
            .delete()
            .set_project(project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await;
        match sent {
            Ok(op) => {
                if let Some(failure) = launch::operation_failure(&op) {
                    tracing::warn!(instance = %name, ?failure, "instance delete failed");
                    return Err(CloudError::api(
                        "deleting the instance",
                        launch::OperationError {
                            operation: op.name.unwrap_or_default(),
                            message: format!("{failure:?}"),
                        },
                    ));
                }
                tracing::info!(instance = %name, zone = %zone, "deleting instance");
                Ok(DeleteOutcome::Terminating)
            }
            Err(e) if e.http_status_code() == Some(404) => Ok(DeleteOutcome::Gone),
            Err(e) => Err(cloud_error("deleting the instance", e)),
        }
    }

    /// Every instance of this cluster (by its labels), in any zone of the project.
    pub(super) async fn list_instances(&self) -> Result<Vec<ListedInstance>, CloudError> {
        let filter = format!(
            "(labels.{CLUSTER_LABEL} = \"{}\") AND (labels.{NODE_POOL_LABEL}:*)",
            gce_label_value(&self.config.cluster_name)
        );
        let mut found = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .clients
                .instances
                .aggregated_list()
                .set_project(&self.config.project)
                .set_filter(filter.clone())
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| cloud_error("listing instances", e))?;
            for scoped in page.items.values() {
                found.extend(scoped.instances.iter().cloned());
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = next,
                None => break,
            }
        }
        let snapshot = self.catalogue().await?;
        Ok(found
            .iter()
            .filter(|i| self.config.owns_labels(&i.labels))
            .filter_map(|i| self.instance_from_api(i, &snapshot))
            .map(ListedInstance::from)
            .collect())
    }

    fn instance_from_api(
        &self,
        instance: &google_cloud_compute_v1::model::Instance,
        snapshot: &CatalogueSnapshot,
    ) -> Option<Instance> {
        let json = serde_json::to_value(instance).ok()?;
        let name = json.get("name")?.as_str()?.to_owned();
        let zone = last_segment(json.get("zone")?.as_str()?).to_owned();
        let machine_type = last_segment(
            json.get("machineType")
                .and_then(|v| v.as_str())
                .unwrap_or_default(),
        )
        .to_owned();
        let metadata = metadata_items(&json);
        let label = |key: &str| instance.labels.get(key).cloned();
        let spot = is_spot(&json);
        let capacity_type = if spot {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        };
        let terminating = is_terminating(&json);
        let info = snapshot.types.get(&machine_type);
        let it = info.map(|info| {
            catalogue::instance_type(info, &self.config.region, catalogue::DEFAULT_BOOT_DISK_GIB)
        });
        let node_labels = node_labels(it.as_ref(), &machine_type, &zone, capacity_type);
        let price = info
            .and_then(|info| snapshot.price(info, &self.config.region))
            .map(|p| if spot { p.spot } else { p.on_demand });
        Some(Instance {
            provider_id: ProviderId::Gce {
                project: self.config.project.clone(),
                zone: zone.clone(),
                name,
            },
            node_claim: metadata
                .get(NODE_CLAIM_METADATA)
                .cloned()
                .or_else(|| label(NODE_CLAIM_LABEL)),
            node_pool: metadata
                .get(NODE_POOL_METADATA)
                .cloned()
                .or_else(|| label(NODE_POOL_LABEL)),
            instance_type: machine_type,
            zone,
            capacity_type: capacity_type.to_owned(),
            image_id: None,
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
                .creation_timestamp
                .as_deref()
                .and_then(|t| t.parse().ok()),
            terminating,
        })
    }
}

/// A VM's metadata items, by key.
fn metadata_items(json: &serde_json::Value) -> HashMap<String, String> {
    json.pointer("/metadata/items")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|item| {
            Some((
                item.get("key")?.as_str()?.to_owned(),
                item.get("value")?.as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Whether a VM is spot (or the older preemptible).
fn is_spot(json: &serde_json::Value) -> bool {
    json.pointer("/scheduling/provisioningModel")
        .and_then(|v| v.as_str())
        == Some("SPOT")
        || json
            .pointer("/scheduling/preemptible")
            .and_then(serde_json::Value::as_bool)
            == Some(true)
}

/// Whether GCE is stopping, suspending or has stopped the VM (as it leaves a preempted one).
fn is_terminating(json: &serde_json::Value) -> bool {
    let status = json
        .get("status")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    matches!(
        status,
        "STOPPING" | "STOPPED" | "SUSPENDING" | "SUSPENDED" | "TERMINATED"
    )
}

/// The node labels a VM's machine type, zone and capacity type give it.
fn node_labels(
    it: Option<&InstanceType>,
    machine_type: &str,
    zone: &str,
    capacity_type: CapacityType,
) -> BTreeMap<String, String> {
    let mut node_labels = it.map(InstanceType::fixed_labels).unwrap_or_default();
    node_labels.insert(labels::INSTANCE_TYPE.to_owned(), machine_type.to_owned());
    node_labels.insert(labels::ZONE.to_owned(), zone.to_owned());
    node_labels.insert(labels::CAPACITY_TYPE.to_owned(), capacity_type.to_string());
    node_labels
}
