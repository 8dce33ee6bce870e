//! Generated input against every parser and encoder that takes text from users or the cloud:
//! resource quantities, NodePools (requirements, labels, taints, budgets, durations) and the
//! manifests `convert` reads, EventBridge interruption messages, user data for each AMI family,
//! the `aws-auth` editor, and Cloud Billing Catalog SKUs. None may panic; the encoders must carry
//! every value through unchanged and never let one escape its quoting.
//!
//! CI runs 2,000 cases per target. The long run, a million per target (about N minutes on two
//! cores, see the closing notes):
//!
//! ```text
//! PROPTEST_CASES=1000000 cargo test --release -p karpenter-core --all-features --test fuzz
//! ```
//!
//! (The plugin's protobuf Node decoder has its own target, in `plugin/src/cluster/protobuf.rs`:
//! `PROPTEST_CASES=1000000 cargo test --release -p kubectl-karpenter protobuf`.)

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use proptest::prelude::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// 2,000 cases unless `PROPTEST_CASES` says otherwise; failures are not written to disk.
fn config() -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 2_000;
    }
    config.failure_persistence = None;
    config
}

/// Text as users and clouds send it: mostly plausible (label-ish, quantity-ish), sometimes
/// anything at all, including quotes, line breaks, shell and YAML syntax and control bytes.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9._/-]{0,24}",
        2 => "[-+]?[0-9]{0,6}(\\.[0-9]{0,4})?([eE][-+]?[0-9]{1,3})?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|%)?",
        2 => "[ -~]{0,24}",
        1 => prop::sample::select(vec![
            "'", "\"", "\\", "$(reboot)", "`id`", "'; rm -rf / #", "\n--//\n", "\nkey: value",
            "a\u{0}b", "\u{7f}", "\u{1b}[0m", "]]>", "${HOME}", "%n%s", "#", ": ", "- ", "{", "}",
        ])
        .prop_map(str::to_owned),
        1 => any::<String>(),
    ]
}

fn map_of_text() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(text(), text(), 0..4)
}

fn operator() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte",
        ])
        .prop_map(str::to_owned),
        1 => text(),
    ]
}

fn requirement() -> impl Strategy<Value = Value> {
    (
        text(),
        operator(),
        prop::collection::vec(text(), 0..4),
        prop::option::of(-2_i64..5),
    )
        .prop_map(|(key, operator, values, min_values)| {
            let mut r = json!({"key": key, "operator": operator, "values": values});
            if let Some(n) = min_values {
                r["minValues"] = json!(n);
            }
            r
        })
}

fn taint() -> impl Strategy<Value = Value> {
    (
        text(),
        prop::option::of(text()),
        prop_oneof![
            3 => prop::sample::select(vec!["NoSchedule", "PreferNoSchedule", "NoExecute"]).prop_map(str::to_owned),
            1 => text(),
        ],
    )
        .prop_map(|(key, value, effect)| json!({"key": key, "value": value, "effect": effect}))
}

