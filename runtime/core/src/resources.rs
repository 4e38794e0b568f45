//! Resource vectors: what a task needs, what a node offers, what credit it grants.
//! See [`Resources`] for why a fixed array.

use std::fmt;

/// How many custom kinds a [`Resources`] holds, after cores, GPUs and memory.
pub const MAX_CUSTOM: usize = 5;

/// Number of kinds in a [`Resources`]: cores, GPUs, memory, then the custom ones.
const KINDS: usize = 3 + MAX_CUSTOM;

/// One kind of resource: an index into a [`Resources`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKind(u8);

impl ResourceKind {
    /// CPU cores. Every task needs at least one; every node offers at least one.
    pub const CORES: ResourceKind = ResourceKind(0);
    /// GPUs (whole devices).
    pub const GPUS: ResourceKind = ResourceKind(1);
    /// Memory, in MiB (`u32` MiB is 4 PiB, enough for any node).
    pub const MEMORY_MIB: ResourceKind = ResourceKind(2);

    /// Custom kind number `index`, `None` unless `index < MAX_CUSTOM`. The driver maps
    /// its names (licences, local disk, ...) to these numbers.
    pub const fn custom(index: usize) -> Option<ResourceKind> {
        if index < MAX_CUSTOM {
            Some(ResourceKind(3 + index as u8))
        } else {
            None
        }
    }

    /// Every kind, cores first.
    pub fn all() -> impl Iterator<Item = ResourceKind> {
        (0..KINDS as u8).map(ResourceKind)
    }

    /// The custom number of this kind, `None` for cores, GPUs and memory.
    pub const fn custom_index(self) -> Option<usize> {
        if self.0 >= 3 {
            Some(self.0 as usize - 3)
        } else {
            None
        }
    }

    const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Amounts of every [`ResourceKind`]: cores, GPUs, memory in MiB and [`MAX_CUSTOM`]
/// custom kinds that the driver numbers (their names are the driver's business).
///
/// A fixed array of eight `u32`s rather than a map or a vector: it is `Copy`, never
/// allocates, compares in a few instructions and costs 32 bytes wherever it is kept
/// (a job, a node's capacity and credit, a parked-node key). The ready queue does not
/// keep one per entry; it looks a job's up.
///
/// Every kind is accounted here (capacity, credit, fit); the agents bind them on the
/// nodes (CPUs, GPUs, memory limits: `saker_actors::resources`). The core never sends a
/// node more than its credit in any kind.
///
/// *Fits* means every amount fits: `need.fits_in(&credit)`. The derived order is
/// lexicographic, cores first, so a set of vectors can key a `BTreeMap`; it is not a
/// measure of size beyond cores (two vectors may each fit where the other does not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "rkyv",
    derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize),
    rkyv(derive(Debug, Clone, Copy, PartialEq, Eq), compare(PartialEq))
)]
pub struct Resources([u32; KINDS]);

#[cfg(feature = "rkyv")]
impl ArchivedResources {
    /// The vector, read from a validated archive in place.
    pub fn to_native(&self) -> Resources {
        Resources(self.0.map(|amount| amount.to_native()))
    }
}

impl Resources {
    /// Nothing of anything.
    pub const ZERO: Resources = Resources([0; KINDS]);

    /// `cores` cores and nothing else.
    pub const fn cores(cores: u32) -> Resources {
        Resources::ZERO.with(ResourceKind::CORES, cores)
    }

    /// This vector with `amount` of `kind` (replacing what it had).
    pub const fn with(self, kind: ResourceKind, amount: u32) -> Resources {
        let mut amounts = self.0;
        amounts[kind.index()] = amount;
        Resources(amounts)
    }

    /// The amount of `kind`.
    pub const fn get(&self, kind: ResourceKind) -> u32 {
        self.0[kind.index()]
    }

    /// Cores.
    pub const fn core_count(&self) -> u32 {
        self.get(ResourceKind::CORES)
    }

    /// GPUs.
    pub const fn gpu_count(&self) -> u32 {
        self.get(ResourceKind::GPUS)
    }

    /// Memory in MiB.
    pub const fn memory_mib(&self) -> u32 {
        self.get(ResourceKind::MEMORY_MIB)
    }

