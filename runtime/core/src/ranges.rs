//! The fresh ranges of one job outside the ready queue (held by the deadline, or aside
//! while the job waits). A job has one, unless adoptions split it
//! (`Core::handle_adopt`): see `queue.rs`.

use crate::queue::FreshRange;

/// Takes `index` out of `range` (which holds it): what is left below and above it.
pub(crate) fn split(range: FreshRange, index: u32) -> [Option<FreshRange>; 2] {
    debug_assert!(range.next <= index && index < range.end);
    let below = FreshRange {
        end: index,
        ..range
    };
    let above = FreshRange {
        next: index + 1,
        ..range
    };
    [below, above].map(|part| (part.next < part.end).then_some(part))
}

/// One job's fresh ranges out of the queue (held, or waiting), in index order. One
/// unless adoptions split it, so the first is inline and the usual job allocates
/// nothing for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ranges {
    first: Option<FreshRange>,
    rest: Box<[FreshRange]>,
}

impl Ranges {
    fn from_vec(mut ranges: Vec<FreshRange>) -> Ranges {
        ranges.sort_unstable_by_key(|range| range.next);
        let first = (!ranges.is_empty()).then(|| ranges.remove(0));
        Ranges {
            first,
            rest: ranges.into_boxed_slice(),
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &FreshRange> {
        self.first.iter().chain(self.rest.iter())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub(crate) fn tasks(&self) -> u64 {
        self.iter()
            .map(|range| u64::from(range.end - range.next))
            .sum()
    }

    /// Adds a range of the job (disjoint from those held).
    pub(crate) fn insert(&mut self, range: FreshRange) {
        if self.first.is_none() {
            self.first = Some(range);
        } else {
            let mut ranges: Vec<FreshRange> = std::mem::take(self).into_iter().collect();
            ranges.push(range);
            *self = Ranges::from_vec(ranges);
        }
    }

    /// Takes `index` out of the range holding it, if one does.
    pub(crate) fn take_index(&mut self, index: u32) -> bool {
        if !self
            .iter()
            .any(|range| range.next <= index && index < range.end)
        {
            return false;
        }
        let ranges = std::mem::take(self)
            .into_iter()
            .flat_map(|range| match range.next <= index && index < range.end {
                true => split(range, index),
                false => [Some(range), None],
            })
            .flatten()
            .collect();
        *self = Ranges::from_vec(ranges);
        true
    }
}

impl IntoIterator for Ranges {
    type Item = FreshRange;
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<FreshRange>, std::vec::IntoIter<FreshRange>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest.into_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobId;

    #[test]
    fn ranges_split_and_keep_index_order() {
        let at = |next, end| FreshRange {
            job: JobId(1),
            next,
            end,
        };
        let mut ranges = Ranges::default();
        assert!(!ranges.take_index(0));
        ranges.insert(at(0, 10));
        assert!(ranges.take_index(3));
        assert!(ranges.take_index(7));
        assert!(!ranges.take_index(3));
        assert_eq!(
            ranges.iter().copied().collect::<Vec<_>>(),
            vec![at(0, 3), at(4, 7), at(8, 10)]
        );
        assert_eq!(ranges.tasks(), 8);
        ranges.insert(at(20, 30));
        assert!(ranges.take_index(0) && ranges.take_index(1) && ranges.take_index(2));
        assert_eq!(
            ranges.into_iter().collect::<Vec<_>>(),
            vec![at(4, 7), at(8, 10), at(20, 30)]
        );
    }
}
