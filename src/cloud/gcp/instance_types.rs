//! The catalogue as the provider keeps it, as upstream's instancetype provider does: the zones
//! launched in (`zones.list`) and the machine types offered there
//! (`machineTypes.aggregatedList`), fetched together and reused for `catalogue_ttl`, priced
//! from the Cloud Billing Catalog's rates or the shipped table; and the instance types a
//! resolved node class offers from it, with the unavailable-offerings cache applied.
//! [`super::catalogue`] shapes one machine type; this module fetches, caches and filters.

use super::GcpProvider;
use super::billing;
use super::catalogue::{self, MachineTypeInfo};
use super::errors::cloud_error;
use super::last_segment;
use super::nodeclass::ResolvedNodeClass;
use crate::cloud::gcp_prices;
use crate::cloud::provider::CloudError;
use crate::scheduling::InstanceType;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// What `zones.list` and `machineTypes.aggregatedList` said.
#[derive(Debug, Default)]
pub struct CatalogueSnapshot {
    fetched: Option<Instant>,
    /// Machine types offered in at least one of the zones.
    pub types: BTreeMap<String, MachineTypeInfo>,
    /// Zones each type is offered in.
    pub zones_of: HashMap<String, Vec<String>>,
    /// The zones launched in.
    pub zones: Vec<String>,
    /// The region's rates from the Cloud Billing Catalog (empty until it answered).
    pub rates: Arc<billing::Parsed>,
}

impl CatalogueSnapshot {
    /// A machine type's price in `region`: from the Cloud Billing Catalog's rates where they
    /// price it, else from the shipped table; `None` when neither knows its family.
    pub fn price(&self, info: &MachineTypeInfo, region: &str) -> Option<gcp_prices::Price> {
        self.rates
            .price(
                &info.name,
                info.vcpus,
                info.memory_mib,
                info.shared_cpu,
                info.gpus.is_some(),
            )
            .or_else(|| gcp_prices::price(&info.name, info.vcpus, info.memory_mib, region))
    }
}

impl GcpProvider {
    /// The catalogue from Compute, refreshed when older than `catalogue_ttl` (a stale one is
    /// kept when a refresh fails).
    pub async fn catalogue(&self) -> Result<Arc<CatalogueSnapshot>, CloudError> {
        crate::cloud::catalogue::cached_or_refreshed(
            &self.catalogue,
            |c| c.fetched,
            self.config.catalogue_ttl,
            "machine type",
            || self.fetch_catalogue(),
        )
        .await
    }

    async fn fetch_catalogue(&self) -> Result<CatalogueSnapshot, CloudError> {
        let started = Instant::now();
        let zones = self.list_zones().await?;
        let (types, zones_of) = self.list_machine_types(&zones).await?;
        // Every 12 hours, the region's rates; a failure keeps the last good (or the table).
        self.prices
            .refresh_if_due(&self.clients.billing, &self.config.region)
            .await;
        tracing::info!(
            types = types.len(),
            zones = zones.len(),
            elapsed_ms = started.elapsed().as_millis(),
            "refreshed the Compute Engine machine type catalogue"
        );
        Ok(CatalogueSnapshot {
            fetched: Some(Instant::now()),
            types,
            zones_of,
            zones,
            rates: self.prices.rates(),
        })
    }

    /// The zones to launch in, sorted: the configured ones, else every zone of the region, and
    /// of those only the ones not `DOWN`.
    async fn list_zones(&self) -> Result<Vec<String>, CloudError> {
        let project = &self.config.project;
        let mut zones = Vec::new();
        let mut token = String::new();
        loop {
            let page = self
                .clients
                .zones
                .list()
                .set_project(project)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| cloud_error("listing zones", e))?;
            for zone in page.items {
                let (Some(name), Some(region)) = (zone.name.clone(), zone.region.clone()) else {
                    continue;
                };
                let up = zone.status.as_ref().and_then(|s| s.name()) != Some("DOWN");
                let wanted = if self.config.zones.is_empty() {
                    last_segment(&region) == self.config.region
                } else {
                    self.config.zones.contains(&name)
                };
                if up && wanted {
                    zones.push(name);
                }
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = next,
                None => break,
            }
        }
        zones.sort();
        Ok(zones)
    }

    /// The machine types offered in at least one of `zones`, and the zones (sorted) each is
    /// offered in.
    async fn list_machine_types(
        &self,
        zones: &[String],
    ) -> Result<
        (
            BTreeMap<String, MachineTypeInfo>,
            HashMap<String, Vec<String>>,
        ),
        CloudError,
    > {
        let project = &self.config.project;
        let mut types = BTreeMap::new();
        let mut zones_of: HashMap<String, Vec<String>> = HashMap::new();
        let mut token = String::new();
        loop {
            let page = self
                .clients
                .machine_types
                .aggregated_list()
                .set_project(project)
                .set_page_token(token.clone())
                .send()
                .await
                .map_err(|e| cloud_error("listing machine types", e))?;
            for (scope, list) in page.items {
                let zone = scope.strip_prefix("zones/").unwrap_or(&scope).to_owned();
                if !zones.contains(&zone) {
                    continue;
                }
                for mt in &list.machine_types {
                    let Some(info) = MachineTypeInfo::from_api(mt) else {
                        continue;
                    };
                    zones_of
                        .entry(info.name.clone())
                        .or_default()
                        .push(zone.clone());
                    types.entry(info.name.clone()).or_insert(info);
                }
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = next,
                None => break,
            }
        }
        for list in zones_of.values_mut() {
            list.sort();
        }
        Ok((types, zones_of))
    }

    /// The catalogue for a resolved node class: types some image of the class can boot,
    /// offered in the configured zones, priced, with the unavailable-offerings cache applied.
    pub(crate) fn instance_types_for(
        &self,
        resolved: &ResolvedNodeClass,
        snapshot: &CatalogueSnapshot,
    ) -> Vec<InstanceType> {
        let boot_gib = resolved
            .spec
            .disks
            .iter()
            .find(|d| d.boot)
            .and_then(|d| d.size_gib)
            .and_then(|gib| u64::try_from(gib).ok())
            .unwrap_or(catalogue::DEFAULT_BOOT_DISK_GIB);
        snapshot
            .types
            .values()
            .filter(|info| resolved.image_for(&info.arch).is_some())
            .map(|info| {
                let zones = snapshot
                    .zones_of
                    .get(&info.name)
                    .cloned()
                    .unwrap_or_default();
                let price = snapshot.price(info, &self.config.region);
                if price.is_none() {
                    tracing::debug!(machine_type = %info.name, "no price known; offered last");
                }
                let mut it = catalogue::instance_type(info, &self.config.region, boot_gib);
                it.offerings = catalogue::offerings(&zones, price, |ct, zone| {
                    self.unavailable.is_unavailable(ct, &info.name, zone)
                });
                it
            })
            .collect()
    }
}
