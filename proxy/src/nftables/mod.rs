//! kube-proxy's nftables mode: the same watches, caches and bounded-frequency runner as the
//! iptables mode, rendering into one nftables table instead. Services are dispatched through
//! verdict maps, so the kernel's cost per packet and `nft`'s cost per sync do not grow with a
//! linear list of rules; a change is one small transaction (map elements and the chains of the
//! Services that changed), and the whole table is replaced only once per
//! [`apply::FULL_SYNC_PERIOD`] or after a failure.

pub mod apply;
pub mod render;

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::cache::Caches;
use crate::iptables::{Error, Periods, ProxyConfig, ProxyState, runner};

pub use apply::{CommandNft, FakeNft, Nft, SyncKind, Syncer};
pub use render::{NftRuleset, render, render_ruleset};

/// Runs the proxier until `shutdown`: syncs whenever the caches change (rate-limited by
/// `periods.min`) and at least every `periods.max`.
pub async fn run(
    caches: Caches,
    config: ProxyConfig,
    nft: Arc<dyn Nft>,
    periods: Periods,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    tokio::select! {
        r = caches.ready() => r?,
        _ = tokio::time::sleep(Duration::from_secs(300)) => return Err(crate::cache::NotReady.into()),
    }
    let trigger = caches.changed.clone();
    let syncer = Arc::new(std::sync::Mutex::new(Syncer::new(
        nft,
        apply::FULL_SYNC_PERIOD,
    )));
    runner::bounded_frequency(periods, trigger, shutdown, || {
        let state = ProxyState {
            config: config.clone(),
            services: caches.services(),
            slices: caches.slices(),
        };
        let syncer = syncer.clone();
        let span = tracing::info_span!("sync_proxy_rules", services = state.services.len());
        async move {
            let started = std::time::Instant::now();
            // Rendering 10,000 Services takes long enough to stall other tasks: off the runtime.
            let result = tokio::task::spawn_blocking(move || {
                let rules = render_ruleset(&state);
                let mut syncer = syncer.lock().unwrap_or_else(|e| e.into_inner());
                syncer.sync(rules)
            })
            .await
            .unwrap_or_else(|e| Err(Error::Failed("sync".into(), e.to_string())));
            match result {
                Ok(kind) => tracing::debug!(
                    ?kind,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "synced nftables rules"
                ),
                Err(e) => tracing::error!(error = %e, "syncing nftables rules failed"),
            }
        }
        .instrument(span)
    })
    .await;
    Ok(())
}
