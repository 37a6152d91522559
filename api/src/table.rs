//! Server-side Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): for
//! every built-in kind, the columns and row cells upstream's printers produce (Kubernetes
//! v1.32, `pkg/printers/internalversion`), so `kubectl get` prints what it prints against
//! Kubernetes.
//!
//! The server always renders the wide form, as upstream does: every column is returned, and
//! kubectl hides those with `priority > 0` unless asked for `-o wide`. Kinds without a printer
//! (Roles, ClusterRoles, CustomResourceDefinitions, ...) get upstream's default table
//! convertor: `Name` and `Created At`.
//!
//! Everything here is a pure function of the object and the current time.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use crate::quantity::Quantity as ParsedQuantity;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec, MetricStatus};
use k8s_openapi::api::batch::v1::{CronJob, Job, JobCondition};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerStateTerminated, ContainerStatus, Endpoints, Event, Namespace,
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec, Secret, Service,
    ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, IngressLoadBalancerStatus};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, Subject};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, MicroTime, ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::selector::{Requirement, Selector};

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

/// The printed form of one object: one cell per column of [`columns`], and row conditions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    pub cells: Vec<Value>,
    pub conditions: Vec<RowCondition>,
}

/// Whether upstream has a printer for this kind; the others print `Name` and `Created At`.
pub fn has_printer(group: &str, kind: &str) -> bool {
    Printer::of(group, kind) != Printer::Default
}

