//! Upstream's BoundedFrequencyRunner: a burst of changes becomes one sync, syncs are at least
//! `min` apart, and one runs every `max` even when nothing changed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use super::{Error, Periods, ProxyConfig, ProxyState};
use crate::cache::Caches;

/// Calls `sync` once at start, then after every `trigger` (no sooner than `periods.min` after
/// the previous sync) or when `periods.max` passed, until `shutdown`.
pub async fn bounded_frequency<F, Fut>(
    periods: Periods,
    trigger: Arc<Notify>,
    shutdown: impl Future<Output = ()>,
    mut sync: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        sync().await;
        let last = Instant::now();
        tokio::select! {
            _ = trigger.notified() => {}
            _ = tokio::time::sleep_until(last + periods.max) => {}
            _ = &mut shutdown => return,
        }
        tokio::select! {
            _ = tokio::time::sleep_until(last + periods.min) => {}
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

/// The proxier loop of both modes: waits for the caches to fill, then calls `sync` with the
/// cached objects (shared, not copied: an unchanged object is the same `Arc` as before)
/// whenever the caches change (rate-limited) and at least every `periods.max`, until
/// `shutdown`. Syncs run off the async runtime: rendering 10,000 Services takes long
/// enough to stall other tasks.
pub async fn run_proxier<K, S>(
    caches: Caches,
    config: ProxyConfig,
    periods: Periods,
    mode: &'static str,
    shutdown: impl Future<Output = ()>,
    sync: S,
) -> Result<(), Error>
where
    K: std::fmt::Debug + Send + 'static,
    S: Fn(Snapshot) -> Result<K, Error> + Send + Sync + 'static,
{
    tokio::select! {
        r = caches.ready() => r?,
        _ = tokio::time::sleep(Duration::from_secs(300)) => return Err(crate::cache::NotReady.into()),
    }
    let trigger = caches.changed.clone();
    let sync = Arc::new(sync);
    bounded_frequency(periods, trigger, shutdown, || {
        let state = Snapshot {
            config: config.clone(),
            services: caches.services.state(),
            slices: caches.slices.state(),
        };
        let sync = sync.clone();
        let span = tracing::info_span!("sync_proxy_rules", services = state.services.len());
        async move {
            let started = std::time::Instant::now();
            let result = tokio::task::spawn_blocking(move || sync(state))
                .await
                .unwrap_or_else(|e| Err(Error::Failed("sync".into(), e.to_string())));
            match result {
                Ok(kind) => tracing::debug!(
                    ?kind,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "synced {mode} rules"
                ),
                Err(e) => tracing::error!(error = %e, "syncing {mode} rules failed"),
            }
        }
        .instrument(span)
    })
    .await;
    Ok(())
}
