//! Array specs: Slurm-like index sets kept as arithmetic ranges.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::SpecError;

/// Largest number of tasks one array may hold. Counts therefore fit a `u32`.
pub const MAX_ARRAY_TASKS: u64 = u32::MAX as u64;

/// One arithmetic range of array indices: `first, first + step, …, last`, with `last`
/// normalised onto the progression (`0-9:2` is stored as `0-8:2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRange {
    first: u32,
    last: u32,
    step: u32,
}

impl IndexRange {
    pub fn first(&self) -> u32 {
        self.first
    }

    /// The last index of the range (on the progression).
    pub fn last(&self) -> u32 {
        self.last
    }

    pub fn step(&self) -> u32 {
        self.step
    }

    pub fn count(&self) -> u64 {
        u64::from(self.last - self.first) / u64::from(self.step) + 1
    }
}

/// A validated, compact set of array indices in the order given.
///
/// Ranges must be increasing and disjoint (`1,3,5-7` yes, `5-7,3` no), so every index
/// names exactly one task; at most [`MAX_ARRAY_TASKS`] indices. Serialized as its
/// canonical text (`"0-8:2,10"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    ranges: Vec<IndexRange>,
    /// `offsets[i]`: array offset of `ranges[i].first`; binary-searched by `index_at`.
    offsets: Vec<u64>,
    count: u64,
}

impl ArraySpec {
    /// Total number of indices (tasks), at most [`MAX_ARRAY_TASKS`].
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn ranges(&self) -> &[IndexRange] {
        &self.ranges
    }

    /// The array index of the task at `offset` (0-based position in the array), or
    /// `None` past the end. Task `first_task + offset` of a submitted job runs with
    /// `index_at(offset)`.
    pub fn index_at(&self, offset: u64) -> Option<u32> {
        if offset >= self.count {
            return None;
        }
        // `offsets[0] == 0 <= offset`, so the partition point is at least 1.
        let position = self.offsets.partition_point(|&start| start <= offset) - 1;
        let range = self.ranges[position];
        let within = offset - self.offsets[position];
        // Fits: `within < range.count()`, so the result is at most `range.last`.
        Some(range.first + (within * u64::from(range.step)) as u32)
    }

    /// The indices in order, lazily.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges.iter().flat_map(|range| {
            (u64::from(range.first)..=u64::from(range.last))
                .step_by(range.step as usize)
                .map(|index| index as u32)
        })
    }

    /// A single contiguous range `first..=last`.
    pub fn contiguous(first: u32, last: u32) -> Result<Self, SpecError> {
        if first > last {
            return Err(SpecError::ReversedArrayRange {
                item: format!("{first}-{last}"),
            });
        }
        let range = IndexRange {
            first,
            last,
            step: 1,
        };
        if range.count() > MAX_ARRAY_TASKS {
            return Err(SpecError::ArrayTooLarge {
                count: range.count(),
            });
        }
        Ok(Self::from_validated(vec![range]))
    }

    fn from_validated(ranges: Vec<IndexRange>) -> Self {
        let mut offsets = Vec::with_capacity(ranges.len());
        let mut count = 0u64;
        for range in &ranges {
            offsets.push(count);
            count += range.count();
        }
        ArraySpec {
            ranges,
            offsets,
            count,
        }
    }
}

impl FromStr for ArraySpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Self, SpecError> {
        if text.trim().is_empty() {
            return Err(SpecError::EmptyArray);
        }
        if text.contains('%') {
            return Err(SpecError::ArrayThrottleUnsupported {
                text: text.to_owned(),
            });
        }
        let mut ranges: Vec<IndexRange> = Vec::new();
        let mut count = 0u64;
        for item in text.split(',') {
            let item = item.trim();
            let range = parse_range(item)?;
            if let Some(previous) = ranges.last()
                && range.first <= previous.last
            {
                return Err(SpecError::UnorderedArrayRange {
                    item: item.to_owned(),
                });
            }
            count += range.count();
            if count > MAX_ARRAY_TASKS {
                return Err(SpecError::ArrayTooLarge { count });
            }
            ranges.push(range);
        }
        Ok(Self::from_validated(ranges))
    }
}

fn parse_range(item: &str) -> Result<IndexRange, SpecError> {
    let bad = || SpecError::InvalidArrayItem {
        item: item.to_owned(),
    };
    let number = |text: &str| -> Result<u32, SpecError> {
        let text = text.trim();
        if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(bad());
        }
        text.parse::<u32>()
            .map_err(|_| SpecError::ArrayIndexTooLarge {
                item: item.to_owned(),
            })
    };
    if item.is_empty() {
        return Err(bad());
    }
    let (bounds, step) = match item.split_once(':') {
        Some((bounds, step)) => (bounds, number(step)?),
        None => (item, 1),
    };
    if step == 0 {
        return Err(SpecError::ZeroArrayStep {
            item: item.to_owned(),
        });
    }
    let (first, last) = match bounds.split_once('-') {
        Some((first, last)) => (number(first)?, number(last)?),
        None if step == 1 => {
            let index = number(bounds)?;
            (index, index)
        }
        None => return Err(bad()),
    };
    if first > last {
        return Err(SpecError::ReversedArrayRange {
            item: item.to_owned(),
        });
    }
    let last = first + (last - first) / step * step;
    Ok(IndexRange { first, last, step })
}

