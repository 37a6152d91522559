//! What every controller's sync shares: publishing events under the controller's upstream
//! reporter name, and how long to wait before retrying a failed sync.

use std::fmt::Display;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};

/// Publishes an event about `reference`; a failure to record it only logs (events are
/// best-effort, as upstream's broadcaster makes them).
pub async fn publish(
    recorder: &Recorder,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, reference).await {
        tracing::debug!(error = %e, "publishing event");
    }
}

/// The retry after a failed sync of `key`: soon after a conflict (the cache is behind a
/// write and the watch event is on its way), after a second otherwise.
pub fn retry(key: &str, kube_error: Option<&kube::Error>, error: &dyn Display) -> Action {
    if let Some(kube::Error::Api(s)) = kube_error
        && s.code == 409
    {
        tracing::debug!(%key, %error, "conflict");
        return Action::requeue(Duration::from_millis(100));
    }
    tracing::warn!(%key, %error, "sync failed");
    Action::requeue(Duration::from_secs(1))
}
