//! The etcd backend, for clusters that outgrow one machine. etcd already has the semantics the
//! `Store` trait asks for; this module only maps its transactions, ranges and watches onto it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType,
    GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use tokio::sync::mpsc;

use super::{
    DEFAULT_PROGRESS_INTERVAL, Event, KeyValue, ListOptions, ListResult, Result, Revision, Store,
    StoreError, WatchStream, check_size, prefix_end,
};
use crate::metrics::StoreMetrics;

/// Keys read per range request when a list has no limit.
const LIST_PAGE: usize = 1000;

pub struct EtcdStore {
    client: Client,
    metrics: Arc<StoreMetrics>,
    compacted: AtomicI64,
    progress_interval: Duration,
    /// Bumped by [`Store::request_progress`]; every watch stream asks etcd for progress.
    progress_requests: tokio::sync::watch::Sender<u64>,
}

fn backend(e: etcd_client::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn convert(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    }
}

fn is_compacted(e: &etcd_client::Error) -> bool {
    e.to_string()
        .contains("required revision has been compacted")
}

fn is_future(e: &etcd_client::Error) -> bool {
    e.to_string()
        .contains("required revision is a future revision")
}

impl EtcdStore {
    pub async fn connect(endpoints: &[String], metrics: Arc<StoreMetrics>) -> Result<Self> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(30))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(10));
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(backend)?;
        let store = EtcdStore {
            client,
            metrics,
            compacted: AtomicI64::new(0),
            progress_interval: DEFAULT_PROGRESS_INTERVAL,
            progress_requests: tokio::sync::watch::channel(0).0,
        };
        // Fail at start-up, not on the first request, when etcd is not there.
        let revision = store.current_revision().await?;
        store.metrics.revision.set(revision);
        Ok(store)
    }

    /// Runs a transaction whose success branch writes; on failure the else branch reads `key`.
    async fn guarded(
        &self,
        op: &'static str,
        key: &str,
        compare: Compare,
        then: TxnOp,
    ) -> Result<(bool, Revision, Option<KeyValue>, Option<KeyValue>)> {
        let started = Instant::now();
        let txn = Txn::new()
            .when([compare])
            .and_then([then])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.client.kv_client().txn(txn).await.map_err(backend)?;
        self.metrics.observe(op, started.elapsed().as_secs_f64());
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        let mut prev = None;
        let mut current = None;
        for r in resp.op_responses() {
            match r {
                TxnOpResponse::Put(p) => prev = p.prev_key().map(convert),
                TxnOpResponse::Delete(d) => prev = d.prev_kvs().first().map(convert),
                TxnOpResponse::Get(g) => current = g.kvs().first().map(convert),
                TxnOpResponse::Txn(_) => {}
            }
        }
        Ok((resp.succeeded(), revision, prev, current))
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        check_size(&value)?;
        let (ok, revision, _, _) = self
            .guarded(
                "create",
                key,
                Compare::create_revision(key, CompareOp::Equal, 0),
                TxnOp::put(key, value.to_vec(), None),
            )
            .await?;
        if !ok {
            return Err(StoreError::AlreadyExists(key.to_string()));
        }
        self.metrics.revision.set(revision);
        Ok(KeyValue {
            key: key.to_string(),
            value,
            create_revision: revision,
            mod_revision: revision,
        })
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        check_size(&value)?;
        let (ok, revision, prev, current) = self
            .guarded(
                "update",
                key,
                Compare::mod_revision(key, CompareOp::Equal, expected),
                TxnOp::put(key, value.to_vec(), Some(PutOptions::new().with_prev_key())),
            )
            .await?;
        if !ok {
            return Err(match current {
                None => StoreError::NotFound(key.to_string()),
                Some(kv) => StoreError::Conflict {
                    key: key.to_string(),
                    current: Some(Box::new(kv)),
                },
            });
        }
        self.metrics.revision.set(revision);
        let create_revision = prev.map(|p| p.create_revision).unwrap_or(revision);
        Ok(KeyValue {
            key: key.to_string(),
            value,
            create_revision,
            mod_revision: revision,
        })
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let compare = match expected {
            Some(rev) => Compare::mod_revision(key, CompareOp::Equal, rev),
            None => Compare::create_revision(key, CompareOp::Greater, 0),
        };
        let (ok, revision, prev, current) = self
            .guarded(
                "delete",
                key,
                compare,
                TxnOp::delete(key, Some(DeleteOptions::new().with_prev_key())),
            )
            .await?;
        match (ok, prev, current) {
            (true, Some(prev), _) => {
                self.metrics.revision.set(revision);
                Ok((prev, revision))
            }
            (_, _, Some(kv)) => Err(StoreError::Conflict {
                key: key.to_string(),
                current: Some(Box::new(kv)),
            }),
            _ => Err(StoreError::NotFound(key.to_string())),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let started = Instant::now();
        let resp = self
            .client
            .kv_client()
            .get(key, None)
            .await
            .map_err(backend)?;
        self.metrics.observe("get", started.elapsed().as_secs_f64());
        Ok(resp.kvs().first().map(convert))
    }

    async fn list(&self, opts: ListOptions) -> Result<ListResult> {
        let started = Instant::now();
        let mut after = opts.after_key.clone();
        let mut revision = opts.revision;
        let mut kvs: Vec<KeyValue> = Vec::new();
        // Large ranges are read in pages at one revision: a single response must stay under
        // gRPC's message limit.
        loop {
            let want = opts.limit.map(|l| l - kvs.len());
            let page = want.map_or(LIST_PAGE, |w| w.min(LIST_PAGE));
            let start = match &after {
                Some(k) => format!("{k}\0"),
                None => opts.prefix.clone(),
            };
            let mut get = GetOptions::new()
                .with_range(prefix_end(&opts.prefix))
                .with_limit(page as i64);
            if let Some(rev) = revision {
                get = get.with_revision(rev);
            }
            let resp = match self.client.kv_client().get(start, Some(get)).await {
                Ok(r) => r,
                Err(e) if is_compacted(&e) => {
                    let requested = revision.unwrap_or_default();
                    return Err(StoreError::Compacted {
                        requested,
                        compacted: self.compacted.load(Ordering::Relaxed).max(requested + 1),
                    });
                }
                Err(e) if is_future(&e) => {
                    let current = self.current_revision().await?;
                    return Err(StoreError::FutureRevision {
                        requested: revision.unwrap_or_default(),
                        current,
                    });
                }
                Err(e) => return Err(backend(e)),
            };
            revision = revision.or_else(|| resp.header().map(|h| h.revision()));
            let got = resp.kvs().len();
            kvs.extend(resp.kvs().iter().map(convert));
            let left = (resp.count() as usize).saturating_sub(got);
            let full = opts.limit.is_some_and(|l| kvs.len() >= l);
            if left == 0 || full || got == 0 {
                self.metrics
                    .observe("list", started.elapsed().as_secs_f64());
                return Ok(ListResult {
                    kvs,
                    revision: revision.unwrap_or_default(),
                    remaining: left,
                });
            }
            after = kvs.last().map(|kv| kv.key.clone());
        }
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let current = self.current_revision().await?;
        if after > current {
            return Err(StoreError::FutureRevision {
                requested: after,
                current,
            });
        }
        let options = WatchOptions::new()
            .with_range(prefix_end(prefix))
            .with_start_revision(after + 1)
            .with_prev_key();
        let stream = self
            .client
            .watch_client()
            .watch(prefix, Some(options))
            .await
            .map_err(backend)?;
        let (mut requests, mut responses) = stream.split();
        let (tx, rx) = mpsc::channel(256);
        let interval = self.progress_interval;
        let metrics = self.metrics.clone();
        let mut progress_requests = self.progress_requests.subscribe();
        metrics.watchers.inc();
        tokio::spawn(async move {
            let mut ticker =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            let mut reported = after;
            'feed: loop {
                tokio::select! {
                    _ = ticker.tick() => {
                        if requests.request_progress().await.is_err() {
                            break 'feed;
                        }
                    }
                    requested = progress_requests.changed() => {
                        if requested.is_err() || requests.request_progress().await.is_err() {
                            break 'feed;
                        }
                    }
                    _ = tx.closed() => break,
                    msg = responses.message() => {
                        let resp = match msg {
                            Ok(Some(resp)) => resp,
                            Ok(None) => {
                                let _ = tx.send(Err(StoreError::Backend("etcd closed the watch".into()))).await;
                                break;
                            }
                            Err(e) => {
                                let _ = tx.send(Err(backend(e))).await;
                                break;
                            }
                        };
                        if resp.compact_revision() > 0 {
                            let err = StoreError::Compacted { requested: after, compacted: resp.compact_revision() };
                            let _ = tx.send(Err(err)).await;
                            break;
                        }
                        if resp.canceled() {
                            let reason = format!("etcd canceled the watch: {}", resp.cancel_reason());
                            let _ = tx.send(Err(StoreError::Backend(reason))).await;
                            break;
                        }
                        if resp.events().is_empty() {
                            let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
                            if !resp.created() && revision > reported {
                                reported = revision;
                                if tx.send(Ok(Event::Progress(revision))).await.is_err() {
                                    break;
                                }
                            }
                            continue;
                        }
                        for e in resp.events() {
                            let Some(kv) = e.kv() else { continue };
                            let event = match e.event_type() {
                                EventType::Put => Event::Put { kv: convert(kv), prev: e.prev_kv().map(convert) },
                                EventType::Delete => {
                                    let prev = e.prev_kv().map(convert).unwrap_or_else(|| convert(kv));
                                    Event::Delete { prev, revision: kv.mod_revision() }
                                }
                            };
                            reported = event.revision();
                            if tx.send(Ok(event)).await.is_err() {
                                break 'feed;
                            }
                        }
                    }
                }
            }
            metrics.watchers.dec();
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    fn request_progress(&self) {
        self.progress_requests.send_modify(|n| *n += 1);
    }

    async fn current_revision(&self) -> Result<Revision> {
        let resp = self
            .client
            .kv_client()
            .get("/", Some(GetOptions::new().with_count_only()))
            .await
            .map_err(backend)?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or_default())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let started = Instant::now();
        let result = self
            .client
            .kv_client()
            .compact(revision, Some(CompactionOptions::new().with_physical()))
            .await;
        self.metrics
            .observe("compact", started.elapsed().as_secs_f64());
        match result {
            Ok(_) => {}
            Err(e) if is_compacted(&e) => {}
            Err(e) if is_future(&e) => {
                let current = self.current_revision().await?;
                return Err(StoreError::FutureRevision {
                    requested: revision,
                    current,
                });
            }
            Err(e) => return Err(backend(e)),
        }
        self.compacted.fetch_max(revision, Ordering::Relaxed);
        self.metrics
            .compacted
            .set(self.compacted.load(Ordering::Relaxed));
        Ok(())
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.compacted.load(Ordering::Relaxed))
    }

    // Each write takes a fresh etcd lease: the key leaves the lease it had, which then
    // expires holding nothing. etcd deletes the key when its lease expires, so every reader
    // of the cluster sees the same expiry, whichever API server wrote the key.
    async fn put_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<()> {
        check_size(&value)?;
        let started = Instant::now();
        let seconds = ttl.as_secs_f64().ceil().max(1.0) as i64;
        let lease = self
            .client
            .lease_client()
            .grant(seconds, None)
            .await
            .map_err(backend)?;
        let resp = self
            .client
            .kv_client()
            .put(
                key,
                value.to_vec(),
                Some(PutOptions::new().with_lease(lease.id())),
            )
            .await
            .map_err(backend)?;
        self.metrics
            .observe("update", started.elapsed().as_secs_f64());
        if let Some(h) = resp.header() {
            self.metrics.revision.set(h.revision());
        }
        Ok(())
    }

    async fn list_expiring(&self, prefix: &str) -> Result<Vec<(String, Bytes)>> {
        let started = Instant::now();
        let resp = self
            .client
            .kv_client()
            .get(
                prefix,
                Some(GetOptions::new().with_range(prefix_end(prefix))),
            )
            .await
            .map_err(backend)?;
        self.metrics
            .observe("list", started.elapsed().as_secs_f64());
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| {
                let kv = convert(kv);
                (kv.key, kv.value)
            })
            .collect())
    }

    async fn delete_expiring(&self, key: &str) -> Result<()> {
        let started = Instant::now();
        let resp = self
            .client
            .kv_client()
            .delete(key, None)
            .await
            .map_err(backend)?;
        self.metrics
            .observe("delete", started.elapsed().as_secs_f64());
        if let Some(h) = resp.header() {
            self.metrics.revision.set(h.revision());
        }
        Ok(())
    }
}
