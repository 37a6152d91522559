//! events.k8s.io/v1 Events are stored as core/v1 Events, as upstream does, so that events a
//! controller records through either API show up in both (`kubectl describe` reads core/v1).

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSeries as CoreSeries, EventSource};
use k8s_openapi::api::events::v1::{Event, EventSeries};

/// The core/v1 form of an events.k8s.io/v1 Event.
pub fn to_core(e: &Event) -> CoreEvent {
    CoreEvent {
        metadata: e.metadata.clone(),
        event_time: e.event_time.clone(),
        series: e.series.as_ref().map(|s| CoreSeries {
            count: Some(s.count),
            last_observed_time: Some(s.last_observed_time.clone()),
        }),
        reporting_component: e.reporting_controller.clone(),
        reporting_instance: e.reporting_instance.clone(),
        action: e.action.clone(),
        reason: e.reason.clone(),
        involved_object: e.regarding.clone().unwrap_or_default(),
        related: e.related.clone(),
        message: e.note.clone(),
        type_: e.type_.clone(),
        source: e.deprecated_source.clone(),
        first_timestamp: e.deprecated_first_timestamp.clone(),
        last_timestamp: e.deprecated_last_timestamp.clone(),
        count: e.deprecated_count,
    }
}

/// The events.k8s.io/v1 form of a core/v1 Event.
pub fn from_core(e: CoreEvent) -> Event {
    let regarding = (e.involved_object != Default::default()).then_some(e.involved_object);
    Event {
        metadata: e.metadata,
        event_time: e.event_time,
        series: e.series.and_then(|s| {
            Some(EventSeries {
                count: s.count.unwrap_or(0),
                last_observed_time: s.last_observed_time?,
            })
        }),
        reporting_controller: e.reporting_component,
        reporting_instance: e.reporting_instance,
        action: e.action,
        reason: e.reason,
        regarding,
        related: e.related,
        note: e.message,
        type_: e.type_,
        deprecated_source: e.source.filter(|s| *s != EventSource::default()),
        deprecated_first_timestamp: e.first_timestamp,
        deprecated_last_timestamp: e.last_timestamp,
        deprecated_count: e.count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let e: Event = serde_json::from_value(serde_json::json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "x.1", "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
            "action": "Reconcile", "reason": "Started", "note": "hello", "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}
        }))
        .unwrap();
        let core = to_core(&e);
        assert_eq!(core.message.as_deref(), Some("hello"));
        assert_eq!(core.involved_object.name.as_deref(), Some("p"));
        assert_eq!(core.reporting_component.as_deref(), Some("example.com/ctl"));
        assert_eq!(from_core(core), e);
    }
}
