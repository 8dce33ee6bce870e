//! EC2 instance types as the scheduler sees them: capacity, the node's own overhead, the
//! `karpenter.k8s.aws/instance-*` labels, and priced offerings per zone and capacity type.
//!
//! Capacity and overhead follow upstream Karpenter's AWS provider (`pkg/providers/instancetype/
//! types.go`): memory less a 7.5 % VM overhead, max pods from the ENI limits
//! (`ENIs × (IPv4 per ENI − 1) + 2`) unless the node class sets `kubelet.maxPods`, kube-reserved
//! CPU on a sliding scale of vCPUs and memory as `11Mi × pods + 255Mi`, and a hard eviction
//! threshold of 100Mi of memory and 10 % of the root volume.

use crate::apis::CapacityType;
use crate::apis::{KubeletConfiguration, labels};
use crate::cloud::catalogue::kube_reserved_cpu_millis;
use crate::resources::{self, CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS, ResourceList};
use crate::scheduling::Requirement;
use crate::scheduling::{InstanceType, Offering, Overhead, UNKNOWN_PRICE};
use aws_sdk_ec2::types::{ArchitectureType, InstanceTypeInfo, UsageClassType};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Share of memory the hypervisor and firmware keep (upstream's `vmMemoryOverheadPercent`).
pub(crate) const VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// Root volume when the node class names none (the EKS AMIs' default).
pub(crate) const DEFAULT_ROOT_VOLUME_BYTES: u64 = 20 * GIB;
/// AMD GPUs, as the AMD device plugin names them.
pub(crate) const AMD_GPU: &str = "amd.com/gpu";
/// AWS Inferentia and Trainium devices.
pub(crate) const AWS_NEURON: &str = "aws.amazon.com/neuron";

/// The facts of one instance type that matter here, read from DescribeInstanceTypes.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeInfo {
    pub name: String,
    pub vcpus: u64,
    pub memory_mib: u64,
    /// `amd64` or `arm64`.
    pub arch: String,
    pub max_enis: u64,
    pub ipv4_per_eni: u64,
    pub gpus: Option<Gpu>,
    pub neuron_devices: u64,
    pub hypervisor: Option<String>,
    pub cpu_manufacturer: Option<String>,
    pub local_nvme_gb: Option<u64>,
    pub spot: bool,
    pub bare_metal: bool,
}

/// The GPUs of a type (all of one model on EC2).
#[derive(Clone, Debug, PartialEq)]
pub struct Gpu {
    pub name: String,
    pub manufacturer: String,
    pub count: u64,
    /// Memory of all of them together, MiB.
    pub memory_mib: u64,
}

impl TypeInfo {
    /// Reads what the scheduler needs; `None` for types Kubernetes nodes cannot be (i386, mac).
    pub(crate) fn from_sdk(info: &InstanceTypeInfo) -> Option<Self> {
        let name = info.instance_type()?.as_str().to_owned();
        let arches = info
            .processor_info()
            .map(|p| p.supported_architectures())
            .unwrap_or_default();
        let arch = if arches.contains(&ArchitectureType::X8664) {
            "amd64"
        } else if arches.contains(&ArchitectureType::Arm64) {
            "arm64"
        } else {
            return None;
        };
        let to_u64 = |v: Option<i32>| v.and_then(|v| u64::try_from(v).ok()).unwrap_or_default();
        let network = info.network_info();
        let gpus = info.gpu_info().and_then(|g| {
            let device = g.gpus().first()?;
            Some(Gpu {
                name: device.name()?.to_lowercase(),
                manufacturer: device.manufacturer().unwrap_or_default().to_lowercase(),
                count: to_u64(device.count()),
                memory_mib: to_u64(g.total_gpu_memory_in_mib()),
            })
        });
        let neuron_devices = info
            .neuron_info()
            .map(|n| n.neuron_devices().iter().map(|d| to_u64(d.count())).sum())
            .unwrap_or_default();
        Some(Self {
            vcpus: to_u64(info.v_cpu_info().and_then(|v| v.default_v_cpus())),
            memory_mib: info
                .memory_info()
                .and_then(|m| m.size_in_mib())
                .and_then(|m| u64::try_from(m).ok())
                .unwrap_or_default(),
            arch: arch.to_owned(),
            max_enis: to_u64(network.and_then(|n| n.maximum_network_interfaces())),
            ipv4_per_eni: to_u64(network.and_then(|n| n.ipv4_addresses_per_interface())),
            gpus,
            neuron_devices,
            hypervisor: info.hypervisor().map(|h| h.as_str().to_owned()),
            cpu_manufacturer: info
                .processor_info()
                .and_then(|p| p.manufacturer())
                .map(|m| m.to_lowercase()),
            local_nvme_gb: info
                .instance_storage_info()
                .and_then(|s| s.total_size_in_gb())
                .and_then(|g| u64::try_from(g).ok()),
            spot: info
                .supported_usage_classes()
                .contains(&UsageClassType::Spot),
            bare_metal: info.bare_metal().unwrap_or(false),
            name,
        })
    }

