//! Durations as Kubernetes writes them: Go's `time.ParseDuration` (`1m30s`, `500ms`, `0`), in
//! ConfigMaps such as Knative's and in flags; flags also take plain seconds.

use std::time::Duration;

/// A Go duration: decimal numbers each with a unit (`h`, `m`, `s`, `ms`, `us`, `ns`); `0`
/// alone needs none. Negative durations are refused.
pub fn parse_go(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A flag's duration: a Go duration, or plain seconds.
pub fn parse_flag(s: &str) -> Result<Duration, String> {
    if let Ok(seconds) = s.trim().parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    parse_go(s).ok_or_else(|| format!("invalid duration {s:?} (e.g. 90s, 1m30s, 500ms)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_and_flags() {
        assert_eq!(parse_go("60s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_go("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go("0"), Some(Duration::ZERO));
        assert_eq!(parse_go("6"), None);
        assert_eq!(parse_go("s"), None);
        assert_eq!(parse_go(""), None);
        assert_eq!(parse_flag("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_flag("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_flag("2x").is_err());
    }
}
