//! `kubectl karpenter convert`: reads manifests ([`crate::manifests`]: files, directories,
//! stdin; multi-document YAML, JSON, `kind: List`), converts them with `karpenter_core::convert`, and prints the v1
//! objects on stdout; warnings go to stderr, one line each. Offline: no cluster is needed.

use crate::{manifests, output};
use anyhow::Context as _;
use karpenter_core::convert::{self, Input};
use std::path::PathBuf;

/// Flags of `convert`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  kubectl karpenter convert -f provisioner.yaml -f awsnodetemplate.yaml > v1.yaml\n  kubectl get provisioners,awsnodetemplates -o yaml | kubectl karpenter convert -f - | kubectl apply -f -\n  kubectl karpenter convert -f ./karpenter/ -o json"
)]
pub(crate) struct ConvertArgs {
    /// A file, a directory (its .yaml, .yml and .json files) or - for stdin; repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        default_value = "-"
    )]
    pub files: Vec<PathBuf>,
    /// Read directories' subdirectories too.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// yaml (a stream of documents) or json (one object, or a List of them).
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

/// How to print the converted objects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Yaml,
    Json,
}

/// Runs `convert`.
pub(crate) fn run(args: &ConvertArgs) -> anyhow::Result<()> {
    let inputs = manifests::read(&args.files, args.recursive)?
        .into_iter()
        .map(|(source, object)| Input { source, object })
        .collect();
    let converted = convert::convert(inputs)?;
    for warning in &converted.warnings {
        eprintln!("warning: {warning}");
    }
    let text = match args.output {
        Format::Yaml => {
            let mut text = String::new();
            for object in &converted.objects {
                text.push_str("---\n");
                text.push_str(&serde_saphyr::to_string(object).context("writing YAML")?);
            }
            text
        }
        Format::Json => {
            let value = match converted.objects.as_slice() {
                [one] => one.clone(),
                many => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": many}),
            };
            format!("{}\n", serde_json::to_string_pretty(&value)?)
        }
    };
    output::print_stdout(&text)
}
