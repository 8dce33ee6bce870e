//! A fault-injecting HTTP proxy in front of moto, owned by the project, for what moto cannot do:
//!
//! * **Capacity errors.** For instance types marked with [`Proxy::insufficient_capacity`], a
//!   CreateFleet request loses those overrides before it reaches moto, and the response gains an
//!   `<errorSet>` item per removed override with `InsufficientInstanceCapacity`, as EC2 reports
//!   it. If no override is left, the proxy answers itself with no instances. (moto always
//!   launches the first override, so this is also how "the next type" gets picked.)
//! * **Permission errors.** Actions marked with [`Proxy::deny`] answer AccessDenied in the
//!   protocol's own error format; [`Proxy::deny_tagged`] refuses only the requests that would
//!   create a resource with a given tag, as a policy condition on `aws:RequestTag` does.
//! * **CreateFleet's client token**, which moto ignores, as EC2 documents it ("Ensuring
//!   idempotency"): a token seen before with the same parameters gets the first answer again
//!   (launching nothing more); with other parameters, `IdempotentParameterMismatch`. Only
//!   answered requests are remembered: one refused before EC2 took it (a denied permission, a
//!   throttle) leaves the token unused.
//! * **A fleet that launches nothing** for another reason than capacity:
//!   [`Proxy::fail_next_fleet`] answers the next CreateFleet with no instance and that error.
//! * **Throttling.** The next N requests of an action marked with [`Proxy::throttle`] answer
//!   the protocol's rate-limit error without reaching moto: EC2's `RequestLimitExceeded` (HTTP
//!   503), the JSON services' `ThrottlingException`, IAM's and SQS's `Throttling`.
//! * **Slow calls.** Actions marked with [`Proxy::slow`] reach moto at once but their answer
//!   waits, as a real CreateFleet takes seconds: a client that dies meanwhile leaves behind what
//!   the call made.
//! * **AWS public parameters.** moto ships no `/aws/service/eks/...` SSM parameters and refuses
//!   PutParameter under `/aws/`; [`Proxy::public_parameter`] serves them.
//! * **The Price List Query API.** moto has no Pricing service (it answers 500). The proxy
//!   answers GetProducts from the products given to [`Proxy::price_list`] (none by default), as
//!   AWS does: `ServiceCode` must be `AmazonEC2`, each `TERM_MATCH` filter must match the
//!   product's field, at most `MaxResults` (1 to 100, default 100) a page with a `NextToken`.
//!
//! HTTP/1.1, one request per connection (`Connection: close`), which the SDK's client handles.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Faults {
    insufficient: HashSet<String>,
    denied: HashSet<String>,
    denied_tagged: Vec<(String, String, String)>,
    fleet_tokens: HashMap<String, (String, Vec<u8>)>,
    next_fleet_error: Option<(String, String)>,
    throttled: HashMap<String, u32>,
    parameters: HashMap<String, String>,
    slow: HashMap<String, std::time::Duration>,
    products: Vec<serde_json::Value>,
    actions: Vec<String>,
    fleet_requests: Vec<String>,
    sent: Vec<Sent>,
}

/// One request a client sent through the proxy, as a policy check needs it.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    /// The signing service (`ec2`, `sqs`, `iam`...), from the SigV4 credential scope.
    pub service: String,
    /// The access key that signed it.
    pub access_key: String,
    /// The API action (`CreateFleet`, `ReceiveMessage`...).
    pub action: String,
    /// The form fields of a query-protocol request.
    pub fields: Vec<(String, String)>,
    /// The body of a JSON-protocol request.
    pub json: Option<serde_json::Value>,
}

/// A running proxy; it stops with the test's runtime.
#[derive(Clone)]
pub(crate) struct Proxy {
    pub url: String,
    faults: Arc<Mutex<Faults>>,
}

