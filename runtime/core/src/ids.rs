//! Identifier newtypes and the core's notion of time.
//!
//! Ids are plain integers wrapped so that a task id can never be passed where an
//! attempt id is expected. They print as bare numbers so that error messages read
//! "unknown node 7", not "unknown node NodeId(7)". They are the one id vocabulary of
//! the pilot: with the `rkyv` feature the wire carries them as they are, with `serde`
//! the root's records and the client protocol do (as bare numbers).

// rkyv's resolver types for ids made by the macro below carry the macro's span and
// no Debug; they are never printed.
#![cfg_attr(feature = "rkyv", allow(missing_debug_implementations))]

use std::fmt;
use std::time::Duration;

macro_rules! id_newtype {
    ($(#[$meta:meta])* $name:ident($inner:ty), $archived:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(transparent))]
        #[cfg_attr(
            feature = "rkyv",
            derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize),
            rkyv(derive(Debug, Clone, Copy, PartialEq, Eq, Hash), compare(PartialEq))
        )]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, formatter)
            }
        }

        #[cfg(feature = "rkyv")]
        impl $archived {
            /// The id, read from a validated archive in place.
            pub fn to_native(&self) -> $name {
                $name(self.0.to_native())
            }
        }
    };
}

id_newtype!(
    /// One task: one element of a job. Assigned by the core, strictly increasing from 1;
    /// the tasks of a job are contiguous.
    TaskId(u64),
    ArchivedTaskId
);
id_newtype!(
    /// One submission (a single task or an array). Assigned by the core from 1.
    JobId(u32),
    ArchivedJobId
);
id_newtype!(
    /// One execution of a task. Every (re)dispatch gets a fresh id. Each life of the
    /// root (its *term*, [`CoreConfig::term`](crate::CoreConfig::term)) numbers its own
    /// apart from every other's: term `t` issues `((t - 1) << 40) + n` for `n` = 1, 2,
    /// ... in order. So an id of this term below the next one to be issued that is no
    /// longer live was superseded (its result is a duplicate), one at or above it was
    /// never issued (unknown), and one of an earlier term was an earlier root's
    /// (superseded, unless adopted: [`Core::handle_adopt`](crate::Core::handle_adopt)).
    AttemptId(u64),
    ArchivedAttemptId
);
id_newtype!(
    /// One agent (node). Chosen by the driver; a lost node may join again under the
    /// same id and is then a fresh node.
    NodeId(u32),
    ArchivedNodeId
);

impl AttemptId {
    /// Low bits of an id that number the attempts of one term (`n`); the bits above
    /// name the term. A term has room for 2^40 - 1 attempts, far beyond any pilot.
    pub const TERM_BITS: u32 = 40;
    /// The last term whose ids fit 64 bits; later terms are numbered as this one.
    const LAST_TERM: u32 = 1 << (64 - Self::TERM_BITS);

    /// The first id `term` issues (term 0 counts as 1, as in `CoreConfig`).
    pub fn first_of_term(term: u32) -> AttemptId {
        let term = term.clamp(1, Self::LAST_TERM);
        AttemptId((u64::from(term - 1) << Self::TERM_BITS) + 1)
    }

    /// The term whose numbering holds this id.
    pub fn term(self) -> u32 {
        // At most 2^24: fits.
        (self.0 >> Self::TERM_BITS) as u32 + 1
    }

    /// `n`, its number within its term; 0 for no id any root issues.
    pub(crate) fn number(self) -> u64 {
        self.0 & ((1 << Self::TERM_BITS) - 1)
    }
}

/// One object of the data plane: bytes that live in the nodes' stores and are passed
/// by reference. Made by whoever creates the object (a client's put, an attempt's
/// result), at random, so naming one needs no round trip to the root. Prints, and
/// travels in JSON, as 32 hexadecimal digits.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "rkyv",
    derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize),
    rkyv(derive(Debug, Clone, Copy, PartialEq, Eq, Hash), compare(PartialEq))
)]
pub struct ObjectId(pub u128);

impl ObjectId {
    /// Reads 1 to 32 hexadecimal digits.
    pub fn parse(text: &str) -> Option<ObjectId> {
        if text.is_empty() || text.len() > 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(ObjectId)
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{:032x}", self.0)
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "ObjectId({self})")
    }
}

