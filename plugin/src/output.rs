//! Output formats and writing to stdout. Data (tables, JSON, YAML) goes to stdout and nothing
//! else does; a closed pipe (`| head`) ends the command quietly.

use k8s_openapi::jiff::Timestamp;
use karpenter_core::explain::human_duration;
use serde::Serialize;
use std::io::Write;

/// `-o`: how to print.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// kubectl-style tables.
    Table,
    /// Tables with more columns.
    Wide,
    /// The same facts as JSON.
    Json,
    /// The same facts as YAML.
    Yaml,
    /// Only the objects' names, `nodeclaim.karpenter.sh/NAME`, one a line (as `kubectl get -o name`).
    Name,
}

/// A NodeClaim as `-o name` prints it: `<plural-less kind>.<group>/<name>`, as kubectl does.
pub(crate) fn node_claim_name(name: &str) -> String {
    format!("nodeclaim.{}/{name}", karpenter_core::apis::labels::GROUP)
}

/// The apiVersion stamped on the plugin's data output.
pub(crate) const API_VERSION: &str = "kubectl-karpenter.io/v1alpha1";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a, T: Serialize> {
    api_version: &'static str,
    kind: &'a str,
    generated_at: Timestamp,
    #[serde(flatten)]
    data: &'a T,
}

/// Renders `data` as a JSON or YAML document of `kind`.
pub(crate) fn render_data<T: Serialize>(
    format: Format,
    kind: &str,
    data: &T,
    now: Timestamp,
) -> anyhow::Result<String> {
    let document = Document {
        api_version: API_VERSION,
        kind,
        generated_at: now,
        data,
    };
    Ok(match format {
        Format::Yaml => serde_saphyr::to_string(&document)?,
        _ => {
            let mut text = serde_json::to_string_pretty(&document)?;
            text.push('\n');
            text
        }
    })
}

/// Prints `data` as a JSON or YAML document of `kind`.
pub(crate) fn print_data<T: Serialize>(
    format: Format,
    kind: &str,
    data: &T,
    now: Timestamp,
) -> anyhow::Result<()> {
    print_stdout(&render_data(format, kind, data, now)?)
}

/// Writes to stdout; a reader that went away (`| head`) is not an error.
pub(crate) fn print_stdout(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// The age of something created at `at`, kubectl style (an AGE column); `<unknown>` without a
/// time.
pub(crate) fn age(at: Option<Timestamp>, now: Timestamp) -> String {
    at.map_or_else(
        || "<unknown>".to_owned(),
        |at| human_duration(now.duration_since(at)),
    )
}

/// `a, b, c` (at most 15, then `and N more`), or `none`.
pub(crate) fn name_list(names: &[String]) -> String {
    const MAX: usize = 15;
    if names.is_empty() {
        return "none".to_owned();
    }
    let mut text = names
        .iter()
        .take(MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX {
        text.push_str(&format!(" and {} more", names.len() - MAX));
    }
    text
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn an_age_is_kubectl_notation_and_unknown_without_a_time() {
        let now: Timestamp = "2026-03-02T10:00:00Z".parse().expect("timestamp");
        let created: Timestamp = "2026-03-02T09:57:30Z".parse().expect("timestamp");
        assert_eq!(age(Some(created), now), "2m30s");
        assert_eq!(age(None, now), "<unknown>");
    }
}
