//! Reading a state machine and checking it the way Step Functions does when one is created:
//! every field known to its state type, every `Next` naming a state, every state reachable,
//! state names unique across the whole machine (branches and item processors included, so
//! a run's history names a state unambiguously), every path and template valid. Errors read
//! as Step Functions' diagnostics: `CODE: message at /States/Name/Field`.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::{Map, Value};

use super::choice::Rule;
use super::path::Path;
use super::template::Template;

/// One problem of a definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Step Functions' diagnostic code (`SCHEMA_VALIDATION_FAILED`,
    /// `MISSING_TRANSITION_TARGET`, `UNREACHABLE_STATE`, `INVALID_JSON_PATH`,
    /// `DUPLICATE_STATE_NAME`).
    pub code: &'static str,
    pub message: String,
    /// Where, as a JSON pointer into the definition (`/States/Choose/Choices/0/Next`).
    pub location: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} at {}", self.code, self.message, self.location)
    }
}

const SCHEMA: &str = "SCHEMA_VALIDATION_FAILED";
const MISSING_TARGET: &str = "MISSING_TRANSITION_TARGET";
const UNREACHABLE: &str = "UNREACHABLE_STATE";
const BAD_PATH: &str = "INVALID_JSON_PATH";
const DUPLICATE: &str = "DUPLICATE_STATE_NAME";

/// A checked state machine (the whole definition, a Parallel branch or a Map's processor).
#[derive(Clone, Debug, PartialEq)]
pub struct StateMachine {
    pub start_at: String,
    pub states: BTreeMap<String, State>,
    pub timeout_seconds: Option<u64>,
}

/// Where a state goes when it is done.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    Next(String),
    End,
    /// Choice, Succeed and Fail say where themselves.
    None,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Retrier {
    pub error_equals: Vec<String>,
    pub interval_seconds: f64,
    pub max_attempts: u32,
    pub backoff_rate: f64,
    pub max_delay_seconds: Option<f64>,
    pub full_jitter: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Catcher {
    pub error_equals: Vec<String>,
    pub next: String,
    /// `None`: the error output is discarded (ResultPath null).
    pub result_path: Option<Path>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Task {
        resource: String,
        timeout_seconds: Option<f64>,
        timeout_seconds_path: Option<Path>,
    },
    Pass {
        result: Option<Value>,
    },
    Choice {
        choices: Vec<(Rule, String)>,
        default: Option<String>,
    },
    Wait(WaitFor),
    Succeed,
    Fail {
        error: Option<String>,
        cause: Option<String>,
        error_path: Option<Path>,
        cause_path: Option<Path>,
    },
    Parallel {
        branches: Vec<StateMachine>,
    },
    Map {
        processor: Box<StateMachine>,
        items_path: Path,
        item_selector: Option<Template>,
        max_concurrency: usize,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum WaitFor {
    Seconds(f64),
    SecondsPath(Path),
    Timestamp(String),
    TimestampPath(Path),
}

/// One state. Paths are `None` where the definition sets them to null (the value is
/// discarded: `{}` in, the input through, `{}` out); absent, they are `$`.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub kind: Kind,
    pub transition: Transition,
    pub input_path: Option<Path>,
    pub output_path: Option<Path>,
    pub result_path: Option<Path>,
    pub parameters: Option<Template>,
    pub result_selector: Option<Template>,
    pub retry: Vec<Retrier>,
    pub catch: Vec<Catcher>,
}

impl State {
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Task { .. } => "Task",
            Kind::Pass { .. } => "Pass",
            Kind::Choice { .. } => "Choice",
            Kind::Wait(_) => "Wait",
            Kind::Succeed => "Succeed",
            Kind::Fail { .. } => "Fail",
            Kind::Parallel { .. } => "Parallel",
            Kind::Map { .. } => "Map",
        }
    }
}

