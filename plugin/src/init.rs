//! `kubectl karpenter init aws|gcp`: what the two clouds share. The steps themselves live in
//! `karpenter_core::setup`; this module asks for missing flags (only on a terminal), prints the
//! plan and what is already in place, asks before changing anything (unless `--yes`), runs the
//! plan with progress on stderr, and scaffolds a NodePool and node class as YAML on stdout (or
//! files in `--output-dir`). stdout carries only that YAML. On a terminal a spinner names the
//! step that is running (a cloud call can take seconds); piped, stderr gets only the lines.

use crate::cluster::Cluster;
use crate::output;
use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use karpenter_core::setup::manifests::Manifest;
use karpenter_core::setup::{Mode, Observer, Outcome, Phase, Plan, Progress, SetupError};
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flags of `init`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  kubectl karpenter init aws --cluster demo --region us-west-2 --dry-run\n  kubectl karpenter init gcp --project my-project --cluster demo --location us-central1 --dry-run"
)]
pub(crate) struct InitArgs {
    #[command(subcommand)]
    pub cloud: Cloud,
}

/// Which cloud to set up.
#[derive(clap::Subcommand, Debug, Clone)]
pub(crate) enum Cloud {
    /// Set up an EKS cluster: IAM roles (IRSA or Pod Identity), discovery tags, the interruption
    /// queue and its EventBridge rules, and the agent.
    #[command(
        after_help = "Examples:\n  kubectl karpenter init aws --cluster demo --region us-west-2 --dry-run\n  kubectl karpenter init aws --cluster demo --yes --output-dir ./karpenter"
    )]
    Aws(crate::init_aws::AwsArgs),
    /// Set up a GKE cluster: the Compute and GKE APIs, a service account with a narrow custom
    /// role, Workload Identity (or a key kept only in a Secret), and the agent.
    #[command(
        after_help = "Examples:\n  kubectl karpenter init gcp --project my-project --cluster demo --location us-central1 --dry-run\n  kubectl karpenter init gcp --project my-project --cluster demo --location us-central1 --auth key --yes"
    )]
    Gcp(crate::init_gcp::GcpArgs),
}

/// Flags every cloud takes.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CommonArgs {
    /// Make the changes without asking first.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Print the plan and what is already in place; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write the scaffolded NodePool and node class here (one file each) instead of stdout.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Write the agent's Kubernetes objects (CRDs, namespace, service account, RBAC, the
    /// Deployment rendered from the agent's Helm chart) with the NodePool, to --output-dir or
    /// stdout, for a GitOps repository, instead of applying them. The cloud steps still run.
    #[arg(long)]
    pub gitops: bool,
    /// The namespace the agent runs in.
    #[arg(
        short = 'n',
        long = "namespace",
        value_name = "NAMESPACE",
        default_value = "karpenter"
    )]
    pub namespace: String,
    /// The agent's container image (default: the released image of this version).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
}

/// What `init` writes or prints: with `--gitops` the plan's Kubernetes objects (which it then
/// does not apply), and the starter NodePool and node class.
pub(crate) fn scaffold_of(plan: &Plan, pool: Vec<Manifest>, common: &CommonArgs) -> Vec<Manifest> {
    let mut objects = if common.gitops {
        plan.manifests().to_vec()
    } else {
        Vec::new()
    };
    objects.extend(pool);
    objects
}

/// The first thing to do once `init` is done: apply (or commit) what it scaffolded.
pub(crate) fn next_step(common: &CommonArgs) -> String {
    match (&common.output_dir, common.gitops) {
        (Some(dir), true) => format!(
            "Next: review {dir} and commit it where your GitOps tool applies it (or apply it yourself: kubectl apply --server-side -f {dir})",
            dir = dir.display()
        ),
        (Some(dir), false) => format!(
            "Next: review and apply the NodePool: kubectl apply -f {}",
            dir.display()
        ),
        (None, true) => {
            "Next: save the objects printed above where your GitOps tool applies them (or kubectl apply --server-side -f FILE)"
                .to_owned()
        }
        (None, false) => {
            "Next: apply the NodePool printed above (save it, review it, kubectl apply -f FILE)"
                .to_owned()
        }
    }
}

/// Runs `init`.
pub(crate) async fn run(cluster: &Cluster, args: &InitArgs, verbose: u8) -> anyhow::Result<()> {
    match &args.cloud {
        Cloud::Aws(aws) => crate::init_aws::run(cluster, aws, verbose).await,
        Cloud::Gcp(gcp) => crate::init_gcp::run(cluster, gcp, verbose).await,
    }
}

/// Whether prompts may be shown: stdin is a terminal.
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal()
}

