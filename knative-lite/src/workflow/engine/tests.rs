use super::*;

fn machine(v: Value) -> StateMachine {
    match StateMachine::parse(&v) {
        Ok(m) => m,
        Err(p) => panic!("{p:?}"),
    }
}

fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

/// A finished execution, the calls it made (with the time of each) and its events.
struct Ran {
    execution: Execution,
    calls: Vec<(TaskCall, Timestamp)>,
    events: Vec<HistoryEvent>,
    end: Timestamp,
}

impl Ran {
    fn output(&self) -> Value {
        match &self.execution.outcome {
            Some(Outcome::Succeeded(v)) => v.clone(),
            other => panic!("not succeeded: {other:?}"),
        }
    }
    fn failure(&self) -> Failure {
        match &self.execution.outcome {
            Some(Outcome::Failed(f)) => f.clone(),
            other => panic!("not failed: {other:?}"),
        }
    }
    fn resources(&self) -> Vec<&str> {
        self.calls
            .iter()
            .map(|(c, _)| c.resource.as_str())
            .collect()
    }
}

/// Drives `execution` to its end on a virtual clock: calls are answered by `f` one at a
/// time, oldest first, `max_in_flight` records the most calls out at once.
fn drive(
    m: &StateMachine,
    mut execution: Execution,
    mut f: impl FnMut(&TaskCall) -> Result<Value, Failure>,
) -> (Ran, usize) {
    let info = RunInfo {
        id: "ns/run".into(),
        name: "run".into(),
        ..Default::default()
    };
    let mut now = t0();
    let mut out = Vec::new();
    let mut events = Vec::new();
    let mut pending: Vec<TaskCall> = Vec::new();
    let mut max_in_flight = 0;
    for _ in 0..10_000 {
        let agenda = execution.advance(m, &info, now);
        events.extend(agenda.events);
        if execution.outcome.is_some() {
            break;
        }
        for c in agenda.calls {
            out.push((c.clone(), now));
            pending.push(c);
        }
        max_in_flight = max_in_flight.max(pending.len());
        if pending.is_empty() {
            now = agenda.wake_at.expect("nothing to call and no timer: stuck");
            continue;
        }
        let call = pending.remove(0);
        let result = f(&call);
        execution.complete(&call.id, result);
    }
    let ran = Ran {
        execution,
        calls: out,
        events,
        end: now,
    };
    (ran, max_in_flight)
}

fn run(m: &StateMachine, input: Value, f: impl FnMut(&TaskCall) -> Result<Value, Failure>) -> Ran {
    let (execution, _) = Execution::start(m, input, t0());
    drive(m, execution, f).0
}

/// The seeds' example: a Task's output picks one of two Tasks, whose output is the run's.
#[test]
fn choice_on_a_task_output_picks_the_branch() {
    let m = machine(json!({
        "StartAt": "Classify",
        "States": {
            "Classify": {"Type": "Task", "Resource": "classify", "ResultPath": "$.class", "Next": "Route"},
            "Route": {"Type": "Choice", "Choices": [
                {"Variable": "$.class.kind", "StringEquals": "big", "Next": "Big"}
            ], "Default": "Small"},
            "Big": {"Type": "Task", "Resource": "big", "End": true},
            "Small": {"Type": "Task", "Resource": "small", "End": true}
        }
    }));
    let answer = |c: &TaskCall| -> Result<Value, Failure> {
        match c.resource.as_str() {
            "classify" => {
                Ok(json!({"kind": if c.input["n"].as_i64() > Some(10) {"big"} else {"small"}}))
            }
            other => Ok(json!({"by": other, "n": c.input["n"]})),
        }
    };
    let ran = run(&m, json!({"n": 42}), answer);
    assert_eq!(ran.resources(), ["classify", "big"]);
    assert_eq!(ran.output(), json!({"by": "big", "n": 42}));
    let ran = run(&m, json!({"n": 3}), answer);
    assert_eq!(ran.resources(), ["classify", "small"]);
    assert_eq!(ran.output(), json!({"by": "small", "n": 3}));
    assert_eq!(ran.execution.transitions, 3);
    let types: Vec<(&str, &str)> = ran
        .events
        .iter()
        .map(|e| (e.type_.as_str(), e.state.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("StateExited", "Classify"),
            ("StateEntered", "Route"),
            ("StateExited", "Route"),
            ("StateEntered", "Small"),
            ("StateExited", "Small")
        ]
    );
}

