//! Running a state machine as a value that can be stored: an [`Execution`] is a tree of
//! threads (the top level, each Parallel branch, each Map iteration), each standing in one
//! state with the input it entered with, its retry counts, what it waits for, and a Task's
//! result once it came. [`Execution::advance`] does everything that needs no call (Pass,
//! Choice, data processing, timers that are due) and names the Tasks to call now;
//! [`Execution::complete`] records a call's result. Nothing here does I/O or reads the
//! clock, so the controller decides when to persist, and a run restored from its stored
//! execution carries on where the stored one stood: a call that was in flight (and not
//! recorded) is made again, which is the at-least-once guarantee of a Task.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::asl::definition::{Kind, State, StateMachine, Transition};
use super::asl::path::{self, Path};
use super::asl::{Failure, errors};
use super::{HISTORY_VALUE_LIMIT, HistoryEvent};

/// A Task's timeout when it sets none (the States Language's default).
pub const DEFAULT_TASK_TIMEOUT: Duration = Duration::from_secs(60);
/// Steps one thread takes in one advance before it yields (a loop of Pass and Choice
/// states that never calls or waits must not hold the controller).
const STEPS_PER_ADVANCE: usize = 1000;

/// How a thread (or the whole execution) ended.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    Succeeded(Value),
    Failed(Failure),
}

/// One execution, as stored in a run's status.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    pub root: Thread,
    /// States entered so far (it numbers each entry, so a late result of a state left
    /// since is recognised and dropped).
    pub transitions: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// One thread of control: the state it is in and what that state is waiting for.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    pub state: String,
    /// The state's raw input.
    pub input: Value,
    pub entered: Timestamp,
    /// The execution's transition number at entry.
    pub seq: u64,
    /// Calls made of this Task since it was entered.
    #[serde(default)]
    pub attempt: u32,
    /// Retries used, per retrier of the state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<u32>,
    /// A Wait's end, or a retry's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// A Task's call's result, recorded and not yet processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Outcome>,
    /// A Parallel's branches or a Map's iterations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<Vec<Child>>,
    /// A call is out. Not stored: a restored execution calls again.
    #[serde(skip)]
    pub calling: bool,
}

/// A branch or an iteration: not started (its input waits), running, or finished.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Child {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<Thread>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// What the execution knows of its run, for the context object (`$$`).
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    /// `<namespace>/<run>`.
    pub id: String,
    pub name: String,
    pub input: Value,
    pub start_time: Option<Timestamp>,
    /// The Workflow's name.
    pub workflow: String,
    pub namespace: String,
}

/// Which call a result belongs to: the thread (child indexes from the top) and the
/// transition at which its state was entered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallId {
    pub path: Vec<usize>,
    pub seq: u64,
}

/// A Task to call.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskCall {
    pub id: CallId,
    pub state: String,
    pub resource: String,
    pub input: Value,
    pub timeout: Duration,
    pub attempt: u32,
}

/// What an advance asks of the controller.
#[derive(Debug, Default)]
pub struct Agenda {
    pub calls: Vec<TaskCall>,
    /// The earliest timer (a Wait, a retry's delay).
    pub wake_at: Option<Timestamp>,
    pub events: Vec<HistoryEvent>,
}

impl Agenda {
    fn wake(&mut self, at: Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }
}

/// The state of one advance.
struct Cx<'a> {
    info: &'a RunInfo,
    now: Timestamp,
    transitions: &'a mut u64,
    agenda: Agenda,
}

enum Flow {
    Running,
    Done(Outcome),
}

enum Step {
    /// Waiting: for a call, children or a timer.
    Stay,
    /// Done with the state: its output, and the next state (None: the thread ends).
    Go(Value, Option<String>),
    Finish(Outcome),
}

impl Execution {
    /// An execution about to enter the machine's first state with `input`.
    pub fn start(
        machine: &StateMachine,
        input: Value,
        now: Timestamp,
    ) -> (Execution, HistoryEvent) {
        let root = Thread::new(&machine.start_at, input, now, 1);
        let event = event("StateEntered", &root.state, "", now).with_input(&root.input);
        let execution = Execution {
            root,
            transitions: 1,
            outcome: None,
        };
        (execution, event)
    }

