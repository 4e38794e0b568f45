//! What keeps the pilot itself going, beside its work: its journal compacted, an
//! elastic pilot's allocations, and the walltime deadline.

use saker_core::Time;

use crate::records::Record;

pub mod compaction;
pub mod elastic;
mod walltime;

pub(crate) use walltime::Walltime;

#[derive(Debug, Default)]
pub(crate) struct Upkeep {
    pub compaction: compaction::Compaction,
    /// An elastic pilot's batch allocations (`elastic.rs`).
    pub elastic: Option<elastic::Elastic>,
    pub walltime: Walltime,
}

impl Upkeep {
    /// Keeps an allocation's record (nothing else is the upkeep's own): an elastic
    /// pilot adopts the allocations its journal says it had.
    pub(crate) fn gather(&mut self, record: &Record, now: Time) {
        if let Some(elastic) = self.elastic.as_mut() {
            elastic.restore(record, now);
        }
    }

    /// Every owner has resumed.
    pub(crate) fn resumed(&mut self) {
        if let Some(elastic) = self.elastic.as_mut() {
            elastic.resumed();
        }
    }
}

#[cfg(test)]
mod tests;
