//! What new VMs copy from the cluster's GKE node-pool instance template (the newest
//! `gke-<cluster>-*`, or the one the agent is told to use) so they join the cluster: GKE's
//! bootstrap metadata, network tags, service account and network interface.

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
