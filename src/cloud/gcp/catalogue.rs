//! Compute Engine machine types as the scheduler sees them: capacity, GKE's node overhead, the
//! `karpenter.k8s.gcp/*` labels, and priced offerings per zone and capacity type.
//!
//! Pure functions over what `machineTypes.aggregatedList` returned ([`MachineTypeInfo`]); the
//! provider fetches and caches, this module only shapes.

use crate::apis::CapacityType;
use crate::apis::labels;
use crate::cloud::catalogue::kube_reserved_cpu_millis;
use crate::cloud::gcp_prices;
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS, ResourceList};
use crate::scheduling::Requirement;
use crate::scheduling::{InstanceType, Offering, Overhead, UNKNOWN_PRICE};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// GKE Standard's default pods per node.
pub(crate) const MAX_PODS: u64 = 110;
/// The boot disk size when the node class names none (GKE's default).
pub(crate) const DEFAULT_BOOT_DISK_GIB: u64 = 100;

/// What the catalogue keeps of a machine type.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineTypeInfo {
    pub name: String,
    pub vcpus: u64,
    pub memory_mib: u64,
    /// `amd64` or `arm64`.
    pub arch: String,
    pub shared_cpu: bool,
    /// (accelerator type, count), e.g. (`nvidia-l4`, 1).
    pub gpus: Option<(String, u64)>,
}

impl MachineTypeInfo {
    /// From the API's machine type; `None` for one without a name or CPUs.
    pub fn from_api(mt: &google_cloud_compute_v1::model::MachineType) -> Option<Self> {
        let name = mt.name.clone()?;
        let vcpus = u64::try_from(mt.guest_cpus?).ok().filter(|v| *v > 0)?;
        let memory_mib = u64::try_from(mt.memory_mb.unwrap_or(0)).unwrap_or(0);
        let arch = match mt
            .architecture
            .as_ref()
            .map(|a| a.name().unwrap_or_default().to_owned())
            .as_deref()
        {
            Some("ARM64") => "arm64",
            _ if name.starts_with("t2a") || name.starts_with("c4a") || name.starts_with("n4a") => {
                "arm64"
            }
            _ => "amd64",
        };
        let gpus = mt.accelerators.first().and_then(|a| {
            let kind = a.guest_accelerator_type.clone()?;
            let count = u64::try_from(a.guest_accelerator_count?).ok()?;
            Some((kind, count))
        });
        Some(Self {
            name,
            vcpus,
            memory_mib,
            arch: arch.to_owned(),
            shared_cpu: mt.is_shared_cpu.unwrap_or(false),
            gpus,
        })
    }

    /// `n2d` of `n2d-standard-4`.
    pub fn family(&self) -> &str {
        gcp_prices::family(&self.name)
    }
}

/// kube-reserved memory as GKE computes it: 255 MiB below 1 GiB, else 25% of the first 4 GiB,
/// 20% of the next 4, 10% of the next 8, 6% of the next 112 and 2% above 128 GiB.
pub(crate) fn kube_reserved_memory_bytes(memory_bytes: u64) -> u64 {
    if memory_bytes < GIB {
        return 255 * MIB;
    }
    let tiers = [
        (4 * GIB, 25),
        (4 * GIB, 20),
        (8 * GIB, 10),
        (112 * GIB, 6),
        (u64::MAX, 2),
    ];
    let mut remaining = memory_bytes;
    let mut reserved = 0u64;
    for (size, percent) in tiers {
        let used = remaining.min(size);
        reserved += used * percent / 100;
        remaining -= used;
    }
    reserved
}

/// The instance type for a machine type, without offerings.
pub fn instance_type(info: &MachineTypeInfo, region: &str, boot_disk_gib: u64) -> InstanceType {
    let memory = info.memory_mib * MIB;
    let mut capacity = ResourceList::new()
        .with(CPU, info.vcpus * 1000)
        .with(MEMORY, memory)
        .with(PODS, MAX_PODS)
        .with(EPHEMERAL_STORAGE, boot_disk_gib * GIB);
    if let Some((_, count)) = &info.gpus
        && info
            .gpus
            .as_ref()
            .is_some_and(|(kind, _)| kind.starts_with("nvidia"))
    {
        capacity = capacity.with(NVIDIA_GPU, *count);
    }
    let mut it = InstanceType::new(&info.name, capacity);
    it.overhead = Overhead {
        kube_reserved: ResourceList::new()
            .with(CPU, kube_reserved_cpu_millis(info.vcpus))
            .with(MEMORY, kube_reserved_memory_bytes(memory))
            .with(EPHEMERAL_STORAGE, (boot_disk_gib * GIB / 10).min(100 * GIB)),
        system_reserved: ResourceList::new(),
        eviction_threshold: ResourceList::new()
            .with(MEMORY, 100 * MIB)
            .with(EPHEMERAL_STORAGE, boot_disk_gib * GIB / 10),
    };
    let family = info.family();
    let mut parts = info.name.splitn(3, '-');
    let _ = parts.next();
    let shape = parts.next().unwrap_or_default();
    let size = parts.next().unwrap_or_default();
    let generation: String = family
        .chars()
        .skip_while(char::is_ascii_alphabetic)
        .take_while(char::is_ascii_digit)
        .collect();
    let (vcpu, memory_mib) = (info.vcpus.to_string(), info.memory_mib.to_string());
    let gpu_count = info.gpus.as_ref().map_or(0, |(_, n)| *n).to_string();
    let mut requirements = vec![
        Requirement::in_values(labels::ARCH, [info.arch.as_str()]),
        Requirement::in_values(labels::OS, ["linux"]),
        Requirement::in_values(labels::REGION, [region]),
        Requirement::in_values(labels::GCP_INSTANCE_FAMILY, [family]),
        Requirement::in_values(labels::GCP_INSTANCE_CPU, [vcpu.as_str()]),
        Requirement::in_values(labels::GCP_INSTANCE_MEMORY, [memory_mib.as_str()]),
        Requirement::in_values(labels::GCP_INSTANCE_GPU_COUNT, [gpu_count.as_str()]),
    ];
    if !shape.is_empty() {
        requirements.push(Requirement::in_values(labels::GCP_INSTANCE_SHAPE, [shape]));
    }
    if !size.is_empty() {
        requirements.push(Requirement::in_values(labels::GCP_INSTANCE_SIZE, [size]));
    }
    if !generation.is_empty() {
        requirements.push(Requirement::in_values(
            labels::GCP_INSTANCE_GENERATION,
            [generation.as_str()],
        ));
    }
    if let Some((kind, _)) = &info.gpus {
        requirements.push(Requirement::in_values(
            labels::GCP_INSTANCE_GPU_NAME,
            [kind.as_str()],
        ));
    }
    for requirement in requirements {
        it.requirements.add(requirement);
    }
    it
}

