//! A bad manifest is rejected by the API server, before any controller sees it, with a message
//! that names the field and says what is wrong.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::rig::rig;

/// A NodePool whose requirements (YAML flow list) and disruption are spliced in.
fn node_pool(name: &str, requirements: &str, disruption: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  template:
    spec:
      requirements: {requirements}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
  disruption: {disruption}
"#
    )
}

/// Submits `manifest` with a server-side dry run and returns the rejection message.
fn rejection(manifest: &str) -> String {
    let out = rig().kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], manifest);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "the API server accepted an invalid manifest:\n{manifest}"
    );
    stderr
}

fn assert_rejected(manifest: &str, field: &str, reason: &str) {
    let message = rejection(manifest);
    assert!(
        message.contains(field),
        "the error does not name {field}:\n{message}"
    );
    assert!(
        message.contains(reason),
        "the error does not say {reason:?}:\n{message}"
    );
}

#[test]
fn a_valid_node_pool_passes_the_same_checks() {
    let manifest = node_pool(
        "valid",
        r#"[{key: kubernetes.io/arch, operator: In, values: [amd64], minValues: 1}, {key: example.com/gen, operator: Gte, values: ["3"]}]"#,
        "{consolidateAfter: 30s}",
    );
    let out = rig().kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], &manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_unknown_operator_is_rejected() {
    let manifest = node_pool(
        "bad-operator",
        "[{key: kubernetes.io/arch, operator: Like, values: [amd64]}]",
        "{consolidateAfter: 0s}",
    );
    assert_rejected(
        &manifest,
        "spec.template.spec.requirements[0].operator",
        "Unsupported value: \"Like\"",
    );
}

#[test]
fn in_without_values_is_rejected() {
    let manifest = node_pool(
        "in-no-values",
        "[{key: kubernetes.io/arch, operator: In}]",
        "{consolidateAfter: 0s}",
    );
    assert_rejected(
        &manifest,
        "spec.template.spec.requirements",
        "requirements with operator 'In' must have a value defined",
    );
}

#[test]
fn min_values_above_the_number_of_values_is_rejected() {
    let manifest = node_pool(
        "min-values",
        "[{key: kubernetes.io/arch, operator: In, values: [amd64], minValues: 2}]",
        "{consolidateAfter: 0s}",
    );
    assert_rejected(
        &manifest,
        "spec.template.spec.requirements",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    );
}

#[test]
fn gt_with_a_non_integer_is_rejected() {
    let manifest = node_pool(
        "gt-text",
        r#"[{key: example.com/gen, operator: Gt, values: ["three"]}]"#,
        "{consolidateAfter: 0s}",
    );
    assert_rejected(
        &manifest,
        "spec.template.spec.requirements",
        "must have a single positive integer value",
    );
}

#[test]
fn gt_with_two_values_is_rejected() {
    let manifest = node_pool(
        "gt-two",
        r#"[{key: example.com/gen, operator: Lte, values: ["1", "2"]}]"#,
        "{consolidateAfter: 0s}",
    );
    assert_rejected(
        &manifest,
        "spec.template.spec.requirements",
        "must have a single positive integer value",
    );
}

#[test]
fn an_unknown_consolidation_policy_is_rejected() {
    let manifest = node_pool(
        "bad-policy",
        "[]",
        "{consolidationPolicy: WhenIdle, consolidateAfter: 0s}",
    );
    assert_rejected(
        &manifest,
        "spec.disruption.consolidationPolicy",
        "Unsupported value: \"WhenIdle\"",
    );
}

#[test]
fn a_missing_node_class_ref_is_rejected() {
    let manifest = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: no-class
spec:
  template:
    spec:
      requirements: []
"#;
    assert_rejected(
        manifest,
        "spec.template.spec.nodeClassRef",
        "Required value",
    );
}

#[test]
fn a_restricted_label_in_requirements_is_rejected() {
    let manifest = node_pool(
        "hostname",
        "[{key: kubernetes.io/hostname, operator: In, values: [a]}]",
        "{consolidateAfter: 0s}",
    );
    assert_rejected(
        &manifest,
        "spec.template.spec.requirements",
        "label \"kubernetes.io/hostname\" is restricted",
    );
}

#[test]
fn a_budget_schedule_without_duration_is_rejected() {
    let manifest = node_pool(
        "budget",
        "[]",
        r#"{consolidateAfter: 0s, budgets: [{nodes: "0", schedule: "@daily"}]}"#,
    );
    assert_rejected(
        &manifest,
        "spec.disruption.budgets",
        "'schedule' must be set with 'duration'",
    );
}

