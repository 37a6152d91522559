//! Driving one run: advance the execution, write where it stands, make the calls, record
//! their results, repeat. Every write carries the resourceVersion of the driver's previous
//! write, so two drivers of one run (a controller that lost its lease and has not noticed
//! yet) cannot both carry on: the second to write gets 409 and stops. The order is what
//! makes the guarantee: the status that says a call is due is stored before the call is
//! made, and its result is stored before anything that depends on it, so a driver that
//! dies anywhere leaves a status from which its successor repeats at most the calls that
//! were in flight (each Task runs at least once), and retries only what the definition's
//! Retry allows.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::Value;

use kube::runtime::reflector::ObjectRef;
use minik8s_controllers::informers::Cache;

use super::asl::{Failure, StateMachine, errors};
use super::engine::{Agenda, CallId, Execution, Outcome, RunInfo};
use super::invoke::Invoke;
use super::{HISTORY_LIMIT, HistoryEvent, Workflow, WorkflowRun, WorkflowRunStatus, phase};

/// Why a driver stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// Someone else wrote the run since: it is theirs (or the next reconcile's) to drive.
    #[error("the run changed under the driver")]
    Superseded,
}

/// What a driver needs of its controller.
pub struct Env {
    pub client: kube::Client,
    pub invoke: Arc<dyn Invoke>,
    /// Workflows, read when a run starts (and from the API when a new one is not there yet).
    pub workflows: Cache<Workflow>,
}

/// One run being driven: the last object written (its resourceVersion is the next
/// write's precondition) and the execution in memory.
struct Run {
    api: Api<WorkflowRun>,
    obj: WorkflowRun,
    status: WorkflowRunStatus,
}

fn now() -> Timestamp {
    Timestamp::now()
}

/// `1.042s`, `2m3.5s`: how long a run took.
pub fn format_duration(d: SignedDuration) -> String {
    let ms = d.as_millis().max(0);
    if ms < 60_000 {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    } else {
        let secs = ms as f64 / 1000.0;
        let m = (secs / 60.0).floor();
        format!(
            "{}m{}s",
            m as i64,
            ((secs - m * 60.0) * 10.0).round() / 10.0
        )
    }
}

