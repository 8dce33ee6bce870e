//! Service Usage: the `apis` step, which enables the Compute Engine, GKE and Cloud Billing APIs
//! the agent calls (the last for the region's prices; without it the agent prices from its
//! shipped table).

use super::{Ctx, gcp_error};
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;
use google_cloud_lro::Poller as _;

/// The APIs the agent calls.
pub(crate) const APIS: [&str; 3] = [
    "compute.googleapis.com",
    "container.googleapis.com",
    "cloudbilling.googleapis.com",
];

impl Ctx {
    pub(super) async fn disabled_apis(&self) -> Result<Vec<&'static str>, SetupError> {
        let mut disabled = Vec::new();
        for api in APIS {
            let name = format!("projects/{}/services/{api}", self.options.project);
            let service = self
                .services
                .get_service()
                .set_name(&name)
                .send()
                .await
                .map_err(|e| gcp_error("serviceusage.services.get", &name, e))?;
            if service.state != google_cloud_api_serviceusage_v1::model::State::Enabled {
                disabled.push(api);
            }
        }
        Ok(disabled)
    }
}

pub(super) fn check_apis(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let disabled = ctx.disabled_apis().await?;
        Ok(if disabled.is_empty() {
            Status::InPlace(format!("{} enabled", APIS.join(", ")))
        } else {
            Status::Needed(format!("enable {}", disabled.join(", ")))
        })
    })
}

pub(super) fn apply_apis(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let disabled = ctx.disabled_apis().await?;
        if disabled.is_empty() {
            return Ok(());
        }
        let parent = format!("projects/{}", ctx.options.project);
        ctx.services
            .batch_enable_services()
            .set_parent(&parent)
            .set_service_ids(disabled.iter().copied())
            .poller()
            .until_done()
            .await
            .map_err(|e| {
                gcp_error(
                    "serviceusage.services.enable",
                    &format!("{} in {parent}", disabled.join(", ")),
                    e,
                )
            })?;
        Ok(())
    })
}
