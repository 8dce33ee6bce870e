//! Resource quantities: parsing and printing Kubernetes `Quantity` strings, saturating
//! arithmetic, and [`ResourceList`], the map from resource name to amount that pods request,
//! instance types offer and NodePool limits cap.
//!
//! Amounts are integers in one fixed unit per resource: **milli-cores for `cpu`**, and the base
//! unit (bytes, pods, GPUs) for everything else, rounded up the way Kubernetes rounds
//! (`MilliValue()` for CPU, `Value()` otherwise). Integers keep the scheduler exact and
//! deterministic: no float ever decides whether a pod fits.
//!
//! This module sits at the bottom of the pipeline next to the API types; the scheduler, the cloud
//! catalogue and the controllers all count with it.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use std::fmt;

/// `cpu`, counted in milli-cores.
pub const CPU: &str = "cpu";
/// `memory`, counted in bytes.
pub const MEMORY: &str = "memory";
/// `ephemeral-storage`, counted in bytes.
pub(crate) const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods`: how many pods a node takes; every pod requests one.
pub const PODS: &str = "pods";
/// `nodes`: only meaningful in NodePool limits, where each node counts one.
pub const NODES: &str = "nodes";
/// The NVIDIA GPU extended resource.
pub(crate) const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// A quantity string that is not a valid Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not follow the Kubernetes quantity grammar.
    #[error(
        "invalid quantity {text:?}: expected a number with an optional suffix such as m, Ki, Mi, Gi, k, M, G or e3"
    )]
    Invalid {
        /// The text that failed to parse.
        text: String,
    },
    /// The quantity is negative, which no request, capacity or limit may be.
    #[error("quantity {text:?} for {resource} is negative")]
    Negative {
        /// The resource the quantity was for.
        resource: String,
        /// The text that was negative.
        text: String,
    },
}

/// The unit a resource is counted in: milli-units for CPU, whole units for everything else.
fn milli_scaled(resource: &str) -> bool {
    resource == CPU
}

/// Parses a quantity into thousandths of its unit, rounded up (towards +infinity).
///
/// Exact for every suffix Kubernetes accepts; values beyond the range of `i128` saturate.
pub fn parse_milli(text: &str) -> Result<i128, QuantityError> {
    let invalid = || QuantityError::Invalid {
        text: text.to_owned(),
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(invalid());
    }
    let (negative, rest) = match trimmed.as_bytes()[0] {
        b'-' => (true, &trimmed[1..]),
        b'+' => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let number_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, suffix) = rest.split_at(number_len);
    if number.is_empty() || number == "." || number.bytes().filter(|b| *b == b'.').count() > 1 {
        return Err(invalid());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // mantissa * 10^-frac_digits is the number.
    let mut mantissa: i128 = 0;
    for digit in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .saturating_mul(10)
            .saturating_add(i128::from(digit - b'0'));
    }
    let frac_digits = i32::try_from(frac_part.len()).map_err(|_| invalid())?;
    // value = mantissa * 10^(exp10 - frac_digits) * 2^exp2, scaled by 1000 for milli-units.
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().map_err(|_| invalid())?;
            if !(-60..=60).contains(&exp) {
                return Err(invalid());
            }
            (exp, 0)
        }
        _ => return Err(invalid()),
    };
    let mut value = mantissa.saturating_mul(1_i128 << exp2);
    let shift = exp10 + 3 - frac_digits;
    if shift >= 0 {
        for _ in 0..shift {
            value = value.saturating_mul(10);
        }
    } else {
        let mut divisor: i128 = 1;
        for _ in 0..(-shift) {
            divisor = divisor.saturating_mul(10);
        }
        // Round up: any remainder counts as one more milli-unit.
        value = value / divisor + i128::from(value % divisor != 0);
    }
    Ok(if negative { -value } else { value })
}

/// Parses a quantity for `resource` into its unit (milli-cores for CPU, base units otherwise),
/// rounding up as Kubernetes does. Negative quantities are an error.
pub fn parse(resource: &str, text: &str) -> Result<u64, QuantityError> {
    let milli = parse_milli(text)?;
    if milli < 0 {
        return Err(QuantityError::Negative {
            resource: resource.to_owned(),
            text: text.to_owned(),
        });
    }
    let scaled = if milli_scaled(resource) {
        milli
    } else {
        milli / 1000 + i128::from(milli % 1000 != 0)
    };
    Ok(u64::try_from(scaled).unwrap_or(u64::MAX))
}

/// An amount as a plain number in the resource's base unit (cores for CPU, bytes, count), as
/// Kubernetes' `AsApproximateFloat64` gives it to metrics.
pub(crate) fn approximate(resource: &str, amount: u64) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "a metric value, approximate by design"
    )]
    let value = amount as f64;
    if milli_scaled(resource) {
        value / 1000.0
    } else {
        value
    }
}

/// Formats an amount as a canonical Kubernetes quantity: `1500m` or `2` for CPU, the largest exact
/// binary suffix for byte resources (`4Gi`, `512Mi`), a plain integer otherwise.
pub fn format(resource: &str, amount: u64) -> String {
    if milli_scaled(resource) {
        return if amount.is_multiple_of(1000) {
            (amount / 1000).to_string()
        } else {
            format!("{amount}m")
        };
    }
    if is_bytes(resource) && amount > 0 {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1_u64 << shift;
            if amount.is_multiple_of(unit) {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    amount.to_string()
}

/// Formats an amount for people: CPU as decimal cores (`95.69`), bytes with a binary suffix and
/// at most two decimals (`1.5Gi`), counts as integers.
pub fn human(resource: &str, amount: u64) -> String {
    if milli_scaled(resource) {
        return trim_decimals(amount as f64 / 1000.0, 3);
    }
    if is_bytes(resource) {
        for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
            let unit = 1_u64 << shift;
            if amount >= unit {
                return format!("{}{suffix}", trim_decimals(amount as f64 / unit as f64, 2));
            }
        }
    }
    amount.to_string()
}

fn trim_decimals(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

fn is_bytes(resource: &str) -> bool {
    resource == MEMORY
        || resource == EPHEMERAL_STORAGE
        || resource.starts_with("hugepages-")
        || resource.ends_with("memory")
        || resource.ends_with("storage")
}

/// A resource's name: the well-known ones as constants, any other as its own copy.
///
/// Lists are built for every node and claim in every scheduling round. With owned `String`
/// keys in a `BTreeMap`, comparing keys byte by byte was a tenth of a round at 5,000 nodes in
/// `perf`, next to the names' copies and the tree's allocations (`cargo bench --bench
/// disruption -- --round`: 29 ms a round before this representation, 27 ms after). Almost every
/// name is one of a handful, so those are never copied.
#[derive(Clone)]
enum Name {
    Known(&'static str),
    Other(Box<str>),
}

/// The names that need no copy: the core resources and the common device plugins'.
const KNOWN: &[&str] = &[
    CPU,
    MEMORY,
    EPHEMERAL_STORAGE,
    PODS,
    NODES,
    NVIDIA_GPU,
    "amd.com/gpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "vpc.amazonaws.com/pod-eni",
    "vpc.amazonaws.com/efa",
    "storage",
];

impl Name {
    fn of(name: &str) -> Self {
        match KNOWN.iter().find(|known| **known == name) {
            Some(known) => Self::Known(known),
            None => Self::Other(name.into()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            Self::Known(name) => name,
            Self::Other(name) => name,
        }
    }
}

/// Amounts by resource name, in the units described in the module docs. Absent means zero.
///
/// Ordered by name so that iteration, printing and equality are deterministic. Held as a
/// vector sorted by name, with no zero amounts: lists hold a few resources, which a linear
/// search finds faster than a tree, in one allocation (see [`Name`] for why it matters).
#[derive(Clone, Default)]
pub struct ResourceList(Vec<(Name, u64)>);

impl PartialEq for ResourceList {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for ResourceList {}

impl PartialOrd for ResourceList {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ResourceList {
    /// As a map's: entry by entry, by name then amount.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.iter().cmp(other.iter())
    }
}

impl std::hash::Hash for ResourceList {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for (name, amount) in self.iter() {
            name.hash(state);
            amount.hash(state);
        }
    }
}

impl fmt::Debug for ResourceList {
    /// `ResourceList({"cpu": 1000, "pods": 1})`, as the map it stands for.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Entries<'a>(&'a ResourceList);
        impl fmt::Debug for Entries<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.iter()).finish()
            }
        }
        f.debug_tuple("ResourceList").field(&Entries(self)).finish()
    }
}

