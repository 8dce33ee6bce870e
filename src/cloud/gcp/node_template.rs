//! What new VMs copy from the cluster's GKE node-pool instance template (the newest
//! `gke-<cluster>-*`, or the one the agent is told to use) so they join the cluster: GKE's
//! bootstrap metadata, network tags, service account and network interface, and which image it
//! boots (the GKE node image of the cluster's version, which image aliases resolve to). Also
//! finding that template ([`GcpProvider::node_template`]), reused for `catalogue_ttl`.

use super::GcpProvider;
use super::errors::cloud_error;
use super::vm_labels::gce_label_value;
use crate::cloud::provider::CloudError;
use std::sync::Arc;
use std::time::Instant;

/// What new nodes copy from a GKE node pool's instance template, so they join the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeTemplate {
    pub name: String,
    /// Its metadata items (`kube-env`, `user-data`, `configure-sh`, `cluster-name`...).
    pub metadata: Vec<(String, String)>,
    pub tags: Vec<String>,
    pub service_account: Option<String>,
    /// Its first network interface (`network`, `subnetwork`, `aliasIpRanges`, `accessConfigs`).
    pub network_interface: Option<serde_json::Value>,
    /// The image its boot disk starts from, as `projects/P/global/images/NAME`.
    pub source_image: Option<String>,
}

impl NodeTemplate {
    /// From an instance template as the API returns it.
    pub fn from_api(template: &google_cloud_compute_v1::model::InstanceTemplate) -> Option<Self> {
        let json = serde_json::to_value(template).ok()?;
        let properties = json.get("properties")?;
        let metadata = properties
            .pointer("/metadata/items")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|item| {
                Some((
                    item.get("key")?.as_str()?.to_owned(),
                    item.get("value")?.as_str().unwrap_or_default().to_owned(),
                ))
            })
            .collect();
        let tags = properties
            .pointer("/tags/items")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        Some(Self {
            name: json.get("name")?.as_str()?.to_owned(),
            metadata,
            tags,
            service_account: properties
                .pointer("/serviceAccounts/0/email")
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            network_interface: properties.pointer("/networkInterfaces/0").cloned(),
            source_image: boot_image(properties),
        })
    }

    /// One metadata value.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The source image of a template's boot disk (the one marked `boot`, else the first), without
/// the API's URL prefix.
fn boot_image(properties: &serde_json::Value) -> Option<String> {
    let disks = properties.get("disks")?.as_array()?;
    let boot = disks
        .iter()
        .find(|d| d.get("boot").and_then(serde_json::Value::as_bool) == Some(true))
        .or_else(|| disks.first())?;
    let image = boot.pointer("/initializeParams/sourceImage")?.as_str()?;
    let path = image.split("/compute/v1/").nth(1).unwrap_or(image);
    path.starts_with("projects/").then(|| path.to_owned())
}

impl GcpProvider {
    /// The node template (named, or discovered as the newest `gke-<cluster>-*` template with a
    /// `kube-env` whose `cluster-name` and `cluster-location` metadata, when it has them, are
    /// this cluster's), reused for `catalogue_ttl`. `None` when there is none to copy: nodes then
    /// boot with only the node class's metadata.
    pub async fn node_template(&self) -> Result<Option<Arc<NodeTemplate>>, CloudError> {
        let mut cached = self.node_template.lock().await;
        if let Some((at, template)) = cached.as_ref()
            && at.elapsed() < self.config.catalogue_ttl
        {
            return Ok(template.clone());
        }
        let found = match &self.config.node_template {
            Some(name) => self.named_node_template(name).await?,
            None => self.discover_node_template().await?,
        };
        match &found {
            Some(t) => {
                tracing::info!(template = %t.name, "nodes take their bootstrap from this instance template")
            }
            None => {
                tracing::warn!(cluster = %self.config.cluster_name, "no GKE node template found; nodes get only the node class's metadata and may not join the cluster")
            }
        }
        let found = found.map(Arc::new);
        *cached = Some((Instant::now(), found.clone()));
        Ok(found)
    }

    /// The instance template the agent is told to use.
    async fn named_node_template(&self, name: &str) -> Result<Option<NodeTemplate>, CloudError> {
        let template = self
            .clients
            .instance_templates
            .get()
            .set_project(&self.config.project)
            .set_instance_template(name)
            .send()
            .await
            .map_err(|e| cloud_error("reading the node instance template", e))?;
        Ok(NodeTemplate::from_api(&template))
    }

    /// The newest `gke-<cluster>-*` template with a `kube-env` that is this cluster's.
    async fn discover_node_template(&self) -> Result<Option<NodeTemplate>, CloudError> {
        let project = &self.config.project;
        let prefix = format!("gke-{}-", gce_label_value(&self.config.cluster_name));
        let mut newest: Option<(String, NodeTemplate)> = None;
        let mut token = String::new();
        loop {
            let page = self
                .clients
                .instance_templates
                .list()
                .set_project(project)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| cloud_error("listing instance templates", e))?;
            for template in &page.items {
                let created = template.creation_timestamp.clone().unwrap_or_default();
                let Some(parsed) = NodeTemplate::from_api(template) else {
                    continue;
                };
                // GKE's templates say whose they are in their metadata; a cluster
                // of the same name elsewhere in the project has its own.
                let of_this_cluster = parsed
                    .metadata("cluster-name")
                    .is_none_or(|n| n == self.config.cluster_name)
                    && parsed
                        .metadata("cluster-location")
                        .is_none_or(|l| l == self.config.location());
                if parsed.name.starts_with(&prefix)
                    && of_this_cluster
                    && parsed.metadata("kube-env").is_some()
                    && newest.as_ref().is_none_or(|(at, _)| created > *at)
                {
                    newest = Some((created, parsed));
                }
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = next,
                None => break,
            }
        }
        Ok(newest.map(|(_, t)| t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_says_which_image_its_boot_disk_starts_from() {
        let properties = serde_json::json!({"disks": [
            {"boot": false, "initializeParams": {"sourceImage": "projects/x/global/images/data"}},
            {"boot": true, "initializeParams": {"sourceImage":
                "https://www.googleapis.com/compute/v1/projects/gke-node-images/global/images/gke-1334-gke1000000-cos-121-18867-90-4-c-pre"}},
        ]});
        assert_eq!(
            boot_image(&properties).as_deref(),
            Some(
                "projects/gke-node-images/global/images/gke-1334-gke1000000-cos-121-18867-90-4-c-pre"
            )
        );
        assert_eq!(boot_image(&serde_json::json!({})), None);
    }
}
