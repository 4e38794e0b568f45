//! Durations as users write them (`"90s"`, `"1h30m"`, `"2:00:00"`) and as Saker shows
//! them to people (`850µs`, `12.3ms`, `4.21s`, `3m05s`, `2h07m`): one way to read, one
//! way to write, for every command, table, page and plot.

use std::time::Duration;

use super::SpecError;

/// A duration for a person, in the unit that fits, three digits or so: `850µs`,
/// `12.3ms`, `4.21s`, `3m05s`, `2h07m`.
pub fn format_duration(duration: Duration) -> String {
    format_micros(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
}

/// [`format_duration`] of a count of microseconds.
pub fn format_micros(micros: u64) -> String {
    let seconds = micros / 1_000_000;
    match micros {
        0..1_000 => format!("{micros}µs"),
        1_000..1_000_000 => format!("{:.1}ms", micros as f64 / 1e3),
        1_000_000..60_000_000 => format!("{:.2}s", micros as f64 / 1e6),
        60_000_000..3_600_000_000 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        _ => format!("{}h{:02}m", seconds / 3600, seconds / 60 % 60),
    }
}

/// Parses a duration: a number with units, possibly several (`"500ms"`, `"90s"`,
/// `"5m"`, `"1h30m"`, `"2d"`, `"1.5h"`), or `"H:MM:SS"` / `"D-H:MM:SS"` as Slurm writes
/// them. A bare number is refused: Slurm reads `"90"` as minutes, most tools as
/// seconds, so the unit must be explicit.
pub fn parse_duration(text: &str) -> Result<Duration, SpecError> {
    let trimmed = text.trim();
    let invalid = || SpecError::InvalidDuration {
        text: text.to_owned(),
    };
    if trimmed.is_empty() {
        return Err(invalid());
    }
    if trimmed.contains(':') {
        return parse_clock_duration(trimmed).ok_or_else(invalid);
    }
    if trimmed
        .bytes()
        .all(|byte| byte.is_ascii_digit() || byte == b'.')
    {
        return Err(SpecError::DurationWithoutUnit {
            text: text.to_owned(),
        });
    }
    let mut total = 0f64;
    let mut rest = trimmed;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let unit_end = rest[number_end..]
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .map_or(rest.len(), |end| number_end + end);
        let value: f64 = rest[..number_end].parse().map_err(|_| invalid())?;
        let seconds_per_unit = match rest[number_end..unit_end].trim() {
            "ms" => 0.001,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(invalid()),
        };
        total += value * seconds_per_unit;
        rest = rest[unit_end..].trim_start();
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

fn parse_clock_duration(text: &str) -> Option<Duration> {
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (days.parse::<u64>().ok()?, clock),
        None => (0, text),
    };
    let mut parts = clock.split(':');
    let (hours, minutes, seconds) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || minutes.len() != 2 || seconds.len() != 2 {
        return None;
    }
    let hours: u64 = hours.parse().ok()?;
    let minutes: u64 = minutes.parse().ok()?;
    let seconds: u64 = seconds.parse().ok()?;
    if minutes >= 60 || seconds >= 60 {
        return None;
    }
    let total = days
        .checked_mul(86400)?
        .checked_add(hours.checked_mul(3600)?)?
        .checked_add(minutes * 60 + seconds)?;
    Some(Duration::from_secs(total))
}

/// `time_limit` in JSON: written as seconds (an integer when whole); read from a
/// number of seconds or a [`parse_duration`] string.
pub(crate) mod time_limit_serde {
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            None => serializer.serialize_none(),
            Some(duration) if duration.subsec_nanos() == 0 => {
                serializer.serialize_u64(duration.as_secs())
            }
            Some(duration) => serializer.serialize_f64(duration.as_secs_f64()),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        deserializer.deserialize_any(TimeLimitVisitor)
    }

    struct TimeLimitVisitor;

    impl<'de> Visitor<'de> for TimeLimitVisitor {
        type Value = Option<Duration>;

        fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("seconds as a number, a duration string like \"90s\", or null")
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_u64<E: de::Error>(self, seconds: u64) -> Result<Self::Value, E> {
            Ok(Some(Duration::from_secs(seconds)))
        }

        fn visit_i64<E: de::Error>(self, seconds: i64) -> Result<Self::Value, E> {
            u64::try_from(seconds)
                .map(|seconds| Some(Duration::from_secs(seconds)))
                .map_err(|_| E::custom("time limit must not be negative"))
        }

        fn visit_f64<E: de::Error>(self, seconds: f64) -> Result<Self::Value, E> {
            Duration::try_from_secs_f64(seconds)
                .map(Some)
                .map_err(|_| E::custom("time limit must be a finite, non-negative number"))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            super::parse_duration(text).map(Some).map_err(E::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_in_the_unit_that_fits() {
        assert_eq!(format_micros(850), "850µs");
        assert_eq!(format_micros(12_345), "12.3ms");
        assert_eq!(format_micros(4_210_000), "4.21s");
        assert_eq!(format_micros(185_000_000), "3m05s");
        assert_eq!(format_micros(7_620_000_000), "2h07m");
        assert_eq!(format_duration(Duration::from_millis(12)), "12.0ms");
    }

    #[test]
    fn durations_parse_units_and_clock_forms() {
        let cases = [
            ("500ms", Duration::from_millis(500)),
            ("90s", Duration::from_secs(90)),
            ("5m", Duration::from_secs(300)),
            ("1h30m", Duration::from_secs(5400)),
            ("1h 30m 5s", Duration::from_secs(5405)),
            ("1.5h", Duration::from_secs(5400)),
            ("2d", Duration::from_secs(172_800)),
            ("1:02:03", Duration::from_secs(3723)),
            ("1-00:00:01", Duration::from_secs(86401)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
        assert!(matches!(
            parse_duration("90"),
            Err(SpecError::DurationWithoutUnit { .. })
        ));
        for bad in ["", "h", "5x", "-5s", "1:2:3", "1:60:00", "1e400s"] {
            assert!(
                matches!(parse_duration(bad), Err(SpecError::InvalidDuration { .. })),
                "{bad:?} -> {:?}",
                parse_duration(bad)
            );
        }
    }
}
