//! A consistent LIST while the watch cache lags the store: served by the store, as
//! upstream's Cacher falls back to etcd, instead of failing with 504.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use k8s_openapi::api::core::v1::ConfigMap;
use minik8s_api::strategy::BuiltIn;

use super::generic::{GenericRegistry, ListQuery};
use super::typed::info;
use crate::metrics::Metrics;
use crate::storage::{
    DynStore, KeyValue, ListOptions, ListResult, Result, Revision, SqliteOptions, SqliteStore,
    Store, WatchStream,
};

/// A store whose watches never deliver anything: a cache over it stays at its first list.
struct StalledWatches(DynStore);

#[async_trait]
impl Store for StalledWatches {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.0.create(key, value).await
    }
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        self.0.update(key, value, expected).await
    }
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        self.0.delete(key, expected).await
    }
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.0.get(key).await
    }
    async fn list(&self, opts: ListOptions) -> Result<ListResult> {
        self.0.list(opts).await
    }
    async fn watch(&self, _prefix: &str, _after: Revision) -> Result<WatchStream> {
        Ok(Box::pin(futures::stream::pending()))
    }
    async fn current_revision(&self) -> Result<Revision> {
        self.0.current_revision().await
    }
    fn request_progress(&self) {}
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.0.compact(revision).await
    }
    async fn compacted_revision(&self) -> Result<Revision> {
        self.0.compacted_revision().await
    }
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}
    }))
    .unwrap()
}

fn names(items: &[Arc<super::watch_cache::Cached<ConfigMap>>]) -> Vec<String> {
    items
        .iter()
        .map(|c| c.decode().unwrap().metadata.name.unwrap_or_default())
        .collect()
}

fn fallbacks() -> u64 {
    prometheus::default_registry()
        .gather()
        .iter()
        .filter(|f| f.name() == "apiserver_watch_cache_consistent_read_total")
        .flat_map(|f| f.get_metric())
        .filter(|m| {
            m.get_label()
                .iter()
                .any(|l| l.name() == "fallback" && l.value() == "true")
                && m.get_label()
                    .iter()
                    .any(|l| l.name() == "resource" && l.value() == "configmaps")
        })
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

#[tokio::test]
async fn a_consistent_list_falls_back_to_the_store_while_the_cache_lags() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(
        SqliteOptions::new(dir.path().join("state.db")),
        Metrics::new().store.clone(),
    )
    .unwrap();
    let store: DynStore = Arc::new(StalledWatches(Arc::new(sqlite)));
    let registry = GenericRegistry::new(BuiltIn::<ConfigMap>::new(info::<ConfigMap>()), store);
    registry
        .create(Some("default"), config_map("before"), false)
        .await
        .unwrap();
    // The first read starts the cache, which lists what is there and then hears nothing.
    let first = registry
        .list_shared(Some("default"), &ListQuery::default())
        .await
        .unwrap();
    assert_eq!(names(&first.items), ["before"]);
    let created = registry
        .create(Some("default"), config_map("after"), false)
        .await
        .unwrap();
    let before = fallbacks();

    // The cache never reaches the store's revision: the store answers.
    let consistent = registry
        .list_shared(Some("default"), &ListQuery::default())
        .await
        .unwrap();
    assert_eq!(names(&consistent.items), ["after", "before"]);
    assert_eq!(
        Some(consistent.resource_version.to_string()),
        created.metadata.resource_version
    );
    assert_eq!(fallbacks(), before + 1);

    // A read that asked for a version the cache has not reached still gets 504, as upstream.
    let newer = ListQuery {
        resource_version: created.metadata.resource_version.clone(),
        resource_version_match: Some("NotOlderThan".into()),
        ..Default::default()
    };
    let Err(err) = registry.list_shared(Some("default"), &newer).await else {
        panic!("a list at a version the cache has not reached was served");
    };
    assert_eq!(err.code, 504);
    // Any version (resourceVersion=0) is what the cache holds.
    let any = ListQuery {
        resource_version: Some("0".into()),
        ..Default::default()
    };
    let cached = registry.list_shared(Some("default"), &any).await.unwrap();
    assert_eq!(names(&cached.items), ["before"]);
}