/// A NodePool as a user (or a newer CRD) might write it, valid or not.
fn node_pool() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(requirement(), 0..4),
        map_of_text(),
        prop::collection::vec(taint(), 0..3),
        (text(), text(), text(), text()),
        prop::option::of(text()),
    )
        .prop_map(
            |(requirements, labels, taints, (after, nodes, schedule, duration), cpu)| {
                let mut pool = json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "fuzz"},
                    "spec": {
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {
                                "requirements": requirements, "taints": taints,
                                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                                "expireAfter": after,
                            },
                        },
                        "disruption": {
                            "consolidateAfter": after,
                            "budgets": [{"nodes": nodes, "schedule": schedule, "duration": duration}],
                        },
                    },
                });
                if let Some(cpu) = cpu {
                    pool["spec"]["limits"] = json!({"cpu": cpu});
                }
                pool
            },
        )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_quantity_text_parses_or_is_refused_without_a_panic(text in text()) {
        let milli = karpenter_core::resources::parse_milli(&text);
        for resource in ["cpu", "memory", "pods", "nvidia.com/gpu"] {
            if let Ok(amount) = karpenter_core::resources::parse(resource, &text) {
                // What parsed formats and parses back to the same amount.
                let formatted = karpenter_core::resources::format(resource, amount);
                prop_assert_eq!(karpenter_core::resources::parse(resource, &formatted), Ok(amount));
                prop_assert!(milli.is_ok());
            }
        }
    }

    #[test]
    fn any_node_pool_decodes_or_is_refused_and_what_decodes_schedules_without_a_panic(pool in node_pool()) {
        use karpenter_core::apis::NodePool;
        let Ok(pool) = serde_json::from_value::<NodePool>(pool) else { return Ok(()) };
        let _ = karpenter_core::scheduling::Requirements::from_api(&pool.spec.template.spec.requirements);
        let _ = pool.hash();
        let now = k8s_openapi::jiff::Timestamp::now();
        for budget in &pool.spec.disruption.budgets {
            let _ = budget.nodes_allowed(17);
            let _ = budget.is_active(now);
        }
        let toleration = k8s_openapi::api::core::v1::Toleration {
            operator: Some("Exists".to_owned()),
            ..Default::default()
        };
        let _ = karpenter_core::scheduling::taints::first_untolerated(
            &pool.spec.template.spec.taints,
            &[toleration],
        );
    }

    #[test]
    fn convert_reads_any_old_manifest_without_a_panic(pool in node_pool(), api in prop::sample::select(vec![
        "karpenter.sh/v1beta1", "karpenter.sh/v1alpha5", "karpenter.sh/v1", "karpenter.k8s.aws/v1beta1",
    ]), kind in prop::sample::select(vec!["NodePool", "Provisioner", "EC2NodeClass", "AWSNodeTemplate", "NodeClaim"])) {
        let mut object = pool;
        object["apiVersion"] = json!(api);
        object["kind"] = json!(kind);
        let _ = karpenter_core::convert::convert(vec![karpenter_core::convert::Input {
            source: "fuzz.yaml".to_owned(),
            object,
        }]);
    }
}

#[cfg(feature = "aws")]
mod aws {
    use super::*;
    use k8s_openapi::api::core::v1::Taint;
    use karpenter_core::apis::KubeletConfiguration;
    use karpenter_core::cloud::aws::interruption::{Interruption, parse_message};
    use karpenter_core::cloud::aws::nodeclass::AmiFamily;
    use karpenter_core::cloud::aws::userdata::{ClusterBootstrap, NodeBootstrap, render};

    fn kubelet() -> impl Strategy<Value = KubeletConfiguration> {
        (
            prop::collection::vec(text(), 0..3),
            map_of_text(),
            map_of_text(),
            prop::option::of(any::<i32>()),
            map_of_text(),
        )
            .prop_map(
                |(dns, reserved, eviction, max_pods, other)| KubeletConfiguration {
                    cluster_dns: dns,
                    system_reserved: reserved,
                    eviction_hard: eviction,
                    max_pods,
                    other: other
                        .into_iter()
                        .filter(|(k, _)| !KNOWN_KUBELET_KEYS.contains(&k.as_str()))
                        .map(|(k, v)| (k, Value::from(v)))
                        .collect(),
                    ..KubeletConfiguration::default()
                },
            )
    }

    /// The typed fields' names, which an untyped field cannot have.
    const KNOWN_KUBELET_KEYS: [&str; 12] = [
        "clusterDNS",
        "maxPods",
        "podsPerCore",
        "systemReserved",
        "kubeReserved",
        "evictionHard",
        "evictionSoft",
        "evictionSoftGracePeriod",
        "evictionMaxPodGracePeriod",
        "imageGCHighThresholdPercent",
        "imageGCLowThresholdPercent",
        "cpuCFSQuota",
    ];

