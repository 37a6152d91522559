//! Recording events as upstream's `record.EventRecorder` does for controllers: a failed
//! event write is logged and never fails the reconcile that caused it.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

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
