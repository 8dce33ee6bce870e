//! The agent binary's tests, in one test binary (as ripgrep's `tests/tests.rs`): its command
//! line (`cli`), the CRDs it prints (`crds`), its Helm chart (`chart`), and agent processes on
//! the rig: leader election on kwok (`leader_election`), a disruption interrupted by SIGKILL
//! (`interrupted_disruption`) and on EC2 against moto (`failover_aws`,
//! and `chaos_aws`, run by hand: `cargo test -p karpenter-agent --test agent chaos_aws --
//! --ignored --nocapture`). The tests that use the rig take `common::exclusive` first.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

// The AWS test account (moto, the fault proxy, the EC2 kubelet stand-in), shared with the
// library's own AWS tests, which use more of it.
#[allow(dead_code)]
#[path = "../../tests/aws/env.rs"]
mod env;
#[allow(dead_code)]
#[path = "../../tests/aws/kubelet.rs"]
mod kubelet;
#[allow(dead_code)]
#[path = "../../tests/aws/moto.rs"]
mod moto;
#[allow(dead_code)]
#[path = "../../tests/aws/proxy.rs"]
mod proxy;

mod common;

// The path-included files above name the rig module from the crate root.
use karpenter_test_support::rig;

mod chaos_aws;
mod chart;
mod cli;
mod crds;
mod failover_aws;
mod interrupted_disruption;
mod leader_election;
