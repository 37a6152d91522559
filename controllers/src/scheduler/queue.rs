//! The queue of pods waiting for a node, shaped like upstream's scheduling queue: an active
//! queue (highest priority first, then oldest), a backoff queue for pods that failed recently,
//! and a set of unschedulable pods that wait for something in the cluster to change (a node
//! added or changed, a pod gone) before they are tried again. Retrying only on change, with
//! per-pod exponential backoff, keeps a pending pod from costing anything while nothing
//! changes; the periodic flush of pods left unschedulable for a long time is upstream's safety
//! net for changes the scheduler does not watch.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use tokio::time::Instant;

/// Upstream's `podInitialBackoffDuration` and `podMaxBackoffDuration`.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream's `podMaxInUnschedulablePodsDuration`.
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Active,
    Backoff,
    Unschedulable,
}

/// A pod in the queue, or out of it while it is being scheduled or bound.
#[derive(Clone, Debug)]
pub struct QueuedPod {
    pub pod: Arc<Pod>,
    /// Scheduling attempts so far.
    pub attempts: u32,
    priority: i32,
    /// Order among pods of equal priority: when the pod was first queued.
    seq: u64,
    backoff_until: Instant,
    unschedulable_since: Instant,
    state: State,
    /// Other pods keep it out (affinity or spreading): a pod placed or changed may let it in.
    waits_on_pods: bool,
}

