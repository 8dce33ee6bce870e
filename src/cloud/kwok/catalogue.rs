//! The simulated cloud's catalogue: real AWS and Google Cloud machine shapes with their vCPUs,
//! memory, pod limits, zones and list prices, so the demo makes the same cost-aware choices a
//! real cluster would (spot before on-demand, arm64 when allowed, the smallest type that fits).
//!
//! Prices are on-demand and typical spot list prices per hour in USD (AWS us-west-2, Linux,
//! rounded to four places; GCP us-central1 from [`crate::cloud::gcp_prices`], the table the gcp
//! provider ships). Overhead follows upstream Karpenter's formulas
//! for EKS (kube-reserved from vCPUs and max pods, 100Mi eviction threshold).

use crate::apis::CapacityType;
use crate::apis::labels;
use crate::cloud::catalogue::kube_reserved_cpu_millis;
use crate::cloud::gcp_prices;
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS, ResourceList};
use crate::scheduling::Requirement;
use crate::scheduling::{InstanceType, Offering, Overhead};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const AWS_ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];
const GCP_ZONES: [&str; 3] = ["us-central1-a", "us-central1-b", "us-central1-c"];
const GCP_MAX_PODS: u64 = 110;

/// One row of the table.
struct Shape {
    name: &'static str,
    cloud: Cloud,
    arch: &'static str,
    vcpu: u64,
    memory_gib: u64,
    max_pods: u64,
    gpus: u64,
    on_demand: f64,
    spot: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cloud {
    Aws,
    Gcp,
}

const fn aws(
    name: &'static str,
    arch: &'static str,
    vcpu: u64,
    memory_gib: u64,
    max_pods: u64,
    on_demand: f64,
    spot: f64,
) -> Shape {
    Shape {
        name,
        cloud: Cloud::Aws,
        arch,
        vcpu,
        memory_gib,
        max_pods,
        gpus: 0,
        on_demand,
        spot,
    }
}

/// A Google Cloud shape; its prices come from the table the gcp provider uses too
/// ([`crate::cloud::gcp_prices`]).
const fn gcp(name: &'static str, arch: &'static str, vcpu: u64, memory_gib: u64) -> Shape {
    Shape {
        name,
        cloud: Cloud::Gcp,
        arch,
        vcpu,
        memory_gib,
        max_pods: GCP_MAX_PODS,
        gpus: 0,
        on_demand: 0.0,
        spot: 0.0,
    }
}

const fn with_gpus(mut shape: Shape, gpus: u64) -> Shape {
    shape.gpus = gpus;
    shape
}

const SHAPES: &[Shape] = &[
    // AWS: burstable, general purpose, compute and memory optimised, Graviton, GPU.
    aws("t3.medium", "amd64", 2, 4, 17, 0.0416, 0.0125),
    aws("t3.large", "amd64", 2, 8, 35, 0.0832, 0.0250),
    aws("t3.xlarge", "amd64", 4, 16, 58, 0.1664, 0.0499),
    aws("m5.large", "amd64", 2, 8, 29, 0.0960, 0.0371),
    aws("m5.xlarge", "amd64", 4, 16, 58, 0.1920, 0.0742),
    aws("m5.2xlarge", "amd64", 8, 32, 58, 0.3840, 0.1484),
    aws("m5.4xlarge", "amd64", 16, 64, 234, 0.7680, 0.2968),
    aws("m5.8xlarge", "amd64", 32, 128, 234, 1.5360, 0.5936),
    aws("m6i.large", "amd64", 2, 8, 29, 0.0960, 0.0402),
    aws("m6i.xlarge", "amd64", 4, 16, 58, 0.1920, 0.0804),
    aws("m6i.2xlarge", "amd64", 8, 32, 58, 0.3840, 0.1608),
    aws("c5.large", "amd64", 2, 4, 29, 0.0850, 0.0340),
    aws("c5.xlarge", "amd64", 4, 8, 58, 0.1700, 0.0680),
    aws("c5.2xlarge", "amd64", 8, 16, 58, 0.3400, 0.1360),
    aws("c5.4xlarge", "amd64", 16, 32, 234, 0.6800, 0.2720),
    aws("r5.large", "amd64", 2, 16, 29, 0.1260, 0.0479),
    aws("r5.xlarge", "amd64", 4, 32, 58, 0.2520, 0.0958),
    aws("r5.2xlarge", "amd64", 8, 64, 58, 0.5040, 0.1916),
    aws("m6g.large", "arm64", 2, 8, 29, 0.0770, 0.0301),
    aws("m6g.xlarge", "arm64", 4, 16, 58, 0.1540, 0.0602),
    aws("m6g.2xlarge", "arm64", 8, 32, 58, 0.3080, 0.1204),
    aws("m6g.4xlarge", "arm64", 16, 64, 234, 0.6160, 0.2408),
    aws("c6g.large", "arm64", 2, 4, 29, 0.0680, 0.0265),
    aws("c6g.xlarge", "arm64", 4, 8, 58, 0.1360, 0.0530),
    aws("c6g.2xlarge", "arm64", 8, 16, 58, 0.2720, 0.1061),
    with_gpus(aws("g4dn.xlarge", "amd64", 4, 16, 29, 0.5260, 0.2104), 1),
    with_gpus(aws("g5.xlarge", "amd64", 4, 16, 58, 1.0060, 0.4024), 1),
    // Google Cloud: E2, N2, N2D, C3, Tau T2A (Arm), memory-optimised N2, and a G2 GPU shape.
    gcp("e2-standard-2", "amd64", 2, 8),
    gcp("e2-standard-4", "amd64", 4, 16),
    gcp("e2-standard-8", "amd64", 8, 32),
    gcp("e2-standard-16", "amd64", 16, 64),
    gcp("n2-standard-2", "amd64", 2, 8),
    gcp("n2-standard-4", "amd64", 4, 16),
    gcp("n2-standard-8", "amd64", 8, 32),
    gcp("n2-standard-16", "amd64", 16, 64),
    gcp("n2d-standard-2", "amd64", 2, 8),
    gcp("n2d-standard-4", "amd64", 4, 16),
    gcp("n2d-standard-8", "amd64", 8, 32),
    gcp("c3-standard-4", "amd64", 4, 16),
    gcp("c3-standard-8", "amd64", 8, 32),
    gcp("t2a-standard-2", "arm64", 2, 8),
    gcp("t2a-standard-4", "arm64", 4, 16),
    gcp("n2-highmem-2", "amd64", 2, 16),
    gcp("n2-highmem-4", "amd64", 4, 32),
    with_gpus(gcp("g2-standard-4", "amd64", 4, 16), 1),
];

impl Shape {
    fn family(&self) -> &'static str {
        let separator = if self.cloud == Cloud::Aws { '.' } else { '-' };
        self.name.split(separator).next().unwrap_or(self.name)
    }

