//! Knative's KPA decision for one revision, tick by tick: the average of the metric over
//! the stable window (60 s) and over the panic window (10 % of it) each give a pod count;
//! the stable one rules unless the panic one reaches twice the ready pods, and then the
//! count only grows until a whole stable window passes without panic. Steps are bounded by
//! the scale-up and scale-down rates, held up by `scale-down-delay`, bounded by min and max
//! scale. Zero comes only after a whole stable window without a request, and is acted on
//! only after the grace period on top (the activator holds any request meanwhile).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::config::{Metric, Params};

/// One tick's observation of the revision, summed over every router.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Average requests in flight over the tick.
    pub concurrency: f64,
    /// Requests per second over the tick.
    pub rps: f64,
}

#[derive(Debug)]
pub struct Decider {
    samples: VecDeque<(Instant, Sample)>,
    first: Instant,
    panic_since: Option<Instant>,
    max_panic_pods: i32,
    /// Recent proposals, for `scale-down-delay`.
    recent: VecDeque<(Instant, i32)>,
    /// Since when the proposal has been zero.
    zero_since: Option<Instant>,
}

/// A decision and how it was reached, for the logs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub desired: i32,
    pub stable: f64,
    pub panic: f64,
    pub panicking: bool,
}

fn average(samples: &VecDeque<(Instant, Sample)>, since: Instant, metric: Metric) -> f64 {
    let values: Vec<f64> = samples
        .iter()
        .filter(|(t, _)| *t > since)
        .map(|(_, s)| match metric {
            Metric::Concurrency => s.concurrency,
            Metric::Rps => s.rps,
        })
        .collect();
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

impl Decider {
    pub fn new(now: Instant) -> Decider {
        Decider {
            samples: VecDeque::new(),
            first: now,
            panic_since: None,
            max_panic_pods: 0,
            recent: VecDeque::new(),
            zero_since: None,
        }
    }

    /// Any request seen in the last `window`.
    pub fn active_within(&self, now: Instant, window: Duration) -> bool {
        let since = now.checked_sub(window).unwrap_or(self.first);
        self.samples
            .iter()
            .any(|(t, s)| *t > since && (s.concurrency > 0.0 || s.rps > 0.0))
    }

    /// The pod count wanted now, given `ready` pods and the current `scale`.
    pub fn decide(
        &mut self,
        p: &Params,
        now: Instant,
        sample: Sample,
        ready: i32,
        scale: i32,
    ) -> Decision {
        self.samples.push_back((now, sample));
        let keep = p.stable_window.max(p.panic_window);
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > keep)
        {
            self.samples.pop_front();
        }
        let stable_since = now.checked_sub(p.stable_window).unwrap_or(self.first);
        let panic_since = now.checked_sub(p.panic_window).unwrap_or(self.first);
        let stable = average(&self.samples, stable_since, p.metric);
        let panic = average(&self.samples, panic_since, p.metric);
        let ready_f = ready.max(1) as f64;
        let up = (p.max_scale_up_rate * ready_f).ceil() as i32;
        let down = (ready_f / p.max_scale_down_rate).floor() as i32;
        let bound = |pods: f64| (pods.ceil() as i32).clamp(down.min(up), up);
        let mut stable_pods = bound(stable / p.target);
        let panic_pods = bound(panic / p.target);
        // No traffic at all in the window: zero, whatever the scale-down rate says.
        if stable == 0.0 {
            stable_pods = 0;
        }
        let over = panic_pods as f64 / ready_f >= p.panic_threshold;
        if over {
            self.panic_since = Some(now);
        } else if self
            .panic_since
            .is_some_and(|t| now.saturating_duration_since(t) >= p.stable_window)
        {
            self.panic_since = None;
            self.max_panic_pods = 0;
        }
        let mut desired = stable_pods;
        if self.panic_since.is_some() {
            self.max_panic_pods = self.max_panic_pods.max(panic_pods).max(scale.min(up));
            desired = self.max_panic_pods;
        }
        // A revision watched for less than a window has not shown it is idle.
        let young = now.saturating_duration_since(self.first) < p.stable_window;
        if desired == 0 && young {
            desired = scale;
        }
        self.recent.push_back((now, desired));
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > p.scale_down_delay)
        {
            self.recent.pop_front();
        }
        desired = self.recent.iter().map(|(_, d)| *d).max().unwrap_or(desired);
        desired = desired.max(p.min_scale);
        if p.max_scale > 0 {
            desired = desired.min(p.max_scale);
        }
        if desired == 0 {
            let since = *self.zero_since.get_or_insert(now);
            if !p.scale_to_zero {
                desired = 1;
            } else if now.saturating_duration_since(since) < p.grace {
                // Not yet: keep what runs (at most one pod) until the grace period ends.
                desired = scale.min(1);
            }
        } else {
            self.zero_since = None;
        }
        Decision {
            desired,
            stable,
            panic,
            panicking: self.panic_since.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscaler::config::Config;
    use crate::serving::{Revision, RevisionSpec};

    fn params(window: u64, grace: u64) -> Params {
        let config = Config {
            stable_window: Duration::from_secs(window),
            scale_to_zero_grace_period: Duration::from_secs(grace),
            container_concurrency_target_percentage: 100.0,
            container_concurrency_target_default: 10.0,
            ..Config::default()
        };
        Params::for_revision(&config, &Revision::new("r", RevisionSpec::default()))
    }

    fn conc(c: f64) -> Sample {
        Sample {
            concurrency: c,
            rps: 0.0,
        }
    }

    #[test]
    fn stable_target_then_zero_after_window_and_grace() {
        let p = params(10, 3);
        let t0 = Instant::now();
        let mut d = Decider::new(t0);
        let mut scale = 1;
        // 25 in flight against a target of 10: three pods.
        for i in 1..=10 {
            scale = d
                .decide(&p, t0 + Duration::from_secs(i), conc(25.0), scale, scale)
                .desired;
        }
        assert_eq!(scale, 3);
        // Traffic stops: the window average falls, never more than halving per tick.
        let mut zero_at = None;
        for i in 11..=40 {
            let now = t0 + Duration::from_secs(i);
            let next = d.decide(&p, now, conc(0.0), scale, scale).desired;
            assert!(next >= scale / 2, "{scale} -> {next}");
            scale = next;
            if scale == 0 && zero_at.is_none() {
                zero_at = Some(i);
            }
        }
        // The last request was at t=10: zero at 10 + window (10) + grace (3).
        assert_eq!(zero_at, Some(23));
    }

    #[test]
    fn panic_on_a_burst_and_no_scale_down_while_panicking() {
        let p = params(60, 30);
        let t0 = Instant::now();
        let mut d = Decider::new(t0);
        let mut scale = 1;
        for i in 1..=60 {
            scale = d
                .decide(&p, t0 + Duration::from_secs(i), conc(5.0), scale, scale)
                .desired;
        }
        assert_eq!(scale, 1);
        // A step to 200 in flight: the 6 s panic window sees it within a tick.
        let burst = d.decide(&p, t0 + Duration::from_secs(61), conc(200.0), 1, 1);
        assert!(burst.panicking);
        assert!(burst.desired >= 4, "{burst:?}");
        scale = burst.desired;
        for i in 62..=70 {
            scale = d
                .decide(&p, t0 + Duration::from_secs(i), conc(200.0), scale, scale)
                .desired;
        }
        assert_eq!(scale, 20);
        // Load drops; panic holds the count for a whole stable window.
        let held = d.decide(&p, t0 + Duration::from_secs(71), conc(10.0), scale, scale);
        assert!(held.panicking && held.desired == 20, "{held:?}");
    }

    #[test]
    fn young_revisions_keep_their_initial_scale_and_bounds_apply() {
        let mut p = params(60, 30);
        let t0 = Instant::now();
        let mut d = Decider::new(t0);
        assert_eq!(
            d.decide(&p, t0 + Duration::from_secs(1), conc(0.0), 1, 1)
                .desired,
            1
        );
        p.min_scale = 2;
        assert_eq!(
            d.decide(&p, t0 + Duration::from_secs(2), conc(0.0), 1, 1)
                .desired,
            2
        );
        p.min_scale = 0;
        p.max_scale = 3;
        assert_eq!(
            d.decide(&p, t0 + Duration::from_secs(3), conc(100.0), 1, 1)
                .desired,
            3
        );
        p.scale_to_zero = false;
        let mut idle = Decider::new(t0);
        for i in 1..=200 {
            let got = idle
                .decide(&p, t0 + Duration::from_secs(i), conc(0.0), 1, 1)
                .desired;
            assert_eq!(got, 1);
        }
    }
}