impl ResourceList {
    /// An empty list (every resource zero).
    pub fn new() -> Self {
        Self::default()
    }

    /// Where `name` is, or where it would go.
    fn find(&self, name: &str) -> Result<usize, usize> {
        // Lists are short (cpu, memory, pods, ephemeral-storage and maybe a device): a scan in
        // name order stops as early as a binary search would, with fewer branches.
        for (at, (held, _)) in self.0.iter().enumerate() {
            match held.as_str().cmp(name) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Ok(at),
                std::cmp::Ordering::Greater => return Err(at),
            }
        }
        Err(self.0.len())
    }

    /// Parses `(name, quantity)` pairs, e.g. `[("cpu", "2"), ("memory", "4Gi")]`.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, QuantityError> {
        let mut list = Self::new();
        for (name, text) in pairs {
            let amount = parse(name, text)?;
            list.add_amount(name, amount);
        }
        Ok(list)
    }

    /// Reads a Kubernetes `ResourceList` (`BTreeMap<String, Quantity>`).
    pub fn from_quantities(quantities: &BTreeMap<String, Quantity>) -> Result<Self, QuantityError> {
        Self::parse(
            quantities
                .iter()
                .map(|(name, q)| (name.as_str(), q.0.as_str())),
        )
    }

    /// Writes a Kubernetes `ResourceList` in canonical quantity notation.
    pub(crate) fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        self.iter()
            .map(|(name, amount)| (name.to_owned(), Quantity(format(name, amount))))
            .collect()
    }

    /// Sets one resource, builder style.
    #[must_use]
    pub fn with(mut self, name: &str, amount: u64) -> Self {
        self.set(name, amount);
        self
    }

    /// The amount of one resource (zero when absent).
    pub fn get(&self, name: &str) -> u64 {
        self.find(name).map_or(0, |at| self.0[at].1)
    }

    /// Sets one resource; zero removes it.
    pub fn set(&mut self, name: &str, amount: u64) {
        match (self.find(name), amount) {
            (Ok(at), 0) => {
                self.0.remove(at);
            }
            (Ok(at), _) => self.0[at].1 = amount,
            (Err(_), 0) => {}
            (Err(at), _) => self.0.insert(at, (Name::of(name), amount)),
        }
    }

    /// Adds to one resource, saturating.
    pub(crate) fn add_amount(&mut self, name: &str, amount: u64) {
        let total = self.get(name).saturating_add(amount);
        self.set(name, total);
    }

    /// Whether every resource is zero.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The resources with a non-zero amount, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(name, amount)| (name.as_str(), *amount))
    }

    /// The names with a non-zero amount.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(name, _)| name.as_str())
    }

    /// `self + other`, resource by resource, saturating.
    #[must_use]
    pub(crate) fn saturating_add(&self, other: &Self) -> Self {
        let mut sum = self.clone();
        sum.accumulate(other);
        sum
    }

    /// Adds `other` to this list, resource by resource, saturating: [`Self::saturating_add`]
    /// without a new list, for running totals.
    pub(crate) fn accumulate(&mut self, other: &Self) {
        for (name, amount) in other.iter() {
            self.add_amount(name, amount);
        }
    }

    /// `self - other`, resource by resource, never below zero.
    #[must_use]
    pub fn saturating_sub(&self, other: &Self) -> Self {
        let mut out = Self::new();
        for (name, amount) in self.iter() {
            out.set(name, amount.saturating_sub(other.get(name)));
        }
        out
    }

    /// The larger amount of each resource.
    #[must_use]
    pub(crate) fn max_by_resource(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for (name, amount) in other.iter() {
            if amount > out.get(name) {
                out.set(name, amount);
            }
        }
        out
    }

    /// Whether every resource requested here is available in `capacity` (absent there = zero).
    pub(crate) fn fits_in(&self, capacity: &Self) -> bool {
        self.iter()
            .all(|(name, amount)| amount <= capacity.get(name))
    }

    /// The resources requested here that `capacity` lacks: `(name, requested, available)`.
    #[cfg(test)]
    pub(crate) fn shortfalls<'a>(
        &'a self,
        capacity: &'a Self,
    ) -> impl Iterator<Item = (&'a str, u64, u64)> + 'a {
        self.iter().filter_map(|(name, amount)| {
            let have = capacity.get(name);
            (amount > have).then_some((name, amount, have))
        })
    }
}

