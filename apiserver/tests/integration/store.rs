//! One suite, run against both backends: the embedded SQLite store and a private etcd.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use minik8s_apiserver::metrics::Metrics;
use minik8s_apiserver::storage::{
    DynStore, EtcdStore, Event, ListOptions, MAX_VALUE_BYTES, SqliteOptions, SqliteStore,
    StoreError, WatchStream,
};
use testkit::Etcd;

struct Fixture {
    store: DynStore,
    _dir: tempfile::TempDir,
    _etcd: Option<Etcd>,
}

async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SqliteOptions::new(dir.path().join("state.db"));
    // A small window makes slow watchers read history from the table.
    opts.event_window = 8;
    opts.compaction_batch = 3;
    opts.progress_interval = Duration::from_millis(100);
    let store = SqliteStore::open(opts, Metrics::new().store.clone()).unwrap();
    Fixture {
        store: Arc::new(store),
        _dir: dir,
        _etcd: None,
    }
}

async fn etcd() -> Fixture {
    let etcd = Etcd::start().expect("etcd (apt-get install etcd-server)");
    let store = EtcdStore::connect(
        std::slice::from_ref(&etcd.endpoint),
        Metrics::new().store.clone(),
    )
    .await
    .unwrap();
    Fixture {
        store: Arc::new(store),
        _dir: tempfile::tempdir().unwrap(),
        _etcd: Some(etcd),
    }
}

macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name(super::sqlite().await.store).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn etcd() {
                super::$name(super::etcd().await.store).await;
            }
        }
    };
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn next(w: &mut WatchStream) -> Event {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(10), w.next())
            .await
            .expect("watch event in time")
            .expect("stream open")
            .expect("no error");
        if !matches!(e, Event::Progress(_)) {
            return e;
        }
    }
}

async fn crud(store: DynStore) {
    let start = store.current_revision().await.unwrap();
    let a = store.create("/r/a", b("1")).await.unwrap();
    assert!(a.mod_revision > start);
    assert_eq!(a.create_revision, a.mod_revision);
    assert!(matches!(
        store.create("/r/a", b("x")).await,
        Err(StoreError::AlreadyExists(_))
    ));
    let got = store.get("/r/a").await.unwrap().unwrap();
    assert_eq!(
        (got.value.clone(), got.mod_revision),
        (b("1"), a.mod_revision)
    );
    // Update guarded by the mod revision.
    let a2 = store.update("/r/a", b("2"), a.mod_revision).await.unwrap();
    assert!(a2.mod_revision > a.mod_revision);
    assert_eq!(a2.create_revision, a.create_revision);
    match store.update("/r/a", b("3"), a.mod_revision).await {
        Err(StoreError::Conflict {
            current: Some(cur), ..
        }) => assert_eq!(cur.value, b("2")),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        store.update("/r/missing", b("x"), 1).await,
        Err(StoreError::NotFound(_))
    ));
    // Delete guarded too.
    assert!(matches!(
        store.delete("/r/a", Some(a.mod_revision)).await,
        Err(StoreError::Conflict { .. })
    ));
    let (last, rev) = store.delete("/r/a", Some(a2.mod_revision)).await.unwrap();
    assert_eq!(last.value, b("2"));
    assert!(rev > a2.mod_revision);
    assert!(store.get("/r/a").await.unwrap().is_none());
    assert!(matches!(
        store.delete("/r/a", None).await,
        Err(StoreError::NotFound(_))
    ));
    // A key can be created again after a delete.
    let again = store.create("/r/a", b("4")).await.unwrap();
    assert!(again.create_revision > rev);
    assert_eq!(store.current_revision().await.unwrap(), again.mod_revision);
    // Values over the limit are refused with a clear error and change nothing.
    let big = Bytes::from(vec![b'x'; MAX_VALUE_BYTES + 1]);
    match store.create("/r/big", big).await {
        Err(StoreError::ValueTooLarge { size, limit }) => {
            assert_eq!((size, limit), (MAX_VALUE_BYTES + 1, MAX_VALUE_BYTES))
        }
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    assert!(store.get("/r/big").await.unwrap().is_none());
}
both!(crud);

