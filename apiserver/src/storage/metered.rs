//! Times every storage call as upstream's etcd3 store does (`etcd_request_duration_seconds`
//! by operation and group-resource), in front of either backend, so the embedded store is
//! measured by the same series as etcd. Below encryption at rest, as upstream times the etcd
//! call alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

use super::layout::KeyLayout;
use super::{DynStore, KeyValue, ListOptions, ListResult, Result, Revision, Store, WatchStream};
use crate::metrics::StoreMetrics;

pub struct MeteredStore {
    inner: DynStore,
    metrics: Arc<StoreMetrics>,
    layout: KeyLayout,
}

impl MeteredStore {
    pub fn wrap(inner: DynStore, metrics: Arc<StoreMetrics>) -> DynStore {
        Arc::new(MeteredStore {
            inner,
            metrics,
            layout: KeyLayout::built_in(),
        })
    }

    fn observe(&self, operation: &str, key: &str, started: Instant) {
        self.metrics.observe_request(
            operation,
            &self.layout.type_label(key),
            started.elapsed().as_secs_f64(),
        );
    }
}

#[async_trait]
impl Store for MeteredStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let started = Instant::now();
        let result = self.inner.create(key, value).await;
        self.observe("create", key, started);
        result
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let started = Instant::now();
        let result = self.inner.update(key, value, expected).await;
        self.observe("update", key, started);
        result
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let started = Instant::now();
        let result = self.inner.delete(key, expected).await;
        self.observe("delete", key, started);
        result
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let started = Instant::now();
        let result = self.inner.get(key).await;
        self.observe("get", key, started);
        result
    }

    async fn list(&self, opts: ListOptions) -> Result<ListResult> {
        let started = Instant::now();
        let prefix = opts.prefix.clone();
        let result = self.inner.list(opts).await;
        self.observe("list", &prefix, started);
        result
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        self.inner.watch(prefix, after).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    fn request_progress(&self) {
        self.inner.request_progress()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.compacted_revision().await
    }

    async fn stale(&self, kv: &KeyValue) -> Result<bool> {
        self.inner.stale(kv).await
    }

    async fn put_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.put_expiring(key, value, ttl).await;
        self.observe("update", key, started);
        result
    }

    async fn list_expiring(&self, prefix: &str) -> Result<Vec<(String, Bytes)>> {
        let started = Instant::now();
        let result = self.inner.list_expiring(prefix).await;
        self.observe("list", prefix, started);
        result
    }

    async fn delete_expiring(&self, key: &str) -> Result<()> {
        let started = Instant::now();
        let result = self.inner.delete_expiring(key).await;
        self.observe("delete", key, started);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::storage::{SqliteOptions, SqliteStore};

    #[tokio::test]
    async fn calls_are_timed_by_operation_and_group_resource() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let sqlite = SqliteStore::open(
            SqliteOptions::new(dir.path().join("state.db")),
            metrics.store.clone(),
        )
        .unwrap();
        let store = MeteredStore::wrap(Arc::new(sqlite), metrics.store.clone());
        store
            .create("/registry/deployments/default/d", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        store.get("/registry/pods/default/p").await.unwrap();
        store
            .list(ListOptions {
                prefix: "/registry/pods/".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let text = metrics.render();
        for series in [
            "etcd_request_duration_seconds_count{operation=\"create\",type=\"deployments.apps\"} 1",
            "etcd_request_duration_seconds_count{operation=\"get\",type=\"pods\"} 1",
            "etcd_request_duration_seconds_count{operation=\"list\",type=\"pods\"} 1",
        ] {
            assert!(text.contains(series), "{series} missing from\n{text}");
        }
    }
}
