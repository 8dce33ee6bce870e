//! The on-demand table the AWS provider ships is generated, not kept by hand.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_shipped_price_table_is_exactly_what_the_generator_makes_from_upstreams_release() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(repo.join("tests/upstream/aws-prices"))
        .output()
        .expect("run tests/upstream/aws-prices");
    assert!(
        out.status.success(),
        "tests/upstream/aws-prices failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let committed = std::fs::read_to_string(repo.join("src/cloud/aws/on_demand_prices.json"))
        .expect("read src/cloud/aws/on_demand_prices.json");
    assert!(
        String::from_utf8_lossy(&out.stdout) == committed,
        "src/cloud/aws/on_demand_prices.json is not what tests/upstream/aws-prices prints: run it \
         with --write (and never edit the file by hand)"
    );
}