    /// Runs every thread as far as it goes without a call; the Tasks to call and the next
    /// timer are in the agenda (and the outcome in `self.outcome` once the end is reached).
    pub fn advance(&mut self, machine: &StateMachine, info: &RunInfo, now: Timestamp) -> Agenda {
        if self.outcome.is_some() {
            return Agenda::default();
        }
        let mut cx = Cx {
            info,
            now,
            transitions: &mut self.transitions,
            agenda: Agenda::default(),
        };
        if let Flow::Done(outcome) =
            run_thread(&mut cx, machine, &mut self.root, &mut Vec::new(), "")
        {
            self.outcome = Some(outcome);
        }
        cx.agenda
    }

    /// Records a call's result; false when the call's thread has moved on (or is gone),
    /// so the result is not wanted.
    pub fn complete(&mut self, id: &CallId, result: Result<Value, Failure>) -> bool {
        let Some(thread) = self.root.find(&id.path) else {
            return false;
        };
        if thread.seq != id.seq || thread.result.is_some() {
            return false;
        }
        thread.calling = false;
        thread.result = Some(match result {
            Ok(v) => Outcome::Succeeded(v),
            Err(f) => Outcome::Failed(f),
        });
        true
    }

    /// The states the execution is in now (leaves of the thread tree), with their threads.
    pub fn current_states(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.root.current(&mut out);
        out
    }
}

impl Thread {
    fn new(state: &str, input: Value, now: Timestamp, seq: u64) -> Thread {
        Thread {
            state: state.to_string(),
            input,
            entered: now,
            seq,
            attempt: 0,
            retries: Vec::new(),
            not_before: None,
            result: None,
            children: None,
            calling: false,
        }
    }

    fn find(&mut self, path: &[usize]) -> Option<&mut Thread> {
        match path.split_first() {
            None => Some(self),
            Some((i, rest)) => self
                .children
                .as_mut()?
                .get_mut(*i)?
                .thread
                .as_mut()?
                .find(rest),
        }
    }

    fn current(&self, out: &mut Vec<String>) {
        out.push(self.state.clone());
        for c in self.children.iter().flatten() {
            if let Some(t) = &c.thread {
                t.current(out);
            }
        }
    }
}

fn event(ty: &str, state: &str, thread: &str, now: Timestamp) -> HistoryEvent {
    HistoryEvent {
        type_: ty.into(),
        state: state.into(),
        thread: thread.into(),
        timestamp: Time(now),
        attempt: None,
        input: None,
        output: None,
        error: None,
        cause: None,
    }
}

/// A value as a history event keeps it: itself, or a note of its size when large.
pub fn summarise(v: &Value) -> Value {
    let text = v.to_string();
    if text.len() <= HISTORY_VALUE_LIMIT {
        v.clone()
    } else {
        Value::String(format!(
            "({} bytes of JSON, not kept in the history)",
            text.len()
        ))
    }
}

impl HistoryEvent {
    fn with_input(mut self, v: &Value) -> HistoryEvent {
        self.input = Some(summarise(v));
        self
    }
    fn with_output(mut self, v: &Value) -> HistoryEvent {
        self.output = Some(summarise(v));
        self
    }
    fn with_failure(mut self, f: &Failure) -> HistoryEvent {
        self.error = Some(f.error.clone());
        self.cause = Some(f.cause.clone());
        self
    }
}

