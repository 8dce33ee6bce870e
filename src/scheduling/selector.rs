//! Label selectors (`matchLabels` + `matchExpressions`) compiled once and matched against pod
//! labels, for topology spread constraints and pod (anti-)affinity terms.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

/// A compiled label selector. A missing selector (or one with an unknown operator) selects
/// nothing, as in Kubernetes; an empty one selects everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Selector {
    nothing: bool,
    terms: Vec<(String, Op)>,
}

impl Selector {
    /// Compiles an API selector; `None` selects nothing.
    pub(crate) fn from_api(selector: Option<&LabelSelector>) -> Self {
        let Some(selector) = selector else {
            return Self::nothing();
        };
        let mut terms = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            terms.push((key.clone(), Op::In([value.clone()].into_iter().collect())));
        }
        for expr in selector.match_expressions.iter().flatten() {
            let values: BTreeSet<String> = expr.values.iter().flatten().cloned().collect();
            let op = match expr.operator.as_str() {
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                _ => return Self::nothing(),
            };
            terms.push((expr.key.clone(), op));
        }
        terms.sort();
        terms.dedup();
        Self {
            nothing: false,
            terms,
        }
    }

    /// A selector that matches no pod.
    pub(crate) fn nothing() -> Self {
        Self {
            nothing: true,
            terms: Vec::new(),
        }
    }

    /// A selector that matches every pod.
    #[cfg(test)]
    pub(crate) fn everything() -> Self {
        Self {
            nothing: false,
            terms: Vec::new(),
        }
    }

    /// Adds `key In [value]` (for `matchLabelKeys`).
    #[must_use]
    pub(crate) fn and_equals(mut self, key: &str, value: &str) -> Self {
        self.terms.push((
            key.to_owned(),
            Op::In([value.to_owned()].into_iter().collect()),
        ));
        self.terms.sort();
        self.terms.dedup();
        self
    }

    /// Whether a pod with these labels is selected.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing
            && self.terms.iter().all(|(key, op)| match op {
                Op::In(values) => labels.get(key).is_some_and(|v| values.contains(v)),
                Op::NotIn(values) => labels.get(key).is_none_or(|v| !values.contains(v)),
                Op::Exists => labels.contains_key(key),
                Op::DoesNotExist => !labels.contains_key(key),
            })
    }
}

impl fmt::Display for Selector {
    /// kubectl's notation: `app=nginx,tier in (a,b)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nothing {
            return f.write_str("<none>");
        }
        if self.terms.is_empty() {
            return f.write_str("<all>");
        }
        for (i, (key, op)) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let join = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(",");
            match op {
                Op::In(v) if v.len() == 1 => write!(f, "{key}={}", join(v))?,
                Op::In(v) => write!(f, "{key} in ({})", join(v))?,
                Op::NotIn(v) => write!(f, "{key} notin ({})", join(v))?,
                Op::Exists => write!(f, "{key}")?,
                Op::DoesNotExist => write!(f, "!{key}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let sel = Selector::from_api(Some(&LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into_iter().collect()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(vec!["db".to_owned()]),
            }]),
        }));
        assert!(sel.matches(&labels(&[("app", "web")])));
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!sel.matches(&labels(&[("app", "api")])));
        assert_eq!(sel.to_string(), "app=web,tier notin (db)");
    }

    #[test]
    fn missing_selectors_match_nothing_and_empty_ones_everything() {
        assert!(!Selector::from_api(None).matches(&labels(&[])));
        assert!(
            Selector::from_api(Some(&LabelSelector::default())).matches(&labels(&[("a", "b")]))
        );
        assert!(
            Selector::everything()
                .and_equals("a", "b")
                .matches(&labels(&[("a", "b")]))
        );
    }
}
