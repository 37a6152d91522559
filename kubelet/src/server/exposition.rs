//! Metric families built from a reading taken at scrape time (cAdvisor's, the resource
//! metrics', the node exporter's), as upstream's collectors build const metrics: each family
//! is filled from the reading and encoded by the `prometheus` crate, never written by hand.

use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};

/// One family being filled.
pub struct Family {
    inner: MetricFamily,
}

impl Family {
    fn new(name: &str, help: &str, kind: MetricType) -> Family {
        let mut inner = MetricFamily::default();
        inner.set_name(name.to_string());
        inner.set_help(help.to_string());
        inner.set_field_type(kind);
        Family { inner }
    }

    pub fn gauge(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::GAUGE)
    }

    pub fn counter(name: &str, help: &str) -> Family {
        Family::new(name, help, MetricType::COUNTER)
    }

    /// One sample; labels are sorted by name, as Prometheus's Go client sorts them, and
    /// `timestamp_ms` is when the value was measured (none: the scrape's time).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: f64, timestamp_ms: Option<i64>) {
        let mut pairs: Vec<LabelPair> = labels
            .iter()
            .map(|(k, v)| {
                let mut p = LabelPair::default();
                p.set_name(k.to_string());
                p.set_value(v.to_string());
                p
            })
            .collect();
        pairs.sort_by(|a, b| a.name().cmp(b.name()));
        let mut m = Metric::default();
        m.set_label(pairs);
        if self.inner.get_field_type() == MetricType::COUNTER {
            let mut c = Counter::default();
            c.set_value(value);
            m.set_counter(c);
        } else {
            let mut g = Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
        }
        if let Some(ts) = timestamp_ms {
            m.set_timestamp_ms(ts);
        }
        self.inner.mut_metric().push(m);
    }

    pub fn into_inner(self) -> MetricFamily {
        self.inner
    }
}

/// Families in the order they were added.
#[derive(Default)]
pub struct Families(Vec<MetricFamily>);

impl Families {
    pub fn push(&mut self, family: Family) {
        self.0.push(family.into_inner());
    }

    pub fn extend(&mut self, families: impl IntoIterator<Item = MetricFamily>) {
        self.0.extend(families);
    }

    /// The text exposition (families without samples left out).
    pub fn encode(&self) -> String {
        crate::metrics::encode(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_sorted_timestamps_kept_empty_families_dropped() {
        let mut families = Families::default();
        let mut f = Family::counter("x_total", "An x.");
        f.sample(&[("pod", "p"), ("container", "c")], 1.5, Some(1000));
        families.push(f);
        families.push(Family::gauge("empty", "Nothing."));
        assert_eq!(
            families.encode(),
            "# HELP x_total An x.\n# TYPE x_total counter\nx_total{container=\"c\",pod=\"p\"} 1.5 1000\n"
        );
    }
}