/// A machine type's spot and on-demand offerings in `zones` at `price`; an offering the cache holds as
/// unavailable is listed with `available: false`. With no known price (a family no price
/// source lists yet) the offerings are unpriced: the type still launches, ranked after every
/// priced one, where upstream would leave it out.
pub fn offerings(
    zones: &[String],
    price: Option<gcp_prices::Price>,
    is_unavailable: impl Fn(CapacityType, &str) -> bool,
) -> Vec<Offering> {
    let (spot, on_demand) = match price {
        Some(p) => (p.spot, p.on_demand),
        None => (UNKNOWN_PRICE, UNKNOWN_PRICE),
    };
    let mut out = Vec::with_capacity(zones.len() * 2);
    for zone in zones {
        for (capacity_type, price) in [
            (CapacityType::Spot, spot),
            (CapacityType::OnDemand, on_demand),
        ] {
            let mut offering = Offering::new(zone, capacity_type, price);
            offering.available = !is_unavailable(capacity_type, zone);
            out.push(offering);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n2d_standard_4() -> MachineTypeInfo {
        MachineTypeInfo {
            name: "n2d-standard-4".into(),
            vcpus: 4,
            memory_mib: 16384,
            arch: "amd64".into(),
            shared_cpu: false,
            gpus: None,
        }
    }

    #[test]
    fn gke_memory_reservation_follows_its_tiers() {
        assert_eq!(kube_reserved_memory_bytes(512 * MIB), 255 * MIB);
        // 4 GiB: 25% = 1 GiB.
        assert_eq!(kube_reserved_memory_bytes(4 * GIB) / MIB, 1024);
        // 16 GiB: 1 GiB + 0.8 GiB + 0.8 GiB = 2.6 GiB.
        let reserved = kube_reserved_memory_bytes(16 * GIB);
        assert!(
            (reserved as f64 / GIB as f64 - 2.6).abs() < 0.01,
            "{reserved}"
        );
    }

    #[test]
    fn a_machine_type_becomes_an_instance_type_with_gcp_labels() {
        let it = instance_type(&n2d_standard_4(), "us-central1", 100);
        assert_eq!(it.capacity.get(CPU), 4000);
        assert!(it.allocatable().get(CPU) < 4000);
        for (key, value) in [
            (labels::GCP_INSTANCE_FAMILY, "n2d"),
            (labels::GCP_INSTANCE_SHAPE, "standard"),
            (labels::GCP_INSTANCE_SIZE, "4"),
            (labels::GCP_INSTANCE_GENERATION, "2"),
            (labels::GCP_INSTANCE_CPU, "4"),
            (labels::ARCH, "amd64"),
            (labels::REGION, "us-central1"),
        ] {
            assert!(it.requirements.allows(key, value), "{key}={value}");
        }
    }

    #[test]
    fn offerings_are_priced_and_carry_the_unavailable_cache() {
        let zones = vec!["us-central1-a".to_owned(), "us-central1-b".to_owned()];
        let price = gcp_prices::price("n2d-standard-4", 4, 16384, "us-central1");
        let offers = offerings(&zones, price, |ct, z| ct == "spot" && z == "us-central1-a");
        assert_eq!(offers.len(), 4);
        assert!(offers.iter().any(|o| !o.available
            && o.zone == "us-central1-a"
            && o.capacity_type == CapacityType::Spot));
        let spot = offers
            .iter()
            .find(|o| o.capacity_type == CapacityType::Spot)
            .map(|o| o.price);
        let od = offers
            .iter()
            .find(|o| o.capacity_type == CapacityType::OnDemand)
            .map(|o| o.price);
        assert!(spot < od);
        let unknown = offerings(&zones, None, |_, _| false);
        assert_eq!(unknown.len(), 4);
        assert!(
            unknown
                .iter()
                .all(|o| o.available && o.known_price().is_none())
        );
    }
}
