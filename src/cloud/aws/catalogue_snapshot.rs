//! What EC2 says it offers, fetched and cached for every node class: DescribeInstanceTypes,
//! DescribeInstanceTypeOfferings and DescribeSpotPriceHistory, with the live on-demand prices;
//! and the catalogue one resolved node class sees of it. Upstream's `pkg/providers/instancetype`
//! (`List`, over its cached describes and offerings) and the spot half of `pkg/providers/pricing`.
//! How one type becomes the scheduler's [`InstanceType`] is [`super::catalogue`]'s.

use super::AwsProvider;
use super::catalogue::{self, TypeInfo};
use super::errors::cloud_error;
use super::nodeclass::ResolvedNodeClass;
use crate::cloud::CloudError;
use crate::scheduling::InstanceType;
use aws_sdk_ec2::types::{Filter, LocationType};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// What DescribeInstanceTypes, DescribeInstanceTypeOfferings and DescribeSpotPriceHistory said.
#[derive(Debug, Default)]
pub struct CatalogueSnapshot {
    fetched: Option<Instant>,
    pub types: BTreeMap<String, TypeInfo>,
    /// Zones each type is offered in.
    pub zones: HashMap<String, Vec<String>>,
    /// Latest spot price per (type, zone).
    pub spot: HashMap<(String, String), f64>,
    /// The region's on-demand prices from the Pricing API, when it answered.
    pub on_demand: Arc<HashMap<String, f64>>,
}

impl AwsProvider {
    /// The catalogue from EC2, refreshed when older than `catalogue_ttl` (a stale one is kept
    /// when a refresh fails).
    pub async fn catalogue(&self) -> Result<Arc<CatalogueSnapshot>, CloudError> {
        crate::cloud::catalogue::cached_or_refreshed(
            &self.catalogue,
            |c| c.fetched,
            self.config.catalogue_ttl,
            "instance type",
            || self.fetch_catalogue(),
        )
        .await
    }

    async fn fetch_catalogue(&self) -> Result<CatalogueSnapshot, CloudError> {
        let started = Instant::now();
        let types = self.fetch_instance_types().await?;
        let zones = self.fetch_offered_zones().await?;
        let spot = self.fetch_spot_prices().await?;
        // Every 12 hours, the region's exact on-demand prices; a failure keeps the last good.
        self.price_feed
            .refresh_if_due(&self.clients.pricing, &self.config.region)
            .await;
        tracing::info!(
            types = types.len(),
            elapsed_ms = started.elapsed().as_millis(),
            "refreshed the EC2 instance type catalogue"
        );
        Ok(CatalogueSnapshot {
            fetched: Some(Instant::now()),
            types,
            zones,
            spot,
            on_demand: self.price_feed.prices(),
        })
    }

