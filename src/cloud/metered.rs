//! [`Metered`]: any provider with upstream's cloud-provider metrics around every call
//! (`pkg/cloudprovider/metrics`, a decorator there too):
//! `karpenter_cloudprovider_duration_seconds{controller,method,provider}` and
//! `karpenter_cloudprovider_errors_total{controller,method,provider,error,nodepool}`, with
//! upstream's method names (`Create`, `Delete`, `Get`, `List`, `GetInstanceTypes`, `IsDrifted`)
//! and error categories. The controller is the loop that made the call: the task running a
//! loop sets [`CONTROLLER`].
//!
//! It dereferences to the provider, so a provider's own methods stay in reach.

use super::{CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId};
use crate::apis::{NodeClaim, NodeClassReference, labels};
use crate::client::Fence;
use crate::metrics::{CloudCallLabels, CloudErrorLabels, Metrics};
use crate::scheduling::InstanceType;
use std::sync::Arc;
use std::time::Instant;

tokio::task_local! {
    /// The control loop whose task is running (upstream's `controller` label).
    pub(crate) static CONTROLLER: &'static str;
}

/// A provider whose calls are timed and whose errors are counted.
pub struct Metered<P> {
    inner: Arc<P>,
    metrics: Arc<Metrics>,
    fence: Option<Fence>,
}

impl<P> Metered<P> {
    pub fn new(inner: Arc<P>, metrics: Arc<Metrics>) -> Self {
        Self {
            inner,
            metrics,
            fence: None,
        }
    }

    /// Refuses creates and deletes while `fence` is shut (see `client::fence`): the cloud's
    /// writes stop with the Kubernetes ones when this replica's leadership lapses.
    pub fn fenced(mut self, fence: Option<Fence>) -> Self {
        self.fence = fence;
        self
    }

    fn check_fence(&self, action: &str) -> Result<(), CloudError> {
        match &self.fence {
            Some(fence) if !fence.is_open() => Err(CloudError::api(
                action,
                NotLeadingCloud {
                    action: action.to_owned(),
                },
            )),
            _ => Ok(()),
        }
    }

    /// The provider inside.
    pub fn inner(&self) -> &Arc<P> {
        &self.inner
    }
}

impl<P> std::ops::Deref for Metered<P> {
    type Target = P;

    fn deref(&self) -> &P {
        &self.inner
    }
}

/// A cloud write refused because this replica's leadership may have lapsed.
#[derive(Debug, thiserror::Error)]
#[error(
    "not {action}: this replica's leadership may have lapsed (no Lease renewal within the renew deadline)"
)]
struct NotLeadingCloud {
    action: String,
}

/// Upstream's error categories.
fn category(error: &CloudError) -> &'static str {
    match error {
        CloudError::InsufficientCapacity { .. } => "InsufficientCapacityError",
        CloudError::NodeClassNotReady { .. } => "NodeClassNotReadyError",
        _ => "unknown",
    }
}

fn controller() -> String {
    CONTROLLER
        .try_with(|name| (*name).to_owned())
        .unwrap_or_default()
}

fn nodepool_of(claim: &NodeClaim) -> String {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODE_POOL))
        .cloned()
        .unwrap_or_default()
}

impl<P: CloudProvider> Metered<P> {
    async fn measure<T>(
        &self,
        method: &'static str,
        nodepool: impl FnOnce() -> String,
        call: impl Future<Output = Result<T, CloudError>>,
    ) -> Result<T, CloudError> {
        let started = Instant::now();
        let result = call.await;
        let controller = controller();
        let provider = self.inner.name().to_owned();
        self.metrics
            .cloudprovider_duration
            .get_or_create(&CloudCallLabels {
                controller: controller.clone(),
                method: method.to_owned(),
                provider: provider.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            self.metrics
                .cloudprovider_errors
                .get_or_create(&CloudErrorLabels {
                    controller,
                    method: method.to_owned(),
                    provider,
                    error: category(error).to_owned(),
                    nodepool: nodepool(),
                })
                .inc();
        }
        result
    }
}

impl<P: CloudProvider> CloudProvider for Metered<P> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> Result<Instance, CloudError> {
        self.check_fence("launching an instance")?;
        self.measure(
            "Create",
            || nodepool_of(claim),
            self.inner.create(claim, candidates),
        )
        .await
    }

    async fn delete(&self, id: &ProviderId) -> Result<DeleteOutcome, CloudError> {
        self.check_fence("deleting an instance")?;
        self.measure("Delete", String::new, self.inner.delete(id))
            .await
    }

    async fn get(&self, id: &ProviderId) -> Result<Option<Instance>, CloudError> {
        self.measure("Get", String::new, self.inner.get(id)).await
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, CloudError> {
        // List covers every NodePool: no single one to label (as upstream).
        self.measure("List", String::new, self.inner.list()).await
    }

    async fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> Result<Arc<[InstanceType]>, CloudError> {
        self.measure(
            "GetInstanceTypes",
            String::new,
            self.inner.instance_types(node_class),
        )
        .await
    }

    fn owns(&self, id: &ProviderId) -> bool {
        self.inner.owns(id)
    }

    fn repair_policies(&self) -> Vec<super::RepairPolicy> {
        self.inner.repair_policies()
    }

    async fn kubelet_identity(
        &self,
        id: &ProviderId,
    ) -> Result<Option<super::KubeletIdentity>, CloudError> {
        self.inner.kubelet_identity(id).await
    }

    async fn drift(&self, claim: &NodeClaim) -> Result<Option<String>, CloudError> {
        self.measure("IsDrifted", || nodepool_of(claim), self.inner.drift(claim))
            .await
    }

    async fn node_class_generation(
        &self,
        node_class: &crate::apis::NodeClassReference,
    ) -> Option<i64> {
        self.inner.node_class_generation(node_class).await
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::cloud::fake::FakeProvider;

    #[tokio::test]
    async fn every_call_is_timed_by_method_and_controller_and_errors_are_counted_by_category() {
        use crate::cloud::fake::{Failure, Operation, Times};
        let metrics = Arc::new(Metrics::new());
        let fake = Arc::new(FakeProvider::default());
        fake.fail(
            Operation::Get,
            Failure::Api {
                message: "the API is away".to_owned(),
            },
            Times::Once,
        );
        let provider = Metered::new(fake, metrics.clone());
        let id: ProviderId = "kwok://missing".parse().expect("an id");
        CONTROLLER
            .scope("nodeclaim.garbagecollection", async {
                let _ = provider.list().await;
                let _ = provider.get(&id).await;
            })
            .await;
        let text = metrics.encode().expect("encoded");
        for line in [
            r#"karpenter_cloudprovider_duration_seconds_count{controller="nodeclaim.garbagecollection",method="List",provider="fake"} 1"#,
            r#"karpenter_cloudprovider_duration_seconds_count{controller="nodeclaim.garbagecollection",method="Get",provider="fake"} 1"#,
            r#"karpenter_cloudprovider_errors_total{controller="nodeclaim.garbagecollection",method="Get",provider="fake",error="unknown",nodepool=""} 1"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert!(
            !text.contains(r#"method="List",provider="fake",error"#),
            "a List that succeeded counts no error"
        );
    }
}
