//! Encryption at rest (`--encryption-provider-config`), as kube-apiserver does it: a store in
//! front of either backend that encrypts the values of the configured resources on write and
//! decrypts them on read, so the registry, the watch cache and every reader above only ever
//! see plaintext. The storage key is the additional data of AES-GCM, as upstream's.

mod config;
mod providers;

pub use config::{ConfigError, GroupResource, Transformers};
pub use providers::{Provider, ProviderKind, TransformError, Transformer};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;

use super::layout::KeyLayout;
use super::{
    DynStore, Event, KeyValue, ListOptions, ListResult, Result, Revision, Store, StoreError,
    WatchStream,
};

/// A [`Store`] that encrypts values as the configuration says; everything else passes.
#[derive(Clone)]
pub struct EncryptedStore {
    inner: DynStore,
    transformers: Arc<Transformers>,
    layout: Arc<KeyLayout>,
}

impl EncryptedStore {
    pub fn new(inner: DynStore, transformers: Transformers) -> EncryptedStore {
        EncryptedStore {
            inner,
            transformers: Arc::new(transformers),
            layout: Arc::new(KeyLayout::built_in()),
        }
    }

    /// `inner` behind `transformers`, or `inner` itself when they name nothing.
    pub fn wrap(inner: DynStore, transformers: Transformers) -> DynStore {
        if transformers.is_empty() {
            inner
        } else {
            Arc::new(EncryptedStore::new(inner, transformers))
        }
    }

    fn transformer(&self, key: &str) -> Option<&Transformer> {
        let (group, resource) = self.layout.group_resource(key)?;
        self.transformers.for_resource(group, resource)
    }

    fn seal(&self, key: &str, value: &Bytes) -> Result<Bytes> {
        match self.transformer(key) {
            None => Ok(value.clone()),
            Some(t) => t
                .to_storage(value, key.as_bytes())
                .map(Bytes::from)
                .map_err(|e| transform_error(key, e)),
        }
    }

    /// The stored value of `kv` decrypted, and whether it is stale.
    fn open(&self, mut kv: KeyValue) -> Result<(KeyValue, bool)> {
        let Some(t) = self.transformer(&kv.key) else {
            return Ok((kv, false));
        };
        let (value, stale) = t
            .from_storage(&kv.value, kv.key.as_bytes())
            .map_err(|e| transform_error(&kv.key, e))?;
        kv.value = Bytes::from(value);
        Ok((kv, stale))
    }

    fn plain(&self, kv: KeyValue) -> Result<KeyValue> {
        self.open(kv).map(|(kv, _)| kv)
    }

    fn plain_error(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Conflict { key, current } => StoreError::Conflict {
                key,
                current: current.and_then(|kv| self.plain(*kv).ok().map(Box::new)),
            },
            e => e,
        }
    }
}

/// Upstream's storage error for a value that does not decrypt (or encrypt).
fn transform_error(key: &str, e: TransformError) -> StoreError {
    tracing::error!(key, error = %e, "encryption at rest: cannot transform the value");
    StoreError::Backend(format!("unable to transform key {key:?}: {e}"))
}

#[async_trait]
impl Store for EncryptedStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let sealed = self.seal(key, &value)?;
        let mut kv = self.inner.create(key, sealed).await?;
        kv.value = value;
        Ok(kv)
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let sealed = self.seal(key, &value)?;
        let mut kv = self
            .inner
            .update(key, sealed, expected)
            .await
            .map_err(|e| self.plain_error(e))?;
        kv.value = value;
        Ok(kv)
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let (prev, rev) = self
            .inner
            .delete(key, expected)
            .await
            .map_err(|e| self.plain_error(e))?;
        Ok((self.plain(prev)?, rev))
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner
            .get(key)
            .await?
            .map(|kv| self.plain(kv))
            .transpose()
    }

    async fn list(&self, opts: ListOptions) -> Result<ListResult> {
        let mut result = self.inner.list(opts).await?;
        result.kvs = std::mem::take(&mut result.kvs)
            .into_iter()
            .map(|kv| self.plain(kv))
            .collect::<Result<_>>()?;
        Ok(result)
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let inner = self.inner.watch(prefix, after).await?;
        let this = self.clone();
        Ok(Box::pin(inner.map(move |event| {
            Ok(match event? {
                Event::Put { kv, prev } => Event::Put {
                    kv: this.plain(kv)?,
                    prev: prev.map(|p| this.plain(p)).transpose()?,
                },
                Event::Delete { prev, revision } => Event::Delete {
                    prev: this.plain(prev)?,
                    revision,
                },
                progress => progress,
            })
        })))
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
        if self.transformer(&kv.key).is_none() {
            return Ok(false);
        }
        match self.inner.get(&kv.key).await? {
            Some(stored) if stored.mod_revision == kv.mod_revision => Ok(self.open(stored)?.1),
            // Changed since: the write will meet the new revision and retry.
            _ => Ok(true),
        }
    }

    // Expiring keys hold no resources, so nothing an encryption configuration names.
    async fn put_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<()> {
        self.inner.put_expiring(key, value, ttl).await
    }

    async fn list_expiring(&self, prefix: &str) -> Result<Vec<(String, Bytes)>> {
        self.inner.list_expiring(prefix).await
    }

    async fn delete_expiring(&self, key: &str) -> Result<()> {
        self.inner.delete_expiring(key).await
    }
}