async fn list_paging_and_revisions(store: DynStore) {
    for i in 0..10 {
        store
            .create(&format!("/p/ns/k{i:02}"), b(&i.to_string()))
            .await
            .unwrap();
    }
    store.create("/p/other", b("x")).await.unwrap();
    store.create("/q/outside", b("x")).await.unwrap();
    let all = store
        .list(ListOptions {
            prefix: "/p/ns/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.kvs.len(), 10);
    assert_eq!(all.remaining, 0);
    let at = all.revision;
    // Pages of 4 at one revision, unaffected by later writes.
    let first = store
        .list(ListOptions {
            prefix: "/p/ns/".into(),
            limit: Some(4),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(first.kvs.len(), 4);
    assert_eq!(first.remaining, 6);
    let k3 = store.get("/p/ns/k03").await.unwrap().unwrap();
    store
        .update(
            "/p/ns/k05",
            b("changed"),
            store.get("/p/ns/k05").await.unwrap().unwrap().mod_revision,
        )
        .await
        .unwrap();
    store.delete("/p/ns/k06", None).await.unwrap();
    store.create("/p/ns/k10", b("new")).await.unwrap();
    let second = store
        .list(ListOptions {
            prefix: "/p/ns/".into(),
            limit: Some(4),
            after_key: Some(k3.key.clone()),
            revision: Some(first.revision),
        })
        .await
        .unwrap();
    let keys: Vec<&str> = second.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/p/ns/k04", "/p/ns/k05", "/p/ns/k06", "/p/ns/k07"]);
    assert_eq!(
        second.kvs[1].value,
        b("5"),
        "old revision shows the old value"
    );
    assert_eq!(
        second.remaining,
        2,
        "{:?}",
        second.kvs.iter().map(|k| &k.key).collect::<Vec<_>>()
    );
    // The newest state sees the changes.
    let now = store
        .list(ListOptions {
            prefix: "/p/ns/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(now.kvs.len(), 10);
    assert!(now.revision > at);
    assert!(now.kvs.iter().any(|kv| kv.key == "/p/ns/k10"));
    assert!(!now.kvs.iter().any(|kv| kv.key == "/p/ns/k06"));
    // Reading the future is refused.
    let future = store
        .list(ListOptions {
            prefix: "/p/".into(),
            revision: Some(now.revision + 100),
            ..Default::default()
        })
        .await;
    assert!(
        matches!(future, Err(StoreError::FutureRevision { .. })),
        "{future:?}"
    );
}
both!(list_paging_and_revisions);

async fn watch_order_and_resume(store: DynStore) {
    let base = store.current_revision().await.unwrap();
    let mut live = store.watch("/w/", base).await.unwrap();
    let a = store.create("/w/a", b("1")).await.unwrap();
    store.create("/x/ignored", b("1")).await.unwrap();
    let a2 = store.update("/w/a", b("2"), a.mod_revision).await.unwrap();
    let (_, del) = store.delete("/w/a", None).await.unwrap();
    match next(&mut live).await {
        Event::Put { kv, prev: None } => {
            assert_eq!((kv.key.as_str(), kv.mod_revision), ("/w/a", a.mod_revision))
        }
        e => panic!("{e:?}"),
    }
    match next(&mut live).await {
        Event::Put {
            kv,
            prev: Some(prev),
        } => {
            assert_eq!(kv.value, b("2"));
            assert_eq!((prev.value, prev.mod_revision), (b("1"), a.mod_revision));
        }
        e => panic!("{e:?}"),
    }
    match next(&mut live).await {
        Event::Delete { prev, revision } => {
            assert_eq!(
                (prev.value, prev.mod_revision, revision),
                (b("2"), a2.mod_revision, del)
            );
        }
        e => panic!("{e:?}"),
    }
    // Resuming from a revision replays exactly the later events.
    let mut resumed = store.watch("/w/", a.mod_revision).await.unwrap();
    assert_eq!(next(&mut resumed).await.revision(), a2.mod_revision);
    assert_eq!(next(&mut resumed).await.revision(), del);
    // A watcher whose prefix is quiet hears progress when the store moves on.
    let elsewhere = store.create("/x/later", b("1")).await.unwrap();
    let progressed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if let Some(Ok(Event::Progress(rev))) = resumed.next().await {
                return rev;
            }
        }
    })
    .await
    .expect("a progress report");
    assert!(progressed >= elsewhere.mod_revision);
}
both!(watch_order_and_resume);

/// Many writers, several watchers: every watcher sees every event once, in revision order.
async fn concurrent_writes_no_gaps(store: DynStore) {
    let base = store.current_revision().await.unwrap();
    let mut watchers = Vec::new();
    for _ in 0..3 {
        watchers.push(store.watch("/c/", base).await.unwrap());
    }
    let writers = 16;
    let per = 40;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revs = Vec::new();
            for i in 0..per {
                let kv = store.create(&format!("/c/{w}-{i}"), b("v")).await.unwrap();
                revs.push(kv.mod_revision);
            }
            revs
        }));
    }
    let mut acked = BTreeSet::new();
    for t in tasks {
        for r in t.await.unwrap() {
            assert!(acked.insert(r), "revision {r} handed out twice");
        }
    }
    assert_eq!(acked.len(), writers * per);
    for w in &mut watchers {
        let mut seen = Vec::new();
        while seen.len() < writers * per {
            seen.push(next(w).await.revision());
        }
        assert!(seen.windows(2).all(|p| p[0] < p[1]), "events out of order");
        assert_eq!(seen.iter().copied().collect::<BTreeSet<_>>(), acked);
    }
}
both!(concurrent_writes_no_gaps);

