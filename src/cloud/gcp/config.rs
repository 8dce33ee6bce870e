//! The provider's typed configuration: the project, cluster and region it serves, where it
//! sends Compute calls, what new nodes default to, and how long its caches last. The agent
//! builds it from its settings and passes it in; nothing here reads the environment.

use super::vm_labels::{CLUSTER_LABEL, LOCATION_LABEL, gce_label_value};
use std::collections::HashMap;
use std::time::Duration;

/// What the provider needs to know that the node classes do not say.
#[derive(Clone, Debug)]
pub struct GcpConfig {
    /// The project VMs launch in.
    pub project: String,
    /// The cluster's name (labels, instance names).
    pub cluster_name: String,
    /// The region the cluster's nodes are in.
    pub region: String,
    /// The cluster's location as GKE names it: its region, or its zone for a zonal cluster
    /// (default: the region).
    pub location: Option<String>,
    /// Zones to launch in; empty means every zone of the region that is `UP`.
    pub zones: Vec<String>,
    /// Send every Compute call here with anonymous credentials (tests: `gcp-fake`).
    pub endpoint: Option<String>,
    /// The network and subnetwork when the node class names none (default: the node template's,
    /// else the `default` network).
    pub network: Option<String>,
    pub subnetwork: Option<String>,
    /// The instance template new nodes take GKE's bootstrap from (its metadata: `kube-env`,
    /// `user-data` and the scripts that join the cluster; its network, tags and service account
    /// as defaults). Unset: the newest `gke-<cluster>-*` template with a `kube-env`, if any.
    pub node_template: Option<String>,
    /// How long the machine types and zones are reused (upstream: 5 min).
    pub catalogue_ttl: Duration,
    /// How long a node class's resolution is reused before the images are read again.
    pub node_class_ttl: Duration,
    /// How long an offering GCE had no capacity for is skipped.
    pub unavailable_ttl: Duration,
    /// Offerings one launch tries before it gives up with insufficient capacity.
    pub max_launch_attempts: usize,
    /// First delay between operation polls (the client's default starts at 1 s).
    pub polling_initial_delay: Option<Duration>,
}

impl GcpConfig {
    /// The cluster's location: [`Self::location`], else the region.
    pub fn location(&self) -> &str {
        self.location.as_deref().unwrap_or(&self.region)
    }

    /// Whether a VM's labels say it is of this cluster: its cluster label names this cluster
    /// and its location label (when it has one: VMs made before the label existed have none)
    /// this location.
    pub(crate) fn owns_labels(&self, labels: &HashMap<String, String>) -> bool {
        labels.get(CLUSTER_LABEL) == Some(&gce_label_value(&self.cluster_name))
            && labels
                .get(LOCATION_LABEL)
                .is_none_or(|l| *l == gce_label_value(self.location()))
    }

    /// Defaults for a cluster in a project and region.
    pub fn new(
        project: impl Into<String>,
        cluster_name: impl Into<String>,
        region: impl Into<String>,
    ) -> Self {
        Self {
            project: project.into(),
            cluster_name: cluster_name.into(),
            region: region.into(),
            location: None,
            zones: Vec::new(),
            endpoint: None,
            network: None,
            subnetwork: None,
            node_template: None,
            catalogue_ttl: Duration::from_secs(300),
            node_class_ttl: Duration::from_secs(60),
            unavailable_ttl: crate::cloud::unavailable::DEFAULT_TTL,
            max_launch_attempts: 3,
            polling_initial_delay: None,
        }
    }
}
