//! The storage contract every backend honours: etcd's semantics, so the REST layer can be
//! written once. One global revision orders every write; it is the resourceVersion clients see.
//!
//! Keys look like upstream's (`/registry/<resource>/<namespace>/<name>`); values are JSON bytes
//! of the object without its resourceVersion (the revision is put back on read), encrypted
//! for the resources `--encryption-provider-config` names ([`encryption`]).

pub mod encryption;
mod etcd;
pub(crate) mod layout;
mod metered;
mod sqlite;
mod sqlite_expiring;

pub use etcd::EtcdStore;
pub use metered::MeteredStore;
pub use sqlite::{SqliteOptions, SqliteStore};

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

/// The revision of the whole store after a write; strictly increasing, never reused.
pub type Revision = i64;

/// Largest value a backend accepts, as etcd's default request limit.
pub const MAX_VALUE_BYTES: usize = 1536 * 1024;

/// One stored key at one revision.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    pub create_revision: Revision,
    pub mod_revision: Revision,
}

/// A change seen by a watcher, in commit order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A create (`prev` is `None`) or an update.
    Put {
        kv: KeyValue,
        prev: Option<KeyValue>,
    },
    /// A delete at `revision`; `prev` is the last value the key held.
    Delete { prev: KeyValue, revision: Revision },
    /// Every change up to this revision under the watched prefix has been delivered.
    Progress(Revision),
}

impl Event {
    pub fn revision(&self) -> Revision {
        match self {
            Event::Put { kv, .. } => kv.mod_revision,
            Event::Delete { revision, .. } => *revision,
            Event::Progress(rev) => *rev,
        }
    }
}

/// A range read over a prefix.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub prefix: String,
    /// Resume at the first key strictly after this one (a continue token's position).
    pub after_key: Option<String>,
    /// At most this many keys; `None` reads all.
    pub limit: Option<usize>,
    /// Read the state at this revision instead of the newest one.
    pub revision: Option<Revision>,
}

#[derive(Clone, Debug, Default)]
pub struct ListResult {
    pub kvs: Vec<KeyValue>,
    /// The revision the read was served at.
    pub revision: Revision,
    /// Keys left in the range after the last one returned.
    pub remaining: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("key {0} already exists")]
    AlreadyExists(String),
    #[error("key {0} not found")]
    NotFound(String),
    /// The key changed since the caller read it; carries what is stored now.
    #[error("key {key} was modified concurrently")]
    Conflict {
        key: String,
        current: Option<Box<KeyValue>>,
    },
    #[error("revision {requested} has been compacted (oldest available is {compacted})")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    #[error("value of {size} bytes is larger than the limit of {limit} bytes")]
    ValueTooLarge { size: usize, limit: usize },
    #[error("storage backend: {0}")]
    Backend(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;

/// The operations the API server needs from a store, with etcd's semantics.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Writes `value` only if `key` does not exist.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;
    /// Writes `value` only if `key` was last modified at `expected`.
    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue>;
    /// Deletes `key` (only if last modified at `expected`, when given); returns the last value
    /// and the revision of the delete.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)>;
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;
    async fn list(&self, opts: ListOptions) -> Result<ListResult>;
    /// Every change under `prefix` with a revision greater than `after`, in commit order, then
    /// live changes; `Progress` items now and then while nothing matches.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream>;
    async fn current_revision(&self) -> Result<Revision>;
    /// Asks every open watch stream to report its progress now rather than at the next
    /// interval (etcd's RequestProgress): a consistent read served from a watch cache waits
    /// for that report when nothing under the cache's prefix has changed since.
    fn request_progress(&self);
    /// Forgets history up to `revision`; reads and watches before it answer `Compacted`.
    async fn compact(&self, revision: Revision) -> Result<()>;
    /// The oldest revision that can still be read or watched from.
    async fn compacted_revision(&self) -> Result<Revision>;
    /// Whether `kv`, as this store read it, is stored in a form other than the one a write
    /// makes now (encrypted with an older key, or not at all): an update must rewrite it even
    /// when the object did not change (upstream's `stale` from the value transformer).
    async fn stale(&self, kv: &KeyValue) -> Result<bool> {
        let _ = kv;
        Ok(false)
    }
    /// Writes `value` at `key`, created or overwritten, to vanish `ttl` after this write
    /// unless written again (etcd's leases). For bookkeeping outside the API's resources, such
    /// as the API servers' endpoint leases; such keys are read only with
    /// [`Store::list_expiring`], never by the resource reads.
    async fn put_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<()> {
        let _ = (key, value, ttl);
        Err(StoreError::Backend(
            "expiring keys are not supported".into(),
        ))
    }
    /// The keys under `prefix` written with [`Store::put_expiring`] and not yet expired, in
    /// key order.
    async fn list_expiring(&self, prefix: &str) -> Result<Vec<(String, Bytes)>> {
        let _ = prefix;
        Err(StoreError::Backend(
            "expiring keys are not supported".into(),
        ))
    }
    /// Removes an expiring key now; a key that is not there is no error.
    async fn delete_expiring(&self, key: &str) -> Result<()> {
        let _ = key;
        Err(StoreError::Backend(
            "expiring keys are not supported".into(),
        ))
    }
}

pub type DynStore = Arc<dyn Store>;

/// How often watch streams report progress while nothing under their prefix changes.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The end of a prefix range: the smallest key greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

pub(crate) fn check_size(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(StoreError::ValueTooLarge {
            size: value.len(),
            limit: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}
