//! The CRDs this project serves against upstream's own, field by field: core's NodePool and
//! NodeClaim (`sigs.k8s.io/karpenter`) and the AWS provider's EC2NodeClass
//! (`github.com/aws/karpenter-provider-aws`), at the releases `tests/upstream/go.mod` pins, read
//! from the Go module cache (`tests/upstream/crd-dirs` downloads them).
//!
//! Every schema node upstream has must exist here with the same type, format, enum, default,
//! bounds, pattern, required fields and CEL rules; fields here that upstream lacks, and the
//! names, short names, categories, subresources and printer columns, are compared too. Each
//! difference this project keeps is in `tests/crd_parity.allow` under the reason for it. The test
//! fails on a difference not listed there, and on a listed one that is gone, so the list stays
//! the truth.
//!
//! Kinds upstream serves that this project does not (NodeOverlay, CapacityBuffer) are one
//! difference each, listed with what reads them.
//!
//! GCENodeClass is compared with the GCP provider's CRD (`github.com/cloudpilot-ai/
//! karpenter-provider-gcp`, the release `tests/upstream/gcp-crd` pins). That provider is not
//! served as a Go module and its files are not copied here, so the script reads it from a clone
//! (`KARPENTER_GCP_PROVIDER`, or one it makes). Where no clone can be had, the test says so and
//! checks the rest; the GCENodeClass lines of the allow-list are then not checked for being gone.
//! KWOKNodeClass (a test provider) has no upstream to compare with.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The schema keywords compared node by node.
const KEYWORDS: &[&str] = &[
    "type",
    "format",
    "enum",
    "default",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Upstream's CRDs, by name.
fn upstream() -> BTreeMap<String, Value> {
    let out = Command::new(repo().join("tests/upstream/crd-dirs"))
        .output()
        .expect("run tests/upstream/crd-dirs");
    assert!(
        out.status.success(),
        "tests/upstream/crd-dirs failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dirs: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect();
    // Every CRD of both releases; the provider ships copies of core's, and core's own come first.
    let mut crds = BTreeMap::new();
    for dir in &dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for path in files {
            let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
            crds.entry(name).or_insert(crd);
        }
    }
    crds
}

/// The name of the one CRD read from the GCP provider's repository.
const GCE_NODE_CLASSES: &str = "gcenodeclasses.karpenter.k8s.gcp";

/// The GCP provider's GCENodeClass CRD, or None (said on stderr) where its repository cannot be
/// read.
fn upstream_gcp() -> Option<Value> {
    let out = Command::new(repo().join("tests/upstream/gcp-crd"))
        .output()
        .expect("run tests/upstream/gcp-crd");
    if out.status.code() == Some(3) {
        eprintln!(
            "GCENodeClass not compared: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    assert!(
        out.status.success(),
        "tests/upstream/gcp-crd failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let crd: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(crd["metadata"]["name"], GCE_NODE_CLASSES, "{path}");
    Some(crd)
}

/// This project's CRDs, by name, as the API server is given them.
fn ours() -> BTreeMap<String, Value> {
    karpenter_core::apis::crds()
        .into_iter()
        .map(|crd| {
            let value = serde_json::to_value(&crd).unwrap();
            (
                value["metadata"]["name"].as_str().unwrap().to_owned(),
                value,
            )
        })
        .collect()
}

fn compact(value: Option<&Value>) -> String {
    value.map_or_else(|| "-".to_owned(), Value::to_string)
}

/// The rules of a node's `x-kubernetes-validations`, with their messages.
fn rules(node: &Value) -> BTreeMap<String, String> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    (
                        r["rule"].as_str().unwrap_or_default().to_owned(),
                        r["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn strings(value: &Value) -> BTreeSet<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The differences of two schema nodes and their children, as `path: what` lines.
fn compare(up: &Value, ours: Option<&Value>, path: &str, out: &mut Vec<String>) {
    let Some(ours) = ours else {
        out.push(format!("{path}: missing"));
        return;
    };
    for keyword in KEYWORDS {
        let (u, o) = (up.get(*keyword), ours.get(*keyword));
        // 50 and 50.0 are one bound.
        let same_number = matches!((u.and_then(Value::as_f64), o.and_then(Value::as_f64)), (Some(a), Some(b)) if a == b);
        if u != o && !same_number {
            out.push(format!(
                "{path}: {keyword} upstream {} ours {}",
                compact(u),
                compact(o)
            ));
        }
    }
    let (u, o) = (strings(&up["required"]), strings(&ours["required"]));
    for field in u.difference(&o) {
        out.push(format!("{path}: {field} is required upstream, not here"));
    }
    for field in o.difference(&u) {
        out.push(format!("{path}: {field} is required here, not upstream"));
    }
    let (u, o) = (rules(up), rules(ours));
    for rule in u.keys().filter(|r| !o.contains_key(*r)) {
        out.push(format!("{path}: rule missing: {rule}"));
    }
    for rule in o.keys().filter(|r| !u.contains_key(*r)) {
        out.push(format!("{path}: rule extra: {rule}"));
    }
    let empty = serde_json::Map::new();
    let up_props = up["properties"].as_object().unwrap_or(&empty);
    let our_props = ours["properties"].as_object().unwrap_or(&empty);
    for (name, child) in up_props {
        compare(child, our_props.get(name), &format!("{path}.{name}"), out);
    }
    for name in our_props.keys().filter(|n| !up_props.contains_key(*n)) {
        out.push(format!("{path}.{name}: not upstream's"));
    }
    if let Some(items) = up.get("items") {
        compare(items, ours.get("items"), &format!("{path}[]"), out);
    } else if ours.get("items").is_some() {
        out.push(format!("{path}[]: not upstream's"));
    }
    match (
        up.get("additionalProperties").filter(|v| v.is_object()),
        ours.get("additionalProperties").filter(|v| v.is_object()),
    ) {
        (Some(u), o) => compare(u, o, &format!("{path}{{}}"), out),
        (None, Some(_)) => out.push(format!("{path}{{}}: not upstream's")),
        (None, None) => {}
    }
}

/// Every difference between upstream's CRD and ours.
fn differences(name: &str, up: &Value, ours: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    let Some(ours) = ours else {
        return vec![format!("{name}: not served here")];
    };
    for field in ["kind", "plural", "singular", "listKind"] {
        let pointer = format!("/spec/names/{field}");
        if up.pointer(&pointer) != ours.pointer(&pointer) {
            out.push(format!(
                "{name} names.{field}: upstream {} ours {}",
                compact(up.pointer(&pointer)),
                compact(ours.pointer(&pointer))
            ));
        }
    }
    for field in ["shortNames", "categories"] {
        let (u, o) = (
            strings(&up["spec"]["names"][field]),
            strings(&ours["spec"]["names"][field]),
        );
        if u != o {
            out.push(format!("{name} names.{field}: upstream {u:?} ours {o:?}"));
        }
    }
    if up["spec"]["scope"] != ours["spec"]["scope"] {
        out.push(format!(
            "{name} scope: upstream {} ours {}",
            up["spec"]["scope"], ours["spec"]["scope"]
        ));
    }
    let versions = |crd: &Value| -> BTreeMap<String, Value> {
        crd["spec"]["versions"]
            .as_array()
            .map(|vs| {
                vs.iter()
                    .map(|v| (v["name"].as_str().unwrap_or_default().to_owned(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (up_versions, our_versions) = (versions(up), versions(ours));
    for (version, u) in &up_versions {
        let Some(o) = our_versions.get(version) else {
            out.push(format!("{name} {version}: not served here"));
            continue;
        };
        for flag in ["served", "storage"] {
            if u[flag] != o[flag] {
                out.push(format!(
                    "{name} {version} {flag}: upstream {} ours {}",
                    u[flag], o[flag]
                ));
            }
        }
        let subresources = |v: &Value| -> BTreeSet<String> {
            v["subresources"]
                .as_object()
                .map(|s| s.keys().cloned().collect())
                .unwrap_or_default()
        };
        if subresources(u) != subresources(o) {
            out.push(format!(
                "{name} {version} subresources: upstream {:?} ours {:?}",
                subresources(u),
                subresources(o)
            ));
        }
        let columns = |v: &Value| -> Vec<(String, String)> {
            v["additionalPrinterColumns"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            (
                                c["name"].as_str().unwrap_or_default().to_owned(),
                                c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        if columns(u) != columns(o) {
            out.push(format!(
                "{name} {version} printer columns: upstream {:?} ours {:?}",
                columns(u),
                columns(o)
            ));
        }
        let mut schema = Vec::new();
        compare(
            &u["schema"]["openAPIV3Schema"],
            o.pointer("/schema/openAPIV3Schema"),
            "",
            &mut schema,
        );
        out.extend(schema.into_iter().map(|d| format!("{name} {version} {d}")));
    }
    for version in our_versions
        .keys()
        .filter(|v| !up_versions.contains_key(*v))
    {
        out.push(format!("{name} {version}: not upstream's"));
    }
    out
}

/// The allow-list: each entry with the reason it is under.
fn allowed(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut why: Option<String> = None;
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(reason) = line.strip_prefix("why: ") {
            why = Some(reason.to_owned());
            continue;
        }
        let Some(reason) = &why else {
            panic!(
                "{}:{}: an entry before any `why:`",
                path.display(),
                number + 1
            );
        };
        out.insert(line.to_owned(), reason.clone());
    }
    out
}

#[test]
fn every_difference_from_upstreams_crds_is_listed_with_its_reason() {
    let (mut upstream, ours) = (upstream(), ours());
    let gcp = upstream_gcp();
    let gcp_compared = gcp.is_some();
    if let Some(crd) = gcp {
        upstream.insert(GCE_NODE_CLASSES.to_owned(), crd);
    }
    let mut found = BTreeSet::new();
    for (name, crd) in &upstream {
        found.extend(differences(name, crd, ours.get(name)));
    }
    let list = repo().join("tests/crd_parity.allow");
    let allowed = allowed(&list);
    let new: Vec<&String> = found.iter().filter(|d| !allowed.contains_key(*d)).collect();
    let gone: Vec<&String> = allowed
        .keys()
        .filter(|d| gcp_compared || !d.starts_with(GCE_NODE_CLASSES))
        .filter(|d| !found.contains(*d))
        .collect();
    let listing = |lines: &[&String]| {
        lines
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        new.is_empty() && gone.is_empty(),
        "tests/crd_parity.allow is out of date.\n\nNew differences from upstream (fix them, or list each under a `why:`):\n{}\n\nListed differences that are gone (remove them):\n{}",
        listing(&new),
        listing(&gone)
    );
}