fn run_thread(
    cx: &mut Cx<'_>,
    machine: &StateMachine,
    t: &mut Thread,
    path: &mut Vec<usize>,
    label: &str,
) -> Flow {
    for _ in 0..STEPS_PER_ADVANCE {
        let Some(state) = machine.states.get(&t.state) else {
            return Flow::Done(Outcome::Failed(Failure::runtime(format!(
                "state {} is not in the definition",
                t.state
            ))));
        };
        if let Some(at) = t.not_before
            && at > cx.now
        {
            cx.agenda.wake(at);
            return Flow::Running;
        }
        let step = step(cx, machine, state, t, path, label);
        let (output, next) = match step {
            Ok(Step::Stay) => return Flow::Running,
            Ok(Step::Go(output, next)) => (output, next),
            Ok(Step::Finish(outcome)) => {
                let ev = event("StateExited", &t.state, label, cx.now);
                let ev = match &outcome {
                    Outcome::Succeeded(v) => ev.with_output(v),
                    Outcome::Failed(f) => HistoryEvent {
                        type_: "StateFailed".into(),
                        ..ev.with_failure(f)
                    },
                };
                cx.agenda.events.push(ev);
                return Flow::Done(outcome);
            }
            Err(failure) => match recover(cx, state, t, failure, label) {
                Recovery::Retry => continue,
                Recovery::Caught(output, next) => (output, Some(next)),
                Recovery::Fail(f) => {
                    cx.agenda
                        .events
                        .push(event("StateFailed", &t.state, label, cx.now).with_failure(&f));
                    return Flow::Done(Outcome::Failed(f));
                }
            },
        };
        cx.agenda
            .events
            .push(event("StateExited", &t.state, label, cx.now).with_output(&output));
        let Some(next) = next else {
            return Flow::Done(Outcome::Succeeded(output));
        };
        *cx.transitions += 1;
        *t = Thread::new(&next, output, cx.now, *cx.transitions);
        cx.agenda
            .events
            .push(event("StateEntered", &t.state, label, cx.now).with_input(&t.input));
    }
    // Yield, and come back at once.
    cx.agenda.wake(cx.now);
    Flow::Running
}

/// The context object (`$$`) as a state sees it.
fn context(cx: &Cx<'_>, t: &Thread) -> Value {
    json!({
        "Execution": {
            "Id": cx.info.id,
            "Name": cx.info.name,
            "Input": cx.info.input,
            "StartTime": cx.info.start_time.map(|t| t.to_string()),
        },
        "StateMachine": {
            "Id": format!("{}/{}", cx.info.namespace, cx.info.workflow),
            "Name": cx.info.workflow,
        },
        "State": {
            "Name": t.state,
            "EnteredTime": t.entered.to_string(),
            "RetryCount": t.attempt.saturating_sub(1),
        },
    })
}

fn input_path(state: &State, raw: &Value, ctx: &Value) -> Result<Value, Failure> {
    match &state.input_path {
        Some(p) => p.select(raw, ctx),
        None => Ok(json!({})),
    }
}

/// InputPath, then Parameters.
fn effective_input(state: &State, raw: &Value, ctx: &Value) -> Result<Value, Failure> {
    let v = input_path(state, raw, ctx)?;
    match &state.parameters {
        Some(t) => t.apply(&v, ctx),
        None => Ok(v),
    }
}

fn output_path(state: &State, v: &Value, ctx: &Value) -> Result<Value, Failure> {
    match &state.output_path {
        Some(p) => p.select(v, ctx),
        None => Ok(json!({})),
    }
}

/// ResultSelector, ResultPath into the raw input, then OutputPath.
fn output(state: &State, raw: &Value, result: Value, ctx: &Value) -> Result<Value, Failure> {
    let selected = match &state.result_selector {
        Some(t) => t.apply(&result, ctx)?,
        None => result,
    };
    let combined = match &state.result_path {
        Some(p) => path::insert(raw.clone(), p, selected)?,
        None => raw.clone(),
    };
    output_path(state, &combined, ctx)
}

fn next_of(state: &State) -> Option<String> {
    match &state.transition {
        Transition::Next(n) => Some(n.clone()),
        _ => None,
    }
}

