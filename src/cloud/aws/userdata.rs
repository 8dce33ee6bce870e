//! User data that joins an instance to the cluster, per AMI family: a nodeadm `NodeConfig` in a
//! MIME multipart document for AL2023, a `bootstrap.sh` call for AL2, TOML settings for
//! Bottlerocket, and the node class's own user data as is for Custom. The node class's
//! `userData` is merged in as upstream merges it (another MIME part for AL2023, prepended script
//! for AL2, ignored for Bottlerocket where it must be TOML the agent does not parse).
//!
//! The node class's `kubelet` reaches the kubelet as upstream's bootstrappers send it
//! (`pkg/providers/amifamily/bootstrap`): on AL2023 the whole map is nodeadm's
//! `spec.kubelet.config` (a `KubeletConfiguration`, so every field applies); on AL2 the typed
//! fields are `bootstrap.sh` flags (`--dns-cluster-ip`, `--kubelet-extra-args`) and any other
//! field is merged into `/etc/kubernetes/kubelet/kubelet-config.json` first; on Bottlerocket
//! each typed field is its `settings.kubernetes` key (Bottlerocket has none for `podsPerCore`
//! and fields beyond the typed ones, which [`unsupported`] names).
//!
//! No value from a NodePool, a node class or the cluster goes into the text unquoted: each is
//! encoded for the language it lands in ([`sh`] for AL2's root shell script, JSON strings in
//! nodeadm's YAML, [`toml`] strings in Bottlerocket's settings). A taint value or a kubelet
//! setting with a quote in it is then a literal, never a command: user data runs as root.

use crate::apis::KubeletConfiguration;
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
    /// The node class's `kubelet`.
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// `instanceStorePolicy: RAID0`: the instance store volumes become one RAID0 array for the
    /// kubelet and containerd (nodeadm's `localStorage.strategy`, bootstrap.sh's `--local-disks`).
    pub raid0: bool,
    pub custom: Option<&'a str>,
}

/// How user data is written, from `amiFamily` or the alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Custom,
}

impl AmiFamily {
    pub(super) fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "al2" => Some(Self::AL2),
            "al2023" => Some(Self::AL2023),
            "bottlerocket" => Some(Self::Bottlerocket),
            "custom" => Some(Self::Custom),
            _ => None,
        }
    }
}

/// The kubelet fields a family's bootstrap cannot apply (Bottlerocket: `podsPerCore` and any
/// field beyond the typed ones); empty for the others.
pub fn unsupported(family: AmiFamily, kubelet: &KubeletConfiguration) -> Vec<String> {
    if family != AmiFamily::Bottlerocket {
        return Vec::new();
    }
    let mut out: Vec<String> = kubelet.other.keys().cloned().collect();
    if kubelet.pods_per_core.is_some() {
        out.insert(0, "podsPerCore".to_owned());
    }
    out
}

/// The AL2 AMI's kubelet configuration file, which bootstrap.sh completes.
const KUBELET_CONFIG: &str = "/etc/kubernetes/kubelet/kubelet-config.json";

/// `word` as one shell word: single-quoted where it needs quoting (shlex's POSIX rules).
pub fn sh(word: &str) -> String {
    // A NUL cannot be in an argument at all (and is the one input shlex refuses): drop it.
    let word = word.replace('\0', "");
    shlex::try_quote(&word)
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_default()
}

/// `text` as a YAML double-quoted scalar.
fn yaml(text: &str) -> String {
    yaml_json(&serde_json::Value::from(text))
}

/// JSON as YAML (flow style). YAML 1.2 reads JSON with one exception: characters YAML does not
/// allow in a document (DEL, the C1 controls but NEL, U+FFFE/U+FFFF), which JSON leaves as
/// they are; in a JSON text they can only be inside strings, where `\uXXXX` means the same.
fn yaml_json(value: &serde_json::Value) -> String {
    let json = value.to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        let printable = matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..);
        if printable {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{:04X}", u32::from(c));
        }
    }
    out
}

