//! Workflows against the in-process API server, with functions answered in the test (the
//! end-to-end runs with the real kubelet and Python functions are the conformance cases):
//! the Workflow's conditions, a run's status and history, a controller killed with a call
//! in flight and another resuming the run, a deleted run aborted, and 50 runs at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use knative_lite::conditions::{self, READY};
use knative_lite::function::{Function, FunctionSpec};
use knative_lite::workflow::asl::Failure;
use knative_lite::workflow::invoke::Invoke;
use knative_lite::workflow::{FINALIZER, Workflow, WorkflowRun, WorkflowSpec, controller, phase};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use minik8s_controllers::informers::Informers;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually};
use tokio::sync::Notify;

const WAIT: Duration = Duration::from_secs(30);

/// Functions answered here: `double` doubles `$.n`, `fail` raises `ValueError`, `hold`
/// answers once `release` is notified. Calls are counted per function.
#[derive(Default)]
struct Functions {
    calls: Mutex<HashMap<String, usize>>,
    hold_called: Notify,
    release: Arc<Notify>,
}

impl Functions {
    fn count(&self, name: &str) -> usize {
        self.calls.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

impl Invoke for Functions {
    fn call(
        &self,
        _namespace: &str,
        name: &str,
        input: &Value,
        _timeout: Duration,
    ) -> BoxFuture<'static, Result<Value, Failure>> {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default() += 1;
        let input = input.clone();
        match name {
            "double" => {
                Box::pin(async move { Ok(json!({"n": input["n"].as_i64().unwrap_or(0) * 2})) })
            }
            "fail" => Box::pin(async { Err(Failure::new("ValueError", "no")) }),
            "hold" => {
                self.hold_called.notify_one();
                let release = self.release.clone();
                Box::pin(async move {
                    release.notified().await;
                    Ok(json!({"held": input}))
                })
            }
            other => {
                let other = other.to_string();
                Box::pin(async move {
                    Err(Failure::new(
                        "States.TaskFailed",
                        format!("no function {other}"),
                    ))
                })
            }
        }
    }
}

async fn start() -> anyhow::Result<(InProcess, Client)> {
    let api = InProcess::start_with(Backend::Sqlite, |c| c.crds = knative_lite::crds()).await?;
    let client = api.client();
    Ok((api, client))
}

fn controller_task(client: &Client, functions: Arc<Functions>) -> tokio::task::JoinHandle<()> {
    let informers = Informers::new(client.clone());
    tokio::spawn(controller::run_with(informers, functions))
}

async fn workflow(client: &Client, name: &str, definition: Value) -> anyhow::Result<()> {
    let api: Api<Workflow> = Api::namespaced(client.clone(), "default");
    api.create(
        &PostParams::default(),
        &Workflow::new(name, WorkflowSpec { definition }),
    )
    .await?;
    Ok(())
}

async fn start_run(client: &Client, workflow: &str, input: Value) -> anyhow::Result<String> {
    let api: Api<WorkflowRun> = Api::namespaced(client.clone(), "default");
    let run = WorkflowRun::of(workflow, input);
    Ok(api.create(&PostParams::default(), &run).await?.name_any())
}

async fn finished(client: &Client, name: &str) -> anyhow::Result<WorkflowRun> {
    let api: Api<WorkflowRun> = Api::namespaced(client.clone(), "default");
    let done = |r: Option<&WorkflowRun>| {
        r.is_some_and(|r| phase::finished(r.status.as_ref().and_then(|s| s.phase.as_deref())))
    };
    let run = tokio::time::timeout(WAIT, await_condition(api, name, done)).await??;
    Ok(run.expect("finished"))
}

fn chain() -> Value {
    json!({
        "Comment": "double twice, then pick by size",
        "StartAt": "One",
        "States": {
            "One": {"Type": "Task", "Resource": "double", "Next": "Two"},
            "Two": {"Type": "Task", "Resource": "double", "Next": "Big?"},
            "Big?": {"Type": "Choice", "Choices": [
                {"Variable": "$.n", "NumericGreaterThan": 10, "Next": "Big"}
            ], "Default": "Small"},
            "Big": {"Type": "Pass", "Result": "big", "ResultPath": "$.size", "End": true},
            "Small": {"Type": "Pass", "Result": "small", "ResultPath": "$.size", "End": true}
        }
    })
}

#[tokio::test]
async fn a_workflow_says_whether_it_is_valid_and_its_functions_exist() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let _controller = controller_task(&client, Arc::default());
    workflow(&client, "chain", chain()).await?;
    workflow(
        &client,
        "broken",
        json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "B"}}}),
    )
    .await?;
    let api: Api<Workflow> = Api::namespaced(client.clone(), "default");
    let ready_of = |w: &Workflow| {
        let conds = w
            .status
            .as_ref()
            .map(|s| s.status.conditions.clone())
            .unwrap_or_default();
        conditions::get(&conds, READY)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let broken = eventually(WAIT, "broken's Ready", || async {
        let w = api.get("broken").await.ok()?;
        ready_of(&w).filter(|(s, _, _)| s == "False")
    })
    .await;
    assert_eq!(broken.1.as_deref(), Some("InvalidDefinition"));
    let message = broken.2.unwrap_or_default();
    assert!(
        message
            .starts_with("MISSING_TRANSITION_TARGET: missing 'Next' target: B at /States/A/Next"),
        "{message}"
    );
    let missing = eventually(WAIT, "chain's Ready", || async {
        let w = api.get("chain").await.ok()?;
        ready_of(&w).filter(|(s, _, _)| s == "False")
    })
    .await;
    assert_eq!(missing.1.as_deref(), Some("FunctionNotFound"));
    assert_eq!(
        missing.2.as_deref(),
        Some("function(s) not found: double.default")
    );
    // The function comes later: the workflow becomes Ready.
    let functions: Api<Function> = Api::namespaced(client.clone(), "default");
    let spec = FunctionSpec {
        source: Some("def handle(e):\n    return e\n".into()),
        ..Default::default()
    };
    functions
        .create(&PostParams::default(), &Function::new("double", spec))
        .await?;
    let w = eventually(WAIT, "chain Ready", || async {
        let w = api.get("chain").await.ok()?;
        ready_of(&w)
            .is_some_and(|(s, _, _)| s == "True")
            .then_some(w)
    })
    .await;
    let status = w.status.unwrap();
    assert_eq!(status.start_at.as_deref(), Some("One"));
    assert_eq!(status.states, Some(5));
    Ok(())
}

