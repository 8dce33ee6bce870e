//! The plugin's way to the API server: a client built the way kubectl builds one (`--kubeconfig`,
//! `--context`, `KUBECONFIG`, then in-cluster), and every request counted, so `-v` can say how many
//! calls a command made and the performance test can hold `status` to one list per kind.

pub(crate) mod items;
pub(crate) mod lean;
pub(crate) mod protobuf;

use anyhow::{Context as _, anyhow};
use http_body_util::BodyExt as _;
use kube::api::{Api, ListParams, ObjectList};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// How much of a list's body is gathered before the decoding thread gets it (see `stream_list`).
const CHUNK: usize = 256 * 1024;

/// kubectl's connection flags.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct ConnectArgs {
    /// Path to the kubeconfig file to use (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The name of the kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// How long to wait for the answer to each request before giving up, as kubectl's flag: a
    /// duration such as 30s or 2m, a bare number being seconds; 0 waits as long as it takes.
    #[arg(long, global = true, value_name = "DURATION", value_parser = parse_request_timeout)]
    pub request_timeout: Option<Duration>,
}

/// kubectl's `--request-timeout`: `0`, whole seconds, or a duration with units.
fn parse_request_timeout(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    karpenter_core::apis::parse_duration(text).map_err(|_| {
        "expected a duration such as 30s, 2m or 1h (or a number of seconds; 0 for none)".to_owned()
    })
}

/// A connected client and the requests made through it.
pub(crate) struct Cluster {
    client: Client,
    calls: Mutex<Vec<String>>,
}

