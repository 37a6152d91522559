//! Workflows of functions (`functions.minik8s.io/v1alpha1` Workflow and WorkflowRun): a
//! state machine in the Amazon States Language whose Tasks name Functions, so that what
//! users wrote for AWS Step Functions runs here with only its `Resource`s renamed. A
//! WorkflowRun is one execution; everything needed to carry it on (the definition it
//! started with, where each of its threads stands, retry counts) lives in its status, so a
//! controller that restarts, or another that takes the lease, resumes it from the API.
//!
//! Definitions, inputs and outputs are any JSON, which a structural schema cannot say of
//! one field: those fields are left out of the schema and kept by their parent's
//! `x-kubernetes-preserve-unknown-fields`.

pub mod asl;
pub mod controller;
pub mod driver;
pub mod engine;
pub mod graph;
pub mod invoke;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::serving::Status;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "functions.minik8s.io",
    version = "v1alpha1",
    kind = "Workflow",
    namespaced,
    status = "WorkflowStatus",
    shortname = "wf",
    category = "functions",
    printcolumn = r#"{"name":"Start","type":"string","jsonPath":".status.startAt"}"#,
    printcolumn = r#"{"name":"States","type":"integer","jsonPath":".status.states"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].reason"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WorkflowSpec {
    /// The state machine in the Amazon States Language (`StartAt`, `States`, `Comment`,
    /// `TimeoutSeconds`): written as YAML or JSON in the manifest, or a string holding the
    /// JSON (or YAML) text as the Step Functions console shows it.
    #[serde(default)]
    #[schemars(skip)]
    pub definition: serde_json::Value,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    #[serde(flatten)]
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// How many states the definition has, branches included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<i64>,
    /// The Functions its Tasks call, as `name.namespace`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
}

/// The phases of a run, as Step Functions names an execution's status.
pub mod phase {
    pub const RUNNING: &str = "Running";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const TIMED_OUT: &str = "TimedOut";
    pub const ABORTED: &str = "Aborted";

    /// Whether a run in `phase` is over.
    pub fn finished(phase: Option<&str>) -> bool {
        matches!(phase, Some(SUCCEEDED | FAILED | TIMED_OUT | ABORTED))
    }
}

/// The finalizer a running run carries, so that deleting it records `Aborted` (and stops
/// its calls) before it goes.
pub const FINALIZER: &str = "functions.minik8s.io/workflowrun";
/// Label on a run: its Workflow's name (`kubectl get workflowruns -l`).
pub const WORKFLOW_LABEL: &str = "functions.minik8s.io/workflow";
/// How many history events a run keeps (the oldest go first; `historyDropped` counts them).
pub const HISTORY_LIMIT: usize = 200;
/// The largest input or output a history event keeps as JSON; larger ones are summarised.
pub const HISTORY_VALUE_LIMIT: usize = 2048;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "functions.minik8s.io",
    version = "v1alpha1",
    kind = "WorkflowRun",
    namespaced,
    status = "WorkflowRunStatus",
    shortname = "wfr",
    category = "functions",
    printcolumn = r#"{"name":"Workflow","type":"string","jsonPath":".spec.workflow"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Duration","type":"string","jsonPath":".status.duration"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WorkflowRunSpec {
    /// The Workflow (in the run's namespace) to run.
    pub workflow: String,
    /// The execution's input (`{}` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub input: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WorkflowRunStatus {
    /// Running, Succeeded, Failed, TimedOut or Aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// From start to completion (or to the last write while running), e.g. `1.042s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// The execution's output, once Succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub output: Option<serde_json::Value>,
    /// The error name (`States.TaskFailed`, a function's own error type...), once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// State transitions so far.
    #[serde(default)]
    pub transitions: i64,
    /// The latest [`HISTORY_LIMIT`] events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEvent>,
    /// Events dropped from the front of `history`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_dropped: Option<i64>,
    /// The definition the run started with (a later edit of the Workflow does not change a
    /// running execution, as in Step Functions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub definition: Option<serde_json::Value>,
    /// Where the run stands: the engine's resumable state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub execution: Option<serde_json::Value>,
}