#[cfg(feature = "rkyv")]
impl ArchivedObjectId {
    /// The id, read from a validated archive in place.
    pub fn to_native(&self) -> ObjectId {
        ObjectId(self.0.to_native())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for ObjectId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for ObjectId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        ObjectId::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid object id {text:?}: 1 to 32 hexadecimal digits expected"
            ))
        })
    }
}

/// A point on the driver's monotonic clock, in microseconds from an origin the driver
/// chooses (pilot start, say). The core never reads a clock; every input carries one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    /// The clock's origin.
    pub const ZERO: Time = Time(0);
    /// The far future; never reached by a real clock.
    pub const MAX: Time = Time(u64::MAX);

    /// `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Time {
        Time(micros)
    }

    /// `millis` milliseconds after the origin (saturating).
    pub const fn from_millis(millis: u64) -> Time {
        Time(millis.saturating_mul(1_000))
    }

    /// `secs` seconds after the origin (saturating).
    pub const fn from_secs(secs: u64) -> Time {
        Time(secs.saturating_mul(1_000_000))
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// This time plus `micros` microseconds, saturating at [`Time::MAX`].
    pub const fn saturating_add_micros(self, micros: u64) -> Time {
        Time(self.0.saturating_add(micros))
    }

    /// This time plus `duration` (microsecond resolution, saturating).
    pub fn saturating_add(self, duration: Duration) -> Time {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.saturating_add_micros(micros)
    }

    /// How long after `earlier` this time is; zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Time) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}us", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_arithmetic_saturates() {
        assert_eq!(Time::from_millis(3), Time(3_000));
        assert_eq!(Time::from_secs(2).as_micros(), 2_000_000);
        assert_eq!(Time::MAX.saturating_add_micros(1), Time::MAX);
        assert_eq!(
            Time(5).saturating_add(Duration::from_millis(1)),
            Time(1_005)
        );
        assert_eq!(Time(5).saturating_duration_since(Time(9)), Duration::ZERO);
        assert_eq!(
            Time(9).saturating_duration_since(Time(5)),
            Duration::from_micros(4)
        );
    }

    #[test]
    fn attempt_ids_are_numbered_by_term() {
        assert_eq!(AttemptId::first_of_term(1), AttemptId(1));
        assert_eq!(AttemptId::first_of_term(0), AttemptId(1), "0 counts as 1");
        assert_eq!(AttemptId::first_of_term(3), AttemptId((2 << 40) + 1));
        for term in [1, 2, 3, 1_000, AttemptId::LAST_TERM] {
            let first = AttemptId::first_of_term(term);
            assert_eq!(first.term(), term);
            assert_eq!(first.number(), 1);
            // Just below it: no id (n = 0), then the last of the term before.
            assert_eq!(AttemptId(first.0 - 1).number(), 0);
            if term > 1 {
                assert_eq!(AttemptId(first.0 - 2).term(), term - 1);
            }
        }
        let last = AttemptId(((1 << 40) - 1) + (4 << 40));
        assert_eq!((last.term(), last.number()), (5, (1 << 40) - 1));
        assert_eq!(AttemptId(0).number(), 0);
        assert_eq!(AttemptId(u64::MAX).term(), AttemptId::LAST_TERM);
        assert_eq!(
            AttemptId::first_of_term(u32::MAX),
            AttemptId::first_of_term(AttemptId::LAST_TERM),
            "terms past the last are numbered as the last"
        );
    }

    #[test]
    fn object_ids_print_and_parse_as_32_hex_digits() {
        let id = ObjectId(0xabc);
        assert_eq!(id.to_string(), format!("{:0>32}", "abc"));
        assert_eq!(ObjectId::parse(&id.to_string()), Some(id));
        assert_eq!(ObjectId::parse("ABC"), Some(id));
        assert_eq!(ObjectId::parse(&"f".repeat(32)), Some(ObjectId(u128::MAX)));
        for bad in ["", "xyz", "-1", "+1", &"0".repeat(33)] {
            assert_eq!(ObjectId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ids_display_as_bare_numbers() {
        assert_eq!(TaskId(12).to_string(), "12");
        assert_eq!(NodeId(3).to_string(), "3");
        assert_eq!(Time(7).to_string(), "7us");
    }
}
