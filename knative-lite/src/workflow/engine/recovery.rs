//! What a state does when it fails (Retry, then Catch, as the States Language orders
//! them) and when a Wait or a retry's delay ends: the part of the engine that reads the
//! clock's arithmetic, kept apart from the stepping of states.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::{Cx, Kind, State, Thread, event};
use crate::workflow::asl::definition::{Catcher, Retrier, WaitFor};
use crate::workflow::asl::path;
use crate::workflow::asl::{Failure, errors};

pub(super) fn wait_until(
    wait: &WaitFor,
    input: &Value,
    ctx: &Value,
    now: Timestamp,
) -> Result<Timestamp, Failure> {
    let after = |secs: f64| {
        now.checked_add(SignedDuration::from_secs_f64(secs))
            .map_err(|e| Failure::runtime(format!("waiting {secs}s: {e}")))
    };
    let parse = |text: &str| {
        text.parse::<Timestamp>()
            .map_err(|e| Failure::runtime(format!("{text:?} is not an RFC 3339 timestamp: {e}")))
    };
    match wait {
        WaitFor::Seconds(s) => after(*s),
        WaitFor::Timestamp(text) => parse(text),
        WaitFor::SecondsPath(p) => match p.select(input, ctx)? {
            Value::Number(n) if n.as_f64().is_some_and(|s| s >= 0.0) => {
                after(n.as_f64().unwrap_or(0.0))
            }
            other => Err(Failure::runtime(format!(
                "SecondsPath {} gave {other}: expected a non-negative number",
                p.text()
            ))),
        },
        WaitFor::TimestampPath(p) => match p.select(input, ctx)? {
            Value::String(s) => parse(&s),
            other => Err(Failure::runtime(format!(
                "TimestampPath {} gave {other}: expected a timestamp",
                p.text()
            ))),
        },
    }
}

pub(super) enum Recovery {
    Retry,
    Caught(Value, String),
    Fail(Failure),
}

/// Whether an error list names `error`. `States.ALL` matches every error but
/// `States.Runtime`, as in Step Functions.
pub fn error_matches(names: &[String], error: &str) -> bool {
    names
        .iter()
        .any(|n| n == error || (n == errors::ALL && error != errors::RUNTIME))
}

/// The delay before retry number `n` (1 for the first retry).
pub fn retry_delay(r: &Retrier, n: u32) -> Duration {
    let mut secs = r.interval_seconds * r.backoff_rate.powi(n.saturating_sub(1) as i32);
    if let Some(max) = r.max_delay_seconds {
        secs = secs.min(max);
    }
    if r.full_jitter {
        secs *= rand::random::<f64>();
    }
    Duration::from_secs_f64(secs.clamp(0.0, 366.0 * 86400.0))
}

pub(super) fn recover(
    cx: &mut Cx<'_>,
    state: &State,
    t: &mut Thread,
    failure: Failure,
    label: &str,
) -> Recovery {
    let mut ev = event("TaskFailed", &t.state, label, cx.now).with_failure(&failure);
    if matches!(state.kind, Kind::Task { .. }) {
        ev.attempt = Some(t.attempt.into());
    } else {
        ev.type_ = "StateError".into();
    }
    cx.agenda.events.push(ev);
    if let Some(i) = state
        .retry
        .iter()
        .position(|r| error_matches(&r.error_equals, &failure.error))
    {
        t.retries.resize(state.retry.len(), 0);
        let retrier = &state.retry[i];
        if t.retries[i] < retrier.max_attempts {
            t.retries[i] += 1;
            let delay = retry_delay(retrier, t.retries[i]);
            let at = cx
                .now
                .checked_add(SignedDuration::try_from(delay).unwrap_or(SignedDuration::ZERO))
                .unwrap_or(cx.now);
            t.not_before = Some(at);
            t.result = None;
            t.children = None;
            t.calling = false;
            return Recovery::Retry;
        }
    }
    let Some(catcher) = state
        .catch
        .iter()
        .find(|c| error_matches(&c.error_equals, &failure.error))
    else {
        return Recovery::Fail(failure);
    };
    caught(catcher, t, failure)
}

fn caught(catcher: &Catcher, t: &Thread, failure: Failure) -> Recovery {
    let error_output = json!({"Error": failure.error, "Cause": failure.cause});
    let out = match &catcher.result_path {
        Some(p) => match path::insert(t.input.clone(), p, error_output) {
            Ok(v) => v,
            Err(f) => return Recovery::Fail(f),
        },
        None => t.input.clone(),
    };
    Recovery::Caught(out, catcher.next.clone())
}
