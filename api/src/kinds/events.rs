//! Events, core/v1 and events.k8s.io/v1. events.k8s.io/v1 Events are stored as core/v1
//! Events, as upstream does, so that events a controller records through either API show up in
//! both (`kubectl describe` reads core/v1); they print as the core/v1 Events they are too.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSeries as CoreSeries, EventSource};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use serde_json::Value;

use crate::strategy::{GcPolicy, Kind};
use crate::table::{Column, NAME, Row, micro_since, name, num, or_empty, set, since, string, text};
use crate::validation::{Errors, FieldError, Path};

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

impl Kind for CoreEvent {
    const COLUMNS: &'static [Column] = EVENT_COLUMNS;
    const FIELDS: &'static [&'static str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    const CREATE_ON_UPDATE: bool = true;
    const GC_POLICY: GcPolicy = GcPolicy::Unsupported;

    fn validate(&self, errs: &mut Errors) {
        if self.event_time.is_none() {
            let event_ns = self.metadata.namespace.as_deref().unwrap_or("");
            let involved_ns = self.involved_object.namespace.as_deref().unwrap_or("");
            let ok = if involved_ns.is_empty() {
                event_ns.is_empty() || event_ns == "default"
            } else {
                involved_ns == event_ns
            };
            if !ok {
                errs.push(FieldError::invalid(
                    &Path::new("involvedObject").child("namespace"),
                    involved_ns,
                    "does not match event.namespace",
                ));
            }
        } else {
            for (name, v) in [
                ("reportingController", &self.reporting_component),
                ("reportingInstance", &self.reporting_instance),
                ("action", &self.action),
                ("reason", &self.reason),
            ] {
                if v.as_deref().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(&Path::new(name), ""));
                }
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        let o = &self.involved_object;
        match name {
            "involvedObject.kind" => o.kind.clone(),
            "involvedObject.namespace" => o.namespace.clone(),
            "involvedObject.name" => o.name.clone(),
            "involvedObject.uid" => o.uid.clone(),
            "involvedObject.apiVersion" => o.api_version.clone(),
            "involvedObject.resourceVersion" => o.resource_version.clone(),
            "involvedObject.fieldPath" => o.field_path.clone(),
            "reason" => self.reason.clone(),
            "reportingComponent" => self.reporting_component.clone(),
            "source" => self.source.as_ref().and_then(|s| s.component.clone()),
            "type" => self.type_.clone(),
            _ => None,
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(event_cells(self, now))
    }
}

impl Kind for Event {
    const COLUMNS: &'static [Column] = EVENT_COLUMNS;
    const GC_POLICY: GcPolicy = GcPolicy::Unsupported;

    fn from_storage(bytes: &[u8]) -> Result<Self, String> {
        let core: CoreEvent = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        Ok(from_core(core))
    }

    fn to_storage(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(&to_core(self)).map_err(|e| e.to_string())
    }

