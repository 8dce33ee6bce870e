//! A NodeClaim the API server refuses (here an admission policy; in a cluster as often a
//! ResourceQuota on NodeClaims or a policy engine): the pods it was for hear why, nothing is
//! counted as capacity that does not exist, the agent does not hammer the API server, and the
//! pods run once the refusal is lifted.

use super::{
    Agent, apply, clean_up, deployment, exclusive, failed_provisioning, node_pool, pool_claims,
    provided_for, running_pods, wait_for,
};
use karpenter_test_support::rig::rig;
use std::time::Duration;

const POOL: &str = "refused-pool";
const NAMESPACE: &str = "refused-test";
const MESSAGE: &str = "NodeClaims of refused-pool are not allowed in this cluster";

fn policy() -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: refuse-claims}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [karpenter.sh]
        apiVersions: ["*"]
        operations: [CREATE]
        resources: [nodeclaims]
  validations:
    - expression: "!has(object.metadata.labels) || !('karpenter.sh/nodepool' in object.metadata.labels) || object.metadata.labels['karpenter.sh/nodepool'] != '{POOL}'"
      message: "{MESSAGE}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: refuse-claims}}
spec:
  policyName: refuse-claims
  validationActions: [Deny]
"#
    )
}

/// The policy in force until dropped, so a failing test leaves no refusal behind for the next.
struct Refusal;

impl Refusal {
    fn lift(&self) {
        rig().kubectl_ok(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            "refuse-claims",
            "--ignore-not-found",
        ]);
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        self.lift();
    }
}

/// A NodeClaim of the pool, for a server-side dry run.
fn probe_claim() -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: refused-probe
  labels: {{karpenter.sh/nodepool: {POOL}}}
spec:
  requirements:
    - {{key: kubernetes.io/os, operator: In, values: [linux]}}
  nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {POOL}}}
"#
    )
}

/// POSTs of NodeClaims the API server did not answer with 201, as it counts them.
fn refused_creates() -> f64 {
    rig()
        .kubectl_ok(&["get", "--raw", "/metrics"])
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"nodeclaims\"")
                && l.contains("verb=\"POST\"")
                && !l.contains("code=\"201\"")
                && !l.contains("dry_run=\"All\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_node_claim_is_reported_on_its_pods_and_planned_again_once_allowed() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    apply(&node_pool(POOL, "{}"));
    apply(&policy());
    let refusal = Refusal;
    // The policy is enforced once the API server has compiled it: a second or so.
    wait_for(
        "the admission policy to refuse the pool's claims",
        Duration::from_secs(30),
        || async {
            let out = rig()
                .kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], &probe_claim());
            String::from_utf8_lossy(&out.stderr)
                .contains(MESSAGE)
                .then_some(())
        },
    )
    .await;
    let refused_before = refused_creates();
    let _agent = Agent::start().await;
    apply(&deployment(NAMESPACE, "refused", POOL, 2, "1"));

    let said = failed_provisioning(&client, NAMESPACE, None, MESSAGE).await;
    assert!(
        said.contains("planned again"),
        "the pod is told what happens next: {said}"
    );
    // Two more rounds' worth of time: refused claims must not count as capacity, nor be
    // retried in a loop.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(pool_claims(&client, POOL).await.is_empty());
    let refused = refused_creates() - refused_before;
    assert!(
        (1.0..=6.0).contains(&refused),
        "{refused} refused creates in about 20 s: one per round, rounds every 10 s while pods wait"
    );

    refusal.lift();
    wait_for("both pods running", Duration::from_secs(90), || async {
        (running_pods(&client, NAMESPACE).await.len() == 2).then_some(())
    })
    .await;
    let claims = pool_claims(&client, POOL).await;
    let planned = provided_for(&claims);
    assert_eq!(
        planned.len(),
        2,
        "each pod is provided for once after the refusals: {planned:?}"
    );
    clean_up(&client, NAMESPACE, POOL).await;
}
