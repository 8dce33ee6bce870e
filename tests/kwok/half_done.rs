//! A disruption command whose last step the API server refuses (here an admission policy on
//! deleting the pool's NodeClaims; in a cluster as often a policy engine or a webhook that is
//! down): its candidate is tainted `karpenter.sh/disrupted` and its replacement is up when the
//! delete fails. The taint comes off by the next pass, while the refusal still holds, and once
//! the refusal is lifted the cluster settles on the cheaper node.

use super::disruption::{events_with_reason, pool, quick_agent, record_disrupted_taints, scale};
use super::{apply, clean_up, deployment, exclusive, pool_claims, running_pods, wait_for};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::apis::NodeClaim;
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::time::Duration;

const POOL: &str = "halfway-pool";
const NAMESPACE: &str = "halfway-test";

/// Refuses every delete of the pool's NodeClaims until dropped.
struct Refusal;

impl Refusal {
    fn install() -> Self {
        super::apply(&format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: refuse-claim-deletes}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [karpenter.sh]
        apiVersions: ["*"]
        operations: [DELETE]
        resources: [nodeclaims]
  validations:
    - expression: "!has(oldObject.metadata.labels) || !('karpenter.sh/nodepool' in oldObject.metadata.labels) || oldObject.metadata.labels['karpenter.sh/nodepool'] != '{POOL}'"
      message: "deleting NodeClaims of {POOL} is not allowed right now"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: refuse-claim-deletes}}
spec:
  policyName: refuse-claim-deletes
  validationActions: [Deny]
"#
        ));
        Self
    }

    fn lift(&self) {
        rig().kubectl_ok(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            "refuse-claim-deletes",
            "--ignore-not-found",
        ]);
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        self.lift();
    }
}

fn is_disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == "karpenter.sh/disrupted"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delete_at_the_end_of_a_consolidation_leaves_no_taint_and_the_cheaper_node_wins()
{
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(&pool(POOL, "{consolidateAfter: 0s}"));
    apply(&deployment(NAMESPACE, "big", POOL, 1, "6"));
    apply(&deployment(NAMESPACE, "small", POOL, 1, "500m"));
    wait_for("2 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, NAMESPACE).await.len() == 2).then_some(())
    })
    .await;
    let first = pool_claims(&client, POOL).await;
    assert_eq!(first.len(), 1, "both pods were planned onto one node");
    let first_claim = first[0].name_any();
    let first_node = first[0]
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("registered");

    let refusal = Refusal::install();
    let (tainted, watch) = record_disrupted_taints(&client, POOL);
    scale(NAMESPACE, "big", 0);
    let claims: Api<NodeClaim> = Api::all(client.clone());
    wait_for(
        "the refused delete to be seen and the candidate's taint to come off",
        Duration::from_secs(180),
        || async {
            let refused = events_with_reason(&client, "DisruptionBlocked")
                .await
                .iter()
                .filter(|note| note.contains("is not allowed right now"))
                .count();
            let node: Node = Api::all(client.clone()).get_opt(&first_node).await.ok()??;
            let claim = claims.get_opt(&first_claim).await.ok()??;
            let was_tainted = tainted.lock().expect("lock").contains(&first_node);
            (refused > 0
                && was_tainted
                && !is_disrupted(&node)
                && claim.metadata.deletion_timestamp.is_none()
                && claim.condition("DisruptionReason").is_none())
            .then_some(())
        },
    )
    .await;
    refusal.lift();
    let nodes: Api<Node> = Api::all(client.clone());
    let settled = wait_for(
        "one untainted, cheaper node running the small pod",
        Duration::from_secs(240),
        || async {
            let claims = pool_claims(&client, POOL).await;
            let pool_nodes = nodes
                .list(&ListParams::default().labels(&format!("test-pool={POOL}")))
                .await
                .ok()?
                .items;
            let running = running_pods(&client, NAMESPACE).await;
            (claims.len() == 1
                && claims[0].name_any() != first_claim
                && pool_nodes.len() == 1
                && !is_disrupted(&pool_nodes[0])
                && running.len() == 1
                && running[0].spec.as_ref()?.node_name.as_deref()
                    == Some(pool_nodes[0].name_any().as_str()))
            .then_some(pool_nodes[0].name_any())
        },
    )
    .await;
    watch.abort();
    assert_ne!(settled, first_node);
    clean_up(&client, NAMESPACE, POOL).await;
}
