//! Server-side Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): what
//! every kind's printer shares. Each built-in kind prints itself, next to its strategy in
//! `crate::kinds` (`Kind::COLUMNS` and `Kind::row`), as upstream's printers do (Kubernetes
//! v1.32, `pkg/printers/internalversion`), so `kubectl get` prints what it prints against
//! Kubernetes; a kind upstream has no printer for keeps the defaults here, upstream's default
//! table convertor: `Name` and `Created At`. Custom resources print their
//! `additionalPrinterColumns` (`crate::crd::printer`).
//!
//! The server always renders the wide form, as upstream does: every column is returned, and
//! kubectl hides those with `priority > 0` unless asked for `-o wide`.
//!
//! Everything here is a pure function of the object and the current time.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, MicroTime, ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::quantity::Quantity as ParsedQuantity;
use crate::selector::{Requirement, Selector};
use crate::strategy::Kind;

/// One column of a Table (`meta.k8s.io/v1 TableColumnDefinition`). Upstream serializes every
/// field, empty or not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDefinition {
    pub name: String,
    /// An OpenAPI type: `string`, `integer`, `boolean`, `date`, ...
    #[serde(rename = "type")]
    pub type_: String,
    /// An OpenAPI format; `name` marks the column holding the object's name.
    pub format: String,
    pub description: String,
    /// 0 for the columns `kubectl get` shows, 1 for those only `-o wide` shows.
    pub priority: i32,
}

/// A condition on a row (`meta.k8s.io/v1 TableRowCondition`); upstream marks finished pods
/// `Completed` so clients may de-emphasize them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The printed form of one object: one cell per column of its kind, and row conditions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub cells: Vec<Value>,
    pub conditions: Vec<RowCondition>,
}

impl Row {
    /// A row of these cells and no conditions.
    pub fn new(cells: Vec<Value>) -> Row {
        Row {
            cells,
            conditions: Vec::new(),
        }
    }
}

/// The column definitions of a kind's Table, wide columns included.
pub fn columns<K: Kind>() -> Vec<ColumnDefinition> {
    K::COLUMNS
        .iter()
        .map(|c| ColumnDefinition {
            name: c.name.to_string(),
            type_: c.type_.to_string(),
            format: c.format.to_string(),
            description: c.description.to_string(),
            priority: c.priority,
        })
        .collect()
}

/// The cells and row conditions of one object's row, in the order of [`columns`]; `now` is the
/// time ages are measured to. Fails only when the object does not decode as its kind.
pub fn row<K: Kind>(object: &Value, now: Timestamp) -> Result<Row, serde_json::Error> {
    Ok(K::deserialize(object)?.row(now))
}

/// Upstream's `duration.HumanDuration`: a succinct duration with two or three significant
/// figures (`45s`, `5m30s`, `3h`, `2d5h`, `3y20d`); `<invalid>` below -1s, `0s` just below zero.
pub fn human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        let dy = days % 365;
        return if dy == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{dy}d")
        };
    }
    format!("{years}y")
}

/// Upstream's `translateTimestampSince`: the human age of a timestamp, `<unknown>` when unset.
pub fn translate_timestamp_since(timestamp: Option<&Time>, now: Timestamp) -> String {
    since(set(timestamp.map(|t| t.0)), now)
}

// ---------------------------------------------------------------------------------------------
// Columns.

/// One column of a kind's Table, as a constant; [`columns`] turns them into definitions.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i32,
}

pub const fn column(name: &'static str, type_: &'static str, description: &'static str) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

/// A string column.
pub const fn string(name: &'static str, description: &'static str) -> Column {
    column(name, "string", description)
}

/// An integer column.
pub const fn integer(name: &'static str, description: &'static str) -> Column {
    column(name, "integer", description)
}

impl Column {
    /// Shown only by `-o wide`.
    pub const fn wide(mut self) -> Column {
        self.priority = 1;
        self
    }

    /// With this OpenAPI format: upstream marks a few columns besides the name `name`
    /// (VolumeAttachment's Attacher).
    pub const fn format(mut self, format: &'static str) -> Column {
        self.format = format;
        self
    }
}

pub const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    description: doc::NAME,
    priority: 0,
};
pub const AGE: Column = string("Age", doc::CREATION_TIMESTAMP);
pub const CONTAINERS: Column =
    string("Containers", "Names of each container in the template.").wide();
pub const IMAGES: Column = string(
    "Images",
    "Images referenced by each container in the template.",
)
.wide();