impl Proxy {
    /// Starts a proxy to `upstream` (`http://127.0.0.1:PORT`).
    pub(crate) async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let faults = Arc::new(Mutex::new(Faults::default()));
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let shared = faults.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (faults, upstream) = (shared.clone(), upstream.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve(stream, &upstream, &faults).await {
                        eprintln!("proxy: {e}");
                    }
                });
            }
        });
        Self { url, faults }
    }

    fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// CreateFleet fails with InsufficientInstanceCapacity for `instance_type`, in every zone.
    pub(crate) fn insufficient_capacity(&self, instance_type: &str) {
        self.faults().insufficient.insert(instance_type.to_owned());
    }

    /// `action` (e.g. `PutRolePolicy`, `CreateQueue`) answers AccessDenied.
    pub(crate) fn deny(&self, action: &str) {
        self.faults().denied.insert(action.to_owned());
    }

    /// `action` answers as [`Proxy::deny`] does when the request tags what it creates with
    /// `key` = `value` (a `TagSpecification`), as IAM refuses a call whose `aws:RequestTag`
    /// condition fails.
    pub(crate) fn deny_tagged(&self, action: &str, key: &str, value: &str) {
        self.faults()
            .denied_tagged
            .push((action.to_owned(), key.to_owned(), value.to_owned()));
    }

    /// The next CreateFleet launches nothing and reports `code` with `message` in its
    /// `errorSet`, as EC2 answers a fleet whose every override failed for that reason.
    pub(crate) fn fail_next_fleet(&self, code: &str, message: &str) {
        self.faults().next_fleet_error = Some((code.to_owned(), message.to_owned()));
    }

    /// The client tokens of the CreateFleet requests, in order (empty for a request without).
    pub(crate) fn fleet_tokens(&self) -> Vec<String> {
        self.faults()
            .sent
            .iter()
            .filter(|s| s.action == "CreateFleet")
            .map(|s| {
                field(&s.fields, "ClientToken")
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    /// The next `times` requests of `action` are refused as throttled.
    #[allow(
        dead_code,
        reason = "the agent's failover test (agent/tests/failover_aws.rs) includes this file"
    )]
    pub(crate) fn throttle(&self, action: &str, times: u32) {
        self.faults().throttled.insert(action.to_owned(), times);
    }

    /// Every action is allowed again.
    pub(crate) fn allow_all(&self) {
        self.faults().denied.clear();
    }

    /// `action` is done by moto at once, but answered only `delay` later.
    #[allow(
        dead_code,
        reason = "the agent's failover test (agent/tests/failover_aws.rs) includes this file"
    )]
    pub(crate) fn slow(&self, action: &str, delay: std::time::Duration) {
        self.faults().slow.insert(action.to_owned(), delay);
    }

    /// SSM GetParameter of `name` returns `value`.
    pub(crate) fn public_parameter(&self, name: &str, value: &str) {
        self.faults()
            .parameters
            .insert(name.to_owned(), value.to_owned());
    }

    /// GetProducts answers with these price list products (documents as the Price List API
    /// gives them), filtered and paged as AWS does.
    #[allow(
        dead_code,
        reason = "the agent's failover test (agent/tests/failover_aws.rs) includes this file"
    )]
    pub(crate) fn price_list(&self, products: Vec<serde_json::Value>) {
        self.faults().products = products;
    }

    /// Every action seen, in order.
    pub(crate) fn actions(&self) -> Vec<String> {
        self.faults().actions.clone()
    }

    /// Every request sent through the proxy, in order.
    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.faults().sent.clone()
    }

    /// The form bodies of the CreateFleet requests, as the client sent them.
    pub(crate) fn fleet_requests(&self) -> Vec<String> {
        self.faults().fleet_requests.clone()
    }
}

