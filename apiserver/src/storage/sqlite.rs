//! The embedded store: one SQLite file, zero setup, durable on acknowledgement.
//!
//! Modelled on kine: a single append-only log table whose row id is the revision. Unlike kine
//! there is exactly one writer (a thread owning the connection), so revisions have no gaps and
//! concurrent writes are checked against an in-memory index and committed together in one
//! transaction (group commit: one fsync for the whole batch). The writer keeps, under one lock,
//! the newest value of every live key (so gets and lists at the current revision never touch
//! the disk) and a window of recent events; watchers are woken on commit and read the window,
//! or the table when they have fallen behind it. Nothing polls.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use tokio::sync::{mpsc, oneshot, watch};

use super::{
    DEFAULT_PROGRESS_INTERVAL, Event, KeyValue, ListOptions, ListResult, Result, Revision, Store,
    StoreError, WatchStream, check_size, prefix_end,
};
use crate::metrics::StoreMetrics;

/// Settings of the embedded store.
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    pub path: PathBuf,
    /// Events kept in memory for watchers; older ones are read back from the table.
    pub event_window: usize,
    /// Most writes committed in one transaction.
    pub max_batch: usize,
    /// Rows removed per compaction transaction, so writers never wait long.
    pub compaction_batch: usize,
    pub progress_interval: Duration,
}

impl SqliteOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteOptions {
            path: path.into(),
            // The watch cache in front follows the store with one watch per resource and
            // keeps its own window for clients; this one only has to cover that watch
            // falling a few commits (of up to `max_batch` writes) behind. Each event holds
            // the value before and after: 16 k of them held over 100 MiB of old pods.
            event_window: 4 * 1024,
            max_batch: 1024,
            compaction_batch: 2000,
            progress_interval: DEFAULT_PROGRESS_INTERVAL,
        }
    }
}

/// What the writer publishes; readers take the lock briefly.
struct State {
    live: BTreeMap<String, KeyValue>,
    revision: Revision,
    compacted: Revision,
    /// Recent events, ascending; every event after `window_floor` is here.
    window: VecDeque<Event>,
    window_floor: Revision,
}

struct Shared {
    state: RwLock<State>,
    notify: watch::Sender<Revision>,
    /// Bumped by [`Store::request_progress`]; every watcher reports where it stands.
    progress_requests: watch::Sender<u64>,
    readers: Vec<Mutex<Connection>>,
    options: SqliteOptions,
    metrics: Arc<StoreMetrics>,
}

enum Op {
    Create {
        key: String,
        value: Bytes,
        reply: oneshot::Sender<Result<KeyValue>>,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Revision,
        reply: oneshot::Sender<Result<KeyValue>>,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
        reply: oneshot::Sender<Result<(KeyValue, Revision)>>,
    },
    Compact {
        revision: Revision,
        reply: oneshot::Sender<Result<()>>,
    },
}

