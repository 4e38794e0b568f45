//! Points in time as records and the protocol carry them: microseconds since the Unix
//! epoch, written as RFC 3339 UTC text.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time with microsecond precision; RFC 3339 UTC text in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

const MICROS_PER_SECOND: u64 = 1_000_000;
const SECONDS_PER_DAY: u64 = 86_400;

impl Timestamp {
    pub fn from_unix_micros(micros: u64) -> Self {
        Timestamp(micros)
    }

    pub fn unix_micros(self) -> u64 {
        self.0
    }

    pub fn now() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.0 / MICROS_PER_SECOND;
        let micros = self.0 % MICROS_PER_SECOND;
        let days = seconds / SECONDS_PER_DAY;
        let second_of_day = seconds % SECONDS_PER_DAY;
        let (year, month, day) = civil_from_days(days);
        write!(
            formatter,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            second_of_day / 3600,
            second_of_day / 60 % 60,
            second_of_day % 60
        )
    }
}

/// Year, month, day of the `days`-th day after 1970-01-01 (Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Days from 1970-01-01 to the given date (Hinnant's algorithm); dates from 1970 on.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year / 400;
    let year_of_era = year % 400;
    let month_index = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    (era * 146_097 + day_of_era).checked_sub(719_468)
}

/// Parses what [`Timestamp`] writes: `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (or `+00:00`),
/// from 1970 on; fractions beyond microseconds are truncated.
impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(text: &str) -> Result<Self, TimestampError> {
        let invalid = || TimestampError {
            text: text.to_owned(),
        };
        let body = text
            .strip_suffix('Z')
            .or_else(|| text.strip_suffix("+00:00"))
            .ok_or_else(invalid)?;
        let (date, time) = body.split_once(['T', 't', ' ']).ok_or_else(invalid)?;
        let field = |part: &str, digits: usize| -> Result<u64, TimestampError> {
            if part.len() != digits || !part.bytes().all(|byte| byte.is_ascii_digit()) {
                return Err(invalid());
            }
            part.parse().map_err(|_| invalid())
        };
        let mut date_parts = date.split('-');
        let (Some(year), Some(month), Some(day), None) = (
            date_parts.next(),
            date_parts.next(),
            date_parts.next(),
            date_parts.next(),
        ) else {
            return Err(invalid());
        };
        let (year, month, day) = (field(year, 4)?, field(month, 2)?, field(day, 2)?);
        let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
        let mut clock_parts = clock.split(':');
        // Seconds may be left out (`2026-12-01T03:00Z`), and then no fraction either.
        let (Some(hour), Some(minute), second, None) = (
            clock_parts.next(),
            clock_parts.next(),
            clock_parts.next(),
            clock_parts.next(),
        ) else {
            return Err(invalid());
        };
        let second = match second {
            Some(second) => second,
            None if fraction.is_empty() => "00",
            None => return Err(invalid()),
        };
        let (hour, minute, second) = (field(hour, 2)?, field(minute, 2)?, field(second, 2)?);
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
            return Err(invalid());
        }
        if second > 60 || !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(invalid());
        }
        let mut micros = 0u64;
        for position in 0..6 {
            let digit = fraction
                .as_bytes()
                .get(position)
                .map_or(0, |byte| byte - b'0');
            micros = micros * 10 + u64::from(digit);
        }
        let days = days_from_civil(year, month, day).ok_or_else(invalid)?;
        let seconds = days * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second;
        seconds
            .checked_mul(MICROS_PER_SECOND)
            .and_then(|total| total.checked_add(micros))
            .map(Timestamp)
            .ok_or_else(invalid)
    }
}

/// A timestamp string that is not RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid timestamp {text:?}: expected RFC 3339 UTC like 2025-01-31T12:00:00.000000Z")]
pub struct TimestampError {
    pub text: String,
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TimestampVisitor)
    }
}

/// Parses from the borrowed or transient text: no allocation per timestamp (resume
/// reads three for each of a million results).
struct TimestampVisitor;

impl serde::de::Visitor<'_> for TimestampVisitor {
    type Value = Timestamp;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an RFC 3339 timestamp")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Timestamp, E> {
        text.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_day_of_four_centuries_round_trips() {
        for days in (0..146_097 * 2).step_by(7) {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), Some(days));
        }
    }
}
