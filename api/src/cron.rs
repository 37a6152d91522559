//! Cron schedules as upstream parses them (robfig/cron's `ParseStandard`): five fields, `@`
//! descriptors, an optional `TZ=`/`CRON_TZ=` prefix, and the classic day rule: when both
//! day-of-month and day-of-week are restricted, a day matching either one fires. One parser
//! for CronJob validation (its messages are robfig's) and for the controller's next run.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("expected exactly 5 fields, found {0}: {1}")]
    Fields(usize, String),
    #[error("{0}")]
    Field(String),
    #[error("provided bad location {0}: unknown time zone {0}")]
    Location(String),
    #[error("unrecognized descriptor: {0}")]
    Descriptor(String),
}

#[derive(Clone, Debug)]
pub struct Schedule {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// `*` or `?` (without a step) in day-of-month / day-of-week.
    dom_star: bool,
    dow_star: bool,
    /// The zone of a `TZ=` prefix, which overrides the caller's.
    pub zone: Option<TimeZone>,
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// Bits of the values a field allows, and whether it was a plain `*` (robfig/cron's
/// `getField`, with its error messages).
fn field(expr: &str, b: &Bounds) -> Result<(u64, bool), ScheduleError> {
    let err = |msg: String| ScheduleError::Field(msg);
    let int = |s: &str| -> Result<u32, ScheduleError> {
        if let Some(i) = b.names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(b.min + i as u32);
        }
        s.parse::<u32>().map_err(|_| {
            err(format!(
                "failed to parse int from {s}: strconv.Atoi: parsing {s:?}: invalid syntax"
            ))
        })
    };
    let (mut bits, mut star) = (0u64, false);
    for part in expr.split(',') {
        let mut pieces = part.split('/');
        let range = pieces.next().unwrap_or_default();
        let step = pieces.next();
        if pieces.next().is_some() {
            return Err(err(format!("too many slashes: {part}")));
        }
        let mut bounds = range.split('-');
        let (lo_s, hi_s) = (bounds.next().unwrap_or_default(), bounds.next());
        if bounds.next().is_some() {
            return Err(err(format!("too many hyphens: {part}")));
        }
        let all = lo_s == "*" || lo_s == "?";
        let (lo, mut hi) = if all {
            (b.min, b.max)
        } else {
            let lo = int(lo_s)?;
            (lo, hi_s.map(int).transpose()?.unwrap_or(lo))
        };
        let mut part_star = all;
        let step = match step {
            None => 1,
            Some(s) => {
                let s = int(s)?;
                // `N/step` means `N-max/step`.
                if !all && hi_s.is_none() {
                    hi = b.max;
                }
                if s > 1 {
                    part_star = false;
                }
                s
            }
        };
        if lo < b.min {
            return Err(err(format!(
                "beginning of range ({lo}) below minimum ({}): {part}",
                b.min
            )));
        }
        if hi > b.max {
            return Err(err(format!(
                "end of range ({hi}) above maximum ({}): {part}",
                b.max
            )));
        }
        if lo > hi {
            return Err(err(format!(
                "beginning of range ({lo}) beyond end of range ({hi}): {part}"
            )));
        }
        if step == 0 {
            return Err(err(format!(
                "step of range should be a positive number: {part}"
            )));
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
        star |= part_star;
    }
    Ok((bits, star))
}

pub fn parse(spec: &str) -> Result<Schedule, ScheduleError> {
    let mut spec = spec.trim();
    let mut zone = None;
    if let Some(rest) = spec
        .strip_prefix("TZ=")
        .or_else(|| spec.strip_prefix("CRON_TZ="))
    {
        let (name, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        zone = Some(TimeZone::get(name).map_err(|_| ScheduleError::Location(name.to_string()))?);
        spec = rest.trim();
    }
    let expanded = match spec {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        s if s.starts_with('@') => return Err(ScheduleError::Descriptor(s.to_string())),
        s => s,
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(ScheduleError::Fields(fields.len(), spec.to_string()));
    }
    let (minute, _) = field(fields[0], &MINUTE)?;
    let (hour, _) = field(fields[1], &HOUR)?;
    let (dom, dom_star) = field(fields[2], &DOM)?;
    let (month, _) = field(fields[3], &MONTH)?;
    let (dow, dow_star) = field(fields[4], &DOW)?;
    Ok(Schedule {
        minute,
        hour,
        dom,
        month,
        dow,
        dom_star,
        dow_star,
        zone,
    })
}

fn has(bits: u64, v: impl Into<i64>) -> bool {
    let v = v.into();
    (0..64).contains(&v) && bits & (1 << v) != 0
}

impl Schedule {
    fn day_matches(&self, d: Date) -> bool {
        let dom = has(self.dom, d.day());
        let dow = has(self.dow, d.weekday().to_sunday_zero_offset());
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first activation strictly after `after`, in the schedule's zone or else `zone`;
    /// `None` if there is none within five years (e.g. `0 0 30 2 *`).
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let zone = self.zone.as_ref().unwrap_or(zone);
        let start = after.to_zoned(zone.clone()).datetime();
        let mut t = DateTime::from_parts(
            start.date(),
            jiff::civil::time(start.hour(), start.minute(), 0, 0),
        )
        .checked_add(1.minute())
        .ok()?;
        let limit = start.year() + 5;
        while t.year() <= limit {
            if !has(self.month, t.month()) {
                t = t
                    .date()
                    .first_of_month()
                    .checked_add(1.month())
                    .ok()?
                    .at(0, 0, 0, 0);
            } else if !self.day_matches(t.date()) {
                t = t.date().tomorrow().ok()?.at(0, 0, 0, 0);
            } else if !has(self.hour, t.hour()) {
                t = t.date().at(t.hour(), 0, 0, 0).checked_add(1.hour()).ok()?;
            } else if !has(self.minute, t.minute()) {
                t = t.checked_add(1.minute()).ok()?;
            } else {
                let at = zone.to_zoned(t).ok()?.timestamp();
                if at > after {
                    return Some(at);
                }
                t = t.checked_add(1.minute()).ok()?;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(spec: &str, after: &str) -> Option<Timestamp> {
        parse(spec).unwrap().next_after(ts(after), &TimeZone::UTC)
    }

    #[test]
    fn standard_fields_and_descriptors() {
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T00:07:30Z"),
            Some(ts("2026-01-01T00:15:00Z"))
        );
        assert_eq!(
            next("* * * * *", "2026-01-01T00:00:00Z"),
            Some(ts("2026-01-01T00:01:00Z"))
        );
        assert_eq!(
            next("@hourly", "2026-01-01T00:00:00Z"),
            Some(ts("2026-01-01T01:00:00Z"))
        );
        assert_eq!(
            next("@daily", "2026-01-01T10:00:00Z"),
            Some(ts("2026-01-02T00:00:00Z"))
        );
        assert_eq!(
            next("@yearly", "2026-03-01T00:00:00Z"),
            Some(ts("2027-01-01T00:00:00Z"))
        );
        assert_eq!(
            next("30 9 * JAN-MAR MON", "2026-04-01T00:00:00Z"),
            Some(ts("2027-01-04T09:30:00Z"))
        );
        assert_eq!(
            next("0 12 1,15 * *", "2026-01-02T00:00:00Z"),
            Some(ts("2026-01-15T12:00:00Z"))
        );
        assert_eq!(
            next("5/20 * * * *", "2026-01-01T00:06:00Z"),
            Some(ts("2026-01-01T00:25:00Z"))
        );
        assert_eq!(next("0 0 30 2 *", "2026-01-01T00:00:00Z"), None);
    }

    #[test]
    fn restricted_day_fields_match_either() {
        // 2026-01-13 is a Tuesday; the 13th or any Friday.
        assert_eq!(
            next("0 0 13 * 5", "2026-01-10T00:00:00Z"),
            Some(ts("2026-01-13T00:00:00Z"))
        );
        assert_eq!(
            next("0 0 13 * 5", "2026-01-13T00:00:00Z"),
            Some(ts("2026-01-16T00:00:00Z"))
        );
        // With `*` in day-of-month, only the weekday counts.
        assert_eq!(
            next("0 0 * * 5", "2026-01-10T00:00:00Z"),
            Some(ts("2026-01-16T00:00:00Z"))
        );
    }

    #[test]
    fn time_zones_come_from_the_prefix() {
        let s = parse("TZ=America/New_York 0 9 * * *").unwrap();
        assert!(s.zone.is_some());
        assert_eq!(
            s.next_after(ts("2026-01-01T00:00:00Z"), &TimeZone::UTC),
            Some(ts("2026-01-01T14:00:00Z"))
        );
        let s = parse("0 9 * * *").unwrap();
        let tokyo = TimeZone::get("Asia/Tokyo").unwrap();
        assert_eq!(
            s.next_after(ts("2026-01-01T01:00:00Z"), &tokyo),
            Some(ts("2026-01-02T00:00:00Z"))
        );
    }

    #[test]
    fn bad_schedules_are_rejected() {
        assert!(matches!(parse("* * * *"), Err(ScheduleError::Fields(4, _))));
        assert_eq!(
            parse("60 * * * *").unwrap_err().to_string(),
            "end of range (60) above maximum (59): 60"
        );
        assert_eq!(
            parse("* * * * 7").unwrap_err().to_string(),
            "end of range (7) above maximum (6): 7"
        );
        assert_eq!(
            parse("x * * * *").unwrap_err().to_string(),
            "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax"
        );
        assert_eq!(
            parse("5-1 * * * *").unwrap_err().to_string(),
            "beginning of range (5) beyond end of range (1): 5-1"
        );
        assert_eq!(
            parse("* * * *").unwrap_err().to_string(),
            "expected exactly 5 fields, found 4: * * * *"
        );
        assert!(matches!(
            parse("@fortnightly"),
            Err(ScheduleError::Descriptor(_))
        ));
        assert!(matches!(
            parse("TZ=Nowhere/City * * * * *"),
            Err(ScheduleError::Location(_))
        ));
        assert!(matches!(parse("*/0 * * * *"), Err(ScheduleError::Field(_))));
    }
}
