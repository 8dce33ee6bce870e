//! The agent's Helm chart (`agent/chart`) with the real helm (built from its Go module by
//! `tests/helm/helm`): it lints, renders each provider, refuses values that cannot work with a
//! message naming the value, renders exactly as `kubectl karpenter init` renders it, packages,
//! and installs into the rig, where an agent started with the chart's Deployment's arguments and
//! environment, acting as the chart's ServiceAccount, provisions a workload.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use karpenter_test_support::rig::{repo_root, rig};
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{AgentProcess, service_account_kubeconfig, wait_for};

/// The real helm, built once and cached.
fn helm() -> Command {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    let path = HELM.get_or_init(|| {
        let out = Command::new(repo_root().join("tests/helm/helm"))
            .arg("install")
            .output()
            .expect("tests/helm/helm install");
        assert!(
            out.status.success(),
            "building helm failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .expect("a path")
                .trim(),
        )
    });
    let mut command = Command::new(path);
    // No user's helm configuration or cache leaks in.
    let home = std::env::temp_dir().join("karpenter-chart-test-helm");
    command
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"));
    command
}

fn chart() -> PathBuf {
    repo_root().join("agent/chart")
}

fn run(command: &mut Command) -> Output {
    command.output().expect("run helm")
}

/// `helm template` with `--set` values; the rendered objects, or helm's error.
fn template(sets: &[&str]) -> Result<Vec<Value>, String> {
    let args: Vec<String> = sets
        .iter()
        .flat_map(|s| ["--set".to_owned(), (*s).to_owned()])
        .collect();
    helm_template(&args)
}

/// `helm template karpenter agent/chart -n karpenter` with these arguments.
fn helm_template(args: &[String]) -> Result<Vec<Value>, String> {
    let mut command = helm();
    command
        .args(["template", "karpenter"])
        .arg(chart())
        .args(["--namespace", "karpenter"])
        .args(args);
    let out = run(&mut command);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among the rendered objects"))
}

fn env_of(deployment: &Value) -> Vec<(String, Value)> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().expect("name").to_owned(),
                e["value"].clone(),
            )
        })
        .collect()
}

fn env_value(deployment: &Value, name: &str) -> Option<String> {
    env_of(deployment)
        .into_iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.as_str().map(str::to_owned))
}

const AWS: &[&str] = &["provider=aws", "settings.clusterName=demo"];
const GCP: &[&str] = &[
    "provider=gcp",
    "settings.clusterName=demo",
    "gcp.project=demo-project",
    "gcp.region=us-central1",
];
const KWOK: &[&str] = &["provider=kwok"];

