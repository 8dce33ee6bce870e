//! The Kubernetes side of `init`: the CRDs, the agent's namespace, service account, RBAC and
//! Deployment, and a starter NodePool with its node class, as plain objects. The plugin can print
//! them (`--dry-run -o yaml`); [`ApplyManifests`] is the step that server-side-applies them.
//!
//! Each object carries the hash of what was applied ([`APPLIED_HASH`]), so `check` knows whether
//! the cluster already has exactly this version without comparing server-defaulted fields.

use super::{SetupError, Status, Step};
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use std::hash::Hasher as _;

/// Annotation holding the hash of the applied object.
pub const APPLIED_HASH: &str = "kubectl-karpenter.io/applied-hash";
/// The field manager `init` applies with.
pub const FIELD_MANAGER: &str = "kubectl-karpenter";

/// One object to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub name: String,
    /// The whole object (apiVersion, kind, metadata, spec...).
    pub object: Value,
}

impl Manifest {
    /// A manifest from a full object; `plural` is the resource name (`deployments`).
    pub fn new(object: Value, plural: &str) -> Self {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = object["kind"].as_str().unwrap_or_default();
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_owned);
        Self {
            resource,
            namespace,
            name,
            object,
        }
    }

    /// `Kind/name` (or `Kind namespace/name`).
    pub fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.resource.kind, self.name),
            None => format!("{}/{}", self.resource.kind, self.name),
        }
    }

    /// FNV-1a (64-bit) of the object's JSON text.
    fn hash(&self) -> String {
        let mut hasher = fnv::FnvHasher::default();
        hasher.write(self.object.to_string().as_bytes());
        format!("{:016x}", hasher.finish())
    }

    /// The object as applied: with the hash annotation.
    pub fn applied_object(&self) -> Value {
        let mut object = self.object.clone();
        object["metadata"]["annotations"][APPLIED_HASH] = Value::String(self.hash());
        object
    }

    fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }

    /// Whether the cluster has this exact version.
    pub async fn is_applied(&self, client: &kube::Client) -> Result<bool, SetupError> {
        let existing = self
            .api(client)
            .get_opt(&self.name)
            .await
            .map_err(|source| SetupError::Kube {
                action: format!("reading {}", self.id()),
                source,
            })?;
        Ok(existing.is_some_and(|o| {
            o.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(APPLIED_HASH))
                == Some(&self.hash())
        }))
    }

    /// Server-side applies the object.
    pub async fn apply(&self, client: &kube::Client) -> Result<(), SetupError> {
        self.api(client)
            .patch(
                &self.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&self.applied_object()),
            )
            .await
            .map_err(|source| SetupError::Kube {
                action: format!("applying {}", self.id()),
                source,
            })?;
        Ok(())
    }
}

/// A step that applies a group of manifests.
pub struct ApplyManifests {
    pub name: String,
    pub description: String,
    pub client: kube::Client,
    pub manifests: Vec<Manifest>,
}

impl Step for ApplyManifests {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        Box::pin(async move {
            let mut missing = Vec::new();
            for m in &self.manifests {
                if !m.is_applied(&self.client).await? {
                    missing.push(m.id());
                }
            }
            Ok(if missing.is_empty() {
                Status::InPlace(format!("{} objects up to date", self.manifests.len()))
            } else {
                Status::Needed(format!("apply {}", missing.join(", ")))
            })
        })
    }

    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        Box::pin(async move {
            for m in &self.manifests {
                if !m.is_applied(&self.client).await? {
                    m.apply(&self.client).await?;
                }
            }
            Ok(())
        })
    }
}

/// How the agent is deployed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentSettings {
    pub namespace: String,
    pub service_account: String,
    pub image: String,
    /// Annotations on the service account (IRSA's role ARN).
    pub service_account_annotations: Vec<(String, String)>,
    /// Arguments after `karpenter-agent`.
    pub args: Vec<String>,
    /// Environment of the agent container.
    pub env: Vec<(String, String)>,
    /// A Secret holding cloud credentials (`init gcp --auth key`): mounted read-only at
    /// [`CREDENTIALS_DIR`], its `key.json` named by `GOOGLE_APPLICATION_CREDENTIALS`.
    pub credentials_secret: Option<String>,
}

/// Where a credentials Secret is mounted in the agent's container.
pub const CREDENTIALS_DIR: &str = "/var/run/secrets/kubectl-karpenter/cloud";

/// The CRDs this project serves.
pub fn crds() -> Vec<Manifest> {
    crate::apis::crds()
        .into_iter()
        .filter_map(|crd| serde_json::to_value(crd).ok())
        .map(|mut v| {
            v["apiVersion"] = json!("apiextensions.k8s.io/v1");
            v["kind"] = json!("CustomResourceDefinition");
            Manifest::new(v, "customresourcedefinitions")
        })
        .collect()
}

