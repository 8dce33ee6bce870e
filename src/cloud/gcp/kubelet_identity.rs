//! Who the kubelet on one of this cluster's VMs is, as Compute Engine knows it: the name it
//! registers its Node as (the instance name, which GCE also makes its hostname), the DNS names
//! and addresses a serving certificate for it may carry, and whether the VM is running. The
//! certificate approver (`controllers::csr_approval`) asks this before it approves a kubelet's
//! certificate request, as GKE's own approver checks the VM behind a node's request.

use super::errors::cloud_error;
use super::{GcpConfig, GcpProvider, last_segment};
use crate::cloud::provider::{CloudError, KubeletIdentity, ProviderId};
use serde_json::Value;
use std::net::IpAddr;

impl GcpProvider {
    /// The identity of the VM `id` names, if it is one of this cluster's (by its labels).
    pub(super) async fn kubelet_identity_of(
        &self,
        id: &ProviderId,
    ) -> Result<Option<KubeletIdentity>, CloudError> {
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
        let found = self
            .clients
            .instances
            .get()
            .set_project(project)
            .set_zone(zone)
            .set_instance(name)
            .send()
            .await;
        let instance = match found {
            Ok(instance) => instance,
            Err(e) if e.http_status_code() == Some(404) => return Ok(None),
            Err(e) => return Err(cloud_error("reading the instance", e)),
        };
        if !self.config.owns_labels(&instance.labels) {
            return Ok(None);
        }
        let Ok(json) = serde_json::to_value(&instance) else {
            return Ok(None);
        };
        Ok(identity(&json, &self.config))
    }
}

/// The identity of a VM from its `instances.get` body; `None` when the body names no VM.
pub(crate) fn identity(instance: &Value, config: &GcpConfig) -> Option<KubeletIdentity> {
    let name = instance.get("name")?.as_str()?.to_owned();
    let zone = last_segment(instance.get("zone")?.as_str()?).to_owned();
    let mut dns_names = vec![name.clone()];
    // GCE's internal DNS: zonal `NAME.ZONE.c.PROJECT.internal`, and the global form older
    // projects use; a domain-scoped project `example.com:p` is spelled `p.example.com` there.
    let project = match config.project.split_once(':') {
        Some((domain, project)) => format!("{project}.{domain}"),
        None => config.project.clone(),
    };
    dns_names.push(format!("{name}.{zone}.c.{project}.internal"));
    dns_names.push(format!("{name}.c.{project}.internal"));
    if let Some(hostname) = instance.get("hostname").and_then(Value::as_str) {
        dns_names.push(hostname.to_owned());
    }
    let mut ip_addresses = Vec::new();
    for nic in instance
        .get("networkInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let configs = ["accessConfigs", "ipv6AccessConfigs"]
            .into_iter()
            .flat_map(|key| nic.get(key).and_then(Value::as_array).into_iter().flatten());
        let addresses = [nic.get("networkIP"), nic.get("ipv6Address")]
            .into_iter()
            .flatten()
            .chain(
                configs
                    .flat_map(|c| [c.get("natIP"), c.get("externalIpv6")])
                    .flatten(),
            );
        ip_addresses.extend(
            addresses
                .filter_map(Value::as_str)
                .filter_map(|a| a.parse::<IpAddr>().ok()),
        );
    }
    Some(KubeletIdentity {
        node_name: name,
        dns_names,
        ip_addresses,
        created: instance
            .get("creationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok()),
        running: instance.get("status").and_then(Value::as_str) == Some("RUNNING"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(project: &str) -> GcpConfig {
        GcpConfig::new(project, "demo", "us-central1")
    }

    #[test]
    fn a_vm_answers_to_its_name_its_internal_dns_names_and_every_address_it_has() {
        let vm = json!({
            "name": "demo-default-abcde",
            "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
            "status": "RUNNING",
            "creationTimestamp": "2026-12-04T10:00:00.000-08:00",
            "networkInterfaces": [{
                "networkIP": "10.128.0.7",
                "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "natIP": "34.1.2.3"}],
                "ipv6AccessConfigs": [{"externalIpv6": "2600:1900::1"}],
            }, {"networkIP": "10.10.0.4"}],
        });
        let id = identity(&vm, &config("p")).expect("identity");
        assert_eq!(id.node_name, "demo-default-abcde");
        assert_eq!(
            id.dns_names,
            [
                "demo-default-abcde",
                "demo-default-abcde.us-central1-a.c.p.internal",
                "demo-default-abcde.c.p.internal"
            ]
        );
        let ips: Vec<String> = id.ip_addresses.iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["10.128.0.7", "34.1.2.3", "2600:1900::1", "10.10.0.4"]);
        assert!(id.running);
        assert!(id.created.is_some());
    }

    #[test]
    fn a_vm_that_is_not_running_says_so_and_a_domain_scoped_project_is_spelled_as_gce_does() {
        let vm = json!({"name": "n", "zone": "zones/us-central1-b", "status": "STOPPING"});
        let id = identity(&vm, &config("example.com:proj")).expect("identity");
        assert!(!id.running);
        assert_eq!(
            id.dns_names[1],
            "n.us-central1-b.c.proj.example.com.internal"
        );
    }
}
