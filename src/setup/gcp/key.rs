//! The `service-account-key` step (`--auth key`): a key of the agent's service account, kept
//! only in a Kubernetes Secret (never printed or written to disk).

use super::{Ctx, code, gcp_error};
use crate::setup::{SetupError, Status, Step};
use futures::future::BoxFuture;
use google_cloud_gax::error::rpc::Code;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::sync::Arc;

/// The Secret annotation naming the key stored in it, so a re-run can check the key still exists.
pub(crate) const KEY_NAME_ANNOTATION: &str = "kubectl-karpenter.io/gcp-key-name";

/// The key step: a key of the service account, kept only in a Secret. Its own type because it
/// needs the kube client.
pub(super) struct KeyStep {
    pub(super) ctx: Arc<Ctx>,
    pub(super) client: kube::Client,
}

impl KeyStep {
    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ctx.options.namespace)
    }

    /// The key the Secret holds, if the Secret exists and that key is still a key of the account.
    async fn stored_key(&self) -> Result<Option<String>, SetupError> {
        let o = &self.ctx.options;
        let name = o.key_secret();
        let secret = self
            .secrets()
            .get_opt(&name)
            .await
            .map_err(|source| SetupError::Kube {
                action: format!("reading Secret {}/{name}", o.namespace),
                source,
            })?;
        let Some(key_name) = secret.and_then(|s| {
            s.metadata
                .annotations
                .and_then(|a| a.get(KEY_NAME_ANNOTATION).cloned())
        }) else {
            return Ok(None);
        };
        let resource = o.account_resource();
        let keys = match self
            .ctx
            .iam
            .list_service_account_keys()
            .set_name(&resource)
            .send()
            .await
        {
            Ok(keys) => keys,
            Err(e) if code(&e) == Some(Code::NotFound) => return Ok(None),
            Err(e) => return Err(gcp_error("iam.serviceAccountKeys.list", &resource, e)),
        };
        Ok(keys
            .keys
            .iter()
            .any(|k| k.name == key_name)
            .then_some(key_name))
    }
}

impl Step for KeyStep {
    fn name(&self) -> &str {
        "service-account-key"
    }

    fn describe(&self) -> String {
        let o = &self.ctx.options;
        format!(
            "a key of {} kept only in Secret {}/{} (never printed or written to disk)",
            o.gcp_service_account_email(),
            o.namespace,
            o.key_secret()
        )
    }

    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        Box::pin(async move {
            let o = &self.ctx.options;
            Ok(match self.stored_key().await? {
                Some(_) => Status::InPlace(format!(
                    "Secret {}/{} holds a current key",
                    o.namespace,
                    o.key_secret()
                )),
                None => Status::Needed(format!(
                    "create a key of {} and store it in Secret {}/{}",
                    o.gcp_service_account_email(),
                    o.namespace,
                    o.key_secret()
                )),
            })
        })
    }

    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        Box::pin(async move {
            if self.stored_key().await?.is_some() {
                return Ok(());
            }
            let o = &self.ctx.options;
            let resource = o.account_resource();
            let key = self
                .ctx
                .iam
                .create_service_account_key()
                .set_name(&resource)
                .send()
                .await
                .map_err(|e| gcp_error("iam.serviceAccountKeys.create", &resource, e))?;
            // The key goes straight from the response into the Secret: no log, no file.
            let secret = json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": o.key_secret(), "namespace": o.namespace,
                             "labels": {"app.kubernetes.io/part-of": "kubectl-karpenter"},
                             "annotations": {KEY_NAME_ANNOTATION: key.name}},
                "type": "Opaque",
                "data": {"key.json": ByteString(key.private_key_data.to_vec())},
            });
            self.secrets()
                .patch(
                    &o.key_secret(),
                    &PatchParams::apply(crate::setup::manifest::FIELD_MANAGER).force(),
                    &Patch::Apply(&secret),
                )
                .await
                .map_err(|source| SetupError::Kube {
                    action: format!("applying Secret {}/{}", o.namespace, o.key_secret()),
                    source,
                })?;
            Ok(())
        })
    }
}