#[tokio::test]
async fn a_run_goes_through_its_states_and_keeps_its_output() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let functions = Arc::new(Functions::default());
    let _controller = controller_task(&client, functions.clone());
    workflow(&client, "chain", chain()).await?;
    let name = start_run(&client, "chain", json!({"n": 3})).await?;
    let run = finished(&client, &name).await?;
    let status = run.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some(phase::SUCCEEDED));
    assert_eq!(status.output, Some(json!({"n": 12, "size": "big"})));
    assert_eq!(status.transitions, 4);
    assert!(status.duration.as_deref().is_some_and(|d| d.ends_with('s')));
    assert!(status.execution.is_none());
    let states: Vec<(String, String)> = status
        .history
        .iter()
        .map(|e| (e.type_.clone(), e.state.clone()))
        .collect();
    assert_eq!(states.first().unwrap().0, "ExecutionStarted");
    assert_eq!(states.last().unwrap().0, "ExecutionSucceeded");
    assert!(states.contains(&("StateExited".into(), "Big".into())));
    assert!(!states.iter().any(|(_, s)| s == "Small"));
    assert_eq!(functions.count("double"), 2);
    // The finalizer is lifted once it ended.
    let api: Api<WorkflowRun> = Api::namespaced(client.clone(), "default");
    eventually(WAIT, "finalizer lifted", || async {
        let r = api.get(&name).await.ok()?;
        (!r.finalizers().iter().any(|f| f == FINALIZER)).then_some(())
    })
    .await;

    // A function's error fails the run with its name; a missing workflow too.
    workflow(
        &client,
        "failing",
        json!({"StartAt": "F", "States": {"F": {"Type": "Task", "Resource": "fail", "End": true}}}),
    )
    .await?;
    let run = finished(&client, &start_run(&client, "failing", json!({})).await?).await?;
    let status = run.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some(phase::FAILED));
    assert_eq!(
        (status.error.as_deref(), status.cause.as_deref()),
        (Some("ValueError"), Some("no"))
    );
    let run = finished(&client, &start_run(&client, "nothing", json!({})).await?).await?;
    let status = run.status.unwrap();
    assert_eq!(status.error.as_deref(), Some("WorkflowNotFound"));
    Ok(())
}

