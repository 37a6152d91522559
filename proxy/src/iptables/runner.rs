//! Upstream's BoundedFrequencyRunner: a burst of changes becomes one sync, syncs are at least
//! `min` apart, and one runs every `max` even when nothing changed.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Periods;

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