    /// Every x86_64 and arm64 type DescribeInstanceTypes lists, by name.
    async fn fetch_instance_types(&self) -> Result<BTreeMap<String, TypeInfo>, CloudError> {
        let ec2 = &self.clients.ec2;
        let mut types = BTreeMap::new();
        let mut token = None;
        loop {
            let out = ec2
                .describe_instance_types()
                .filters(
                    Filter::builder()
                        .name("processor-info.supported-architecture")
                        .values("x86_64")
                        .values("arm64")
                        .build(),
                )
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| cloud_error("describing instance types", e))?;
            for info in out.instance_types() {
                if let Some(t) = TypeInfo::from_sdk(info) {
                    types.insert(t.name.clone(), t);
                }
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                return Ok(types);
            }
        }
    }

    /// The zones each type is offered in (DescribeInstanceTypeOfferings by availability zone).
    async fn fetch_offered_zones(&self) -> Result<HashMap<String, Vec<String>>, CloudError> {
        let ec2 = &self.clients.ec2;
        let mut zones: HashMap<String, Vec<String>> = HashMap::new();
        let mut token = None;
        loop {
            let out = ec2
                .describe_instance_type_offerings()
                .location_type(LocationType::AvailabilityZone)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| cloud_error("describing instance type offerings", e))?;
            for o in out.instance_type_offerings() {
                if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                    zones
                        .entry(t.as_str().to_owned())
                        .or_default()
                        .push(zone.to_owned());
                }
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                return Ok(zones);
            }
        }
    }

    /// The latest Linux spot price per (type, zone).
    async fn fetch_spot_prices(&self) -> Result<HashMap<(String, String), f64>, CloudError> {
        let ec2 = &self.clients.ec2;
        let mut spot: HashMap<(String, String), (f64, i64)> = HashMap::new();
        let mut token = None;
        loop {
            let out = ec2
                .describe_spot_price_history()
                .product_descriptions("Linux/UNIX")
                .product_descriptions("Linux/UNIX (Amazon VPC)")
                .start_time(aws_sdk_ec2::primitives::DateTime::from(
                    std::time::SystemTime::now(),
                ))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| cloud_error("describing spot prices", e))?;
            for p in out.spot_price_history() {
                let (Some(t), Some(zone), Some(price)) = (
                    p.instance_type(),
                    p.availability_zone(),
                    p.spot_price().and_then(|s| s.parse::<f64>().ok()),
                ) else {
                    continue;
                };
                let at = p.timestamp().map(|t| t.secs()).unwrap_or_default();
                let entry = spot
                    .entry((t.as_str().to_owned(), zone.to_owned()))
                    .or_insert((price, at));
                if at > entry.1 {
                    *entry = (price, at);
                }
            }
            token = out
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                return Ok(spot.into_iter().map(|(k, (price, _))| (k, price)).collect());
            }
        }
    }

    /// The catalogue for a resolved node class: types some AMI can boot, offered in its
    /// subnets' zones, priced, with the unavailable-offerings cache applied.
    pub(crate) fn instance_types_for(
        &self,
        resolved: &ResolvedNodeClass,
        snapshot: &CatalogueSnapshot,
    ) -> Vec<InstanceType> {
        let zones: Vec<String> = {
            let mut z: Vec<String> = resolved.subnets.iter().map(|s| s.zone.clone()).collect();
            z.dedup();
            z
        };
        let root_volume = root_volume_bytes(&resolved.spec);
        let kubelet = resolved.spec.kubelet.as_ref();
        snapshot
            .types
            .values()
            .filter(|info| {
                resolved
                    .amis
                    .iter()
                    .any(|a| a.fits(&info.arch, info.gpus.is_some() || info.neuron_devices > 0))
            })
            .map(|info| {
                let mut it =
                    catalogue::instance_type(info, &self.config.region, root_volume, kubelet);
                let offered: Vec<String> = snapshot
                    .zones
                    .get(&info.name)
                    .map(|z| {
                        zones
                            .iter()
                            .filter(|zone| z.contains(zone))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                it.offerings = catalogue::offerings(
                    info,
                    &offered,
                    self.config
                        .prices
                        .on_demand_with(&snapshot.on_demand, &info.name),
                    |zone| {
                        snapshot
                            .spot
                            .get(&(info.name.clone(), zone.to_owned()))
                            .copied()
                    },
                    |capacity_type, zone| {
                        self.unavailable
                            .is_unavailable(capacity_type, &info.name, zone)
                    },
                );
                it
            })
            .collect()
    }
}

/// The root volume size a node class asks for (default 20Gi).
pub(crate) fn root_volume_bytes(spec: &crate::apis::EC2NodeClassSpec) -> u64 {
    spec.block_device_mappings
        .iter()
        .find(|b| b.root_volume == Some(true))
        .or_else(|| spec.block_device_mappings.first())
        .and_then(|b| b.ebs.as_ref())
        .and_then(|e| e.volume_size.as_deref())
        .and_then(|size| crate::resources::parse(crate::resources::EPHEMERAL_STORAGE, size).ok())
        .unwrap_or(catalogue::DEFAULT_ROOT_VOLUME_BYTES)
}
