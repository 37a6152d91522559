//! Recording events as upstream's `record.EventRecorder` does for controllers: a failed
//! event write is logged and never fails the reconcile that caused it.
//!
//! [`Recorder`] replaces kube-runtime's: that one keeps every event it wrote for six minutes
//! and scans all of them on each write, so a storm of 30,000 pods (a `Scheduled` and a
//! `SuccessfulCreate` each) held about 60,000 events and made each write slower than the last.
//! Ours keeps the most recently used 4,096, upstream's `maxLruCacheEntries`, which is all a
//! series needs: an event repeats soon after its first occurrence or not at all.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::{Client, Resource};

/// Events remembered for series (upstream's `maxLruCacheEntries`).
const CACHE_ENTRIES: usize = 4096;
/// An event repeated within this time continues its series (kube-runtime's and client-go's
/// events library's six minutes); after it, a new event starts.
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Publishes `events.k8s.io/v1` Events for one reporting component, merging repeats of the
/// same event into a series (`series.count`), as upstream's events library does.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    cache: Arc<Mutex<Cache>>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            cache: Arc::default(),
        }
    }

    /// Writes `ev` about `regarding`: a new Event, or the next count of the series it repeats.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = key(ev, regarding);
        let now = Instant::now();
        let repeated = self.cache.lock().expect("event cache").get(&key, now);
        let event = match repeated {
            Some(mut event) => {
                let count = event.series.as_ref().map_or(2, |s| s.count + 1);
                event.series = Some(EventSeries {
                    count,
                    last_observed_time: MicroTime(Timestamp::now()),
                });
                event
            }
            None => self.new_event(ev, regarding),
        };
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), ns);
        if event.series.is_some() {
            let name = event.metadata.name.clone().unwrap_or_default();
            events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&event))
                .await?;
        } else {
            events.create(&PostParams::default(), &event).await?;
        }
        self.cache.lock().expect("event cache").put(key, event, now);
        Ok(())
    }

    fn new_event(&self, ev: &Event, regarding: &ObjectReference) -> K8sEvent {
        let now = Timestamp::now();
        let controller = &self.reporter.controller;
        K8sEvent {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(match ev.type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            ..Default::default()
        }
    }
}

/// What makes two events one series (client-go's events `getKey`): type, reason, action,
/// the object it is about and the related one.
fn key(ev: &Event, regarding: &ObjectReference) -> String {
    fn object(r: &ObjectReference) -> String {
        format!(
            "{}/{}/{}/{}/{}/{}",
            r.api_version.as_deref().unwrap_or_default(),
            r.kind.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default(),
            r.uid.as_deref().unwrap_or_default(),
            r.field_path.as_deref().unwrap_or_default()
        )
    }
    // The note too, as upstream's controllers' (core/v1) recorder aggregates: a repeat is
    // the same message, while "New size: 3" and then "New size: 1" are two events.
    format!(
        "{:?}\0{}\0{}\0{}\0{}\0{}",
        ev.type_,
        ev.reason,
        ev.action,
        object(regarding),
        ev.secondary.as_ref().map(object).unwrap_or_default(),
        ev.note.as_deref().unwrap_or_default()
    )
}

/// The most recently used events, at most [`CACHE_ENTRIES`].
#[derive(Default)]
struct Cache {
    /// Event, when it was last written, and its use stamp.
    events: HashMap<String, (K8sEvent, Instant, u64)>,
    /// Keys in the order they were used, with the stamp of that use; a key used again has a
    /// stale earlier entry here, skipped on eviction.
    order: VecDeque<(String, u64)>,
    stamp: u64,
}

impl Cache {
    /// The event `key` last wrote, if its series is still open at `now`.
    fn get(&self, key: &str, now: Instant) -> Option<K8sEvent> {
        let (event, at, _) = self.events.get(key)?;
        (now.duration_since(*at) < SERIES_WINDOW).then(|| event.clone())
    }

    fn put(&mut self, key: String, event: K8sEvent, now: Instant) {
        self.stamp += 1;
        self.order.push_back((key.clone(), self.stamp));
        self.events.insert(key, (event, now, self.stamp));
        while self.events.len() > CACHE_ENTRIES {
            let Some((oldest, stamp)) = self.order.pop_front() else {
                break;
            };
            if self.events.get(&oldest).is_some_and(|e| e.2 == stamp) {
                self.events.remove(&oldest);
            }
        }
        // Stale entries of keys used again: drop them before they outnumber the live ones.
        if self.order.len() > 2 * CACHE_ENTRIES {
            let events = &self.events;
            self.order
                .retain(|(k, stamp)| events.get(k).is_some_and(|e| e.2 == *stamp));
        }
    }
}

/// Publishes an event about `obj`; `related` names a second object (the pod created, the Job
/// deleted), which also keeps events about different objects from merging into one series.
pub async fn record<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: reason.to_string(),
        secondary: related,
    };
    if let Err(e) = recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::debug!(reason, error = %e, "recording event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u32) -> K8sEvent {
        K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!("e{n}")),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_events_for_the_series_window() {
        let t0 = Instant::now();
        let mut cache = Cache::default();
        cache.put("first".into(), event(0), t0);
        for n in 1..CACHE_ENTRIES as u32 {
            cache.put(format!("k{n}"), event(n), t0);
        }
        // Used again, "first" is the newest; the next new key evicts the oldest other one.
        cache.put("first".into(), event(0), t0);
        cache.put("new".into(), event(9999), t0);
        assert_eq!(cache.events.len(), CACHE_ENTRIES);
        assert!(cache.get("first", t0).is_some());
        assert!(cache.get("k1", t0).is_none());
        assert!(cache.get("k2", t0).is_some());
        // Repeats of one key never grow the bookkeeping past twice the cache.
        for _ in 0..3 * CACHE_ENTRIES {
            cache.put("first".into(), event(0), t0);
        }
        assert!(cache.order.len() <= 2 * CACHE_ENTRIES);
        assert_eq!(cache.events.len(), CACHE_ENTRIES);
        assert!(cache.get("k2", t0).is_some());
        // After the series window, a repeat starts a new event.
        assert!(cache.get("first", t0 + SERIES_WINDOW).is_none());
    }
}
