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
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
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

/// Records what a pod watch event means for the expectations of controllers of `kind`: a pod
/// not in `cache` yet is a creation; a pod deleted, or first seen terminating, is a deletion.
/// Call it on each event before the reflector applies it.
pub fn observe_pods(
    expectations: &Expectations,
    cache: &Store<Pod>,
    kind: &str,
    event: &watcher::Event<Pod>,
) {
    let seen = |pod: &Pod, deleted: bool| {
        let Some(key) = controller_key(pod, kind) else {
            return;
        };
        let before = cache.get(&ObjectRef::from_obj(pod));
        let uid = pod.uid().unwrap_or_default();
        let known = before.as_ref().is_some_and(|b| b.uid() == pod.uid());
        if !known && !deleted {
            expectations.creation_observed(&key);
        }
        let was_terminating =
            known && before.is_some_and(|b| b.metadata.deletion_timestamp.is_some());
        if deleted || (pod.metadata.deletion_timestamp.is_some() && !was_terminating) {
            expectations.deletion_observed(&key, &uid);
        }
    };
    match event {
        watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => seen(pod, false),
        watcher::Event::Delete(pod) => seen(pod, true),
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::reflector;

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

    #[test]
    fn creations_are_counted_from_the_watch() {
        let e = Expectations::new();
        let (reader, mut writer) = reflector::store::<Pod>();
        assert!(e.satisfied("ns/rs"));
        e.expect_creations("ns/rs", 2);
        assert!(!e.satisfied("ns/rs"));
        let a = watcher::Event::Apply(pod("a", "1", "rs"));
        observe_pods(&e, &reader, "ReplicaSet", &a);
        writer.apply_watcher_event(&a);
        // The same pod again (an update) is not a second creation.
        observe_pods(&e, &reader, "ReplicaSet", &a);
        assert_eq!(e.pending("ns/rs").0, 1);
        // Pods of other owners or kinds do not count.
        observe_pods(
            &e,
            &reader,
            "ReplicaSet",
            &watcher::Event::Apply(pod("b", "2", "other")),
        );
        observe_pods(
            &e,
            &reader,
            "Job",
            &watcher::Event::Apply(pod("c", "3", "rs")),
        );
        assert!(!e.satisfied("ns/rs"));
        // A failed creation lowers the expectation too.
        e.creation_observed("ns/rs");
        assert!(e.satisfied("ns/rs"));
    }

    #[test]
    fn deletions_are_tracked_by_uid() {
        let e = Expectations::new();
        let (reader, mut writer) = reflector::store::<Pod>();
        let a = pod("a", "1", "rs");
        writer.apply_watcher_event(&watcher::Event::Apply(a.clone()));
        e.expect_deletions("ns/rs", ["1".to_string()]);
        assert!(!e.satisfied("ns/rs"));
        let mut terminating = a.clone();
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        observe_pods(
            &e,
            &reader,
            "ReplicaSet",
            &watcher::Event::Apply(terminating),
        );
        assert!(e.satisfied("ns/rs"));
        e.expect_deletions("ns/rs", ["1".to_string()]);
        observe_pods(&e, &reader, "ReplicaSet", &watcher::Event::Delete(a));
        assert!(e.satisfied("ns/rs"));
    }
}