pub struct SqliteStore {
    shared: Arc<Shared>,
    ops: std_mpsc::Sender<Op>,
    expiring: super::sqlite_expiring::ExpiringKeys,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    created INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,
    value BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS kv_name_id ON kv (name, id);
CREATE INDEX IF NOT EXISTS kv_prev ON kv (prev_revision);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
";

fn open(path: &PathBuf, read_only: bool) -> rusqlite::Result<Connection> {
    let conn = if read_only {
        Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?
    } else {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
        conn.execute_batch(SCHEMA)?;
        conn
    };
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}

fn meta_get(conn: &Connection, key: &str) -> rusqlite::Result<Revision> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

impl SqliteStore {
    pub fn open(options: SqliteOptions, metrics: Arc<StoreMetrics>) -> Result<Self> {
        if let Some(dir) = options.path.parent() {
            std::fs::create_dir_all(dir).map_err(backend)?;
        }
        let conn = open(&options.path, false).map_err(backend)?;
        let expiring = super::sqlite_expiring::ExpiringKeys::open(&options.path)?;
        let max_id: Revision = conn
            .query_row("SELECT COALESCE(MAX(id), 0) FROM kv", [], |r| r.get(0))
            .map_err(backend)?;
        let compacted = meta_get(&conn, "compacted").map_err(backend)?;
        let revision = max_id
            .max(compacted)
            .max(meta_get(&conn, "revision").map_err(backend)?);
        let mut live = BTreeMap::new();
        {
            let mut stmt = conn
                .prepare(
                    "SELECT k.name, k.value, k.create_revision, k.id FROM kv k
                     JOIN (SELECT MAX(id) AS id FROM kv GROUP BY name) m ON m.id = k.id
                     WHERE k.deleted = 0",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok(KeyValue {
                        key: r.get(0)?,
                        value: Bytes::from(r.get::<_, Vec<u8>>(1)?),
                        create_revision: r.get(2)?,
                        mod_revision: r.get(3)?,
                    })
                })
                .map_err(backend)?;
            for kv in rows {
                let kv = kv.map_err(backend)?;
                live.insert(kv.key.clone(), kv);
            }
        }
        let readers = (0..2)
            .map(|_| open(&options.path, true).map(Mutex::new))
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(backend)?;
        metrics.revision.set(revision);
        let (notify, _) = watch::channel(revision);
        let shared = Arc::new(Shared {
            state: RwLock::new(State {
                live,
                revision,
                compacted,
                window: VecDeque::new(),
                window_floor: revision,
            }),
            notify,
            progress_requests: watch::channel(0).0,
            readers,
            options,
            metrics,
        });
        let (ops, rx) = std_mpsc::channel();
        let writer_shared = shared.clone();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || {
                Writer {
                    conn,
                    shared: writer_shared,
                    rx,
                    compaction: None,
                }
                .run()
            })
            .map_err(backend)?;
        Ok(SqliteStore {
            shared,
            ops,
            expiring,
        })
    }

    fn send(&self, op: Op) -> Result<()> {
        self.ops
            .send(op)
            .map_err(|_| StoreError::Backend("store writer has stopped".into()))
    }
}

async fn recv<T>(rx: oneshot::Receiver<Result<T>>) -> Result<T> {
    rx.await
        .map_err(|_| StoreError::Backend("store writer has stopped".into()))?
}

/// A pending compaction: the target and the callers waiting for it.
struct Compaction {
    target: Revision,
    waiters: Vec<oneshot::Sender<Result<()>>>,
}

struct Writer {
    conn: Connection,
    shared: Arc<Shared>,
    rx: std_mpsc::Receiver<Op>,
    compaction: Option<Compaction>,
}

/// The outcome of one write, applied to memory and answered after the commit.
enum Applied {
    Put {
        kv: KeyValue,
        prev: Option<KeyValue>,
        reply: oneshot::Sender<Result<KeyValue>>,
    },
    Delete {
        prev: KeyValue,
        revision: Revision,
        reply: oneshot::Sender<Result<(KeyValue, Revision)>>,
    },
}

enum Refused {
    Put(oneshot::Sender<Result<KeyValue>>, StoreError),
    Delete(oneshot::Sender<Result<(KeyValue, Revision)>>, StoreError),
}

impl Writer {
    fn run(mut self) {
        loop {
            let first = if self.compaction.is_some() {
                match self.rx.try_recv() {
                    Ok(op) => Some(op),
                    Err(std_mpsc::TryRecvError::Empty) => None,
                    Err(std_mpsc::TryRecvError::Disconnected) => return,
                }
            } else {
                match self.rx.recv() {
                    Ok(op) => Some(op),
                    Err(_) => return,
                }
            };
            if let Some(first) = first {
                let mut batch = vec![first];
                while batch.len() < self.shared.options.max_batch {
                    match self.rx.try_recv() {
                        Ok(op) => batch.push(op),
                        Err(_) => break,
                    }
                }
                self.write_batch(batch);
            }
            // One compaction step after every write batch: it always makes progress.
            if self.compaction.is_some() {
                self.compaction_step();
            }
        }
    }

