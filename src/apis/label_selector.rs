//! Label selectors as users type them (`kubectl get -l`): parsed and checked here, so a typo is
//! refused with the rule it broke before any request, and matched here, where a watch has to
//! filter what it is sent. The grammar is apimachinery's (`k8s.io/apimachinery/pkg/labels`,
//! `Parse`): requirements joined by commas, each `key`, `!key`, `key=value`, `key==value`,
//! `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key>N` or `key<N`; keys are qualified names
//! and values label values, as the API server validates them.

use std::collections::BTreeMap;
use std::fmt;

/// A parsed selector; [`fmt::Display`] gives the canonical text the API server is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Requirement {
    Exists(String),
    DoesNotExist(String),
    /// `=`, `==` and `in`.
    In(String, Vec<String>),
    /// `!=` and `notin`: also matches objects without the label.
    NotIn(String, Vec<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// Why a selector was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    selector: String,
    reason: String,
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| SelectorError {
            selector: text.to_owned(),
            reason,
        };
        let mut requirements = Vec::new();
        for part in split_top_level(text).map_err(fail)? {
            let part = part.trim();
            if part.is_empty() {
                if text.trim().is_empty() {
                    break;
                }
                return Err(fail(
                    "an empty requirement (two commas, or a trailing one)".into(),
                ));
            }
            requirements.push(requirement(part).map_err(fail)?);
        }
        Ok(Self(requirements))
    }
}

/// Splits at the commas outside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("a '(' inside a value list".into()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("a ')' without its '('".into()),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a '(' without its ')'".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(Requirement::DoesNotExist(key.to_owned()));
    }
    // The operator is the first of these the key is followed by.
    let key_end = part
        .find(|c: char| c.is_whitespace() || matches!(c, '=' | '!' | '<' | '>'))
        .unwrap_or(part.len());
    let key = &part[..key_end];
    check_key(key)?;
    let rest = part[key_end..].trim_start();
    if rest.is_empty() {
        return Ok(Requirement::Exists(key.to_owned()));
    }
    let single = |value: &str| -> Result<Vec<String>, String> {
        let value = value.trim();
        check_value(value)?;
        Ok(vec![value.to_owned()])
    };
    let number = |value: &str| -> Result<i64, String> {
        value
            .trim()
            .parse()
            .map_err(|_| format!("{key}: '>' and '<' take a whole number, not {value:?}"))
    };
    if let Some(v) = rest.strip_prefix("==") {
        return Ok(Requirement::In(key.to_owned(), single(v)?));
    }
    if let Some(v) = rest.strip_prefix("!=") {
        return Ok(Requirement::NotIn(key.to_owned(), single(v)?));
    }
    if let Some(v) = rest.strip_prefix('=') {
        return Ok(Requirement::In(key.to_owned(), single(v)?));
    }
    if let Some(v) = rest.strip_prefix('>') {
        return Ok(Requirement::GreaterThan(key.to_owned(), number(v)?));
    }
    if let Some(v) = rest.strip_prefix('<') {
        return Ok(Requirement::LessThan(key.to_owned(), number(v)?));
    }
    if let Some(v) = rest.strip_prefix("notin") {
        return Ok(Requirement::NotIn(key.to_owned(), set(key, v)?));
    }
    if let Some(v) = rest.strip_prefix("in") {
        return Ok(Requirement::In(key.to_owned(), set(key, v)?));
    }
    Err(format!(
        "{key}: expected one of =, ==, !=, in, notin, >, < after the key, found {rest:?}"
    ))
}

/// `(a, b)` after `in` or `notin`.
fn set(key: &str, text: &str) -> Result<Vec<String>, String> {
    let text = text.trim();
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("{key}: 'in' and 'notin' take a list in parentheses, like (a,b)"))?;
    let mut values = Vec::new();
    for value in inner.split(',') {
        let value = value.trim();
        check_value(value)?;
        values.push(value.to_owned());
    }
    Ok(values)
}

/// A qualified name: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters.
fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("a requirement without a key".into());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err(format!(
                "{key}: the prefix before '/' must be a DNS subdomain (lower case, like example.com)"
            ));
        }
    }
    if name.is_empty() || !is_label_value(name) {
        return Err(format!(
            "{key}: a key's name is at most 63 characters of letters, digits, '-', '_' and '.', \
             starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), String> {
    if is_label_value(value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?}: a value is at most 63 characters of letters, digits, '-', '_' and '.', \
             starting and ending with a letter or digit"
        ))
    }
}

/// A label value: empty, or up to 63 characters of `[A-Za-z0-9-_.]` that start and end with a
/// letter or digit.
fn is_label_value(value: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.is_empty()
        || (value.len() <= 63
            && alnum(value.chars().next())
            && alnum(value.chars().last())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

impl LabelSelector {
    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Requirement::GreaterThan(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }

    /// Whether it selects everything (no requirement).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|r| match r {
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
                Requirement::In(k, v) if v.len() == 1 => format!("{k}={}", v[0]),
                Requirement::In(k, v) => format!("{k} in ({})", v.join(",")),
                Requirement::NotIn(k, v) if v.len() == 1 => format!("{k}!={}", v[0]),
                Requirement::NotIn(k, v) => format!("{k} notin ({})", v.join(",")),
                Requirement::GreaterThan(k, n) => format!("{k}>{n}"),
                Requirement::LessThan(k, n) => format!("{k}<{n}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_form_kubectl_accepts_parses_and_matches_as_the_api_server_would() {
        let node = labels(&[
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/capacity-type", "spot"),
            ("karpenter.k8s.aws/instance-cpu", "8"),
        ]);
        for (selector, selected) in [
            ("karpenter.sh/nodepool=default", true),
            ("karpenter.sh/nodepool==default", true),
            ("karpenter.sh/nodepool!=default", false),
            ("karpenter.sh/capacity-type in (spot, on-demand)", true),
            ("karpenter.sh/capacity-type notin (spot)", false),
            ("karpenter.sh/nodepool", true),
            ("!karpenter.sh/nodepool", false),
            ("!team", true),
            ("team!=a", true),
            ("karpenter.k8s.aws/instance-cpu>4", true),
            ("karpenter.k8s.aws/instance-cpu<4", false),
            (
                "karpenter.sh/nodepool=default, karpenter.sh/capacity-type=spot",
                true,
            ),
            (
                "karpenter.sh/nodepool=default,karpenter.sh/capacity-type=on-demand",
                false,
            ),
            ("", true),
        ] {
            let parsed: LabelSelector = selector.parse().expect(selector);
            assert_eq!(parsed.matches(&node), selected, "{selector}");
            // What is sent to the API server parses back to the same selector.
            assert_eq!(
                parsed.to_string().parse::<LabelSelector>(),
                Ok(parsed.clone()),
                "{selector}"
            );
        }
    }

    #[test]
    fn a_malformed_selector_is_refused_naming_what_is_wrong() {
        for (selector, says) in [
            ("app=", ""),
            ("=web", "without a key"),
            ("app in web", "parentheses"),
            ("app in (web", "without its ')'"),
            ("app=web,", "empty requirement"),
            ("app=-web", "a value is"),
            ("Example.com/app=web", "DNS subdomain"),
            ("app>many", "whole number"),
            ("app ~ web", "expected one of"),
        ] {
            let result = selector.parse::<LabelSelector>();
            if selector == "app=" {
                assert!(result.is_ok(), "an empty value is a value");
                continue;
            }
            let error = result.expect_err(selector).to_string();
            assert!(error.contains(says), "{selector}: {error}");
            assert!(error.contains(selector), "{selector}: {error}");
        }
    }
}
