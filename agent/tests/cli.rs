//! What `karpenter-agent` says about its command line and how it logs, before it reaches any
//! cluster.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use assert_cmd::Command;

#[test]
fn run_without_a_provider_refuses_to_start_and_names_the_flag()
-> Result<(), Box<dyn std::error::Error>> {
    let output = Command::cargo_bin("karpenter-agent")?
        .args(["run", "--kubeconfig", "/nonexistent"])
        .env_remove("KARPENTER_PROVIDER")
        .output()?;
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8(output.stderr)?;
    assert!(stderr.contains("--provider <PROVIDER>"), "{stderr}");
    assert!(stderr.contains("required"), "{stderr}");
    Ok(())
}

/// Runs `karpenter-agent run` against a cluster that is not there, with stderr captured (not a
/// terminal): it logs that it starts, then fails.
fn run_logging(format: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .expect("write kubeconfig");
    let output = Command::cargo_bin("karpenter-agent")
        .expect("the binary")
        .args(["run", "--provider", "gcp", "--log-format", format])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env_remove("GCP_PROJECT")
        .env_remove("NO_COLOR")
        .output()
        .expect("run");
    assert!(!output.status.success());
    String::from_utf8(output.stderr).expect("utf-8")
}

#[test]
fn text_logs_written_to_a_file_carry_no_colour_codes() {
    let stderr = run_logging("text");
    assert!(stderr.contains("karpenter-agent starting"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "escape codes in {stderr:?}");
}

#[test]
fn json_logs_are_upstreams_lines_one_object_each_the_fatal_error_included() {
    let stderr = run_logging("json");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect();
    for line in &lines {
        for key in ["level", "time", "logger", "message", "caller", "commit"] {
            assert!(line[key].is_string(), "no {key} in {line}");
        }
        assert!(line.get("fields").is_none(), "fields nested: {line}");
    }
    assert_eq!(lines[0]["message"], "karpenter-agent starting");
    assert_eq!(lines[0]["level"], "INFO");
    assert_eq!(lines[0]["logger"], "controller");
    let last = lines.last().expect("a line");
    assert_eq!(
        last["level"], "ERROR",
        "the fatal error is the last record: {last}"
    );
    assert_eq!(last["message"], "karpenter-agent stopped");
    assert!(
        last["error"].as_str().is_some_and(|e| e.contains("GCP")),
        "it says why, causes on the same line: {last}"
    );
}
