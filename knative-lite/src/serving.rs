//! Knative Serving's `serving.knative.dev/v1` kinds, field for field as Knative defines them
//! (knative.dev/serving/pkg/apis/serving/v1), so users' manifests apply unchanged. A Revision's
//! spec is a PodSpec with Knative's few fields beside it; the CRDs carry the PodSpec's schema,
//! so the API server rejects a malformed template with a 422 instead of the controllers
//! failing to read it.

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "serving.knative.dev";

/// Labels Knative puts on what it creates; users' selectors rely on them.
pub mod labels {
    pub const SERVICE: &str = "serving.knative.dev/service";
    pub const SERVICE_UID: &str = "serving.knative.dev/serviceUID";
    pub const CONFIGURATION: &str = "serving.knative.dev/configuration";
    pub const CONFIGURATION_UID: &str = "serving.knative.dev/configurationUID";
    pub const CONFIGURATION_GENERATION: &str = "serving.knative.dev/configurationGeneration";
    pub const REVISION: &str = "serving.knative.dev/revision";
    pub const REVISION_UID: &str = "serving.knative.dev/revisionUID";
    pub const ROUTE: &str = "serving.knative.dev/route";
    pub const ROUTING_STATE: &str = "serving.knative.dev/routingState";
}

/// Annotations Knative reads on a revision template.
pub mod annotations {
    pub const MIN_SCALE: &str = "autoscaling.knative.dev/min-scale";
    pub const MAX_SCALE: &str = "autoscaling.knative.dev/max-scale";
    pub const INITIAL_SCALE: &str = "autoscaling.knative.dev/initial-scale";
    pub const CREATOR: &str = "serving.knative.dev/creator";
    pub const ROUTES: &str = "serving.knative.dev/routes";
}

/// Knative's `apis.Condition`: a Kubernetes condition with a severity.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// duckv1.Addressable.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Addressable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One entry of a routing table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrafficTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A Revision's desired state: a PodSpec and how many requests each container takes.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "serving.knative.dev",
    version = "v1",
    kind = "Revision",
    namespaced,
    status = "RevisionStatus",
    shortname = "rev",
    category = "all",
    category = "knative",
    category = "serving",
    printcolumn = r#"{"name":"Config Name","type":"string","jsonPath":".metadata.labels['serving\\.knative\\.dev/configuration']"}"#,
    printcolumn = r#"{"name":"Generation","type":"string","jsonPath":".metadata.labels['serving\\.knative\\.dev/configurationGeneration']"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].reason"}"#,
    printcolumn = r#"{"name":"Actual Replicas","type":"integer","jsonPath":".status.actualReplicas"}"#,
    printcolumn = r#"{"name":"Desired Replicas","type":"integer","jsonPath":".status.desiredReplicas"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSpec {
    #[serde(flatten)]
    pub pod: PodSpec,
    /// Requests in flight per container at most; 0 or unset: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_concurrency: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct RevisionTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default)]
    pub spec: RevisionSpec,
}

/// Status fields every kind has (duckv1.Status).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "serving.knative.dev",
    version = "v1",
    kind = "Service",
    namespaced,
    status = "ServiceStatus",
    shortname = "kservice",
    shortname = "ksvc",
    category = "all",
    category = "knative",
    category = "serving",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.url"}"#,
    printcolumn = r#"{"name":"LatestCreated","type":"string","jsonPath":".status.latestCreatedRevisionName"}"#,
    printcolumn = r#"{"name":"LatestReady","type":"string","jsonPath":".status.latestReadyRevisionName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default)]
    pub template: RevisionTemplateSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_ready_revision_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_created_revision_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Addressable>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "serving.knative.dev",
    version = "v1",
    kind = "Configuration",
    namespaced,
    status = "ConfigurationStatus",
    shortname = "config",
    shortname = "cfg",
    category = "all",
    category = "knative",
    category = "serving",
    printcolumn = r#"{"name":"LatestCreated","type":"string","jsonPath":".status.latestCreatedRevisionName"}"#,
    printcolumn = r#"{"name":"LatestReady","type":"string","jsonPath":".status.latestReadyRevisionName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationSpec {
    #[serde(default)]
    pub template: RevisionTemplateSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_ready_revision_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_created_revision_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "serving.knative.dev",
    version = "v1",
    kind = "Route",
    namespaced,
    status = "RouteStatus",
    shortname = "rt",
    category = "all",
    category = "knative",
    category = "serving",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.url"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Addressable>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}