    fn validate(&self, errs: &mut Errors) {
        if self.event_time.is_none() {
            errs.push(FieldError::required(&Path::new("eventTime"), ""));
        }
        match self.type_.as_deref() {
            Some("Normal") | Some("Warning") => {}
            t => errs.push(FieldError::invalid(
                &Path::new("type"),
                t.unwrap_or(""),
                format!("has invalid value: {}", t.unwrap_or("")),
            )),
        }
        for (name, v) in [
            ("reportingController", &self.reporting_controller),
            ("reportingInstance", &self.reporting_instance),
            ("action", &self.action),
            ("reason", &self.reason),
        ] {
            if v.as_deref().is_none_or(str::is_empty) {
                errs.push(FieldError::required(&Path::new(name), ""));
            }
        }
        if let Some(s) = &self.series
            && s.count < 2
        {
            errs.push(FieldError::invalid(
                &Path::new("series").child("count"),
                s.count,
                "should be at least 2",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        // Printed as the core/v1 Event it is stored as, as upstream does.
        Row::new(event_cells(&to_core(self), now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const EVENT_COLUMNS: &[Column] = &[
    string("Last Seen", doc::EVENT_LAST_TIMESTAMP),
    string("Type", doc::EVENT_TYPE),
    string("Reason", doc::EVENT_REASON),
    string("Object", doc::EVENT_INVOLVED_OBJECT),
    string("Subobject", doc::OBJECT_REFERENCE_FIELD_PATH).wide(),
    string("Source", doc::EVENT_SOURCE).wide(),
    string("Message", doc::EVENT_MESSAGE),
    string("First Seen", doc::EVENT_FIRST_TIMESTAMP).wide(),
    string("Count", doc::EVENT_COUNT).wide(),
    NAME.wide(),
];

fn event_cells(e: &CoreEvent, now: Timestamp) -> Vec<Value> {
    let first_set = set(e.first_timestamp.as_ref().map(|t| t.0));
    let first = if first_set.is_some() {
        since(first_set, now)
    } else {
        micro_since(e.event_time.as_ref(), now)
    };
    let mut last = match set(e.last_timestamp.as_ref().map(|t| t.0)) {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = i64::from(e.count.unwrap_or(0));
    if let Some(series) = &e.series {
        last = micro_since(series.last_observed_time.as_ref(), now);
        count = i64::from(series.count.unwrap_or(0));
    } else if count == 0 {
        // Singleton events have no count in the new API.
        count = 1;
    }

    let object = &e.involved_object;
    let kind = or_empty(object.kind.as_ref()).to_lowercase();
    let object_name = or_empty(object.name.as_ref());
    let target = if object_name.is_empty() {
        kind
    } else {
        format!("{kind}/{object_name}")
    };

    let source = e.source.clone().unwrap_or_default();
    let first_non_empty = |a: Option<String>, b: Option<&String>| {
        a.filter(|s| !s.is_empty())
            .unwrap_or_else(|| or_empty(b).to_string())
    };
    let component = first_non_empty(source.component, e.reporting_component.as_ref());
    let instance = first_non_empty(source.host, e.reporting_instance.as_ref());
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };

    vec![
        text(last),
        text(or_empty(e.type_.as_ref())),
        text(or_empty(e.reason.as_ref())),
        text(target),
        text(or_empty(object.field_path.as_ref())),
        text(source),
        text(or_empty(e.message.as_ref()).trim()),
        text(first),
        num(count),
        name(&e.metadata),
    ]
}

mod doc {
    pub const EVENT_LAST_TIMESTAMP: &str =
        "The time at which the most recent occurrence of this event was recorded.";
    pub const EVENT_TYPE: &str =
        "Type of this event (Normal, Warning), new types could be added in the future";
    pub const EVENT_REASON: &str = "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.";
    pub const EVENT_INVOLVED_OBJECT: &str = "The object that this event is about.";
    pub const EVENT_SOURCE: &str =
        "The component reporting this event. Should be a short machine understandable string.";
    pub const EVENT_MESSAGE: &str = "A human-readable description of the status of this operation.";
    pub const EVENT_FIRST_TIMESTAMP: &str =
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)";
    pub const EVENT_COUNT: &str = "The number of times this event has occurred.";
    pub const OBJECT_REFERENCE_FIELD_PATH: &str = "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::columns;
    use crate::table::testing::*;

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

    #[test]
    fn event_rows() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "event2"},
            "involvedObject": {"kind": "Deployment", "name": "Deployment Name", "fieldPath": "spec.containers{foo}"},
            "source": {"component": "kubelet", "host": "Node1"},
            "reason": "Event Reason", "message": " Message Data\n", "type": "Warning", "count": 6,
            "firstTimestamp": ago(3 * 86400), "lastTimestamp": ago(2 * 86400)});
        assert_eq!(
            row_of::<CoreEvent>(core),
            vec![
                json!("2d"),
                json!("Warning"),
                json!("Event Reason"),
                json!("deployment/Deployment Name"),
                json!("spec.containers{foo}"),
                json!("kubelet, Node1"),
                json!("Message Data"),
                json!("3d"),
                json!(6),
                json!("event2")
            ]
        );
        // A series from the new API: its last observation and count; the reporting controller
        // stands in for an empty source.
        let series = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "event6"},
            "involvedObject": {"kind": "Node"}, "reportingComponent": "kubelet", "reportingInstance": "test",
            "eventTime": ago(3 * 86400) , "type": "Normal",
            "series": {"count": 2, "lastObservedTime": ago(2 * 86400)}});
        let r = row_of::<CoreEvent>(series);
        assert_eq!(r[0], "2d");
        assert_eq!(r[3], "node");
        assert_eq!(r[5], "kubelet, test");
        assert_eq!(r[7], "3d");
        assert_eq!(r[8], 2);
        // The events.k8s.io form prints the same; a singleton counts once.
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "eventTime": "2025-06-01T11:55:00.000000Z", "reportingController": "ctl", "reportingInstance": "",
            "action": "Scale", "reason": "Scaled", "note": "scaled up", "type": "Normal",
            "regarding": {"kind": "Deployment", "name": "web"}});
        assert_eq!(
            row_of::<Event>(v1),
            vec![
                json!("5m"),
                json!("Normal"),
                json!("Scaled"),
                json!("deployment/web"),
                json!(""),
                json!("ctl"),
                json!("scaled up"),
                json!("5m"),
                json!(1),
                json!("e")
            ]
        );
        assert_eq!(columns::<Event>(), columns::<Event>());
        let none = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x"}, "involvedObject": {}});
        assert_eq!(row_of::<CoreEvent>(none)[0], "<unknown>");
    }
}