    fn write_batch(&mut self, batch: Vec<Op>) {
        let started = Instant::now();
        let (batch, compactions): (Vec<Op>, Vec<Op>) = batch
            .into_iter()
            .partition(|op| !matches!(op, Op::Compact { .. }));
        {
            let state = self.shared.state.read().expect("state lock");
            let (compacted, current) = (state.compacted, state.revision);
            drop(state);
            for op in compactions {
                if let Op::Compact { revision, reply } = op {
                    self.queue_compaction(revision, compacted, current, reply);
                }
            }
        }
        if batch.is_empty() {
            return;
        }
        let mut revision = self.shared.state.read().expect("state lock").revision;
        let mut overlay: HashMap<String, Option<KeyValue>> = HashMap::new();
        let mut applied = Vec::new();
        let mut refused = Vec::new();
        let current =
            |overlay: &HashMap<String, Option<KeyValue>>, key: &str| match overlay.get(key) {
                Some(v) => v.clone(),
                None => self
                    .shared
                    .state
                    .read()
                    .expect("state lock")
                    .live
                    .get(key)
                    .cloned(),
            };
        let tx = match self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
        {
            Ok(tx) => tx,
            Err(e) => return fail_all(batch, &e),
        };
        let mut insert_error = None;
        {
            let prepared = tx.prepare_cached(
                "INSERT INTO kv (id, name, created, deleted, create_revision, prev_revision, value)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            );
            let mut insert = match prepared {
                Ok(s) => s,
                Err(e) => return fail_all(batch, &e),
            };
            for op in batch {
                match op {
                    Op::Create { key, value, reply } => {
                        if current(&overlay, &key).is_some() {
                            refused.push(Refused::Put(reply, StoreError::AlreadyExists(key)));
                            continue;
                        }
                        let rev = revision + 1;
                        if let Err(e) = insert.execute(params![rev, key, 1, 0, rev, 0, &value[..]])
                        {
                            insert_error = Some(e);
                            refused.push(Refused::Put(reply, StoreError::Backend(String::new())));
                            continue;
                        }
                        revision = rev;
                        let kv = KeyValue {
                            key: key.clone(),
                            value,
                            create_revision: rev,
                            mod_revision: rev,
                        };
                        overlay.insert(key, Some(kv.clone()));
                        applied.push(Applied::Put {
                            kv,
                            prev: None,
                            reply,
                        });
                    }
                    Op::Update {
                        key,
                        value,
                        expected,
                        reply,
                    } => {
                        let prev = match current(&overlay, &key) {
                            None => {
                                refused.push(Refused::Put(reply, StoreError::NotFound(key)));
                                continue;
                            }
                            Some(prev) if prev.mod_revision != expected => {
                                refused.push(Refused::Put(
                                    reply,
                                    StoreError::Conflict {
                                        key,
                                        current: Some(Box::new(prev)),
                                    },
                                ));
                                continue;
                            }
                            Some(prev) => prev,
                        };
                        let rev = revision + 1;
                        if let Err(e) = insert.execute(params![
                            rev,
                            key,
                            0,
                            0,
                            prev.create_revision,
                            prev.mod_revision,
                            &value[..]
                        ]) {
                            insert_error = Some(e);
                            refused.push(Refused::Put(reply, StoreError::Backend(String::new())));
                            continue;
                        }
                        revision = rev;
                        let kv = KeyValue {
                            key: key.clone(),
                            value,
                            create_revision: prev.create_revision,
                            mod_revision: rev,
                        };
                        overlay.insert(key, Some(kv.clone()));
                        applied.push(Applied::Put {
                            kv,
                            prev: Some(prev),
                            reply,
                        });
                    }
                    Op::Delete {
                        key,
                        expected,
                        reply,
                    } => {
                        let prev = match current(&overlay, &key) {
                            None => {
                                refused.push(Refused::Delete(reply, StoreError::NotFound(key)));
                                continue;
                            }
                            Some(prev) if expected.is_some_and(|e| e != prev.mod_revision) => {
                                refused.push(Refused::Delete(
                                    reply,
                                    StoreError::Conflict {
                                        key,
                                        current: Some(Box::new(prev)),
                                    },
                                ));
                                continue;
                            }
                            Some(prev) => prev,
                        };
                        let rev = revision + 1;
                        if let Err(e) = insert.execute(params![
                            rev,
                            key,
                            0,
                            1,
                            prev.create_revision,
                            prev.mod_revision,
                            &prev.value[..]
                        ]) {
                            insert_error = Some(e);
                            refused
                                .push(Refused::Delete(reply, StoreError::Backend(String::new())));
                            continue;
                        }
                        revision = rev;
                        overlay.insert(key, None);
                        applied.push(Applied::Delete {
                            prev,
                            revision: rev,
                            reply,
                        });
                    }
                    Op::Compact { .. } => unreachable!("compactions were set aside"),
                }
            }
        }
        if let Some(e) = insert_error {
            // Some insert failed mid-batch: roll everything back so memory and disk agree.
            drop(tx);
            tracing::error!(error = %e, "store write failed, batch rolled back");
            return fail_applied(applied, refused, &e);
        }
        if applied.is_empty() {
            drop(tx);
            return answer_refused(refused);
        }
        if let Err(e) = tx.commit() {
            tracing::error!(error = %e, "store commit failed");
            return fail_applied(applied, refused, &e);
        }
        let commit_seconds = started.elapsed().as_secs_f64();
        self.shared.metrics.observe("commit", commit_seconds);
        self.shared.metrics.batch_size.observe(applied.len() as f64);
        self.publish(applied, revision);
        answer_refused(refused);
    }

    fn queue_compaction(
        &mut self,
        target: Revision,
        compacted: Revision,
        current: Revision,
        reply: oneshot::Sender<Result<()>>,
    ) {
        if target > current {
            let _ = reply.send(Err(StoreError::FutureRevision {
                requested: target,
                current,
            }));
            return;
        }
        if target <= compacted {
            let _ = reply.send(Ok(()));
            return;
        }
        match &mut self.compaction {
            Some(c) => {
                c.target = c.target.max(target);
                c.waiters.push(reply);
            }
            None => {
                self.compaction = Some(Compaction {
                    target,
                    waiters: vec![reply],
                })
            }
        }
    }

    /// Applies a committed batch to memory, then wakes watchers and answers writers.
    fn publish(&mut self, applied: Vec<Applied>, revision: Revision) {
        let window_cap = self.shared.options.event_window;
        {
            let mut state = self.shared.state.write().expect("state lock");
            for a in &applied {
                match a {
                    Applied::Put { kv, prev, .. } => {
                        state.live.insert(kv.key.clone(), kv.clone());
                        state.window.push_back(Event::Put {
                            kv: kv.clone(),
                            prev: prev.clone(),
                        });
                    }
                    Applied::Delete { prev, revision, .. } => {
                        state.live.remove(&prev.key);
                        state.window.push_back(Event::Delete {
                            prev: prev.clone(),
                            revision: *revision,
                        });
                    }
                }
            }
            while state.window.len() > window_cap {
                if let Some(old) = state.window.pop_front() {
                    state.window_floor = old.revision();
                }
            }
            state.revision = revision;
        }
        self.shared.metrics.revision.set(revision);
        self.shared.notify.send_replace(revision);
        // Answer only once readers and watchers can see the writes.
        for a in applied {
            match a {
                Applied::Put { kv, reply, .. } => {
                    let _ = reply.send(Ok(kv));
                }
                Applied::Delete {
                    prev,
                    revision,
                    reply,
                } => {
                    let _ = reply.send(Ok((prev, revision)));
                }
            }
        }
    }

    /// Removes one batch of superseded rows at or below the compaction target.
    fn compaction_step(&mut self) {
        let Some(compaction) = self.compaction.as_ref() else {
            return;
        };
        let target = compaction.target;
        let batch = self.shared.options.compaction_batch as i64;
        let started = Instant::now();
        let result = (|| -> rusqlite::Result<bool> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Record the new floor first: a reader that sees rows gone also sees the floor.
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('compacted', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = MAX(value, excluded.value)",
                [target],
            )?;
            let superseded = tx.execute(
                "DELETE FROM kv WHERE id IN (
                    SELECT n.prev_revision FROM kv n
                    WHERE n.id <= ?1 AND n.created = 0 AND n.prev_revision > 0
                      AND EXISTS (SELECT 1 FROM kv p WHERE p.id = n.prev_revision)
                    LIMIT ?2)",
                params![target, batch],
            )?;
            let tombstones = if (superseded as i64) < batch {
                tx.execute(
                    "DELETE FROM kv WHERE id IN (
                        SELECT t.id FROM kv t WHERE t.deleted = 1 AND t.id <= ?1
                          AND NOT EXISTS (SELECT 1 FROM kv p WHERE p.id = t.prev_revision)
                        LIMIT ?2)",
                    params![target, batch - superseded as i64],
                )?
            } else {
                0
            };
            tx.commit()?;
            Ok(superseded + tombstones == 0)
        })();
        self.shared
            .metrics
            .observe("compact", started.elapsed().as_secs_f64());
        match result {
            Ok(done) => {
                {
                    // Events at or below the floor are history nobody may watch from any more.
                    let mut state = self.shared.state.write().expect("state lock");
                    state.compacted = state.compacted.max(target);
                    while state.window.front().is_some_and(|e| e.revision() <= target) {
                        state.window.pop_front();
                    }
                    state.window_floor = state.window_floor.max(target);
                }
                if done {
                    let c = self.compaction.take().expect("compaction in progress");
                    self.shared.metrics.compacted.set(target);
                    for w in c.waiters {
                        let _ = w.send(Ok(()));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, target, "compaction step failed; will be retried");
                let c = self.compaction.take().expect("compaction in progress");
                for w in c.waiters {
                    let _ = w.send(Err(backend(&e)));
                }
            }
        }
    }
}

