//! The AWS provider and `init aws` against moto (server mode) and the real rig.
//!
//! One moto per test binary (`moto.rs`, stopped by a watchdog when this process ends), one
//! fault-injecting proxy per test in front of it (`proxy.rs`), and one rig (`../support/rig.rs`).
//! Each test names its own cluster, so tests share moto without seeing each other's instances.
//! Tests that run an agent, or touch cluster-wide objects on the rig, take [`exclusive`].

#![cfg(feature = "aws")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
// `exclusive()` is held across awaits on purpose: it keeps agents one at a time.
#![allow(clippy::await_holding_lock)]

#[path = "../support/cloud_agent.rs"]
mod cloud_agent;
#[path = "../support/rig.rs"]
mod rig;

mod agent;
mod env;
mod moto;
mod provider;
mod proxy;
mod setup;

pub use cloud_agent::{apply, exclusive, wait_for};

/// An EC2NodeClass named `name` for `cluster`'s discovery tags, nodes in `role`.
pub fn node_class(name: &str, cluster: &str, role: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: {name}}}
spec:
  role: {role}
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {cluster}}}}}]
"#
    )
}

/// With `KARPENTER_TEST_LOG=1`, the library's tracing events go to stderr (shown for failing
/// tests). A minimal subscriber, as tracing-subscriber is not a dependency of the core crate.
pub fn log_to_stderr() {
    use std::sync::Once;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    struct Stderr;
    struct Line(String);
    impl Visit for Line {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
    impl Subscriber for Stderr {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target().starts_with("karpenter_core")
                && *metadata.level() <= tracing::Level::DEBUG
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut line = Line(String::new());
            event.record(&mut line);
            eprintln!(
                "{} {}{}",
                event.metadata().level(),
                event.metadata().target(),
                line.0
            );
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
    static ONCE: Once = Once::new();
    if std::env::var_os("KARPENTER_TEST_LOG").is_some() {
        ONCE.call_once(|| {
            let _ = tracing::subscriber::set_global_default(Stderr);
        });
    }
}
