//! Listing the metadata of every object of a kind, decoded into only the fields the caller
//! reads, a page at a time.
//!
//! kube's `Api::list_metadata` decodes each item's whole `ObjectMeta`, managed fields included:
//! the API server sends every field manager's set of fields, and `FieldsV1` holds each as a
//! `serde_json::Value` tree. Listing 2,500 NodeClaims that way, unpaged, held 49 MiB of the
//! agent's heap at once (heaptrack, `tests/kwok/heap.sh 10000`), a third of it, for their
//! names. Here serde skips every field the caller's type does not name without building
//! anything, and pages bound the body held at once (client-go's pager does the same, 500 a page).

use kube::api::ListParams;
use kube::{Client, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// Items per page (client-go's pager default).
pub(crate) const PAGE: u32 = 500;

/// One page of a metadata list, each item's `metadata` decoded as `M`.
#[derive(Deserialize)]
struct Page<M> {
    /// `null` when the list is empty, as the API server writes it.
    #[serde(default = "Option::default")]
    items: Option<Vec<Item<M>>>,
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
}

#[derive(Deserialize)]
struct Item<M> {
    metadata: M,
}

/// Each cluster-scoped `K`'s metadata that `params` selects, decoded as `M`, listed in pages
/// of [`PAGE`] (a page limit set in `params` is kept). The pages are one snapshot: the first
/// is read from etcd (a quorum read, unless `params` says otherwise), the rest continue it.
pub(crate) async fn list_metadata<K, M>(
    client: &Client,
    params: &ListParams,
) -> Result<Vec<M>, kube::Error>
where
    K: Resource<DynamicType = ()>,
    M: DeserializeOwned,
{
    let request = kube::core::Request::new(K::url_path(&(), None));
    let mut params = params.clone();
    if params.limit.is_none() {
        params.limit = Some(PAGE);
    }
    let mut found = Vec::new();
    loop {
        let page: Page<M> = client
            .request(
                request
                    .list_metadata(&params)
                    .map_err(kube::Error::BuildRequest)?,
            )
            .await?;
        found.extend(page.items.into_iter().flatten().map(|item| item.metadata));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(found),
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Name {
        name: String,
    }

    #[test]
    fn a_page_keeps_the_named_fields_and_skips_the_managed_ones() {
        let page: Page<Name> = serde_json::from_value(serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "42", "continue": "next"},
            "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {
                "name": "default-abcde", "uid": "u",
                "managedFields": [{"manager": "karpenter", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:status": {"f:conditions": {}}}}],
            }}],
        }))
        .expect("a page");
        assert_eq!(page.metadata.continue_.as_deref(), Some("next"));
        assert_eq!(
            page.items
                .into_iter()
                .flatten()
                .map(|i| i.metadata)
                .collect::<Vec<_>>(),
            [Name {
                name: "default-abcde".to_owned()
            }]
        );
    }

    #[test]
    fn an_empty_list_reads_as_no_items() {
        let page: Page<Name> = serde_json::from_str(
            r#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7"},"items":null}"#,
        )
        .expect("an empty page");
        assert!(page.items.into_iter().flatten().next().is_none());
    }
}