fn fail_all(batch: Vec<Op>, e: &rusqlite::Error) {
    tracing::error!(error = %e, "store transaction failed");
    for op in batch {
        match op {
            Op::Create { reply, .. } | Op::Update { reply, .. } => {
                let _ = reply.send(Err(backend(e)));
            }
            Op::Delete { reply, .. } => {
                let _ = reply.send(Err(backend(e)));
            }
            Op::Compact { reply, .. } => {
                let _ = reply.send(Err(backend(e)));
            }
        }
    }
}

fn fail_applied(applied: Vec<Applied>, refused: Vec<Refused>, e: &rusqlite::Error) {
    for a in applied {
        match a {
            Applied::Put { reply, .. } => {
                let _ = reply.send(Err(backend(e)));
            }
            Applied::Delete { reply, .. } => {
                let _ = reply.send(Err(backend(e)));
            }
        }
    }
    // A refusal decided against writes that were rolled back may be wrong: report the failure.
    for r in refused {
        match r {
            Refused::Put(reply, _) => {
                let _ = reply.send(Err(backend(e)));
            }
            Refused::Delete(reply, _) => {
                let _ = reply.send(Err(backend(e)));
            }
        }
    }
}

fn answer_refused(refused: Vec<Refused>) {
    for r in refused {
        match r {
            Refused::Put(reply, err) => {
                let _ = reply.send(Err(err));
            }
            Refused::Delete(reply, err) => {
                let _ = reply.send(Err(err));
            }
        }
    }
}

