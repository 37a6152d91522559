//! A state machine is easier to review as a picture than as nested JSON, and a run's
//! history laid over that picture shows at a glance which way an execution went and where
//! it stopped. Graphviz DOT, because every tool renders it (`dot -Tsvg`) and, written in a
//! fixed order, it diffs as text and can be compared in tests.
//!
//! State names are unique across a whole machine (the definition's check), so a state's
//! name is its node's id, branches included, and a history event's `state` names one node.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::WorkflowRunStatus;
use super::asl::definition::{Kind, State, StateMachine, Transition, WaitFor};

/// The fill of a state that a run exited.
const EXITED: &str = "palegreen";
/// The fill of a state that a run failed in.
const FAILED: &str = "lightcoral";
/// The fill of a state a run entered and has not left (the current one, or where it ended
/// when aborted or timed out).
const CURRENT: &str = "gold";

/// `machine` as a Graphviz digraph named `name`. Tasks are rounded boxes labelled with their
/// Resource, Pass plain dashed boxes, Choices diamonds, Waits hexagons, Succeed and Fail
/// double circles (Fail's outlined red), Parallel a parallelogram and Map a 3-D box, each
/// followed by its join point; Parallel branches and Map item processors are clusters. Edges:
/// Next (solid), Choice rules (labelled `rule N`, the rule's place in `Choices` from 1),
/// Default (dashed), Catch (red, dashed, labelled with its errors), Retry (a dotted loop).
///
/// With `run`, states are filled from its history: exited green, failed red, entered and not
/// left yellow, never entered white with grey text; the transitions it took are bold.
pub fn dot(name: &str, machine: &StateMachine, run: Option<&WorkflowRunStatus>) -> String {
    let mut taken_ids = BTreeSet::new();
    machine.walk(&mut |state, _| {
        taken_ids.insert(state.to_owned());
    });
    let mut graph = Graph {
        nodes: String::new(),
        edges: String::new(),
        visits: run.map(Visits::of),
        ids: taken_ids,
        clusters: 0,
    };
    let start = graph.fresh("__start__");
    let end = graph.fresh("__end__");

    let mut title = name.to_owned();
    if let Some(run) = run {
        let phase = run.phase.as_deref().unwrap_or("Pending");
        let _ = write!(title, "\nrun: {phase}");
        if let Some(error) = &run.error {
            let _ = write!(title, " ({error})");
        }
        if let Some(dropped) = run.history_dropped.filter(|n| *n > 0) {
            let _ = write!(title, "\n{dropped} earlier history events not shown");
        }
    }

    graph.nodes += &format!(
        "  {} [shape=point, width=0.2, label=\"\"];\n  {} [shape=doublecircle, width=0.15, \
         style=filled, fillcolor=black, label=\"\"];\n",
        quote(&start),
        quote(&end)
    );
    let entered = graph.visited(&machine.start_at);
    graph.edge(&start, &machine.start_at, &[], entered);
    graph.machine(machine, &end, 1);

    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", quote(name));
    let _ = writeln!(out, "  label={};", quote(&title));
    out += "  labelloc=t;\n  fontname=\"Helvetica\";\n";
    out +=
        "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\"];\n";
    out += "  edge [fontname=\"Helvetica\", fontsize=10];\n";
    out += &graph.nodes;
    out += &graph.edges;
    out += "}\n";
    out
}

struct Graph {
    /// Node and cluster declarations, written before every edge so that a node belongs to
    /// the cluster that declared it.
    nodes: String,
    edges: String,
    visits: Option<Visits>,
    /// Ids in use: every state's name, and the extra nodes made so far.
    ids: BTreeSet<String>,
    clusters: usize,
}

impl Graph {
    /// `base`, or `base` with underscores added until no state or node has the id.
    fn fresh(&mut self, base: &str) -> String {
        let mut id = base.to_owned();
        while self.ids.contains(&id) {
            id.push('_');
        }
        self.ids.insert(id.clone());
        id
    }

