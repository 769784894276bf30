//! Values with units as Postgres settings and weir's options spell them
//! (`'500ms'`, `'2 GB'`), shared by SET, ALTER SYSTEM and the command line.

/// Postgres time settings: a bare number is milliseconds; units ms, s,
/// min, h, d may follow.
pub fn parse_milliseconds(value: &str) -> Option<u64> {
    let (number, unit) = number_and_unit(value)?;
    let factor = match unit.as_str() {
        "" | "ms" => 1,
        "s" => 1_000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// A memory size as Postgres writes one: a number with `B`, `kB`, `MB`,
/// `GB` or `TB` (powers of 1024; `KiB`-style spellings too), a plain
/// number being MB. None when it is not one, or 0.
pub fn parse_memory_size(text: &str) -> Option<u64> {
    let (number, unit) = number_and_unit(text)?;
    let shift = match unit.as_str() {
        "b" | "bytes" => 0,
        "kb" | "kib" | "k" => 10,
        "" | "mb" | "mib" | "m" => 20,
        "gb" | "gib" | "g" => 30,
        "tb" | "tib" | "t" => 40,
        _ => return None,
    };
    number.checked_mul(1 << shift).filter(|bytes| *bytes > 0)
}

/// `"512 MB"` as (512, "mb"): the leading digits and the unit after them,
/// lower-cased.
fn number_and_unit(text: &str) -> Option<(u64, String)> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    Some((number.parse().ok()?, unit.trim().to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes_read_like_postgres_settings() {
        assert_eq!(parse_memory_size("512MB"), Some(512 << 20));
        assert_eq!(parse_memory_size("2 GB"), Some(2 << 30));
        assert_eq!(parse_memory_size("64kB"), Some(64 << 10));
        assert_eq!(parse_memory_size("100"), Some(100 << 20));
        assert_eq!(parse_memory_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_memory_size("0"), None);
        assert_eq!(parse_memory_size("lots"), None);
        assert_eq!(parse_memory_size("-1GB"), None);
        assert_eq!(parse_memory_size("99999999999TB"), None);
    }

    #[test]
    fn durations_read_like_postgres_settings() {
        assert_eq!(parse_milliseconds("250"), Some(250));
        assert_eq!(parse_milliseconds("2s"), Some(2_000));
        assert_eq!(parse_milliseconds("1 min"), Some(60_000));
        assert_eq!(parse_milliseconds("1 week"), None);
        assert_eq!(parse_milliseconds("99999999999999999999d"), None);
    }
}