fn failing(times: usize, error: &str) -> impl FnMut(&TaskCall) -> Result<Value, Failure> + use<> {
    let mut left = times;
    let error = error.to_string();
    move |c: &TaskCall| {
        if left > 0 {
            left -= 1;
            Err(Failure::new(
                error.clone(),
                format!("attempt {}", c.attempt),
            ))
        } else {
            Ok(json!({"attempt": c.attempt}))
        }
    }
}

#[test]
fn retry_backs_off_and_then_succeeds() {
    let m = machine(json!({
        "StartAt": "Flaky",
        "States": {"Flaky": {"Type": "Task", "Resource": "flaky", "End": true, "Retry": [
            {"ErrorEquals": ["Other"], "MaxAttempts": 5},
            {"ErrorEquals": ["States.ALL"], "IntervalSeconds": 2, "BackoffRate": 3, "MaxAttempts": 3}
        ]}}
    }));
    let ran = run(&m, json!({}), failing(2, "ValueError"));
    assert_eq!(ran.output(), json!({"attempt": 3}));
    let at: Vec<i64> = ran
        .calls
        .iter()
        .map(|(_, t)| t.duration_since(t0()).as_secs())
        .collect();
    // 2 s, then 2 * 3 s.
    assert_eq!(at, [0, 2, 8]);
    let failed: Vec<Option<i64>> = ran
        .events
        .iter()
        .filter(|e| e.type_ == "TaskFailed")
        .map(|e| e.attempt)
        .collect();
    assert_eq!(failed, [Some(1), Some(2)]);
}

#[test]
fn retries_stop_at_max_attempts_and_max_delay() {
    let m = machine(json!({
        "StartAt": "Flaky",
        "States": {"Flaky": {"Type": "Task", "Resource": "flaky", "End": true, "Retry": [
            {"ErrorEquals": ["Boom"], "IntervalSeconds": 10, "BackoffRate": 10, "MaxDelaySeconds": 30, "MaxAttempts": 2}
        ]}}
    }));
    let ran = run(&m, json!({}), failing(5, "Boom"));
    assert_eq!(ran.calls.len(), 3);
    assert_eq!(ran.end.duration_since(t0()).as_secs(), 40);
    assert_eq!(ran.failure(), Failure::new("Boom", "attempt 3"));
    // Not retried: another error.
    let ran = run(&m, json!({}), failing(5, "Other"));
    assert_eq!(ran.calls.len(), 1);
}

#[test]
fn catch_sends_the_error_to_a_fallback() {
    let m = machine(json!({
        "StartAt": "Work",
        "States": {
            "Work": {"Type": "Task", "Resource": "work", "End": true, "Catch": [
                {"ErrorEquals": ["NotThis"], "Next": "Never"},
                {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Fallback"}
            ]},
            "Never": {"Type": "Fail", "Error": "Never"},
            "Fallback": {"Type": "Pass", "End": true}
        }
    }));
    let ran = run(&m, json!({"x": 1}), failing(1, "KeyError"));
    assert_eq!(
        ran.output(),
        json!({"x": 1, "error": {"Error": "KeyError", "Cause": "attempt 1"}})
    );
    // States.ALL does not catch States.Runtime.
    let ran = run(&m, json!({"x": 1}), failing(1, errors::RUNTIME));
    assert_eq!(ran.failure().error, errors::RUNTIME);
}

#[test]
fn parallel_outputs_come_in_branch_order() {
    let m = machine(json!({
        "StartAt": "Both",
        "States": {
            "Both": {"Type": "Parallel", "End": true, "Branches": [
                {"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "slow", "Next": "A2"},
                                            "A2": {"Type": "Pass", "Result": "a", "End": true}}},
                {"StartAt": "B", "States": {"B": {"Type": "Task", "Resource": "fast", "End": true}}}
            ]}
        }
    }));
    let ran = run(&m, json!({"v": 1}), |c| {
        Ok(json!({"from": c.resource, "v": c.input["v"]}))
    });
    assert_eq!(ran.output(), json!(["a", {"from": "fast", "v": 1}]));
    // Both branches' Tasks were called before either answered.
    assert_eq!(ran.calls[0].1, ran.calls[1].1);
    let threads: Vec<&str> = ran
        .events
        .iter()
        .filter(|e| e.state == "B")
        .map(|e| e.thread.as_str())
        .collect();
    assert_eq!(threads, ["Both[1]", "Both[1]"]);
}

