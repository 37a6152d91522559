//! The objects authorization reads on every request (roles, bindings, pods by node), kept in
//! memory from the store's watch as upstream's authorizers keep informers: a request is
//! authorized without a store read. The server's own writes reach the cache through the
//! same watch, a moment later, as upstream's informer-fed RBAC does.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::storage::{DynStore, Event, ListOptions, StoreError};

/// Objects under one key prefix, decoded, by key.
pub struct ObjectCache<K> {
    prefix: String,
    objects: RwLock<BTreeMap<String, Arc<K>>>,
    synced: std::sync::atomic::AtomicBool,
}

impl<K> std::fmt::Debug for ObjectCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> ObjectCache<K> {
    /// Follows `prefix` of `store` until the process ends: list, then watch from the list's
    /// revision; on any error, list again.
    pub fn start(store: DynStore, prefix: String) -> Arc<ObjectCache<K>> {
        let cache = Arc::new(ObjectCache {
            prefix,
            objects: RwLock::default(),
            synced: Default::default(),
        });
        let this = cache.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = this.follow(&store).await {
                    tracing::debug!(prefix = %this.prefix, error = %e, "authorization cache relisting");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        cache
    }

    /// Whether the first list is in.
    pub fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn follow(&self, store: &DynStore) -> Result<(), StoreError> {
        let list = store
            .list(ListOptions {
                prefix: self.prefix.clone(),
                ..Default::default()
            })
            .await?;
        let fresh: BTreeMap<String, Arc<K>> = list
            .kvs
            .iter()
            .filter_map(|kv| Some((kv.key.clone(), Arc::new(decode(&kv.value)?))))
            .collect();
        *self.objects.write().expect("authorization cache") = fresh;
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
        let mut events = store.watch(&self.prefix, list.revision).await?;
        while let Some(event) = events.next().await {
            let mut objects = self.objects.write().expect("authorization cache");
            match event? {
                Event::Put { kv, .. } => match decode(&kv.value) {
                    Some(obj) => {
                        objects.insert(kv.key, Arc::new(obj));
                    }
                    None => {
                        objects.remove(&kv.key);
                    }
                },
                Event::Delete { prev, .. } => {
                    objects.remove(&prev.key);
                }
                Event::Progress(_) => {}
            }
        }
        Ok(())
    }

    /// The object at `key` (the full store key).
    pub fn get(&self, key: &str) -> Option<Arc<K>> {
        self.objects
            .read()
            .expect("authorization cache")
            .get(key)
            .cloned()
    }

    /// The object named `name` (cluster-scoped) or `namespace/name`.
    pub fn named(&self, path: &str) -> Option<Arc<K>> {
        self.get(&format!("{}{path}", self.prefix))
    }

    /// Every object whose key continues the prefix with `under` (`""`: all; `ns/`: one
    /// namespace's).
    pub fn under(&self, under: &str) -> Vec<Arc<K>> {
        // Keys sorted: the ones under a prefix are one range.
        let start = format!("{}{under}", self.prefix);
        self.objects
            .read()
            .expect("authorization cache")
            .range(start.clone()..)
            .take_while(|(k, _)| k.starts_with(&start))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

fn decode<K: DeserializeOwned>(value: &[u8]) -> Option<K> {
    match serde_json::from_slice(value) {
        Ok(obj) => Some(obj),
        Err(e) => {
            tracing::warn!(error = %e, "authorization cache: an object does not decode");
            None
        }
    }
}
