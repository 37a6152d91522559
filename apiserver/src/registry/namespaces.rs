//! Which namespaces exist and which are terminating, kept from a watch of the store, so that
//! admitting a create costs no storage read (upstream's NamespaceLifecycle uses an informer the
//! same way, and falls back to a live read for what it has not seen yet).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;

use crate::storage::{DynStore, Event, ListOptions, Revision};

const PREFIX: &str = "/registry/namespaces/";

#[derive(Default)]
pub struct NamespaceCache {
    /// Namespace name → (terminating, or `None` once deleted; the revision that said so).
    /// Older news never overwrites newer: this server's own writes land before its watch.
    state: RwLock<HashMap<String, (Option<bool>, Revision)>>,
    /// Set once the first list is in.
    synced: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for NamespaceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceCache").finish_non_exhaustive()
    }
}

fn terminating(value: &[u8]) -> Option<bool> {
    let ns: Namespace = serde_json::from_slice(value).ok()?;
    Some(
        ns.metadata.deletion_timestamp.is_some()
            || ns.status.and_then(|s| s.phase).as_deref() == Some("Terminating"),
    )
}

fn name_of(key: &str) -> &str {
    key.strip_prefix(PREFIX).unwrap_or(key)
}

impl NamespaceCache {
    /// Whether the cache has listed the store once (readyz's informer-sync check).
    pub fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `Some(terminating)` for a namespace the cache has seen.
    pub fn get(&self, name: &str) -> Option<bool> {
        self.state
            .read()
            .expect("namespace cache")
            .get(name)
            .and_then(|(t, _)| *t)
    }

    fn apply(&self, key: &str, terminating: Option<bool>, revision: Revision) {
        let mut state = self.state.write().expect("namespace cache");
        let entry = state.entry(name_of(key).to_string()).or_insert((None, 0));
        if revision >= entry.1 {
            *entry = (terminating, revision);
        }
    }

    /// Records a namespace write this server just made (`None`: deleted).
    pub fn observe(&self, key: &str, value: Option<&[u8]>, revision: Revision) {
        self.apply(key, value.and_then(terminating), revision);
    }

    /// Keeps the cache from the store until the process ends: list, then watch from the list's
    /// revision; on any error, list again.
    pub fn start(store: DynStore) -> Arc<NamespaceCache> {
        let cache = Arc::new(NamespaceCache::default());
        let this = cache.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = this.follow(&store).await {
                    tracing::debug!(error = %e, "namespace cache watch ended; relisting");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        cache
    }

    async fn follow(&self, store: &DynStore) -> Result<(), crate::storage::StoreError> {
        let list = store
            .list(ListOptions {
                prefix: PREFIX.into(),
                ..Default::default()
            })
            .await?;
        for kv in &list.kvs {
            self.apply(&kv.key, terminating(&kv.value), kv.mod_revision);
        }
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
        let mut events = store.watch(PREFIX, list.revision).await?;
        while let Some(event) = events.next().await {
            match event? {
                Event::Put { kv, .. } => {
                    self.apply(&kv.key, terminating(&kv.value), kv.mod_revision)
                }
                Event::Delete { prev, revision } => self.apply(&prev.key, None, revision),
                Event::Progress(_) => {}
            }
        }
        Ok(())
    }
}

/// The namespaces registry tells the cache about this server's own writes at once, so a
/// create right after a namespace turned Terminating is refused (the cache's watch would see
/// it a moment later).
impl super::generic::WriteHooks<Namespace> for NamespaceCache {
    fn begin_create(
        &self,
        _: &mut Namespace,
        _: bool,
    ) -> Result<super::generic::Reservation, minik8s_api::ApiError> {
        Ok(Default::default())
    }

    fn begin_update(
        &self,
        _: &mut Namespace,
        _: &Namespace,
        _: bool,
    ) -> Result<super::generic::Reservation, minik8s_api::ApiError> {
        Ok(Default::default())
    }

    fn removed(&self, _: &Namespace) {}

    fn wrote(&self, key: &str, value: Option<&[u8]>, revision: Revision) {
        self.observe(key, value, revision);
    }
}