#[test]
fn a_failed_branch_fails_the_parallel() {
    let m = machine(json!({
        "StartAt": "Both",
        "States": {
            "Both": {"Type": "Parallel", "Next": "Done", "Branches": [
                {"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "ok", "End": true}}},
                {"StartAt": "B", "States": {"B": {"Type": "Fail", "Error": "Bad", "Cause": "b"}}}
            ], "Catch": [{"ErrorEquals": ["Bad"], "Next": "Caught"}]},
            "Done": {"Type": "Succeed"},
            "Caught": {"Type": "Pass", "Result": "caught", "End": true}
        }
    }));
    let ran = run(&m, json!({}), |_| Ok(json!(1)));
    assert_eq!(ran.output(), json!("caught"));
}

#[test]
fn map_keeps_item_order_and_max_concurrency() {
    let m = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "ItemsPath": "$.items", "MaxConcurrency": 2, "ResultPath": "$.out", "End": true,
                     "ItemProcessor": {"StartAt": "Double", "States": {"Double": {"Type": "Task", "Resource": "double", "End": true}}}}
        }
    }));
    let (execution, _) = Execution::start(&m, json!({"items": [1, 2, 3, 4, 5]}), t0());
    let (ran, max) = drive(&m, execution, |c| Ok(json!(c.input.as_i64().unwrap() * 2)));
    assert_eq!(
        ran.output(),
        json!({"items": [1, 2, 3, 4, 5], "out": [2, 4, 6, 8, 10]})
    );
    assert_eq!(max, 2);
    assert_eq!(ran.calls.len(), 5);
}

