//! The autoscaler's settings, as Knative reads them: defaults from the `config-autoscaler`
//! ConfigMap in `knative-serving` (Knative's keys and defaults), overridden per revision by
//! its `autoscaling.knative.dev/*` annotations.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use minik8s_controllers::util::duration::parse_go as parse_duration;

use crate::serving::Revision;

pub const CONFIG_AUTOSCALER: &str = "config-autoscaler";
const PREFIX: &str = "autoscaling.knative.dev/";

/// The cluster-wide defaults (`config-autoscaler`).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub container_concurrency_target_percentage: f64,
    pub container_concurrency_target_default: f64,
    pub requests_per_second_target_default: f64,
    pub stable_window: Duration,
    pub panic_window_percentage: f64,
    pub panic_threshold_percentage: f64,
    pub max_scale_up_rate: f64,
    pub max_scale_down_rate: f64,
    pub enable_scale_to_zero: bool,
    pub scale_to_zero_grace_period: Duration,
    pub scale_down_delay: Duration,
    pub min_scale: i32,
    pub max_scale: i32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            container_concurrency_target_percentage: 70.0,
            container_concurrency_target_default: 100.0,
            requests_per_second_target_default: 200.0,
            stable_window: Duration::from_secs(60),
            panic_window_percentage: 10.0,
            panic_threshold_percentage: 200.0,
            max_scale_up_rate: 1000.0,
            max_scale_down_rate: 2.0,
            enable_scale_to_zero: true,
            scale_to_zero_grace_period: Duration::from_secs(30),
            scale_down_delay: Duration::ZERO,
            min_scale: 0,
            max_scale: 0,
        }
    }
}

fn set<T>(
    data: &BTreeMap<String, String>,
    key: &str,
    parse: impl Fn(&str) -> Option<T>,
    field: &mut T,
) {
    if let Some(v) = data.get(key) {
        match parse(v) {
            Some(v) => *field = v,
            None => {
                tracing::warn!(key, value = %v, "ignoring an autoscaler setting that does not parse")
            }
        }
    }
}

fn float(s: &str) -> Option<f64> {
    s.trim().parse().ok().filter(|v: &f64| v.is_finite())
}

fn int(s: &str) -> Option<i32> {
    s.trim().parse().ok()
}

impl Config {
    pub fn from_config_map(cm: Option<&ConfigMap>) -> Config {
        let mut c = Config::default();
        let Some(data) = cm.and_then(|cm| cm.data.as_ref()) else {
            return c;
        };
        set(
            data,
            "container-concurrency-target-percentage",
            float,
            &mut c.container_concurrency_target_percentage,
        );
        set(
            data,
            "container-concurrency-target-default",
            float,
            &mut c.container_concurrency_target_default,
        );
        set(
            data,
            "requests-per-second-target-default",
            float,
            &mut c.requests_per_second_target_default,
        );
        set(data, "stable-window", parse_duration, &mut c.stable_window);
        set(
            data,
            "panic-window-percentage",
            float,
            &mut c.panic_window_percentage,
        );
        set(
            data,
            "panic-threshold-percentage",
            float,
            &mut c.panic_threshold_percentage,
        );
        set(data, "max-scale-up-rate", float, &mut c.max_scale_up_rate);
        set(
            data,
            "max-scale-down-rate",
            float,
            &mut c.max_scale_down_rate,
        );
        set(
            data,
            "enable-scale-to-zero",
            |s| s.trim().parse().ok(),
            &mut c.enable_scale_to_zero,
        );
        set(
            data,
            "scale-to-zero-grace-period",
            parse_duration,
            &mut c.scale_to_zero_grace_period,
        );
        set(
            data,
            "scale-down-delay",
            parse_duration,
            &mut c.scale_down_delay,
        );
        set(data, "min-scale", int, &mut c.min_scale);
        set(data, "max-scale", int, &mut c.max_scale);
        c
    }
}

/// Which metric a revision scales on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Metric {
    Concurrency,
    Rps,
}

/// What the decider of one revision works with.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub metric: Metric,
    /// Per pod, of the metric, utilization applied.
    pub target: f64,
    pub stable_window: Duration,
    pub panic_window: Duration,
    /// Desired over ready pods at which the decider panics (2.0 for 200 %).
    pub panic_threshold: f64,
    pub max_scale_up_rate: f64,
    pub max_scale_down_rate: f64,
    pub scale_to_zero: bool,
    pub grace: Duration,
    pub scale_down_delay: Duration,
    pub min_scale: i32,
    /// 0: no bound.
    pub max_scale: i32,
}

