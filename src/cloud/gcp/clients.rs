//! The Compute Engine clients and the Cloud Billing Catalog client, built once per provider:
//! Application Default Credentials in production, anonymous ones against
//! [`GcpConfig::endpoint`] (tests, the project's `gcp-fake`), each with the retry policy and
//! per-attempt timeout of [`super::errors`].

use super::billing;
use super::config::GcpConfig;
use super::errors::{ATTEMPT_TIMEOUT, retry_policy};
use google_cloud_compute_v1::client::{Images, InstanceTemplates, Instances, MachineTypes, Zones};

/// The Compute clients, built once.
#[derive(Clone, Debug)]
pub struct Clients {
    pub instances: Instances,
    pub machine_types: MachineTypes,
    pub zones: Zones,
    pub images: Images,
    pub instance_templates: InstanceTemplates,
    /// The Cloud Billing Catalog, for the region's prices.
    pub billing: billing::CatalogClient,
}

/// Why the clients could not be built.
#[derive(Debug, thiserror::Error)]
#[error("building the Compute Engine clients failed")]
pub struct ClientsError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl Clients {
    /// Clients with ADC, or anonymous credentials against `config.endpoint`.
    pub async fn new(config: &GcpConfig) -> Result<Self, ClientsError> {
        macro_rules! build {
            ($client:ty) => {{
                let mut builder = <$client>::builder();
                if let Some(endpoint) = &config.endpoint {
                    builder = builder.with_endpoint(endpoint.clone()).with_credentials(
                        google_cloud_auth::credentials::anonymous::Builder::new().build(),
                    );
                }
                builder = builder
                    .with_retry_policy(retry_policy())
                    .with_attempt_timeout(ATTEMPT_TIMEOUT);
                if let Some(initial) = config.polling_initial_delay {
                    let backoff =
                        google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder::new()
                            .with_initial_delay(initial)
                            .with_maximum_delay(initial * 10)
                            .build()
                            .map_err(|e| ClientsError(Box::new(e)))?;
                    builder = builder.with_polling_backoff_policy(backoff);
                }
                builder
                    .build()
                    .await
                    .map_err(|e| ClientsError(Box::new(e)))?
            }};
        }
        Ok(Self {
            instances: build!(Instances),
            machine_types: build!(MachineTypes),
            zones: build!(Zones),
            images: build!(Images),
            instance_templates: build!(InstanceTemplates),
            billing: billing::CatalogClient::new(config.endpoint.as_deref())
                .map_err(|e| ClientsError(Box::new(e)))?,
        })
    }
}