/// `text` as a TOML string (also how a key that is not bare is written).
pub(crate) fn toml(text: &str) -> String {
    toml_edit::Value::from(text).to_string().trim().to_owned()
}

/// `text` as a TOML key: bare where TOML allows, else a one-line quoted key (a value may span
/// lines, a key may not).
pub(crate) fn toml_key(text: &str) -> String {
    toml_edit::Key::new(text).to_string().trim().to_owned()
}

/// A list of TOML strings.
fn toml_list<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(|i| toml(i.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// The kubelet map as nodeadm's `config`, indented under `kubelet:`.
fn node_config_kubelet(k: &KubeletConfiguration) -> String {
    let Ok(value) = serde_json::to_value(k) else {
        return String::new();
    };
    if value.as_object().is_none_or(serde_json::Map::is_empty) {
        return String::new();
    }
    // A JSON object is YAML (flow style), which nodeadm reads; one line keeps the
    // indentation trivially right.
    format!("    config: {}\n", yaml_json(&value))
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
        AmiFamily::AL2023 => al2023(node, &flags),
        AmiFamily::AL2 => al2(node, flags),
        AmiFamily::Bottlerocket => bottlerocket(node),
        AmiFamily::Custom => node.custom.unwrap_or_default().to_owned(),
    }
}

/// AL2023's user data: a MIME multipart with the custom script, then nodeadm's NodeConfig.
fn al2023(node: &NodeBootstrap<'_>, flags: &[String]) -> String {
    let c = node.cluster;
    let mut out =
        String::from("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n");
    if let Some(custom) = node.custom {
        let _ = write!(
            out,
            "--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{custom}\n\n"
        );
    }
    let _ = write!(
        out,
        "--//\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: {}\n    apiServerEndpoint: {}\n    certificateAuthority: {}\n    cidr: {}\n",
        yaml(&c.name),
        yaml(&c.endpoint),
        yaml(&c.ca_bundle),
        yaml(&c.service_cidr)
    );
    if node.raid0 {
        out.push_str("  instance:\n    localStorage:\n      strategy: RAID0\n");
    }
    out.push_str("  kubelet:\n");
    if let Some(kubelet) = node.kubelet {
        out.push_str(&node_config_kubelet(kubelet));
    }
    if !flags.is_empty() {
        out.push_str("    flags:\n");
        for flag in flags {
            let _ = writeln!(out, "      - {}", yaml(flag));
        }
    }
    out.push_str("\n--//--\n");
    out
}

/// AL2's user data: a shell script that runs the custom script, then bootstrap.sh with the
/// kubelet's flags.
fn al2(node: &NodeBootstrap<'_>, mut flags: Vec<String>) -> String {
    let c = node.cluster;
    let mut out = String::from(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    if let Some(custom) = node.custom {
        let _ = writeln!(out, "{custom}");
    }
    let mut extra = String::new();
    if let Some(kubelet) = node.kubelet {
        flags.extend(crate::cloud::kubelet_flags::flags(kubelet));
        if let Some(dns) = kubelet.cluster_dns.first() {
            let _ = write!(extra, " --dns-cluster-ip {}", sh(dns));
        }
        if !kubelet.other.is_empty() {
            // The fields without a flag go into the kubelet's config file, which
            // bootstrap.sh then completes; jq ships on the EKS AL2 AMI.
            let other = serde_json::Value::from(
                kubelet
                    .other
                    .clone()
                    .into_iter()
                    .collect::<serde_json::Map<_, _>>(),
            );
            // The JSON travels as one quoted argument, never as part of jq's program.
            let _ = writeln!(
                out,
                "jq --argjson extra {} '. + $extra' {KUBELET_CONFIG} > {KUBELET_CONFIG}.new && mv {KUBELET_CONFIG}.new {KUBELET_CONFIG}",
                sh(&other.to_string())
            );
        }
    }
    let _ = writeln!(
        out,
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {} --b64-cluster-ca {} --use-max-pods false{extra}{} --kubelet-extra-args {}",
        sh(&c.name),
        sh(&c.endpoint),
        sh(&c.ca_bundle),
        if node.raid0 {
            " --local-disks raid0"
        } else {
            ""
        },
        sh(&flags.join(" "))
    );
    out
}

/// Bottlerocket's user data: TOML settings, labels and taints as tables of their own.
fn bottlerocket(node: &NodeBootstrap<'_>) -> String {
    let c = node.cluster;
    let mut out = format!(
        "[settings.kubernetes]\ncluster-name = {}\napi-server = {}\ncluster-certificate = {}\n",
        toml(&c.name),
        toml(&c.endpoint),
        toml(&c.ca_bundle)
    );
    if let Some(kubelet) = node.kubelet {
        out.push_str(&bottlerocket_kubelet(kubelet));
    }
    if !node.labels.is_empty() {
        out.push_str("\n[settings.kubernetes.node-labels]\n");
        for (k, v) in &node.labels {
            let _ = writeln!(out, "{} = {}", toml_key(k), toml(v));
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
            let _ = writeln!(out, "{} = {}", toml_key(k), toml_list(&values));
        }
    }
    out
}

/// Bottlerocket's `settings.kubernetes` keys for the typed kubelet fields (upstream's
/// `bottlerocketsettings.go`); the tables come after the plain keys, as TOML requires.
fn bottlerocket_kubelet(k: &KubeletConfiguration) -> String {
    let mut out = String::new();
    if let Some(n) = k.max_pods {
        let _ = writeln!(out, "max-pods = {n}");
    }
    if !k.cluster_dns.is_empty() {
        let _ = writeln!(out, "cluster-dns-ip = {}", toml_list(&k.cluster_dns));
    }
    if let Some(n) = k.eviction_max_pod_grace_period {
        let _ = writeln!(out, "eviction-max-pod-grace-period = {n}");
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        let _ = writeln!(out, "image-gc-high-threshold-percent = {n}");
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        let _ = writeln!(out, "image-gc-low-threshold-percent = {n}");
    }
    if let Some(b) = k.cpu_cfs_quota {
        let _ = writeln!(out, "cpu-cfs-quota-enforced = {b}");
    }
    for (table, map) in [
        ("system-reserved", &k.system_reserved),
        ("kube-reserved", &k.kube_reserved),
        ("eviction-hard", &k.eviction_hard),
        ("eviction-soft", &k.eviction_soft),
        ("eviction-soft-grace-period", &k.eviction_soft_grace_period),
    ] {
        if map.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n[settings.kubernetes.{table}]");
        for (key, value) in map {
            let _ = writeln!(out, "{} = {}", toml_key(key), toml(value));
        }
    }
    out
}

/// Standard base64 with padding (what EC2 expects for `UserData`).
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn cluster() -> ClusterBootstrap {
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
        let kubelet = KubeletConfiguration {
            max_pods: Some(110),
            ..KubeletConfiguration::default()
        };
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
            kubelet: Some(&kubelet),
            raid0: false,
            custom: None,
        };
        let text = render(AmiFamily::AL2023, &node);
        assert!(text.contains("kind: NodeConfig"));
        assert!(text.contains("apiServerEndpoint: \"https://ABC.eks.amazonaws.com\""));
        assert!(text.contains("config: {\"maxPods\":110}"), "{text}");
        assert!(text.contains("--register-with-taints=karpenter.sh/unregistered=:NoExecute"));
        assert!(text.contains("--node-labels=karpenter.sh/nodepool=default"));
        let al2 = render(AmiFamily::AL2, &node);
        assert!(al2.contains("/etc/eks/bootstrap.sh demo --apiserver-endpoint"));
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

#[cfg(test)]
mod kubelet_tests {
    use super::tests::cluster;
    use super::*;

    fn kubelet() -> KubeletConfiguration {
        serde_json::from_value(serde_json::json!({
            "maxPods": 58, "podsPerCore": 4, "clusterDNS": ["10.0.0.10"],
            "systemReserved": {"cpu": "100m", "memory": "100Mi"},
            "evictionHard": {"memory.available": "5%"},
            "imageGCHighThresholdPercent": 85, "cpuCFSQuota": false,
            "registryPullQPS": 10, "containerLogMaxSize": "50Mi",
        }))
        .unwrap()
    }

    fn node<'a>(
        cluster: &'a ClusterBootstrap,
        kubelet: &'a KubeletConfiguration,
    ) -> NodeBootstrap<'a> {
        NodeBootstrap {
            cluster,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            kubelet: Some(kubelet),
            raid0: false,
            custom: None,
        }
    }

    #[test]
    fn every_kubelet_field_reaches_an_al2023_node_including_those_without_a_typed_field() {
        let (cluster, kubelet) = (cluster(), kubelet());
        let text = render(AmiFamily::AL2023, &node(&cluster, &kubelet));
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("config: "))
            .expect("a config line");
        let config: serde_json::Value =
            serde_json::from_str(line.trim_start().trim_start_matches("config: ")).unwrap();
        assert_eq!(config["maxPods"], 58);
        assert_eq!(config["clusterDNS"], serde_json::json!(["10.0.0.10"]));
        assert_eq!(config["evictionHard"]["memory.available"], "5%");
        assert_eq!(config["registryPullQPS"], 10);
        assert_eq!(config["containerLogMaxSize"], "50Mi");
    }

    #[test]
    fn an_al2_node_gets_flags_for_the_typed_fields_and_the_config_file_for_the_rest() {
        let (cluster, kubelet) = (cluster(), kubelet());
        let text = render(AmiFamily::AL2, &node(&cluster, &kubelet));
        assert!(text.contains("--dns-cluster-ip 10.0.0.10"), "{text}");
        for flag in [
            "--max-pods=58",
            "--pods-per-core=4",
            "--system-reserved=cpu=100m,memory=100Mi",
            "--eviction-hard=memory.available<5%",
            "--image-gc-high-threshold=85",
            "--cpu-cfs-quota=false",
        ] {
            assert!(text.contains(flag), "{flag} in {text}");
        }
        assert!(
            text.contains(r#"jq --argjson extra '{"containerLogMaxSize":"50Mi","registryPullQPS":10}' '. + $extra'"#),
            "{text}"
        );
        // The merge comes before bootstrap.sh reads the file.
        assert!(text.find("jq ").unwrap() < text.find("bootstrap.sh").unwrap());
    }

    #[test]
    fn a_bottlerocket_node_gets_its_settings_and_what_bottlerocket_cannot_take_is_named() {
        let (cluster, kubelet) = (cluster(), kubelet());
        let text = render(AmiFamily::Bottlerocket, &node(&cluster, &kubelet));
        assert!(text.contains("max-pods = 58"), "{text}");
        assert!(text.contains("cluster-dns-ip = [\"10.0.0.10\"]"), "{text}");
        assert!(
            text.contains("[settings.kubernetes.system-reserved]\ncpu = \"100m\""),
            "{text}"
        );
        assert!(text.contains("cpu-cfs-quota-enforced = false"), "{text}");
        assert_eq!(
            unsupported(AmiFamily::Bottlerocket, &kubelet),
            ["podsPerCore", "containerLogMaxSize", "registryPullQPS"]
        );
        assert!(unsupported(AmiFamily::AL2023, &kubelet).is_empty());
    }

    #[test]
    fn raid0_joins_the_instance_store_on_al2023_and_al2() {
        let (cluster, kubelet) = (cluster(), kubelet());
        let mut bootstrap = node(&cluster, &kubelet);
        bootstrap.raid0 = true;
        let al2023 = render(AmiFamily::AL2023, &bootstrap);
        assert!(
            al2023.contains("  instance:\n    localStorage:\n      strategy: RAID0\n  kubelet:\n"),
            "{al2023}"
        );
        assert!(render(AmiFamily::AL2, &bootstrap).contains(" --local-disks raid0 "));
    }
}
