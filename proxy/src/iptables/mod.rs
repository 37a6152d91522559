//! kube-proxy's iptables mode. Watches of Services and EndpointSlices only mark the state dirty;
//! a bounded-frequency runner then renders the whole ruleset from the caches and applies it with
//! one `iptables-restore`, rate-limited by `min_sync_period` and at least once per
//! `sync_period`. Only the chains that changed since the previous sync are restored; the whole
//! ruleset first, after a failure and once per [`FULL_SYNC_PERIOD`] (which also repairs rules
//! someone else removed).

pub mod apply;
pub mod render;
pub mod runner;

use std::sync::Arc;
use std::time::Duration;

use crate::cache::Caches;

pub use apply::{CommandIptables, FakeIptables, Iptables, SyncKind, Syncer};
pub use render::{ProxyConfig, ProxyState, Ruleset, render, render_rules};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("running {0}: {1}")]
    Spawn(String, #[source] std::io::Error),
    #[error("{0} failed: {1}")]
    Failed(String, String),
    #[error(transparent)]
    Cache(#[from] crate::cache::NotReady),
}

/// How often a full sync runs although partial ones would do, as upstream's FullSyncPeriod
/// (an hour): it repairs whatever someone else changed in our rules. Not every sync period: at
/// 10,000 Services a full iptables-restore takes tens of seconds with iptables-nft.
pub const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

/// How often the proxier syncs (kube-proxy's `--iptables-min-sync-period` and
/// `--iptables-sync-period`).
#[derive(Clone, Copy, Debug)]
pub struct Periods {
    pub min: Duration,
    pub max: Duration,
}

impl Default for Periods {
    fn default() -> Periods {
        Periods {
            min: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

/// Runs the proxier until `shutdown`: syncs whenever the caches change (rate-limited) and
/// periodically.
pub async fn run(
    caches: Caches,
    config: ProxyConfig,
    ipt: Arc<dyn Iptables>,
    periods: Periods,
    metrics: Arc<crate::metrics::ProxyMetrics>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let syncer = std::sync::Mutex::new(
        apply::Syncer::new(ipt, FULL_SYNC_PERIOD).with_metrics(metrics.clone()),
    );
    runner::run_proxier(
        caches,
        config,
        periods,
        "iptables",
        metrics,
        shutdown,
        move |snapshot| {
            let rules = render_rules(&snapshot.to_state());
            let mut syncer = syncer.lock().unwrap_or_else(|e| e.into_inner());
            syncer.sync(rules)
        },
    )
    .await
}
