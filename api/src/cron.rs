//! Cron schedules as CronJobs write them (five fields, names, steps, `@hourly`-style
//! descriptors), parsed for validation and for finding the next run.

use jiff::civil::DateTime;

/// A parsed schedule: the allowed values of each field as bit sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// Either day field was restricted: then a day matches if either field does (cron's rule).
    dom_star: bool,
    dow_star: bool,
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn field(
    spec: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_base: u32,
) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let star = spec == "*" || spec == "?";
    for part in spec.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .map_err(|_| format!("failed to parse int from {s}: invalid syntax"))?,
            ),
            None => (part, 1),
        };
        if step == 0 {
            return Err(format!("step of range should be a positive number: {part}"));
        }
        let value = |s: &str| -> Result<u32, String> {
            if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
                return Ok(i as u32 + name_base);
            }
            s.parse::<u32>()
                .map_err(|_| format!("failed to parse int from {s}: invalid syntax"))
        };
        let (lo, hi) = if range == "*" || range == "?" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min {
            return Err(format!(
                "beginning of range ({lo}) below minimum ({min}): {part}"
            ));
        }
        if hi > max {
            return Err(format!("end of range ({hi}) above maximum ({max}): {part}"));
        }
        if lo > hi {
            return Err(format!(
                "beginning of range ({lo}) beyond end of range ({hi}): {part}"
            ));
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

impl Schedule {
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let spec = spec.trim();
        let expanded = match spec {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => return Err(format!("unrecognized descriptor: {s}")),
            s => s,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected exactly 5 fields, found {}: {spec}",
                fields.len()
            ));
        }
        let (minutes, _) = field(fields[0], 0, 59, &[], 0)?;
        let (hours, _) = field(fields[1], 0, 23, &[], 0)?;
        let (days_of_month, dom_star) = field(fields[2], 1, 31, &[], 0)?;
        let (months, _) = field(fields[3], 1, 12, MONTHS, 1)?;
        let (mut days_of_week, dow_star) = field(fields[4], 0, 7, DAYS, 0)?;
        if days_of_week & (1 << 7) != 0 {
            days_of_week |= 1;
        }
        Ok(Schedule {
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
            dom_star,
            dow_star,
        })
    }

    fn day_matches(&self, t: DateTime) -> bool {
        let dom = self.days_of_month & (1 << t.day()) != 0;
        let dow = self.days_of_week & (1 << t.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first minute strictly after `after` that the schedule fires at, in the same civil time.
    pub fn next_after(&self, after: DateTime) -> Option<DateTime> {
        let mut t = after.checked_add(jiff::Span::new().minutes(1)).ok()?;
        t = t.with().second(0).subsec_nanosecond(0).build().ok()?;
        // Five years covers every satisfiable schedule (29 February included).
        for _ in 0..(5 * 366 * 24 * 60) {
            if self.months & (1 << t.month()) == 0 {
                t = t
                    .first_of_month()
                    .checked_add(jiff::Span::new().months(1))
                    .ok()?
                    .with()
                    .hour(0)
                    .minute(0)
                    .build()
                    .ok()?;
                continue;
            }
            if !self.day_matches(t) {
                t = t.tomorrow().ok()?.with().hour(0).minute(0).build().ok()?;
                continue;
            }
            if self.hours & (1 << t.hour()) == 0 {
                t = t
                    .with()
                    .minute(0)
                    .build()
                    .ok()?
                    .checked_add(jiff::Span::new().hours(1))
                    .ok()?;
                continue;
            }
            if self.minutes & (1 << t.minute()) == 0 {
                t = t.checked_add(jiff::Span::new().minutes(1)).ok()?;
                continue;
            }
            return Some(t);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    #[test]
    fn parses_and_steps() {
        let s = Schedule::parse("*/15 9-17 * * mon-fri").unwrap();
        let t = date(2026, 11, 21).at(10, 7, 0, 0); // a Saturday
        assert_eq!(s.next_after(t), Some(date(2026, 11, 23).at(9, 0, 0, 0)));
        let h = Schedule::parse("@hourly").unwrap();
        assert_eq!(
            h.next_after(date(2026, 1, 1).at(0, 0, 0, 0)),
            Some(date(2026, 1, 1).at(1, 0, 0, 0))
        );
        assert!(Schedule::parse("61 * * * *").is_err());
        assert!(Schedule::parse("* * *").is_err());
        assert!(Schedule::parse("@sometimes").is_err());
        assert!(
            Schedule::parse("0 0 29 2 *")
                .unwrap()
                .next_after(date(2026, 3, 1).at(0, 0, 0, 0))
                .is_some()
        );
    }
}