    fn visited(&self, state: &str) -> bool {
        self.visits
            .as_ref()
            .is_some_and(|v| v.states.contains_key(state))
    }

    /// The states of `machine` (indented by `depth`), each machine's way out leading to `exit`.
    fn machine(&mut self, machine: &StateMachine, exit: &str, depth: usize) {
        let pad = "  ".repeat(depth);
        for (name, state) in &machine.states {
            let line = self.node(name, state);
            let _ = writeln!(self.nodes, "{pad}{line};");
            // Where the state's own transitions leave from: a Parallel or a Map goes on once
            // its join point is reached.
            let from = match &state.kind {
                Kind::Parallel { .. } | Kind::Map { .. } => {
                    let join = self.fresh(&format!("{name} (join)"));
                    let _ = writeln!(
                        self.nodes,
                        "{pad}{} [shape=point, width=0.12, label=\"\"];",
                        quote(&join)
                    );
                    self.inner(name, state, &join, depth);
                    join
                }
                _ => name.clone(),
            };
            self.outgoing(name, state, &from, exit);
        }
    }

    /// The clusters of a Parallel's branches or a Map's processor.
    fn inner(&mut self, name: &str, state: &State, join: &str, depth: usize) {
        let machines: Vec<(String, &StateMachine)> = match &state.kind {
            Kind::Parallel { branches } => branches
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("branch {}", i + 1), b))
                .collect(),
            Kind::Map { processor, .. } => vec![("each item".to_owned(), &**processor)],
            _ => return,
        };
        let pad = "  ".repeat(depth);
        for (label, machine) in machines {
            self.clusters += 1;
            let _ = writeln!(self.nodes, "{pad}subgraph cluster_{} {{", self.clusters);
            let _ = writeln!(
                self.nodes,
                "{pad}  label={}; style=\"rounded,dashed\"; color=gray50;",
                quote(&format!("{name}: {label}"))
            );
            self.machine(machine, join, depth + 1);
            let _ = writeln!(self.nodes, "{pad}}}");
            let entered = self.visited(&machine.start_at);
            self.edge(
                name,
                &machine.start_at,
                &[("style", "dashed"), ("arrowhead", "empty")],
                entered,
            );
        }
    }

    /// The declaration of a state's node.
    fn node(&self, name: &str, state: &State) -> String {
        let mut label = name.to_owned();
        let mut attrs: Vec<(&str, String)> = Vec::new();
        let shape = |s: &str| ("shape", s.to_owned());
        match &state.kind {
            Kind::Task { resource, .. } => {
                let _ = write!(label, "\n{resource}");
            }
            Kind::Pass { .. } => {
                attrs.push(shape("box"));
                attrs.push(("style", "\"filled,dashed\"".into()));
            }
            Kind::Choice { .. } => attrs.push(shape("diamond")),
            Kind::Wait(wait) => {
                attrs.push(shape("hexagon"));
                let _ = match wait {
                    WaitFor::Seconds(s) => write!(label, "\nwait {s}s"),
                    WaitFor::SecondsPath(p) => write!(label, "\nwait {} s", p.text()),
                    WaitFor::Timestamp(t) => write!(label, "\nuntil {t}"),
                    WaitFor::TimestampPath(p) => write!(label, "\nuntil {}", p.text()),
                };
            }
            Kind::Succeed => attrs.push(shape("doublecircle")),
            Kind::Fail { error, .. } => {
                attrs.push(shape("doublecircle"));
                attrs.push(("color", "firebrick".into()));
                if let Some(error) = error {
                    let _ = write!(label, "\n{error}");
                }
            }
            Kind::Parallel { branches } => {
                attrs.push(shape("parallelogram"));
                let _ = write!(label, "\n{} branches", branches.len());
            }
            Kind::Map { items_path, .. } => {
                attrs.push(shape("box3d"));
                let _ = write!(label, "\nfor each of {}", items_path.text());
            }
        }
        if let Some(visits) = &self.visits {
            match visits.states.get(name) {
                Some(visit) => {
                    let fill = match visit {
                        Visit::Exited => EXITED,
                        Visit::Entered => CURRENT,
                        Visit::Failed => FAILED,
                    };
                    attrs.push(("fillcolor", fill.to_owned()));
                    if let Some(n) = visits.failed_attempts.get(name) {
                        let s = if *n == 1 { "" } else { "s" };
                        let _ = write!(label, "\n{n} failed attempt{s}");
                    }
                }
                None => attrs.push(("fontcolor", "gray50".to_owned())),
            }
        }
        attrs.insert(0, ("label", quote(&label)));
        let attrs: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{} [{}]", quote(name), attrs.join(", "))
    }

    /// The edges leaving `state`: its transitions from `from`, its Catch and Retry from
    /// itself.
    fn outgoing(&mut self, name: &str, state: &State, from: &str, exit: &str) {
        let visit = self
            .visits
            .as_ref()
            .and_then(|v| v.states.get(name))
            .copied();
        let taken = |this: &Graph, to: &str| {
            this.visits
                .as_ref()
                .is_some_and(|v| v.taken.contains(&(name.to_owned(), to.to_owned())))
        };
        match &state.transition {
            Transition::Next(next) => {
                let t = taken(self, next);
                self.edge(from, next, &[], t);
            }
            Transition::End => self.edge(from, exit, &[], visit == Some(Visit::Exited)),
            Transition::None => {}
        }
        match &state.kind {
            Kind::Choice { choices, default } => {
                for (i, (_, next)) in choices.iter().enumerate() {
                    let label = quote(&format!("rule {}", i + 1));
                    let t = taken(self, next);
                    self.edge(name, next, &[("label", &label)], t);
                }
                if let Some(default) = default {
                    let t = taken(self, default);
                    self.edge(
                        name,
                        default,
                        &[("label", "\"default\""), ("style", "dashed")],
                        t,
                    );
                }
            }
            Kind::Succeed => self.edge(name, exit, &[], visit == Some(Visit::Exited)),
            Kind::Fail { .. } => self.edge(name, exit, &[("color", "firebrick")], visit.is_some()),
            _ => {}
        }
        for retrier in &state.retry {
            let label = quote(&format!(
                "retry {} (at most {}x)",
                retrier.error_equals.join(", "),
                retrier.max_attempts
            ));
            self.edge(name, name, &[("label", &label), ("style", "dotted")], false);
        }
        for catcher in &state.catch {
            let label = quote(&catcher.error_equals.join(", "));
            let t = taken(self, &catcher.next);
            self.edge(
                name,
                &catcher.next,
                &[
                    ("label", &label),
                    ("style", "dashed"),
                    ("color", "red"),
                    ("fontcolor", "red"),
                ],
                t,
            );
        }
    }

    fn edge(&mut self, from: &str, to: &str, attrs: &[(&str, &str)], taken: bool) {
        let mut attrs: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if taken {
            attrs.push("penwidth=2.5".to_owned());
        }
        let _ = write!(self.edges, "  {} -> {}", quote(from), quote(to));
        if !attrs.is_empty() {
            let _ = write!(self.edges, " [{}]", attrs.join(", "));
        }
        self.edges += ";\n";
    }
}

