//! `karpenter-agent crds` prints the CRDs generated from the Rust types, and the copy committed
//! in the chart is exactly that output.

use assert_cmd::Command;

const COMMITTED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/chart/crds/karpenter-crds.yaml"
);

#[test]
fn the_committed_crds_match_what_the_agent_prints() -> Result<(), Box<dyn std::error::Error>> {
    let output = Command::cargo_bin("karpenter-agent")?
        .arg("crds")
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout)?;
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::write(COMMITTED, &printed)?;
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == printed,
        "agent/chart/crds/karpenter-crds.yaml is stale: regenerate it with\n  UPDATE_CRDS=1 cargo test --workspace the_committed_crds_match"
    );
    Ok(())
}

#[test]
fn crds_prints_all_five_kinds() -> Result<(), Box<dyn std::error::Error>> {
    let output = Command::cargo_bin("karpenter-agent")?
        .arg("crds")
        .output()?;
    let printed = String::from_utf8(output.stdout)?;
    for kind in [
        "NodePool",
        "NodeClaim",
        "EC2NodeClass",
        "GCENodeClass",
        "KWOKNodeClass",
    ] {
        assert!(
            printed.contains(&format!("kind: {kind}\n")),
            "{kind} missing"
        );
    }
    Ok(())
}