impl WorkflowRun {
    /// A new run of `workflow` with `input`, named `<workflow>-<random>`, labelled with its
    /// workflow and carrying the finalizer already (the controller need not add it before
    /// it starts): what `kubectl fn run` and the gateway create.
    pub fn of(workflow: &str, input: serde_json::Value) -> WorkflowRun {
        let mut run = WorkflowRun::new(
            "",
            WorkflowRunSpec {
                workflow: workflow.to_owned(),
                input: Some(input),
            },
        );
        run.metadata.name = None;
        run.metadata.generate_name = Some(format!("{workflow}-"));
        run.metadata.labels = Some([(WORKFLOW_LABEL.to_owned(), workflow.to_owned())].into());
        run.metadata.finalizers = Some(vec![FINALIZER.to_owned()]);
        run
    }
}

/// One step of a run's history.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HistoryEvent {
    /// `StateEntered`, `StateExited`, `TaskFailed` (an attempt failed; a retry or catch may
    /// follow), `StateFailed`.
    #[serde(rename = "type")]
    pub type_: String,
    pub state: String,
    /// Which thread: empty for the top level, `Parallel[1]` or `Map[3]` (nested: joined
    /// with `/`) inside branches and iterations.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thread: String,
    pub timestamp: Time,
    /// The attempt of a Task (1 for the first call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub input: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub output: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// The Resource of Step Functions' optimised Lambda integration: the function is the
/// input's `FunctionName`, its input the input's `Payload`, and its result comes back as
/// `{"Payload": ..., "StatusCode": 200}`, so definitions written for it run unchanged.
pub const LAMBDA_INVOKE: &str = "arn:aws:states:::lambda:invoke";

/// A Task's `Resource` (or a `FunctionName`) as the Function it names, `(name, namespace)`:
/// `name` (in the run's namespace), `name.namespace`, or a Lambda function's ARN
/// (`arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]`), whose name is taken.
pub fn function_of<'a>(resource: &'a str, namespace: &'a str) -> (&'a str, &'a str) {
    if let Some(rest) = resource.strip_prefix("arn:aws:lambda:")
        && let Some((_, name)) = rest.split_once(":function:")
    {
        let name = name.split(':').next().unwrap_or(name);
        return (name, namespace);
    }
    resource.split_once('.').unwrap_or((resource, namespace))
}

/// What a Task calls: `(function, namespace, payload, wrap)` where `wrap` says the result
/// comes back as the Lambda integration's `{"Payload": ...}`.
pub fn call_target(
    resource: &str,
    input: &serde_json::Value,
    namespace: &str,
) -> Result<(String, String, serde_json::Value, bool), asl::Failure> {
    if resource == LAMBDA_INVOKE {
        let function = input
            .get("FunctionName")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| {
                asl::Failure::runtime(format!(
                    "{LAMBDA_INVOKE} needs a FunctionName (a string) in its Parameters"
                ))
            })?;
        let (name, ns) = function_of(function, namespace);
        let payload = input
            .get("Payload")
            .cloned()
            .unwrap_or(serde_json::json!({}));
        return Ok((name.into(), ns.into(), payload, true));
    }
    let (name, ns) = function_of(resource, namespace);
    Ok((name.into(), ns.into(), input.clone(), false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resources_name_functions() {
        assert_eq!(function_of("f", "ns"), ("f", "ns"));
        assert_eq!(function_of("f.team", "ns"), ("f", "team"));
        assert_eq!(
            function_of(
                "arn:aws:lambda:us-east-1:123456789012:function:HelloFunction",
                "ns"
            ),
            ("HelloFunction", "ns")
        );
        assert_eq!(
            function_of(
                "arn:aws:lambda:us-east-1:123456789012:function:Hello:$LATEST",
                "ns"
            ),
            ("Hello", "ns")
        );
        let input = json!({"FunctionName": "arn:aws:lambda:us-east-1:1:function:echo:$LATEST", "Payload": {"a": 1}});
        assert_eq!(
            call_target(LAMBDA_INVOKE, &input, "ns").unwrap(),
            ("echo".into(), "ns".into(), json!({"a": 1}), true)
        );
        assert!(call_target(LAMBDA_INVOKE, &json!({}), "ns").is_err());
        assert_eq!(
            call_target("echo.x", &json!(1), "ns").unwrap(),
            ("echo".into(), "x".into(), json!(1), false)
        );
    }
}