    fn taints() -> impl Strategy<Value = Vec<Taint>> {
        prop::collection::vec(
            (text(), prop::option::of(text()), text()).prop_map(|(key, value, effect)| Taint {
                key,
                value,
                effect,
                ..Taint::default()
            }),
            0..3,
        )
    }

    fn cluster() -> ClusterBootstrap {
        ClusterBootstrap {
            name: "fuzz".to_owned(),
            endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".to_owned(),
            ca_bundle: "Q0E=".to_owned(),
            service_cidr: "10.100.0.0/16".to_owned(),
        }
    }

    /// The words of `script` from the line that starts with `command` to its end, as a POSIX
    /// shell splits them (a quoted word may span lines).
    fn words_of(script: &str, command: &str) -> Vec<String> {
        let start = script
            .find(&format!("\n{command}"))
            .unwrap_or_else(|| panic!("no {command} line in\n{script}"));
        let rest = &script[start + 1..];
        shlex::split(rest).unwrap_or_else(|| panic!("unbalanced quoting in {rest}"))
    }

    /// The NodeConfig document of an AL2023 MIME message, split at its boundary lines as a
    /// MIME reader does.
    fn node_config(user_data: &str) -> Value {
        let mut parts = vec![String::new()];
        for line in user_data.lines() {
            if line == "--//" || line == "--//--" {
                parts.push(String::new());
            } else if let Some(part) = parts.last_mut() {
                part.push_str(line);
                part.push('\n');
            }
        }
        let part = parts
            .iter()
            .find(|p| p.starts_with("Content-Type: application/node.eks.aws"))
            .expect("a NodeConfig part");
        let yaml = part.split_once("\n\n").expect("part headers").1;
        serde_saphyr::from_str::<Value>(yaml).unwrap_or_else(|e| panic!("{e} in\n{yaml}"))
    }