/// Upstream's default table convertor, for kinds without a printer.
pub const DEFAULT_COLUMNS: &[Column] =
    &[NAME, column("Created At", "date", doc::CREATION_TIMESTAMP)];

/// The row of [`DEFAULT_COLUMNS`].
pub fn default_row(meta: &ObjectMeta) -> Row {
    let created = set(meta.creation_timestamp.as_ref().map(|t| t.0)).map_or_else(
        || "0001-01-01T00:00:00Z".to_string(),
        |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    Row::new(vec![name(meta), text(created)])
}

// ---------------------------------------------------------------------------------------------
// Small helpers shared by the printers.

pub(crate) fn text(s: impl Into<String>) -> Value {
    Value::String(s.into())
}

pub(crate) fn num(n: impl Into<i64>) -> Value {
    Value::from(n.into())
}

pub(crate) fn or_empty(s: Option<&String>) -> &str {
    s.map_or("", String::as_str)
}

/// A timestamp that is set: Go's zero time (year 1), which marshals as `null`, counts as unset.
pub(crate) fn set(t: Option<Timestamp>) -> Option<Timestamp> {
    t.filter(|t| t.as_second() > -62_135_596_800)
}

pub(crate) fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    match t {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".to_string(),
    }
}

pub(crate) fn micro_since(t: Option<&MicroTime>, now: Timestamp) -> String {
    since(set(t.map(|t| t.0)), now)
}

pub(crate) fn age(meta: &ObjectMeta, now: Timestamp) -> Value {
    text(translate_timestamp_since(
        meta.creation_timestamp.as_ref(),
        now,
    ))
}