/// The flag's value, else asked for on a terminal, else an error naming the flag.
pub(crate) fn value_or_ask(
    value: Option<&str>,
    flag: &str,
    prompt: &str,
) -> anyhow::Result<String> {
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        return Ok(value.to_owned());
    }
    if !interactive() {
        bail!("{flag} is required (stdin is not a terminal, so it cannot be asked for)");
    }
    let answer: String = dialoguer::Input::new()
        .with_prompt(prompt)
        .interact_text()
        .with_context(|| format!("reading {flag}"))?;
    if answer.trim().is_empty() {
        bail!("{flag} is required");
    }
    Ok(answer.trim().to_owned())
}

/// A [`SetupError`] as one line: the step, then what failed and why (the permission or the
/// resource). With `-v` the cloud's own error follows as the cause.
#[derive(Debug)]
struct StepFailure {
    line: String,
    error: SetupError,
    verbose: bool,
}

impl std::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

impl std::error::Error for StepFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        if self.verbose {
            std::error::Error::source(self.error.root())
        } else {
            None
        }
    }
}

/// One line for a setup error: `step node-role failed: permission denied: iam:CreateRole on ...`.
pub(crate) fn setup_error(error: SetupError, verbose: u8) -> anyhow::Error {
    let root = error.root().to_string();
    let line = match &error {
        SetupError::Step { step, .. } => format!("step {step} failed: {root}"),
        _ => root,
    };
    anyhow::Error::new(StepFailure {
        line,
        error,
        verbose: verbose > 0,
    })
}

/// Where the agent's image comes from, for the end of a run.
pub(crate) fn image_note(image: &str) -> String {
    format!(
        "The agent runs image {image}; if the cluster cannot pull it, build it from a checkout (docker build -f agent/Dockerfile -t IMAGE .), push it where the cluster can pull, and re-run with --image IMAGE"
    )
}

/// What a cloud's `init` hands to [`execute`].
pub(crate) struct Setup<'a> {
    /// `EKS cluster demo in us-west-2`.
    pub title: String,
    pub plan: &'a Plan,
    /// The NodePool and node class to scaffold.
    pub scaffold: Vec<Manifest>,
    /// What to tell the user once everything is in place.
    pub next_steps: Vec<String>,
}

/// Prints the plan, checks every step, asks, applies, and scaffolds.
pub(crate) async fn execute(
    setup: Setup<'_>,
    common: &CommonArgs,
    verbose: u8,
) -> anyhow::Result<()> {
    let plan = setup.plan;
    eprintln!("Plan for {}:", setup.title);
    for line in plan.describe() {
        eprintln!("  {line}");
    }
    eprintln!("\nChecking what is in place:");
    let check = plan
        .run_with(
            Mode::DryRun,
            &mut StepSpinner::new(|p: &Progress| eprintln!("  {p}")),
        )
        .await
        .map_err(|e| setup_error(e, verbose))?;
    let changes = check.changed();
    if common.dry_run {
        eprintln!("\n{}", check.summary());
        scaffold(&setup.scaffold, common.output_dir.as_deref(), true)?;
        return Ok(());
    }
    if changes == 0 {
        eprintln!("\nEverything is already in place; nothing changed.");
    } else {
        if !common.yes {
            if !interactive() {
                bail!(
                    "{changes} steps would change things: pass --yes to apply them (stdin is not a terminal, so it cannot ask), or --dry-run to only look"
                );
            }
            eprintln!();
            let go = dialoguer::Confirm::new()
                .with_prompt(format!("Apply these {changes} changes?"))
                .default(false)
                .interact()
                .context("reading the confirmation")?;
            if !go {
                bail!("not confirmed; nothing changed");
            }
        }
        eprintln!("\nApplying:");
        // The check above listed what is in place; here only what changes.
        let mut spinner = StepSpinner::new(|p: &Progress| {
            if !matches!(p.outcome, Outcome::InPlace(_)) {
                eprintln!("  {p}");
            }
        });
        let report = plan
            .run_with(Mode::Apply, &mut spinner)
            .await
            .map_err(|e| setup_error(e, verbose))?;
        drop(spinner);
        eprintln!("\n{}", report.summary());
    }
    scaffold(&setup.scaffold, common.output_dir.as_deref(), false)?;
    for line in &setup.next_steps {
        eprintln!("{line}");
    }
    Ok(())
}

/// Shows the running step as a spinner on stderr, and prints each finished step's line above
/// it. When stderr is not a terminal there is no spinner, only the lines.
struct StepSpinner<F> {
    /// `None` off a terminal (indicatif's own detection, as the draw target sees stderr).
    bar: Option<ProgressBar>,
    print: F,
}

