//! `kubectl karpenter __complete ARGS... WORD`: completions for kubectl's plugin completion
//! (kubectl 1.26+ runs `kubectl_complete-karpenter` for `kubectl karpenter <TAB>`), in cobra's
//! protocol: one candidate per line, then `:<directive>`. Completes subcommands, flags, the
//! resource kinds of `explain`, and the names of NodeClaims and Nodes from the cluster.

use crate::cluster::Cluster;
use clap::Command;
use k8s_openapi::api::core::v1::Node;
use karpenter_core::apis::NodeClaim;
use kube::api::ListParams;

/// cobra's ShellCompDirectiveNoFileComp: do not fall back to file names.
const NO_FILE_COMPLETION: u8 = 4;

/// What to offer, before reading the cluster.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wanted {
    Words(Vec<String>),
    NodeClaimNames,
    NodeNames,
}

/// Decides what completes `word` after `before` (the words typed after `kubectl karpenter`).
pub(crate) fn wanted(command: &Command, before: &[String], word: &str) -> Wanted {
    let positional: Vec<&str> = before
        .iter()
        .map(String::as_str)
        .filter(|w| !w.starts_with('-'))
        .collect();
    let Some(sub) = positional
        .first()
        .and_then(|name| command.find_subcommand(name))
    else {
        return Wanted::Words(
            command
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.get_name().to_owned())
                .collect(),
        );
    };
    if word.starts_with('-') {
        let flags = sub
            .get_arguments()
            .chain(command.get_arguments())
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"));
        return Wanted::Words(flags.collect());
    }
    match (sub.get_name(), &positional[1..]) {
        ("explain", []) => Wanted::Words(vec!["nodeclaim".to_owned(), "node".to_owned()]),
        ("explain", [kind]) if kind.starts_with("nodeclaim") => Wanted::NodeClaimNames,
        ("explain", [kind]) if kind.starts_with("node") => Wanted::NodeNames,
        ("completion", []) => {
            Wanted::Words(vec!["bash".to_owned(), "zsh".to_owned(), "fish".to_owned()])
        }
        _ => Wanted::Words(Vec::new()),
    }
}

/// Prints the completions for `args` (the last one is the word being completed).
pub(crate) async fn run(
    command: &Command,
    connect: &crate::cluster::ConnectArgs,
    args: &[String],
) -> anyhow::Result<()> {
    let (word, before) = args
        .split_last()
        .map_or(("", &[][..]), |(w, b)| (w.as_str(), b));
    let names = match wanted(command, before, word) {
        Wanted::Words(words) => words,
        // Completion must never fail loudly: no cluster, no names.
        Wanted::NodeClaimNames => match Cluster::connect(connect).await {
            Ok(c) => c
                .list(c.all::<NodeClaim>(), ListParams::default())
                .await
                .unwrap_or_default()
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect(),
            Err(_) => Vec::new(),
        },
        Wanted::NodeNames => match Cluster::connect(connect).await {
            Ok(c) => c
                .list(c.all::<Node>(), ListParams::default())
                .await
                .unwrap_or_default()
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect(),
            Err(_) => Vec::new(),
        },
    };
    let mut out: String = names
        .into_iter()
        .filter(|n| n.starts_with(word))
        .map(|n| n + "\n")
        .collect();
    out.push_str(&format!(":{NO_FILE_COMPLETION}\n"));
    crate::output::print_stdout(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn words(before: &[&str], word: &str) -> Wanted {
        let before: Vec<String> = before.iter().map(|s| (*s).to_owned()).collect();
        wanted(&crate::Cli::command(), &before, word)
    }

    #[test]
    fn completes_subcommands_then_kinds_then_names() {
        let Wanted::Words(subcommands) = words(&[], "") else {
            panic!("words")
        };
        assert!(
            subcommands.contains(&"status".to_owned())
                && !subcommands.contains(&"__complete".to_owned())
        );
        assert_eq!(
            words(&["explain"], "n"),
            Wanted::Words(vec!["nodeclaim".to_owned(), "node".to_owned()])
        );
        assert_eq!(words(&["explain", "nodeclaim"], ""), Wanted::NodeClaimNames);
        assert_eq!(words(&["explain", "node"], "x"), Wanted::NodeNames);
        let Wanted::Words(flags) = words(&["status"], "--n") else {
            panic!("words")
        };
        assert!(
            flags.contains(&"--nodepool".to_owned()) && flags.contains(&"--kubeconfig".to_owned())
        );
    }
}
