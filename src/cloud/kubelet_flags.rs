//! A node class's typed kubelet settings as kubelet command-line flags: AL2's
//! `--kubelet-extra-args` and GKE's `KUBELET_ARGS` take the same flags.

use crate::apis::KubeletConfiguration;
use std::collections::BTreeMap;

/// `k=v,k=v` of a map, as the kubelet's map flags take it.
fn pairs(map: &BTreeMap<String, String>, separator: &str) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}{separator}{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The kubelet flags for the typed fields (not `clusterDNS`, which each bootstrap passes its
/// own way), as upstream's `eksbootstrap.go` writes them.
pub(crate) fn flags(k: &KubeletConfiguration) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(n) = k.max_pods {
        flags.push(format!("--max-pods={n}"));
    }
    if let Some(n) = k.pods_per_core {
        flags.push(format!("--pods-per-core={n}"));
    }
    for (flag, map, separator) in [
        ("--system-reserved", &k.system_reserved, "="),
        ("--kube-reserved", &k.kube_reserved, "="),
        ("--eviction-hard", &k.eviction_hard, "<"),
        ("--eviction-soft", &k.eviction_soft, "<"),
        (
            "--eviction-soft-grace-period",
            &k.eviction_soft_grace_period,
            "=",
        ),
    ] {
        if !map.is_empty() {
            flags.push(format!("{flag}={}", pairs(map, separator)));
        }
    }
    if let Some(n) = k.eviction_max_pod_grace_period {
        flags.push(format!("--eviction-max-pod-grace-period={n}"));
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        flags.push(format!("--image-gc-high-threshold={n}"));
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        flags.push(format!("--image-gc-low-threshold={n}"));
    }
    if let Some(b) = k.cpu_cfs_quota {
        flags.push(format!("--cpu-cfs-quota={b}"));
    }
    flags
}