#[test]
fn helm_lint_passes_for_every_provider() {
    for sets in [AWS, GCP, KWOK] {
        let mut command = helm();
        command.arg("lint").arg(chart()).arg("--strict");
        for set in sets {
            command.args(["--set", set]);
        }
        let out = run(&mut command);
        assert!(
            out.status.success(),
            "helm lint {sets:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn each_provider_renders_two_leader_electing_replicas_spread_and_guarded() {
    for sets in [AWS, GCP, KWOK] {
        let objects = template(sets).expect("renders");
        let deployment = find(&objects, "Deployment", "karpenter");
        let spec = &deployment["spec"]["template"]["spec"];
        assert_eq!(deployment["spec"]["replicas"], 2, "{sets:?}");
        assert_eq!(
            spec["containers"][0]["args"],
            serde_json::json!(["run", "--provider", sets[0].trim_start_matches("provider=")])
        );
        assert_eq!(
            env_value(deployment, "LEADER_ELECT").as_deref(),
            Some("true")
        );
        assert_eq!(env_value(deployment, "LOG_FORMAT").as_deref(), Some("json"));
        assert_eq!(
            env_value(deployment, "MIMALLOC_ALLOW_THP").as_deref(),
            Some("0"),
            "the agent's heap stays off transparent huge pages"
        );
        assert_eq!(spec["priorityClassName"], "system-cluster-critical");
        assert_eq!(spec["serviceAccountName"], "karpenter");
        assert_eq!(
            spec["containers"][0]["livenessProbe"]["httpGet"]["path"],
            "/healthz"
        );
        assert_eq!(
            spec["containers"][0]["readinessProbe"]["httpGet"]["path"],
            "/readyz"
        );
        assert_eq!(
            spec["containers"][0]["securityContext"]["capabilities"]["drop"],
            serde_json::json!(["ALL"])
        );
        assert_eq!(
            spec["topologySpreadConstraints"][0]["topologyKey"],
            "topology.kubernetes.io/zone"
        );
        assert_eq!(
            spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                [0]["topologyKey"],
            "kubernetes.io/hostname"
        );
        assert_eq!(
            find(&objects, "PodDisruptionBudget", "karpenter")["spec"]["maxUnavailable"],
            1
        );
        find(&objects, "Service", "karpenter");
    }
    let aws = template(&[AWS, &["settings.interruptionQueue=demo-queue"]].concat()).expect("aws");
    let deployment = find(&aws, "Deployment", "karpenter");
    assert_eq!(
        env_value(deployment, "CLUSTER_NAME").as_deref(),
        Some("demo")
    );
    assert_eq!(
        env_value(deployment, "INTERRUPTION_QUEUE").as_deref(),
        Some("demo-queue")
    );
    let gcp = template(GCP).expect("gcp");
    let deployment = find(&gcp, "Deployment", "karpenter");
    assert_eq!(
        env_value(deployment, "GCP_PROJECT").as_deref(),
        Some("demo-project")
    );
    // GKE admits a system-cluster-critical pod outside kube-system only with this quota.
    let quota = find(&gcp, "ResourceQuota", "karpenter-critical-pods");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["system-cluster-critical"])
    );
    find(&gcp, "ClusterRole", "karpenter-csr-approver");
    let kwok = template(KWOK).expect("kwok");
    assert!(
        !kwok.iter().any(|o| o["kind"] == "ResourceQuota"),
        "the quota is GKE's need only"
    );
}

#[test]
fn values_that_cannot_work_fail_with_a_message_naming_the_value() {
    for (sets, named) in [
        (&[][..], "provider must be aws, gcp or kwok"),
        (
            &["provider=azure"][..],
            "provider must be aws, gcp or kwok, not \"azure\"",
        ),
        (
            &["provider=aws"][..],
            "settings.clusterName is required with provider aws",
        ),
        (
            &["provider=gcp", "settings.clusterName=demo", "gcp.region=r"][..],
            "gcp.project is required",
        ),
    ] {
        let error = template(sets).expect_err("refused");
        assert!(error.contains(named), "{sets:?}: {error}");
    }
}

/// `helm template` with a values file.
fn template_with_values(values: &Value) -> Result<Vec<Value>, String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("values.json");
    // JSON is YAML: helm reads the file as it reads any values file.
    std::fs::write(&file, values.to_string()).expect("write values");
    helm_template(&["-f".to_owned(), file.display().to_string()])
}