/// The end of a prefix range as TEXT: SQLite orders every TEXT before every BLOB, so the
/// bound must be text for `name < ?` to mean anything.
fn text_end(prefix: &str) -> String {
    String::from_utf8_lossy(&prefix_end(prefix)).into_owned()
}

fn in_prefix(key: &str, prefix: &str) -> bool {
    key.starts_with(prefix)
}

impl Shared {
    fn with_reader<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T> {
        for r in &self.readers {
            if let Ok(mut conn) = r.try_lock() {
                return f(&mut conn).map_err(backend);
            }
        }
        let mut conn = self.readers[0].lock().expect("reader lock");
        f(&mut conn).map_err(backend)
    }

    /// Reads a range at an old revision from the table.
    fn list_at(&self, opts: &ListOptions, at: Revision) -> Result<ListResult> {
        let start = opts
            .after_key
            .clone()
            .map(|k| format!("{k}\0"))
            .unwrap_or_else(|| opts.prefix.clone());
        let end = text_end(&opts.prefix);
        let limit = opts.limit.map(|l| l as i64).unwrap_or(-1);
        self.with_reader(|conn| {
            let tx = conn.transaction()?;
            let compacted = meta_get(&tx, "compacted")?;
            if at < compacted {
                return Ok(Err(StoreError::Compacted { requested: at, compacted }));
            }
            let query = "SELECT k.name, k.value, k.create_revision, k.id FROM kv k
                 JOIN (SELECT MAX(id) AS id FROM kv WHERE name >= ?1 AND name < ?2 AND id <= ?3 GROUP BY name) m
                 ON m.id = k.id WHERE k.deleted = 0 ORDER BY k.name";
            let mut kvs = Vec::new();
            let mut remaining = 0usize;
            {
                let mut stmt = tx.prepare_cached(query)?;
                let mut rows = stmt.query(params![start, end, at])?;
                while let Some(r) = rows.next()? {
                    if limit >= 0 && kvs.len() as i64 >= limit {
                        remaining += 1;
                        continue;
                    }
                    kvs.push(KeyValue {
                        key: r.get(0)?,
                        value: Bytes::from(r.get::<_, Vec<u8>>(1)?),
                        create_revision: r.get(2)?,
                        mod_revision: r.get(3)?,
                    });
                }
            }
            Ok(Ok(ListResult { kvs, revision: at, remaining }))
        })?
    }

