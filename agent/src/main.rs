//! `karpenter-agent`: the in-cluster provisioning loop. This file only parses flags and wires
//! the library together.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::Write;

/// Just-in-time node provisioning for Kubernetes, compatible with Karpenter's v1 API.
#[derive(Parser)]
#[command(name = "karpenter-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions (NodePool, NodeClaim, node classes) as YAML.
    Crds,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            let yaml = karpenter_core::apis::crds_yaml().context("rendering the CRDs")?;
            std::io::stdout().write_all(yaml.as_bytes()).context("writing to stdout")?;
        }
    }
    Ok(())
}
