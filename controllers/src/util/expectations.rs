//! Expectations, as upstream's `ControllerExpectations`: a controller that just created or
//! deleted pods must not act again until its cache has seen those changes, or it would create
//! (or delete) the same replicas twice. Creations are counted, because the new pods' names are
//! not known before the watch may deliver them; deletions are tracked by UID.
//!
//! Observations come from the pod watch stream (see [`observe_pods`]), before the reflector
//! applies them, so "is this pod new" is answered against the cache as it was.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::informers::Change;
use tokio::time::Instant;

/// Upstream's `ExpectationsTimeout`: after this, a controller acts even if it never saw its
/// own changes (a lost watch event must not stall it forever).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Entry {
    creations: i64,
    deletions: HashSet<String>,
    since: Instant,
}

/// Pending creations and deletions per controller key (`namespace/name`).
#[derive(Debug, Default)]
pub struct Expectations {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Expectations {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the controller may act on `key`: everything it expected was observed, the
    /// expectations expired, or it never set any.
    pub fn satisfied(&self, key: &str) -> bool {
        let entries = self.entries.lock().expect("expectations");
        match entries.get(key) {
            None => true,
            Some(e) => {
                (e.creations <= 0 && e.deletions.is_empty())
                    || e.since.elapsed() > EXPECTATIONS_TIMEOUT
            }
        }
    }

    /// Call before issuing `count` creations.
    pub fn expect_creations(&self, key: &str, count: usize) {
        let mut entries = self.entries.lock().expect("expectations");
        entries.insert(
            key.to_string(),
            Entry {
                creations: count as i64,
                deletions: HashSet::new(),
                since: Instant::now(),
            },
        );
    }

    /// Call before deleting the pods with these UIDs.
    pub fn expect_deletions(&self, key: &str, uids: impl IntoIterator<Item = String>) {
        let mut entries = self.entries.lock().expect("expectations");
        entries.insert(
            key.to_string(),
            Entry {
                creations: 0,
                deletions: uids.into_iter().collect(),
                since: Instant::now(),
            },
        );
    }

    /// Call before issuing `creations` creations and deleting the pods with these UIDs in one
    /// go (a StatefulSet sync may do both).
    pub fn expect(&self, key: &str, creations: usize, deletions: impl IntoIterator<Item = String>) {
        let mut entries = self.entries.lock().expect("expectations");
        entries.insert(
            key.to_string(),
            Entry {
                creations: creations as i64,
                deletions: deletions.into_iter().collect(),
                since: Instant::now(),
            },
        );
    }

    /// A creation was seen in the cache, or a creation failed and will never be seen.
    pub fn creation_observed(&self, key: &str) {
        if let Some(e) = self.entries.lock().expect("expectations").get_mut(key) {
            e.creations -= 1;
        }
    }

    /// A deletion was seen (the pod is gone or terminating), or a deletion failed.
    pub fn deletion_observed(&self, key: &str, uid: &str) {
        if let Some(e) = self.entries.lock().expect("expectations").get_mut(key) {
            e.deletions.remove(uid);
        }
    }

    /// The controller object is gone: drop its expectations.
    pub fn forget(&self, key: &str) {
        self.entries.lock().expect("expectations").remove(key);
    }

    /// Expected creations not yet seen (for tests and logs).
    pub fn pending(&self, key: &str) -> (i64, usize) {
        self.entries
            .lock()
            .expect("expectations")
            .get(key)
            .map(|e| (e.creations, e.deletions.len()))
            .unwrap_or((0, 0))
    }
}

/// The `namespace/name` key of the object a pod's controller reference points to, when it is
/// of `kind`.
pub fn controller_key(pod: &Pod, kind: &str) -> Option<String> {
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    (owner.kind == kind).then(|| format!("{}/{}", pod.namespace().unwrap_or_default(), owner.name))
}

/// Records what a change of the shared pod cache means for the expectations of controllers
/// of `kind`: a pod new to the cache is a creation; a pod deleted, or first seen terminating,
/// is a deletion.
pub fn observe_pods(expectations: &Expectations, kind: &str, change: &Change<Pod>) {
    let (pod, previous, deleted) = match change {
        Change::Applied { object, previous } => (object, previous.as_ref(), false),
        Change::Deleted(pod) => (pod, None, true),
        Change::Synced => return,
    };
    let Some(key) = controller_key(pod, kind) else {
        return;
    };
    let uid = pod.uid().unwrap_or_default();
    let known = previous.is_some_and(|b| b.uid() == pod.uid());
    if !known && !deleted {
        expectations.creation_observed(&key);
    }
    let was_terminating =
        known && previous.is_some_and(|b| b.metadata.deletion_timestamp.is_some());
    if deleted || (pod.metadata.deletion_timestamp.is_some() && !was_terminating) {
        expectations.deletion_observed(&key, &uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn pod(name: &str, uid: &str, owner: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.owner_references = Some(vec![OwnerReference {
            kind: "ReplicaSet".into(),
            name: owner.into(),
            controller: Some(true),
            ..Default::default()
        }]);
        p
    }

    fn applied(pod: Pod, previous: Option<Pod>) -> Change<Pod> {
        Change::Applied {
            object: std::sync::Arc::new(pod),
            previous: previous.map(std::sync::Arc::new),
        }
    }

    #[test]
    fn creations_are_counted_from_the_cache_changes() {
        let e = Expectations::new();
        assert!(e.satisfied("ns/rs"));
        e.expect_creations("ns/rs", 2);
        assert!(!e.satisfied("ns/rs"));
        observe_pods(&e, "ReplicaSet", &applied(pod("a", "1", "rs"), None));
        // The same pod again (an update) is not a second creation.
        let a = pod("a", "1", "rs");
        observe_pods(&e, "ReplicaSet", &applied(a.clone(), Some(a)));
        assert_eq!(e.pending("ns/rs").0, 1);
        // Pods of other owners or kinds do not count.
        observe_pods(&e, "ReplicaSet", &applied(pod("b", "2", "other"), None));
        observe_pods(&e, "Job", &applied(pod("c", "3", "rs"), None));
        assert!(!e.satisfied("ns/rs"));
        // A pod re-created under the same name is a creation.
        observe_pods(
            &e,
            "ReplicaSet",
            &applied(pod("a", "9", "rs"), Some(pod("a", "1", "rs"))),
        );
        assert!(e.satisfied("ns/rs"));
    }

    #[test]
    fn deletions_are_tracked_by_uid() {
        let e = Expectations::new();
        let a = pod("a", "1", "rs");
        e.expect_deletions("ns/rs", ["1".to_string()]);
        assert!(!e.satisfied("ns/rs"));
        let mut terminating = a.clone();
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        observe_pods(&e, "ReplicaSet", &applied(terminating, Some(a.clone())));
        assert!(e.satisfied("ns/rs"));
        e.expect_deletions("ns/rs", ["1".to_string()]);
        observe_pods(&e, "ReplicaSet", &Change::Deleted(std::sync::Arc::new(a)));
        assert!(e.satisfied("ns/rs"));
    }
}