    /// Whether YAML allows `c` in a document (its `c-printable` set).
    fn yaml_printable(c: char) -> bool {
        matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_interruption_message_decodes_or_is_ignored_without_a_panic(
            body in prop_oneof![
                text(),
                (text(), text(), text(), text()).prop_map(|(source, kind, id, state)| json!({
                    "source": source, "detail-type": kind,
                    "detail": {"instance-id": id, "state": state, "service": "EC2",
                               "eventTypeCategory": "scheduledChange", "affectedEntities": [{"entityValue": id}]},
                }).to_string()),
            ],
        ) {
            let _ = parse_message(&body);
        }

        #[test]
        fn a_spot_warning_names_exactly_the_instance_it_carries(id in text()) {
            let body = json!({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning",
                "detail": {"instance-id": id, "instance-action": "terminate"}}).to_string();
            prop_assert_eq!(parse_message(&body), Some((Interruption::SpotInterruption, vec![id])));
        }

        #[test]
        fn al2_user_data_passes_every_value_as_one_quoted_word(
            labels in map_of_text(), taints in taints(), kubelet in kubelet(), raid0 in any::<bool>(),
        ) {
            let cluster = cluster();
            let node = NodeBootstrap { cluster: &cluster, labels: labels.clone(), taints, kubelet: Some(&kubelet), raid0, custom: None };
            let script = render(AmiFamily::AL2, &node);
            let words = words_of(&script, "/etc/eks/bootstrap.sh");
            prop_assert_eq!(&words[..8], &["/etc/eks/bootstrap.sh", "fuzz", "--apiserver-endpoint",
                "https://ABC.gr7.us-west-2.eks.amazonaws.com", "--b64-cluster-ca", "Q0E=", "--use-max-pods", "false"]);
            let mut rest = &words[8..];
            if let Some(dns) = kubelet.cluster_dns.first() {
                prop_assert_eq!(&rest[..2], &["--dns-cluster-ip".to_owned(), dns.replace('\0', "")]);
                rest = &rest[2..];
            }
            if raid0 {
                prop_assert_eq!(&rest[..2], &["--local-disks", "raid0"]);
                rest = &rest[2..];
            }
            prop_assert_eq!(rest.len(), 2, "nothing escaped --kubelet-extra-args (the script's last command): {:?}", rest);
            prop_assert_eq!(&rest[0], "--kubelet-extra-args");
            if !labels.is_empty() {
                prop_assert!(rest[1].starts_with("--node-labels="), "{}", rest[1]);
            }
            if !kubelet.other.is_empty() {
                let jq = words_of(&script, "jq ");
                prop_assert_eq!(&jq[..2], &["jq", "--argjson"]);
                let merged: Value = serde_json::from_str(&jq[3]).expect("the merged fields are JSON");
                let expected: serde_json::Map<String, Value> = kubelet.other.clone().into_iter().collect();
                prop_assert_eq!(merged, Value::Object(expected));
                prop_assert_eq!(&jq[12], "/etc/eks/bootstrap.sh", "nothing escaped the jq command: {:?}", jq);
            }
        }

        #[test]
        fn al2023_user_data_carries_every_value_into_the_node_config(
            labels in map_of_text(), taints in taints(), kubelet in kubelet(), raid0 in any::<bool>(),
        ) {
            let cluster = cluster();
            let node = NodeBootstrap { cluster: &cluster, labels, taints, kubelet: Some(&kubelet), raid0, custom: None };
            let config = node_config(&render(AmiFamily::AL2023, &node));
            prop_assert_eq!(&config["kind"], "NodeConfig");
            prop_assert_eq!(&config["spec"]["cluster"]["name"], "fuzz");
            let sent = serde_json::to_value(&kubelet).expect("kubelet as JSON");
            if sent.as_object().is_some_and(|o| !o.is_empty()) {
                prop_assert_eq!(&config["spec"]["kubelet"]["config"], &sent);
            }
            let keys: Vec<&String> = config["spec"].as_object().expect("spec").keys().collect();
            prop_assert!(keys.iter().all(|k| ["cluster", "kubelet", "instance"].contains(&k.as_str())), "{:?}", keys);
        }

        #[test]
        fn bottlerocket_user_data_is_toml_carrying_every_label_and_taint(
            labels in map_of_text(), taints in taints(), kubelet in kubelet(),
        ) {
            let cluster = cluster();
            let node = NodeBootstrap { cluster: &cluster, labels: labels.clone(), taints: taints.clone(), kubelet: Some(&kubelet), raid0: false, custom: None };
            let text = render(AmiFamily::Bottlerocket, &node);
            let doc: toml_edit::DocumentMut = text.parse().unwrap_or_else(|e| panic!("{e} in\n{text}"));
            let kubernetes = &doc["settings"]["kubernetes"];
            prop_assert_eq!(kubernetes["cluster-name"].as_str(), Some("fuzz"));
            for (key, value) in &labels {
                prop_assert_eq!(kubernetes["node-labels"][key.as_str()].as_str(), Some(value.as_str()));
            }
            for t in &taints {
                let values = kubernetes["node-taints"][t.key.as_str()].as_array().expect("taint values");
                let wanted = format!("{}:{}", t.value.as_deref().unwrap_or_default(), t.effect);
                prop_assert!(values.iter().any(|v| v.as_str() == Some(wanted.as_str())));
            }
        }

        #[test]
        fn the_aws_auth_editor_keeps_every_entry_and_adds_the_node_role_once(
            // What a valid aws-auth can hold: YAML refuses some characters outright.
            entries in prop::collection::vec((text(), text()), 0..4).prop_map(|entries| {
                let clean = |s: String| s.chars().filter(|c| yaml_printable(*c)).collect::<String>();
                entries.into_iter().map(|(a, u)| (clean(a), clean(u))).collect::<Vec<_>>()
            }),
            indent in prop::sample::select(vec!["", "  ", "    "]),
            comment in any::<bool>(),
            flow in any::<bool>(),
        ) {
            use karpenter_core::setup::aws::{NODE_GROUPS, map_node_role};
            let role = "arn:aws:iam::123456789012:role/KarpenterNodeRole-fuzz";
            let listed: Vec<Value> = entries
                .iter()
                .map(|(arn, user)| json!({"rolearn": arn, "username": user, "groups": ["system:masters"]}))
                .collect();
            let mut text = if flow {
                serde_json::to_string(&listed).expect("json")
            } else {
                let yaml = if listed.is_empty() { String::new() } else { serde_saphyr::to_string(&listed).expect("yaml") };
                yaml.lines().map(|l| format!("{indent}{l}\n")).collect()
            };
            if comment {
                text.insert_str(0, "# managed by terraform\n");
            }
            let updated = map_node_role(&text, role).expect("a list of mappings is editable");
            let updated = updated.expect("the role was not mapped yet");
            let read: Vec<Value> = serde_saphyr::from_str::<Option<Vec<Value>>>(&updated)
                .unwrap_or_else(|e| panic!("{e} in\n{updated}"))
                .unwrap_or_default();
            prop_assert_eq!(&read[..listed.len()], &listed[..]);
            prop_assert_eq!(read.len(), listed.len() + 1);
            prop_assert_eq!(&read[listed.len()]["rolearn"], role);
            prop_assert_eq!(&read[listed.len()]["groups"], &json!(NODE_GROUPS));
            prop_assert_eq!(map_node_role(&updated, role).expect("still editable"), None, "a second run changes nothing");
        }

        #[test]
        fn any_aws_auth_text_is_edited_or_refused_without_a_panic(text in text()) {
            let _ = karpenter_core::setup::aws::map_node_role(&text, "arn:aws:iam::1:role/r");
        }
    }
}

