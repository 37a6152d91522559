//! Expiring keys of the embedded store: a table beside the revision log, because a key that
//! vanishes by itself has no delete to append to the log and no watcher to tell. Expiry is a
//! wall-clock deadline compared on every read, so an expired row is absent at once, whether
//! or not a later write has swept it away yet.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rusqlite::{Connection, params};

use super::{Result, StoreError, check_size};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS expiring (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    expires_ms INTEGER NOT NULL
);
";

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The expiring keys over their own connection: writes are rare (one per API server every
/// few seconds) and must not queue behind the log writer's batches.
#[derive(Clone)]
pub(super) struct ExpiringKeys {
    conn: Arc<Mutex<Connection>>,
}

impl ExpiringKeys {
    pub(super) fn open(path: &Path) -> Result<ExpiringKeys> {
        let conn = Connection::open(path).map_err(backend)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(backend)?;
        conn.execute_batch(SCHEMA).map_err(backend)?;
        Ok(ExpiringKeys {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || f(&conn.lock().expect("expiring keys lock")))
            .await
            .map_err(backend)?
            .map_err(backend)
    }

    pub(super) async fn put(&self, key: &str, value: Bytes, ttl: Duration) -> Result<()> {
        check_size(&value)?;
        let key = key.to_string();
        let expires = now_ms().saturating_add(ttl.as_millis() as i64);
        self.blocking(move |conn| {
            let now = now_ms();
            conn.execute("DELETE FROM expiring WHERE expires_ms <= ?1", [now])?;
            conn.execute(
                "INSERT INTO expiring (name, value, expires_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value,
                     expires_ms = excluded.expires_ms",
                params![key, value.to_vec(), expires],
            )?;
            Ok(())
        })
        .await
    }

    pub(super) async fn list(&self, prefix: &str) -> Result<Vec<(String, Bytes)>> {
        let prefix = prefix.to_string();
        self.blocking(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT name, value FROM expiring
                 WHERE name >= ?1 AND expires_ms > ?2 ORDER BY name",
            )?;
            let rows = stmt.query_map(params![prefix, now_ms()], |r| {
                Ok((r.get::<_, String>(0)?, Bytes::from(r.get::<_, Vec<u8>>(1)?)))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (name, value) = row?;
                if !name.starts_with(&prefix) {
                    break;
                }
                out.push((name, value));
            }
            Ok(out)
        })
        .await
    }

    pub(super) async fn delete(&self, key: &str) -> Result<()> {
        let key = key.to_string();
        self.blocking(move |conn| {
            conn.execute("DELETE FROM expiring WHERE name = ?1", [key])?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_vanish_at_their_deadline_and_stay_within_their_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let keys = ExpiringKeys::open(&dir.path().join("state.db")).unwrap();
        keys.put("/a/1", Bytes::from_static(b"one"), Duration::from_secs(60))
            .await
            .unwrap();
        keys.put("/a/2", Bytes::from_static(b"two"), Duration::ZERO)
            .await
            .unwrap();
        keys.put(
            "/b/1",
            Bytes::from_static(b"other"),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        // A zero TTL is already past its deadline.
        assert_eq!(
            keys.list("/a/").await.unwrap(),
            vec![("/a/1".to_string(), Bytes::from_static(b"one"))]
        );
        // Written again, a key lives again, with the new value.
        keys.put(
            "/a/2",
            Bytes::from_static(b"again"),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        let names: Vec<String> = keys
            .list("/a/")
            .await
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(names, ["/a/1", "/a/2"]);
        keys.delete("/a/1").await.unwrap();
        keys.delete("/a/missing").await.unwrap();
        assert_eq!(
            keys.list("/a/").await.unwrap(),
            vec![("/a/2".to_string(), Bytes::from_static(b"again"))]
        );
    }
}