/// The controller dies with a call in flight; another resumes the run from its status:
/// the call in flight is made again, the one completed before is not.
#[tokio::test]
async fn a_run_resumes_after_its_controller_restarts() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let functions = Arc::new(Functions::default());
    let first = controller_task(&client, functions.clone());
    workflow(
        &client,
        "resumable",
        json!({"StartAt": "One", "States": {
            "One": {"Type": "Task", "Resource": "double", "Next": "Hold"},
            "Hold": {"Type": "Task", "Resource": "hold", "End": true}
        }}),
    )
    .await?;
    let name = start_run(&client, "resumable", json!({"n": 5})).await?;
    tokio::time::timeout(WAIT, functions.hold_called.notified()).await?;
    first.abort();
    let _ = first.await;
    let second = controller_task(&client, functions.clone());
    tokio::time::timeout(WAIT, functions.hold_called.notified()).await?;
    functions.release.notify_one();
    let run = finished(&client, &name).await?;
    let status = run.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some(phase::SUCCEEDED));
    assert_eq!(status.output, Some(json!({"held": {"n": 10}})));
    assert_eq!(functions.count("double"), 1);
    assert_eq!(functions.count("hold"), 2);
    second.abort();
    Ok(())
}

/// A label put on a running run (a metadata change: the driver's next write conflicts)
/// does not stop it.
#[tokio::test]
async fn a_run_labelled_while_it_runs_goes_on() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let functions = Arc::new(Functions::default());
    let _controller = controller_task(&client, functions.clone());
    workflow(
        &client,
        "held",
        json!({"StartAt": "Hold", "States": {"Hold": {"Type": "Task", "Resource": "hold", "Next": "After"},
               "After": {"Type": "Task", "Resource": "double", "End": true}}}),
    )
    .await?;
    let name = start_run(&client, "held", json!({"n": 1})).await?;
    tokio::time::timeout(WAIT, functions.hold_called.notified()).await?;
    let api: Api<WorkflowRun> = Api::namespaced(client.clone(), "default");
    let patch = json!({"metadata": {"labels": {"team": "a"}}});
    api.patch(
        &name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    functions.release.notify_one();
    let run = finished(&client, &name).await?;
    let status = run.status.unwrap();
    assert_eq!(
        status.phase.as_deref(),
        Some(phase::SUCCEEDED),
        "{:?}",
        status.cause
    );
    assert_eq!(status.output, Some(json!({"n": 0})));
    assert_eq!(functions.count("hold"), 1);
    Ok(())
}

#[tokio::test]
async fn deleting_a_running_run_aborts_it() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let functions = Arc::new(Functions::default());
    let _controller = controller_task(&client, functions.clone());
    workflow(
        &client,
        "held",
        json!({"StartAt": "Hold", "States": {"Hold": {"Type": "Task", "Resource": "hold", "Next": "After"},
               "After": {"Type": "Task", "Resource": "double", "End": true}}}),
    )
    .await?;
    let name = start_run(&client, "held", json!({})).await?;
    tokio::time::timeout(WAIT, functions.hold_called.notified()).await?;
    let api: Api<WorkflowRun> = Api::namespaced(client.clone(), "default");
    api.delete(&name, &DeleteParams::default()).await?;
    let aborted = finished(&client, &name).await?;
    assert_eq!(
        aborted.status.unwrap().phase.as_deref(),
        Some(phase::ABORTED)
    );
    let gone = tokio::time::timeout(
        WAIT,
        kube::runtime::wait::await_condition(api, &name, |r: Option<&WorkflowRun>| r.is_none()),
    )
    .await?;
    assert!(gone?.is_none());
    functions.release.notify_one();
    assert_eq!(functions.count("double"), 0);
    Ok(())
}

#[tokio::test]
async fn fifty_runs_at_once_all_finish_right() -> anyhow::Result<()> {
    let (_api, client) = start().await?;
    let functions = Arc::new(Functions::default());
    let _controller = controller_task(&client, functions.clone());
    workflow(&client, "chain", chain()).await?;
    let mut names = Vec::new();
    for n in 0..50 {
        names.push((n, start_run(&client, "chain", json!({"n": n})).await?));
    }
    for (n, name) in names {
        let run = finished(&client, &name).await?;
        let status = run.status.unwrap();
        let size = if n * 4 > 10 { "big" } else { "small" };
        assert_eq!(
            status.output,
            Some(json!({"n": n * 4, "size": size})),
            "{name}"
        );
    }
    assert_eq!(functions.count("double"), 100);
    Ok(())
}