struct Request {
    head: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a head and a body (Content-Length or chunked) from `stream`, given what was read so far.
async fn read_message(
    stream: &mut TcpStream,
    until_eof: bool,
) -> std::io::Result<(String, Vec<(String, String)>, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = find(&buffer, b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed before the head",
            ));
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head_text = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head_text.split("\r\n");
    let first = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    let mut body = buffer[head_end + 4..].to_vec();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked = get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if let Some(length) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        while body.len() < length {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(length);
    } else if chunked || until_eof {
        loop {
            if chunked && find(&body, b"0\r\n\r\n").is_some() {
                break;
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        if chunked {
            body = dechunk(&body);
        }
    }
    Ok((first, headers, body))
}

fn dechunk(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(line_end) = find(rest, b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&rest[..line_end])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        rest = &rest[line_end + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[(size + 2).min(rest.len())..];
    }
    out
}

/// Decodes `application/x-www-form-urlencoded` text (IAM returns policy documents so).
pub(crate) fn url_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(&text.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn form(body: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (url_decode(k), url_decode(v))
        })
        .collect()
}

fn encode_form(pairs: &[(String, String)]) -> Vec<u8> {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", url_encode(k), url_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

fn response(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// The action of a REST-JSON request (EKS), from its method and path, as IAM names it.
fn rest_action(method: &str, path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let action = match (method, parts.as_slice()) {
        ("GET", ["clusters"]) => "ListClusters",
        ("POST", ["clusters"]) => "CreateCluster",
        ("GET", ["clusters", _]) => "DescribeCluster",
        ("GET", ["clusters", _, "node-groups"]) => "ListNodegroups",
        ("POST", ["clusters", _, "node-groups"]) => "CreateNodegroup",
        ("GET", ["clusters", _, "node-groups", _]) => "DescribeNodegroup",
        ("POST", ["clusters", _, "node-groups", _, "update-config"]) => "UpdateNodegroupConfig",
        ("GET", ["clusters", _, "access-entries"]) => "ListAccessEntries",
        ("POST", ["clusters", _, "access-entries"]) => "CreateAccessEntry",
        ("GET", ["clusters", _, "access-entries", _]) => "DescribeAccessEntry",
        ("POST", ["clusters", _, "access-entries", _, "access-policies"]) => {
            "AssociateAccessPolicy"
        }
        ("GET", ["clusters", _, "pod-identity-associations"]) => "ListPodIdentityAssociations",
        ("POST", ["clusters", _, "pod-identity-associations"]) => "CreatePodIdentityAssociation",
        ("GET", ["clusters", _, "pod-identity-associations", _]) => {
            "DescribePodIdentityAssociation"
        }
        ("POST", ["tags", ..]) => "TagResource",
        ("GET", ["tags", ..]) => "ListTagsForResource",
        ("DELETE", ["tags", ..]) => "UntagResource",
        _ => return None,
    };
    Some(action.to_owned())
}

/// The value of a price list filter's field in a product: `serviceCode` and `productFamily` are
/// the product's own, the rest its attributes, matched without regard to case as AWS does.
fn product_field<'a>(product: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    match field.to_ascii_lowercase().as_str() {
        "servicecode" => product["serviceCode"].as_str(),
        "productfamily" => product["product"]["productFamily"].as_str(),
        lower => product["product"]["attributes"]
            .as_object()?
            .iter()
            .find(|(k, _)| k.to_ascii_lowercase() == lower)
            .and_then(|(_, v)| v.as_str()),
    }
}

/// GetProducts over `products`, or the error AWS gives for the request.
fn get_products(
    body: &serde_json::Value,
    products: &[serde_json::Value],
) -> (&'static str, serde_json::Value) {
    let invalid = |message: &str| {
        (
            "400 Bad Request",
            serde_json::json!({"__type": "InvalidParameterException", "Message": message}),
        )
    };
    if body["ServiceCode"] != "AmazonEC2" {
        return invalid("Input validation failed: ServiceCode is not valid");
    }
    let max = body["MaxResults"].as_u64().unwrap_or(100);
    if !(1..=100).contains(&max) {
        return invalid("Input validation failed: MaxResults must be between 1 and 100");
    }
    let filters = body["Filters"].as_array().cloned().unwrap_or_default();
    if filters.iter().any(|f| f["Type"] != "TERM_MATCH") {
        return invalid("Input validation failed: Filter type must be TERM_MATCH");
    }
    let matching: Vec<&serde_json::Value> = products
        .iter()
        .filter(|p| {
            filters.iter().all(|f| {
                product_field(p, f["Field"].as_str().unwrap_or_default()) == f["Value"].as_str()
            })
        })
        .collect();
    let start: usize = match body["NextToken"].as_str() {
        None => 0,
        Some(token) => match token.parse() {
            Ok(n) if n <= matching.len() => n,
            _ => return invalid("Input validation failed: NextToken is not valid"),
        },
    };
    let end = (start + usize::try_from(max).unwrap_or(100)).min(matching.len());
    let mut answer = serde_json::json!({
        "FormatVersion": "aws_v1",
        "PriceList": matching[start..end].iter().map(|p| p.to_string()).collect::<Vec<_>>(),
    });
    if end < matching.len() {
        answer["NextToken"] = end.to_string().into();
    }
    ("200 OK", answer)
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Whether a query-protocol request tags what it creates with `key` = `value`.
fn tags_with(fields: &[(String, String)], key: &str, value: &str) -> bool {
    fields.iter().any(|(k, v)| {
        v == key
            && k.starts_with("TagSpecification.")
            && k.ends_with(".Key")
            && field(fields, &format!("{}.Value", k.trim_end_matches(".Key"))) == Some(value)
    })
}

/// What EC2 compares a repeated client token's request on: every parameter but the token.
fn fingerprint(fields: &[(String, String)]) -> String {
    let mut kept: Vec<&(String, String)> =
        fields.iter().filter(|(k, _)| k != "ClientToken").collect();
    kept.sort();
    kept.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn ec2_error(status: &str, code: &str, message: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
    );
    response(status, "text/xml", body.as_bytes())
}

fn denied(request: &Request, action: &str, form_fields: &[(String, String)]) -> Vec<u8> {
    let message =
        format!("User: arn:aws:iam::123456789012:user/test is not authorized to perform: {action}");
    let is_form = request
        .header("content-type")
        .is_some_and(|c| c.contains("x-www-form-urlencoded"));
    if request.header("x-amz-target").is_none() && !is_form {
        // REST-JSON (EKS): the error type in a header, the message in a JSON body.
        let body = serde_json::json!({"message": message}).to_string();
        let mut out = format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nx-amzn-ErrorType: AccessDeniedException:http://internal.amazon.com/coral/com.amazon.coral.service/\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body.as_bytes());
        return out;
    }
    if request.header("x-amz-target").is_some() {
        let body =
            serde_json::json!({"__type": "AccessDeniedException", "message": message}).to_string();
        return response(
            "400 Bad Request",
            "application/x-amz-json-1.0",
            body.as_bytes(),
        );
    }
    let ec2 = form_fields
        .iter()
        .any(|(k, v)| k == "Version" && v == "2016-11-15");
    let body = if ec2 {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>{message}</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
        )
    } else {
        format!(
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>{message}</Message></Error><RequestId>proxy</RequestId></ErrorResponse>"
        )
    };
    response("403 Forbidden", "text/xml", body.as_bytes())
}

/// The rate-limit error each protocol answers with, as AWS sends it.
fn throttled(request: &Request, form_fields: &[(String, String)]) -> Vec<u8> {
    if request.header("x-amz-target").is_some() {
        let body = serde_json::json!({"__type": "ThrottlingException", "message": "Rate exceeded"})
            .to_string();
        return response(
            "400 Bad Request",
            "application/x-amz-json-1.1",
            body.as_bytes(),
        );
    }
    let ec2 = form_fields
        .iter()
        .any(|(k, v)| k == "Version" && v == "2016-11-15");
    if ec2 {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>proxy</RequestID></Response>";
        return response("503 Service Unavailable", "text/xml", body.as_bytes());
    }
    let body = "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>proxy</RequestId></ErrorResponse>";
    response("400 Bad Request", "text/xml", body.as_bytes())
}

/// The CreateFleet overrides, keyed by (config, override) index, with their fields.
type Overrides = BTreeMap<(u32, u32), BTreeMap<String, String>>;

fn overrides_of(fields: &[(String, String)]) -> Overrides {
    let mut out = Overrides::new();
    for (k, v) in fields {
        let parts: Vec<&str> = k.split('.').collect();
        if let ["LaunchTemplateConfigs", c, "Overrides", o, field] = parts.as_slice()
            && let (Ok(c), Ok(o)) = (c.parse(), o.parse())
        {
            out.entry((c, o))
                .or_default()
                .insert((*field).to_owned(), v.clone());
        }
    }
    out
}

/// A removed override: its launch template's name and its fields.
type Removed = (String, BTreeMap<String, String>);

/// Removes the overrides of `failing` types and renumbers the rest; returns the new form and the
/// removed overrides (with their launch template name).
fn strip_overrides(
    fields: &[(String, String)],
    failing: &HashSet<String>,
) -> (Vec<(String, String)>, Vec<Removed>) {
    let overrides = overrides_of(fields);
    let template = |c: u32| {
        fields
            .iter()
            .find(|(k, _)| {
                *k == format!(
                    "LaunchTemplateConfigs.{c}.LaunchTemplateSpecification.LaunchTemplateName"
                )
            })
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let removed: Vec<Removed> = overrides
        .iter()
        .filter(|(_, f)| f.get("InstanceType").is_some_and(|t| failing.contains(t)))
        .map(|((c, _), f)| (template(*c), f.clone()))
        .collect();
    // Keep non-override fields of configs that still have overrides, renumbered.
    let mut configs: BTreeMap<u32, Vec<(String, String)>> = BTreeMap::new();
    let mut kept_overrides: BTreeMap<u32, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for ((c, _), f) in &overrides {
        if !f.get("InstanceType").is_some_and(|t| failing.contains(t)) {
            kept_overrides.entry(*c).or_default().push(f.clone());
        }
    }
    let mut other = Vec::new();
    for (k, v) in fields {
        let parts: Vec<&str> = k.split('.').collect();
        match parts.as_slice() {
            ["LaunchTemplateConfigs", c, "Overrides", ..] => {
                let _ = c;
            }
            ["LaunchTemplateConfigs", c, rest @ ..] => {
                if let Ok(c) = c.parse::<u32>() {
                    configs
                        .entry(c)
                        .or_default()
                        .push((rest.join("."), v.clone()));
                }
            }
            _ => other.push((k.clone(), v.clone())),
        }
    }
    let mut n = 0;
    for (c, config_fields) in configs {
        let Some(kept) = kept_overrides.get(&c) else {
            continue;
        };
        n += 1;
        for (k, v) in config_fields {
            other.push((format!("LaunchTemplateConfigs.{n}.{k}"), v));
        }
        for (i, f) in kept.iter().enumerate() {
            for (k, v) in f {
                other.push((
                    format!("LaunchTemplateConfigs.{n}.Overrides.{}.{k}", i + 1),
                    v.clone(),
                ));
            }
        }
    }
    (if n == 0 { Vec::new() } else { other }, removed)
}

fn error_items(removed: &[Removed], lifecycle: &str) -> String {
    removed
        .iter()
        .map(|(template, f)| {
            let it = f.get("InstanceType").cloned().unwrap_or_default();
            let zone = f.get("AvailabilityZone").cloned().unwrap_or_default();
            let subnet = f.get("SubnetId").cloned().unwrap_or_default();
            format!(
                "<item><launchTemplateAndOverrides><launchTemplateSpecification><launchTemplateName>{template}</launchTemplateName><version>$Latest</version></launchTemplateSpecification><overrides><instanceType>{it}</instanceType><subnetId>{subnet}</subnetId><availabilityZone>{zone}</availabilityZone></overrides></launchTemplateAndOverrides><lifecycle>{lifecycle}</lifecycle><errorCode>InsufficientInstanceCapacity</errorCode><errorMessage>We currently do not have sufficient {it} capacity in the Availability Zone you requested ({zone}).</errorMessage></item>"
            )
        })
        .collect()
}

async fn forward(
    upstream: &str,
    request: &Request,
    body: &[u8],
) -> std::io::Result<(String, Vec<(String, String)>, Vec<u8>)> {
    let mut stream = TcpStream::connect(upstream).await?;
    let mut out = format!("{}\r\n", request.head);
    for (k, v) in &request.headers {
        if ["content-length", "connection", "transfer-encoding"]
            .iter()
            .any(|h| k.eq_ignore_ascii_case(h))
        {
            continue;
        }
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(body).await?;
    read_message(&mut stream, true).await
}

fn reply_from(status_line: &str, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{status_line}\r\n");
    for (k, v) in headers {
        if ["content-length", "connection", "transfer-encoding"]
            .iter()
            .any(|h| k.eq_ignore_ascii_case(h))
        {
            continue;
        }
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

async fn serve(
    mut stream: TcpStream,
    upstream: &str,
    faults: &Mutex<Faults>,
) -> std::io::Result<()> {
    let (head, headers, body) = read_message(&mut stream, false).await?;
    let request = Request {
        head,
        headers,
        body,
    };
    let lock = || {
        faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let target = request
        .header("x-amz-target")
        .map(|t| t.rsplit('.').next().unwrap_or(t).to_owned());
    let is_form = request
        .header("content-type")
        .is_some_and(|c| c.contains("x-www-form-urlencoded"));
    let fields = if is_form {
        form(&request.body)
    } else {
        Vec::new()
    };
    let action = target
        .clone()
        .or_else(|| {
            fields
                .iter()
                .find(|(k, _)| k == "Action")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|| {
            let mut head = request.head.split_whitespace();
            let method = head.next().unwrap_or_default();
            let path = head.next().unwrap_or_default();
            rest_action(method, path).unwrap_or_else(|| path.to_owned())
        });
    lock().actions.push(action.clone());
    // `Credential=AKID/20261203/us-west-2/ec2/aws4_request`
    let scope: Vec<String> = request
        .header("authorization")
        .and_then(|a| a.split("Credential=").nth(1))
        .map(|c| c.split([',', ' ']).next().unwrap_or_default())
        .unwrap_or_default()
        .split('/')
        .map(str::to_owned)
        .collect();
    lock().sent.push(Sent {
        service: scope.get(3).cloned().unwrap_or_default(),
        access_key: scope.first().cloned().unwrap_or_default(),
        action: action.clone(),
        fields: fields.clone(),
        json: serde_json::from_slice(&request.body).ok(),
    });

    let denied_by_tag = lock()
        .denied_tagged
        .iter()
        .any(|(a, k, v)| *a == action && tags_with(&fields, k, v));
    if lock().denied.contains(&action) || denied_by_tag {
        return stream.write_all(&denied(&request, &action, &fields)).await;
    }
    let throttle = match lock().throttled.get_mut(&action) {
        Some(left) if *left > 0 => {
            *left -= 1;
            true
        }
        _ => false,
    };
    if throttle {
        return stream.write_all(&throttled(&request, &fields)).await;
    }
    if action == "GetParameter" {
        let name = serde_json::from_slice::<serde_json::Value>(&request.body)
            .ok()
            .and_then(|v| v["Name"].as_str().map(str::to_owned));
        let value = name
            .as_ref()
            .and_then(|n| lock().parameters.get(n).cloned());
        if let (Some(name), Some(value)) = (name, value) {
            let body = serde_json::json!({"Parameter": {"Name": name, "Type": "String", "Value": value, "Version": 1,
                "ARN": format!("arn:aws:ssm:us-west-2::parameter{name}"), "DataType": "aws:ec2:image"}})
            .to_string();
            return stream
                .write_all(&response(
                    "200 OK",
                    "application/x-amz-json-1.1",
                    body.as_bytes(),
                ))
                .await;
        }
    }
    if action == "GetProducts" {
        let body = serde_json::from_slice::<serde_json::Value>(&request.body).unwrap_or_default();
        let products = lock().products.clone();
        let (status, answer) = get_products(&body, &products);
        return stream
            .write_all(&response(
                status,
                "application/x-amz-json-1.1",
                answer.to_string().as_bytes(),
            ))
            .await;
    }
    if action == "CreateFleet" {
        lock()
            .fleet_requests
            .push(String::from_utf8_lossy(&request.body).into_owned());
        let token = field(&fields, "ClientToken").map(str::to_owned);
        let print = fingerprint(&fields);
        if let Some(token) = &token {
            let seen = lock().fleet_tokens.get(token).cloned();
            if let Some((first, reply)) = seen {
                let reply = if first == print {
                    reply
                } else {
                    ec2_error(
                        "400 Bad Request",
                        "IdempotentParameterMismatch",
                        "The client token you have provided is associated with a resource that is already deleted or has different parameters. Please use a different client token.",
                    )
                };
                return stream.write_all(&reply).await;
            }
        }
        let reply = create_fleet(upstream, &request, &fields, faults).await?;
        if let Some(token) = token
            && reply.starts_with(b"HTTP/1.1 200")
        {
            lock().fleet_tokens.insert(token, (print, reply.clone()));
        }
        // Done and remembered at once, answered late: a client that gives up meanwhile
        // finds the fleet under its token when it asks again.
        let delay = lock().slow.get(&action).copied();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        return stream.write_all(&reply).await;
    }
    let (status, headers, body) = forward(upstream, &request, &request.body).await?;
    let delay = lock().slow.get(&action).copied();
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    stream
        .write_all(&reply_from(&status, &headers, &body))
        .await
}

/// CreateFleet as EC2 would answer it, with the injected capacity and fleet errors.
async fn create_fleet(
    upstream: &str,
    request: &Request,
    fields: &[(String, String)],
    faults: &Mutex<Faults>,
) -> std::io::Result<Vec<u8>> {
    let lock = || {
        faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let lifecycle = field(
        fields,
        "TargetCapacitySpecification.DefaultTargetCapacityType",
    )
    .unwrap_or("on-demand")
    .to_owned();
    let nothing_launched = |items: &str| {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>proxy</requestId><fleetId>fleet-proxy00000000000</fleetId><errorSet>{items}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
        );
        response("200 OK", "text/xml", body.as_bytes())
    };
    let injected = lock().next_fleet_error.take();
    if let Some((code, message)) = injected {
        let item = format!(
            "<item><lifecycle>{lifecycle}</lifecycle><errorCode>{code}</errorCode><errorMessage>{message}</errorMessage></item>"
        );
        return Ok(nothing_launched(&item));
    }
    let failing = lock().insufficient.clone();
    let (kept, removed) = strip_overrides(fields, &failing);
    if removed.is_empty() {
        let (status, headers, body) = forward(upstream, request, &request.body).await?;
        return Ok(reply_from(&status, &headers, &body));
    }
    let items = error_items(&removed, &lifecycle);
    if kept.is_empty() {
        return Ok(nothing_launched(&items));
    }
    let (status, headers, body) = forward(upstream, request, &encode_form(&kept)).await?;
    let mut text = String::from_utf8_lossy(&body).into_owned();
    if let Some(start) = text.find("<errorSet>") {
        text.insert_str(start + "<errorSet>".len(), &items);
    } else if let Some(start) = text.find("<errorSet/>") {
        text.replace_range(
            start..start + "<errorSet/>".len(),
            &format!("<errorSet>{items}</errorSet>"),
        );
    } else if let Some(end) = text.find("</CreateFleetResponse>") {
        text.insert_str(end, &format!("<errorSet>{items}</errorSet>"));
    }
    Ok(reply_from(&status, &headers, text.as_bytes()))
}