    /// Pods the VPC CNI can give addresses to: `ENIs × (IPv4 per ENI − 1) + 2`.
    pub(crate) fn eni_limited_pods(&self) -> u64 {
        self.max_enis * self.ipv4_per_eni.saturating_sub(1) + 2
    }

    /// The family (`m5`), category (`m`), generation (`5`) and size (`large`).
    pub(crate) fn name_parts(&self) -> (&str, String, String, &str) {
        let (family, size) = self.name.split_once('.').unwrap_or((&self.name, ""));
        let category: String = family
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        let generation: String = family
            .chars()
            .skip_while(char::is_ascii_alphabetic)
            .take_while(char::is_ascii_digit)
            .collect();
        (family, category, generation, size)
    }

    /// GPU, accelerator or bare-metal types: launched only when nothing ordinary fits (upstream's
    /// "exotic" filter).
    pub(crate) fn is_exotic(&self) -> bool {
        self.gpus.is_some() || self.neuron_devices > 0 || self.bare_metal
    }
}

/// Parses an eviction threshold (`100Mi` or `10%`) against a capacity.
fn threshold(resource: &str, text: &str, capacity: u64) -> Option<u64> {
    match text.strip_suffix('%') {
        Some(percent) => {
            let percent: f64 = percent.trim().parse().ok()?;
            Some((capacity as f64 * percent / 100.0).ceil() as u64)
        }
        None => resources::parse(resource, text).ok(),
    }
}

/// The scheduler's view of a type, without offerings. `root_volume_bytes` is the node class's
/// root volume; `kubelet` its kubelet overrides.
pub fn instance_type(
    info: &TypeInfo,
    region: &str,
    root_volume_bytes: u64,
    kubelet: Option<&KubeletConfiguration>,
) -> InstanceType {
    let memory = info
        .memory_mib
        .saturating_sub((info.memory_mib as f64 * VM_MEMORY_OVERHEAD_PERCENT).ceil() as u64)
        * MIB;
    let pods = max_pods(info, kubelet);
    let capacity = capacity(info, memory, pods, root_volume_bytes);
    let mut it = InstanceType::new(&info.name, capacity);
    it.overhead = overhead(info, memory, pods, root_volume_bytes, kubelet);
    for requirement in requirements(info, region) {
        it.requirements.add(requirement);
    }
    it
}

/// The pods a node of the type takes: the ENI limit unless the node class sets `maxPods`, and
/// at most `podsPerCore` per vCPU.
fn max_pods(info: &TypeInfo, kubelet: Option<&KubeletConfiguration>) -> u64 {
    let mut pods = kubelet
        .and_then(|k| k.max_pods)
        .and_then(|p| u64::try_from(p).ok())
        .unwrap_or_else(|| info.eni_limited_pods());
    if let Some(per_core) = kubelet
        .and_then(|k| k.pods_per_core)
        .and_then(|p| u64::try_from(p).ok())
        .filter(|p| *p > 0)
    {
        pods = pods.min(per_core * info.vcpus);
    }
    pods
}