impl FromIterator<(String, u64)> for ResourceList {
    fn from_iter<I: IntoIterator<Item = (String, u64)>>(iter: I) -> Self {
        let mut list = Self::new();
        for (name, amount) in iter {
            list.add_amount(&name, amount);
        }
        list
    }
}

impl fmt::Display for ResourceList {
    /// `cpu=1500m, memory=4Gi, pods=3` in canonical quantity notation.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, amount) in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{name}={}", format(name, amount))?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_parses_to_millicores_rounding_up() {
        assert_eq!(parse(CPU, "2"), Ok(2000));
        assert_eq!(parse(CPU, "1500m"), Ok(1500));
        assert_eq!(parse(CPU, "0.5"), Ok(500));
        assert_eq!(parse(CPU, "100u"), Ok(1));
        assert_eq!(parse(CPU, "1e3"), Ok(1_000_000));
        assert_eq!(parse(CPU, "+3"), Ok(3000));
    }

    #[test]
    fn memory_parses_binary_and_decimal_suffixes_to_bytes() {
        assert_eq!(parse(MEMORY, "4Gi"), Ok(4 << 30));
        assert_eq!(parse(MEMORY, "100Mi"), Ok(100 << 20));
        assert_eq!(parse(MEMORY, "1G"), Ok(1_000_000_000));
        assert_eq!(parse(MEMORY, "1.5Ki"), Ok(1536));
        assert_eq!(parse(MEMORY, "129e6"), Ok(129_000_000));
        assert_eq!(
            parse(MEMORY, "1m"),
            Ok(1),
            "sub-byte amounts round up to one byte"
        );
        assert_eq!(parse(PODS, "110"), Ok(110));
    }

    #[test]
    fn bad_and_negative_quantities_are_errors() {
        for text in ["", "abc", "1.2.3", "5Xi", ".", "1e", "Gi"] {
            assert!(parse(MEMORY, text).is_err(), "{text:?} should not parse");
        }
        assert!(matches!(
            parse(CPU, "-1"),
            Err(QuantityError::Negative { .. })
        ));
    }

    #[test]
    fn huge_quantities_saturate_instead_of_overflowing() {
        assert_eq!(parse(MEMORY, "10000000Ei"), Ok(u64::MAX));
        assert_eq!(parse(MEMORY, "10000000Gi"), Ok(10_000_000 << 30));
    }

    #[test]
    fn formatting_is_canonical_kubernetes_notation() {
        assert_eq!(format(CPU, 2000), "2");
        assert_eq!(format(CPU, 1500), "1500m");
        assert_eq!(format(MEMORY, 4 << 30), "4Gi");
        assert_eq!(format(MEMORY, 1536), "1536");
        assert_eq!(format(MEMORY, 2048), "2Ki");
        assert_eq!(format(MEMORY, 1000), "1000");
        assert_eq!(format(PODS, 110), "110");
    }

    #[test]
    fn human_formatting_reads_well_in_messages() {
        assert_eq!(human(CPU, 95_690), "95.69");
        assert_eq!(human(CPU, 96_000), "96");
        assert_eq!(human(MEMORY, 3 << 29), "1.5Gi");
        assert_eq!(human(MEMORY, 512 << 20), "512Mi");
        assert_eq!(human(NVIDIA_GPU, 4), "4");
    }

    #[test]
    fn lists_add_subtract_and_compare() -> Result<(), QuantityError> {
        let a = ResourceList::parse([("cpu", "1"), ("memory", "1Gi")])?;
        let b = ResourceList::parse([("cpu", "500m"), ("nvidia.com/gpu", "1")])?;
        let sum = a.saturating_add(&b);
        assert_eq!(sum.to_string(), "cpu=1500m, memory=1Gi, nvidia.com/gpu=1");
        assert_eq!(sum.saturating_sub(&a), b);
        assert!(a.fits_in(&sum));
        assert!(!sum.fits_in(&a));
        let short: Vec<_> = b.shortfalls(&a).collect();
        assert_eq!(short, vec![("nvidia.com/gpu", 1, 0)]);
        assert_eq!(ResourceList::from_quantities(&sum.to_quantities())?, sum);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn formatted_amounts_parse_back_to_themselves(amount in 0_u64..(1 << 50), cpu in any::<bool>()) {
            let resource = if cpu { CPU } else { MEMORY };
            prop_assert_eq!(parse(resource, &format(resource, amount)), Ok(amount));
        }
    }
}
