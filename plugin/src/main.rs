//! `kubectl-karpenter`, run as `kubectl karpenter ...`. This file only parses flags and wires the
//! library together; each subcommand lives in its own module.

use clap::{CommandFactory, Parser, Subcommand};
use clap_complete::Shell;

/// Set up, watch and explain just-in-time node provisioning (Karpenter v1 API).
#[derive(Parser)]
#[command(name = "kubectl karpenter", bin_name = "kubectl karpenter", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a shell completion script (bash, zsh or fish).
    Completion {
        /// The shell to complete for.
        shell: Shell,
    },
    /// Print the plugin's version.
    Version,
}

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "kubectl-karpenter", &mut std::io::stdout());
        }
        Command::Version => println!("kubectl-karpenter {}", env!("CARGO_PKG_VERSION")),
    }
}
