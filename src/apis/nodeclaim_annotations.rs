//! What this project's agent records on the NodeClaims it creates, as two annotations, written
//! and read here only: the pods a claim was made for ([`labels::PROVISIONED_FOR`]) and the
//! instance types that fitted them, cheapest first ([`labels::INSTANCE_TYPE_OPTIONS`]). Claims
//! created by upstream Karpenter (or by hand) carry neither, and every reader says `None` for
//! them.

use super::{NodeClaim, labels};
use serde::{Deserialize, Serialize};

/// One instance type a claim could launch as, as recorded in
/// [`labels::INSTANCE_TYPE_OPTIONS`] (cheapest first).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecordedInstanceType {
    pub name: String,
    /// Hourly price of its cheapest offering within the claim's requirements; `null` when no
    /// price is known for it (it was still an option, ranked after the priced ones).
    #[serde(default)]
    pub price: Option<f64>,
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub capacity_type: String,
}

/// How many options a claim records: enough to say why the first won.
pub(crate) const RECORDED_INSTANCE_TYPES: usize = 20;

impl NodeClaim {
    /// The pods (`namespace/name`) the agent created the claim for; `None` when not recorded
    /// or unreadable.
    pub fn provisioned_for(&self) -> Option<Vec<String>> {
        let text = self
            .metadata
            .annotations
            .as_ref()?
            .get(labels::PROVISIONED_FOR)?;
        serde_json::from_str(text).ok()
    }

    /// The instance types the agent recorded on the claim; `None` when it recorded none (a
    /// claim created by upstream Karpenter or by hand) or the annotation is unreadable.
    pub(crate) fn instance_type_options(&self) -> Option<Vec<RecordedInstanceType>> {
        let text = self
            .metadata
            .annotations
            .as_ref()?
            .get(labels::INSTANCE_TYPE_OPTIONS)?;
        serde_json::from_str(text).ok()
    }
}

/// The value of [`labels::PROVISIONED_FOR`] for these pods (`namespace/name`).
pub(crate) fn provisioned_for_value(pods: &[String]) -> String {
    serde_json::Value::from(pods).to_string()
}

/// The value of [`labels::INSTANCE_TYPE_OPTIONS`] for these options, cheapest first; only the
/// first [`RECORDED_INSTANCE_TYPES`] are kept.
pub(crate) fn instance_type_options_value(options: &[RecordedInstanceType]) -> String {
    let kept = &options[..options.len().min(RECORDED_INSTANCE_TYPES)];
    // Through a `Value`, whose objects order their keys by name: the order the annotation has
    // always had. Plain structs of strings and numbers always serialize.
    serde_json::to_value(kept)
        .map(|value| value.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_options_read_back_as_written_in_the_annotations_order() {
        let options = vec![RecordedInstanceType {
            name: "m5.large".to_owned(),
            price: None,
            zone: "us-west-2a".to_owned(),
            capacity_type: "spot".to_owned(),
        }];
        let text = instance_type_options_value(&options);
        assert_eq!(
            text,
            r#"[{"capacityType":"spot","name":"m5.large","price":null,"zone":"us-west-2a"}]"#
        );
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}, "requirements": []},
        }))
        .expect("a NodeClaim");
        claim.metadata.annotations = Some(
            [
                (labels::INSTANCE_TYPE_OPTIONS.to_owned(), text),
                (
                    labels::PROVISIONED_FOR.to_owned(),
                    provisioned_for_value(&["default/web-1".to_owned()]),
                ),
            ]
            .into(),
        );
        assert_eq!(claim.instance_type_options(), Some(options));
        assert_eq!(
            claim.provisioned_for(),
            Some(vec!["default/web-1".to_owned()])
        );
    }
}
