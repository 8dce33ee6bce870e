//! Pods Cluster Autoscaler was told never to evict: `cluster-autoscaler.kubernetes.io/
//! safe-to-evict: "false"` kept their node from being scaled down. Karpenter does not read that
//! annotation; its own is `karpenter.sh/do-not-disrupt: "true"` (upstream's "Migrating from
//! Cluster Autoscaler" guide says to carry one over to the other). Without it, consolidation
//! and drift would evict such a pod, so `migrate` names each one and offers the annotation:
//! on the running pod (immediate, no restart) and on the pod template of what owns it (so its
//! next pods keep it; changing a template rolls the workload, which stays the user's call).

use crate::apis::labels;
use k8s_openapi::api::core::v1::Pod;

/// Cluster Autoscaler's annotation.
pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// A running pod Cluster Autoscaler would not evict and Karpenter would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unprotected {
    pub namespace: String,
    pub name: String,
    /// What makes its pods, whose template should carry the annotation: `None` for a pod no
    /// controller owns.
    pub owner: Option<Owner>,
}

/// A workload whose pod template makes the pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `Job`, `ReplicaSet`...
    pub kind: String,
    pub name: String,
}

impl Unprotected {
    /// The command that protects the running pod.
    pub fn annotate_command(&self) -> String {
        format!(
            "kubectl -n {} annotate pod {} {}=true",
            self.namespace,
            self.name,
            labels::DO_NOT_DISRUPT
        )
    }

    /// The command that protects the owner's next pods (it rolls the workload), if it has one.
    pub fn template_command(&self) -> Option<String> {
        let owner = self.owner.as_ref()?;
        Some(format!(
            "kubectl -n {} patch {} {} --type merge -p '{{\"spec\":{{\"template\":{{\"metadata\":{{\"annotations\":{{\"{}\":\"true\"}}}}}}}}}}'",
            self.namespace,
            owner.kind.to_lowercase(),
            owner.name,
            labels::DO_NOT_DISRUPT
        ))
    }
}

/// The pods, not finished, that say `safe-to-evict: "false"` without Karpenter's
/// `do-not-disrupt: "true"`, sorted by namespace and name.
pub fn unprotected_pods(pods: &[Pod]) -> Vec<Unprotected> {
    let mut out: Vec<Unprotected> = pods
        .iter()
        .filter(|pod| {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .filter(|pod| annotation(pod, SAFE_TO_EVICT) == Some("false"))
        .filter(|pod| annotation(pod, labels::DO_NOT_DISRUPT) != Some("true"))
        .map(|pod| Unprotected {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            owner: owner(pod),
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The pod's controller; a Deployment's ReplicaSet is named `<deployment>-<pod-template-hash>`,
/// so its Deployment is named (its template is the one to change).
fn owner(pod: &Pod) -> Option<Owner> {
    let controller = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let hash = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("pod-template-hash"));
    if controller.kind == "ReplicaSet"
        && let Some(deployment) = hash.and_then(|h| controller.name.strip_suffix(&format!("-{h}")))
    {
        return Some(Owner {
            kind: "Deployment".to_owned(),
            name: deployment.to_owned(),
        });
    }
    Some(Owner {
        kind: controller.kind.clone(),
        name: controller.name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, annotations: serde_json::Value, owner: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "annotations": annotations,
                "labels": {"pod-template-hash": "7d9f8"}, "ownerReferences": owner},
            "status": {"phase": "Running"},
        }))
        .expect("a Pod")
    }

    #[test]
    fn a_pod_cluster_autoscaler_would_not_evict_is_named_with_the_workload_whose_template_to_change()
     {
        let rs = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "checkout-7d9f8", "uid": "u", "controller": true}]);
        let sts = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u", "controller": true}]);
        let pods = [
            pod(
                "checkout-7d9f8-abcde",
                json!({SAFE_TO_EVICT: "false"}),
                rs.clone(),
            ),
            pod("db-0", json!({SAFE_TO_EVICT: "false"}), sts),
            pod("lone", json!({SAFE_TO_EVICT: "false"}), json!([])),
            pod("cart-1", json!({SAFE_TO_EVICT: "true"}), rs.clone()),
            pod(
                "kept",
                json!({SAFE_TO_EVICT: "false", labels::DO_NOT_DISRUPT: "true"}),
                rs,
            ),
        ];
        let found = unprotected_pods(&pods);
        let names: Vec<&str> = found.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["checkout-7d9f8-abcde", "db-0", "lone"]);
        assert_eq!(
            found[0].owner,
            Some(Owner {
                kind: "Deployment".to_owned(),
                name: "checkout".to_owned()
            })
        );
        assert_eq!(
            found[0].annotate_command(),
            "kubectl -n shop annotate pod checkout-7d9f8-abcde karpenter.sh/do-not-disrupt=true"
        );
        assert_eq!(
            found[1].template_command().as_deref(),
            Some(
                r#"kubectl -n shop patch statefulset db --type merge -p '{"spec":{"template":{"metadata":{"annotations":{"karpenter.sh/do-not-disrupt":"true"}}}}}'"#
            )
        );
        assert_eq!(found[2].template_command(), None);
    }
}