#[test]
fn init_renders_the_chart_into_exactly_the_objects_helm_template_makes() {
    use karpenter_core::setup::chart::{ChartError, Release, TemplateError, render};
    use serde_json::json;
    let cases = [
        json!({"provider": "kwok"}),
        // What init aws sets, with IRSA.
        json!({
            "provider": "aws",
            "settings": {"clusterName": "demo", "interruptionQueue": "Karpenter-demo"},
            "aws": {"region": "us-west-2"},
            "serviceAccount": {"name": "karpenter", "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/KarpenterControllerRole-demo"}},
            "image": {"repository": "registry.example:5000/agent", "tag": "v0.1.0"},
        }),
        // What init gcp sets for a zonal cluster with a key Secret.
        json!({
            "provider": "gcp",
            "settings": {"clusterName": "demo"},
            "gcp": {"project": "demo-project", "location": "us-central1-a", "region": "us-central1", "zones": ["us-central1-a"], "credentialsSecret": "karpenter-gcp-key"},
            "serviceAccount": {"name": "karpenter"},
        }),
        // The knobs a platform team turns.
        json!({
            "provider": "gcp",
            "fullnameOverride": "jit",
            "settings": {"clusterName": "demo", "featureGates": {"nodeRepair": true}, "batchMaxDuration": "20s"},
            "gcp": {"project": "p", "region": "europe-west4", "subnetwork": "s", "nodeTemplate": "t"},
            "replicas": 3,
            "image": {"digest": "sha256:0123"},
            "logLevel": "debug,kube=info",
            "logFormat": "text",
            "additionalLabels": {"team": "platform"},
            "podAnnotations": {"a": "b"},
            "podLabels": {"c": "d"},
            "nodeSelector": {"pool": "system"},
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}],
            "podDisruptionBudget": {"minAvailable": 1},
            "priorityClassName": "system-node-critical",
            "controller": {"env": [{"name": "EXTRA", "value": "1"}], "resources": {"requests": {"cpu": "1"}}},
            "service": {"annotations": {"prometheus.io/scrape": "true"}},
            "serviceMonitor": {"enabled": true, "additionalLabels": {"release": "prom"}, "endpointConfig": {"interval": "15s"}},
        }),
        json!({"provider": "kwok", "serviceAccount": {"create": false, "name": "existing"}, "priorityClassName": ""}),
    ];
    for values in cases {
        let helm = template_with_values(&values).unwrap_or_else(|e| panic!("{values}: {e}"));
        let ours: Vec<Value> = render(&Release::helm("karpenter", "karpenter"), &values)
            .unwrap_or_else(|e| panic!("{values}: {e}"))
            .into_iter()
            .map(|m| m.object)
            .collect();
        let ids = |objects: &[Value]| -> Vec<String> {
            objects
                .iter()
                .map(|o| format!("{} {}", o["kind"], o["metadata"]["name"]))
                .collect()
        };
        assert_eq!(ids(&ours), ids(&helm), "{values}");
        for (ours, helm) in ours.iter().zip(&helm) {
            assert_eq!(ours, helm, "{values}");
        }
    }

    // A value the chart refuses is refused by both, with the chart's message.
    let bad = json!({"provider": "aws"});
    let helm = template_with_values(&bad).expect_err("helm refuses");
    let ours = render(&Release::helm("karpenter", "karpenter"), &bad).expect_err("init refuses");
    let ChartError::Template(TemplateError::Refused(message)) = &ours else {
        panic!("{ours:?}");
    };
    assert!(
        helm.contains(message.as_str()),
        "helm: {helm}\ninit: {message}"
    );
}

#[test]
fn init_installs_the_charts_objects_named_as_it_always_named_them() {
    let settings = karpenter_core::setup::manifests::AgentSettings {
        namespace: "karpenter".to_owned(),
        service_account: "karpenter".to_owned(),
        image: "ghcr.io/kubectl-karpenter/karpenter-agent:v0.1.0".to_owned(),
        service_account_annotations: Vec::new(),
        values: serde_json::json!({"provider": "kwok"}),
    };
    let init: Vec<Value> = karpenter_core::setup::manifests::agent(&settings)
        .expect("render")
        .into_iter()
        .map(|m| m.object)
        .collect();
    let chart = template(KWOK).expect("kwok");
    // The same rules as `helm install karpenter`, under the names earlier versions of init used.
    let rules =
        |objects: &[Value], kind: &str, name: &str| find(objects, kind, name)["rules"].clone();
    assert_eq!(
        rules(&init, "ClusterRole", "karpenter-agent"),
        rules(&chart, "ClusterRole", "karpenter")
    );
    assert_eq!(
        rules(&init, "Role", "karpenter-agent"),
        rules(&chart, "Role", "karpenter")
    );
    find(&init, "Namespace", "karpenter");
    find(&init, "ServiceAccount", "karpenter");
    let deployment = find(&init, "Deployment", "karpenter-agent");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kubectl-karpenter"
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/kubectl-karpenter/karpenter-agent:v0.1.0"
    );
}