impl fmt::Display for ArraySpec {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, range) in self.ranges.iter().enumerate() {
            if position > 0 {
                formatter.write_str(",")?;
            }
            match (range.first == range.last, range.step) {
                (true, _) => write!(formatter, "{}", range.first)?,
                (false, 1) => write!(formatter, "{}-{}", range.first, range.last)?,
                (false, step) => write!(formatter, "{}-{}:{step}", range.first, range.last)?,
            }
        }
        Ok(())
    }
}

impl Serialize for ArraySpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ArraySpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(text: &str) -> ArraySpec {
        text.parse()
            .unwrap_or_else(|error| panic!("{text:?}: {error}"))
    }

    #[test]
    fn arrays_parse_slurm_forms() {
        assert_eq!(array("1-5").iter().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert_eq!(array("0-9:2").iter().collect::<Vec<_>>(), [0, 2, 4, 6, 8]);
        assert_eq!(array("1,3,5-7").iter().collect::<Vec<_>>(), [1, 3, 5, 6, 7]);
        assert_eq!(array(" 4 , 8-9 ").iter().collect::<Vec<_>>(), [4, 8, 9]);
        assert_eq!(array("0-9:2").to_string(), "0-8:2");
        assert_eq!(array("1,3,5-7").to_string(), "1,3,5-7");
    }

    #[test]
    fn index_at_agrees_with_iteration() {
        let spec = array("2,5-9:3,10-13,20-40:7,4000000000");
        let listed: Vec<u32> = spec.iter().collect();
        assert_eq!(listed.len() as u64, spec.count());
        for (offset, index) in listed.iter().enumerate() {
            assert_eq!(
                spec.index_at(offset as u64),
                Some(*index),
                "offset {offset}"
            );
        }
        assert_eq!(spec.index_at(spec.count()), None);
    }

    #[test]
    fn huge_arrays_are_counted_without_allocation() {
        let million = array("1-1000000");
        assert_eq!(million.count(), 1_000_000);
        assert_eq!(million.ranges().len(), 1);
        assert_eq!(million.index_at(999_999), Some(1_000_000));
        let full = array("1-4294967295");
        assert_eq!(full.count(), MAX_ARRAY_TASKS);
        assert_eq!(full.index_at(MAX_ARRAY_TASKS - 1), Some(u32::MAX));
        let stepped = array("0-4294967295:1000");
        assert_eq!(stepped.count(), 4_294_968);
        assert_eq!(stepped.index_at(4_294_967), Some(4_294_967_000));
    }

    #[test]
    fn bad_arrays_are_refused() {
        let error = |text: &str| text.parse::<ArraySpec>().unwrap_err();
        assert_eq!(error(""), SpecError::EmptyArray);
        assert!(matches!(error("1-"), SpecError::InvalidArrayItem { .. }));
        assert!(matches!(error("1,,2"), SpecError::InvalidArrayItem { .. }));
        assert!(matches!(error("a-b"), SpecError::InvalidArrayItem { .. }));
        assert!(matches!(error("-3"), SpecError::InvalidArrayItem { .. }));
        assert!(matches!(error("5:2"), SpecError::InvalidArrayItem { .. }));
        assert!(matches!(error("9-1"), SpecError::ReversedArrayRange { .. }));
        assert!(matches!(error("0-9:0"), SpecError::ZeroArrayStep { .. }));
        assert!(matches!(
            error("5-7,3"),
            SpecError::UnorderedArrayRange { .. }
        ));
        assert!(matches!(
            error("1-5,5"),
            SpecError::UnorderedArrayRange { .. }
        ));
        assert!(matches!(
            error("4294967296"),
            SpecError::ArrayIndexTooLarge { .. }
        ));
        assert!(matches!(
            error("1-10%2"),
            SpecError::ArrayThrottleUnsupported { .. }
        ));
        // Every u32 index is one task too many for a u32 count.
        assert_eq!(
            error("0-4294967295"),
            SpecError::ArrayTooLarge { count: 1 << 32 }
        );
        assert_eq!(
            error("0-9,10-4294967295"),
            SpecError::ArrayTooLarge { count: 1 << 32 }
        );
        assert!(matches!(
            error("0-4294967294,4294967294"),
            SpecError::UnorderedArrayRange { .. }
        ));
    }
}
