//! Upstream's BoundedFrequencyRunner: a burst of changes becomes one sync, syncs are rate
//! limited to one per `min` (with a burst of two, so the periodic sync does not hold back the
//! change after it), and one runs every `max` even when nothing changed.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use super::{Error, Periods, ProxyConfig, ProxyState};
use crate::cache::Caches;
use crate::metrics::{ProxyMetrics, SyncType};

/// kube-proxy's burstSyncs: how many syncs may run back to back before `periods.min` applies.
pub const BURST_SYNCS: f64 = 2.0;

/// The runner's rate limit, upstream's token bucket: one token per `min`, at most
/// [`BURST_SYNCS`] saved. A sync that follows a quiet spell (or the periodic one) runs at once
/// instead of waiting out `min` after the previous sync.
#[derive(Debug)]
pub struct Tokens {
    available: f64,
    at: Instant,
    min: Duration,
}

impl Tokens {
    /// A full bucket at `now`.
    pub fn new(min: Duration, now: Instant) -> Tokens {
        Tokens {
            available: BURST_SYNCS,
            at: now,
            min,
        }
    }

    fn refill(&mut self, now: Instant) {
        if self.min.is_zero() {
            self.available = BURST_SYNCS;
        } else {
            let earned =
                now.saturating_duration_since(self.at).as_secs_f64() / self.min.as_secs_f64();
            self.available = (self.available + earned).min(BURST_SYNCS);
        }
        self.at = now;
    }

    /// When the next sync may start, seen at `now`.
    pub fn ready_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.available >= 1.0 {
            now
        } else {
            now + self.min.mul_f64(1.0 - self.available)
        }
    }

    /// Takes the token of a sync starting at `now` (at or after [`Tokens::ready_at`]).
    pub fn take(&mut self, now: Instant) {
        self.refill(now);
        self.available = (self.available - 1.0).max(0.0);
    }
}

/// Calls `sync` once at start, then after every `trigger` or when `periods.max` passed since
/// the previous sync, rate-limited by [`Tokens`], until `shutdown`.
pub async fn bounded_frequency<F, Fut>(
    periods: Periods,
    trigger: Arc<Notify>,
    shutdown: impl Future<Output = ()>,
    sync: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    bounded_frequency_queued(periods, trigger, shutdown, || {}, sync).await
}

/// [`bounded_frequency`], calling `queued` whenever a `trigger` queues a sync.
pub async fn bounded_frequency_queued<Q, F, Fut>(
    periods: Periods,
    trigger: Arc<Notify>,
    shutdown: impl Future<Output = ()>,
    queued: Q,
    mut sync: F,
) where
    Q: Fn(),
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tokens = Tokens::new(periods.min, Instant::now());
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(tokens.ready_at(Instant::now())) => {}
            _ = &mut shutdown => return,
        }
        tokens.take(Instant::now());
        sync().await;
        let last = Instant::now();
        tokio::select! {
            _ = trigger.notified() => queued(),
            _ = tokio::time::sleep_until(last + periods.max) => {}
            _ = &mut shutdown => return,
        }
    }
}

/// What the caches hold at the start of a sync.
pub struct Snapshot {
    pub config: ProxyConfig,
    pub services: Vec<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
}

impl Snapshot {
    /// A copy of every object, for the iptables mode's full render.
    pub fn to_state(&self) -> ProxyState {
        ProxyState {
            config: self.config.clone(),
            services: self.services.iter().map(|s| (**s).clone()).collect(),
            slices: self.slices.iter().map(|s| (**s).clone()).collect(),
        }
    }
}

/// What a sync of either mode did, as the duration families count it: a sync that changed
/// nothing is a partial one, as upstream's.
pub trait Synced: std::fmt::Debug + Send + 'static {
    fn sync_type(&self) -> SyncType;
}

impl Synced for super::SyncKind {
    fn sync_type(&self) -> SyncType {
        match self {
            super::SyncKind::Full => SyncType::Full,
            _ => SyncType::Partial,
        }
    }
}

impl Synced for crate::nftables::SyncKind {
    fn sync_type(&self) -> SyncType {
        match self {
            crate::nftables::SyncKind::Full => SyncType::Full,
            _ => SyncType::Partial,
        }
    }
}

