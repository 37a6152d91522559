//! Dispatching: this node's pods, read from the process's informers (its own watch, or the
//! all-in-one server's cache of every pod), feed one worker per pod UID; a periodic listing of
//! the runtime (upstream's PLEG relist) wakes the worker of any pod whose containers changed,
//! and finds what belongs to pods that are gone (deleted while the kubelet was down).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use minik8s_informers::{Change, Index, Informer, pod_node};
use tokio::sync::mpsc;

use super::model::keys;
use super::worker::Shared;
use crate::metrics::SyncType;

/// Longest a pod goes without a sync, even when nothing seems to change.
const RESYNC: Duration = Duration::from_secs(60);

pub struct PodManager {
    shared: Arc<Shared>,
    /// The pods by node: this node's are the ones under its name.
    pods: Index<Pod>,
    /// Each worker's wake-ups carry when they were asked for (the first one still queued).
    workers: Mutex<HashMap<String, mpsc::Sender<tokio::time::Instant>>>,
}

impl PodManager {
    /// The pod with this UID in the watch cache.
    fn pod(&self, uid: &str) -> Option<Arc<Pod>> {
        self.mine()
            .into_iter()
            .find(|p| p.metadata.uid.as_deref() == Some(uid))
    }

    /// The pods bound to this node.
    fn mine(&self) -> Vec<Arc<Pod>> {
        self.pods.get(&self.shared.config.node_name)
    }