impl QueuedPod {
    pub fn uid(&self) -> String {
        self.pod.uid().unwrap_or_default()
    }
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// How long a pod waits after `attempts` failed attempts: doubling from 1s up to 10s.
pub fn backoff(attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

/// Whether an update to a waiting pod may change where it fits (status changes, such as the
/// scheduler's own PodScheduled condition, do not).
pub fn changed_for_scheduling(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
}

#[derive(Debug, Default)]
pub struct SchedulingQueue {
    entries: HashMap<String, QueuedPod>,
    active: BTreeSet<(Reverse<i32>, u64, String)>,
    backoff: BTreeSet<(Instant, String)>,
    /// The unschedulable pods that wait on other pods.
    pod_waiters: HashSet<String>,
    next_seq: u64,
}

impl SchedulingQueue {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.entries.contains_key(uid)
    }

    pub fn has_active(&self) -> bool {
        !self.active.is_empty()
    }

    /// The pods waiting in each queue: active, backing off, unschedulable.
    pub fn counts(&self) -> (usize, usize, usize) {
        let (active, backoff) = (self.active.len(), self.backoff.len());
        (active, backoff, self.entries.len() - active - backoff)
    }

    pub fn uids(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    fn unlink(&mut self, uid: &str) -> Option<QueuedPod> {
        let e = self.entries.remove(uid)?;
        match e.state {
            State::Active => {
                self.active
                    .remove(&(Reverse(e.priority), e.seq, uid.to_string()));
            }
            State::Backoff => {
                self.backoff.remove(&(e.backoff_until, uid.to_string()));
            }
            State::Unschedulable => {
                self.pod_waiters.remove(uid);
            }
        }
        Some(e)
    }

    fn link(&mut self, mut e: QueuedPod, state: State) {
        let uid = e.uid();
        e.state = state;
        match state {
            State::Active => {
                self.active
                    .insert((Reverse(e.priority), e.seq, uid.clone()));
            }
            State::Backoff => {
                self.backoff.insert((e.backoff_until, uid.clone()));
            }
            State::Unschedulable => {
                if e.waits_on_pods {
                    self.pod_waiters.insert(uid.clone());
                }
            }
        }
        self.entries.insert(uid, e);
    }

    /// Into the active queue unless still backing off.
    fn activate(&mut self, e: QueuedPod, now: Instant) {
        let state = if e.backoff_until > now {
            State::Backoff
        } else {
            State::Active
        };
        self.link(e, state);
    }

    /// A pod seen waiting for a node: new ones become active; a changed unschedulable one is
    /// tried again (after its backoff).
    pub fn add_or_update(&mut self, pod: Arc<Pod>, now: Instant) {
        let uid = pod.uid().unwrap_or_default();
        match self.unlink(&uid) {
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let e = QueuedPod {
                    priority: priority(&pod),
                    pod,
                    attempts: 0,
                    seq,
                    backoff_until: now,
                    unschedulable_since: now,
                    state: State::Active,
                    waits_on_pods: false,
                };
                self.link(e, State::Active);
            }
            Some(mut e) => {
                let changed = changed_for_scheduling(&e.pod, &pod);
                e.pod = pod;
                let state = e.state;
                if state == State::Unschedulable && changed {
                    self.activate(e, now);
                } else {
                    self.link(e, state);
                }
            }
        }
    }

    pub fn remove(&mut self, uid: &str) -> Option<QueuedPod> {
        self.unlink(uid)
    }

    /// The next pod to schedule, taken out of the queue.
    pub fn pop(&mut self) -> Option<QueuedPod> {
        let (_, _, uid) = self.active.pop_first()?;
        let mut e = self.entries.remove(&uid)?;
        e.attempts += 1;
        Some(e)
    }

    /// No node fits: wait for a change in the cluster.
    /// `waits_on_pods`: what keeps it out is other pods, not only nodes.
    pub fn requeue_unschedulable(&mut self, mut e: QueuedPod, now: Instant, waits_on_pods: bool) {
        e.backoff_until = now + backoff(e.attempts);
        e.unschedulable_since = now;
        e.waits_on_pods = waits_on_pods;
        self.link(e, State::Unschedulable);
    }

    /// An error (such as a failed bind): try again after the backoff.
    pub fn requeue_backoff(&mut self, mut e: QueuedPod, now: Instant) {
        e.backoff_until = now + backoff(e.attempts);
        self.link(e, State::Backoff);
    }

    /// Something changed that may let unschedulable pods fit.
    pub fn move_all_unschedulable(&mut self, now: Instant) {
        self.move_unschedulable_where(now, |_| true);
    }

    /// Something changed that may let the unschedulable pods for which `helps` says so fit
    /// (upstream's queueing hints).
    pub fn move_unschedulable_if(&mut self, now: Instant, helps: impl Fn(&Pod) -> bool) {
        self.move_unschedulable_where(now, |e| helps(&e.pod));
    }

    /// A pod was placed, changed or removed: retry the pods that other pods kept out
    /// (upstream's AssignedPodAdd/Update for InterPodAffinity and PodTopologySpread).
    pub fn move_pod_waiters(&mut self, now: Instant) {
        for uid in std::mem::take(&mut self.pod_waiters) {
            if let Some(e) = self.unlink(&uid) {
                self.activate(e, now);
            }
        }
    }

    fn move_unschedulable_where(&mut self, now: Instant, pred: impl Fn(&QueuedPod) -> bool) {
        let uids: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == State::Unschedulable && pred(e))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            if let Some(e) = self.unlink(&uid) {
                self.activate(e, now);
            }
        }
    }

    /// When the earliest backoff ends.
    pub fn next_backoff_expiry(&self) -> Option<Instant> {
        self.backoff.first().map(|(t, _)| *t)
    }

    /// Moves pods whose backoff has ended to the active queue.
    pub fn flush_backoff(&mut self, now: Instant) {
        while let Some((t, _)) = self.backoff.first() {
            if *t > now {
                break;
            }
            let (_, uid) = self.backoff.pop_first().expect("checked above");
            if let Some(e) = self.entries.remove(&uid) {
                self.link(e, State::Active);
            }
        }
    }

    /// Retries pods that have waited longer than [`MAX_UNSCHEDULABLE`] without a change.
    pub fn flush_unschedulable_leftovers(&mut self, now: Instant) {
        self.move_unschedulable_where(now, |e| {
            now.duration_since(e.unschedulable_since) > MAX_UNSCHEDULABLE
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, priority: i32) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "namespace": "default", "uid": uid},
                "spec": {"containers": [], "priority": priority},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn backoff_doubles_up_to_ten_seconds() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(5), MAX_BACKOFF);
        assert_eq!(backoff(100), MAX_BACKOFF);
    }

    #[test]
    fn higher_priority_first_then_oldest() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add_or_update(pod("a", 0), now);
        q.add_or_update(pod("b", 10), now);
        q.add_or_update(pod("c", 0), now);
        // Updating an active pod does not reorder it.
        q.add_or_update(pod("a", 0), now);
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|e| e.uid())).collect();
        assert_eq!(order, vec!["b", "a", "c"]);
        assert!(q.is_empty());
    }

    #[test]
    fn unschedulable_pods_wait_for_a_change_and_their_backoff() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add_or_update(pod("a", 0), now);
        let e = q.pop().unwrap();
        assert_eq!(e.attempts, 1);
        q.requeue_unschedulable(e, now, false);
        assert!(q.contains("a"));
        assert!(!q.has_active());
        // Its own status update changes nothing.
        let mut with_status = (*pod("a", 0)).clone();
        with_status.status = Some(Default::default());
        q.add_or_update(Arc::new(with_status), now);
        assert!(!q.has_active());
        assert_eq!(q.next_backoff_expiry(), None);

        // A cluster change within the backoff: it waits out the backoff first.
        q.move_all_unschedulable(now);
        assert!(!q.has_active());
        assert_eq!(q.next_backoff_expiry(), Some(now + backoff(1)));
        q.flush_backoff(now + Duration::from_millis(500));
        assert!(!q.has_active());
        q.flush_backoff(now + backoff(1));
        let e = q.pop().unwrap();
        assert_eq!(e.attempts, 2);

        // After the backoff a change makes it active at once.
        q.requeue_unschedulable(e, now, false);
        q.move_all_unschedulable(now + Duration::from_secs(3));
        assert!(q.has_active());
    }

    #[test]
    fn spec_changes_and_long_waits_retry_unschedulable_pods() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add_or_update(pod("a", 0), now);
        let e = q.pop().unwrap();
        q.requeue_unschedulable(e, now, false);
        let later = now + Duration::from_secs(2);
        q.add_or_update(pod("a", 5), later);
        assert!(q.has_active());

        let e = q.pop().unwrap();
        q.requeue_unschedulable(e, now, false);
        q.flush_unschedulable_leftovers(now + Duration::from_secs(60));
        assert!(!q.has_active());
        q.flush_unschedulable_leftovers(now + MAX_UNSCHEDULABLE + Duration::from_secs(1));
        assert!(q.has_active());
        assert!(q.remove("a").is_some());
        assert!(q.is_empty());
    }

    #[test]
    fn only_pods_kept_out_by_other_pods_move_when_a_pod_is_placed() {
        let now = Instant::now();
        let mut q = SchedulingQueue::default();
        q.add_or_update(pod("nodes", 0), now);
        q.add_or_update(pod("pods", 0), now);
        let (a, b) = (q.pop().unwrap(), q.pop().unwrap());
        q.requeue_unschedulable(a, now, false);
        q.requeue_unschedulable(b, now, true);
        let later = now + Duration::from_secs(3);
        q.move_pod_waiters(later);
        let moved: Vec<String> = std::iter::from_fn(|| q.pop().map(|e| e.uid())).collect();
        assert_eq!(moved, ["pods"]);
        assert!(q.contains("nodes"));
        // Nothing is left to move a second time.
        q.move_pod_waiters(later);
        assert!(!q.has_active());
    }
}