/// What a node of the type has: `memory` is what the VM overhead leaves.
fn capacity(info: &TypeInfo, memory: u64, pods: u64, root_volume_bytes: u64) -> ResourceList {
    let mut capacity = ResourceList::new()
        .with(CPU, info.vcpus * 1000)
        .with(MEMORY, memory)
        .with(PODS, pods)
        .with(EPHEMERAL_STORAGE, root_volume_bytes);
    if let Some(gpu) = &info.gpus {
        match gpu.manufacturer.as_str() {
            "nvidia" => capacity.set(NVIDIA_GPU, gpu.count),
            "amd" => capacity.set(AMD_GPU, gpu.count),
            _ => {}
        }
    }
    if info.neuron_devices > 0 {
        capacity.set(AWS_NEURON, info.neuron_devices);
    }
    capacity
}

/// What the node keeps for itself: upstream's defaults, then the node class's kubelet
/// overrides.
fn overhead(
    info: &TypeInfo,
    memory: u64,
    pods: u64,
    root_volume_bytes: u64,
    kubelet: Option<&KubeletConfiguration>,
) -> Overhead {
    let mut kube_reserved = ResourceList::new()
        .with(CPU, kube_reserved_cpu_millis(info.vcpus))
        .with(MEMORY, (11 * pods + 255) * MIB)
        .with(EPHEMERAL_STORAGE, GIB);
    let mut system_reserved = ResourceList::new();
    let mut eviction = ResourceList::new().with(MEMORY, 100 * MIB).with(
        EPHEMERAL_STORAGE,
        (root_volume_bytes as f64 * 0.1).ceil() as u64,
    );
    if let Some(kubelet) = kubelet {
        for (name, value) in &kubelet.kube_reserved {
            if let Ok(amount) = resources::parse(name, value) {
                kube_reserved.set(name, amount);
            }
        }
        for (name, value) in &kubelet.system_reserved {
            if let Ok(amount) = resources::parse(name, value) {
                system_reserved.set(name, amount);
            }
        }
        for (signal, value) in &kubelet.eviction_hard {
            let (resource, of) = match signal.as_str() {
                "memory.available" => (MEMORY, memory),
                "nodefs.available" => (EPHEMERAL_STORAGE, root_volume_bytes),
                _ => continue,
            };
            if let Some(amount) = threshold(resource, value, of) {
                eviction.set(resource, amount);
            }
        }
    }
    Overhead {
        kube_reserved,
        system_reserved,
        eviction_threshold: eviction,
    }
}

/// The type's labels: the well-known ones, and `karpenter.k8s.aws/instance-*` (absent where the
/// type has no such property).
fn requirements(info: &TypeInfo, region: &str) -> Vec<Requirement> {
    let (family, category, generation, size) = info.name_parts();
    let mut requirements = vec![
        Requirement::in_values(labels::ARCH, [info.arch.as_str()]),
        Requirement::in_values(labels::OS, ["linux"]),
        Requirement::in_values(labels::REGION, [region]),
        Requirement::in_values(labels::AWS_INSTANCE_CATEGORY, [category.as_str()]),
        Requirement::in_values(labels::AWS_INSTANCE_FAMILY, [family]),
        Requirement::in_values(labels::AWS_INSTANCE_GENERATION, [generation.as_str()]),
        Requirement::in_values(labels::AWS_INSTANCE_SIZE, [size]),
        Requirement::in_values(labels::AWS_INSTANCE_CPU, [info.vcpus.to_string()]),
        Requirement::in_values(labels::AWS_INSTANCE_MEMORY, [info.memory_mib.to_string()]),
    ];
    let optional = [
        (labels::AWS_INSTANCE_HYPERVISOR, info.hypervisor.clone()),
        (
            labels::AWS_INSTANCE_CPU_MANUFACTURER,
            info.cpu_manufacturer.clone(),
        ),
        (
            labels::AWS_INSTANCE_LOCAL_NVME,
            info.local_nvme_gb.map(|g| g.to_string()),
        ),
        (
            labels::AWS_INSTANCE_GPU_NAME,
            info.gpus.as_ref().map(|g| g.name.clone()),
        ),
        (
            labels::AWS_INSTANCE_GPU_MANUFACTURER,
            info.gpus.as_ref().map(|g| g.manufacturer.clone()),
        ),
        (
            labels::AWS_INSTANCE_GPU_COUNT,
            info.gpus.as_ref().map(|g| g.count.to_string()),
        ),
        (
            labels::AWS_INSTANCE_GPU_MEMORY,
            info.gpus.as_ref().map(|g| g.memory_mib.to_string()),
        ),
    ];
    for (key, value) in optional {
        requirements.push(match value {
            Some(value) if !value.is_empty() => Requirement::in_values(key, [value]),
            _ => Requirement::does_not_exist(key),
        });
    }
    requirements
}

