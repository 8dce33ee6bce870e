//! User data that joins an instance to the cluster, per AMI family: a nodeadm `NodeConfig` in a
//! MIME multipart document for AL2023, a `bootstrap.sh` call for AL2, TOML settings for
//! Bottlerocket, and the node class's own user data as is for Custom. The node class's
//! `userData` is merged in as upstream merges it (another MIME part for AL2023, prepended script
//! for AL2, ignored for Bottlerocket where it must be TOML the agent does not parse).

use super::nodeclass::AmiFamily;
use k8s_openapi::api::core::v1::Taint;
use std::collections::BTreeMap;
use std::fmt::Write;

/// What a node needs to find and trust the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterBootstrap {
    pub name: String,
    /// `https://…` of the API server.
    pub endpoint: String,
    /// Base64 PEM of the cluster CA, as EKS returns it.
    pub ca_bundle: String,
    /// The service CIDR (nodeadm's `cidr`).
    pub service_cidr: String,
}

/// Everything that goes into one node's user data.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeBootstrap<'a> {
    pub cluster: &'a ClusterBootstrap,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub max_pods: Option<i32>,
    pub custom: Option<&'a str>,
}

fn taint_flag(taints: &[Taint]) -> String {
    taints
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.as_deref().unwrap_or_default(),
                t.effect
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn label_flag(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The user data text (not yet base64-encoded).
pub fn render(family: AmiFamily, node: &NodeBootstrap<'_>) -> String {
    let c = node.cluster;
    let mut flags = Vec::new();
    if !node.labels.is_empty() {
        flags.push(format!("--node-labels={}", label_flag(&node.labels)));
    }
    if !node.taints.is_empty() {
        flags.push(format!(
            "--register-with-taints={}",
            taint_flag(&node.taints)
        ));
    }
    match family {
        AmiFamily::AL2023 => {
            let mut out = String::from(
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n",
            );
            if let Some(custom) = node.custom {
                let _ = write!(
                    out,
                    "--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{custom}\n\n"
                );
            }
            let _ = write!(
                out,
                "--//\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {}\n    apiServerEndpoint: {}\n    certificateAuthority: {}\n    cidr: {}\n  kubelet:\n",
                c.name, c.endpoint, c.ca_bundle, c.service_cidr
            );
            if let Some(max_pods) = node.max_pods {
                let _ = write!(out, "    config:\n      maxPods: {max_pods}\n");
            }
            if !flags.is_empty() {
                out.push_str("    flags:\n");
                for flag in &flags {
                    let _ = writeln!(out, "      - {flag:?}");
                }
            }
            out.push_str("\n--//--\n");
            out
        }
        AmiFamily::AL2 => {
            let mut out = String::from(
                "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
            );
            if let Some(custom) = node.custom {
                let _ = writeln!(out, "{custom}");
            }
            let mut kubelet_args = flags.join(" ");
            if let Some(max_pods) = node.max_pods {
                kubelet_args.push_str(&format!(" --max-pods={max_pods}"));
            }
            let _ = writeln!(
                out,
                "/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}' --b64-cluster-ca '{}' --use-max-pods false --kubelet-extra-args '{}'",
                c.name,
                c.endpoint,
                c.ca_bundle,
                kubelet_args.trim()
            );
            out
        }
        AmiFamily::Bottlerocket => {
            let mut out = format!(
                "[settings.kubernetes]\ncluster-name = {:?}\napi-server = {:?}\ncluster-certificate = {:?}\n",
                c.name, c.endpoint, c.ca_bundle
            );
            if let Some(max_pods) = node.max_pods {
                let _ = writeln!(out, "max-pods = {max_pods}");
            }
            if !node.labels.is_empty() {
                out.push_str("\n[settings.kubernetes.node-labels]\n");
                for (k, v) in &node.labels {
                    let _ = writeln!(out, "{k:?} = {v:?}");
                }
            }
            if !node.taints.is_empty() {
                out.push_str("\n[settings.kubernetes.node-taints]\n");
                let mut by_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
                for t in &node.taints {
                    by_key.entry(&t.key).or_default().push(format!(
                        "{}:{}",
                        t.value.as_deref().unwrap_or_default(),
                        t.effect
                    ));
                }
                for (k, values) in by_key {
                    let _ = writeln!(out, "{k:?} = {values:?}");
                }
            }
            out
        }
        AmiFamily::Custom => node.custom.unwrap_or_default().to_owned(),
    }
}

/// Standard base64 with padding (what EC2 expects for `UserData`).
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterBootstrap {
        ClusterBootstrap {
            name: "demo".into(),
            endpoint: "https://ABC.eks.amazonaws.com".into(),
            ca_bundle: "Q0E=".into(),
            service_cidr: "10.100.0.0/16".into(),
        }
    }

    #[test]
    fn al2023_user_data_is_a_nodeadm_node_config_with_labels_and_taints() {
        let cluster = cluster();
        let node = NodeBootstrap {
            cluster: &cluster,
            labels: [("karpenter.sh/nodepool".to_owned(), "default".to_owned())]
                .into_iter()
                .collect(),
            taints: vec![Taint {
                key: "karpenter.sh/unregistered".into(),
                effect: "NoExecute".into(),
                ..Taint::default()
            }],
            max_pods: Some(110),
            custom: None,
        };
        let text = render(AmiFamily::AL2023, &node);
        assert!(text.contains("kind: NodeConfig"));
        assert!(text.contains("apiServerEndpoint: https://ABC.eks.amazonaws.com"));
        assert!(text.contains("maxPods: 110"));
        assert!(text.contains("--register-with-taints=karpenter.sh/unregistered=:NoExecute"));
        assert!(text.contains("--node-labels=karpenter.sh/nodepool=default"));
        let al2 = render(AmiFamily::AL2, &node);
        assert!(al2.contains("/etc/eks/bootstrap.sh 'demo'"));
        let br = render(AmiFamily::Bottlerocket, &node);
        assert!(br.contains("[settings.kubernetes.node-taints]"));
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
