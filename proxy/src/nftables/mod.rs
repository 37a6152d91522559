//! kube-proxy's nftables mode: the same watches, caches and bounded-frequency runner as the
//! iptables mode, rendering into one nftables table instead. Services are dispatched through
//! verdict maps, so the kernel's cost per packet and `nft`'s cost per sync do not grow with a
//! linear list of rules; a change re-renders only the Services whose objects changed and is one
//! small transaction (their map and set elements and chains), and the whole table is replaced only once per
//! [`apply::FULL_SYNC_PERIOD`] or after a failure.

pub mod apply;
pub mod render;

use std::sync::Arc;

use crate::cache::Caches;
use crate::iptables::{Error, Periods, ProxyConfig, runner};

pub use apply::{CommandNft, FakeNft, Nft, SyncKind, Syncer};
pub use render::{NftRuleset, render, render_ruleset};

/// Runs the proxier until `shutdown`: syncs whenever the caches change (rate-limited by
/// `periods.min`) and at least every `periods.max`.
pub async fn run(
    caches: Caches,
    config: ProxyConfig,
    nft: Arc<dyn Nft>,
    periods: Periods,
    metrics: Arc<crate::metrics::ProxyMetrics>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let syncer = std::sync::Mutex::new(
        Syncer::new(nft, apply::FULL_SYNC_PERIOD).with_metrics(metrics.clone()),
    );
    runner::run_proxier(
        caches,
        config,
        periods,
        "nftables",
        metrics,
        shutdown,
        move |snapshot| {
            let mut syncer = syncer.lock().unwrap_or_else(|e| e.into_inner());
            syncer.sync(&snapshot.config, &snapshot.services, &snapshot.slices)
        },
    )
    .await
}
