//! What the tests that run `karpenter-agent` processes on the rig share: an agent process, a
//! kubeconfig acting as a ServiceAccount, waiting with the agents' logs on timeout.

use karpenter_test_support::rig::rig;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One test on the rig at a time: the tests here run agents (or install one) on the one rig
/// this binary shares, and two would compete for its pods and its Lease.
pub(crate) async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// One agent process, killed when dropped.
pub(crate) struct AgentProcess {
    pub child: Child,
    pub port: u16,
    log: PathBuf,
}

impl AgentProcess {
    /// `karpenter-agent run --provider kwok`, leading on the Lease in `namespace`.
    pub(crate) fn start(name: &str, kubeconfig: &Path, dir: &Path) -> Self {
        Self::start_with(
            name,
            kubeconfig,
            dir,
            &[
                "run",
                "--provider",
                "kwok",
                "--log-format",
                "json",
                "--leader-election-namespace",
                NAMESPACE,
            ],
            &[],
        )
    }

    /// `karpenter-agent ARGS` with `env` (and `POD_NAME`), serving HTTP on a free port.
    pub(crate) fn start_with(
        name: &str,
        kubeconfig: &Path,
        dir: &Path,
        args: &[&str],
        env: &[(String, String)],
    ) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_karpenter-agent"))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .arg("--metrics-address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env("POD_NAME", name)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start karpenter-agent");
        Self { child, port, log }
    }

    /// The status code of `GET path` on the agent's HTTP port, if it answers.
    pub(crate) async fn probe(&self, path: &str) -> Option<u16> {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        answer.split_whitespace().nth(1)?.parse().ok()
    }

    /// Every line the agent wrote, each parsed as upstream's JSON log line (`level`, `time`,
    /// `logger`, `message`, `caller`, `commit` at the top level); panics on one that is not.
    pub(crate) fn json_log(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.log).expect("the agent's log");
        text.lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
                for key in ["level", "time", "logger", "message", "caller", "commit"] {
                    assert!(value[key].is_string(), "no {key} in {line}");
                }
                value
            })
            .collect()
    }

    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `init`'s namespace, where its agents' Lease lives.
pub(crate) const NAMESPACE: &str = "karpenter";

/// The rig's admin kubeconfig, impersonating a ServiceAccount (as a kubeconfig's
/// `as:` and `as-groups:` do), so only `init`'s RBAC lets the agents act.
pub(crate) fn service_account_kubeconfig(
    dir: &Path,
    namespace: &str,
    service_account: &str,
) -> PathBuf {
    marked_service_account_kubeconfig(dir, namespace, service_account, None)
}

/// [`service_account_kubeconfig`] that also impersonates the group `mark` (which grants
/// nothing), so the rig's audit log tells this agent's writes from another's.
pub(crate) fn marked_service_account_kubeconfig(
    dir: &Path,
    namespace: &str,
    service_account: &str,
    mark: Option<&str>,
) -> PathBuf {
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(&rig().kubeconfig).expect("the rig's kubeconfig");
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.impersonate = Some(format!(
                "system:serviceaccount:{namespace}:{service_account}"
            ));
            let mut groups = vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ];
            groups.extend(mark.map(str::to_owned));
            auth.impersonate_groups = Some(groups);
        }
    }
    let path = dir.join(format!(
        "kubeconfig-{namespace}-{service_account}{}",
        mark.map(|m| format!("-{}", m.replace(':', "-")))
            .unwrap_or_default()
    ));
    std::fs::write(
        &path,
        serde_json::to_string(&kubeconfig).expect("kubeconfig as JSON"),
    )
    .expect("write kubeconfig");
    path
}

pub(crate) async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    agents: &[&AgentProcess],
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if start.elapsed() > timeout {
            let logs: Vec<String> = agents.iter().map(|a| a.log_tail()).collect();
            panic!(
                "timed out waiting for {what}; agent logs:\n{}",
                logs.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