    fn instance_type(&self) -> InstanceType {
        let mut it = InstanceType::new(self.name, self.capacity());
        it.overhead = self.overhead();
        for requirement in self.requirements() {
            it.requirements.add(requirement);
        }
        it.offerings = self.offerings();
        it
    }

    fn capacity(&self) -> ResourceList {
        let capacity = ResourceList::new()
            .with(CPU, self.vcpu * 1000)
            .with(MEMORY, self.memory_gib * GIB)
            .with(PODS, self.max_pods)
            .with(EPHEMERAL_STORAGE, 20 * GIB);
        if self.gpus > 0 {
            capacity.with(NVIDIA_GPU, self.gpus)
        } else {
            capacity
        }
    }

    fn overhead(&self) -> Overhead {
        Overhead {
            kube_reserved: ResourceList::new()
                .with(CPU, kube_reserved_cpu_millis(self.vcpu))
                .with(MEMORY, (11 * self.max_pods + 255) * MIB)
                .with(EPHEMERAL_STORAGE, GIB),
            system_reserved: ResourceList::new(),
            eviction_threshold: ResourceList::new()
                .with(MEMORY, 100 * MIB)
                .with(EPHEMERAL_STORAGE, 2 * GIB),
        }
    }

    /// The labels the shape's cloud gives it.
    fn requirements(&self) -> Vec<Requirement> {
        let family = self.family();
        let size = self.name.rsplit(['.', '-']).next().unwrap_or_default();
        let memory_mib = (self.memory_gib * 1024).to_string();
        let vcpu = self.vcpu.to_string();
        let gpus = self.gpus.to_string();
        let mut requirements = vec![
            Requirement::in_values(labels::ARCH, [self.arch]),
            Requirement::in_values(labels::OS, ["linux"]),
        ];
        match self.cloud {
            Cloud::Aws => {
                let category: String = family
                    .chars()
                    .take_while(char::is_ascii_alphabetic)
                    .collect();
                let generation: String = family
                    .chars()
                    .skip_while(char::is_ascii_alphabetic)
                    .take_while(char::is_ascii_digit)
                    .collect();
                requirements.extend([
                    Requirement::in_values(labels::AWS_INSTANCE_CATEGORY, [category.as_str()]),
                    Requirement::in_values(labels::AWS_INSTANCE_FAMILY, [family]),
                    Requirement::in_values(labels::AWS_INSTANCE_GENERATION, [generation.as_str()]),
                    Requirement::in_values(labels::AWS_INSTANCE_SIZE, [size]),
                    Requirement::in_values(labels::AWS_INSTANCE_CPU, [vcpu.as_str()]),
                    Requirement::in_values(labels::AWS_INSTANCE_MEMORY, [memory_mib.as_str()]),
                    Requirement::in_values(labels::AWS_INSTANCE_GPU_COUNT, [gpus.as_str()]),
                    Requirement::in_values(labels::REGION, ["us-west-2"]),
                ]);
            }
            Cloud::Gcp => requirements.extend([
                Requirement::in_values(labels::GCP_INSTANCE_FAMILY, [family]),
                Requirement::in_values(labels::GCP_INSTANCE_SIZE, [size]),
                Requirement::in_values(labels::GCP_INSTANCE_CPU, [vcpu.as_str()]),
                Requirement::in_values(labels::GCP_INSTANCE_MEMORY, [memory_mib.as_str()]),
                Requirement::in_values(labels::GCP_INSTANCE_GPU_COUNT, [gpus.as_str()]),
                Requirement::in_values(labels::REGION, ["us-central1"]),
            ]),
        }
        requirements
    }

