//! What the benchmarks share with upstream's `fake` package: its catalogue of 400 instance types
//! (`fake.InstanceTypes(400)` priced by `fake.PriceFromResources`) and a deterministic generator,
//! so every run builds the same workload.
//!
//! Type *i* has *i+1* vCPU, *2(i+1)* GiB and *10(i+1)* pods, 100m CPU and 10Mi memory
//! kube-reserved, costs 0.1 per vCPU + 0.1 per 10^9 bytes of memory, and is offered as spot in
//! test-zone-1/2 and on-demand in test-zone-1/2/3, all at that price.

use karpenter_core::apis::CapacityType;
use karpenter_core::resources::ResourceList;
use karpenter_core::scheduling::{InstanceType, Offering, Requirement};

/// How many types the catalogue has.
pub(crate) const TYPES: u64 = 400;

/// The zones upstream's fake offers on-demand capacity in.
pub(crate) const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// CPU and memory kube-reserved on every type.
pub(crate) const RESERVED_CPU_MILLIS: u64 = 100;
pub(crate) const RESERVED_MEMORY_MIB: u64 = 10;

/// SplitMix64: a tiny deterministic generator, so the workload is the same on every run.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

/// The name of the type with `vcpu` vCPUs.
pub(crate) fn type_name(vcpu: u64) -> String {
    format!("fake-it-{}", vcpu - 1)
}

/// `fake.PriceFromResources` of the type with `vcpu` vCPUs.
pub(crate) fn price(vcpu: u64) -> f64 {
    0.1 * vcpu as f64 + 0.1 * ((vcpu * 2) << 30) as f64 / 1e9
}

/// `fake.InstanceTypes(400)` with `fake.PriceFromResources` prices.
pub(crate) fn catalogue() -> Vec<InstanceType> {
    (1..=TYPES)
        .map(|cpu| {
            let capacity = ResourceList::new()
                .with("cpu", cpu * 1000)
                .with("memory", (cpu * 2) << 30)
                .with("pods", cpu * 10);
            let mut it = InstanceType::new(&type_name(cpu), capacity);
            it.overhead.kube_reserved = ResourceList::new()
                .with("cpu", RESERVED_CPU_MILLIS)
                .with("memory", RESERVED_MEMORY_MIB << 20);
            it.requirements
                .add(Requirement::in_values("kubernetes.io/arch", ["amd64"]));
            it.requirements.add(Requirement::in_values(
                "kubernetes.io/os",
                ["darwin", "linux", "windows"],
            ));
            let price = price(cpu);
            it.offerings = vec![
                Offering::new(ZONES[0], CapacityType::Spot, price),
                Offering::new(ZONES[1], CapacityType::Spot, price),
                Offering::new(ZONES[0], CapacityType::OnDemand, price),
                Offering::new(ZONES[1], CapacityType::OnDemand, price),
                Offering::new(ZONES[2], CapacityType::OnDemand, price),
            ];
            it
        })
        .collect()
}