/// Offerings of a type: on-demand in every zone where it is offered and priced, spot where the
/// type supports spot and a spot price is known. `unavailable` says which are out of capacity.
pub fn offerings(
    info: &TypeInfo,
    zones: &[String],
    on_demand_price: Option<f64>,
    spot_price: impl Fn(&str) -> Option<f64>,
    unavailable: impl Fn(CapacityType, &str) -> bool,
) -> Vec<Offering> {
    let mut offerings = Vec::new();
    for zone in zones {
        // A type no price source lists (newer than the table, or a region the Pricing API
        // does not answer for) is still offered on demand, ranked after every priced type;
        // upstream marks it unavailable instead.
        let on_demand = on_demand_price.unwrap_or(UNKNOWN_PRICE);
        offerings.push(Offering {
            available: !unavailable(CapacityType::OnDemand, zone),
            ..Offering::new(zone, CapacityType::OnDemand, on_demand)
        });
        if info.spot
            && let Some(price) = spot_price(zone)
        {
            let available = !unavailable(CapacityType::Spot, zone);
            offerings.push(Offering {
                available,
                ..Offering::new(zone, CapacityType::Spot, price)
            });
        }
    }
    offerings
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{
        GpuDeviceInfo, GpuInfo, MemoryInfo, NetworkInfo, ProcessorInfo, VCpuInfo,
    };

    fn sdk_type(
        name: &str,
        arch: ArchitectureType,
        vcpus: i32,
        mib: i64,
        enis: i32,
        ips: i32,
    ) -> InstanceTypeInfo {
        sdk_builder(name, arch, vcpus, mib, enis, ips).build()
    }

    fn sdk_builder(
        name: &str,
        arch: ArchitectureType,
        vcpus: i32,
        mib: i64,
        enis: i32,
        ips: i32,
    ) -> aws_sdk_ec2::types::builders::InstanceTypeInfoBuilder {
        InstanceTypeInfo::builder()
            .instance_type(name.into())
            .processor_info(
                ProcessorInfo::builder()
                    .supported_architectures(arch)
                    .manufacturer("Intel")
                    .build(),
            )
            .v_cpu_info(VCpuInfo::builder().default_v_cpus(vcpus).build())
            .memory_info(MemoryInfo::builder().size_in_mib(mib).build())
            .network_info(
                NetworkInfo::builder()
                    .maximum_network_interfaces(enis)
                    .ipv4_addresses_per_interface(ips)
                    .build(),
            )
            .supported_usage_classes(UsageClassType::OnDemand)
            .supported_usage_classes(UsageClassType::Spot)
    }

    #[test]
    fn m5_large_matches_upstreams_capacity_and_overhead() {
        let info = TypeInfo::from_sdk(&sdk_type(
            "m5.large",
            ArchitectureType::X8664,
            2,
            8192,
            3,
            10,
        ))
        .unwrap();
        assert_eq!(info.eni_limited_pods(), 29);
        let it = instance_type(&info, "us-west-2", DEFAULT_ROOT_VOLUME_BYTES, None);
        assert_eq!(it.capacity.get(PODS), 29);
        assert_eq!(it.capacity.get(MEMORY), (8192 - 615) * MIB);
        assert_eq!(it.overhead.kube_reserved.get(CPU), 70);
        assert_eq!(it.overhead.kube_reserved.get(MEMORY), (11 * 29 + 255) * MIB);
        assert_eq!(it.overhead.eviction_threshold.get(MEMORY), 100 * MIB);
        assert!(it.requirements.allows(labels::AWS_INSTANCE_FAMILY, "m5"));
        assert!(it.requirements.allows(labels::AWS_INSTANCE_CATEGORY, "m"));
        assert!(it.requirements.allows(labels::AWS_INSTANCE_GENERATION, "5"));
        assert!(
            it.requirements
                .allows(labels::AWS_INSTANCE_CPU_MANUFACTURER, "intel")
        );
        assert!(it.requirements.allows(labels::ARCH, "amd64"));
        assert!(!it.requirements.allows(labels::AWS_INSTANCE_GPU_COUNT, "1"));
    }

    #[test]
    fn kubelet_max_pods_and_reservations_override_the_defaults() {
        let info = TypeInfo::from_sdk(&sdk_type(
            "c6g.xlarge",
            ArchitectureType::Arm64,
            4,
            8192,
            4,
            15,
        ))
        .unwrap();
        let kubelet = KubeletConfiguration {
            max_pods: Some(110),
            pods_per_core: Some(10),
            eviction_hard: [("memory.available".to_owned(), "5%".to_owned())]
                .into_iter()
                .collect(),
            ..KubeletConfiguration::default()
        };
        let it = instance_type(
            &info,
            "us-west-2",
            DEFAULT_ROOT_VOLUME_BYTES,
            Some(&kubelet),
        );
        assert_eq!(it.capacity.get(PODS), 40);
        assert_eq!(
            it.overhead.eviction_threshold.get(MEMORY),
            (it.capacity.get(MEMORY) as f64 * 0.05).ceil() as u64
        );
        assert!(it.requirements.allows(labels::ARCH, "arm64"));
    }

    #[test]
    fn gpus_become_resources_and_labels_and_make_a_type_exotic() {
        let sdk = sdk_builder("g5.xlarge", ArchitectureType::X8664, 4, 16384, 4, 15)
            .gpu_info(
                GpuInfo::builder()
                    .gpus(
                        GpuDeviceInfo::builder()
                            .name("A10G")
                            .manufacturer("NVIDIA")
                            .count(1)
                            .build(),
                    )
                    .total_gpu_memory_in_mib(22888)
                    .build(),
            )
            .build();
        let info = TypeInfo::from_sdk(&sdk).unwrap();
        assert!(info.is_exotic());
        let it = instance_type(&info, "us-west-2", DEFAULT_ROOT_VOLUME_BYTES, None);
        assert_eq!(it.capacity.get(NVIDIA_GPU), 1);
        assert!(
            it.requirements
                .allows(labels::AWS_INSTANCE_GPU_NAME, "a10g")
        );
        assert!(
            it.requirements
                .allows(labels::AWS_INSTANCE_GPU_MEMORY, "22888")
        );
    }

    #[test]
    fn offerings_are_priced_per_zone_and_marked_unavailable_from_the_cache() {
        let info = TypeInfo::from_sdk(&sdk_type(
            "m5.large",
            ArchitectureType::X8664,
            2,
            8192,
            3,
            10,
        ))
        .unwrap();
        let zones = vec!["us-west-2a".to_owned(), "us-west-2b".to_owned()];
        let offerings = offerings(
            &info,
            &zones,
            Some(0.096),
            |z| (z == "us-west-2a").then_some(0.03),
            |ct, z| ct == "spot" && z == "us-west-2a",
        );
        assert_eq!(offerings.len(), 3);
        assert!(
            offerings
                .iter()
                .any(|o| o.capacity_type == CapacityType::Spot && !o.available)
        );
        assert!(
            offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .all(|o| o.available && o.price == 0.096)
        );
    }
}
