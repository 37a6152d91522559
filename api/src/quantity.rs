//! Resource quantities (`100m`, `1Gi`, `1.5e3`) as numbers, for validation and arithmetic.

/// The value of a quantity in base units (cores, bytes), or `None` when it does not parse.
pub fn parse(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let base: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(base * factor)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn suffixes() {
        assert_eq!(parse("100m"), Some(0.1));
        assert_eq!(parse("1Gi"), Some(1073741824.0));
        assert_eq!(parse("2"), Some(2.0));
        assert_eq!(parse("1.5k"), Some(1500.0));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("ten"), None);
        assert_eq!(parse("1Zi"), None);
    }
}
