//! Wire helpers every API module of the fake shares: Google's error body, JSON responses, query
//! parsing that ignores the clients' `$alt`/`$apiVersion` parameters, int64-as-string, base64 for
//! `bytes` fields, etags, ids and RFC 3339 timestamps.
//!
//! These encode the rules in `cloud-test-servers.md` §2.4 that the official Rust clients enforce:
//! an error without `status` becomes UNKNOWN, an int64 sent as a JSON number or a `bytes` field
//! that is not base64 fails to deserialize.

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// The Compute API's resource URL prefix, as real GCE spells `selfLink`s.
pub const COMPUTE_BASE: &str = "https://www.googleapis.com/compute/v1";

/// A Google API error, rendered as `{"error":{"code","message","status","errors":[...]}}`.
#[derive(Clone, Debug, PartialEq)]
pub struct GoogleError {
    pub code: u16,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl GoogleError {
    pub fn new(
        code: u16,
        status: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            status,
            reason,
            message: message.into(),
        }
    }
    /// 404 NOT_FOUND / notFound.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "NOT_FOUND", "notFound", message)
    }
    /// 409 ALREADY_EXISTS / alreadyExists.
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(409, "ALREADY_EXISTS", "alreadyExists", message)
    }
    /// 400 INVALID_ARGUMENT / invalid.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, "INVALID_ARGUMENT", "invalid", message)
    }
    /// 412 FAILED_PRECONDITION / conditionNotMet (a fingerprint mismatch).
    pub fn condition_not_met(message: impl Into<String>) -> Self {
        Self::new(412, "FAILED_PRECONDITION", "conditionNotMet", message)
    }
    /// 409 ABORTED / aborted (a stale IAM policy etag).
    pub fn aborted(message: impl Into<String>) -> Self {
        Self::new(409, "ABORTED", "aborted", message)
    }
    /// 403 PERMISSION_DENIED / forbidden.
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(403, "PERMISSION_DENIED", "forbidden", message)
    }
    /// 403 RESOURCE_EXHAUSTED / quotaExceeded, as a synchronous quota error.
    pub fn quota_exceeded(message: impl Into<String>) -> Self {
        Self::new(403, "RESOURCE_EXHAUSTED", "quotaExceeded", message)
    }

    /// The JSON body Google sends.
    pub fn body(&self) -> Value {
        json!({"error": {
            "code": self.code,
            "message": self.message,
            "status": self.status,
            "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
        }})
    }
}

impl IntoResponse for GoogleError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(status, &self.body())
    }
}

/// What every handler returns.
pub type ApiResult = Result<Response, GoogleError>;

/// A JSON response with `content-type: application/json; charset=UTF-8`.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    response
}

/// 200 with `body`.
pub fn ok(body: Value) -> ApiResult {
    Ok(json_response(StatusCode::OK, &body))
}

/// Parses a request body as JSON whatever its content-type says; an empty body parses as `{}`.
pub fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, GoogleError> {
    let text: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    serde_json::from_slice(text)
        .map_err(|e| GoogleError::invalid(format!("Invalid JSON payload received. {e}")))
}

/// The query parameters, percent-decoded, without the clients' `$alt`, `$apiVersion` and other
/// `$`-prefixed system parameters.
pub fn query(uri: &Uri) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key);
        if key.starts_with('$') {
            continue;
        }
        out.insert(key, percent_decode(value));
    }
    out
}

/// Decodes `%XX` escapes and `+` (a space in query strings).
pub fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(&text.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// An int64/uint64 the way proto3 JSON sends it: a decimal string.
pub fn int64(value: u64) -> Value {
    Value::String(value.to_string())
}

/// Standard base64 with padding, for `bytes` fields (etags, fingerprints, key data).
pub fn base64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A fresh random etag or fingerprint, base64-encoded (8 random bytes, as GCE's fingerprints).
pub fn new_etag() -> String {
    let bytes: [u8; 8] = rand::random();
    base64(&bytes)
}

/// A fresh random Compute fingerprint (`labelFingerprint`, `metadata.fingerprint`): base64 with
/// the URL-safe alphabet, which is what google-cloud-compute-v1 decodes `bytes` fields with
/// (a `/` or `+` makes it fail with "Invalid symbol").
pub fn new_fingerprint() -> String {
    use base64::Engine;
    let bytes: [u8; 8] = rand::random();
    base64::engine::general_purpose::URL_SAFE.encode(bytes)
}

/// A random numeric id in the 19-digit range GCE uses.
pub fn new_numeric_id() -> u64 {
    rand::random_range(1_000_000_000_000_000_000u64..9_000_000_000_000_000_000u64)
}

/// `n` random lowercase hex digits.
pub fn random_hex(n: usize) -> String {
    (0..n)
        .map(|_| char::from(b"0123456789abcdef"[rand::random_range(0..16usize)]))
        .collect()
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The current time as RFC 3339 with milliseconds and a `Z` offset.
pub fn now_rfc3339() -> String {
    rfc3339(now_millis())
}

/// `millis` since the epoch as RFC 3339 (`2026-12-02T16:38:07.123Z`).
pub fn rfc3339(millis: u128) -> String {
    let secs = (millis / 1000) as i64;
    let ms = (millis % 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil conversion.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The last path segment of a resource URL or a bare name (`…/zones/us-central1-a` → `us-central1-a`).
pub fn last_segment(url_or_name: &str) -> &str {
    url_or_name.rsplit('/').next().unwrap_or(url_or_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn query_drops_system_parameters_and_decodes_the_rest() {
        let uri: Uri = "/x?$alt=json&$apiVersion=2026-09-01&filter=labels.a%3Db+AND+x&maxResults=5"
            .parse()
            .unwrap();
        let q = query(&uri);
        assert_eq!(
            q.get("filter").map(String::as_str),
            Some("labels.a=b AND x")
        );
        assert_eq!(q.get("maxResults").map(String::as_str), Some("5"));
        assert!(!q.contains_key("$alt"));
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_229_487_123), "2026-12-02T16:38:07.123Z");
    }
}