/// `endpoints.kubernetes.io/last-change-trigger-time`: when the change an EndpointSlice
/// carries happened (the endpoints controller's stamp).
const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The EndpointSlices a sync put in place for the first time, to time network programming
/// as upstream does: from each changed slice's trigger time to the end of the sync that
/// applied it, counting only changes made after the proxier started.
#[derive(Debug)]
pub struct ProgrammingTracker {
    started: jiff::Timestamp,
    /// The resourceVersion of each slice (`namespace/name`) the last successful sync had.
    applied: HashMap<String, String>,
}

impl ProgrammingTracker {
    pub fn new(started: jiff::Timestamp) -> ProgrammingTracker {
        ProgrammingTracker {
            started,
            applied: HashMap::new(),
        }
    }

    /// The slices of `slices` that changed since the last successful sync: their keys and
    /// versions, and the trigger times among them.
    pub fn changes(
        &self,
        slices: &[Arc<EndpointSlice>],
    ) -> (Vec<(String, String)>, Vec<jiff::Timestamp>) {
        let mut changed = Vec::new();
        let mut triggers = Vec::new();
        for s in slices {
            let key = format!(
                "{}/{}",
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default()
            );
            let version = s.metadata.resource_version.clone().unwrap_or_default();
            if self.applied.get(&key) == Some(&version) {
                continue;
            }
            let trigger = s
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LAST_CHANGE_TRIGGER_TIME))
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .filter(|t| *t >= self.started);
            triggers.extend(trigger);
            changed.push((key, version));
        }
        (changed, triggers)
    }

    /// A sync applied `changed`; slices that are gone are forgotten.
    pub fn applied(&mut self, changed: Vec<(String, String)>, slices: &[Arc<EndpointSlice>]) {
        self.applied.extend(changed);
        let present: std::collections::HashSet<String> = slices
            .iter()
            .map(|s| {
                format!(
                    "{}/{}",
                    s.metadata.namespace.as_deref().unwrap_or_default(),
                    s.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        self.applied.retain(|k, _| present.contains(k));
    }
}

/// The proxier loop of both modes: waits for the caches to fill, then calls `sync` with the
/// cached objects (shared, not copied: an unchanged object is the same `Arc` as before)
/// whenever the caches change (rate-limited) and at least every `periods.max`, until
/// `shutdown`. Syncs run off the async runtime: rendering 10,000 Services takes long
/// enough to stall other tasks. Each sync is timed into `metrics`, as kube-proxy's
/// `syncProxyRules` is.
pub async fn run_proxier<K, S>(
    caches: Caches,
    config: ProxyConfig,
    periods: Periods,
    mode: &'static str,
    metrics: Arc<ProxyMetrics>,
    shutdown: impl Future<Output = ()>,
    sync: S,
) -> Result<(), Error>
where
    K: Synced,
    S: Fn(Snapshot) -> Result<K, Error> + Send + Sync + 'static,
{
    let tracker = Arc::new(Mutex::new(ProgrammingTracker::new(jiff::Timestamp::now())));
    // The first sync is pending from the start: a proxier that never syncs is unhealthy.
    metrics.queued();
    tokio::select! {
        r = caches.ready() => r?,
        _ = tokio::time::sleep(Duration::from_secs(300)) => return Err(crate::cache::NotReady.into()),
    }
    let trigger = caches.changed.clone();
    let sync = Arc::new(sync);
    let queued = {
        let metrics = metrics.clone();
        move || metrics.queued()
    };
    bounded_frequency_queued(periods, trigger, shutdown, queued, || {
        let state = Snapshot {
            config: config.clone(),
            services: caches.services.state(),
            slices: caches.slices.state(),
        };
        let sync = sync.clone();
        let metrics = metrics.clone();
        let tracker = tracker.clone();
        let span = tracing::info_span!("sync_proxy_rules", services = state.services.len());
        async move {
            let slices = state.slices.clone();
            let (changed, triggers) = tracker.lock().expect("tracker").changes(&slices);
            let started = std::time::Instant::now();
            let result = tokio::task::spawn_blocking(move || sync(state))
                .await
                .unwrap_or_else(|e| Err(Error::Failed("sync".into(), e.to_string())));
            let took = started.elapsed();
            metrics.sync_ended(took, result.as_ref().ok().map(Synced::sync_type));
            match result {
                Ok(kind) => {
                    let now = jiff::Timestamp::now();
                    for t in triggers {
                        if let Ok(ago) = Duration::try_from(now.duration_since(t)) {
                            metrics.programmed(ago);
                        }
                    }
                    tracker.lock().expect("tracker").applied(changed, &slices);
                    tracing::debug!(
                        ?kind,
                        elapsed_ms = took.as_millis() as u64,
                        "synced {mode} rules"
                    )
                }
                Err(e) => tracing::error!(error = %e, "syncing {mode} rules failed"),
            }
        }
        .instrument(span)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(1);

    #[test]
    fn two_syncs_run_back_to_back_then_one_per_min() {
        let t0 = Instant::now();
        let mut tokens = Tokens::new(MIN, t0);
        assert_eq!(tokens.ready_at(t0), t0);
        tokens.take(t0);
        assert_eq!(
            tokens.ready_at(t0),
            t0,
            "the burst allows a second sync at once"
        );
        tokens.take(t0);
        assert_eq!(tokens.ready_at(t0), t0 + MIN, "a third waits for a token");
        let t1 = t0 + Duration::from_millis(400);
        assert_eq!(tokens.ready_at(t1), t0 + MIN);
        tokens.take(t0 + MIN);
        assert_eq!(tokens.ready_at(t0 + MIN), t0 + 2 * MIN);
    }

    #[test]
    fn a_change_right_after_the_periodic_sync_is_not_delayed() {
        // Syncs at 0 (start) and 1.2 s (a change), then the periodic one at 31.2 s: a change
        // 100 ms later runs at once (upstream's BoundedFrequencyRunner with burstSyncs 2).
        let t0 = Instant::now();
        let mut tokens = Tokens::new(MIN, t0);
        tokens.take(t0);
        let change = t0 + Duration::from_millis(1200);
        assert_eq!(tokens.ready_at(change), change);
        tokens.take(change);
        let periodic = change + Duration::from_secs(30);
        assert_eq!(tokens.ready_at(periodic), periodic);
        tokens.take(periodic);
        let next = periodic + Duration::from_millis(100);
        assert_eq!(tokens.ready_at(next), next);
        tokens.take(next);
        // The bucket is empty now: the one after that waits.
        let after = next + Duration::from_millis(100);
        assert!(tokens.ready_at(after) > after);
    }

    fn slice(name: &str, version: &str, trigger: Option<&str>) -> Arc<EndpointSlice> {
        let mut s = EndpointSlice::default();
        s.metadata.namespace = Some("ns".into());
        s.metadata.name = Some(name.into());
        s.metadata.resource_version = Some(version.into());
        s.metadata.annotations = trigger.map(|t| {
            [(LAST_CHANGE_TRIGGER_TIME.to_string(), t.to_string())]
                .into_iter()
                .collect()
        });
        Arc::new(s)
    }

    #[test]
    fn programming_counts_each_slice_change_made_after_start_once() {
        let started: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        let mut tracker = ProgrammingTracker::new(started);
        let slices = [
            slice("a", "1", Some("2024-05-01T10:00:05Z")),
            // Changed before the proxier started: applied, not timed.
            slice("b", "1", Some("2024-05-01T09:00:00Z")),
            slice("c", "1", None),
        ];
        let (changed, triggers) = tracker.changes(&slices);
        assert_eq!(changed.len(), 3);
        assert_eq!(triggers, ["2024-05-01T10:00:05Z".parse().unwrap()]);
        // Not applied (the sync failed): the same again next time.
        assert_eq!(tracker.changes(&slices).1.len(), 1);
        tracker.applied(changed, &slices);
        assert_eq!(tracker.changes(&slices), (vec![], vec![]));
        // A new version of `a`; `c` is gone.
        let next = [
            slice("a", "2", Some("2024-05-01T10:01:00Z")),
            slices[1].clone(),
        ];
        let (changed, triggers) = tracker.changes(&next);
        assert_eq!(changed, [("ns/a".to_string(), "2".to_string())]);
        assert_eq!(triggers, ["2024-05-01T10:01:00Z".parse().unwrap()]);
        tracker.applied(changed, &next);
        assert_eq!(tracker.applied.len(), 2);
    }

    #[test]
    fn no_min_period_never_waits() {
        let t0 = Instant::now();
        let mut tokens = Tokens::new(Duration::ZERO, t0);
        for _ in 0..5 {
            tokens.take(t0);
            assert_eq!(tokens.ready_at(t0), t0);
        }
    }
}
