//! The workflow controllers. Workflows: the definition is checked when it changes and the
//! verdict is the Workflow's `Ready` condition (with Step Functions' diagnostics), as is a
//! Task naming a Function that does not exist (yet: it may come later, so it is a
//! condition, not a refusal). WorkflowRuns: each running run gets one driver task in this
//! process; the reconcile only starts drivers, records aborts and lifts the finalizer, so
//! a run is driven from its stored status by whichever process holds the lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use minik8s_controllers::informers::{Cache, Informers};
use minik8s_controllers::util::reconciler::Error;
use minik8s_controllers::util::runtime::Controller;
use serde_json::json;
use tokio::task::AbortHandle;

use super::asl::StateMachine;
use super::driver::{self, Env};
use super::invoke::{self, Invoke};
use super::{FINALIZER, Workflow, WorkflowRun, WorkflowStatus, function_of, phase};
use crate::conditions;
use crate::function::Function;

/// Workflows' condition set: `Ready` from the definition and its functions.
const WORKFLOW: conditions::ConditionSet = conditions::ConditionSet {
    dependents: &["DefinitionValid", "FunctionsReady"],
};

struct WorkflowCtx {
    client: kube::Client,
    functions: Cache<Function>,
}

/// The definition as an object (a string holds its JSON or YAML text).
pub fn definition_value(w: &Workflow) -> Result<serde_json::Value, String> {
    match &w.spec.definition {
        serde_json::Value::String(text) => serde_yaml::from_str(text).map_err(|e| {
            format!("SCHEMA_VALIDATION_FAILED: the definition is not valid JSON or YAML: {e} at /")
        }),
        other => Ok(other.clone()),
    }
}

/// Parses a Workflow's definition; the problems as one message.
pub fn parse(w: &Workflow) -> Result<StateMachine, String> {
    let value = definition_value(w)?;
    StateMachine::parse(&value).map_err(|problems| {
        problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })
}

async fn reconcile_workflow(w: Arc<Workflow>, ctx: Arc<WorkflowCtx>) -> Result<Action, Error> {
    let ns = w.namespace().unwrap_or_default();
    let mut status: WorkflowStatus = w.status.clone().unwrap_or_default();
    let conds = &mut status.status.conditions;
    WORKFLOW.initialize(conds);
    match parse(&w) {
        Ok(machine) => {
            WORKFLOW.mark_true(conds, "DefinitionValid");
            status.start_at = Some(machine.start_at.clone());
            status.states = Some(machine.count() as i64);
            status.functions = machine
                .resources()
                .iter()
                .filter(|r| *r != super::LAMBDA_INVOKE)
                .map(|r| {
                    let (name, fn_ns) = function_of(r, &ns);
                    format!("{name}.{fn_ns}")
                })
                .collect();
            let missing: Vec<&String> = status
                .functions
                .iter()
                .filter(|f| {
                    let (name, fn_ns) = f.split_once('.').unwrap_or((f, &ns));
                    ctx.functions
                        .get(&ObjectRef::new(name).within(fn_ns))
                        .is_none()
                })
                .collect();
            if missing.is_empty() {
                WORKFLOW.mark_true(conds, "FunctionsReady");
            } else {
                let list: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
                let message = format!("function(s) not found: {}", list.join(", "));
                WORKFLOW.mark_false(conds, "FunctionsReady", "FunctionNotFound", &message);
            }
        }
        Err(message) => {
            status.start_at = None;
            status.states = None;
            status.functions = Vec::new();
            WORKFLOW.mark_false(conds, "DefinitionValid", "InvalidDefinition", &message);
        }
    }
    status.status.observed_generation = w.metadata.generation;
    crate::write_status(&ctx.client, &*w, w.status.as_ref(), &status).await?;
    Ok(Action::await_change())
}

/// The drivers running in this process, by run. Dropping it (the controller stopped, the
/// lease lost) stops them all.
#[derive(Default)]
struct Drivers {
    running: Mutex<HashMap<ObjectRef<WorkflowRun>, (String, AbortHandle)>>,
}

impl Drop for Drivers {
    fn drop(&mut self) {
        for (_, (_, handle)) in self.running.lock().expect("drivers lock").drain() {
            handle.abort();
        }
    }
}

struct RunCtx {
    client: kube::Client,
    env: Arc<Env>,
    drivers: Arc<Drivers>,
}