impl Cluster {
    /// Connects as kubectl would with these flags.
    pub(crate) async fn connect(args: &ConnectArgs) -> anyhow::Result<Self> {
        let options = KubeConfigOptions {
            context: args.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match &args.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options).await.context("cannot use the kubeconfig")?
            }
            None => match Config::from_kubeconfig(&options).await {
                Ok(config) => config,
                Err(kubeconfig_error) if args.context.is_none() => Config::incluster().map_err(|_| {
                    anyhow!(kubeconfig_error).context("no kubeconfig found (set --kubeconfig or KUBECONFIG) and not running in a cluster")
                })?,
                Err(e) => return Err(anyhow!(e).context("cannot use the kubeconfig")),
            },
        };
        // HTTPS_PROXY and NO_PROXY as kubectl reads them (kube alone reads them otherwise).
        karpenter_core::client::proxy::apply_environment(&mut config, |name| {
            std::env::var(name).ok()
        });
        karpenter_core::client::identify(&mut config, "kubectl-karpenter");
        let client = match args.request_timeout.filter(|limit| !limit.is_zero()) {
            Some(limit) => karpenter_core::client::bounded_client(config, limit),
            None => Client::try_from(config),
        }
        .context("cannot build a client for the cluster")?;
        Ok(Self {
            client,
            calls: Mutex::new(Vec::new()),
        })
    }

    /// The client itself, for library code that takes one (`init`'s setup plan).
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    fn record(&self, call: String) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call);
    }

    /// The requests made so far, in order (`list nodeclaims`, `get node/x`...).
    pub(crate) fn calls(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// An API for a cluster-scoped kind, or a namespaced kind across all namespaces.
    pub(crate) fn all<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + Debug,
        K::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }

    /// An API for a namespaced kind in `namespace`, or across all namespaces when `None`.
    pub(crate) fn namespaced<K>(&self, namespace: Option<&str>) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug,
        K::DynamicType: Default,
    {
        match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Lists every object `params` selects, in one request.
    pub(crate) async fn list<K>(&self, api: Api<K>, params: ListParams) -> anyhow::Result<Vec<K>>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let plural = K::plural(&K::DynamicType::default()).into_owned();
        let call = describe_list(&plural, &params);
        let started = std::time::Instant::now();
        let result = api.list(&params).await.map(|list| list.items);
        let outcome = result
            .as_ref()
            .map_or_else(|_| "failed".to_owned(), |items| items.len().to_string());
        self.record(format!(
            "{call} ({outcome} in {} ms)",
            started.elapsed().as_millis()
        ));
        result.map_err(|e| explain_api_error::<K>(e, &format!("listing {plural}")))
    }

    /// Lists every object `params` selects, in one request, decoding each item as the lean shape
    /// `L` (see [`lean`]) before turning it into `K`. Items are decoded as the response streams
    /// in (see [`items`]), on a blocking thread: the lists run concurrently on one task, and
    /// megabytes of JSON decoded in place would stall reading the others' responses meanwhile.
    pub(crate) async fn list_lean<K, L>(
        &self,
        api: Api<K>,
        params: ListParams,
    ) -> anyhow::Result<Vec<K>>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
        K::DynamicType: Default,
        L: DeserializeOwned + Into<K> + Send + 'static,
    {
        let plural = K::plural(&K::DynamicType::default()).into_owned();
        let call = describe_list(&plural, &params);
        let started = std::time::Instant::now();
        let result = self.stream_list::<K, L>(&api, &params).await;
        let outcome = result
            .as_ref()
            .map_or_else(|_| "failed".to_owned(), |items| items.len().to_string());
        self.record(format!(
            "{call} ({outcome} in {} ms)",
            started.elapsed().as_millis()
        ));
        result.map_err(|e| match e {
            ListError::Api(e) => explain_api_error::<K>(e, &format!("listing {plural}")),
            ListError::Decode(e) => e.context(format!("listing {plural} failed")),
        })
    }

    /// One list request, its items decoded on a blocking thread while the body still arrives.
    async fn stream_list<K, L>(
        &self,
        api: &Api<K>,
        params: &ListParams,
    ) -> Result<Vec<K>, ListError>
    where
        K: kube::Resource + Send + 'static,
        L: DeserializeOwned + Into<K> + Send + 'static,
    {
        let mut request = kube::core::Request::new(api.resource_url())
            .list(params)
            .map_err(|e| ListError::Api(kube::Error::BuildRequest(e)))?;
        request
            .headers_mut()
            .insert("accept", http::HeaderValue::from_static("application/json"));
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(ListError::Api)?;
        if !response.status().is_success() {
            // An error answer is a Status, which explain_api_error words.
            let code = response.status().as_u16();
            let body = response
                .into_body()
                .collect_bytes()
                .await
                .map_err(ListError::Api)?;
            return Err(ListError::Api(api_error(code, &body)));
        }
        let (chunks, arriving) = std::sync::mpsc::channel::<Vec<u8>>();
        let decoder = tokio::task::spawn_blocking(move || items::decode::<K, L, _>(arriving));
        let mut body = response.into_body();
        let mut read_error = None;
        // Frames are a socket read each (~4 KB): handed over one by one, a 25 MB list was 6,000
        // wake-ups of the decoding thread. Gathered to CHUNK it is about a hundred; one `status`
        // of 5,000 claims and Nodes went from 44,800 futex calls to 33,400 (the rest is the
        // runtime's own), and the splitter moves its leftover bytes once a chunk.
        let mut pending = Vec::with_capacity(CHUNK);
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        pending.extend_from_slice(&data);
                    }
                    // A decoder that stopped has its error to give; the rest is not needed.
                    if pending.len() >= CHUNK
                        && chunks
                            .send(std::mem::replace(&mut pending, Vec::with_capacity(CHUNK)))
                            .is_err()
                    {
                        break;
                    }
                }
                Err(e) => {
                    read_error = Some(e);
                    break;
                }
            }
        }
        if !pending.is_empty() {
            // Fails only when the decoder already stopped, and then it has the error to give.
            let _ = chunks.send(pending);
        }
        drop(chunks);
        let decoded = decoder
            .await
            .map_err(|e| ListError::Decode(anyhow!(e).context("the decoding thread failed")))?;
        match (read_error, decoded) {
            (Some(e), _) => Err(ListError::Api(e)),
            (None, decoded) => decoded.map_err(ListError::Decode),
        }
    }

    /// Lists Nodes in one request, asking for protobuf (see [`protobuf`]); a server that answers
    /// JSON gets the lean JSON decoding instead.
    pub(crate) async fn list_nodes(
        &self,
        api: Api<k8s_openapi::api::core::v1::Node>,
        params: ListParams,
    ) -> anyhow::Result<Vec<k8s_openapi::api::core::v1::Node>> {
        let call = describe_list("nodes", &params);
        let started = std::time::Instant::now();
        let mut request = kube::core::Request::new(api.resource_url())
            .list(&params)
            .map_err(kube::Error::BuildRequest)?;
        let accept = format!("{}, application/json", protobuf::MEDIA_TYPE)
            .parse()
            .context("the Accept header")?;
        request.headers_mut().insert("accept", accept);
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await;
        let response = match response {
            Ok(response) if response.status().is_success() => response,
            // Errors come back protobuf-encoded too: ask again the JSON way, whose errors
            // explain_api_error knows how to word.
            _ => return self.list_lean::<_, lean::LeanNode>(api, params).await,
        };
        let is_protobuf = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with(protobuf::MEDIA_TYPE));
        let body = response.into_body().collect_bytes().await.map_err(|e| {
            explain_api_error::<k8s_openapi::api::core::v1::Node>(e, "listing nodes")
        })?;
        // Decoded on a blocking thread, as in list_lean.
        let decoded = tokio::task::spawn_blocking(move || {
            if is_protobuf {
                protobuf::decode_node_list(&body)
            } else {
                let list: ObjectList<lean::LeanNode> =
                    serde_json::from_slice(&body).context("decoding the node list")?;
                Ok(list.items.into_iter().map(Into::into).collect())
            }
        })
        .await
        .context("decoding the node list")?;
        let outcome = decoded
            .as_ref()
            .map_or_else(|_| "failed".to_owned(), |items| items.len().to_string());
        let encoding = if is_protobuf { ", protobuf" } else { "" };
        self.record(format!(
            "{call} ({outcome} in {} ms{encoding})",
            started.elapsed().as_millis()
        ));
        decoded.context("listing nodes")
    }

    /// Gets one object; `None` when it does not exist.
    pub(crate) async fn get_opt<K>(&self, api: &Api<K>, name: &str) -> anyhow::Result<Option<K>>
    where
        K: kube::Resource + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        let kind = K::kind(&K::DynamicType::default()).to_lowercase();
        let started = std::time::Instant::now();
        let result = api.get_opt(name).await;
        self.record(format!(
            "get {kind}/{name} ({} ms)",
            started.elapsed().as_millis()
        ));
        result.map_err(|e| explain_api_error::<K>(e, &format!("getting {kind} {name}")))
    }
}