/// How far a thread got in a state; the order is that in which threads' visits of one state
/// (a Map's iterations) combine: one failure makes the state failed, one still inside makes
/// it current.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Visit {
    Exited,
    Entered,
    Failed,
}

/// What a run's history says of each state.
#[derive(Debug, Default)]
struct Visits {
    states: BTreeMap<String, Visit>,
    /// Attempts of a Task that failed (`TaskFailed`: a retry or catch followed).
    failed_attempts: BTreeMap<String, usize>,
    /// `(from, to)`: a thread left `from` (exited, or failed and caught) and entered `to`.
    taken: BTreeSet<(String, String)>,
}

impl Visits {
    fn of(run: &WorkflowRunStatus) -> Visits {
        let mut visits = Visits::default();
        // Per (thread, state), the latest event: a state visited again (a loop) counts as
        // its last visit.
        let mut latest: BTreeMap<(&str, &str), Visit> = BTreeMap::new();
        let mut left: BTreeMap<&str, &str> = BTreeMap::new();
        for event in &run.history {
            let key = (event.thread.as_str(), event.state.as_str());
            match event.type_.as_str() {
                "StateEntered" => {
                    latest.insert(key, Visit::Entered);
                    if let Some(from) = left.remove(key.0) {
                        visits.taken.insert((from.to_owned(), event.state.clone()));
                    }
                }
                "StateExited" => {
                    latest.insert(key, Visit::Exited);
                    left.insert(key.0, key.1);
                }
                "StateFailed" => {
                    latest.insert(key, Visit::Failed);
                    left.insert(key.0, key.1);
                }
                "TaskFailed" => {
                    latest.entry(key).or_insert(Visit::Entered);
                    *visits
                        .failed_attempts
                        .entry(event.state.clone())
                        .or_default() += 1;
                }
                _ => {}
            }
        }
        for ((_, state), visit) in latest {
            let v = visits.states.entry(state.to_owned()).or_insert(visit);
            *v = (*v).max(visit);
        }
        visits
    }
}