impl StateMachine {
    /// Reads `definition`: an object, or a string holding its JSON or YAML text.
    pub fn parse(definition: &Value) -> Result<StateMachine, Vec<Problem>> {
        let parsed;
        let definition = match definition {
            Value::String(text) => {
                parsed = serde_yaml::from_str::<Value>(text).map_err(|e| {
                    vec![Problem {
                        code: SCHEMA,
                        message: format!("the definition is not valid JSON or YAML: {e}"),
                        location: "/".into(),
                    }]
                })?;
                &parsed
            }
            other => other,
        };
        let mut checker = Checker::default();
        let machine = checker.machine(definition, "", true);
        if let Some(m) = &machine {
            checker.duplicates(m, "");
        }
        match machine {
            Some(m) if checker.problems.is_empty() => Ok(m),
            _ => Err(checker.problems),
        }
    }

    /// Every Task's `Resource`, branches included, without repeats.
    pub fn resources(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.walk(&mut |_, s| {
            if let Kind::Task { resource, .. } = &s.kind {
                out.insert(resource.clone());
            }
        });
        out
    }

    /// How many states, branches included.
    pub fn count(&self) -> usize {
        let mut n = 0;
        self.walk(&mut |_, _| n += 1);
        n
    }

    /// Calls `f` on every state, branches and processors included.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a str, &'a State)) {
        for (name, state) in &self.states {
            f(name, state);
            match &state.kind {
                Kind::Parallel { branches } => branches.iter().for_each(|b| b.walk(f)),
                Kind::Map { processor, .. } => processor.walk(f),
                _ => {}
            }
        }
    }
}

#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
}

/// The fields each state type may have, beyond `Type` and `Comment`.
fn allowed(ty: &str) -> &'static [&'static str] {
    match ty {
        "Task" => &[
            "InputPath",
            "OutputPath",
            "ResultPath",
            "Parameters",
            "ResultSelector",
            "Retry",
            "Catch",
            "Next",
            "End",
            "Resource",
            "TimeoutSeconds",
            "TimeoutSecondsPath",
            "HeartbeatSeconds",
            "HeartbeatSecondsPath",
        ],
        "Pass" => &[
            "InputPath",
            "OutputPath",
            "ResultPath",
            "Parameters",
            "Result",
            "Next",
            "End",
        ],
        "Choice" => &["InputPath", "OutputPath", "Choices", "Default"],
        "Wait" => &[
            "InputPath",
            "OutputPath",
            "Next",
            "End",
            "Seconds",
            "SecondsPath",
            "Timestamp",
            "TimestampPath",
        ],
        "Succeed" => &["InputPath", "OutputPath"],
        "Fail" => &["Error", "Cause", "ErrorPath", "CausePath"],
        "Parallel" => &[
            "InputPath",
            "OutputPath",
            "ResultPath",
            "Parameters",
            "ResultSelector",
            "Retry",
            "Catch",
            "Next",
            "End",
            "Branches",
        ],
        "Map" => &[
            "InputPath",
            "OutputPath",
            "ResultPath",
            "Parameters",
            "ItemSelector",
            "ResultSelector",
            "Retry",
            "Catch",
            "Next",
            "End",
            "Iterator",
            "ItemProcessor",
            "ItemsPath",
            "MaxConcurrency",
        ],
        _ => &[],
    }
}

impl Checker {
    fn problem(&mut self, code: &'static str, message: impl Into<String>, location: &str) {
        self.problems.push(Problem {
            code,
            message: message.into(),
            location: if location.is_empty() {
                "/".into()
            } else {
                location.into()
            },
        });
    }