#[test]
fn helm_package_makes_an_archive_of_the_chart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(helm()
        .arg("package")
        .arg(chart())
        .arg("--destination")
        .arg(dir.path()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = dir.path().join("karpenter-agent-0.1.0.tgz");
    assert!(archive.exists(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_gives_an_agent_whose_service_account_provisions_the_demo_workload() {
    let _rig = crate::common::exclusive().await;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let namespace = "karpenter-chart";
    let rig = rig();
    let out = run(helm()
        .args(["install", "karpenter"])
        .arg(chart())
        .args([
            "--namespace",
            namespace,
            "--create-namespace",
            "--set",
            "provider=kwok",
        ])
        .arg("--kubeconfig")
        .arg(&rig.kubeconfig));
    assert!(
        out.status.success(),
        "helm install:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The chart's Deployment cannot run here (no kubelet runs containers), so its container is
    // started as a process: its arguments and environment, as the chart's ServiceAccount.
    let client = rig.client().await;
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get("karpenter")
        .await
        .expect("the chart's Deployment");
    let container = &deployment
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec")
        .containers[0];
    let args: Vec<String> = container.args.clone().expect("args");
    let env: Vec<(String, String)> = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            // The kubelet's downward API, by hand; the port is the test's.
            let value = match e.name.as_str() {
                "POD_NAME" => "karpenter-chart-test".to_owned(),
                "SYSTEM_NAMESPACE" => namespace.to_owned(),
                "METRICS_ADDRESS" => return None,
                _ => e.value?,
            };
            Some((e.name, value))
        })
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = service_account_kubeconfig(dir.path(), namespace, "karpenter");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = AgentProcess::start_with("chart", &kubeconfig, dir.path(), &args, &env);
    wait_for(
        "the agent to be ready",
        Duration::from_secs(60),
        &[&agent],
        || async { (agent.probe("/readyz").await == Some(200)).then_some(()) },
    )
    .await;

    let workload = "chart-demo";
    let applied = rig.kubectl_with_input(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: {workload}}}
spec: {{}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {workload}}}
spec:
  template:
    metadata:
      labels: {{test-pool: {workload}}}
    spec:
      requirements:
        - {{key: kubernetes.io/os, operator: In, values: [linux]}}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {workload}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {workload}, namespace: default}}
spec:
  replicas: 5
  selector: {{matchLabels: {{app: {workload}}}}}
  template:
    metadata: {{labels: {{app: {workload}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {workload}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: "1"}}}}
"#
        ),
    );
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let of_workload = ListParams::default().labels(&format!("app={workload}"));
    wait_for(
        "the workload Running",
        Duration::from_secs(180),
        &[&agent],
        || async {
            let running = pods
                .list(&of_workload)
                .await
                .ok()?
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (running == 5).then_some(())
        },
    )
    .await;
    assert_eq!(agent.probe("/healthz").await, Some(200));
    let metrics = get_text(&agent, "/metrics").await;
    assert!(
        metrics.contains(
            "karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"chart-demo\""
        ),
        "{metrics}"
    );
    // Upstream's per-pod series, refreshed every 10 s: the workload's pods, Running on the
    // pool's nodes.
    wait_for(
        "karpenter_pods_state for the workload",
        Duration::from_secs(60),
        &[&agent],
        || async {
            let metrics = get_text(&agent, "/metrics").await;
            let running = metrics
                .lines()
                .filter(|l| l.starts_with("karpenter_pods_state{name=\"chart-demo-"))
                .filter(|l| {
                    l.contains("nodepool=\"chart-demo\"")
                        && l.contains("phase=\"Running\"")
                        && l.contains("managed=\"true\"")
                })
                .count();
            (running == 5).then_some(())
        },
    )
    .await;
}

/// The body of `GET path` on the agent's HTTP port.
async fn get_text(agent: &AgentProcess, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", agent.port))
        .await
        .expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    answer
}