    /// Wakes (or starts) the worker of a pod.
    pub fn trigger(self: &Arc<Self>, uid: &str) {
        let mut workers = self.workers.lock().expect("workers");
        let now = tokio::time::Instant::now();
        if let Some(tx) = workers.get(uid) {
            match tx.try_send(now) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => return,
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(now);
        workers.insert(uid.to_string(), tx);
        self.shared.metrics.pod_seen(uid);
        let this = self.clone();
        let uid = uid.to_string();
        tokio::spawn(async move { this.work(uid, rx).await });
    }

    async fn work(self: Arc<Self>, uid: String, mut rx: mpsc::Receiver<tokio::time::Instant>) {
        let mut failures = 0u32;
        let mut next = tokio::time::Instant::now() + RESYNC;
        let mut first = true;
        loop {
            let (asked, periodic) = tokio::select! {
                msg = rx.recv() => match msg { Some(at) => (at, false), None => return },
                _ = tokio::time::sleep_until(next) => (next, true),
            };
            let queued_ms = asked.elapsed().as_secs_f64() * 1000.0;
            let span =
                tracing::info_span!("sync", pod_uid = %uid, queued_ms = format!("{queued_ms:.1}"));
            let Some(pod) = self.pod(&uid) else {
                // Gone from the API: remove what the runtime still holds.
                if let Ok(rt) = self.shared.runtime_pod(&uid).await
                    && (!rt.containers.is_empty() || !rt.sandboxes.is_empty())
                {
                    tracing::info!(pod_uid = %uid, "removing containers of a deleted pod");
                    if let Err(e) = self.shared.remove_pod(&rt).await {
                        tracing::warn!(pod_uid = %uid, error = %e, "cleaning up a deleted pod failed");
                    }
                }
                self.shared.prober.forget_pod(&uid);
                self.shared.release_devices(&uid);
                self.finish(&uid);
                return;
            };
            let kind = if pod.metadata.deletion_timestamp.is_some() {
                SyncType::Kill
            } else if first {
                SyncType::Create
            } else if periodic {
                SyncType::Sync
            } else {
                SyncType::Update
            };
            first = false;
            let started = std::time::Instant::now();
            let synced = tracing::Instrument::instrument(self.shared.sync(&pod), span).await;
            self.shared.metrics.pod_synced(kind, started.elapsed());
            match synced {
                Ok(outcome) if outcome.done => {
                    self.shared.prober.forget_pod(&uid);
                    self.finish(&uid);
                    return;
                }
                Ok(outcome) => {
                    failures = 0;
                    self.shared.prober.sync(
                        &self.shared,
                        &pod,
                        &outcome.running,
                        &outcome.pod_ip,
                        &self.shared.wake,
                    );
                    next = tokio::time::Instant::now()
                        + outcome.requeue_after.unwrap_or(RESYNC).min(RESYNC);
                }
                Err(e) => {
                    failures += 1;
                    let wait = Duration::from_millis(500 * 2u64.pow(failures.min(6)));
                    tracing::warn!(pod_uid = %uid, error = %e, retry_in = ?wait, "pod sync failed");
                    next = tokio::time::Instant::now() + wait;
                }
            }
        }
    }

    fn finish(&self, uid: &str) {
        self.workers.lock().expect("workers").remove(uid);
        self.shared.metrics.pod_forgotten(uid);
    }

    /// Per pod UID, a digest of its sandboxes and containers as the runtime lists them.
    async fn runtime_digest(&self) -> Option<BTreeMap<String, String>> {
        let sandboxes = self.shared.runtime.list_pod_sandboxes().await.ok()?;
        let containers = self.shared.runtime.list_containers().await.ok()?;
        self.shared.metrics.observe_runtime(&sandboxes, &containers);
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        for s in &sandboxes {
            if let Some(uid) = s.labels.get(keys::POD_UID) {
                out.entry(uid.clone())
                    .or_default()
                    .push_str(&format!("s:{}:{};", s.id, s.state));
            }
        }
        for c in &containers {
            if let Some(uid) = c.labels.get(keys::POD_UID) {
                out.entry(uid.clone())
                    .or_default()
                    .push_str(&format!("c:{}:{};", c.id, c.state));
            }
        }
        for v in out.values_mut() {
            let mut parts: Vec<&str> = v.split(';').collect();
            parts.sort();
            *v = parts.join(";");
        }
        Some(out)
    }
}

/// Watches this node's pods and keeps every pod's worker running until the node agent stops.
/// `wakes` carries pod UIDs whose probe results changed.
pub async fn run(
    shared: Arc<Shared>,
    pods: Informer<Pod>,
    mut wakes: mpsc::UnboundedReceiver<String>,
) {
    let node = shared.config.node_name.clone();
    let store = pods.store();
    let manager = Arc::new(PodManager {
        shared: shared.clone(),
        pods: pods.by_node(),
        workers: Mutex::new(HashMap::new()),
    });
    if let Some(devices) = &shared.devices {
        // Pods that may hold devices: this node's, until they finish.
        let manager = manager.clone();
        devices.set_active_pods(Arc::new(move || {
            manager
                .mine()
                .into_iter()
                .filter(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
                })
                .collect()
        }));
    }
    // The UIDs of this node's pods that a change concerns: a pod bound here, or one that was
    // (every pod after a relist, including those whose deletion it found).
    let events = {
        let manager = manager.clone();
        pods.changes().flat_map(move |change| {
            let here = |p: &Pod| pod_node(p) == Some(node.as_str());
            let touched: Vec<Arc<Pod>> = match change {
                Change::Applied { object, previous } => {
                    let was_here = previous.as_deref().is_some_and(here);
                    if here(&object) || was_here {
                        vec![object]
                    } else {
                        Vec::new()
                    }
                }
                Change::Deleted(last) if here(&last) => vec![last],
                Change::Deleted(_) => Vec::new(),
                Change::Synced => manager.mine(),
            };
            futures::stream::iter(touched)
        })
    };
    let relist = {
        let manager = manager.clone();
        let period = shared.config.relist_period;
        async move {
            if store.wait_until_ready().await.is_err() {
                return;
            }
            let mut last: BTreeMap<String, String> = BTreeMap::new();
            let mut ticker = tokio::time::interval(period);
            loop {
                ticker.tick().await;
                let Some(now) = manager.runtime_digest().await else {
                    continue;
                };
                for (uid, digest) in &now {
                    if last.get(uid) != Some(digest) {
                        manager.trigger(uid);
                    }
                }
                for uid in last.keys() {
                    if !now.contains_key(uid) {
                        manager.trigger(uid);
                    }
                }
                last = now;
            }
        }
    };
    let watch = {
        let manager = manager.clone();
        events.for_each(move |pod| {
            if let Some(uid) = pod.metadata.uid.as_deref() {
                manager.trigger(uid);
            }
            futures::future::ready(())
        })
    };
    let woken = {
        let manager = manager.clone();
        async move {
            while let Some(uid) = wakes.recv().await {
                manager.trigger(&uid);
            }
        }
    };
    tokio::join!(watch, relist, woken);
}