impl<F: FnMut(&Progress)> StepSpinner<F> {
    fn new(print: F) -> Self {
        let target = ProgressDrawTarget::stderr();
        let bar = (!target.is_hidden()).then(|| {
            let bar = ProgressBar::with_draw_target(None, target).with_style(
                ProgressStyle::with_template("  {spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Self { bar, print }
    }
}

impl<F: FnMut(&Progress)> Observer for StepSpinner<F> {
    fn started(&mut self, step: &str, phase: Phase) {
        if let Some(bar) = &self.bar {
            bar.set_message(match phase {
                Phase::Check => format!("checking {step}"),
                Phase::Apply => format!("applying {step}"),
            });
        }
    }

    fn finished(&mut self, progress: &Progress) {
        match &self.bar {
            // The line goes above the spinner, which is drawn again after it.
            Some(bar) => bar.suspend(|| (self.print)(progress)),
            None => (self.print)(progress),
        }
    }
}

impl<F> Drop for StepSpinner<F> {
    /// Cleared when the run ends, also when a step failed (it never finished).
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The objects as a multi-document YAML stream.
pub(crate) fn to_yaml(manifests: &[Manifest]) -> anyhow::Result<String> {
    let mut text = String::new();
    for m in manifests {
        text.push_str("---\n");
        text.push_str(
            &serde_saphyr::to_string(&m.object).with_context(|| format!("rendering {}", m.id()))?,
        );
    }
    Ok(text)
}

/// The objects as YAML on stdout, or one file per object in `dir` (a file that exists and
/// differs is left alone, as the scaffold's are).
pub(crate) fn write_objects(objects: &[Manifest], dir: Option<&Path>) -> anyhow::Result<()> {
    scaffold(objects, dir, false)
}

/// `nodepool-default.yaml`.
fn file_name(m: &Manifest) -> String {
    format!("{}-{}.yaml", m.resource.kind.to_lowercase(), m.name)
}

/// The scaffold to stdout, or one file per object in `dir`. A file that exists and differs is
/// left alone (it may hold the user's edits); in a dry run nothing is written.
fn scaffold(manifests: &[Manifest], dir: Option<&Path>, dry_run: bool) -> anyhow::Result<()> {
    if manifests.is_empty() {
        return Ok(());
    }
    let Some(dir) = dir else {
        return output::print_stdout(&to_yaml(manifests)?);
    };
    if !dry_run {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for m in manifests {
        let path = dir.join(file_name(m));
        let text = to_yaml(std::slice::from_ref(m))?;
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing == text => eprintln!("✓ {}: in place", path.display()),
            Ok(_) => eprintln!(
                "! {}: left as it is (it differs from the scaffold; remove it to regenerate)",
                path.display()
            ),
            Err(_) if dry_run => eprintln!("~ {}: would write {}", path.display(), m.id()),
            Err(_) => {
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
                eprintln!("+ {}: wrote {}", path.display(), m.id());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scaffolds_render_as_one_yaml_document_per_object() {
        let objects = vec![
            Manifest::new(
                json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}}),
                "nodepools",
            ),
            Manifest::new(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
                "namespaces",
            ),
        ];
        let yaml = to_yaml(&objects).unwrap();
        assert_eq!(yaml.matches("---\n").count(), 2, "{yaml}");
        assert!(yaml.contains("kind: NodePool"), "{yaml}");
        assert_eq!(file_name(&objects[0]), "nodepool-default.yaml");
    }

    #[test]
    fn the_step_spinner_prints_each_finished_step_once_whether_or_not_it_draws() {
        let mut lines = Vec::new();
        {
            let mut spinner = StepSpinner::new(|p: &Progress| lines.push(p.to_string()));
            spinner.started("node-role", Phase::Check);
            spinner.started("node-role", Phase::Apply);
            spinner.finished(&Progress {
                step: "node-role".to_owned(),
                outcome: Outcome::Applied("create role r".to_owned()),
            });
        }
        assert_eq!(lines, ["+ node-role: done: create role r"]);
    }

    #[test]
    fn a_step_failure_is_one_line_naming_the_step_and_the_permission() {
        let error = SetupError::Step {
            step: "controller-policy".to_owned(),
            source: Box::new(SetupError::PermissionDenied {
                action: "iam:PutRolePolicy".to_owned(),
                resource: "role r".to_owned(),
                source: "AccessDenied".into(),
            }),
        };
        let e = setup_error(error, 0);
        assert_eq!(e.chain().count(), 1);
        assert!(
            e.to_string().starts_with(
                "step controller-policy failed: permission denied: iam:PutRolePolicy on role r"
            ),
            "{e}"
        );
    }
}