#[test]
fn map_item_selector_sees_the_item_and_its_index() {
    let m = machine(json!({
        "StartAt": "Each",
        "States": {
            "Each": {"Type": "Map", "ItemsPath": "$.items", "End": true,
                     "ItemSelector": {"index.$": "$$.Map.Item.Index", "value.$": "$$.Map.Item.Value", "tag.$": "$.tag"},
                     "ItemProcessor": {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": true}}}}
        }
    }));
    let ran = run(
        &m,
        json!({"items": ["a", "b"], "tag": "t"}),
        |_| unreachable!(),
    );
    assert_eq!(
        ran.output(),
        json!([{"index": 0, "value": "a", "tag": "t"}, {"index": 1, "value": "b", "tag": "t"}])
    );
}

#[test]
fn wait_waits_and_passes_its_input() {
    let m = machine(json!({
        "StartAt": "Pause",
        "States": {
            "Pause": {"Type": "Wait", "SecondsPath": "$.secs", "Next": "Until"},
            "Until": {"Type": "Wait", "Timestamp": "2026-01-01T00:01:00Z", "End": true}
        }
    }));
    let (mut execution, _) = Execution::start(&m, json!({"secs": 5}), t0());
    let info = RunInfo::default();
    let agenda = execution.advance(&m, &info, t0());
    assert_eq!(
        agenda.wake_at,
        Some("2026-01-01T00:00:05Z".parse().unwrap())
    );
    // Woken early: still waiting.
    let agenda = execution.advance(&m, &info, "2026-01-01T00:00:04Z".parse().unwrap());
    assert!(execution.outcome.is_none());
    assert_eq!(
        agenda.wake_at,
        Some("2026-01-01T00:00:05Z".parse().unwrap())
    );
    let ran = drive(&m, execution, |_| unreachable!()).0;
    assert_eq!(ran.output(), json!({"secs": 5}));
    assert_eq!(
        ran.end,
        "2026-01-01T00:01:00Z".parse::<Timestamp>().unwrap()
    );
}

#[test]
fn fail_ends_the_run_with_its_error() {
    let m = machine(json!({
        "StartAt": "No",
        "States": {"No": {"Type": "Fail", "Error": "Refused", "Cause": "because"}}
    }));
    let ran = run(&m, json!({}), |_| unreachable!());
    assert_eq!(ran.failure(), Failure::new("Refused", "because"));
}

#[test]
fn no_matching_choice_is_an_error() {
    let m = machine(json!({
        "StartAt": "C",
        "States": {
            "C": {"Type": "Choice", "Choices": [{"Variable": "$.x", "StringEquals": "y", "Next": "E"}]},
            "E": {"Type": "Succeed"}
        }
    }));
    let ran = run(&m, json!({"x": "z"}), |_| unreachable!());
    assert_eq!(ran.failure().error, errors::NO_CHOICE_MATCHED);
}

/// A restored execution repeats the call that was in flight (at least once) and none that
/// had completed.
#[test]
fn a_restored_execution_resumes_where_it_was_stored() {
    let m = machine(json!({
        "StartAt": "One",
        "States": {
            "One": {"Type": "Task", "Resource": "one", "Next": "Two"},
            "Two": {"Type": "Task", "Resource": "two", "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 1}], "End": true}
        }
    }));
    let info = RunInfo::default();
    let (mut execution, _) = Execution::start(&m, json!({"n": 1}), t0());
    let calls = execution.advance(&m, &info, t0()).calls;
    assert!(execution.complete(&calls[0].id, Ok(json!({"n": 2}))));
    let calls = execution.advance(&m, &info, t0()).calls;
    assert_eq!(calls[0].resource, "two");
    // Two failed once: its retry is stored with the failure.
    assert!(execution.complete(&calls[0].id, Err(Failure::new("E", "first"))));
    let agenda = execution.advance(&m, &info, t0());
    assert!(agenda.calls.is_empty());
    let calls = execution.advance(&m, &info, agenda.wake_at.unwrap()).calls;
    assert_eq!(calls[0].attempt, 2);
    // Stored with the second attempt of Two in flight; the process dies.
    let stored = serde_json::to_value(&execution).unwrap();
    let restored: Execution = serde_json::from_value(stored).unwrap();
    let mut attempts = Vec::new();
    let ran = drive(&m, restored, |c| {
        attempts.push((c.resource.clone(), c.attempt));
        Err(Failure::new("E", "again"))
    })
    .0;
    // Called again (the call in flight), and not retried beyond MaxAttempts.
    assert_eq!(attempts, [("two".to_string(), 3)]);
    assert_eq!(ran.failure(), Failure::new("E", "again"));
}

#[test]
fn a_late_result_of_a_left_state_is_dropped() {
    let m = machine(json!({
        "StartAt": "T",
        "States": {"T": {"Type": "Task", "Resource": "t", "End": true}}
    }));
    let info = RunInfo::default();
    let (mut execution, _) = Execution::start(&m, json!({}), t0());
    let calls = execution.advance(&m, &info, t0()).calls;
    let mut stale = calls[0].id.clone();
    stale.seq += 7;
    assert!(!execution.complete(&stale, Ok(json!(1))));
    assert!(execution.complete(&calls[0].id, Ok(json!(2))));
    assert!(!execution.complete(&calls[0].id, Ok(json!(3))));
    execution.advance(&m, &info, t0());
    assert_eq!(execution.outcome, Some(Outcome::Succeeded(json!(2))));
}

#[test]
fn input_and_output_processing_in_order() {
    // InputPath, Parameters, ResultSelector, ResultPath, OutputPath, as the spec's example.
    let m = machine(json!({
        "StartAt": "T",
        "States": {"T": {
            "Type": "Task", "Resource": "t", "End": true,
            "InputPath": "$.lib",
            "Parameters": {"name.$": "$.name", "fixed": 1},
            "ResultSelector": {"got.$": "$.payload"},
            "ResultPath": "$.lib.result",
            "OutputPath": "$.lib"
        }}
    }));
    let mut seen = Value::Null;
    let ran = run(
        &m,
        json!({"lib": {"name": "x", "other": 2}, "drop": true}),
        |c| {
            seen = c.input.clone();
            Ok(json!({"payload": "p", "noise": 0}))
        },
    );
    assert_eq!(seen, json!({"name": "x", "fixed": 1}));
    assert_eq!(
        ran.output(),
        json!({"name": "x", "other": 2, "result": {"got": "p"}})
    );
}

#[test]
fn the_default_task_timeout_is_sixty_seconds() {
    let m = machine(json!({
        "StartAt": "T",
        "States": {
            "T": {"Type": "Task", "Resource": "t.other-ns", "Next": "U"},
            "U": {"Type": "Task", "Resource": "u", "TimeoutSeconds": 5, "End": true}
        }
    }));
    let ran = run(&m, json!({}), |_| Ok(json!(null)));
    assert_eq!(ran.calls[0].0.timeout, DEFAULT_TASK_TIMEOUT);
    assert_eq!(ran.calls[1].0.timeout, Duration::from_secs(5));
}
