//! Logs: `tracing` to stderr, as JSON lines shaped as upstream's (`json_log.rs`; what the
//! Deployment uses, for log pipelines) or text for a terminal. The metrics registry and the
//! probes are served by `http.rs`.

use crate::config::LogFormat;

pub(crate) fn init_tracing(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder
            .with_ansi(false)
            .event_format(crate::json_log::UpstreamJson)
            .init(),
        LogFormat::Text => {
            // Escape codes belong on a terminal, not in a file or a log collector.
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            builder.with_ansi(colour).init();
        }
    }
}
