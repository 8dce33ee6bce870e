//! JSON log lines shaped as upstream Karpenter's (zap's production encoder, as configured by
//! `operatorpkg`): one object per line with `level` (`INFO`, `ERROR`...), `time` (RFC 3339,
//! milliseconds, UTC), `logger` (`controller`), `message`, `caller`, `commit`, the `controller`
//! that wrote it under upstream's name, and the record's fields at the top level, the objects
//! as upstream keys them: `"NodeClaim": {"name": …}`, `"NodePool"`, `"Node"`, and
//! `"Pod": {"namespace": …, "name": …}`. Log queries and parsers written for upstream's lines
//! read these unchanged.
//!
//! Written here because `tracing-subscriber`'s JSON formatter nests the fields (the message
//! under `fields.message`) and names levels in its own way; this is the one formatter the agent
//! uses for `--log-format json`.

use serde_json::Value;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// What `commit` says: the commit the image was built from when the build says
/// (`KARPENTER_COMMIT`), else the agent's version.
pub(crate) const COMMIT: &str = match option_env!("KARPENTER_COMMIT") {
    Some(commit) => commit,
    None => env!("CARGO_PKG_VERSION"),
};

/// Formats each record as one upstream-shaped JSON line.
pub(crate) struct UpstreamJson;

impl<S, N> FormatEvent<S, N> for UpstreamJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let line = record(
            *meta.level(),
            meta.target(),
            meta.file().zip(meta.line()),
            fields,
            k8s_openapi::jiff::Timestamp::now(),
        );
        writeln!(writer, "{}", render(&line))
    }
}

/// A record's fields in the order they were given, the message apart.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    rest: Vec<(String, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.rest.push((field.name().to_owned(), value));
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        // One string with the causes, as zap's `error` field carries Go's wrapped message.
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            let _ = write!(text, ": {cause}");
            source = cause.source();
        }
        self.put(field, Value::from(text));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%x` fields arrive here as their Display text.
        self.put(field, Value::from(format!("{value:?}")));
    }
}

/// zap's level names.
fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "DEBUG",
    }
}

/// Upstream's name of the controller a module of the library is, if it is one.
fn controller_of(target: &str) -> Option<&'static str> {
    let path = target.strip_prefix("karpenter_core::controllers::")?;
    let names: [(&str, &'static str); 13] = [
        ("provisioning", "provisioner"),
        ("disruption", "disruption"),
        ("lifecycle::termination", "node.termination"),
        ("lifecycle", "nodeclaim.lifecycle"),
        ("garbage_collection", "nodeclaim.garbagecollection"),
        ("nodeclaim_disruption", "nodeclaim.disruption"),
        ("interruption", "interruption"),
        ("nodepool_status", "nodepool.readiness"),
        ("nodeclass_status", "nodeclass"),
        ("static_capacity", "static.provisioning"),
        ("pod_events", "nodeclaim.podevents"),
        ("csr_approval", "nodeclaim.csrapproval"),
        ("leader_election", "leader-election"),
    ];
    names
        .iter()
        .find(|(module, _)| path == *module || path.starts_with(&format!("{module}::")))
        .map(|(_, name)| *name)
}

/// A field as upstream keys it: the objects by their kind, with their name (and a pod's
/// namespace); everything else as it is.
fn upstream_field(key: String, value: Value) -> (String, Value) {
    let kind = match key.as_str() {
        "nodeclaim" => "NodeClaim",
        "nodepool" => "NodePool",
        "node" => "Node",
        "pod" => "Pod",
        _ => return (key, value),
    };
    let Value::String(name) = value else {
        return (key, value);
    };
    let object = match (kind, name.split_once('/')) {
        ("Pod", Some((namespace, name))) => {
            serde_json::json!({"namespace": namespace, "name": name})
        }
        _ => serde_json::json!({"name": name}),
    };
    (kind.to_owned(), object)
}

/// The line's keys in upstream's order: the fixed ones, then the record's fields.
fn record(
    level: Level,
    target: &str,
    caller: Option<(&str, u32)>,
    fields: Fields,
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<(String, Value)> {
    let mut line: Vec<(String, Value)> = vec![
        ("level".into(), level_name(level).into()),
        (
            "time".into(),
            now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string().into(),
        ),
        ("logger".into(), "controller".into()),
        ("message".into(), fields.message.unwrap_or_default().into()),
    ];
    if let Some((file, number)) = caller {
        line.push(("caller".into(), format!("{file}:{number}").into()));
    }
    line.push(("commit".into(), COMMIT.into()));
    if let Some(controller) = controller_of(target) {
        line.push(("controller".into(), controller.into()));
    }
    for (key, value) in fields.rest {
        let (key, value) = upstream_field(key, value);
        // The fixed keys above win over a field of the same name.
        if !line.iter().any(|(k, _)| *k == key) {
            line.push((key, value));
        }
    }
    line
}

/// One JSON object, its keys in the order given (a `serde_json::Map` would sort them).
fn render(line: &[(String, Value)]) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in line.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(key.as_str()).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_as_upstreams_line_with_its_objects_keyed_by_kind() {
        let fields = Fields {
            message: Some("launched".to_owned()),
            rest: vec![
                ("nodeclaim".to_owned(), Value::from("default-x7k2p")),
                ("nodepool".to_owned(), Value::from("default")),
                ("pod".to_owned(), Value::from("shop/web-1")),
                ("instance_type".to_owned(), Value::from("m5.large")),
                ("level".to_owned(), Value::from("shadowed")),
            ],
        };
        let now = k8s_openapi::jiff::Timestamp::from_millisecond(1_796_000_000_123)
            .expect("a valid time");
        let line = record(
            Level::INFO,
            "karpenter_core::controllers::lifecycle::launch",
            Some(("src/controllers/lifecycle/launch.rs", 94)),
            fields,
            now,
        );
        let text = render(&line);
        assert!(text.starts_with(r#"{"level":"INFO","time":"#), "{text}");
        let parsed: Value = serde_json::from_str(&text).expect("one JSON object");
        assert_eq!(
            parsed,
            serde_json::json!({
                "level": "INFO", "time": "2026-11-30T00:53:20.123Z", "logger": "controller",
                "message": "launched", "caller": "src/controllers/lifecycle/launch.rs:94",
                "commit": COMMIT, "controller": "nodeclaim.lifecycle",
                "NodeClaim": {"name": "default-x7k2p"}, "NodePool": {"name": "default"},
                "Pod": {"namespace": "shop", "name": "web-1"}, "instance_type": "m5.large",
            })
        );
    }

    #[test]
    fn each_controller_module_is_named_as_upstream_names_its_controller() {
        assert_eq!(
            controller_of("karpenter_core::controllers::lifecycle::termination::drain"),
            Some("node.termination")
        );
        assert_eq!(
            controller_of("karpenter_core::controllers::provisioning::creates"),
            Some("provisioner")
        );
        assert_eq!(controller_of("karpenter_core::cloud::aws::launch"), None);
    }
}