    /// Spot and on-demand in each of the cloud's three zones, at list prices.
    fn offerings(&self) -> Vec<Offering> {
        let zones = if self.cloud == Cloud::Aws {
            AWS_ZONES
        } else {
            GCP_ZONES
        };
        let (on_demand, spot) = match self.cloud {
            Cloud::Aws => (self.on_demand, self.spot),
            Cloud::Gcp => gcp_prices::listed(self.name)
                .map_or((self.on_demand, self.spot), |p| (p.on_demand, p.spot)),
        };
        zones
            .iter()
            .flat_map(|zone| {
                [
                    Offering::new(zone, CapacityType::Spot, spot),
                    Offering::new(zone, CapacityType::OnDemand, on_demand),
                ]
            })
            .collect()
    }
}

/// The simulated catalogue, every offering available.
pub fn catalogue() -> Vec<InstanceType> {
    SHAPES.iter().map(Shape::instance_type).collect()
}

/// The AWS shapes of the catalogue (us-west-2 list prices).
pub fn aws_catalogue() -> Vec<InstanceType> {
    of(Cloud::Aws)
}

/// The Google Cloud shapes of the catalogue (us-central1 list prices).
pub fn gcp_catalogue() -> Vec<InstanceType> {
    of(Cloud::Gcp)
}

fn of(cloud: Cloud) -> Vec<InstanceType> {
    SHAPES
        .iter()
        .filter(|s| s.cloud == cloud)
        .map(Shape::instance_type)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::Requirements;

    #[test]
    fn kube_reserved_cpu_follows_the_eks_formula() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(2), 70);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(8), 90);
        assert_eq!(kube_reserved_cpu_millis(96), 310);
    }

    #[test]
    fn the_catalogue_has_a_few_dozen_priced_types_with_spot_cheaper_than_on_demand() {
        let types = catalogue();
        assert!(types.len() >= 40, "{}", types.len());
        for it in &types {
            let spot = it
                .offerings
                .iter()
                .find(|o| o.capacity_type == CapacityType::Spot)
                .map(|o| o.price);
            let od = it
                .offerings
                .iter()
                .find(|o| o.capacity_type == CapacityType::OnDemand)
                .map(|o| o.price);
            assert!(spot < od, "{}: spot {spot:?} on-demand {od:?}", it.name);
            assert!(it.allocatable().get(CPU) < it.capacity.get(CPU));
        }
    }

    #[test]
    fn labels_describe_each_type() {
        let types = catalogue();
        let m6g = types
            .iter()
            .find(|t| t.name == "m6g.xlarge")
            .map(|t| t.requirements.clone());
        let m6g = m6g.unwrap_or_else(Requirements::new);
        assert!(m6g.allows(labels::ARCH, "arm64"));
        assert!(m6g.allows(labels::AWS_INSTANCE_FAMILY, "m6g"));
        assert!(m6g.allows(labels::AWS_INSTANCE_CATEGORY, "m"));
        assert!(m6g.allows(labels::AWS_INSTANCE_GENERATION, "6"));
        assert!(m6g.allows(labels::AWS_INSTANCE_CPU, "4"));
        let e2 = types
            .iter()
            .find(|t| t.name == "e2-standard-4")
            .map(|t| t.requirements.clone())
            .unwrap_or_default();
        assert!(e2.allows(labels::GCP_INSTANCE_FAMILY, "e2"));
    }
}