#[cfg(feature = "gcp")]
mod gcp {
    use super::*;
    use karpenter_core::cloud::gcp::billing::{Parsed, parse};

    /// A SKU as the Cloud Billing Catalog might send it, any field any text or number.
    fn sku() -> impl Strategy<Value = Value> {
        (
            text(),
            prop::sample::select(vec!["OnDemand", "Preemptible", "Commit1Yr", ""]),
            prop::sample::select(vec!["h", "GiBy.h", "GBy.h", "GiBy.mo", ""]),
            prop_oneof![
                text().prop_map(Value::from),
                any::<i64>().prop_map(Value::from)
            ],
            any::<i64>(),
            any::<f64>(),
        )
            .prop_map(|(description, usage, unit, units, nanos, start)| {
                json!({
                    "description": description,
                    "category": {"usageType": usage},
                    "serviceRegions": ["us-central1"],
                    "pricingInfo": [{"pricingExpression": {"usageUnit": unit,
                        "tieredRates": [{"startUsageAmount": start,
                                         "unitPrice": {"units": units, "nanos": nanos}}]}}],
                })
            })
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_billing_sku_is_read_or_skipped_and_every_rate_is_a_positive_price(
            skus in prop::collection::vec(prop_oneof![sku(), text().prop_map(Value::from)], 0..8),
            family in prop::sample::select(vec!["E2 Instance", "N2 Instance", "Compute optimized"]),
        ) {
            // Half the generated SKUs get a description some family's SKUs really have.
            let skus: Vec<Value> = skus
                .into_iter()
                .enumerate()
                .map(|(i, mut s)| {
                    if i % 2 == 0 && s.is_object() {
                        let part = if i % 4 == 0 { "Core" } else { "Ram" };
                        s["description"] = json!(format!("{family} {part} running in Americas"));
                    }
                    s
                })
                .collect();
            let mut parsed = Parsed::default();
            parse(&skus, "us-central1", &mut parsed);
            for rates in parsed.families.values() {
                for rate in [rates.on_demand.vcpu, rates.on_demand.gib, rates.spot.vcpu, rates.spot.gib]
                    .into_iter()
                    .flatten()
                {
                    prop_assert!(rate.is_finite() && rate > 0.0, "{rate}");
                }
            }
            let price = parsed.price("e2-standard-2", 2, 8192, false, false);
            prop_assert!(price.is_none_or(|p| p.on_demand.is_finite() && p.spot.is_finite()));
        }
    }
}
