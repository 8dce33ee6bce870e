//! Where the library's tracing events go in an integration test: nowhere, unless
//! `KARPENTER_TEST_LOG` asks for them. One set-up for every test binary (the kwok agent tests
//! and the cloud providers' tests each had their own).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::TestWriter;

/// Installs the process-wide subscriber once; later calls (every agent a test starts) do nothing.
///
/// - `KARPENTER_TEST_LOG=1`: the events go to the test's captured stderr, shown for failing tests
///   (by default the core library's, down to debug).
/// - `KARPENTER_TEST_LOG=PATH`: they are appended to the file `PATH` (by default info, and kube's
///   runtime at warn): an agent's tasks run on worker threads and a long run is easier to read
///   in a file.
///
/// `RUST_LOG` replaces either default filter.
pub fn init() {
    let Some(target) = std::env::var_os("KARPENTER_TEST_LOG") else {
        return;
    };
    let filter = |default: &str| {
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))
    };
    // `try_init` fails when a subscriber is already set (a second agent, another test): fine.
    if target == "1" {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter("karpenter_core=debug"))
            .with_ansi(false)
            .with_writer(TestWriter::with_stderr())
            .try_init();
    } else if let Ok(file) = std::fs::File::options()
        .create(true)
        .append(true)
        .open(&target)
    {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter("info,kube_runtime=warn"))
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .try_init();
    }
}