/// Why a list failed: the API server's answer or the connection (worded by
/// [`explain_api_error`]), or a body that does not decode.
enum ListError {
    Api(kube::Error),
    Decode(anyhow::Error),
}

/// The error an unsuccessful answer carries: its `Status`, or the body as text when it is not
/// one (a proxy's error page).
fn api_error(code: u16, body: &[u8]) -> kube::Error {
    match serde_json::from_slice::<kube::core::Status>(body) {
        Ok(status) if status.is_failure() => kube::Error::Api(Box::new(status)),
        _ => kube::Error::Api(Box::new(
            kube::core::Status::failure(&String::from_utf8_lossy(body), "").with_code(code),
        )),
    }
}

/// A list request as `-v` prints it: `list pods --field-selector spec.nodeName=`.
fn describe_list(plural: &str, params: &ListParams) -> String {
    let mut call = format!("list {plural}");
    if let Some(fields) = &params.field_selector {
        call.push_str(&format!(" --field-selector {fields}"));
    }
    if let Some(labels) = &params.label_selector {
        call.push_str(&format!(" -l {labels}"));
    }
    if params.resource_version.as_deref() == Some("0") {
        call.push_str(" (from the cache)");
    }
    call
}

/// Turns an API error into one line a user can act on.
fn explain_api_error<K>(error: kube::Error, action: &str) -> anyhow::Error
where
    K: kube::Resource,
    K::DynamicType: Default,
{
    let dt = K::DynamicType::default();
    if let kube::Error::Api(status) = &error {
        if status.code == 404 && K::group(&dt) == karpenter_core::apis::labels::GROUP {
            return anyhow!(error).context(format!(
                "{action} failed: the cluster does not serve {}/{} {}; install Karpenter first: kubectl karpenter init aws|gcp, or the agent's Helm chart, which carries the CRDs",
                K::group(&dt),
                K::version(&dt),
                K::kind(&dt)
            ));
        }
        if status.code == 401 || status.code == 403 {
            let message = status.message.clone();
            return anyhow!(error).context(format!("{action} failed: not allowed ({message})"));
        }
    }
    anyhow!(error).context(format!("{action} failed"))
}