    /// Every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&amount| amount == 0)
    }

    /// Every amount of `self` is at most the same amount of `other`.
    pub fn fits_in(&self, other: &Resources) -> bool {
        self.0.iter().zip(&other.0).all(|(need, have)| need <= have)
    }

    /// Amount by amount, capped at `u32::MAX`.
    pub fn saturating_add(self, other: Resources) -> Resources {
        self.zip(other, u32::saturating_add)
    }

    /// Amount by amount, `None` if any amount of `other` is larger (nothing is ever
    /// taken that is not there).
    pub fn checked_sub(self, other: Resources) -> Option<Resources> {
        other.fits_in(&self).then(|| self.zip(other, |a, b| a - b))
    }

    /// Every amount times `factor`, capped at `u32::MAX`.
    pub fn saturating_mul(self, factor: u32) -> Resources {
        Resources(self.0.map(|amount| amount.saturating_mul(factor)))
    }

    /// How many times `self` fits in `pool` (the fewest over the kinds `self` needs);
    /// `u32::MAX` if `self` is zero.
    pub fn times_in(&self, pool: &Resources) -> u32 {
        self.0
            .iter()
            .zip(&pool.0)
            .filter(|(need, _)| **need > 0)
            .map(|(need, have)| have / need)
            .min()
            .unwrap_or(u32::MAX)
    }

    /// The smaller amount of each kind.
    pub fn min_each(self, other: Resources) -> Resources {
        self.zip(other, u32::min)
    }

    fn zip(self, other: Resources, f: impl Fn(u32, u32) -> u32) -> Resources {
        let mut amounts = self.0;
        for (amount, other) in amounts.iter_mut().zip(other.0) {
            *amount = f(*amount, other);
        }
        Resources(amounts)
    }
}

impl fmt::Display for Resources {
    /// Only the non-zero amounts: `4 cores, 1 GPU, 512 MiB, custom#2=3`; `nothing` if
    /// every amount is zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |amount: u32| if amount == 1 { "" } else { "s" };
        let mut first = true;
        for kind in ResourceKind::all() {
            let amount = self.get(kind);
            if amount == 0 {
                continue;
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            match (kind, kind.custom_index()) {
                (_, Some(index)) => write!(f, "custom#{index}={amount}")?,
                (ResourceKind::CORES, _) => write!(f, "{amount} core{}", plural(amount))?,
                (ResourceKind::GPUS, _) => write!(f, "{amount} GPU{}", plural(amount))?,
                _ => write!(f, "{amount} MiB")?, // memory, the only kind left
            }
        }
        if first {
            f.write_str("nothing")?;
        }
        Ok(())
    }
}

/// Sums of [`Resources`] over many nodes, wide enough not to saturate (memory credit
/// over thousands of nodes passes `u32::MAX` MiB).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals([u64; KINDS]);

impl Totals {
    pub(crate) fn add(&mut self, amounts: Resources) {
        for (total, amount) in self.0.iter_mut().zip(amounts.0) {
            *total += u64::from(amount);
        }
    }