    fn machine(&mut self, v: &Value, at: &str, top: bool) -> Option<StateMachine> {
        let Some(obj) = v.as_object() else {
            self.problem(SCHEMA, "a state machine must be an object", at);
            return None;
        };
        let mut known = vec!["StartAt", "States", "Comment"];
        if top {
            known.extend(["TimeoutSeconds", "Version", "QueryLanguage"]);
        } else {
            known.push("ProcessorConfig");
        }
        for key in obj.keys() {
            if !known.contains(&key.as_str()) {
                self.problem(
                    SCHEMA,
                    format!("the field \"{key}\" is not supported"),
                    &format!("{at}/{key}"),
                );
            }
        }
        if let Some(q) = obj.get("QueryLanguage")
            && q != "JSONPath"
        {
            self.problem(
                SCHEMA,
                format!("QueryLanguage {q} is not supported: only JSONPath"),
                &format!("{at}/QueryLanguage"),
            );
        }
        let timeout_seconds = match obj.get("TimeoutSeconds") {
            None => None,
            Some(t) => match t.as_u64().filter(|t| *t > 0) {
                Some(t) => Some(t),
                None => {
                    self.problem(
                        SCHEMA,
                        "TimeoutSeconds must be a positive integer",
                        &format!("{at}/TimeoutSeconds"),
                    );
                    None
                }
            },
        };
        let start_at = match obj.get("StartAt") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.problem(SCHEMA, "StartAt must be a string", &format!("{at}/StartAt"));
                None
            }
            None => {
                self.problem(SCHEMA, "the field \"StartAt\" is required", at);
                None
            }
        };
        let mut states = BTreeMap::new();
        match obj.get("States") {
            Some(Value::Object(map)) if !map.is_empty() => {
                for (name, s) in map {
                    let location = format!("{at}/States/{}", pointer_escape(name));
                    if name.is_empty() || name.chars().count() > 80 {
                        self.problem(
                            SCHEMA,
                            "a state name must have 1 to 80 characters",
                            &location,
                        );
                    }
                    if let Some(state) = self.state(s, &location) {
                        states.insert(name.clone(), state);
                    }
                }
            }
            Some(_) => self.problem(
                SCHEMA,
                "States must be an object with at least one state",
                &format!("{at}/States"),
            ),
            None => self.problem(SCHEMA, "the field \"States\" is required", at),
        }
        let start_at = start_at?;
        let names: HashSet<&String> = obj
            .get("States")
            .and_then(Value::as_object)
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        if !names.contains(&start_at) {
            self.problem(
                MISSING_TARGET,
                format!("missing 'StartAt' target: {start_at}"),
                &format!("{at}/StartAt"),
            );
            return None;
        }
        let machine = StateMachine {
            start_at,
            states,
            timeout_seconds,
        };
        self.transitions(&machine, at);
        Some(machine)
    }

    /// Every target exists, every state is reachable from StartAt, and some state ends.
    fn transitions(&mut self, m: &StateMachine, at: &str) {
        let mut edges: BTreeMap<&str, Vec<(&str, String)>> = BTreeMap::new();
        for (name, state) in &m.states {
            let here = format!("{at}/States/{}", pointer_escape(name));
            let mut out = Vec::new();
            if let Transition::Next(n) = &state.transition {
                out.push((n.as_str(), format!("{here}/Next")));
            }
            if let Kind::Choice { choices, default } = &state.kind {
                for (i, (_, next)) in choices.iter().enumerate() {
                    out.push((next.as_str(), format!("{here}/Choices/{i}/Next")));
                }
                if let Some(d) = default {
                    out.push((d.as_str(), format!("{here}/Default")));
                }
            }
            for (i, c) in state.catch.iter().enumerate() {
                out.push((c.next.as_str(), format!("{here}/Catch/{i}/Next")));
            }
            edges.insert(name.as_str(), out);
        }
        for targets in edges.values() {
            for (target, location) in targets {
                if !m.states.contains_key(*target) {
                    self.problem(
                        MISSING_TARGET,
                        format!("missing 'Next' target: {target}"),
                        location,
                    );
                }
            }
        }
        let mut seen = HashSet::from([m.start_at.as_str()]);
        let mut todo = vec![m.start_at.as_str()];
        while let Some(s) = todo.pop() {
            for (t, _) in edges.get(s).into_iter().flatten() {
                if m.states.contains_key(*t) && seen.insert(t) {
                    todo.push(t);
                }
            }
        }
        for name in m.states.keys() {
            if !seen.contains(name.as_str()) {
                self.problem(
                    UNREACHABLE,
                    format!("state \"{name}\" is not reachable"),
                    &format!("{at}/States/{}", pointer_escape(name)),
                );
            }
        }
        let terminal = m.states.values().any(|s| {
            matches!(s.transition, Transition::End)
                || matches!(s.kind, Kind::Succeed | Kind::Fail { .. })
        });
        if !terminal {
            self.problem(
                SCHEMA,
                "no terminal state: some state must End, Succeed or Fail",
                &format!("{at}/States"),
            );
        }
    }

    fn duplicates(&mut self, m: &StateMachine, at: &str) {
        let mut seen = HashSet::new();
        let mut dups = BTreeSet::new();
        m.walk(&mut |name, _| {
            if !seen.insert(name) {
                dups.insert(name.to_string());
            }
        });
        for name in dups {
            self.problem(
                DUPLICATE,
                format!("state name \"{name}\" is used more than once: names must be unique across the state machine"),
                &format!("{at}/States"),
            );
        }
    }

    fn state(&mut self, v: &Value, at: &str) -> Option<State> {
        let Some(obj) = v.as_object() else {
            self.problem(SCHEMA, "a state must be an object", at);
            return None;
        };
        let ty = match obj.get("Type").and_then(Value::as_str) {
            Some(t) if !allowed(t).is_empty() => t,
            Some(t) => {
                self.problem(
                    SCHEMA,
                    format!("unknown state type \"{t}\""),
                    &format!("{at}/Type"),
                );
                return None;
            }
            None => {
                self.problem(SCHEMA, "the field \"Type\" is required", at);
                return None;
            }
        };
        for key in obj.keys() {
            if key != "Type" && key != "Comment" && !allowed(ty).contains(&key.as_str()) {
                self.problem(
                    SCHEMA,
                    format!("the field \"{key}\" is not supported for {ty} states"),
                    &format!("{at}/{key}"),
                );
            }
        }
        let transition = self.transition(obj, ty, at);
        let kind = self.kind(obj, ty, at)?;
        Some(State {
            kind,
            transition,
            input_path: self.path_field(obj, "InputPath", at, false),
            output_path: self.path_field(obj, "OutputPath", at, false),
            result_path: self.path_field(obj, "ResultPath", at, true),
            parameters: self.template(obj, "Parameters", at),
            result_selector: self.template(obj, "ResultSelector", at),
            retry: self.retriers(obj.get("Retry"), &format!("{at}/Retry")),
            catch: self.catchers(obj.get("Catch"), &format!("{at}/Catch")),
        })
    }

    fn transition(&mut self, obj: &Map<String, Value>, ty: &str, at: &str) -> Transition {
        if matches!(ty, "Choice" | "Succeed" | "Fail") {
            return Transition::None;
        }
        match (obj.get("Next"), obj.get("End")) {
            (Some(Value::String(n)), None) => Transition::Next(n.clone()),
            (None, Some(Value::Bool(true))) => Transition::End,
            (Some(_), Some(_)) => {
                self.problem(SCHEMA, "a state must not have both Next and End", at);
                Transition::End
            }
            (Some(_), None) => {
                self.problem(SCHEMA, "Next must be a string", &format!("{at}/Next"));
                Transition::End
            }
            _ => {
                self.problem(
                    SCHEMA,
                    "the field \"Next\" (or \"End\": true) is required",
                    at,
                );
                Transition::End
            }
        }
    }

    fn kind(&mut self, obj: &Map<String, Value>, ty: &str, at: &str) -> Option<Kind> {
        Some(match ty {
            "Task" => {
                let resource = match obj.get("Resource") {
                    Some(Value::String(r)) if !r.is_empty() => r.clone(),
                    _ => {
                        self.problem(
                            SCHEMA,
                            "the field \"Resource\" is required: a Function's name, or name.namespace",
                            at,
                        );
                        String::new()
                    }
                };
                if let Some(why) = unsupported_resource(&resource) {
                    self.problem(SCHEMA, why, &format!("{at}/Resource"));
                }
                let timeout_seconds = obj.get("TimeoutSeconds").and_then(|t| {
                    let n = t.as_f64().filter(|n| *n > 0.0);
                    if n.is_none() {
                        self.problem(
                            SCHEMA,
                            "TimeoutSeconds must be a positive number",
                            &format!("{at}/TimeoutSeconds"),
                        );
                    }
                    n
                });
                let timeout_seconds_path = self.path_field(obj, "TimeoutSecondsPath", at, true);
                let timeout_seconds_path = obj
                    .contains_key("TimeoutSecondsPath")
                    .then_some(timeout_seconds_path)
                    .flatten();
                Kind::Task {
                    resource,
                    timeout_seconds,
                    timeout_seconds_path,
                }
            }
            "Pass" => Kind::Pass {
                result: obj.get("Result").cloned(),
            },
            "Choice" => self.choice(obj, at),
            "Wait" => self.wait(obj, at)?,
            "Succeed" => Kind::Succeed,
            "Fail" => {
                let text = |k: &str| obj.get(k).and_then(Value::as_str).map(String::from);
                let error_path = obj
                    .contains_key("ErrorPath")
                    .then(|| self.path_field(obj, "ErrorPath", at, true))
                    .flatten();
                let cause_path = obj
                    .contains_key("CausePath")
                    .then(|| self.path_field(obj, "CausePath", at, true))
                    .flatten();
                Kind::Fail {
                    error: text("Error"),
                    cause: text("Cause"),
                    error_path,
                    cause_path,
                }
            }
            "Parallel" => {
                let Some(Value::Array(list)) = obj
                    .get("Branches")
                    .filter(|b| b.as_array().is_some_and(|a| !a.is_empty()))
                else {
                    self.problem(
                        SCHEMA,
                        "Branches must be a non-empty array",
                        &format!("{at}/Branches"),
                    );
                    return None;
                };
                let branches = list
                    .iter()
                    .enumerate()
                    .filter_map(|(i, b)| self.machine(b, &format!("{at}/Branches/{i}"), false))
                    .collect::<Vec<_>>();
                (branches.len() == list.len()).then_some(Kind::Parallel { branches })?
            }
            "Map" => self.map(obj, at)?,
            _ => unreachable!("allowed() knows only these"),
        })
    }

    fn choice(&mut self, obj: &Map<String, Value>, at: &str) -> Kind {
        let mut choices = Vec::new();
        match obj.get("Choices") {
            Some(Value::Array(list)) if !list.is_empty() => {
                for (i, c) in list.iter().enumerate() {
                    let here = format!("{at}/Choices/{i}");
                    let next = match c.get("Next") {
                        Some(Value::String(n)) => n.clone(),
                        _ => {
                            self.problem(SCHEMA, "a choice rule must have a \"Next\"", &here);
                            continue;
                        }
                    };
                    match Rule::parse(c) {
                        Ok(rule) => choices.push((rule, next)),
                        Err(e) => self.problem(SCHEMA, e, &here),
                    }
                }
            }
            _ => self.problem(
                SCHEMA,
                "Choices must be a non-empty array",
                &format!("{at}/Choices"),
            ),
        }
        let default = match obj.get("Default") {
            Some(Value::String(d)) => Some(d.clone()),
            Some(_) => {
                self.problem(SCHEMA, "Default must be a string", &format!("{at}/Default"));
                None
            }
            None => None,
        };
        Kind::Choice { choices, default }
    }

    fn wait(&mut self, obj: &Map<String, Value>, at: &str) -> Option<Kind> {
        let given: Vec<&str> = ["Seconds", "SecondsPath", "Timestamp", "TimestampPath"]
            .into_iter()
            .filter(|k| obj.contains_key(*k))
            .collect();
        if given.len() != 1 {
            self.problem(
                SCHEMA,
                "a Wait state must have exactly one of Seconds, SecondsPath, Timestamp, TimestampPath",
                at,
            );
            return None;
        }
        let key = given[0];
        let here = format!("{at}/{key}");
        let v = &obj[key];
        let wait = match key {
            "Seconds" => match v.as_f64().filter(|s| *s >= 0.0) {
                Some(s) => WaitFor::Seconds(s),
                None => {
                    self.problem(SCHEMA, "Seconds must be a non-negative number", &here);
                    return None;
                }
            },
            "Timestamp" => {
                let text = v.as_str().unwrap_or_default();
                if text.parse::<k8s_openapi::jiff::Timestamp>().is_err() {
                    self.problem(
                        SCHEMA,
                        format!("Timestamp {v} is not an RFC 3339 timestamp"),
                        &here,
                    );
                    return None;
                }
                WaitFor::Timestamp(text.to_string())
            }
            "SecondsPath" => WaitFor::SecondsPath(self.path_field(obj, key, at, true)?),
            _ => WaitFor::TimestampPath(self.path_field(obj, key, at, true)?),
        };
        Some(Kind::Wait(wait))
    }

    fn map(&mut self, obj: &Map<String, Value>, at: &str) -> Option<Kind> {
        let (key, processor) = match (obj.get("ItemProcessor"), obj.get("Iterator")) {
            (Some(p), None) => ("ItemProcessor", p),
            (None, Some(p)) => ("Iterator", p),
            _ => {
                self.problem(
                    SCHEMA,
                    "a Map state must have exactly one of ItemProcessor, Iterator",
                    at,
                );
                return None;
            }
        };
        if let Some(mode) = processor.pointer("/ProcessorConfig/Mode")
            && mode != "INLINE"
        {
            self.problem(
                SCHEMA,
                format!("ProcessorConfig Mode {mode} is not supported: only INLINE"),
                &format!("{at}/{key}/ProcessorConfig/Mode"),
            );
        }
        let processor = self.machine(processor, &format!("{at}/{key}"), false);
        let items_path = if obj.contains_key("ItemsPath") {
            self.path_field(obj, "ItemsPath", at, true)?
        } else {
            Path::parse("$").expect("$ is a path")
        };
        let max_concurrency = match obj.get("MaxConcurrency") {
            None => 0,
            Some(v) => match v.as_u64() {
                Some(n) => n as usize,
                None => {
                    self.problem(
                        SCHEMA,
                        "MaxConcurrency must be a non-negative integer",
                        &format!("{at}/MaxConcurrency"),
                    );
                    0
                }
            },
        };
        if obj.contains_key("ItemSelector") && obj.contains_key("Parameters") {
            self.problem(
                SCHEMA,
                "a Map state must not have both ItemSelector and Parameters",
                at,
            );
        }
        let item_selector = self.template(obj, "ItemSelector", at);
        Some(Kind::Map {
            processor: Box::new(processor?),
            items_path,
            item_selector,
            max_concurrency,
        })
    }

    /// A path field: `$` when absent, `None` when null. `reference`: it must name one node.
    fn path_field(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
        reference: bool,
    ) -> Option<Path> {
        let here = format!("{at}/{key}");
        match obj.get(key) {
            None => Some(Path::parse("$").expect("$ is a path")),
            Some(Value::Null) => None,
            Some(Value::String(text)) => match Path::parse(text) {
                Ok(p) if reference && !p.is_reference() => {
                    self.problem(
                        BAD_PATH,
                        format!("{key} {text} must be a reference path (one node)"),
                        &here,
                    );
                    None
                }
                Ok(p) => Some(p),
                Err(e) => {
                    self.problem(BAD_PATH, e, &here);
                    None
                }
            },
            Some(other) => {
                self.problem(
                    SCHEMA,
                    format!("{key} must be a string or null, not {other}"),
                    &here,
                );
                None
            }
        }
    }

    fn template(&mut self, obj: &Map<String, Value>, key: &str, at: &str) -> Option<Template> {
        let v = obj.get(key)?;
        match Template::parse(v) {
            Ok(t) => Some(t),
            Err(e) => {
                self.problem(BAD_PATH, e, &format!("{at}/{key}"));
                None
            }
        }
    }

    fn error_equals(&mut self, v: &Value, at: &str) -> Vec<String> {
        let names: Vec<String> = v
            .get("ErrorEquals")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if names.is_empty() {
            self.problem(
                SCHEMA,
                "ErrorEquals must be a non-empty array of error names",
                at,
            );
        }
        if names.len() > 1 && names.iter().any(|n| n == super::errors::ALL) {
            self.problem(
                SCHEMA,
                "States.ALL must appear alone in ErrorEquals",
                &format!("{at}/ErrorEquals"),
            );
        }
        names
    }

    fn retriers(&mut self, v: Option<&Value>, at: &str) -> Vec<Retrier> {
        let Some(v) = v else { return Vec::new() };
        let Some(list) = v.as_array() else {
            self.problem(SCHEMA, "Retry must be an array", at);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, r) in list.iter().enumerate() {
            let here = format!("{at}/{i}");
            for key in r
                .as_object()
                .map(|o| o.keys().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                if ![
                    "ErrorEquals",
                    "IntervalSeconds",
                    "MaxAttempts",
                    "BackoffRate",
                    "MaxDelaySeconds",
                    "JitterStrategy",
                    "Comment",
                ]
                .contains(&key.as_str())
                {
                    self.problem(
                        SCHEMA,
                        format!("the field \"{key}\" is not supported in a retrier"),
                        &format!("{here}/{key}"),
                    );
                }
            }
            let number = |k: &str| r.get(k).and_then(Value::as_f64);
            let retrier = Retrier {
                error_equals: self.error_equals(r, &here),
                interval_seconds: number("IntervalSeconds").unwrap_or(1.0),
                max_attempts: r.get("MaxAttempts").and_then(Value::as_u64).unwrap_or(3) as u32,
                backoff_rate: number("BackoffRate").unwrap_or(2.0),
                max_delay_seconds: number("MaxDelaySeconds"),
                full_jitter: r.get("JitterStrategy").and_then(Value::as_str) == Some("FULL"),
            };
            if retrier.interval_seconds <= 0.0 {
                self.problem(
                    SCHEMA,
                    "IntervalSeconds must be positive",
                    &format!("{here}/IntervalSeconds"),
                );
            }
            if retrier.backoff_rate < 1.0 {
                self.problem(
                    SCHEMA,
                    "BackoffRate must be at least 1.0",
                    &format!("{here}/BackoffRate"),
                );
            }
            out.push(retrier);
        }
        out
    }

    fn catchers(&mut self, v: Option<&Value>, at: &str) -> Vec<Catcher> {
        let Some(v) = v else { return Vec::new() };
        let Some(list) = v.as_array() else {
            self.problem(SCHEMA, "Catch must be an array", at);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, c) in list.iter().enumerate() {
            let here = format!("{at}/{i}");
            let error_equals = self.error_equals(c, &here);
            let Some(next) = c.get("Next").and_then(Value::as_str) else {
                self.problem(SCHEMA, "a catcher must have a \"Next\"", &here);
                continue;
            };
            let result_path = match c.as_object() {
                Some(o) => self.path_field(o, "ResultPath", &here, true),
                None => None,
            };
            out.push(Catcher {
                error_equals,
                next: next.to_string(),
                result_path,
            });
        }
        out
    }
}