/// A static NodePool (`replicas`) with extra spec fields spliced in.
fn static_pool(name: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  replicas: 2
  template:
    spec:
      requirements: []
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
{extra}
"#
    )
}

#[test]
fn a_static_pool_may_limit_only_its_node_count_and_has_no_weight() {
    let ok = rig().kubectl_with_input(
        &["create", "--dry-run=server", "-f", "-"],
        &static_pool("static-ok", "  limits: {nodes: \"3\"}"),
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_rejected(
        &static_pool("static-cpu", "  limits: {cpu: \"100\"}"),
        "spec",
        "only 'limits.nodes' is supported on static NodePools",
    );
    assert_rejected(
        &static_pool("static-weight", "  weight: 10"),
        "spec",
        "'weight' is not supported on static NodePools",
    );
}

#[test]
fn a_pool_cannot_switch_between_static_and_dynamic() {
    let rig = rig();
    let created = rig.kubectl_with_input(&["apply", "-f", "-"], &static_pool("static-switch", ""));
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let out = rig
        .kubectl()
        .args([
            "patch",
            "nodepool",
            "static-switch",
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/spec/replicas"}]"#,
        ])
        .output()
        .expect("kubectl runs");
    let message = String::from_utf8_lossy(&out.stderr).into_owned();
    rig.kubectl_ok(&["delete", "nodepool", "static-switch", "--wait=false"]);
    assert!(!out.status.success(), "a static pool became dynamic");
    assert!(
        message.contains("Cannot transition NodePool between static"),
        "{message}"
    );
}

#[test]
fn an_ec2_node_class_with_both_role_and_instance_profile_is_rejected() {
    let manifest = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: both
spec:
  role: KarpenterNodeRole-demo
  instanceProfile: KarpenterNodeInstanceProfile-demo
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"#;
    assert_rejected(
        manifest,
        "spec",
        "must specify exactly one of ['role', 'instanceProfile']",
    );
}

#[test]
fn a_node_claim_spec_cannot_change() {
    let rig = rig();
    let claim = |arch: &str| {
        format!(
            r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: immutable-check
spec:
  requirements: [{{key: kubernetes.io/arch, operator: In, values: [{arch}]}}]
  nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
"#
        )
    };
    let created = rig.kubectl_with_input(&["apply", "-f", "-"], &claim("amd64"));
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let changed = rig.kubectl_with_input(&["apply", "-f", "-"], &claim("arm64"));
    let message = String::from_utf8_lossy(&changed.stderr).into_owned();
    rig.kubectl_ok(&["delete", "nodeclaim", "immutable-check", "--wait=false"]);
    assert!(!changed.status.success(), "a NodeClaim's spec was changed");
    assert!(message.contains("spec is immutable"), "{message}");
}

/// An EC2NodeClass with `extra` spliced into its spec.
fn ec2_node_class(name: &str, ami: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: {name}
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms: [{ami}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
{extra}
"#
    )
}

#[test]
fn a_taint_with_an_effect_the_kubelet_does_not_know_is_rejected() {
    let manifest = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: bad-taint
spec:
  template:
    spec:
      taints: [{key: dedicated, value: gpu, effect: NoSchedul}]
      requirements: []
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"#;
    assert_rejected(
        manifest,
        "spec.template.spec.taints[0].effect",
        "Unsupported value",
    );
}

#[test]
fn an_ami_family_that_contradicts_the_alias_and_a_windows_version_pin_are_rejected() {
    assert_rejected(
        &ec2_node_class(
            "family-clash",
            "{alias: al2023@latest}",
            "  amiFamily: Bottlerocket",
        ),
        "spec",
        "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    );
    assert_rejected(
        &ec2_node_class("windows-pin", "{alias: windows2022@v20240101}", ""),
        "alias",
        "windows families may only specify version 'latest'",
    );
}

#[test]
fn a_volume_without_size_or_snapshot_is_rejected() {
    assert_rejected(
        &ec2_node_class(
            "no-size",
            "{alias: al2023@latest}",
            "  blockDeviceMappings: [{deviceName: /dev/xvda, ebs: {volumeType: gp3}}]",
        ),
        "ebs",
        "snapshotID or volumeSize must be defined",
    );
}

/// The object as the API server would store it; fails the test if the server refuses it.
fn accepted(manifest: &str) -> serde_json::Value {
    let out = rig().kubectl_with_input(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        manifest,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn kubelet_settings_without_a_typed_field_are_kept_not_pruned() {
    let created = accepted(&ec2_node_class(
        "open-kubelet",
        "{alias: al2023@latest}",
        "  kubelet: {maxPods: 58, registryPullQPS: 10, containerLogMaxSize: 50Mi}",
    ));
    assert_eq!(
        created["spec"]["kubelet"],
        serde_json::json!({"maxPods": 58, "registryPullQPS": 10, "containerLogMaxSize": "50Mi"})
    );
}

#[test]
fn settings_not_supported_yet_are_refused_with_a_message_saying_so() {
    assert_rejected(
        &ec2_node_class(
            "reservations",
            "{alias: al2023@latest}",
            "  capacityReservationSelectorTerms: [{id: cr-0123456789abcdef0}]",
        ),
        "capacityReservationSelectorTerms",
        "capacityReservationSelectorTerms is not supported by kubectl-karpenter yet",
    );
    for field in [
        "cpuOptions: {nestedVirtualization: enabled}",
        "networkInterfaces: [{networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}]",
        "ipPrefixCount: 2",
    ] {
        let name = field.split(':').next().unwrap();
        assert_rejected(
            &ec2_node_class(
                &name.to_lowercase(),
                "{alias: al2023@latest}",
                &format!("  {field}"),
            ),
            &format!("spec.{name}"),
            "this field is not supported by kubectl-karpenter yet: remove it",
        );
    }
    assert_rejected(
        &gce_node_class(
            "channel",
            "{family: ContainerOptimizedOS, channel: stable}",
            "",
        ),
        "channel",
        "only 'cluster' is supported by kubectl-karpenter yet",
    );
}

fn gce_node_class(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: karpenter.k8s.gcp/v1alpha1\nkind: GCENodeClass\nmetadata:\n  name: {name}\nspec:\n  imageSelectorTerms: [{image}]\n{extra}\n"
    )
}

#[test]
fn a_gce_node_class_is_checked_by_the_gcp_providers_rules() {
    for (name, image, extra, field, reason) in [
        (
            "bare-family",
            "{family: ContainerOptimizedOS}",
            "",
            "imageSelectorTerms",
            "family requires either channel or version to be set",
        ),
        (
            "two-selectors",
            "{alias: ContainerOptimizedOS@latest, id: my-image}",
            "",
            "imageSelectorTerms",
            "exactly one of alias, id, or family must be set",
        ),
        (
            "cos-pin",
            "{family: ContainerOptimizedOS, version: cos-stable-117}",
            "",
            "imageSelectorTerms",
            "ContainerOptimizedOS version must be 'latest' or 'milestone.build.build.build'",
        ),
        (
            "reserved-metadata",
            "{alias: ContainerOptimizedOS@latest}",
            "  metadata: {kube-env: \"KUBELET_ARGS: --v=9\"}",
            "spec.metadata",
            "spec.metadata contains a reserved GKE metadata key",
        ),
        (
            "iops",
            "{alias: ContainerOptimizedOS@latest}",
            "  disks: [{boot: true, category: pd-balanced, sizeGiB: 100, provisionedIOPS: 5000}]",
            "disks",
            "provisionedIOPS is only applicable for pd-extreme",
        ),
        (
            "eviction",
            "{alias: ContainerOptimizedOS@latest}",
            "  kubeletConfiguration: {evictionHard: {memory.available: lots}}",
            "evictionHard",
            "evictionHard values must be a percentage or a resource.Quantity",
        ),
        (
            "tag",
            "{alias: ContainerOptimizedOS@latest}",
            "  networkTags: [Not_A_Tag]",
            "networkTags",
            "should match",
        ),
    ] {
        assert_rejected(&gce_node_class(name, image, extra), field, reason);
    }
    let created = accepted(&gce_node_class(
        "pinned",
        "{family: Ubuntu2404, version: v20260416}",
        "  disks: [{boot: true, category: hyperdisk-balanced, provisionedIOPS: 3000, provisionedThroughput: 140}, {category: pd-balanced, secondaryBootImage: projects/p/global/images/preload, secondaryBootMode: CONTAINER_IMAGE_CACHE}]",
    ));
    assert_eq!(
        created["spec"]["gpuDriverVersion"], "default",
        "the provider's default"
    );
}