    /// Takes back amounts added before (an invariant of every caller).
    pub(crate) fn sub(&mut self, amounts: Resources) {
        for (total, amount) in self.0.iter_mut().zip(amounts.0) {
            *total -= u64::from(amount);
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.0.iter().all(|&total| total == 0)
    }

    /// As a [`Resources`], each amount capped at `u32::MAX`.
    pub(crate) fn saturated(&self) -> Resources {
        Resources(self.0.map(|total| u32::try_from(total).unwrap_or(u32::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_node() -> Resources {
        Resources::cores(8)
            .with(ResourceKind::GPUS, 2)
            .with(ResourceKind::MEMORY_MIB, 4096)
    }

    #[test]
    fn kinds_and_amounts() {
        let custom = ResourceKind::custom(2).expect("2 < MAX_CUSTOM");
        let amounts = gpu_node().with(custom, 3);
        assert_eq!(amounts.core_count(), 8);
        assert_eq!(amounts.gpu_count(), 2);
        assert_eq!(amounts.memory_mib(), 4096);
        assert_eq!(amounts.get(custom), 3);
        assert_eq!(amounts.get(ResourceKind::custom(0).unwrap()), 0);
        assert_eq!(amounts.with(ResourceKind::GPUS, 0).gpu_count(), 0);
        assert_eq!(ResourceKind::custom(MAX_CUSTOM), None);
        assert_eq!(custom.custom_index(), Some(2));
        assert_eq!(ResourceKind::GPUS.custom_index(), None);
        assert_eq!(ResourceKind::all().count(), 3 + MAX_CUSTOM);
        assert_eq!(
            size_of::<Resources>(),
            32,
            "small enough to copy everywhere"
        );
    }

    #[test]
    fn fit_means_every_amount_fits() {
        let node = gpu_node();
        assert!(Resources::cores(8).fits_in(&node));
        assert!(node.fits_in(&node));
        assert!(Resources::ZERO.fits_in(&Resources::ZERO));
        assert!(!Resources::cores(9).fits_in(&node));
        assert!(
            !Resources::cores(1)
                .with(ResourceKind::GPUS, 3)
                .fits_in(&node)
        );
        let licence = ResourceKind::custom(0).unwrap();
        assert!(!Resources::cores(1).with(licence, 1).fits_in(&node));
        // More cores does not mean fits: the order is not a measure of fit.
        let wide = Resources::cores(64);
        assert!(wide > node && !node.fits_in(&wide));
    }

    #[test]
    fn arithmetic_never_wraps() {
        let node = gpu_node();
        assert_eq!(
            node.saturating_add(Resources::cores(u32::MAX)).core_count(),
            u32::MAX
        );
        assert_eq!(node.saturating_add(node).gpu_count(), 4);
        assert_eq!(
            node.checked_sub(Resources::cores(3).with(ResourceKind::GPUS, 2)),
            Some(Resources::cores(5).with(ResourceKind::MEMORY_MIB, 4096))
        );
        assert_eq!(
            node.checked_sub(Resources::cores(1).with(ResourceKind::GPUS, 3)),
            None
        );
        assert_eq!(node.checked_sub(node), Some(Resources::ZERO));
        assert_eq!(node.saturating_mul(2).memory_mib(), 8192);
        assert_eq!(node.saturating_mul(u32::MAX).core_count(), u32::MAX);
        assert!(Resources::ZERO.is_zero() && Resources::default().is_zero());
        assert!(!Resources::ZERO.with(ResourceKind::MEMORY_MIB, 1).is_zero());
    }

    #[test]
    fn times_in_is_bounded_by_the_scarcest_kind() {
        let node = gpu_node();
        assert_eq!(Resources::cores(3).times_in(&node), 2);
        let gpu_task = Resources::cores(1).with(ResourceKind::GPUS, 1);
        assert_eq!(gpu_task.times_in(&node), 2);
        let memory_task = Resources::cores(1).with(ResourceKind::MEMORY_MIB, 1500);
        assert_eq!(memory_task.times_in(&node), 2);
        assert_eq!(Resources::cores(9).times_in(&node), 0);
        assert_eq!(Resources::ZERO.times_in(&node), u32::MAX);
    }

    #[test]
    fn order_is_lexicographic_cores_first() {
        let mut sorted = vec![
            Resources::cores(2),
            Resources::cores(1).with(ResourceKind::GPUS, 4),
            Resources::cores(1),
            Resources::cores(2).with(ResourceKind::MEMORY_MIB, 1),
        ];
        sorted.sort();
        assert_eq!(
            sorted,
            vec![
                Resources::cores(1),
                Resources::cores(1).with(ResourceKind::GPUS, 4),
                Resources::cores(2),
                Resources::cores(2).with(ResourceKind::MEMORY_MIB, 1),
            ]
        );
    }

    #[test]
    fn display_names_only_what_is_there() {
        let custom = ResourceKind::custom(2).unwrap();
        let amounts = Resources::cores(4)
            .with(ResourceKind::GPUS, 1)
            .with(ResourceKind::MEMORY_MIB, 512)
            .with(custom, 3);
        assert_eq!(amounts.to_string(), "4 cores, 1 GPU, 512 MiB, custom#2=3");
        assert_eq!(Resources::cores(1).to_string(), "1 core");
        assert_eq!(
            Resources::ZERO.with(ResourceKind::GPUS, 2).to_string(),
            "2 GPUs"
        );
        assert_eq!(Resources::ZERO.to_string(), "nothing");
    }

    #[test]
    fn totals_do_not_saturate_but_report_saturated() {
        let mut totals = Totals::default();
        let big = Resources::ZERO.with(ResourceKind::MEMORY_MIB, u32::MAX);
        totals.add(big);
        totals.add(big);
        totals.add(Resources::cores(3));
        assert_eq!(totals.saturated().memory_mib(), u32::MAX);
        totals.sub(big);
        totals.sub(big);
        assert_eq!(totals.saturated(), Resources::cores(3));
        totals.sub(Resources::cores(3));
        assert!(totals.is_zero());
    }
}
