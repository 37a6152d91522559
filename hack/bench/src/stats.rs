//! Percentiles of latency samples, and the Prometheus text of the server's `/metrics`.

use std::collections::BTreeMap;
use std::time::Duration;

/// Latency samples of one phase.
#[derive(Clone, Debug, Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn with_capacity(n: usize) -> Self {
        Samples(Vec::with_capacity(n))
    }

    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The nearest-rank percentile `p` (0..=100), in milliseconds; NaN without samples.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
    }

    pub fn p50(&self) -> f64 {
        self.percentile_ms(50.0)
    }

    pub fn p99(&self) -> f64 {
        self.percentile_ms(99.0)
    }

    pub fn max_ms(&self) -> f64 {
        self.percentile_ms(100.0)
    }
}

/// One scrape of `/metrics`: every series (`name{labels}`) and its value.
#[derive(Clone, Debug, Default)]
pub struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut series = BTreeMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            if let Some((name, value)) = line.rsplit_once(' ')
                && let Ok(v) = value.parse::<f64>()
            {
                series.insert(name.to_string(), v);
            }
        }
        Scrape(series)
    }

    fn matches(series: &str, name: &str, labels: &[(&str, &str)]) -> bool {
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        n == name
            && labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
    }

    /// The sum of every series of `name` carrying all of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(s, _)| Self::matches(s, name, labels))
            .map(|(_, v)| v)
            .sum()
    }

    /// Values of label `label` that series of `name` carry.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .0
            .keys()
            .filter(|s| Self::matches(s, name, &[]))
            .filter_map(|s| {
                let needle = format!("{label}=\"");
                let start = s.find(&needle)? + needle.len();
                let end = s[start..].find('"')? + start;
                Some(s[start..end].to_string())
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// `self - before`, series by series.
    pub fn delta(&self, before: &Scrape) -> Scrape {
        Scrape(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0.0)))
                .collect(),
        )
    }

    /// Count, mean and an upper bound of the p99 (the `le` of the bucket holding it) of a
    /// histogram, over the series carrying `labels`.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Option<Histo> {
        let count = self.sum(&format!("{name}_count"), labels);
        if count <= 0.0 {
            return None;
        }
        let sum = self.sum(&format!("{name}_sum"), labels);
        let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        let bucket_name = format!("{name}_bucket");
        for (series, v) in &self.0 {
            if !Self::matches(series, &bucket_name, labels) {
                continue;
            }
            let Some(start) = series.find("le=\"").map(|i| i + 4) else {
                continue;
            };
            let Some(end) = series[start..].find('"').map(|i| i + start) else {
                continue;
            };
            let le: f64 = match &series[start..end] {
                "+Inf" => f64::INFINITY,
                s => s.parse().unwrap_or(f64::INFINITY),
            };
            let e = buckets.entry(le.to_bits()).or_insert((le, 0.0));
            e.1 += v;
        }
        let mut sorted: Vec<(f64, f64)> = buckets.into_values().collect();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let p99_le = sorted
            .iter()
            .find(|(_, c)| *c >= 0.99 * count)
            .map(|(le, _)| *le)
            .unwrap_or(f64::INFINITY);
        Some(Histo {
            count,
            mean: sum / count,
            p99_le,
        })
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Histo {
    pub count: f64,
    pub mean: f64,
    pub p99_le: f64,
}

/// A number with as many decimals as its size deserves.
pub fn num(v: f64) -> String {
    if v.is_nan() {
        "n/a".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}