impl Params {
    /// The settings for `rev`: its annotations over `config`'s defaults. The target is
    /// `containerConcurrency` when that is set and no target is, as in Knative.
    pub fn for_revision(config: &Config, rev: &Revision) -> Params {
        let ann = rev.annotations();
        let get = |k: &str| ann.get(&format!("{PREFIX}{k}")).map(String::as_str);
        let metric = match get("metric") {
            Some("rps") => Metric::Rps,
            _ => Metric::Concurrency,
        };
        let cc = rev.spec.container_concurrency.filter(|c| *c > 0);
        let target = get("target").and_then(float).unwrap_or(match (metric, cc) {
            (Metric::Rps, _) => config.requests_per_second_target_default,
            (Metric::Concurrency, Some(cc)) => cc as f64,
            (Metric::Concurrency, None) => config.container_concurrency_target_default,
        });
        // Knative applies the target utilization to either metric.
        let utilization = get("target-utilization-percentage")
            .and_then(float)
            .unwrap_or(config.container_concurrency_target_percentage);
        let stable_window = get("window")
            .and_then(parse_duration)
            .unwrap_or(config.stable_window);
        let panic_pct = get("panic-window-percentage")
            .and_then(float)
            .unwrap_or(config.panic_window_percentage);
        let panic_threshold = get("panic-threshold-percentage")
            .and_then(float)
            .unwrap_or(config.panic_threshold_percentage)
            / 100.0;
        Params {
            metric,
            target: (target * utilization / 100.0).max(0.01),
            stable_window,
            panic_window: stable_window
                .mul_f64(panic_pct / 100.0)
                .max(Duration::from_secs(1)),
            panic_threshold,
            max_scale_up_rate: config.max_scale_up_rate,
            max_scale_down_rate: config.max_scale_down_rate,
            scale_to_zero: config.enable_scale_to_zero,
            grace: config.scale_to_zero_grace_period,
            scale_down_delay: get("scale-down-delay")
                .and_then(parse_duration)
                .unwrap_or(config.scale_down_delay),
            min_scale: get("min-scale").and_then(int).unwrap_or(config.min_scale),
            max_scale: get("max-scale").and_then(int).unwrap_or(config.max_scale),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::RevisionSpec;

    fn defaults_rps() -> f64 {
        let mut rev = Revision::new("r", RevisionSpec::default());
        rev.metadata.annotations = Some(BTreeMap::from([(
            format!("{PREFIX}metric"),
            "rps".to_string(),
        )]));
        Params::for_revision(&Config::default(), &rev).target
    }

    #[test]
    fn annotations_over_the_config_map() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": CONFIG_AUTOSCALER, "namespace": "knative-serving"},
            "data": {"stable-window": "6s", "container-concurrency-target-percentage": "100",
                     "scale-to-zero-grace-period": "2s", "max-scale-up-rate": "oops"},
        }))
        .unwrap();
        let config = Config::from_config_map(Some(&cm));
        assert_eq!(config.stable_window, Duration::from_secs(6));
        assert_eq!(config.max_scale_up_rate, 1000.0);
        let mut rev = Revision::new("r", RevisionSpec::default());
        let p = Params::for_revision(&config, &rev);
        assert_eq!((p.metric, p.target), (Metric::Concurrency, 100.0));
        assert_eq!(p.panic_window, Duration::from_secs(1));
        assert_eq!(p.panic_threshold, 2.0);
        rev.spec.container_concurrency = Some(1);
        assert_eq!(Params::for_revision(&config, &rev).target, 1.0);
        rev.metadata.annotations = Some(BTreeMap::from([
            (format!("{PREFIX}target"), "10".to_string()),
            (format!("{PREFIX}metric"), "rps".to_string()),
            (format!("{PREFIX}min-scale"), "2".to_string()),
        ]));
        let p = Params::for_revision(&config, &rev);
        assert_eq!((p.metric, p.target, p.min_scale), (Metric::Rps, 10.0, 2));
        assert_eq!(defaults_rps(), 140.0);
        let defaults = Params::for_revision(
            &Config::default(),
            &Revision::new("r", RevisionSpec::default()),
        );
        assert_eq!(defaults.target, 70.0);
        assert_eq!(defaults.panic_window, Duration::from_secs(6));
    }
}