    /// Events after `after` up to `upto` under `prefix`, from the table; returns how far it read.
    fn history(
        &self,
        prefix: &str,
        after: Revision,
        upto: Revision,
        max: usize,
    ) -> Result<(Vec<Event>, Revision)> {
        let end = text_end(prefix);
        self.with_reader(|conn| {
            let tx = conn.transaction()?;
            let compacted = meta_get(&tx, "compacted")?;
            if after < compacted {
                return Ok(Err(StoreError::Compacted { requested: after, compacted }));
            }
            let mut stmt = tx.prepare_cached(
                "SELECT k.id, k.name, k.created, k.deleted, k.create_revision, k.prev_revision, k.value,
                        p.value
                 FROM kv k LEFT JOIN kv p ON p.id = k.prev_revision AND k.created = 0 AND k.deleted = 0
                 WHERE k.id > ?1 AND k.id <= ?2 AND k.name >= ?3 AND k.name < ?4
                 ORDER BY k.id LIMIT ?5",
            )?;
            let mut rows = stmt.query(params![after, upto, prefix, end, max as i64])?;
            let mut events = Vec::new();
            while let Some(r) = rows.next()? {
                let id: Revision = r.get(0)?;
                let key: String = r.get(1)?;
                let created: bool = r.get(2)?;
                let deleted: bool = r.get(3)?;
                let create_revision: Revision = r.get(4)?;
                let prev_revision: Revision = r.get(5)?;
                let value = Bytes::from(r.get::<_, Vec<u8>>(6)?);
                if deleted {
                    events.push(Event::Delete {
                        prev: KeyValue { key, value, create_revision, mod_revision: prev_revision },
                        revision: id,
                    });
                } else {
                    let prev = if created {
                        None
                    } else {
                        r.get::<_, Option<Vec<u8>>>(7)?.map(|v| KeyValue {
                            key: key.clone(),
                            value: Bytes::from(v),
                            create_revision,
                            mod_revision: prev_revision,
                        })
                    };
                    events.push(Event::Put {
                        kv: KeyValue { key, value, create_revision, mod_revision: id },
                        prev,
                    });
                }
            }
            let reached = if events.len() == max { events.last().map(Event::revision).unwrap_or(upto) } else { upto };
            Ok(Ok((events, reached)))
        })?
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        check_size(&value)?;
        let (reply, rx) = oneshot::channel();
        self.send(Op::Create {
            key: key.to_string(),
            value,
            reply,
        })?;
        recv(rx).await
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        check_size(&value)?;
        let (reply, rx) = oneshot::channel();
        self.send(Op::Update {
            key: key.to_string(),
            value,
            expected,
            reply,
        })?;
        recv(rx).await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let (reply, rx) = oneshot::channel();
        self.send(Op::Delete {
            key: key.to_string(),
            expected,
            reply,
        })?;
        recv(rx).await
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self
            .shared
            .state
            .read()
            .expect("state lock")
            .live
            .get(key)
            .cloned())
    }

    async fn list(&self, opts: ListOptions) -> Result<ListResult> {
        {
            let state = self.shared.state.read().expect("state lock");
            match opts.revision {
                Some(rev) if rev > state.revision => {
                    return Err(StoreError::FutureRevision {
                        requested: rev,
                        current: state.revision,
                    });
                }
                Some(rev) if rev < state.compacted => {
                    return Err(StoreError::Compacted {
                        requested: rev,
                        compacted: state.compacted,
                    });
                }
                Some(rev) if rev != state.revision => {}
                _ => {
                    let start = match &opts.after_key {
                        Some(k) => Bound::Excluded(k.clone()),
                        None => Bound::Included(opts.prefix.clone()),
                    };
                    let mut kvs = Vec::new();
                    let mut remaining = 0;
                    let limit = opts.limit.unwrap_or(usize::MAX);
                    for (key, kv) in state.live.range((start, Bound::Unbounded)) {
                        if !in_prefix(key, &opts.prefix) {
                            break;
                        }
                        if kvs.len() < limit {
                            kvs.push(kv.clone());
                        } else {
                            remaining += 1;
                        }
                    }
                    return Ok(ListResult {
                        kvs,
                        revision: state.revision,
                        remaining,
                    });
                }
            }
        }
        let shared = self.shared.clone();
        let at = opts.revision.expect("checked above");
        tokio::task::spawn_blocking(move || shared.list_at(&opts, at))
            .await
            .map_err(backend)?
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        {
            let state = self.shared.state.read().expect("state lock");
            if after < state.compacted {
                return Err(StoreError::Compacted {
                    requested: after,
                    compacted: state.compacted,
                });
            }
            if after > state.revision {
                return Err(StoreError::FutureRevision {
                    requested: after,
                    current: state.revision,
                });
            }
        }
        let (tx, rx) = mpsc::channel(256);
        let shared = self.shared.clone();
        let prefix = prefix.to_string();
        shared.metrics.watchers.inc();
        tokio::spawn(async move {
            let metrics = shared.metrics.clone();
            feed_watcher(shared, prefix, after, tx).await;
            metrics.watchers.dec();
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.state.read().expect("state lock").revision)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let (reply, rx) = oneshot::channel();
        self.send(Op::Compact { revision, reply })?;
        recv(rx).await
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.shared.state.read().expect("state lock").compacted)
    }

    async fn put_expiring(&self, key: &str, value: Bytes, ttl: Duration) -> Result<()> {
        self.expiring.put(key, value, ttl).await
    }

    async fn list_expiring(&self, prefix: &str) -> Result<Vec<(String, Bytes)>> {
        self.expiring.list(prefix).await
    }

    async fn delete_expiring(&self, key: &str) -> Result<()> {
        self.expiring.delete(key).await
    }

    fn request_progress(&self) {
        self.shared.progress_requests.send_modify(|n| *n += 1);
    }
}