pub(crate) fn name(meta: &ObjectMeta) -> Value {
    text(or_empty(meta.name.as_ref()))
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
pub(crate) fn format_labels(labels: Option<&BTreeMap<String, String>>) -> String {
    let l = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if l.is_empty() {
        "<none>".to_string()
    } else {
        l
    }
}

/// `metav1.LabelSelectorAsSelector(..).String()`: requirements sorted by key, set values
/// sorted; a nil or empty selector is the empty string, an invalid one `None`.
pub(crate) fn label_selector_string(selector: Option<&LabelSelector>) -> Option<String> {
    let mut parsed = Selector::from_label_selector(selector).ok()?;
    parsed
        .requirements
        .sort_by(|a, b| requirement_key(a).cmp(requirement_key(b)));
    for r in &mut parsed.requirements {
        if let Requirement::In(_, values) | Requirement::NotIn(_, values) = r {
            values.sort();
        }
    }
    Some(parsed.to_string())
}

fn requirement_key(r: &Requirement) -> &str {
    match r {
        Requirement::Equals(k, _)
        | Requirement::NotEquals(k, _)
        | Requirement::In(k, _)
        | Requirement::NotIn(k, _)
        | Requirement::Exists(k)
        | Requirement::DoesNotExist(k)
        | Requirement::GreaterThan(k, _)
        | Requirement::LessThan(k, _) => k,
    }
}

/// `metav1.FormatLabelSelector`: `<none>` when it selects by nothing, `<error>` when invalid.
pub(crate) fn format_label_selector(selector: Option<&LabelSelector>) -> String {
    match label_selector_string(selector) {
        Some(s) if s.is_empty() => "<none>".to_string(),
        Some(s) => s,
        None => "<error>".to_string(),
    }
}

/// Container names and images, each comma-joined.
pub(crate) fn layout_containers(containers: &[Container]) -> (Value, Value) {
    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    let images: Vec<&str> = containers
        .iter()
        .map(|c| or_empty(c.image.as_ref()))
        .collect();
    (text(names.join(",")), text(images.join(",")))
}

pub(crate) fn template_containers(template: &PodTemplateSpec) -> &[Container] {
    template
        .spec
        .as_ref()
        .map_or(&[], |s| s.containers.as_slice())
}

/// The load-balancer ingress points: IPs, else hostnames, sorted and deduplicated. The server
/// prints wide, so upstream's 16-character clipping never applies.
pub(crate) fn load_balancer_points<'a>(
    points: impl Iterator<Item = (Option<&'a String>, Option<&'a String>)>,
) -> String {
    let set: BTreeSet<&str> = points
        .filter_map(|(ip, hostname)| {
            let ip = or_empty(ip);
            let hostname = or_empty(hostname);
            if !ip.is_empty() {
                Some(ip)
            } else if !hostname.is_empty() {
                Some(hostname)
            } else {
                None
            }
        })
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

// ---------------------------------------------------------------------------------------------
// Quantities, printed as upstream's `Quantity.String()`.

/// The canonical form of a quantity: `1024Mi` is `1Gi`, `1000` is `1k`, `0.5` is `500m`,
/// `1.5Gi` is `1536Mi`; values finer than a nano are rounded up. A string that does not parse
/// (or overflows) is returned unchanged.
pub(crate) fn canonical_quantity(s: &str) -> String {
    ParsedQuantity::parse(s).map_or_else(
        || s.to_string(),
        |q| q.canonical().unwrap_or_else(|| s.to_string()),
    )
}

// ---------------------------------------------------------------------------------------------
// Column descriptions shared by every kind: the API documentation of the fields.

mod doc {
    pub const NAME: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
    pub const CREATION_TIMESTAMP: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
}

/// What the kinds' printer tests share: a fixed `now`, and rows checked against their columns.
#[cfg(test)]
pub(crate) mod testing {
    use jiff::{SignedDuration, Timestamp};
    use serde_json::Value;

    use super::columns;
    use crate::strategy::Kind;

    pub fn now() -> Timestamp {
        "2025-06-01T12:00:00Z".parse().unwrap()
    }

    /// The RFC 3339 form of `now` minus `secs` seconds.
    pub fn ago(secs: i64) -> String {
        now()
            .checked_sub(SignedDuration::from_secs(secs))
            .unwrap()
            .to_string()
    }

    /// The cells of one object's row.
    pub fn cells<K: Kind>(object: &Value, now: Timestamp) -> Result<Vec<Value>, serde_json::Error> {
        super::row::<K>(object, now).map(|r| r.cells)
    }

    pub fn row_of<K: Kind>(object: Value) -> Vec<Value> {
        let cells = cells::<K>(&object, now()).unwrap();
        assert_eq!(
            cells.len(),
            columns::<K>().len(),
            "one cell per column for {}",
            K::KIND
        );
        cells
    }

    /// The cells of the columns `kubectl get` shows without `-o wide`.
    pub fn narrow<K: Kind>(object: Value) -> Vec<Value> {
        let cols = columns::<K>();
        row_of::<K>(object)
            .into_iter()
            .zip(cols)
            .filter(|(_, c)| c.priority == 0)
            .map(|(v, _)| v)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::{Event, Node, PersistentVolumeClaim, Pod, Service};
    use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use serde_json::json;

    use super::testing::*;
    use super::*;

    #[test]
    fn human_duration_thresholds() {
        let ms = SignedDuration::from_millis;
        let s = SignedDuration::from_secs;
        let m = |n: i64| s(n * 60);
        let h = |n: i64| s(n * 3600);
        let d = |n: i64| h(n * 24);
        let y = |n: i64| d(n * 365);
        let cases = [
            (s(-2), "<invalid>"),
            (s(-2) + SignedDuration::from_nanos(1), "0s"),
            (ms(-500), "0s"),
            (s(0), "0s"),
            (ms(999), "0s"),
            (s(1), "1s"),
            (s(45), "45s"),
            (s(70), "70s"),
            (m(2) - ms(1), "119s"),
            (m(2), "2m"),
            (m(2) + s(1), "2m1s"),
            (s(190), "3m10s"),
            (m(5), "5m"),
            (m(5) + s(30), "5m30s"),
            (m(10) - ms(1), "9m59s"),
            (m(10), "10m"),
            (m(10) + s(1), "10m"),
            (m(70), "70m"),
            (h(3) - ms(1), "179m"),
            (h(3), "3h"),
            (h(3) + m(1), "3h1m"),
            (h(8) - ms(1), "7h59m"),
            (h(8), "8h"),
            (h(8) + m(59), "8h"),
            (h(47), "47h"),
            (d(2) - ms(1), "47h"),
            (d(2), "2d"),
            (h(49), "2d1h"),
            (d(8) - ms(1), "7d23h"),
            (d(8), "8d"),
            (d(8) + h(23), "8d"),
            (d(367), "367d"),
            (y(2) - ms(1), "729d"),
            (y(2), "2y"),
            (y(2) + h(23) + m(59), "2y"),
            (y(2) + d(1) - ms(1), "2y"),
            (y(2) + d(1), "2y1d"),
            (y(2) + h(25), "2y1d"),
            (y(3), "3y"),
            (y(7), "7y"),
            (y(8) - ms(1), "7y364d"),
            (y(8), "8y"),
            (y(8) + d(364), "8y"),
            (y(9), "9y"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(d), want, "{d:?}");
        }
    }

    #[test]
    fn ages() {
        let at = |secs: i64| Time(now().checked_sub(SignedDuration::from_secs(secs)).unwrap());
        assert_eq!(translate_timestamp_since(None, now()), "<unknown>");
        assert_eq!(translate_timestamp_since(Some(&at(-1)), now()), "0s");
        assert_eq!(translate_timestamp_since(Some(&at(-3)), now()), "<invalid>");
        assert_eq!(translate_timestamp_since(Some(&at(30)), now()), "30s");
        assert_eq!(translate_timestamp_since(Some(&at(300)), now()), "5m");
        assert_eq!(translate_timestamp_since(Some(&at(6000)), now()), "100m");
        assert_eq!(
            translate_timestamp_since(Some(&at(90 * 86400)), now()),
            "90d"
        );
    }
    #[test]
    fn default_convertor() {
        // Kinds upstream has no printer for; custom resources print their own columns
        // (crd::printer).
        for cols in [
            columns::<Role>(),
            columns::<ClusterRole>(),
            columns::<CustomResourceDefinition>(),
        ] {
            assert_eq!(cols.len(), 2);
            assert_eq!(
                (cols[0].name.as_str(), cols[0].format.as_str()),
                ("Name", "name")
            );
            assert_eq!(
                (cols[1].name.as_str(), cols[1].type_.as_str()),
                ("Created At", "date")
            );
        }
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com", "creationTimestamp": "2024-03-05T07:08:09Z"}});
        assert_eq!(
            cells::<CustomResourceDefinition>(&crd, now()).unwrap(),
            vec![json!("widgets.example.com"), json!("2024-03-05T07:08:09Z")]
        );
        let no_time = json!({"metadata": {"name": "r"}});
        assert_eq!(
            cells::<Role>(&no_time, now()).unwrap(),
            vec![json!("r"), json!("0001-01-01T00:00:00Z")]
        );
    }

    #[test]
    fn column_definitions() {
        let pod = columns::<Pod>();
        let names: Vec<&str> = pod.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Status",
                "Restarts",
                "Age",
                "IP",
                "Node",
                "Nominated Node",
                "Readiness Gates"
            ]
        );
        assert_eq!(pod.iter().filter(|c| c.priority == 1).count(), 4);
        assert_eq!(
            serde_json::to_value(&pod[0]).unwrap(),
            json!({"name": "Name", "type": "string", "format": "name", "description": doc::NAME, "priority": 0})
        );
        assert_eq!(serde_json::to_value(&pod[4]).unwrap()["format"], "");
        fn narrow_names<K: Kind>() -> Vec<String> {
            columns::<K>()
                .into_iter()
                .filter(|c| c.priority == 0)
                .map(|c| c.name.to_uppercase())
                .collect()
        }
        assert_eq!(
            narrow_names::<Service>(),
            [
                "NAME",
                "TYPE",
                "CLUSTER-IP",
                "EXTERNAL-IP",
                "PORT(S)",
                "AGE"
            ]
        );
        assert_eq!(
            narrow_names::<Event>(),
            ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        );
        assert_eq!(
            narrow_names::<Deployment>(),
            ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
        );
        assert_eq!(
            narrow_names::<Job>(),
            ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
        );
        assert_eq!(
            narrow_names::<CronJob>(),
            [
                "NAME",
                "SCHEDULE",
                "TIMEZONE",
                "SUSPEND",
                "ACTIVE",
                "LAST SCHEDULE",
                "AGE"
            ]
        );
        assert_eq!(
            narrow_names::<Node>(),
            ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        );
        assert_eq!(
            narrow_names::<PersistentVolumeClaim>(),
            [
                "NAME",
                "STATUS",
                "VOLUME",
                "CAPACITY",
                "ACCESS MODES",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "AGE"
            ]
        );
        assert_eq!(
            narrow_names::<HorizontalPodAutoscaler>(),
            [
                "NAME",
                "REFERENCE",
                "TARGETS",
                "MINPODS",
                "MAXPODS",
                "REPLICAS",
                "AGE"
            ]
        );
        assert_eq!(columns::<ReplicaSet>()[1].type_, "integer");
        assert_eq!(columns::<CronJob>()[3].type_, "boolean");
    }

    #[test]
    fn quantities() {
        // Quantity's own tests cover the forms; the column falls back to the text as given.
        for (input, want) in [("1024Mi", "1Gi"), ("0.5", "500m"), ("garbage", "garbage")] {
            assert_eq!(canonical_quantity(input), want, "{input}");
        }
    }

    #[test]
    fn undecodable_objects_fail() {
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "nope"}});
        assert!(cells::<Pod>(&bad, now()).is_err());
    }
}
