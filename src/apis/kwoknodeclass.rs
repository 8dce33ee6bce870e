//! `karpenter.kwok.sh/v1alpha1` KWOKNodeClass: the node class of the simulation provider, whose
//! "instances" are Node objects kept alive by the kwok controller (no VMs).

use super::common::parse_duration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Settings of simulated nodes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.kwok.sh",
    version = "v1alpha1",
    kind = "KWOKNodeClass",
    doc = "KWOKNodeClass is the Schema for the KWOKNodeClass API: settings of simulated (kwok) nodes",
    plural = "kwoknodeclasses",
    singular = "kwoknodeclass",
    status = "KWOKNodeClassStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KWOKNodeClassSpec {
    /// How long a simulated instance takes to register its Node (default: at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^([0-9]+(ms|s|m|h))+$"))]
    pub node_registration_delay: Option<String>,
    /// How long after its Node registers a simulated device plugin takes to report the node's
    /// extended resources (GPUs): until then the Node reports them as zero, as a kubelet does
    /// (default: at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^([0-9]+(ms|s|m|h))+$"))]
    pub device_plugin_delay: Option<String>,
}

impl KWOKNodeClassSpec {
    /// The device plugin's delay; zero when unset.
    pub(crate) fn device_plugin_delay(&self) -> Duration {
        self.device_plugin_delay
            .as_deref()
            .and_then(|text| parse_duration(text).ok())
            .unwrap_or(Duration::ZERO)
    }

    /// The registration delay; zero when unset.
    pub(crate) fn registration_delay(&self) -> Duration {
        self.node_registration_delay
            .as_deref()
            .and_then(|text| parse_duration(text).ok())
            .unwrap_or(Duration::ZERO)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KWOKNodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