fn step(
    cx: &mut Cx<'_>,
    machine: &StateMachine,
    state: &State,
    t: &mut Thread,
    path: &mut Vec<usize>,
    label: &str,
) -> Result<Step, Failure> {
    let _ = machine;
    let ctx = context(cx, t);
    match &state.kind {
        Kind::Pass { result } => {
            let effective = effective_input(state, &t.input, &ctx)?;
            let result = result.clone().unwrap_or(effective);
            let out = output(state, &t.input, result, &ctx)?;
            Ok(Step::Go(out, next_of(state)))
        }
        Kind::Task {
            resource,
            timeout_seconds,
            timeout_seconds_path,
        } => {
            if let Some(result) = t.result.take() {
                return match result {
                    Outcome::Succeeded(v) => {
                        Ok(Step::Go(output(state, &t.input, v, &ctx)?, next_of(state)))
                    }
                    Outcome::Failed(f) => Err(f),
                };
            }
            if t.calling {
                return Ok(Step::Stay);
            }
            let input = effective_input(state, &t.input, &ctx)?;
            let timeout = match timeout_seconds_path {
                Some(p) => {
                    let v = p.select(&t.input, &ctx)?;
                    let secs = v.as_f64().filter(|s| *s > 0.0).ok_or_else(|| {
                        Failure::runtime(format!(
                            "TimeoutSecondsPath {} gave {v}: expected a positive number",
                            p.text()
                        ))
                    })?;
                    Duration::from_secs_f64(secs)
                }
                None => timeout_seconds
                    .map(Duration::from_secs_f64)
                    .unwrap_or(DEFAULT_TASK_TIMEOUT),
            };
            t.attempt += 1;
            t.calling = true;
            cx.agenda.calls.push(TaskCall {
                id: CallId {
                    path: path.clone(),
                    seq: t.seq,
                },
                state: t.state.clone(),
                resource: resource.clone(),
                input,
                timeout,
                attempt: t.attempt,
            });
            Ok(Step::Stay)
        }
        Kind::Choice { choices, default } => {
            let effective = input_path(state, &t.input, &ctx)?;
            let mut next = None;
            for (rule, target) in choices {
                if rule.matches(&effective, &ctx)? {
                    next = Some(target.clone());
                    break;
                }
            }
            let next = next.or_else(|| default.clone()).ok_or_else(|| {
                Failure::new(
                    errors::NO_CHOICE_MATCHED,
                    format!(
                        "no choice rule matched and there is no Default in state {}",
                        t.state
                    ),
                )
            })?;
            Ok(Step::Go(output_path(state, &effective, &ctx)?, Some(next)))
        }
        Kind::Wait(wait) => {
            let effective = input_path(state, &t.input, &ctx)?;
            if t.not_before.is_none() {
                let until = wait_until(wait, &effective, &ctx, cx.now)?;
                t.not_before = Some(until);
                if until > cx.now {
                    cx.agenda.wake(until);
                    return Ok(Step::Stay);
                }
            }
            Ok(Step::Go(
                output_path(state, &effective, &ctx)?,
                next_of(state),
            ))
        }
        Kind::Succeed => {
            let effective = input_path(state, &t.input, &ctx)?;
            Ok(Step::Finish(Outcome::Succeeded(output_path(
                state, &effective, &ctx,
            )?)))
        }
        Kind::Fail {
            error,
            cause,
            error_path,
            cause_path,
        } => {
            let text = |p: &Option<Path>, fixed: &Option<String>| -> Result<String, Failure> {
                match p {
                    Some(p) => match p.select(&t.input, &ctx)? {
                        Value::String(s) => Ok(s),
                        other => Err(Failure::runtime(format!(
                            "{} gave {other}: expected a string",
                            p.text()
                        ))),
                    },
                    None => Ok(fixed.clone().unwrap_or_default()),
                }
            };
            let failure = Failure::new(text(error_path, error)?, text(cause_path, cause)?);
            Ok(Step::Finish(Outcome::Failed(failure)))
        }
        Kind::Parallel { branches } => {
            if t.children.is_none() {
                let effective = effective_input(state, &t.input, &ctx)?;
                t.children = Some(
                    branches
                        .iter()
                        .map(|_| Child {
                            pending: Some(effective.clone()),
                            thread: None,
                            outcome: None,
                        })
                        .collect(),
                );
            }
            let results = run_children(cx, t, path, label, &|i| &branches[i], 0)?;
            match results {
                Some(results) => Ok(Step::Go(
                    output(state, &t.input, Value::Array(results), &ctx)?,
                    next_of(state),
                )),
                None => Ok(Step::Stay),
            }
        }
        Kind::Map {
            processor,
            items_path,
            item_selector,
            max_concurrency,
        } => {
            if t.children.is_none() {
                let effective = input_path(state, &t.input, &ctx)?;
                let items = match items_path.select(&effective, &ctx)? {
                    Value::Array(items) => items,
                    other => {
                        return Err(Failure::runtime(format!(
                            "the ItemsPath {} of state {} must select an array, not {}",
                            items_path.text(),
                            t.state,
                            kind_of(&other)
                        )));
                    }
                };
                let selector = item_selector.as_ref().or(state.parameters.as_ref());
                let mut children = Vec::with_capacity(items.len());
                for (index, item) in items.into_iter().enumerate() {
                    let input = match selector {
                        Some(s) => {
                            let mut ctx = ctx.clone();
                            ctx["Map"] = json!({"Item": {"Index": index, "Value": item}});
                            s.apply(&effective, &ctx)?
                        }
                        None => item,
                    };
                    children.push(Child {
                        pending: Some(input),
                        thread: None,
                        outcome: None,
                    });
                }
                t.children = Some(children);
            }
            let processor: &StateMachine = processor;
            let results = run_children(cx, t, path, label, &|_| processor, *max_concurrency)?;
            match results {
                Some(results) => {
                    // A Map's Parameters select each item; they are not applied again.
                    let out = output(state, &t.input, Value::Array(results), &ctx)?;
                    Ok(Step::Go(out, next_of(state)))
                }
                None => Ok(Step::Stay),
            }
        }
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Steps a Parallel's or Map's children; their outputs in order once all succeeded, the
/// first failure as the state's (the other children are abandoned).
fn run_children<'m>(
    cx: &mut Cx<'_>,
    t: &mut Thread,
    path: &mut Vec<usize>,
    label: &str,
    machine_of: &dyn Fn(usize) -> &'m StateMachine,
    max_concurrency: usize,
) -> Result<Option<Vec<Value>>, Failure> {
    let name = t.state.clone();
    let children = t.children.as_mut().expect("children were made");
    let mut running = children.iter().filter(|c| c.thread.is_some()).count();
    for (i, child) in children.iter_mut().enumerate() {
        if child.outcome.is_some() {
            continue;
        }
        let machine = machine_of(i);
        let child_label = if label.is_empty() {
            format!("{name}[{i}]")
        } else {
            format!("{label}/{name}[{i}]")
        };
        if child.thread.is_none() {
            if max_concurrency > 0 && running >= max_concurrency {
                continue;
            }
            let input = child.pending.take().unwrap_or(Value::Null);
            *cx.transitions += 1;
            let thread = Thread::new(&machine.start_at, input, cx.now, *cx.transitions);
            cx.agenda.events.push(
                event("StateEntered", &thread.state, &child_label, cx.now)
                    .with_input(&thread.input),
            );
            child.thread = Some(thread);
            running += 1;
        }
        let thread = child.thread.as_mut().expect("started above");
        path.push(i);
        let flow = run_thread(cx, machine, thread, path, &child_label);
        path.pop();
        if let Flow::Done(outcome) = flow {
            running -= 1;
            child.thread = None;
            if let Outcome::Failed(f) = &outcome {
                return Err(f.clone());
            }
            child.outcome = Some(outcome);
        }
    }
    if children.iter().all(|c| c.outcome.is_some()) {
        let results = children
            .iter_mut()
            .map(|c| match c.outcome.take() {
                Some(Outcome::Succeeded(v)) => v,
                _ => Value::Null,
            })
            .collect();
        return Ok(Some(results));
    }
    Ok(None)
}

mod recovery;

use recovery::{Recovery, recover, wait_until};
pub use recovery::{error_matches, retry_delay};

#[cfg(test)]
mod tests;
