//! The real control plane that integration tests talk to: etcd, kube-apiserver, kube-scheduler,
//! kube-controller-manager and kwok, started by `tests/rig/rig` and shared by every test in one
//! test binary.
//!
//! The rig is bound to this test process (`--owner-pid`): a watchdog stops it when the process
//! exits, however it exits, so no run leaves processes (or its directory in /tmp) behind;
//! `RIG_KEEP=1` keeps the directory and the components' logs for a look after a failure. Set `KARPENTER_TEST_KUBECONFIG`
//! to point the tests at a rig you already started (`tests/rig/rig up DIR`) and skip the start-up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// A running rig.
pub struct Rig {
    /// Admin kubeconfig of the rig.
    pub kubeconfig: PathBuf,
    /// Directory holding the rig's kubectl and friends.
    pub bin: PathBuf,
    /// Kept so the rig's directory (logs, certificates) outlives the tests.
    _dir: Option<tempfile::TempDir>,
}

/// The repository root (the directory holding `tests/rig/rig`).
pub fn repo_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("tests/rig/rig").exists() {
        assert!(
            dir.pop(),
            "tests/rig/rig not found above {}",
            env!("CARGO_MANIFEST_DIR")
        );
    }
    dir
}

fn rig_script() -> PathBuf {
    repo_root().join("tests/rig/rig")
}

fn run_checked(command: &mut Command, what: &str) -> Output {
    let output = command
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The rig shared by this test binary, started on first use, with the CRDs installed.
/// The namespace and ServiceAccount the agent runs as in the tests (`init`'s defaults).
const AGENT_NAMESPACE: &str = "karpenter";
const AGENT_SERVICE_ACCOUNT: &str = "karpenter";

pub fn rig() -> &'static Rig {
    static RIG: OnceLock<Rig> = OnceLock::new();
    RIG.get_or_init(|| {
        let bin_out = run_checked(
            Command::new(rig_script()).arg("bin"),
            "building the rig (tests/rig/rig bin)",
        );
        let bin = PathBuf::from(
            String::from_utf8_lossy(&bin_out.stdout)
                .lines()
                .last()
                .unwrap_or_default()
                .trim(),
        );
        let rig = match std::env::var_os("KARPENTER_TEST_KUBECONFIG") {
            Some(kubeconfig) => Rig {
                kubeconfig: kubeconfig.into(),
                bin,
                _dir: None,
            },
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("karpenter-rig-")
                    .tempdir()
                    .expect("temp dir for the rig");
                run_checked(
                    Command::new(rig_script())
                        .arg("up")
                        .arg(dir.path())
                        .arg("--owner-pid")
                        .arg(std::process::id().to_string()),
                    "starting the rig (tests/rig/rig up)",
                );
                Rig {
                    kubeconfig: dir.path().join("kubeconfig"),
                    bin,
                    _dir: Some(dir),
                }
            }
        };
        rig.install_crds();
        rig
    })
}