/// Why a Task's `Resource` cannot run here: AWS service integrations other than Lambda's
/// `invoke` (callbacks with `.waitForTaskToken` and `.sync` included) and activities.
fn unsupported_resource(resource: &str) -> Option<String> {
    if resource.starts_with("arn:aws:states:::") && resource != "arn:aws:states:::lambda:invoke" {
        return Some(format!(
            "the service integration {resource} is not supported: use a Function's name or arn:aws:states:::lambda:invoke"
        ));
    }
    if resource.starts_with("arn:aws:states:") && resource.contains(":activity:") {
        return Some(format!("activities are not supported: {resource}"));
    }
    None
}

/// A state name as a JSON pointer token.
fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(v: Value) -> Vec<String> {
        match StateMachine::parse(&v) {
            Ok(_) => Vec::new(),
            Err(p) => p.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn wrong_definitions_say_what_and_where() {
        let cases = [
            (
                json!({"States": {"A": {"Type": "Succeed"}}}),
                "SCHEMA_VALIDATION_FAILED: the field \"StartAt\" is required at /",
            ),
            (
                json!({"StartAt": "B", "States": {"A": {"Type": "Succeed"}}}),
                "MISSING_TRANSITION_TARGET: missing 'StartAt' target: B at /StartAt",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "Nowhere"}}}),
                "MISSING_TRANSITION_TARGET: missing 'Next' target: Nowhere at /States/A/Next",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Succeed"}, "B": {"Type": "Succeed"}}}),
                "UNREACHABLE_STATE: state \"B\" is not reachable at /States/B",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "InputPath": "$.a[", "End": true}}}),
                "INVALID_JSON_PATH",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "ResultPath": "$.a[*]", "End": true}}}),
                "INVALID_JSON_PATH: ResultPath $.a[*] must be a reference path (one node) at /States/A/ResultPath",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "f", "End": true, "Retries": []}}}),
                "SCHEMA_VALIDATION_FAILED: the field \"Retries\" is not supported for Task states at /States/A/Retries",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Task", "End": true}}}),
                "SCHEMA_VALIDATION_FAILED: the field \"Resource\" is required",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Parallel", "End": true, "Branches": [
                    {"StartAt": "A", "States": {"A": {"Type": "Succeed"}}}]}}}),
                "DUPLICATE_STATE_NAME",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Map", "End": true, "ItemProcessor":
                    {"StartAt": "X", "States": {"X": {"Type": "Pass", "Next": "Y"}}}}}}),
                "MISSING_TRANSITION_TARGET: missing 'Next' target: Y at /States/A/ItemProcessor/States/X/Next",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Choice", "Choices": [
                    {"Variable": "$.x", "StringEquals": "y"}], "Default": "A"}}}),
                "SCHEMA_VALIDATION_FAILED: a choice rule must have a \"Next\" at /States/A/Choices/0",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "A"}}}),
                "no terminal state",
            ),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Wait", "End": true}}}),
                "exactly one of Seconds",
            ),
            (json!("StartAt: ["), "not valid JSON or YAML"),
            (
                json!({"StartAt": "A", "States": {"A": {"Type": "Task", "End": true,
                    "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken"}}}),
                "SCHEMA_VALIDATION_FAILED: the service integration arn:aws:states:::lambda:invoke.waitForTaskToken is not supported",
            ),
        ];
        for (definition, want) in cases {
            let got = problems(definition.clone());
            assert!(
                got.iter().any(|p| p.contains(want)),
                "{definition}: want {want:?}, got {got:?}"
            );
        }
    }

    #[test]
    fn a_definition_as_text_reads_as_json_or_yaml() {
        let json =
            r#"{"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "f", "End": true}}}"#;
        let yaml = "StartAt: A\nStates:\n  A: {Type: Task, Resource: f, End: true}\n";
        for text in [json, yaml] {
            let m = StateMachine::parse(&Value::String(text.into())).unwrap();
            assert_eq!(m.resources().into_iter().collect::<Vec<_>>(), ["f"]);
            assert_eq!(m.count(), 1);
        }
    }
}