async fn compaction(store: DynStore) {
    let a = store.create("/k/a", b("1")).await.unwrap();
    let mut rev = a.mod_revision;
    for i in 0..10 {
        rev = store
            .update("/k/a", b(&i.to_string()), rev)
            .await
            .unwrap()
            .mod_revision;
    }
    store.create("/k/doomed", b("x")).await.unwrap();
    store.delete("/k/doomed", None).await.unwrap();
    let target = store.current_revision().await.unwrap();
    store.update("/k/a", b("after"), rev).await.unwrap();
    store.compact(target).await.unwrap();
    assert!(store.compacted_revision().await.unwrap() >= target);
    // History before the floor is gone for reads and watches; the newest state is intact.
    let old = store
        .list(ListOptions {
            prefix: "/k/".into(),
            revision: Some(a.mod_revision),
            ..Default::default()
        })
        .await;
    assert!(matches!(old, Err(StoreError::Compacted { .. })), "{old:?}");
    let watch_old = async {
        match store.watch("/k/", a.mod_revision).await {
            Err(e) => Some(e),
            Ok(mut s) => loop {
                match tokio::time::timeout(Duration::from_secs(10), s.next()).await {
                    Ok(Some(Ok(Event::Progress(_)))) => continue,
                    Ok(Some(Err(e))) => break Some(e),
                    _ => break None,
                }
            },
        }
    };
    let got = watch_old.await;
    assert!(matches!(got, Some(StoreError::Compacted { .. })), "{got:?}");
    assert_eq!(store.get("/k/a").await.unwrap().unwrap().value, b("after"));
    assert!(store.get("/k/doomed").await.unwrap().is_none());
    let at_floor = store
        .list(ListOptions {
            prefix: "/k/".into(),
            revision: Some(target),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(at_floor.kvs.len(), 1);
    // Compacting again to the same revision is a no-op; to the future is refused.
    store.compact(target).await.unwrap();
    let future = store.current_revision().await.unwrap() + 10;
    assert!(matches!(
        store.compact(future).await,
        Err(StoreError::FutureRevision { .. })
    ));
}
both!(compaction);

/// The embedded store keeps acknowledged writes across a reopen, and revisions keep rising.
#[tokio::test]
async fn sqlite_reopen_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let last = {
        let store =
            SqliteStore::open(SqliteOptions::new(&path), Metrics::new().store.clone()).unwrap();
        store.create("/z/a", b("1")).await.unwrap();
        let kv = store.create("/z/b", b("2")).await.unwrap();
        store.delete("/z/a", None).await.unwrap();
        store.compact(kv.mod_revision).await.unwrap();
        store.current_revision().await.unwrap()
    };
    let store = SqliteStore::open(SqliteOptions::new(&path), Metrics::new().store.clone()).unwrap();
    use minik8s_apiserver::storage::Store;
    assert_eq!(store.current_revision().await.unwrap(), last);
    assert!(store.get("/z/a").await.unwrap().is_none());
    assert_eq!(store.get("/z/b").await.unwrap().unwrap().value, b("2"));
    let next = store.create("/z/c", b("3")).await.unwrap();
    assert_eq!(next.mod_revision, last + 1);
}

/// A range larger than one gRPC message (4 MiB) still lists whole, at one revision.
async fn large_ranges(store: DynStore) {
    let value = Bytes::from(vec![b'v'; 3000]);
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..250 {
                store
                    .create(&format!("/big/{w}-{i:04}"), value.clone())
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = store
        .list(ListOptions {
            prefix: "/big/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.kvs.len(), 2000);
    assert!(
        all.kvs.windows(2).all(|w| w[0].key < w[1].key),
        "keys in order"
    );
    let page = store
        .list(ListOptions {
            prefix: "/big/".into(),
            limit: Some(1500),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((page.kvs.len(), page.remaining), (1500, 500));
}
both!(large_ranges);