/// Namespace, service account, RBAC and Deployment of the agent.
pub fn agent(settings: &AgentSettings) -> Vec<Manifest> {
    let ns = &settings.namespace;
    let sa = &settings.service_account;
    let labels = json!({"app.kubernetes.io/name": "karpenter-agent", "app.kubernetes.io/part-of": "kubectl-karpenter"});
    let annotations: serde_json::Map<String, Value> = settings
        .service_account_annotations
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let mut env: Vec<Value> = settings
        .env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .chain([
            json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        ])
        .collect();
    if settings.credentials_secret.is_some() {
        env.push(json!({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": format!("{CREDENTIALS_DIR}/key.json")}));
    }
    let mut objects = vec![
        Manifest::new(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}),
            "namespaces",
        ),
        Manifest::new(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns, "labels": labels, "annotations": annotations}}),
            "serviceaccounts",
        ),
        Manifest::new(
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "karpenter-agent", "labels": labels},
                "rules": [
                    {"apiGroups": ["karpenter.sh"], "resources": ["nodepools", "nodepools/status", "nodeclaims", "nodeclaims/status"],
                     "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                    {"apiGroups": ["karpenter.k8s.aws", "karpenter.k8s.gcp", "karpenter.kwok.sh"], "resources": ["*"],
                     "verbs": ["get", "list", "watch", "update", "patch"]},
                    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
                    // The kwok provider's simulated device plugin reports a node's GPUs.
                    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
                    {"apiGroups": [""], "resources": ["pods", "namespaces", "persistentvolumes", "persistentvolumeclaims", "replicationcontrollers"],
                     "verbs": ["get", "list", "watch"]},
                    // Termination deletes the pods of a node whose instance is gone, and those
                    // whose grace period would outlast the claim's termination deadline.
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
                    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
                    {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "replicasets", "statefulsets"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
                    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes", "volumeattachments"], "verbs": ["get", "list", "watch"]},
                ],
            }),
            "clusterroles",
        ),
        Manifest::new(
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "karpenter-agent", "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "karpenter-agent"},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
            }),
            "clusterrolebindings",
        ),
        // Leader election, in the agent's own namespace only (as upstream's chart): create
        // cannot be limited to one name, the rest is limited to the agent's Lease.
        Manifest::new(
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "karpenter-agent", "namespace": ns, "labels": labels},
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
                     "resourceNames": [crate::apis::labels::LEADER_ELECTION_LEASE]},
                ],
            }),
            "roles",
        ),
        Manifest::new(
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "karpenter-agent", "namespace": ns, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "karpenter-agent"},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
            }),
            "rolebindings",
        ),
        Manifest::new(
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "karpenter-agent", "namespace": ns, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": "karpenter-agent"}},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": sa,
                            "priorityClassName": "system-cluster-critical",
                            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}
                            ]}}},
                            "containers": [{
                                "name": "agent",
                                "image": settings.image,
                                "args": settings.args,
                                "env": env,
                                "ports": [{"name": "http-metrics", "containerPort": 8080}],
                                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}},
                                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true,
                                                    "capabilities": {"drop": ["ALL"]}},
                            }],
                        },
                    },
                },
            }),
            "deployments",
        ),
    ];
    // Only with a credentials Secret, so the AWS Deployment (and its applied hash) stays as it was.
    if let (Some(secret), Some(deployment)) = (&settings.credentials_secret, objects.last_mut()) {
        let pod = &mut deployment.object["spec"]["template"]["spec"];
        pod["volumes"] = json!([{"name": "cloud-credentials", "secret": {"secretName": secret}}]);
        pod["containers"][0]["volumeMounts"] =
            json!([{"name": "cloud-credentials", "mountPath": CREDENTIALS_DIR, "readOnly": true}]);
    }
    objects
}

/// What the agent needs to approve its kubelets' certificate requests, on clouds whose control
/// plane leaves that to it (GKE): read the requests, approve through the `approval`
/// subresource, for the two kubelet signers only (the API server checks `approve` on the
/// signer name, as `kubernetes.io/kube-apiserver-client-kubelet` and
/// `kubernetes.io/kubelet-serving` are).
pub fn csr_approver(settings: &AgentSettings) -> Vec<Manifest> {
    let labels = json!({"app.kubernetes.io/name": "karpenter-agent", "app.kubernetes.io/part-of": "kubectl-karpenter"});
    vec![
        Manifest::new(
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": CSR_APPROVER, "labels": labels},
                "rules": [
                    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
                    {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "verbs": ["approve"],
                     "resourceNames": ["kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"]},
                ],
            }),
            "clusterroles",
        ),
        Manifest::new(
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": CSR_APPROVER, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CSR_APPROVER},
                "subjects": [{"kind": "ServiceAccount", "name": settings.service_account, "namespace": settings.namespace}],
            }),
            "clusterrolebindings",
        ),
    ]
}

/// The name of the CSR approver's ClusterRole and binding.
const CSR_APPROVER: &str = "karpenter-agent-csr-approver";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applied_hash_of_an_object_never_changes() {
        // Clusters carry these hashes already: a different hash for the same object would make
        // every re-run re-apply it.
        let namespace = Manifest::new(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "karpenter"}}),
            "namespaces",
        );
        assert_eq!(namespace.hash(), "5d9e3cf05a36af21");
        assert_eq!(
            namespace.applied_object()["metadata"]["annotations"][APPLIED_HASH],
            "5d9e3cf05a36af21"
        );
    }
}