impl Run {
    /// Writes the status in memory with the last resourceVersion written.
    async fn write(&mut self) -> Result<(), Error> {
        let start = self.status.start_time.as_ref().map(|t| t.0);
        let end = self
            .status
            .completion_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(now);
        if let Some(start) = start {
            self.status.duration = Some(format_duration(end.duration_since(start)));
        }
        let mut obj = self.obj.clone();
        obj.status = Some(self.status.clone());
        for _ in 0..3 {
            match self
                .api
                .replace_status(&obj.name_any(), &PostParams::default(), &obj)
                .await
            {
                Ok(written) => {
                    self.obj = written;
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    // Someone changed the run. Only its metadata or spec (a label, the
                    // deletion mark): the status is still the one this driver wrote, so the
                    // driver carries on. Its status: another driver has it.
                    let latest = self.api.get(&obj.name_any()).await?;
                    if latest.status != self.obj.status
                        || latest.metadata.deletion_timestamp.is_some()
                    {
                        return Err(Error::Superseded);
                    }
                    obj.metadata = latest.metadata.clone();
                    self.obj = latest;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::Superseded),
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Superseded)
    }

    fn record(&mut self, events: Vec<HistoryEvent>) {
        record(&mut self.status, events);
    }

    /// Ends the run with `outcome` (or a phase of its own: TimedOut, Aborted).
    fn finish(&mut self, phase: &str, outcome: Outcome) {
        let at = now();
        let mut ev = HistoryEvent {
            type_: String::new(),
            state: String::new(),
            thread: String::new(),
            timestamp: Time(at),
            attempt: None,
            input: None,
            output: None,
            error: None,
            cause: None,
        };
        match outcome {
            Outcome::Succeeded(v) => {
                ev.type_ = "ExecutionSucceeded".into();
                ev.output = Some(super::engine::summarise(&v));
                self.status.output = Some(v);
            }
            Outcome::Failed(f) => {
                ev.type_ = format!("Execution{phase}");
                ev.error = Some(f.error.clone());
                ev.cause = Some(f.cause.clone());
                self.status.error = Some(f.error);
                self.status.cause = Some(f.cause);
            }
        }
        self.record(vec![ev]);
        self.status.phase = Some(phase.into());
        self.status.completion_time = Some(Time(at));
        self.status.execution = None;
    }
}

/// Appends `events` to the run's history, keeping the latest [`HISTORY_LIMIT`] and counting
/// the ones dropped.
fn record(status: &mut WorkflowRunStatus, events: Vec<HistoryEvent>) {
    let history = &mut status.history;
    history.extend(events);
    if history.len() > HISTORY_LIMIT {
        let extra = history.len() - HISTORY_LIMIT;
        history.drain(..extra);
        *status.history_dropped.get_or_insert(0) += extra as i64;
    }
}

/// Drives `run` (as read from the API, not a cache) until it ends or another writer
/// supersedes this driver.
pub async fn drive(env: Arc<Env>, run: WorkflowRun) -> Result<(), Error> {
    let ns = run.namespace().unwrap_or_default();
    let api: Api<WorkflowRun> = Api::namespaced(env.client.clone(), &ns);
    let status = run.status.clone().unwrap_or_default();
    if phase::finished(status.phase.as_deref()) {
        return Ok(());
    }
    let mut r = Run {
        api,
        obj: run,
        status,
    };
    let info = RunInfo {
        id: format!("{ns}/{}", r.obj.name_any()),
        name: r.obj.name_any(),
        input: r
            .obj
            .spec
            .input
            .clone()
            .unwrap_or_else(|| serde_json::json!({})),
        start_time: None,
        workflow: r.obj.spec.workflow.clone(),
        namespace: ns.clone(),
    };
    let (machine, mut execution) = match start(&env, &mut r, &info).await? {
        Ok(started) => started,
        Err(failure) => {
            r.finish(phase::FAILED, Outcome::Failed(failure));
            return r.write().await;
        }
    };
    let info = RunInfo {
        start_time: r.status.start_time.as_ref().map(|t| t.0),
        ..info
    };
    let deadline = machine.timeout_seconds.and_then(|secs| {
        info.start_time?
            .checked_add(SignedDuration::from_secs(secs as i64))
            .ok()
    });
    let mut calls = FuturesUnordered::new();
    loop {
        let at = now();
        if deadline.is_some_and(|d| d <= at) {
            let failure = Failure::new(
                errors::TIMEOUT,
                format!(
                    "the execution did not end within its TimeoutSeconds ({})",
                    machine.timeout_seconds.unwrap_or_default()
                ),
            );
            r.finish(phase::TIMED_OUT, Outcome::Failed(failure));
            return r.write().await;
        }
        let Agenda {
            calls: due,
            wake_at,
            events,
        } = execution.advance(&machine, &info, at);
        let changed = !events.is_empty() || !due.is_empty();
        r.record(events);
        r.status.transitions = execution.transitions as i64;
        if let Some(outcome) = execution.outcome.clone() {
            let phase = match outcome {
                Outcome::Succeeded(_) => phase::SUCCEEDED,
                Outcome::Failed(_) => phase::FAILED,
            };
            r.finish(phase, outcome);
            return r.write().await;
        }
        if changed {
            r.status.execution = serde_json::to_value(&execution).ok();
            r.write().await?;
        }
        for call in due {
            let id = call.id;
            match super::call_target(&call.resource, &call.input, &ns) {
                Ok((name, fn_ns, payload, wrap)) => {
                    let future = env.invoke.call(&fn_ns, &name, &payload, call.timeout);
                    calls.push(Box::pin(async move {
                        let result = future.await.map(|v| {
                            if wrap {
                                serde_json::json!({"Payload": v, "StatusCode": 200, "ExecutedVersion": "$LATEST"})
                            } else {
                                v
                            }
                        });
                        (id, result)
                    }) as futures::future::BoxFuture<'static, _>);
                }
                Err(failure) => calls.push(Box::pin(async move { (id, Err(failure)) })),
            }
        }
        let wake = [wake_at, deadline].into_iter().flatten().min();
        let sleep = async {
            match wake {
                Some(w) => {
                    let left = w.duration_since(now()).max(SignedDuration::ZERO);
                    tokio::time::sleep(Duration::try_from(left).unwrap_or_default()).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some((id, result)) = calls.next(), if !calls.is_empty() => {
                complete(&mut execution, &id, result);
                // Others that are done already go into the same write.
                while let Some(Some((id, result))) = futures::FutureExt::now_or_never(calls.next()) {
                    complete(&mut execution, &id, result);
                }
            }
            _ = sleep => {}
        }
    }
}

fn complete(execution: &mut Execution, id: &CallId, result: Result<Value, Failure>) {
    if !execution.complete(id, result) {
        tracing::debug!(?id, "a call's result came after its state was left");
    }
}

/// The definition and execution to carry on with: the stored ones, or new ones (the
/// Workflow's definition now, the first state entered) for a run not started yet.
async fn start(
    env: &Env,
    r: &mut Run,
    info: &RunInfo,
) -> Result<Result<(StateMachine, Execution), Failure>, Error> {
    if let (Some(definition), Some(execution)) = (&r.status.definition, &r.status.execution) {
        let resumed = StateMachine::parse(definition)
            .map_err(|p| invalid(&p))
            .and_then(|machine| {
                let execution: Execution =
                    serde_json::from_value(execution.clone()).map_err(|e| {
                        Failure::runtime(format!("the stored execution does not read: {e}"))
                    })?;
                Ok((machine, execution))
            });
        return Ok(resumed);
    }
    let key = ObjectRef::new(&info.workflow).within(&info.namespace);
    let workflow = match env.workflows.get(&key) {
        Some(w) => Some(w),
        None => Api::<Workflow>::namespaced(env.client.clone(), &info.namespace)
            .get_opt(&info.workflow)
            .await?
            .map(Arc::new),
    };
    Ok(begin(r, info, workflow))
}

fn begin(
    r: &mut Run,
    info: &RunInfo,
    workflow: Option<Arc<Workflow>>,
) -> Result<(StateMachine, Execution), Failure> {
    let at = now();
    r.status.phase = Some(phase::RUNNING.into());
    r.status.start_time = Some(Time(at));
    let workflow = workflow.ok_or_else(|| {
        Failure::new(
            "WorkflowNotFound",
            format!(
                "workflow {} not found in namespace {}",
                info.workflow, info.namespace
            ),
        )
    })?;
    let definition = match &workflow.spec.definition {
        Value::String(text) => serde_yaml::from_str::<Value>(text).map_err(|e| {
            Failure::new(
                "InvalidDefinition",
                format!("the definition does not parse: {e}"),
            )
        })?,
        other => other.clone(),
    };
    let machine = StateMachine::parse(&definition).map_err(|p| invalid(&p))?;
    r.status.definition = Some(definition);
    let (execution, entered) = Execution::start(&machine, info.input.clone(), at);
    let started = HistoryEvent {
        type_: "ExecutionStarted".into(),
        state: String::new(),
        thread: String::new(),
        timestamp: Time(at),
        attempt: None,
        input: Some(super::engine::summarise(&info.input)),
        output: None,
        error: None,
        cause: None,
    };
    r.record(vec![started, entered]);
    Ok((machine, execution))
}

fn invalid(problems: &[super::asl::Problem]) -> Failure {
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    Failure::new("InvalidDefinition", text.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: usize) -> HistoryEvent {
        HistoryEvent {
            type_: "StateEntered".into(),
            state: format!("S{n}"),
            thread: String::new(),
            timestamp: Time(Timestamp::UNIX_EPOCH),
            attempt: None,
            input: None,
            output: None,
            error: None,
            cause: None,
        }
    }

    #[test]
    fn the_history_keeps_the_latest_events() {
        let mut status = WorkflowRunStatus::default();
        record(&mut status, (0..150).map(event).collect());
        assert_eq!(status.history_dropped, None);
        record(&mut status, (150..260).map(event).collect());
        assert_eq!(status.history.len(), HISTORY_LIMIT);
        assert_eq!(status.history_dropped, Some(60));
        assert_eq!(status.history[0].state, "S60");
        assert_eq!(status.history.last().unwrap().state, "S259");
    }

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        assert_eq!(format_duration(SignedDuration::from_millis(1042)), "1.042s");
        assert_eq!(
            format_duration(SignedDuration::from_millis(123_500)),
            "2m3.5s"
        );
        assert_eq!(format_duration(SignedDuration::from_millis(-5)), "0.000s");
    }
}