/// Feeds one watcher from `after` on: the window when it can, the table when it has to.
async fn feed_watcher(
    shared: Arc<Shared>,
    prefix: String,
    mut position: Revision,
    tx: mpsc::Sender<Result<Event>>,
) {
    let mut changes = shared.notify.subscribe();
    let mut progress_requests = shared.progress_requests.subscribe();
    let mut report_now = false;
    let mut reported = position;
    let mut last_progress = Instant::now();
    let interval = shared.options.progress_interval;
    loop {
        // Take what is there after `position`.
        let (events, reached, behind) = {
            let state = shared.state.read().expect("state lock");
            if position >= state.window_floor {
                let start = state.window.partition_point(|e| e.revision() <= position);
                let events: Vec<Event> = state
                    .window
                    .range(start..)
                    .filter(|e| match e {
                        Event::Put { kv, .. } => in_prefix(&kv.key, &prefix),
                        Event::Delete { prev, .. } => in_prefix(&prev.key, &prefix),
                        Event::Progress(_) => false,
                    })
                    .take(1024)
                    .cloned()
                    .collect();
                let reached = if events.len() == 1024 {
                    events.last().map(Event::revision).unwrap_or(state.revision)
                } else {
                    state.revision
                };
                (events, reached, None)
            } else {
                (Vec::new(), position, Some(state.window_floor))
            }
        };
        let (events, reached) = match behind {
            None => (events, reached),
            Some(floor) => {
                let s = shared.clone();
                let p = prefix.clone();
                match tokio::task::spawn_blocking(move || s.history(&p, position, floor, 1024))
                    .await
                {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(backend(e))).await;
                        return;
                    }
                }
            }
        };
        for e in events {
            let revision = e.revision();
            if tx.send(Ok(e)).await.is_err() {
                return;
            }
            reported = revision;
            last_progress = Instant::now();
        }
        position = reached;
        if behind.is_some() {
            continue;
        }
        if std::mem::take(&mut report_now) && position > reported {
            if tx.send(Ok(Event::Progress(position))).await.is_err() {
                return;
            }
            reported = position;
            last_progress = Instant::now();
        }
        // Caught up: wait for a commit, reporting progress while nothing here changes.
        let wait = interval.saturating_sub(last_progress.elapsed());
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep(wait) => {
                if position > reported {
                    if tx.send(Ok(Event::Progress(position))).await.is_err() {
                        return;
                    }
                    reported = position;
                }
                last_progress = Instant::now();
            }
            requested = progress_requests.changed() => {
                if requested.is_err() {
                    return;
                }
                report_now = true;
            }
            _ = tx.closed() => return,
        }
    }
}