fn has_finalizer(run: &WorkflowRun) -> bool {
    run.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds or removes the finalizer, with the resourceVersion read.
async fn set_finalizer(client: &kube::Client, run: &WorkflowRun, on: bool) -> Result<(), Error> {
    let api: Api<WorkflowRun> =
        Api::namespaced(client.clone(), &run.namespace().unwrap_or_default());
    let mut finalizers: Vec<String> = run
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if on {
        finalizers.push(FINALIZER.into());
    }
    let patch =
        json!({"metadata": {"resourceVersion": run.resource_version(), "finalizers": finalizers}});
    match api
        .patch(
            &run.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn reconcile_run(run: Arc<WorkflowRun>, ctx: Arc<RunCtx>) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(run.as_ref());
    let status = run.status.clone().unwrap_or_default();
    let finished = phase::finished(status.phase.as_deref());
    if finished {
        if has_finalizer(&run) {
            set_finalizer(&ctx.client, &run, false).await?;
        }
        return Ok(Action::await_change());
    }
    if run.metadata.deletion_timestamp.is_some() {
        // Deleted while running: stop its calls and say so before it goes.
        if let Some((_, handle)) = ctx
            .drivers
            .running
            .lock()
            .expect("drivers lock")
            .remove(&key)
        {
            handle.abort();
        }
        let api: Api<WorkflowRun> =
            Api::namespaced(ctx.client.clone(), &run.namespace().unwrap_or_default());
        let mut status = status;
        status.phase = Some(phase::ABORTED.into());
        status.error = Some("States.Aborted".into());
        status.cause = Some("the run was deleted while it ran".into());
        status.completion_time = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        status.execution = None;
        let mut obj = (*run).clone();
        obj.status = Some(status);
        match api
            .replace_status(&run.name_any(), &Default::default(), &obj)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer(&run) {
        set_finalizer(&ctx.client, &run, true).await?;
        return Ok(Action::await_change());
    }
    let uid = run.uid().unwrap_or_default();
    let mut running = ctx.drivers.running.lock().expect("drivers lock");
    if running
        .get(&key)
        .is_some_and(|(u, h)| *u == uid && !h.is_finished())
    {
        return Ok(Action::await_change());
    }
    let env = ctx.env.clone();
    let drivers: Weak<Drivers> = Arc::downgrade(&ctx.drivers);
    let run = (*run).clone();
    let task_key = key.clone();
    let task_uid = uid.clone();
    let handle = tokio::spawn(async move {
        // From the cache, which may lag this process's own last write: a driver started
        // from an old status writes it (with its resourceVersion) before it calls
        // anything, gets 409 and stops, and the watch event that settles it starts
        // another from the newer status.
        let result = driver::drive(env, run).await;
        if let Err(e) = &result {
            tracing::info!(run = %task_key, error = %e, "driver stopped");
        }
        if let Some(drivers) = drivers.upgrade() {
            let mut running = drivers.running.lock().expect("drivers lock");
            if running.get(&task_key).is_some_and(|(u, _)| *u == task_uid) {
                running.remove(&task_key);
            }
        }
        result
    });
    running.insert(key, (uid, handle.abort_handle()));
    Ok(Action::await_change())
}

/// Runs the Workflow and WorkflowRun controllers until dropped, calling functions through
/// the nodes' gateways.
pub async fn run(informers: Arc<Informers>) {
    let nodes = informers.of::<Node>();
    let gateway = invoke::Gateway::new(nodes.store());
    run_with(informers, gateway).await
}

/// [`run`] with another way to call functions (tests).
pub async fn run_with(informers: Arc<Informers>, invoke: Arc<dyn Invoke>) {
    let workflows = informers.of::<Workflow>();
    let runs = informers.of::<WorkflowRun>();
    let functions = informers.of::<Function>();
    let client = informers.client();
    let workflow_ctx = Arc::new(WorkflowCtx {
        client: client.clone(),
        functions: functions.store(),
    });
    let by_function = workflows.store();
    let workflow_controller =
        Controller::for_shared_stream(workflows.touched(), workflows.store().kube_store())
            .watches_shared_stream(functions.touched(), move |f: Arc<Function>| {
                let ns = f.namespace().unwrap_or_default();
                by_function
                    .state()
                    .into_iter()
                    .filter(|w| w.namespace().as_deref() == Some(ns.as_str()))
                    .map(|w| ObjectRef::from_obj(w.as_ref()))
                    .collect::<Vec<_>>()
            })
            .run("workflow", reconcile_workflow, workflow_ctx);
    let env = Arc::new(Env {
        client: client.clone(),
        invoke,
        workflows: workflows.store(),
    });
    let run_ctx = Arc::new(RunCtx {
        client,
        env,
        drivers: Arc::default(),
    });
    let run_controller = Controller::for_shared_stream(runs.touched(), runs.store().kube_store())
        .run("workflowrun", reconcile_run, run_ctx);
    tokio::join!(workflow_controller, run_controller);
}
