//! Memory amounts as users write them: `"4G"`, `"512M"`, `"1.5GiB"`, `"4096"`.

use super::SpecError;

/// Parses a memory amount into MiB. Units are binary, as Slurm's `--mem` reads them:
/// `K`, `M`, `G`, `T` (also `KB`/`KiB` and so on); a bare number is MiB, as in Slurm.
/// Amounts round up to a whole MiB; more than `u32::MAX` MiB (4 PiB) is refused.
pub fn parse_memory_mib(text: &str) -> Result<u32, SpecError> {
    let invalid = || SpecError::InvalidMemory {
        text: text.to_owned(),
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number.parse().map_err(|_| invalid())?;
    let kib_per_unit: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "k" | "kb" | "kib" => 1.0,
        "" | "m" | "mb" | "mib" => 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(invalid()),
    };
    let mib = (value * kib_per_unit / 1024.0).ceil();
    if !mib.is_finite() || mib > f64::from(u32::MAX) {
        return Err(invalid());
    }
    Ok(mib as u32)
}

/// `memory_mib` in a JSON spec: MiB as a number, or a string with units.
pub(super) mod memory_serde {
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &u32, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(*value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
        deserializer.deserialize_any(MemoryVisitor)
    }

    struct MemoryVisitor;

    impl Visitor<'_> for MemoryVisitor {
        type Value = u32;

        fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("MiB as a whole number, or a string such as \"4G\" or \"512M\"")
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<u32, E> {
            u32::try_from(value).map_err(|_| E::custom("memory must be at most 4 PiB"))
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<u32, E> {
            u32::try_from(value).map_err(|_| E::custom("memory must be 0 to 4 PiB"))
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<u32, E> {
            super::parse_memory_mib(text).map_err(E::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_read_in_binary_units_and_a_bare_number_is_mib() {
        for (text, mib) in [
            ("4096", 4096),
            ("4G", 4096),
            ("4GB", 4096),
            (" 4 GiB ", 4096),
            ("1.5g", 1536),
            ("512M", 512),
            ("1T", 1 << 20),
            ("1k", 1),
            ("2049K", 3),
            ("0", 0),
        ] {
            assert_eq!(parse_memory_mib(text).unwrap(), mib, "{text}");
        }
        for text in ["", "G", "4X", "-1G", "1e3M", "99999999T"] {
            assert!(parse_memory_mib(text).is_err(), "{text}");
        }
    }
}
