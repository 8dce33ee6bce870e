//! What `karpenter-agent` says about its command line before it touches any cluster.

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
