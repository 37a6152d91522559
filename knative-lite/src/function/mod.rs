//! Functions from source (`functions.minik8s.io/v1alpha1` Function): Python source and a
//! handler's name, no image. A Function is served by the same engine as a Knative Service:
//! it owns a Service of its own name whose revisions run the project's Python runtime with
//! the source in their environment, so every update is a new immutable Revision, routing and
//! scaling are Knative's, and cold starts take a warm pod from the namespace's pool.

pub mod controller;
pub mod packages;
pub mod pool;
pub mod validate;

use k8s_openapi::api::core::v1::ConfigMapKeySelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::serving::Status;

pub const GROUP: &str = "functions.minik8s.io";
/// The only runtime so far.
pub const PYTHON3: &str = "python3";
/// The handler called when the Function names none.
pub const DEFAULT_HANDLER: &str = "handle";

/// Labels and annotations of what Functions own.
pub mod labels {
    /// On the Function's Service, and so on its Route, Configuration, Revisions and pods.
    pub const FUNCTION: &str = "functions.minik8s.io/function";
    /// On the warm pods of a namespace's pool: the runtime they run.
    pub const POOL: &str = "functions.minik8s.io/pool";
    /// On a pool pod taken for a revision: the revision's name (the pod left the pool).
    pub const SPECIALIZED: &str = "functions.minik8s.io/specialized";
    /// Annotation on a taken pod: when its container started. A container that started
    /// again since has lost the function it was given.
    pub const SPECIALIZED_STARTED: &str = "functions.minik8s.io/specialized-started";
}

/// When `pod`'s runtime container last started (`state.running.startedAt`).
pub fn container_started(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let running = statuses.first()?.state.as_ref()?.running.as_ref()?;
    Some(running.started_at.as_ref()?.0.to_string())
}

/// False for a pool pod taken for a function whose container has restarted since (it came
/// back empty); true for every other pod.
pub fn specialization_intact(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let taken = pod
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::SPECIALIZED));
    if !taken {
        return true;
    }
    let at = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::SPECIALIZED_STARTED));
    at.is_some() && at.cloned() == container_started(pod)
}

/// The environment a runtime pod reads its function from (a pool pod gets the same values
/// in its specialize request).
pub mod env {
    pub const SOURCE: &str = "MINIK8S_FN_SOURCE";
    pub const HANDLER: &str = "MINIK8S_FN_HANDLER";
    pub const NAME: &str = "MINIK8S_FN_NAME";
    pub const SITE_PACKAGES: &str = "MINIK8S_FN_SITE_PACKAGES";
}

/// Where the source comes from when it is not inline.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceFrom {
    pub config_map_key_ref: ConfigMapKeySelector,
}

/// How the function scales (Knative's autoscaling annotations on its revisions).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scaling {
    /// `concurrency` (requests in flight per pod, the default) or `rps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Per pod, of `metric`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_scale: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_scale: Option<i32>,
}

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "functions.minik8s.io",
    version = "v1alpha1",
    kind = "Function",
    namespaced,
    status = "FunctionStatus",
    shortname = "fn",
    category = "all",
    category = "functions",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.url"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.latestReadyRevisionName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FunctionSpec {
    /// `python3` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// The module's source, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The module's source, from a key of a ConfigMap in the Function's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_from: Option<SourceFrom>,
    /// The function the module defines and requests call (default `handle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// A requirements.txt: installed on the node, from its wheel directory, before the
    /// function first runs there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<Scaling>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionStatus {
    #[serde(flatten)]
    pub status: Status,
    /// Its Knative Service's URL: the host that reaches it on every node's port 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Where it answers on every node's gateway port ([`GATEWAY_PORT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_created_revision_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_ready_revision_name: Option<String>,
}

/// The port of every node's function gateway (`/function/<name>[.<namespace>]`, the path
/// the OpenFaaS gateway uses, and `/async-function/...`).
pub const GATEWAY_PORT: u16 = 8080;

/// The runtime every Python function pod runs (`python3 -c`): a small standard-library HTTP
/// server that loads the function from its environment or, in a pool pod, from the
/// activator's specialize request.
pub const RUNTIME: &str = include_str!("../../runtime/python.py");
/// The image the runtime runs in (`hack/images.sh` builds it from Debian's python3).
pub const PYTHON_IMAGE: &str = "python:3";