/// The column definitions of a kind's Table, wide columns included.
pub fn columns(group: &str, kind: &str) -> Vec<ColumnDefinition> {
    Printer::of(group, kind)
        .columns()
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

/// The cells of one object's row, in the order of [`columns`]; `now` is the time ages are
/// measured to. Fails only when the object does not decode as its kind.
pub fn cells(
    group: &str,
    kind: &str,
    object: &Value,
    now: Timestamp,
) -> Result<Vec<Value>, serde_json::Error> {
    row(group, kind, object, now).map(|r| r.cells)
}

/// The cells and row conditions of one object's row.
pub fn row(
    group: &str,
    kind: &str,
    object: &Value,
    now: Timestamp,
) -> Result<Row, serde_json::Error> {
    let printer = Printer::of(group, kind);
    let cells = match printer {
        Printer::Pod => return Ok(pod_row(&decode(object)?, now)),
        Printer::Service => service_cells(&decode(object)?, now),
        Printer::Endpoints => endpoints_cells(&decode(object)?, now),
        Printer::ConfigMap => config_map_cells(&decode(object)?, now),
        Printer::Secret => secret_cells(&decode(object)?, now),
        Printer::Namespace => namespace_cells(&decode(object)?, now),
        Printer::Node => node_cells(&decode(object)?, now),
        Printer::Event => event_cells(&decode_event(object)?, now),
        Printer::ServiceAccount => service_account_cells(&decode(object)?, now),
        Printer::PersistentVolume => pv_cells(&decode(object)?, now),
        Printer::PersistentVolumeClaim => pvc_cells(&decode(object)?, now),
        Printer::Deployment => deployment_cells(&decode(object)?, now),
        Printer::ReplicaSet => replica_set_cells(&decode(object)?, now),
        Printer::StatefulSet => stateful_set_cells(&decode(object)?, now),
        Printer::DaemonSet => daemon_set_cells(&decode(object)?, now),
        Printer::Job => job_cells(&decode(object)?, now),
        Printer::CronJob => cron_job_cells(&decode(object)?, now),
        Printer::HorizontalPodAutoscaler => hpa_cells(&decode(object)?, now),
        Printer::Ingress => ingress_cells(&decode(object)?, now),
        Printer::IngressClass => ingress_class_cells(&decode(object)?, now),
        Printer::EndpointSlice => endpoint_slice_cells(&decode(object)?, now),
        Printer::Lease => lease_cells(&decode(object)?, now),
        Printer::StorageClass => storage_class_cells(&decode(object)?, now),
        Printer::RoleBinding => {
            let rb: RoleBinding = decode(object)?;
            binding_cells(
                &rb.metadata,
                &rb.role_ref.kind,
                &rb.role_ref.name,
                rb.subjects.as_deref(),
                now,
            )
        }
        Printer::ClusterRoleBinding => {
            let rb: ClusterRoleBinding = decode(object)?;
            binding_cells(
                &rb.metadata,
                &rb.role_ref.kind,
                &rb.role_ref.name,
                rb.subjects.as_deref(),
                now,
            )
        }
        Printer::Default => default_cells(object)?,
    };
    Ok(Row {
        cells,
        conditions: Vec::new(),
    })
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
// Which printer a kind gets, and its columns.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Printer {
    Pod,
    Service,
    Endpoints,
    ConfigMap,
    Secret,
    Namespace,
    Node,
    Event,
    ServiceAccount,
    PersistentVolume,
    PersistentVolumeClaim,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    HorizontalPodAutoscaler,
    Ingress,
    IngressClass,
    EndpointSlice,
    Lease,
    StorageClass,
    RoleBinding,
    ClusterRoleBinding,
    Default,
}

impl Printer {
    fn of(group: &str, kind: &str) -> Printer {
        match (group, kind) {
            ("", "Pod") => Printer::Pod,
            ("", "Service") => Printer::Service,
            ("", "Endpoints") => Printer::Endpoints,
            ("", "ConfigMap") => Printer::ConfigMap,
            ("", "Secret") => Printer::Secret,
            ("", "Namespace") => Printer::Namespace,
            ("", "Node") => Printer::Node,
            ("" | "events.k8s.io", "Event") => Printer::Event,
            ("", "ServiceAccount") => Printer::ServiceAccount,
            ("", "PersistentVolume") => Printer::PersistentVolume,
            ("", "PersistentVolumeClaim") => Printer::PersistentVolumeClaim,
            ("apps", "Deployment") => Printer::Deployment,
            ("apps", "ReplicaSet") => Printer::ReplicaSet,
            ("apps", "StatefulSet") => Printer::StatefulSet,
            ("apps", "DaemonSet") => Printer::DaemonSet,
            ("batch", "Job") => Printer::Job,
            ("batch", "CronJob") => Printer::CronJob,
            ("autoscaling", "HorizontalPodAutoscaler") => Printer::HorizontalPodAutoscaler,
            ("networking.k8s.io", "Ingress") => Printer::Ingress,
            ("networking.k8s.io", "IngressClass") => Printer::IngressClass,
            ("discovery.k8s.io", "EndpointSlice") => Printer::EndpointSlice,
            ("coordination.k8s.io", "Lease") => Printer::Lease,
            ("storage.k8s.io", "StorageClass") => Printer::StorageClass,
            ("rbac.authorization.k8s.io", "RoleBinding") => Printer::RoleBinding,
            ("rbac.authorization.k8s.io", "ClusterRoleBinding") => Printer::ClusterRoleBinding,
            _ => Printer::Default,
        }
    }

    fn columns(self) -> &'static [Col] {
        match self {
            Printer::Pod => POD_COLUMNS,
            Printer::Service => SERVICE_COLUMNS,
            Printer::Endpoints => ENDPOINTS_COLUMNS,
            Printer::ConfigMap => CONFIG_MAP_COLUMNS,
            Printer::Secret => SECRET_COLUMNS,
            Printer::Namespace => NAMESPACE_COLUMNS,
            Printer::Node => NODE_COLUMNS,
            Printer::Event => EVENT_COLUMNS,
            Printer::ServiceAccount => SERVICE_ACCOUNT_COLUMNS,
            Printer::PersistentVolume => PV_COLUMNS,
            Printer::PersistentVolumeClaim => PVC_COLUMNS,
            Printer::Deployment => DEPLOYMENT_COLUMNS,
            Printer::ReplicaSet => REPLICA_SET_COLUMNS,
            Printer::StatefulSet => STATEFUL_SET_COLUMNS,
            Printer::DaemonSet => DAEMON_SET_COLUMNS,
            Printer::Job => JOB_COLUMNS,
            Printer::CronJob => CRON_JOB_COLUMNS,
            Printer::HorizontalPodAutoscaler => HPA_COLUMNS,
            Printer::Ingress => INGRESS_COLUMNS,
            Printer::IngressClass => INGRESS_CLASS_COLUMNS,
            Printer::EndpointSlice => ENDPOINT_SLICE_COLUMNS,
            Printer::Lease => LEASE_COLUMNS,
            Printer::StorageClass => STORAGE_CLASS_COLUMNS,
            Printer::RoleBinding => ROLE_BINDING_COLUMNS,
            Printer::ClusterRoleBinding => CLUSTER_ROLE_BINDING_COLUMNS,
            Printer::Default => DEFAULT_COLUMNS,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Col {
    name: &'static str,
    type_: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i32,
}

const fn col(name: &'static str, type_: &'static str, description: &'static str) -> Col {
    Col {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

/// A string column.
const fn s(name: &'static str, description: &'static str) -> Col {
    col(name, "string", description)
}

/// An integer column.
const fn int(name: &'static str, description: &'static str) -> Col {
    col(name, "integer", description)
}

impl Col {
    /// Shown only by `-o wide`.
    const fn wide(mut self) -> Col {
        self.priority = 1;
        self
    }
}

const NAME: Col = Col {
    name: "Name",
    type_: "string",
    format: "name",
    description: doc::NAME,
    priority: 0,
};
const AGE: Col = s("Age", doc::CREATION_TIMESTAMP);
const CONTAINERS: Col = s("Containers", "Names of each container in the template.").wide();
const IMAGES: Col = s(
    "Images",
    "Images referenced by each container in the template.",
)
.wide();

const DEFAULT_COLUMNS: &[Col] = &[NAME, col("Created At", "date", doc::CREATION_TIMESTAMP)];

const POD_COLUMNS: &[Col] = &[
    NAME,
    s(
        "Ready",
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    s(
        "Status",
        "The aggregate status of the containers in this pod.",
    ),
    s(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    s("IP", doc::POD_IP).wide(),
    s("Node", doc::POD_NODE_NAME).wide(),
    s("Nominated Node", doc::POD_NOMINATED_NODE_NAME).wide(),
    s("Readiness Gates", doc::POD_READINESS_GATES).wide(),
];

const SERVICE_COLUMNS: &[Col] = &[
    NAME,
    s("Type", doc::SERVICE_TYPE),
    s("Cluster-IP", doc::SERVICE_CLUSTER_IP),
    s("External-IP", doc::SERVICE_EXTERNAL_IPS),
    s("Port(s)", doc::SERVICE_PORTS),
    AGE,
    s("Selector", doc::SERVICE_SELECTOR).wide(),
];

const ENDPOINTS_COLUMNS: &[Col] = &[NAME, s("Endpoints", doc::ENDPOINTS_SUBSETS), AGE];

const CONFIG_MAP_COLUMNS: &[Col] = &[NAME, s("Data", doc::CONFIG_MAP_DATA), AGE];

const SECRET_COLUMNS: &[Col] = &[
    NAME,
    s("Type", doc::SECRET_TYPE),
    s("Data", doc::SECRET_DATA),
    AGE,
];

const NAMESPACE_COLUMNS: &[Col] = &[NAME, s("Status", "The status of the namespace"), AGE];

const NODE_COLUMNS: &[Col] = &[
    NAME,
    s("Status", "The status of the node"),
    s("Roles", "The roles of the node"),
    AGE,
    s("Version", doc::NODE_KUBELET_VERSION),
    s("Internal-IP", doc::NODE_ADDRESSES).wide(),
    s("External-IP", doc::NODE_ADDRESSES).wide(),
    s("OS-Image", doc::NODE_OS_IMAGE).wide(),
    s("Kernel-Version", doc::NODE_KERNEL_VERSION).wide(),
    s("Container-Runtime", doc::NODE_CONTAINER_RUNTIME_VERSION).wide(),
];

const EVENT_COLUMNS: &[Col] = &[
    s("Last Seen", doc::EVENT_LAST_TIMESTAMP),
    s("Type", doc::EVENT_TYPE),
    s("Reason", doc::EVENT_REASON),
    s("Object", doc::EVENT_INVOLVED_OBJECT),
    s("Subobject", doc::OBJECT_REFERENCE_FIELD_PATH).wide(),
    s("Source", doc::EVENT_SOURCE).wide(),
    s("Message", doc::EVENT_MESSAGE),
    s("First Seen", doc::EVENT_FIRST_TIMESTAMP).wide(),
    s("Count", doc::EVENT_COUNT).wide(),
    NAME.wide(),
];

const SERVICE_ACCOUNT_COLUMNS: &[Col] = &[NAME, s("Secrets", doc::SERVICE_ACCOUNT_SECRETS), AGE];

const PV_COLUMNS: &[Col] = &[
    NAME,
    s("Capacity", doc::PV_CAPACITY),
    s("Access Modes", doc::PV_ACCESS_MODES),
    s("Reclaim Policy", doc::PV_RECLAIM_POLICY),
    s("Status", doc::PV_PHASE),
    s("Claim", doc::PV_CLAIM_REF),
    s("StorageClass", "StorageClass of the pv"),
    s("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
    s("Reason", doc::PV_REASON),
    AGE,
    s("VolumeMode", doc::PV_VOLUME_MODE).wide(),
];

const PVC_COLUMNS: &[Col] = &[
    NAME,
    s("Status", doc::PVC_PHASE),
    s("Volume", doc::PVC_VOLUME_NAME),
    s("Capacity", doc::PVC_CAPACITY),
    s("Access Modes", doc::PVC_ACCESS_MODES),
    s("StorageClass", "StorageClass of the pvc"),
    s("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
    AGE,
    s("VolumeMode", doc::PVC_VOLUME_MODE).wide(),
];

const DEPLOYMENT_COLUMNS: &[Col] = &[
    NAME,
    s("Ready", "Number of the pod with ready state"),
    s("Up-to-date", doc::DEPLOYMENT_UPDATED_REPLICAS),
    s("Available", doc::DEPLOYMENT_AVAILABLE_REPLICAS),
    AGE,
    CONTAINERS,
    IMAGES,
    s("Selector", doc::DEPLOYMENT_SELECTOR).wide(),
];

const REPLICA_SET_COLUMNS: &[Col] = &[
    NAME,
    int("Desired", doc::REPLICA_SET_SPEC_REPLICAS),
    int("Current", doc::REPLICA_SET_STATUS_REPLICAS),
    int("Ready", doc::REPLICA_SET_READY_REPLICAS),
    AGE,
    CONTAINERS,
    IMAGES,
    s("Selector", doc::REPLICA_SET_SELECTOR).wide(),
];

const STATEFUL_SET_COLUMNS: &[Col] = &[
    NAME,
    s("Ready", "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

const DAEMON_SET_COLUMNS: &[Col] = &[
    NAME,
    int("Desired", doc::DAEMON_SET_DESIRED),
    int("Current", doc::DAEMON_SET_CURRENT),
    int("Ready", doc::DAEMON_SET_READY),
    int("Up-to-date", doc::DAEMON_SET_UPDATED),
    int("Available", doc::DAEMON_SET_AVAILABLE),
    s("Node Selector", doc::POD_NODE_SELECTOR),
    AGE,
    CONTAINERS,
    IMAGES,
    s("Selector", doc::DAEMON_SET_SELECTOR).wide(),
];

const JOB_COLUMNS: &[Col] = &[
    NAME,
    s("Status", "Status of the job."),
    s("Completions", doc::JOB_SUCCEEDED),
    s("Duration", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    s("Selector", doc::JOB_SELECTOR).wide(),
];

const CRON_JOB_COLUMNS: &[Col] = &[
    NAME,
    s("Schedule", doc::CRON_JOB_SCHEDULE),
    s("Timezone", doc::CRON_JOB_TIME_ZONE),
    col("Suspend", "boolean", doc::CRON_JOB_SUSPEND),
    int("Active", doc::CRON_JOB_ACTIVE),
    s("Last Schedule", doc::CRON_JOB_LAST_SCHEDULE_TIME),
    AGE,
    CONTAINERS,
    IMAGES,
    s("Selector", doc::JOB_SELECTOR).wide(),
];

const HPA_COLUMNS: &[Col] = &[
    NAME,
    s("Reference", doc::HPA_SCALE_TARGET_REF),
    s("Targets", doc::HPA_METRICS),
    s("MinPods", doc::HPA_MIN_REPLICAS),
    s("MaxPods", doc::HPA_MAX_REPLICAS),
    s("Replicas", doc::HPA_CURRENT_REPLICAS),
    AGE,
];

const INGRESS_COLUMNS: &[Col] = &[
    NAME,
    s(
        "Class",
        "The name of the IngressClass resource that should be used for additional configuration",
    ),
    s(
        "Hosts",
        "Hosts that incoming requests are matched against before the ingress rule",
    ),
    s(
        "Address",
        "Address is a list containing ingress points for the load-balancer",
    ),
    s("Ports", "Ports of TLS configurations that open"),
    AGE,
];

const INGRESS_CLASS_COLUMNS: &[Col] = &[
    NAME,
    s(
        "Controller",
        "Controller that is responsible for handling this class",
    ),
    s(
        "Parameters",
        "A reference to a resource with additional parameters",
    ),
    AGE,
];

const ENDPOINT_SLICE_COLUMNS: &[Col] = &[
    NAME,
    s("AddressType", doc::ENDPOINT_SLICE_ADDRESS_TYPE),
    s("Ports", doc::ENDPOINT_SLICE_PORTS),
    s("Endpoints", doc::ENDPOINT_SLICE_ENDPOINTS),
    AGE,
];

const LEASE_COLUMNS: &[Col] = &[NAME, s("Holder", doc::LEASE_HOLDER_IDENTITY), AGE];

const STORAGE_CLASS_COLUMNS: &[Col] = &[
    NAME,
    s("Provisioner", doc::STORAGE_CLASS_PROVISIONER),
    s("ReclaimPolicy", doc::STORAGE_CLASS_RECLAIM_POLICY),
    s("VolumeBindingMode", doc::STORAGE_CLASS_VOLUME_BINDING_MODE),
    s(
        "AllowVolumeExpansion",
        doc::STORAGE_CLASS_ALLOW_VOLUME_EXPANSION,
    ),
    AGE,
];

const ROLE_BINDING_COLUMNS: &[Col] = &[
    NAME,
    s("Role", doc::ROLE_BINDING_ROLE_REF),
    AGE,
    s("Users", "Users in the roleBinding").wide(),
    s("Groups", "Groups in the roleBinding").wide(),
    s("ServiceAccounts", "ServiceAccounts in the roleBinding").wide(),
];

const CLUSTER_ROLE_BINDING_COLUMNS: &[Col] = &[
    NAME,
    s("Role", doc::CLUSTER_ROLE_BINDING_ROLE_REF),
    AGE,
    s("Users", "Users in the clusterRoleBinding").wide(),
    s("Groups", "Groups in the clusterRoleBinding").wide(),
    s(
        "ServiceAccounts",
        "ServiceAccounts in the clusterRoleBinding",
    )
    .wide(),
];

// ---------------------------------------------------------------------------------------------
// Decoding.

fn decode<T: serde::de::DeserializeOwned>(object: &Value) -> Result<T, serde_json::Error> {
    T::deserialize(object)
}

/// A core/v1 Event from either API's form: events.k8s.io Events are printed as the core Events
/// they are stored as, as upstream does.
fn decode_event(object: &Value) -> Result<Event, serde_json::Error> {
    if object.get("apiVersion").and_then(Value::as_str) == Some("events.k8s.io/v1") {
        let e: k8s_openapi::api::events::v1::Event = decode(object)?;
        Ok(crate::kinds::events::to_core(&e))
    } else {
        decode(object)
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers shared by the printers.

fn text(s: impl Into<String>) -> Value {
    Value::String(s.into())
}

fn num(n: impl Into<i64>) -> Value {
    Value::from(n.into())
}

fn or_empty(s: Option<&String>) -> &str {
    s.map_or("", String::as_str)
}

/// A timestamp that is set: Go's zero time (year 1), which marshals as `null`, counts as unset.
fn set(t: Option<Timestamp>) -> Option<Timestamp> {
    t.filter(|t| t.as_second() > -62_135_596_800)
}

fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    match t {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".to_string(),
    }
}

fn micro_since(t: Option<&MicroTime>, now: Timestamp) -> String {
    since(set(t.map(|t| t.0)), now)
}

fn age(meta: &ObjectMeta, now: Timestamp) -> Value {
    text(translate_timestamp_since(
        meta.creation_timestamp.as_ref(),
        now,
    ))
}

fn name(meta: &ObjectMeta) -> Value {
    text(or_empty(meta.name.as_ref()))
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
fn format_labels(labels: Option<&BTreeMap<String, String>>) -> String {
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
fn label_selector_string(selector: Option<&LabelSelector>) -> Option<String> {
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
fn format_label_selector(selector: Option<&LabelSelector>) -> String {
    match label_selector_string(selector) {
        Some(s) if s.is_empty() => "<none>".to_string(),
        Some(s) => s,
        None => "<error>".to_string(),
    }
}

/// Container names and images, each comma-joined.
fn layout_containers(containers: &[Container]) -> (Value, Value) {
    let names: Vec<&str> = containers.iter().map(|c| c.name.as_str()).collect();
    let images: Vec<&str> = containers
        .iter()
        .map(|c| or_empty(c.image.as_ref()))
        .collect();
    (text(names.join(",")), text(images.join(",")))
}

fn template_containers(template: &PodTemplateSpec) -> &[Container] {
    template
        .spec
        .as_ref()
        .map_or(&[], |s| s.containers.as_slice())
}

fn bool_ptr(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

/// A list shortened to its first `max` items and `+ N more...`; `<unset>` when empty.
fn list_with_more(items: impl IntoIterator<Item = String>, max: usize) -> String {
    let mut list = Vec::new();
    let mut count = 0;
    for item in items {
        if list.len() < max {
            list.push(item);
        }
        count += 1;
    }
    let joined = list.join(",");
    if count > max {
        format!("{joined} + {} more...", count - max)
    } else if joined.is_empty() {
        "<unset>".to_string()
    } else {
        joined
    }
}

/// A quantity as `Quantity.String()` prints it: canonical, `<nil>` when absent.
fn quantity(q: Option<&Quantity>) -> String {
    q.map_or_else(|| "<nil>".to_string(), |q| canonical_quantity(&q.0))
}

/// The load-balancer ingress points: IPs, else hostnames, sorted and deduplicated. The server
/// prints wide, so upstream's 16-character clipping never applies.
fn load_balancer_points<'a>(
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
// The default table convertor.

fn default_cells(object: &Value) -> Result<Vec<Value>, serde_json::Error> {
    let meta: ObjectMeta = match object.get("metadata") {
        Some(m) => decode(m)?,
        None => ObjectMeta::default(),
    };
    let created = set(meta.creation_timestamp.as_ref().map(|t| t.0)).map_or_else(
        || "0001-01-01T00:00:00Z".to_string(),
        |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    Ok(vec![name(&meta), text(created)])
}

// ---------------------------------------------------------------------------------------------
// Pods.

fn is_restartable_init_container(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn finished_at(t: &ContainerStateTerminated) -> Option<Timestamp> {
    set(t.finished_at.as_ref().map(|t| t.0))
}

/// Go's `Time.Before` with the zero time as `None`.
fn before(a: Option<Timestamp>, b: Option<Timestamp>) -> bool {
    match (a, b) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a < b,
    }
}

fn last_terminated(c: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    c.last_state.as_ref().and_then(|s| s.terminated.as_ref())
}

fn pod_row(pod: &Pod, now: Timestamp) -> Row {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let containers = spec.map_or(&[][..], |s| s.containers.as_slice());
    let init_containers = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let init_statuses = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[]);
    let statuses = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or(&[]);
    let phase = or_empty(status.and_then(|s| s.phase.as_ref()));
    let status_reason = or_empty(status.and_then(|s| s.reason.as_ref()));

    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut total = containers.len();
    let mut ready = 0usize;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;

    let mut reason = if status_reason.is_empty() {
        phase.to_string()
    } else {
        status_reason.to_string()
    };
    if conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated"))
    {
        reason = "SchedulingGated".to_string();
    }

    let conditions_out = match phase {
        "Succeeded" => vec![completed_condition(
            "Succeeded",
            "The pod has completed successfully.",
        )],
        "Failed" => vec![completed_condition("Failed", "The pod failed.")],
        _ => Vec::new(),
    };

    total += init_containers
        .iter()
        .filter(|c| is_restartable_init_container(c))
        .count();
    let restartable = |name: &str| {
        init_containers
            .iter()
            .rev()
            .find(|c| c.name == name)
            .is_some_and(is_restartable_init_container)
    };

    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        restarts += i64::from(c.restart_count);
        if let Some(t) = last_terminated(c) {
            let finished = finished_at(t);
            if before(last_restart, finished) {
                last_restart = finished;
            }
        }
        let is_restartable = restartable(&c.name);
        if is_restartable {
            restartable_restarts += i64::from(c.restart_count);
            if let Some(t) = last_terminated(c) {
                let finished = finished_at(t);
                if before(last_restartable_restart, finished) {
                    last_restartable_restart = finished;
                }
            }
        }
        let state = c.state.as_ref();
        let terminated = state.and_then(|s| s.terminated.as_ref());
        let waiting_reason = state
            .and_then(|s| s.waiting.as_ref())
            .map(|w| or_empty(w.reason.as_ref()));
        if terminated.is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if is_restartable && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(t) = terminated {
            match t.reason.as_deref() {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ => match t.signal.unwrap_or(0) {
                    0 => format!("Init:ExitCode:{}", t.exit_code),
                    signal => format!("Init:Signal:{signal}"),
                },
            }
        } else if let Some(r) = waiting_reason.filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{}", init_containers.len())
        };
        initializing = true;
        break;
    }

    let initialized = conditions
        .iter()
        .find(|c| c.type_ == "Initialized")
        .is_some_and(|c| c.status == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for c in statuses.iter().rev() {
            restarts += i64::from(c.restart_count);
            if let Some(t) = last_terminated(c) {
                let finished = finished_at(t);
                if before(last_restart, finished) {
                    last_restart = finished;
                }
            }
            let state = c.state.as_ref();
            let waiting_reason = state
                .and_then(|s| s.waiting.as_ref())
                .map(|w| or_empty(w.reason.as_ref()))
                .filter(|r| !r.is_empty());
            let terminated = state.and_then(|s| s.terminated.as_ref());
            if let Some(r) = waiting_reason {
                reason = r.to_string();
            } else if let Some(t) = terminated {
                reason = match t.reason.as_deref() {
                    Some(r) if !r.is_empty() => r.to_string(),
                    _ => match t.signal.unwrap_or(0) {
                        0 => format!("ExitCode:{}", t.exit_code),
                        signal => format!("Signal:{signal}"),
                    },
                };
            } else if c.ready && state.is_some_and(|s| s.running.is_some()) {
                has_running = true;
                ready += 1;
            }
        }
        // A pod whose first container completed while another still runs is not Completed.
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_string();
        }
    }

    if pod.metadata.deletion_timestamp.is_some() {
        if status_reason == "NodeLost" {
            reason = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_string();
        }
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    // A pod IP given only as status.podIP counts, as the conversion to the internal form does.
    let pod_ip = status
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
        .or_else(|| {
            status
                .and_then(|s| s.pod_ips.as_ref())
                .and_then(|ips| ips.first())
                .map(|ip| ip.ip.as_str())
        })
        .filter(|ip| !ip.is_empty())
        .unwrap_or("<none>");
    let node_name = spec
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or("<none>");
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or("<none>");
    let gates = spec
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or(&[]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_conditions = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c.type_ == g.condition_type)
                    .is_some_and(|c| c.status == "True")
            })
            .count();
        format!("{true_conditions}/{}", gates.len())
    };

    Row {
        cells: vec![
            name(&pod.metadata),
            text(format!("{ready}/{total}")),
            text(reason),
            text(restarts_cell),
            age(&pod.metadata, now),
            text(pod_ip),
            text(node_name),
            text(nominated),
            text(readiness_gates),
        ],
        conditions: conditions_out,
    }
}

fn completed_condition(reason: &str, message: &str) -> RowCondition {
    RowCondition {
        type_: "Completed".to_string(),
        status: "True".to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Core kinds.

fn service_cells(svc: &Service, now: Timestamp) -> Vec<Value> {
    let spec = svc.spec.clone().unwrap_or_default();
    let type_ = or_empty(spec.type_.as_ref());
    // spec.clusterIP is authoritative over clusterIPs, as in the conversion to internal.
    let cluster_ip = spec
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty())
        .or_else(|| {
            spec.cluster_ips
                .as_ref()
                .and_then(|ips| ips.first())
                .map(String::as_str)
        })
        .unwrap_or("<none>");
    let external_ips = spec.external_ips.clone().unwrap_or_default();
    let external_ip = match type_ {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let ingress = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_deref())
                .unwrap_or(&[]);
            let lb_ips =
                load_balancer_points(ingress.iter().map(|i| (i.ip.as_ref(), i.hostname.as_ref())));
            if !external_ips.is_empty() {
                let mut all: Vec<String> = Vec::new();
                if !lb_ips.is_empty() {
                    all.extend(lb_ips.split(',').map(str::to_string));
                }
                all.extend(external_ips);
                all.join(",")
            } else if !lb_ips.is_empty() {
                lb_ips
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => or_empty(spec.external_name.as_ref()).to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            match p.node_port {
                Some(node_port) if node_port > 0 => format!("{}:{node_port}/{protocol}", p.port),
                _ => format!("{}/{protocol}", p.port),
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    vec![
        name(&svc.metadata),
        text(type_),
        text(cluster_ip),
        text(external_ip),
        text(if ports.is_empty() {
            "<none>".to_string()
        } else {
            ports
        }),
        age(&svc.metadata, now),
        text(format_labels(spec.selector.as_ref())),
    ]
}

fn endpoints_cells(ep: &Endpoints, now: Timestamp) -> Vec<Value> {
    vec![
        name(&ep.metadata),
        text(format_endpoints(ep)),
        age(&ep.metadata, now),
    ]
}

/// Up to three `ip:port` pairs (bare IPs for port-less subsets) and `+ N more...`.
fn format_endpoints(ep: &Endpoints) -> String {
    let subsets = ep.subsets.as_deref().unwrap_or(&[]);
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0;
    for ss in subsets {
        let addresses = ss.addresses.as_deref().unwrap_or(&[]);
        let ports = ss.ports.as_deref().unwrap_or(&[]);
        if ports.is_empty() {
            // A headless service may have no ports.
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(a.ip.clone());
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(&a.ip, port.port));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

/// `net.JoinHostPort`: IPv6 hosts are bracketed.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn config_map_cells(cm: &ConfigMap, now: Timestamp) -> Vec<Value> {
    let n = cm.data.as_ref().map_or(0, BTreeMap::len)
        + cm.binary_data.as_ref().map_or(0, BTreeMap::len);
    vec![name(&cm.metadata), num(n as i64), age(&cm.metadata, now)]
}

fn secret_cells(secret: &Secret, now: Timestamp) -> Vec<Value> {
    // stringData is merged into data on the way in, so its keys count too.
    let keys: BTreeSet<&String> = secret
        .data
        .iter()
        .flat_map(BTreeMap::keys)
        .chain(secret.string_data.iter().flat_map(BTreeMap::keys))
        .collect();
    vec![
        name(&secret.metadata),
        text(or_empty(secret.type_.as_ref())),
        num(keys.len() as i64),
        age(&secret.metadata, now),
    ]
}

fn namespace_cells(ns: &Namespace, now: Timestamp) -> Vec<Value> {
    let phase = or_empty(ns.status.as_ref().and_then(|s| s.phase.as_ref()));
    vec![name(&ns.metadata), text(phase), age(&ns.metadata, now)]
}

fn service_account_cells(sa: &ServiceAccount, now: Timestamp) -> Vec<Value> {
    let n = sa.secrets.as_ref().map_or(0, Vec::len);
    vec![name(&sa.metadata), num(n as i64), age(&sa.metadata, now)]
}

const LABEL_NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
const NODE_LABEL_ROLE: &str = "kubernetes.io/role";

fn node_cells(node: &Node, now: Timestamp) -> Vec<Value> {
    let status = node.status.clone().unwrap_or_default();
    // Only Ready is reported; the last condition of a type wins.
    let ready = status
        .conditions
        .iter()
        .flatten()
        .rfind(|c| c.type_ == "Ready");
    let mut states: Vec<&str> = Vec::new();
    match ready {
        Some(c) if c.status == "True" => states.push("Ready"),
        Some(_) => states.push("NotReady"),
        None => states.push("Unknown"),
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        states.push("SchedulingDisabled");
    }

    let roles: BTreeSet<&str> = node
        .metadata
        .labels
        .iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix(LABEL_NODE_ROLE_PREFIX) {
                (!role.is_empty()).then_some(role)
            } else if k == NODE_LABEL_ROLE && !v.is_empty() {
                Some(v.as_str())
            } else {
                None
            }
        })
        .collect();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };

    let info = status.node_info.clone().unwrap_or_default();
    let address = |type_: &str| {
        status
            .addresses
            .iter()
            .flatten()
            .find(|a| a.type_ == type_)
            .map_or_else(|| "<none>".to_string(), |a| a.address.clone())
    };
    let known = |s: String| {
        if s.is_empty() {
            "<unknown>".to_string()
        } else {
            s
        }
    };
    vec![
        name(&node.metadata),
        text(states.join(",")),
        text(roles),
        age(&node.metadata, now),
        text(info.kubelet_version),
        text(address("InternalIP")),
        text(address("ExternalIP")),
        text(known(info.os_image)),
        text(known(info.kernel_version)),
        text(known(info.container_runtime_version)),
    ]
}

fn event_cells(e: &Event, now: Timestamp) -> Vec<Value> {
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

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP, in that order, once each.
fn access_modes(modes: Option<&Vec<String>>) -> String {
    let modes = modes.map_or(&[][..], Vec::as_slice);
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.iter().any(|m| m == mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

fn beta_storage_class(meta: &ObjectMeta) -> Option<&String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
}

/// A storage quantity as `Quantity.String()` prints it; a missing one is zero.
fn storage(resources: Option<&BTreeMap<String, Quantity>>) -> String {
    resources
        .and_then(|r| r.get("storage"))
        .map_or_else(|| "0".to_string(), |q| canonical_quantity(&q.0))
}

fn pv_cells(pv: &PersistentVolume, now: Timestamp) -> Vec<Value> {
    let spec = pv.spec.clone().unwrap_or_default();
    let claim = spec.claim_ref.as_ref().map_or_else(String::new, |c| {
        format!(
            "{}/{}",
            or_empty(c.namespace.as_ref()),
            or_empty(c.name.as_ref())
        )
    });
    let phase = if pv.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else {
        or_empty(pv.status.as_ref().and_then(|s| s.phase.as_ref()))
    };
    let class = beta_storage_class(&pv.metadata)
        .or(spec.storage_class_name.as_ref())
        .map_or("", String::as_str);
    vec![
        name(&pv.metadata),
        text(storage(spec.capacity.as_ref())),
        text(access_modes(spec.access_modes.as_ref())),
        text(or_empty(spec.persistent_volume_reclaim_policy.as_ref())),
        text(phase),
        text(claim),
        text(class),
        text(
            spec.volume_attributes_class_name
                .as_deref()
                .unwrap_or("<unset>"),
        ),
        text(or_empty(pv.status.as_ref().and_then(|s| s.reason.as_ref()))),
        age(&pv.metadata, now),
        text(spec.volume_mode.as_deref().unwrap_or("<unset>")),
    ]
}

fn pvc_cells(pvc: &PersistentVolumeClaim, now: Timestamp) -> Vec<Value> {
    let spec = pvc.spec.clone().unwrap_or_default();
    let status = pvc.status.clone().unwrap_or_default();
    let phase = if pvc.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else {
        or_empty(status.phase.as_ref())
    };
    let volume_name = or_empty(spec.volume_name.as_ref());
    let (capacity, modes) = if volume_name.is_empty() {
        (String::new(), String::new())
    } else {
        (
            storage(status.capacity.as_ref()),
            access_modes(status.access_modes.as_ref()),
        )
    };
    let class = beta_storage_class(&pvc.metadata)
        .or(spec.storage_class_name.as_ref())
        .map_or("", String::as_str);
    vec![
        name(&pvc.metadata),
        text(phase),
        text(volume_name),
        text(capacity),
        text(modes),
        text(class),
        text(
            spec.volume_attributes_class_name
                .as_deref()
                .unwrap_or("<unset>"),
        ),
        age(&pvc.metadata, now),
        text(spec.volume_mode.as_deref().unwrap_or("<unset>")),
    ]
}

// ---------------------------------------------------------------------------------------------
// Workloads.

fn deployment_cells(d: &Deployment, now: Timestamp) -> Vec<Value> {
    let spec = d.spec.clone().unwrap_or_default();
    let status = d.status.clone().unwrap_or_default();
    let desired = spec.replicas.unwrap_or(1);
    let ready = status.ready_replicas.unwrap_or(0);
    let selector =
        label_selector_string(Some(&spec.selector)).unwrap_or_else(|| "<invalid>".to_string());
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&d.metadata),
        text(format!("{ready}/{desired}")),
        num(status.updated_replicas.unwrap_or(0)),
        num(status.available_replicas.unwrap_or(0)),
        age(&d.metadata, now),
        containers,
        images,
        text(selector),
    ]
}

fn replica_set_cells(rs: &ReplicaSet, now: Timestamp) -> Vec<Value> {
    let spec = rs.spec.clone().unwrap_or_default();
    let status = rs.status.clone().unwrap_or_default();
    let (containers, images) =
        layout_containers(spec.template.as_ref().map_or(&[], template_containers));
    vec![
        name(&rs.metadata),
        num(spec.replicas.unwrap_or(1)),
        num(status.replicas),
        num(status.ready_replicas.unwrap_or(0)),
        age(&rs.metadata, now),
        containers,
        images,
        text(format_label_selector(Some(&spec.selector))),
    ]
}

fn stateful_set_cells(sts: &StatefulSet, now: Timestamp) -> Vec<Value> {
    let spec = sts.spec.clone().unwrap_or_default();
    let ready = sts
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let desired = spec.replicas.unwrap_or(1);
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&sts.metadata),
        text(format!("{ready}/{desired}")),
        age(&sts.metadata, now),
        containers,
        images,
    ]
}

fn daemon_set_cells(ds: &DaemonSet, now: Timestamp) -> Vec<Value> {
    let spec = ds.spec.clone().unwrap_or_default();
    let status = ds.status.clone().unwrap_or_default();
    let node_selector = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref());
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&ds.metadata),
        num(status.desired_number_scheduled),
        num(status.current_number_scheduled),
        num(status.number_ready),
        num(status.updated_number_scheduled.unwrap_or(0)),
        num(status.number_available.unwrap_or(0)),
        text(format_labels(node_selector)),
        age(&ds.metadata, now),
        containers,
        images,
        text(format_label_selector(Some(&spec.selector))),
    ]
}

/// Whether the first condition of this type is true.
fn has_job_condition(conditions: &[JobCondition], type_: &str) -> bool {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .is_some_and(|c| c.status == "True")
}

fn job_cells(job: &Job, now: Timestamp) -> Vec<Value> {
    let spec = job.spec.clone().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let succeeded = status.succeeded.unwrap_or(0);
    let completions = match spec.completions {
        Some(c) => format!("{succeeded}/{c}"),
        None => match spec.parallelism.unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = set(status.start_time.as_ref().map(|t| t.0));
    let completion = set(status.completion_time.as_ref().map(|t| t.0));
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now.duration_since(start)),
        (Some(start), Some(end)) => human_duration(end.duration_since(start)),
    };
    let conditions = status.conditions.as_deref().unwrap_or(&[]);
    let state = if has_job_condition(conditions, "Complete") {
        "Complete"
    } else if has_job_condition(conditions, "Failed") {
        "Failed"
    } else if job.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else if has_job_condition(conditions, "Suspended") {
        "Suspended"
    } else if has_job_condition(conditions, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&job.metadata),
        text(state),
        text(completions),
        text(duration),
        age(&job.metadata, now),
        containers,
        images,
        text(format_label_selector(spec.selector.as_ref())),
    ]
}

fn cron_job_cells(cj: &CronJob, now: Timestamp) -> Vec<Value> {
    let spec = cj.spec.clone().unwrap_or_default();
    let status = cj.status.clone().unwrap_or_default();
    let last_schedule = match status.last_schedule_time.as_ref() {
        Some(t) => translate_timestamp_since(Some(t), now),
        None => "<none>".to_string(),
    };
    let job_spec = spec.job_template.spec.clone().unwrap_or_default();
    let (containers, images) = layout_containers(template_containers(&job_spec.template));
    vec![
        name(&cj.metadata),
        text(spec.schedule),
        text(spec.time_zone.as_deref().unwrap_or("<none>")),
        text(bool_ptr(spec.suspend)),
        num(status.active.as_ref().map_or(0, Vec::len) as i64),
        text(last_schedule),
        age(&cj.metadata, now),
        containers,
        images,
        text(format_label_selector(job_spec.selector.as_ref())),
    ]
}

// ---------------------------------------------------------------------------------------------
// HorizontalPodAutoscalers.

fn hpa_cells(hpa: &HorizontalPodAutoscaler, now: Timestamp) -> Vec<Value> {
    let spec = hpa.spec.clone().unwrap_or_default();
    let status = hpa.status.clone().unwrap_or_default();
    let reference = format!(
        "{}/{}",
        spec.scale_target_ref.kind, spec.scale_target_ref.name
    );
    let targets = format_hpa_metrics(
        spec.metrics.as_deref().unwrap_or(&[]),
        status.current_metrics.as_deref().unwrap_or(&[]),
    );
    let min_pods = spec
        .min_replicas
        .map_or_else(|| "<unset>".to_string(), |m| m.to_string());
    vec![
        name(&hpa.metadata),
        text(reference),
        text(targets),
        text(min_pods),
        num(spec.max_replicas),
        num(status.current_replicas.unwrap_or(0)),
        age(&hpa.metadata, now),
    ]
}

/// Each metric as `current/target` (`cpu: 50%/80%`, `500m/1 (avg)`); the status at the same
/// index is the current value. At most two are listed, then `+ N more...`.
fn format_hpa_metrics(specs: &[MetricSpec], statuses: &[MetricStatus]) -> String {
    if specs.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 2;
    const UNKNOWN: &str = "<unknown>";
    let percent = |p: Option<i32>| p.map(|p| format!("{p}%"));
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let status = statuses.get(i);
            match spec.type_.as_str() {
                "External" => {
                    let target = spec.external.as_ref().map(|e| &e.target);
                    let current = status.and_then(|s| s.external.as_ref()).map(|e| &e.current);
                    match target.and_then(|t| t.average_value.as_ref()) {
                        Some(avg) => {
                            let current = current
                                .and_then(|c| c.average_value.as_ref())
                                .map_or_else(|| UNKNOWN.to_string(), |q| canonical_quantity(&q.0));
                            format!("{current}/{} (avg)", canonical_quantity(&avg.0))
                        }
                        None => {
                            let current = current.map_or_else(
                                || UNKNOWN.to_string(),
                                |c| quantity(c.value.as_ref()),
                            );
                            format!(
                                "{current}/{}",
                                quantity(target.and_then(|t| t.value.as_ref()))
                            )
                        }
                    }
                }
                "Pods" => {
                    let current = status.and_then(|s| s.pods.as_ref()).map_or_else(
                        || UNKNOWN.to_string(),
                        |p| quantity(p.current.average_value.as_ref()),
                    );
                    let target = spec
                        .pods
                        .as_ref()
                        .and_then(|p| p.target.average_value.as_ref());
                    format!("{current}/{}", quantity(target))
                }
                "Object" => {
                    let target = spec.object.as_ref().map(|o| &o.target);
                    let current = status.and_then(|s| s.object.as_ref()).map(|o| &o.current);
                    match target.and_then(|t| t.average_value.as_ref()) {
                        Some(avg) => {
                            let current = current
                                .and_then(|c| c.average_value.as_ref())
                                .map_or_else(|| UNKNOWN.to_string(), |q| canonical_quantity(&q.0));
                            format!("{current}/{} (avg)", canonical_quantity(&avg.0))
                        }
                        None => {
                            let current = current.map_or_else(
                                || UNKNOWN.to_string(),
                                |c| quantity(c.value.as_ref()),
                            );
                            format!(
                                "{current}/{}",
                                quantity(target.and_then(|t| t.value.as_ref()))
                            )
                        }
                    }
                }
                "Resource" | "ContainerResource" => {
                    let (resource, target, current) = if spec.type_ == "Resource" {
                        let source = spec.resource.as_ref();
                        (
                            source.map_or("", |r| r.name.as_str()),
                            source.map(|r| &r.target),
                            status.and_then(|s| s.resource.as_ref()).map(|r| &r.current),
                        )
                    } else {
                        let source = spec.container_resource.as_ref();
                        (
                            source.map_or("", |r| r.name.as_str()),
                            source.map(|r| &r.target),
                            status
                                .and_then(|s| s.container_resource.as_ref())
                                .map(|r| &r.current),
                        )
                    };
                    match target.and_then(|t| t.average_value.as_ref()) {
                        Some(avg) => {
                            let current = current.map_or_else(
                                || UNKNOWN.to_string(),
                                |c| quantity(c.average_value.as_ref()),
                            );
                            format!("{resource}: {current}/{}", canonical_quantity(&avg.0))
                        }
                        None => {
                            let current = current
                                .and_then(|c| percent(c.average_utilization))
                                .unwrap_or_else(|| UNKNOWN.to_string());
                            let target = target
                                .and_then(|t| percent(t.average_utilization))
                                .unwrap_or_else(|| "<auto>".to_string());
                            format!("{resource}: {current}/{target}")
                        }
                    }
                }
                _ => "<unknown type>".to_string(),
            }
        })
        .collect();
    let count = list.len();
    if count > MAX {
        format!("{} + {} more...", list[..MAX].join(", "), count - MAX)
    } else {
        list.join(", ")
    }
}

// ---------------------------------------------------------------------------------------------
// Networking, discovery, coordination, storage, RBAC.

fn ingress_cells(ing: &Ingress, now: Timestamp) -> Vec<Value> {
    let spec = ing.spec.clone().unwrap_or_default();
    let class = spec.ingress_class_name.as_deref().unwrap_or("<none>");
    let rules = spec.rules.as_deref().unwrap_or(&[]);
    // Upstream lists the first three hosts; any rule seen after that makes the list "more",
    // and every rule past the third is counted, host or not.
    const MAX: usize = 3;
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if hosts.len() == MAX {
            more = true;
        }
        if let Some(host) = rule.host.as_deref().filter(|h| !more && !h.is_empty()) {
            hosts.push(host);
        }
    }
    let hosts = if hosts.is_empty() {
        "*".to_string()
    } else if more {
        format!("{} + {} more...", hosts.join(","), rules.len() - MAX)
    } else {
        hosts.join(",")
    };
    let address = ingress_points(ing.status.as_ref().and_then(|s| s.load_balancer.as_ref()));
    let ports = if spec.tls.as_ref().is_some_and(|t| !t.is_empty()) {
        "80, 443"
    } else {
        "80"
    };
    vec![
        name(&ing.metadata),
        text(class),
        text(hosts),
        text(address),
        text(ports),
        age(&ing.metadata, now),
    ]
}

fn ingress_points(lb: Option<&IngressLoadBalancerStatus>) -> String {
    let ingress = lb.and_then(|lb| lb.ingress.as_deref()).unwrap_or(&[]);
    load_balancer_points(ingress.iter().map(|i| (i.ip.as_ref(), i.hostname.as_ref())))
}

fn ingress_class_cells(ic: &IngressClass, now: Timestamp) -> Vec<Value> {
    let spec = ic.spec.clone().unwrap_or_default();
    let parameters = spec.parameters.as_ref().map_or_else(
        || "<none>".to_string(),
        |p| match &p.api_group {
            Some(group) => format!("{}.{group}/{}", p.kind, p.name),
            None => format!("{}/{}", p.kind, p.name),
        },
    );
    vec![
        name(&ic.metadata),
        text(or_empty(spec.controller.as_ref())),
        text(parameters),
        age(&ic.metadata, now),
    ]
}

fn endpoint_slice_cells(slice: &EndpointSlice, now: Timestamp) -> Vec<Value> {
    let ports = slice
        .ports
        .iter()
        .flatten()
        .map(|p| match (p.port, &p.name) {
            (Some(port), _) => port.to_string(),
            (None, Some(name)) => name.clone(),
            (None, None) => "*".to_string(),
        });
    let addresses = slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter().cloned());
    vec![
        name(&slice.metadata),
        text(slice.address_type.clone()),
        text(list_with_more(ports, 3)),
        text(list_with_more(addresses, 3)),
        age(&slice.metadata, now),
    ]
}

fn lease_cells(lease: &Lease, now: Timestamp) -> Vec<Value> {
    let holder = or_empty(lease.spec.as_ref().and_then(|s| s.holder_identity.as_ref()));
    vec![
        name(&lease.metadata),
        text(holder),
        age(&lease.metadata, now),
    ]
}

const IS_DEFAULT_STORAGE_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_IS_DEFAULT_STORAGE_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";

fn storage_class_cells(sc: &StorageClass, now: Timestamp) -> Vec<Value> {
    let annotations = sc.metadata.annotations.as_ref();
    let is_default = [IS_DEFAULT_STORAGE_CLASS, BETA_IS_DEFAULT_STORAGE_CLASS]
        .iter()
        .any(|k| {
            annotations
                .and_then(|a| a.get(*k))
                .is_some_and(|v| v == "true")
        });
    let mut display_name = or_empty(sc.metadata.name.as_ref()).to_string();
    if is_default {
        display_name.push_str(" (default)");
    }
    vec![
        text(display_name),
        text(sc.provisioner.clone()),
        text(sc.reclaim_policy.as_deref().unwrap_or("Delete")),
        text(sc.volume_binding_mode.as_deref().unwrap_or("Immediate")),
        Value::Bool(sc.allow_volume_expansion.unwrap_or(false)),
        age(&sc.metadata, now),
    ]
}

fn binding_cells(
    meta: &ObjectMeta,
    role_kind: &str,
    role_name: &str,
    subjects: Option<&[Subject]>,
    now: Timestamp,
) -> Vec<Value> {
    let mut users = Vec::new();
    let mut groups = Vec::new();
    let mut service_accounts = Vec::new();
    for s in subjects.unwrap_or(&[]) {
        match s.kind.as_str() {
            "ServiceAccount" => {
                service_accounts.push(format!("{}/{}", or_empty(s.namespace.as_ref()), s.name));
            }
            "User" => users.push(s.name.clone()),
            "Group" => groups.push(s.name.clone()),
            _ => {}
        }
    }
    vec![
        name(meta),
        text(format!("{role_kind}/{role_name}")),
        age(meta, now),
        text(users.join(", ")),
        text(groups.join(", ")),
        text(service_accounts.join(", ")),
    ]
}

// ---------------------------------------------------------------------------------------------
// Quantities, printed as upstream's `Quantity.String()`.

/// The canonical form of a quantity: `1024Mi` is `1Gi`, `1000` is `1k`, `0.5` is `500m`,
/// `1.5Gi` is `1536Mi`; values finer than a nano are rounded up. A string that does not parse
/// (or overflows) is returned unchanged.
fn canonical_quantity(s: &str) -> String {
    ParsedQuantity::parse(s).map_or_else(
        || s.to_string(),
        |q| q.canonical().unwrap_or_else(|| s.to_string()),
    )
}

// ---------------------------------------------------------------------------------------------
// Column descriptions: the API documentation of the fields, as upstream's printers quote it.

mod doc {
    pub const NAME: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
    pub const CREATION_TIMESTAMP: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

    pub const POD_IP: &str = "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.";
    pub const POD_NOMINATED_NODE_NAME: &str = "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.";
    pub const POD_NODE_NAME: &str = "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename";
    pub const POD_READINESS_GATES: &str = "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates";
    pub const POD_NODE_SELECTOR: &str = "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/";

    pub const SERVICE_TYPE: &str = "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types";
    pub const SERVICE_CLUSTER_IP: &str = "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";
    pub const SERVICE_EXTERNAL_IPS: &str = "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system.";
    pub const SERVICE_PORTS: &str = "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";
    pub const SERVICE_SELECTOR: &str = "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/";

    pub const ENDPOINTS_SUBSETS: &str = "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service.";

    pub const NODE_KUBELET_VERSION: &str = "Kubelet Version reported by the node.";
    pub const NODE_OS_IMAGE: &str =
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).";
    pub const NODE_KERNEL_VERSION: &str =
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).";
    pub const NODE_CONTAINER_RUNTIME_VERSION: &str = "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).";
    pub const NODE_ADDRESSES: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

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

    pub const SECRET_TYPE: &str = "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types";
    pub const SECRET_DATA: &str = "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4";
    pub const SERVICE_ACCOUNT_SECRETS: &str = "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret";
    pub const CONFIG_MAP_DATA: &str = "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.";

    pub const PV_CAPACITY: &str = "capacity is the description of the persistent volume's resources and capacity. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#capacity";
    pub const PV_ACCESS_MODES: &str = "accessModes contains all ways the volume can be mounted. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes";
    pub const PV_RECLAIM_POLICY: &str = "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim. Valid options are Retain (default for manually created PersistentVolumes), Delete (default for dynamically provisioned PersistentVolumes), and Recycle (deprecated). Recycle must be supported by the volume plugin underlying this PersistentVolume. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#reclaiming";
    pub const PV_CLAIM_REF: &str = "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the authoritative bind between PV and PVC. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#binding";
    pub const PV_VOLUME_MODE: &str = "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec.";
    pub const PV_PHASE: &str = "phase indicates if a volume is available, bound to a claim, or released by a claim. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#phase";
    pub const PV_REASON: &str = "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.";
    pub const PVC_PHASE: &str = "phase represents the current phase of PersistentVolumeClaim.";
    pub const PVC_CAPACITY: &str =
        "capacity represents the actual resources of the underlying volume.";
    pub const PVC_ACCESS_MODES: &str = "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1";
    pub const PVC_VOLUME_NAME: &str =
        "volumeName is the binding reference to the PersistentVolume backing this claim.";
    pub const PVC_VOLUME_MODE: &str = "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec.";

    pub const REPLICA_SET_SPEC_REPLICAS: &str = "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller";
    pub const REPLICA_SET_SELECTOR: &str = "Selector is a label query over pods that should match the replica count. If the selector is empty, it is defaulted to the labels present on the pod template. Label keys and values that must match in order to be controlled by this replica set. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const REPLICA_SET_STATUS_REPLICAS: &str = "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller";
    pub const REPLICA_SET_READY_REPLICAS: &str =
        "The number of ready replicas for this replica set.";
    pub const DAEMON_SET_DESIRED: &str = "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/";
    pub const DAEMON_SET_CURRENT: &str = "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/";
    pub const DAEMON_SET_READY: &str = "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.";
    pub const DAEMON_SET_UPDATED: &str =
        "The total number of nodes that are running updated daemon pod";
    pub const DAEMON_SET_AVAILABLE: &str = "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)";
    pub const DAEMON_SET_SELECTOR: &str = "A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const DEPLOYMENT_UPDATED_REPLICAS: &str = "Total number of non-terminated pods targeted by this deployment that have the desired template spec.";
    pub const DEPLOYMENT_AVAILABLE_REPLICAS: &str = "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.";
    pub const DEPLOYMENT_SELECTOR: &str = "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.";

    pub const JOB_SUCCEEDED: &str = "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.";
    pub const JOB_SELECTOR: &str = "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const CRON_JOB_SCHEDULE: &str =
        "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.";
    pub const CRON_JOB_TIME_ZONE: &str = "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones";
    pub const CRON_JOB_SUSPEND: &str = "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.";
    pub const CRON_JOB_ACTIVE: &str = "A list of pointers to currently running jobs.";
    pub const CRON_JOB_LAST_SCHEDULE_TIME: &str =
        "Information when was the last time the job was successfully scheduled.";

    pub const HPA_SCALE_TARGET_REF: &str = "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.";
    pub const HPA_METRICS: &str = "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).  The desired replica count is calculated multiplying the ratio between the target value and the current value by the current number of pods.  Ergo, metrics used must decrease as the pod count is increased, and vice-versa.  See the individual metric source types for more information about how each type of metric must respond.";
    pub const HPA_MIN_REPLICAS: &str = "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.  It defaults to 1 pod.  minReplicas is allowed to be 0 if the alpha feature gate HPAScaleToZero is enabled and at least one Object or External metric is configured.  Scaling is active as long as at least one metric value is available.";
    pub const HPA_MAX_REPLICAS: &str = "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up. It cannot be less that minReplicas.";
    pub const HPA_CURRENT_REPLICAS: &str = "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.";

    pub const ROLE_BINDING_ROLE_REF: &str = "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";
    pub const CLUSTER_ROLE_BINDING_ROLE_REF: &str = "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";
    pub const LEASE_HOLDER_IDENTITY: &str = "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.";
    pub const STORAGE_CLASS_PROVISIONER: &str =
        "provisioner indicates the type of the provisioner.";
    pub const STORAGE_CLASS_RECLAIM_POLICY: &str = "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.";
    pub const STORAGE_CLASS_VOLUME_BINDING_MODE: &str = "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature.";
    pub const STORAGE_CLASS_ALLOW_VOLUME_EXPANSION: &str =
        "allowVolumeExpansion shows whether the storage class allow volume expand.";
    pub const ENDPOINT_SLICE_ADDRESS_TYPE: &str = "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name.";
    pub const ENDPOINT_SLICE_PORTS: &str = "ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates \"all ports\". Each slice may include a maximum of 100 ports.";
    pub const ENDPOINT_SLICE_ENDPOINTS: &str = "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn now() -> Timestamp {
        "2025-06-01T12:00:00Z".parse().unwrap()
    }

    /// The RFC 3339 form of `now` minus `secs` seconds.
    fn ago(secs: i64) -> String {
        now()
            .checked_sub(SignedDuration::from_secs(secs))
            .unwrap()
            .to_string()
    }

    fn row_of(group: &str, kind: &str, object: Value) -> Vec<Value> {
        let cells = cells(group, kind, &object, now()).unwrap();
        assert_eq!(
            cells.len(),
            columns(group, kind).len(),
            "one cell per column for {kind}"
        );
        cells
    }

    /// The cells of the columns `kubectl get` shows without `-o wide`.
    fn narrow(group: &str, kind: &str, object: Value) -> Vec<Value> {
        let cols = columns(group, kind);
        row_of(group, kind, object)
            .into_iter()
            .zip(cols)
            .filter(|(_, c)| c.priority == 0)
            .map(|(v, _)| v)
            .collect()
    }

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

    fn pod(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec, "status": status})
    }

    fn two_containers() -> Value {
        json!({"containers": [{"name": "a"}, {"name": "b"}]})
    }

    fn pod_cells(spec: Value, status: Value) -> (String, String, String) {
        let c = narrow("", "Pod", pod(spec, status));
        let s = |i: usize| c[i].as_str().unwrap().to_string();
        (s(1), s(2), s(3))
    }

    fn running() -> Value {
        json!({"running": {}})
    }

    #[test]
    fn pod_ready_status_restarts() {
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        // Ready containers, restarts summed.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running()},
                    {"name": "b", "image": "", "imageID": "", "ready": false, "restartCount": 3}]})
            ),
            t("1/2", "podPhase", "6")
        );
        // A waiting reason replaces the phase; the first container's reason wins.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                    {"name": "b", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]})
            ),
            t("0/2", "CrashLoopBackOff", "6")
        );
        // Ready but not running is not counted ready; status.reason beats the phase.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "podPhase", "reason": "podReason", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running()},
                    {"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 3}]})
            ),
            t("1/2", "podReason", "6")
        );
        // One container completed, one running: NotReady without the Ready condition...
        let statuses = json!([
            {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running()}]);
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Running", "containerStatuses": statuses})
            ),
            t("1/2", "NotReady", "6")
        );
        // ...and Running with it.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Running", "containerStatuses": statuses,
                       "conditions": [{"type": "Ready", "status": "True"}]})
            ),
            t("1/2", "Running", "6")
        );
        // Terminated without a reason: the signal, else the exit code.
        assert_eq!(
            pod_cells(
                json!({"containers": [{"name": "a"}]}),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}]})
            ),
            t("0/1", "Signal:9", "0")
        );
        assert_eq!(
            pod_cells(
                json!({"containers": [{"name": "a"}]}),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]})
            ),
            t("0/1", "ExitCode:2", "0")
        );
        // Restarts with the time of the last one.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 6, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(5 * 86400)}}},
                    {"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(20 * 86400)}}}]})
            ),
            t("2/2", "Running", "9 (5d ago)")
        );
        assert_eq!(
            pod_cells(
                json!({"containers": [{"name": "a"}]}),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(330)}}}]})
            ),
            t("1/1", "Running", "3 (5m30s ago)")
        );
        // Scheduling gates.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})
            ),
            t("0/2", "SchedulingGated", "0")
        );
    }

    #[test]
    fn pod_init_containers() {
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        let spec = |n: usize| {
            let init: Vec<Value> = (0..n)
                .map(|i| json!({"name": format!("init{i}")}))
                .collect();
            json!({"initContainers": init, "containers": [{"name": "main"}]})
        };
        let waiting_main = json!([{"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {}}}]);
        // The first init container restarting: Init:0/1, its restarts and when.
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "containerStatuses": waiting_main, "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}}]})
            ),
            t("0/1", "Init:0/1", "3 (10s ago)")
        );
        // The first completed (restarts counted), the second running: Init:1/2.
        assert_eq!(
            pod_cells(
                spec(2),
                json!({"phase": "Pending", "containerStatuses": waiting_main, "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 2, "state": {"terminated": {"exitCode": 0}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(120)}}},
                    {"name": "init1", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}}]})
            ),
            t("0/1", "Init:1/2", "5 (10s ago)")
        );
        // A failing init container shows its reason, or its exit code or signal.
        assert_eq!(
            pod_cells(
                spec(2),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})
            ),
            t("0/1", "Init:CrashLoopBackOff", "1")
        );
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}]})
            ),
            t("0/1", "Init:ExitCode:3", "0")
        );
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]})
            ),
            t("0/1", "Init:Error", "0")
        );
        // PodInitializing is not a reason to show.
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]})
            ),
            t("0/1", "Init:0/1", "0")
        );
        // Once initialized, only the app containers' restarts count.
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Running", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 2, "state": {"terminated": {"exitCode": 0}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(120)}}}],
                    "containerStatuses": [
                    {"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 4, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(20)}}}]})
            ),
            t("0/1", "Running", "4 (20s ago)")
        );
    }

    #[test]
    fn pod_sidecars() {
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        let spec = json!({"initContainers": [
            {"name": "sidecar-1", "restartPolicy": "Always"},
            {"name": "sidecar-2", "restartPolicy": "Always"}],
            "containers": [{"name": "main"}]});
        let main = |ready: bool, state: Value| {
            json!([{"name": "main", "image": "", "imageID": "", "ready": ready, "restartCount": 4, "state": state,
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(20)}}}])
        };
        // The first sidecar started, the second not yet: Init:1/2, sidecars count in the total.
        assert_eq!(
            pod_cells(
                spec.clone(),
                json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False"}],
                    "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {}}}],
                    "initContainerStatuses": [
                    {"name": "sidecar-1", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": running(), "started": true,
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}},
                    {"name": "sidecar-2", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": running(), "started": false}]})
            ),
            t("0/3", "Init:1/2", "3 (10s ago)")
        );
        // All started and initialized: sidecar restarts count with the app containers'.
        assert_eq!(
            pod_cells(
                spec.clone(),
                json!({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}],
                    "containerStatuses": main(true, running()),
                    "initContainerStatuses": [
                    {"name": "sidecar-1", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running(), "started": true,
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}},
                    {"name": "sidecar-2", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": running(), "started": true}]})
            ),
            t("2/3", "Running", "7 (10s ago)")
        );
        // Statuses for containers the spec does not have are not sidecars.
        assert_eq!(
            pod_cells(
                json!({"initContainers": [{"name": "init1"}, {"name": "sidecar1", "restartPolicy": "Always"}],
                       "containers": [{"name": "container1"}]}),
                json!({"phase": "Running", "initContainerStatuses": [
                    {"name": "initinvalid", "image": "", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "init1", "image": "", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "sidecar1", "image": "", "imageID": "", "ready": false, "restartCount": 0}],
                    "containerStatuses": [
                    {"name": "containerinvalid", "image": "", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "container1", "image": "", "imageID": "", "ready": false, "restartCount": 0}]})
            ),
            t("0/2", "Init:0/2", "0")
        );
    }

    #[test]
    fn pod_terminating_and_completed() {
        let mut p = pod(
            json!({"containers": [{"name": "a"}]}),
            json!({"phase": "Running", "containerStatuses": [
                {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 0, "state": running()}]}),
        );
        p["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(narrow("", "Pod", p.clone())[2], "Terminating");
        p["status"]["reason"] = json!("NodeLost");
        assert_eq!(narrow("", "Pod", p)[2], "Unknown");

        // A finished pod keeps its status and is marked Completed.
        let mut done = pod(
            json!({"containers": [{"name": "a"}]}),
            json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        );
        done["metadata"]["deletionTimestamp"] = json!(ago(1));
        let r = row("", "Pod", &done, now()).unwrap();
        assert_eq!(r.cells[2], "Completed");
        assert_eq!(
            serde_json::to_value(&r.conditions).unwrap(),
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                    "message": "The pod has completed successfully."}])
        );
        let failed = pod(json!({"containers": []}), json!({"phase": "Failed"}));
        let r = row("", "Pod", &failed, now()).unwrap();
        assert_eq!(r.conditions[0].reason, "Failed");
        assert_eq!(r.conditions[0].message, "The pod failed.");
    }

    #[test]
    fn pod_wide() {
        let mut p = pod(
            json!({"containers": [{"name": "a"}], "nodeName": "n1",
                   "readinessGates": [{"conditionType": "c1"}, {"conditionType": "c2"}, {"conditionType": "c3"}]}),
            json!({"phase": "Running", "podIPs": [{"ip": "1.1.1.1"}, {"ip": "2001:db8::"}],
                   "nominatedNodeName": "n2",
                   "conditions": [{"type": "c1", "status": "False"}, {"type": "c2", "status": "True"}]}),
        );
        p["metadata"]["creationTimestamp"] = json!(ago(3 * 3600 + 60));
        assert_eq!(
            row_of("", "Pod", p),
            vec![
                json!("p"),
                json!("0/1"),
                json!("Running"),
                json!("0"),
                json!("3h1m"),
                json!("1.1.1.1"),
                json!("n1"),
                json!("n2"),
                json!("1/3")
            ]
        );
        let bare = pod(json!({"containers": []}), json!({}));
        assert_eq!(
            row_of("", "Pod", bare)[4..],
            [
                json!("<unknown>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>")
            ]
        );
        // status.podIP alone counts.
        let legacy = pod(json!({"containers": []}), json!({"podIP": "10.0.0.7"}));
        assert_eq!(row_of("", "Pod", legacy)[5], "10.0.0.7");
    }

    fn service(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "svc", "creationTimestamp": ago(45)},
               "spec": spec, "status": status})
    }

    #[test]
    fn service_rows() {
        assert_eq!(
            row_of(
                "",
                "Service",
                service(
                    json!({"type": "NodePort", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
                           "selector": {"b": "2", "a": "1"},
                           "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}]}),
                    json!({})
                )
            ),
            vec![
                json!("svc"),
                json!("NodePort"),
                json!("10.0.0.1"),
                json!("<none>"),
                json!("80/TCP,443:30443/TCP"),
                json!("45s"),
                json!("a=1,b=2")
            ]
        );
        // ClusterIP with external IPs; headless; no ports; no selector.
        let c = row_of(
            "",
            "Service",
            service(
                json!({"type": "ClusterIP", "clusterIP": "None", "externalIPs": ["1.2.3.4", "5.6.7.8"]}),
                json!({}),
            ),
        );
        assert_eq!(c[2], "None");
        assert_eq!(c[3], "1.2.3.4,5.6.7.8");
        assert_eq!(c[4], "<none>");
        assert_eq!(c[6], "<none>");
        // Load balancers: pending, then the sorted ingress points (never clipped: the server
        // prints wide), then those and the external IPs.
        let lb = |status: Value, external: Value| {
            row_of(
                "",
                "Service",
                service(
                    json!({"type": "LoadBalancer", "clusterIPs": ["1.5.6.7"], "externalIPs": external,
                           "ports": [{"port": 80, "protocol": "TCP"}, {"port": 8090, "protocol": "UDP"},
                                     {"port": 7777, "protocol": "SCTP"}]}),
                    status,
                ),
            )
        };
        let pending = lb(json!({}), json!([]));
        assert_eq!(pending[2], "1.5.6.7");
        assert_eq!(pending[3], "<pending>");
        assert_eq!(pending[4], "80/TCP,8090/UDP,7777/SCTP");
        let points = json!({"loadBalancer": {"ingress": [
            {"ip": "3.4.5.6"}, {"ip": "2.3.4.5"}, {"ip": "5.6.7.8", "hostname": "host5678"},
            {"hostname": "lb.example.com"}, {"ip": "2.3.4.5"}]}});
        assert_eq!(
            lb(points.clone(), json!([]))[3],
            "2.3.4.5,3.4.5.6,5.6.7.8,lb.example.com"
        );
        assert_eq!(
            lb(points, json!(["9.9.9.9"]))[3],
            "2.3.4.5,3.4.5.6,5.6.7.8,lb.example.com,9.9.9.9"
        );
        assert_eq!(lb(json!({}), json!(["9.9.9.9"]))[3], "9.9.9.9");
        // ExternalName prints the name.
        let ext = row_of(
            "",
            "Service",
            service(
                json!({"type": "ExternalName", "externalName": "db.example.com"}),
                json!({}),
            ),
        );
        assert_eq!(ext[2], "<none>");
        assert_eq!(ext[3], "db.example.com");
    }

    fn node(labels: Value, spec: Value, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "n1", "labels": labels, "creationTimestamp": ago(2 * 86400 + 3600)},
               "spec": spec, "status": status})
    }

    #[test]
    fn node_rows() {
        let status_of = |spec: Value, conditions: Value| {
            row_of(
                "",
                "Node",
                node(json!({}), spec, json!({"conditions": conditions})),
            )[1]
            .clone()
        };
        let ready = json!([{"type": "Ready", "status": "True"}]);
        assert_eq!(status_of(json!({}), ready.clone()), "Ready");
        assert_eq!(
            status_of(json!({"unschedulable": true}), ready),
            "Ready,SchedulingDisabled"
        );
        assert_eq!(
            status_of(json!({}), json!([{"type": "Ready", "status": "False"}])),
            "NotReady"
        );
        assert_eq!(
            status_of(json!({}), json!([{"type": "Ready", "status": "Unknown"}])),
            "NotReady"
        );
        assert_eq!(
            status_of(
                json!({}),
                json!([{"type": "MemoryPressure", "status": "True"}])
            ),
            "Unknown"
        );
        assert_eq!(
            status_of(json!({"unschedulable": true}), json!([])),
            "Unknown,SchedulingDisabled"
        );

        let roles =
            |labels: Value| row_of("", "Node", node(labels, json!({}), json!({})))[2].clone();
        assert_eq!(roles(json!({})), "<none>");
        assert_eq!(
            roles(
                json!({"node-role.kubernetes.io/master": "", "node-role.kubernetes.io/control-plane": "",
                         "node-role.kubernetes.io/proxy": "", "kubernetes.io/role": "node",
                         "node-role.kubernetes.io/": "x"})
            ),
            "control-plane,master,node,proxy"
        );
        assert_eq!(roles(json!({"kubernetes.io/role": "node"})), "node");
        assert_eq!(roles(json!({"kubernetes.io/role": ""})), "<none>");

        let full = row_of(
            "",
            "Node",
            node(
                json!({}),
                json!({}),
                json!({"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "ExternalIP", "address": "2.2.2.2"}, {"type": "InternalIP", "address": "3.3.3.3"},
                                     {"type": "ExternalIP", "address": "4.4.4.4"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                                    "kernelVersion": "", "containerRuntimeVersion": "containerd://1.7.0",
                                    "architecture": "amd64", "bootID": "", "machineID": "", "operatingSystem": "linux",
                                    "systemUUID": "", "kubeProxyVersion": ""}}),
            ),
        );
        assert_eq!(
            full,
            vec![
                json!("n1"),
                json!("Ready"),
                json!("<none>"),
                json!("2d1h"),
                json!("v1.32.0"),
                json!("3.3.3.3"),
                json!("2.2.2.2"),
                json!("Debian GNU/Linux 12 (bookworm)"),
                json!("<unknown>"),
                json!("containerd://1.7.0")
            ]
        );
        let bare = row_of("", "Node", node(json!({}), json!({}), json!({})));
        assert_eq!(
            bare[4..],
            [
                json!(""),
                json!("<none>"),
                json!("<none>"),
                json!("<unknown>"),
                json!("<unknown>"),
                json!("<unknown>")
            ]
        );
    }

    #[test]
    fn deployment_rows() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "creationTimestamp": ago(600)},
            "spec": {"replicas": 3,
                     "selector": {"matchLabels": {"app": "web"},
                                  "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                                       {"key": "canary", "operator": "DoesNotExist"}]},
                     "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"},
                                                          {"name": "log", "image": "busybox"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        assert_eq!(
            row_of("apps", "Deployment", d),
            vec![
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("10m"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,!canary,tier in (a,b)")
            ]
        );
        // A fresh deployment: no status yet.
        let fresh = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {}}});
        assert_eq!(
            narrow("apps", "Deployment", fresh),
            vec![
                json!("x"),
                json!("0/1"),
                json!(0),
                json!(0),
                json!("<unknown>")
            ]
        );
        // An invalid selector.
        let bad = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, "template": {}}});
        assert_eq!(row_of("apps", "Deployment", bad)[7], "<invalid>");
    }

    #[test]
    fn replica_set_stateful_set_daemon_set_rows() {
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-abc"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 3, "readyReplicas": 1}});
        assert_eq!(
            row_of("apps", "ReplicaSet", rs),
            vec![
                json!("web-abc"),
                json!(3),
                json!(3),
                json!(1),
                json!("<unknown>"),
                json!("c"),
                json!("i"),
                json!("app=web")
            ]
        );
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                     "template": {"spec": {"containers": [{"name": "pg", "image": "postgres"}]}}},
            "status": {"replicas": 2, "readyReplicas": 2}});
        assert_eq!(
            row_of("apps", "StatefulSet", sts),
            vec![
                json!("db"),
                json!("2/3"),
                json!("<unknown>"),
                json!("pg"),
                json!("postgres")
            ]
        );
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"foo": "bar"}},
                     "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                           "containers": [{"name": "fake-container1", "image": "fake-image1"},
                                                          {"name": "fake-container2", "image": "fake-image2"}]}}},
            "status": {"currentNumberScheduled": 2, "desiredNumberScheduled": 3, "numberReady": 1,
                       "updatedNumberScheduled": 2, "numberAvailable": 0, "numberMisscheduled": 0}});
        assert_eq!(
            row_of("apps", "DaemonSet", ds),
            vec![
                json!("agent"),
                json!(3),
                json!(2),
                json!(1),
                json!(2),
                json!(0),
                json!("kubernetes.io/os=linux"),
                json!("<unknown>"),
                json!("fake-container1,fake-container2"),
                json!("fake-image1,fake-image2"),
                json!("foo=bar")
            ]
        );
    }

    fn job(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "job1", "creationTimestamp": ago(3600)},
               "spec": spec, "status": status})
    }

    #[test]
    fn job_rows() {
        let template = json!({"spec": {"containers": [{"name": "pi", "image": "perl"}]}});
        let cond = |t: &str| json!([{"type": t, "status": "True"}]);
        assert_eq!(
            row_of(
                "batch",
                "Job",
                job(
                    json!({"completions": 2, "template": template, "selector": {"matchLabels": {"job-label": "v"}}}),
                    json!({"succeeded": 1, "startTime": ago(1200)})
                )
            ),
            vec![
                json!("job1"),
                json!("Running"),
                json!("1/2"),
                json!("20m"),
                json!("60m"),
                json!("pi"),
                json!("perl"),
                json!("job-label=v")
            ]
        );
        let narrow_job = |spec: Value, status: Value| narrow("batch", "Job", job(spec, status));
        // Completed: the duration is start to completion.
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"succeeded": 1, "startTime": ago(2000), "completionTime": ago(200), "conditions": cond("Complete")})
            ),
            vec![
                json!("job1"),
                json!("Complete"),
                json!("1/1"),
                json!("30m"),
                json!("60m")
            ]
        );
        // Parallel without completions; not started.
        assert_eq!(
            narrow_job(json!({"parallelism": 3, "template": template}), json!({}))[2..4],
            [json!("0/1 of 3"), json!("")]
        );
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": cond("Failed")})
            )[1],
            "Failed"
        );
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": cond("Suspended")})
            )[1],
            "Suspended"
        );
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": cond("FailureTarget")})
            )[1],
            "FailureTarget"
        );
        // Only a true condition counts.
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": [{"type": "Complete", "status": "False"}]})
            )[1],
            "Running"
        );
        let mut deleting = job(
            json!({"template": template}),
            json!({"conditions": cond("Suspended")}),
        );
        deleting["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(narrow("batch", "Job", deleting)[1], "Terminating");
    }

    #[test]
    fn cron_job_rows() {
        let cj = |spec: Value, status: Value| {
            row_of(
                "batch",
                "CronJob",
                json!({"apiVersion": "batch/v1", "kind": "CronJob",
                       "metadata": {"name": "hello", "creationTimestamp": ago(3 * 86400)},
                       "spec": spec, "status": status}),
            )
        };
        let template = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                                       "selector": {"matchLabels": {"a": "b"}}}});
        assert_eq!(
            cj(
                json!({"schedule": "*/1 * * * *", "suspend": false, "jobTemplate": template}),
                json!({"active": [{"name": "hello-1"}], "lastScheduleTime": ago(45)})
            ),
            vec![
                json!("hello"),
                json!("*/1 * * * *"),
                json!("<none>"),
                json!("False"),
                json!(1),
                json!("45s"),
                json!("3d"),
                json!("c"),
                json!("busybox"),
                json!("a=b")
            ]
        );
        let fresh = cj(
            json!({"schedule": "0 0 * * *", "timeZone": "Etc/UTC", "jobTemplate": {}}),
            json!({}),
        );
        assert_eq!(
            fresh[2..6],
            [
                json!("Etc/UTC"),
                json!("<unset>"),
                json!(0),
                json!("<none>")
            ]
        );
        assert_eq!(fresh[9], "<none>");
    }

    #[test]
    fn event_rows() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "event2"},
            "involvedObject": {"kind": "Deployment", "name": "Deployment Name", "fieldPath": "spec.containers{foo}"},
            "source": {"component": "kubelet", "host": "Node1"},
            "reason": "Event Reason", "message": " Message Data\n", "type": "Warning", "count": 6,
            "firstTimestamp": ago(3 * 86400), "lastTimestamp": ago(2 * 86400)});
        assert_eq!(
            row_of("", "Event", core),
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
        let r = row_of("", "Event", series);
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
            row_of("events.k8s.io", "Event", v1),
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
        assert_eq!(columns("events.k8s.io", "Event"), columns("", "Event"));
        let none = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x"}, "involvedObject": {}});
        assert_eq!(row_of("", "Event", none)[0], "<unknown>");
    }

    #[test]
    fn storage_rows() {
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv1", "creationTimestamp": ago(60)},
            "spec": {"capacity": {"storage": "1024Mi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "standard",
                     "claimRef": {"namespace": "default", "name": "data"}, "volumeMode": "Filesystem"},
            "status": {"phase": "Bound"}});
        assert_eq!(
            row_of("", "PersistentVolume", pv),
            vec![
                json!("pv1"),
                json!("1Gi"),
                json!("RWO,RWX"),
                json!("Retain"),
                json!("Bound"),
                json!("default/data"),
                json!("standard"),
                json!("<unset>"),
                json!(""),
                json!("60s"),
                json!("Filesystem")
            ]
        );
        let pvc = |volume: Option<&str>| {
            let mut spec =
                json!({"resources": {"requests": {"storage": "5Gi"}}, "storageClassName": "fast"});
            if let Some(v) = volume {
                spec["volumeName"] = json!(v);
            }
            row_of(
                "",
                "PersistentVolumeClaim",
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "data", "annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}},
                       "spec": spec,
                       "status": {"phase": if volume.is_some() { "Bound" } else { "Pending" },
                                  "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOncePod"]}}),
            )
        };
        assert_eq!(
            pvc(Some("pv1")),
            vec![
                json!("data"),
                json!("Bound"),
                json!("pv1"),
                json!("5Gi"),
                json!("RWOP"),
                json!("beta"),
                json!("<unset>"),
                json!("<unknown>"),
                json!("<unset>")
            ]
        );
        assert_eq!(
            pvc(None)[1..5],
            [json!("Pending"), json!(""), json!(""), json!("")]
        );

        let sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
        assert_eq!(
            row_of("storage.k8s.io", "StorageClass", sc),
            vec![
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false),
                json!("<unknown>")
            ]
        );
    }

    #[test]
    fn hpa_targets() {
        let hpa = |metrics: Value, current: Value| {
            row_of(
                "autoscaling",
                "HorizontalPodAutoscaler",
                json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                       "metadata": {"name": "some-hpa"},
                       "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                                "minReplicas": 2, "maxReplicas": 10, "metrics": metrics},
                       "status": {"currentReplicas": 4, "desiredReplicas": 5, "currentMetrics": current}}),
            )
        };
        let cpu_util = json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}});
        let cpu_now = json!({"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 50, "averageValue": "40m"}}});
        assert_eq!(
            hpa(json!([cpu_util]), json!([cpu_now])),
            vec![
                json!("some-hpa"),
                json!("Deployment/web"),
                json!("cpu: 50%/80%"),
                json!("2"),
                json!(10),
                json!(4),
                json!("<unknown>")
            ]
        );
        let targets = |metrics: Value, current: Value| hpa(metrics, current)[2].clone();
        assert_eq!(targets(json!([cpu_util]), json!([])), "cpu: <unknown>/80%");
        assert_eq!(targets(json!([]), json!([])), "<none>");
        let mem_avg = json!({"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "AverageValue", "averageValue": "1024Mi"}}});
        let mem_now = json!({"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "500Mi"}}});
        assert_eq!(
            targets(json!([mem_avg]), json!([mem_now])),
            "memory: 500Mi/1Gi"
        );
        let pods = json!({"type": "Pods", "pods": {"metric": {"name": "rps"},
            "target": {"type": "AverageValue", "averageValue": "100m"}}});
        let pods_now = json!({"type": "Pods", "pods": {"metric": {"name": "rps"}, "current": {"averageValue": "0.05"}}});
        assert_eq!(targets(json!([pods]), json!([pods_now])), "50m/100m");
        let ext_avg = json!({"type": "External", "external": {"metric": {"name": "q"},
            "target": {"type": "AverageValue", "averageValue": "100m"}}});
        assert_eq!(targets(json!([ext_avg]), json!([])), "<unknown>/100m (avg)");
        let obj = json!({"type": "Object", "object": {"metric": {"name": "q"},
            "describedObject": {"kind": "Service", "name": "s"},
            "target": {"type": "Value", "value": "100m"}}});
        let obj_now = json!({"type": "Object", "object": {"metric": {"name": "q"},
            "describedObject": {"kind": "Service", "name": "s"}, "current": {"value": "50m"}}});
        assert_eq!(targets(json!([obj]), json!([obj_now])), "50m/100m");
        let container = json!({"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
            "target": {"type": "Utilization"}}});
        assert_eq!(
            targets(json!([container]), json!([])),
            "cpu: <unknown>/<auto>"
        );
        assert_eq!(
            targets(json!([cpu_util, mem_avg, pods, obj]), json!([cpu_now])),
            "cpu: 50%/80%, memory: <unknown>/1Gi + 2 more..."
        );
        let unset = row_of(
            "autoscaling",
            "HorizontalPodAutoscaler",
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
                   "spec": {"scaleTargetRef": {"kind": "ReplicationController", "name": "some-rc"}, "maxReplicas": 10},
                   "status": {"desiredReplicas": 0}}),
        );
        assert_eq!(
            unset[2..6],
            [json!("<none>"), json!("<unset>"), json!(10), json!(0)]
        );
    }

    #[test]
    fn networking_rows() {
        let ing = |rules: Value, tls: Value, lb: Value| {
            row_of(
                "networking.k8s.io",
                "Ingress",
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                       "metadata": {"name": "test1"},
                       "spec": {"ingressClassName": "nginx", "rules": rules, "tls": tls},
                       "status": {"loadBalancer": lb}}),
            )
        };
        assert_eq!(
            ing(
                json!([{"host": "a.example.com"}, {"host": "b.example.com"}]),
                json!([{"hosts": ["a.example.com"]}]),
                json!({"ingress": [{"ip": "2.3.4.5", "hostname": "localhost"}, {"hostname": "lb.example.com"}]})
            ),
            vec![
                json!("test1"),
                json!("nginx"),
                json!("a.example.com,b.example.com"),
                json!("2.3.4.5,lb.example.com"),
                json!("80, 443"),
                json!("<unknown>")
            ]
        );
        let hosts = |rules: Value| ing(rules, json!([]), json!({}))[2].clone();
        assert_eq!(hosts(json!([])), "*");
        assert_eq!(hosts(json!([{}])), "*");
        assert_eq!(
            hosts(json!([{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}, {}])),
            "a,b,c + 3 more..."
        );
        assert_eq!(
            hosts(json!([{"host": "a"}, {"host": "b"}, {"host": "c"}])),
            "a,b,c"
        );
        let plain = ing(json!([]), json!([]), json!({}));
        assert_eq!(plain[3..5], [json!(""), json!("80")]);

        let ic = |params: Value| {
            row_of(
                "networking.k8s.io",
                "IngressClass",
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nginx"},
                       "spec": {"controller": "example.com/controller", "parameters": params}}),
            )[2]
                .clone()
        };
        assert_eq!(ic(json!(null)), "<none>");
        assert_eq!(
            ic(json!({"kind": "customgroup", "name": "example"})),
            "customgroup/example"
        );
        assert_eq!(
            ic(json!({"apiGroup": "example.com", "kind": "customgroup", "name": "example"})),
            "customgroup.example.com/example"
        );

        let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "web-x"},
            "addressType": "IPv4",
            "ports": [{"port": 80}, {"name": "metrics"}, {}, {"port": 443}],
            "endpoints": [{"addresses": ["10.0.0.1", "10.0.0.2"]}, {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]});
        assert_eq!(
            row_of("discovery.k8s.io", "EndpointSlice", slice)[1..4],
            [
                json!("IPv4"),
                json!("80,metrics,* + 1 more..."),
                json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...")
            ]
        );
        let empty = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "e"},
            "addressType": "IPv4", "endpoints": []});
        assert_eq!(
            row_of("discovery.k8s.io", "EndpointSlice", empty)[2..4],
            [json!("<unset>"), json!("<unset>")]
        );

        let ep = |subsets: Value| {
            row_of(
                "",
                "Endpoints",
                json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web"}, "subsets": subsets}),
            )[1]
                .clone()
        };
        assert_eq!(ep(json!([])), "<none>");
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}], "ports": [{"port": 8080}]}])
            ),
            "10.0.0.1:8080,[fd00::1]:8080"
        );
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}], "ports": [{"port": 80}, {"port": 443}]}])
            ),
            "1.1.1.1:80,2.2.2.2:80,1.1.1.1:443 + 1 more..."
        );
        assert_eq!(ep(json!([{"addresses": [{"ip": "1.1.1.1"}]}])), "1.1.1.1");
    }

    #[test]
    fn small_kinds() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
            "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AAE="}});
        assert_eq!(
            row_of("", "ConfigMap", cm),
            vec![json!("cm"), json!(3), json!("<unknown>")]
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "type": "Opaque", "data": {"a": "MQ=="}, "stringData": {"a": "x", "b": "y"}});
        assert_eq!(
            row_of("", "Secret", secret),
            vec![json!("s"), json!("Opaque"), json!(2), json!("<unknown>")]
        );
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "creationTimestamp": ago(86400 * 30)},
            "status": {"phase": "Active"}});
        assert_eq!(
            row_of("", "Namespace", ns),
            vec![json!("default"), json!("Active"), json!("30d")]
        );
        let sa =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        assert_eq!(
            row_of("", "ServiceAccount", sa),
            vec![json!("default"), json!(0), json!("<unknown>")]
        );
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n1"},
            "spec": {"holderIdentity": "n1"}});
        assert_eq!(
            row_of("coordination.k8s.io", "Lease", lease),
            vec![json!("n1"), json!("n1"), json!("<unknown>")]
        );

        let rb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                         {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}, {"kind": "User", "name": "bob"}]});
        assert_eq!(
            row_of("rbac.authorization.k8s.io", "RoleBinding", rb),
            vec![
                json!("rb"),
                json!("ClusterRole/view"),
                json!("<unknown>"),
                json!("alice, bob"),
                json!("devs"),
                json!("ci/bot")
            ]
        );
        let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}});
        assert_eq!(
            row_of("rbac.authorization.k8s.io", "ClusterRoleBinding", crb),
            vec![
                json!("admin"),
                json!("ClusterRole/cluster-admin"),
                json!("<unknown>"),
                json!(""),
                json!(""),
                json!("")
            ]
        );
    }

    #[test]
    fn default_convertor() {
        for (group, kind) in [
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("apiextensions.k8s.io", "CustomResourceDefinition"),
            ("example.com", "Widget"),
        ] {
            assert!(!has_printer(group, kind));
            let cols = columns(group, kind);
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
            cells(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                &crd,
                now()
            )
            .unwrap(),
            vec![json!("widgets.example.com"), json!("2024-03-05T07:08:09Z")]
        );
        let no_time = json!({"metadata": {"name": "r"}});
        assert_eq!(
            cells("rbac.authorization.k8s.io", "Role", &no_time, now()).unwrap(),
            vec![json!("r"), json!("0001-01-01T00:00:00Z")]
        );
    }

    #[test]
    fn column_definitions() {
        let pod = columns("", "Pod");
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
        let narrow_names = |group: &str, kind: &str| -> Vec<String> {
            columns(group, kind)
                .into_iter()
                .filter(|c| c.priority == 0)
                .map(|c| c.name.to_uppercase())
                .collect()
        };
        assert_eq!(
            narrow_names("", "Service"),
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
            narrow_names("", "Event"),
            ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        );
        assert_eq!(
            narrow_names("apps", "Deployment"),
            ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
        );
        assert_eq!(
            narrow_names("batch", "Job"),
            ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
        );
        assert_eq!(
            narrow_names("batch", "CronJob"),
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
            narrow_names("", "Node"),
            ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
        );
        assert_eq!(
            narrow_names("", "PersistentVolumeClaim"),
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
            narrow_names("autoscaling", "HorizontalPodAutoscaler"),
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
        assert_eq!(columns("apps", "ReplicaSet")[1].type_, "integer");
        assert_eq!(columns("batch", "CronJob")[3].type_, "boolean");
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
        assert!(cells("", "Pod", &bad, now()).is_err());
    }
}