impl Rig {
    /// The rig's own kubectl, pointed at the rig.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(self.bin.join("kubectl"));
        command.env("KUBECONFIG", &self.kubeconfig);
        command
    }

    /// Runs kubectl with `stdin` as input and returns its output, whatever the exit status.
    pub fn kubectl_with_input(&self, args: &[&str], stdin: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write to kubectl");
        child.wait_with_output().expect("wait for kubectl")
    }

    /// Runs kubectl and fails the test if it fails; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let output = run_checked(
            self.kubectl().args(args),
            &format!("kubectl {}", args.join(" ")),
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The writes the rig's audit log holds (see `tests/rig/README.md`): creates, updates,
    /// patches and deletes of NodeClaims, Nodes, pods and evictions made with the admin
    /// credentials, an agent's through impersonation included, oldest first.
    pub fn audited_writes(&self) -> Vec<AuditedWrite> {
        let dir = self.kubeconfig.parent().expect("the rig's directory");
        let text = std::fs::read_to_string(dir.join("run/audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| event["stage"] == "ResponseComplete")
            .map(|event| {
                let text =
                    |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
                let object = &event["objectRef"];
                AuditedWrite {
                    verb: text(&event["verb"]),
                    resource: text(&object["resource"]),
                    subresource: text(&object["subresource"]),
                    namespace: text(&object["namespace"]),
                    name: text(&object["name"]),
                    groups: event["impersonatedUser"]["groups"]
                        .as_array()
                        .map(|gs| gs.iter().map(text).collect())
                        .unwrap_or_default(),
                    received: text(&event["requestReceivedTimestamp"])
                        .parse()
                        .expect("an RFC 3339 timestamp"),
                    code: event["responseStatus"]["code"].as_u64().unwrap_or_default(),
                }
            })
            .collect()
    }

    /// A kube client for the rig (one per test: clients belong to the runtime that made them).
    pub async fn client(&self) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .expect("read the rig's kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("load the rig's kubeconfig");
        kube::Client::try_from(config).expect("client for the rig")
    }

    /// A client for an agent under test, built as the agent builds its own
    /// (`karpenter_core::client::agent_client`: no automatic retries) and acting as the
    /// ServiceAccount `kubectl karpenter init` installs, with the ClusterRole it installs
    /// (impersonated from the rig's admin credentials): a verb the shipped RBAC lacks fails a
    /// test rather than a user.
    pub async fn agent_client(&self) -> kube::Client {
        self.install_agent_rbac(false);
        self.agent_identity().await
    }

    /// [`Self::agent_client`] with the RBAC `init gcp` adds: the approval of its kubelets'
    /// certificate requests.
    pub async fn gcp_agent_client(&self) -> kube::Client {
        self.install_agent_rbac(true);
        self.agent_identity().await
    }

    async fn agent_identity(&self) -> kube::Client {
        let config = self
            .impersonating_config(
                &format!("system:serviceaccount:{AGENT_NAMESPACE}:{AGENT_SERVICE_ACCOUNT}"),
                &[
                    "system:serviceaccounts",
                    &format!("system:serviceaccounts:{AGENT_NAMESPACE}"),
                    "system:authenticated",
                ],
            )
            .await;
        karpenter_core::client::agent_client(config).expect("agent client for the rig")
    }

    /// A client acting as `user` in `groups` (impersonated from the rig's admin credentials),
    /// with only the permissions RBAC gives them.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> kube::Client {
        let config = self.impersonating_config(user, groups).await;
        kube::Client::try_from(config).expect("client for the rig")
    }

    async fn impersonating_config(&self, user: &str, groups: &[&str]) -> kube::Config {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .expect("read the rig's kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("load the rig's kubeconfig");
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups =
            Some(groups.iter().map(|g| (*g).to_owned()).collect());
        config
    }

    /// Applies the Namespace, ServiceAccount and RBAC of the agent as `init` renders them from
    /// the chart (not its Deployment: the tests run the agent in-process); with `csr_approver`,
    /// rendered for GKE, with the CSR approval `init gcp` adds.
    /// Applied on every call: a test of `init` in the same binary may have pointed the
    /// cluster-wide bindings (named as init names them) at its own namespace.
    fn install_agent_rbac(&self, csr_approver: bool) {
        let settings =
            |values: serde_json::Value| karpenter_core::setup::manifests::AgentSettings {
                namespace: AGENT_NAMESPACE.to_owned(),
                service_account: AGENT_SERVICE_ACCOUNT.to_owned(),
                image: "unused".to_owned(),
                service_account_annotations: Vec::new(),
                values,
            };
        let apply = |settings: karpenter_core::setup::manifests::AgentSettings| {
            let manifests =
                karpenter_core::setup::manifests::agent(&settings).expect("render the chart");
            let yaml: Vec<String> = manifests
                .into_iter()
                .filter(|m| {
                    [
                        "Namespace",
                        "ServiceAccount",
                        "ClusterRole",
                        "ClusterRoleBinding",
                        "Role",
                        "RoleBinding",
                    ]
                    .contains(&m.resource.kind.as_str())
                })
                .map(|m| m.object.to_string())
                .collect();
            let applied = self.kubectl_with_input(
                &["apply", "--server-side", "--force-conflicts", "-f", "-"],
                &yaml.join("\n---\n"),
            );
            assert!(
                applied.status.success(),
                "applying the agent's RBAC failed: {}",
                String::from_utf8_lossy(&applied.stderr)
            );
        };
        if csr_approver {
            apply(settings(serde_json::json!({
                "provider": "gcp",
                "settings": {"clusterName": "rig"},
                "gcp": {"project": "rig", "region": "us-central1"},
            })));
        } else {
            apply(settings(serde_json::json!({"provider": "kwok"})));
        }
    }

    fn install_crds(&self) {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let yaml = karpenter_core::apis::crds_yaml().expect("render CRDs");
        let applied = self.kubectl_with_input(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            &yaml,
        );
        assert!(
            applied.status.success(),
            "applying the CRDs failed: {}",
            String::from_utf8_lossy(&applied.stderr)
        );
        self.kubectl_ok(&[
            "wait",
            "--for",
            "condition=Established",
            "--timeout",
            "60s",
            "crd",
            "--all",
        ]);
    }
}

/// Reads a file below the repository root.
pub fn read_repo_file(path: impl AsRef<Path>) -> String {
    let path = repo_root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// One write the rig's audit log recorded.
#[derive(Clone, Debug)]
pub struct AuditedWrite {
    /// `create`, `update`, `patch`, `delete`...
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The groups the request impersonated (an agent's kubeconfig may add one naming it).
    pub groups: Vec<String>,
    /// When the API server received it.
    pub received: k8s_openapi::jiff::Timestamp,
    /// The response's status code.
    pub code: u64,
}