/// `text` as a DOT quoted string (`\n` stays a line break).
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::HistoryEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn machine() -> StateMachine {
        StateMachine::parse(&json!({
            "StartAt": "Check",
            "States": {
                "Check": {
                    "Type": "Task",
                    "Resource": "check.team",
                    "Retry": [{"ErrorEquals": ["NotReady"], "MaxAttempts": 2}],
                    "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Broken"}],
                    "Next": "Choose"
                },
                "Choose": {
                    "Type": "Choice",
                    "Choices": [
                        {"Variable": "$.big", "BooleanEquals": true, "Next": "Split"},
                        {"Variable": "$.kind", "StringEquals": "x", "Next": "Wait"}
                    ],
                    "Default": "Done"
                },
                "Split": {
                    "Type": "Parallel",
                    "Branches": [
                        {"StartAt": "Left", "States": {"Left": {"Type": "Task", "Resource": "left", "End": true}}},
                        {"StartAt": "Right", "States": {"Right": {"Type": "Pass", "End": true}}}
                    ],
                    "Next": "Each"
                },
                "Each": {
                    "Type": "Map",
                    "ItemsPath": "$.items",
                    "ItemProcessor": {"StartAt": "One", "States": {"One": {"Type": "Task", "Resource": "one", "End": true}}},
                    "End": true
                },
                "Wait": {"Type": "Wait", "Seconds": 5, "Next": "Done"},
                "Done": {"Type": "Succeed"},
                "Broken": {"Type": "Fail", "Error": "Broken", "Cause": "it broke"}
            }
        }))
        .expect("the test machine parses")
    }

    #[test]
    fn a_machine_as_dot() {
        let dot = dot("demo", &machine(), None);
        let expected = r#"digraph "demo" {
  label="demo";
  labelloc=t;
  fontname="Helvetica";
  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica"];
  edge [fontname="Helvetica", fontsize=10];
  "__start__" [shape=point, width=0.2, label=""];
  "__end__" [shape=doublecircle, width=0.15, style=filled, fillcolor=black, label=""];
  "Broken" [label="Broken\nBroken", shape=doublecircle, color=firebrick];
  "Check" [label="Check\ncheck.team"];
  "Choose" [label="Choose", shape=diamond];
  "Done" [label="Done", shape=doublecircle];
  "Each" [label="Each\nfor each of $.items", shape=box3d];
  "Each (join)" [shape=point, width=0.12, label=""];
  subgraph cluster_1 {
    label="Each: each item"; style="rounded,dashed"; color=gray50;
    "One" [label="One\none"];
  }
  "Split" [label="Split\n2 branches", shape=parallelogram];
  "Split (join)" [shape=point, width=0.12, label=""];
  subgraph cluster_2 {
    label="Split: branch 1"; style="rounded,dashed"; color=gray50;
    "Left" [label="Left\nleft"];
  }
  subgraph cluster_3 {
    label="Split: branch 2"; style="rounded,dashed"; color=gray50;
    "Right" [label="Right", shape=box, style="filled,dashed"];
  }
  "Wait" [label="Wait\nwait 5s", shape=hexagon];
  "__start__" -> "Check";
  "Broken" -> "__end__" [color=firebrick];
  "Check" -> "Choose";
  "Check" -> "Check" [label="retry NotReady (at most 2x)", style=dotted];
  "Check" -> "Broken" [label="States.ALL", style=dashed, color=red, fontcolor=red];
  "Choose" -> "Split" [label="rule 1"];
  "Choose" -> "Wait" [label="rule 2"];
  "Choose" -> "Done" [label="default", style=dashed];
  "Done" -> "__end__";
  "One" -> "Each (join)";
  "Each" -> "One" [style=dashed, arrowhead=empty];
  "Each (join)" -> "__end__";
  "Left" -> "Split (join)";
  "Split" -> "Left" [style=dashed, arrowhead=empty];
  "Right" -> "Split (join)";
  "Split" -> "Right" [style=dashed, arrowhead=empty];
  "Split (join)" -> "Each";
  "Wait" -> "Done";
}
"#;
        assert_eq!(dot, expected, "{dot}");
    }

    fn event(type_: &str, state: &str, thread: &str) -> HistoryEvent {
        HistoryEvent {
            type_: type_.to_owned(),
            state: state.to_owned(),
            thread: thread.to_owned(),
            timestamp: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            attempt: None,
            input: None,
            output: None,
            error: None,
            cause: None,
        }
    }

    /// The line declaring `node`, and the lines of edges from `from` to `to`.
    fn node_line<'a>(dot: &'a str, node: &str) -> &'a str {
        let prefix = format!("{} [label=", quote(node));
        dot.lines()
            .find(|l| l.trim_start().starts_with(&prefix))
            .unwrap_or_else(|| panic!("no node {node} in {dot}"))
    }

    fn edge_lines<'a>(dot: &'a str, from: &str, to: &str) -> Vec<&'a str> {
        let prefix = format!("{} -> {}", quote(from), quote(to));
        dot.lines()
            .filter(|l| l.trim_start().starts_with(&prefix))
            .collect()
    }

    #[test]
    fn a_run_colours_the_states_it_went_through() {
        let run = WorkflowRunStatus {
            phase: Some("Running".into()),
            history: vec![
                event("StateEntered", "Check", ""),
                event("TaskFailed", "Check", ""),
                event("StateExited", "Check", ""),
                event("StateEntered", "Choose", ""),
                event("StateExited", "Choose", ""),
                event("StateEntered", "Split", ""),
                event("StateEntered", "Left", "Split[0]"),
                event("StateEntered", "Right", "Split[1]"),
                event("StateExited", "Right", "Split[1]"),
                event("StateFailed", "Left", "Split[0]"),
                event("StateExited", "Split", ""),
                event("StateEntered", "Each", ""),
                event("StateEntered", "One", "Each[0]"),
                event("StateExited", "One", "Each[0]"),
                event("StateEntered", "One", "Each[1]"),
            ],
            ..WorkflowRunStatus::default()
        };
        let dot = dot("demo", &machine(), Some(&run));
        assert!(dot.contains("label=\"demo\\nrun: Running\";"), "{dot}");
        assert_eq!(
            node_line(&dot, "Check").trim(),
            r#""Check" [label="Check\ncheck.team\n1 failed attempt", fillcolor=palegreen];"#
        );
        assert!(node_line(&dot, "Choose").contains("fillcolor=palegreen"));
        assert!(node_line(&dot, "Right").contains("fillcolor=palegreen"));
        assert!(node_line(&dot, "Left").contains("fillcolor=lightcoral"));
        // One iteration done, one still running: the state is current.
        assert!(node_line(&dot, "One").contains("fillcolor=gold"));
        assert!(node_line(&dot, "Each").contains("fillcolor=gold"));
        for never in ["Wait", "Done", "Broken"] {
            let line = node_line(&dot, never);
            assert!(
                line.contains("fontcolor=gray50") && !line.contains("fillcolor"),
                "{line}"
            );
        }

        // The transitions taken are bold; the others are not.
        assert_eq!(
            edge_lines(&dot, "__start__", "Check"),
            [r#"  "__start__" -> "Check" [penwidth=2.5];"#]
        );
        assert_eq!(
            edge_lines(&dot, "Check", "Choose"),
            [r#"  "Check" -> "Choose" [penwidth=2.5];"#]
        );
        assert!(edge_lines(&dot, "Choose", "Split")[0].contains("penwidth"));
        assert!(!edge_lines(&dot, "Choose", "Done")[0].contains("penwidth"));
        assert!(!edge_lines(&dot, "Check", "Broken")[0].contains("penwidth"));
        assert!(edge_lines(&dot, "Split (join)", "Each")[0].contains("penwidth"));
        assert!(edge_lines(&dot, "Split", "Left")[0].contains("penwidth"));
        assert!(!edge_lines(&dot, "Each (join)", "__end__")[0].contains("penwidth"));
    }

    #[test]
    fn a_caught_failure_takes_the_catch() {
        let run = WorkflowRunStatus {
            phase: Some("Failed".into()),
            error: Some("Broken".into()),
            history_dropped: Some(3),
            history: vec![
                event("StateEntered", "Check", ""),
                event("TaskFailed", "Check", ""),
                event("TaskFailed", "Check", ""),
                event("StateFailed", "Check", ""),
                event("StateEntered", "Broken", ""),
                event("StateFailed", "Broken", ""),
            ],
            ..WorkflowRunStatus::default()
        };
        let dot = dot("demo", &machine(), Some(&run));
        assert!(
            dot.contains(
                "label=\"demo\\nrun: Failed (Broken)\\n3 earlier history events not shown\";"
            ),
            "{dot}"
        );
        let check = node_line(&dot, "Check");
        assert!(
            check.contains("fillcolor=lightcoral") && check.contains("2 failed attempts"),
            "{check}"
        );
        assert!(edge_lines(&dot, "Check", "Broken")[0].contains("penwidth"));
        assert!(!edge_lines(&dot, "Check", "Choose")[0].contains("penwidth"));
        assert!(edge_lines(&dot, "Broken", "__end__")[0].contains("penwidth"));
    }

    #[test]
    fn names_are_quoted_and_extra_nodes_never_clash() {
        let machine = StateMachine::parse(&json!({
            "StartAt": "__start__",
            "States": {
                "__start__": {"Type": "Pass", "Next": "say \"hi\" \\ bye"},
                "say \"hi\" \\ bye": {"Type": "Pass", "Next": "__end__"},
                "__end__": {"Type": "Succeed"}
            }
        }))
        .unwrap();
        let dot = dot("a \"b\"", &machine, None);
        assert!(dot.starts_with("digraph \"a \\\"b\\\"\" {\n"), "{dot}");
        assert!(
            dot.contains("  \"__start___\" -> \"__start__\";\n"),
            "{dot}"
        );
        assert!(
            dot.contains("  \"__start__\" -> \"say \\\"hi\\\" \\\\ bye\";\n"),
            "{dot}"
        );
        assert!(dot.contains("  \"__end__\" -> \"__end___\";\n"), "{dot}");
    }

    #[test]
    fn output_is_deterministic() {
        let m = machine();
        assert_eq!(dot("x", &m, None), dot("x", &m.clone(), None));
    }
}
