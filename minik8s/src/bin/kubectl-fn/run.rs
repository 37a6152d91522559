//! `run` starts a Workflow as `kubectl create` of a WorkflowRun would, and by default waits
//! for the run's end, because the question asked of a workflow is usually what it returned:
//! the output goes alone to stdout (`kubectl fn run wf | jq`), and a run that failed fails
//! the command. `--async` leaves the waiting to `kubectl get workflowrun -w`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use knative_lite::workflow::{Workflow, WorkflowRun, phase};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::Value;

use crate::client::{ClientArgs, Reported};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The Workflow's name.
    pub workflow: String,
    /// The run's input: JSON, or `@FILE` to read a file's.
    #[arg(short = 'i', long, default_value = "{}", value_name = "JSON|@FILE")]
    pub input: String,
    /// Create the run and return without waiting for it.
    #[arg(long = "async")]
    pub async_: bool,
    /// How long to wait for the run to finish.
    #[arg(long, default_value = "60s", value_parser = crate::parse_duration)]
    pub timeout: Duration,
}

pub async fn run(cluster: &ClientArgs, args: RunArgs) -> anyhow::Result<()> {
    let input = input(&args.input)?;
    let cluster = cluster.connect().await?;
    let ended = match start(cluster.client, &cluster.namespace, &args, input).await? {
        Ran::Started(name) => {
            println!("workflowrun.functions.minik8s.io/{name} created");
            return Ok(());
        }
        Ran::Ended(ended) => ended,
    };
    match outcome(&ended) {
        Ok(output) => {
            println!("{output}");
            Ok(())
        }
        Err(message) => {
            eprintln!(
                "workflowrun.functions.minik8s.io/{} {}",
                ended.name_any(),
                phase_of(&ended).unwrap_or_default()
            );
            eprintln!("{message}");
            Err(Reported.into())
        }
    }
}

#[derive(Debug)]
enum Ran {
    /// `--async`: the run's name.
    Started(String),
    Ended(Box<WorkflowRun>),
}

/// Creates the run and, unless `--async`, waits on a watch of it until it finishes.
async fn start(
    client: kube::Client,
    namespace: &str,
    args: &RunArgs,
    input: Value,
) -> anyhow::Result<Ran> {
    let workflows: Api<Workflow> = Api::namespaced(client.clone(), namespace);
    // A run of a Workflow that does not exist would only fail later, less clearly.
    workflows.get(&args.workflow).await?;
    let runs: Api<WorkflowRun> = Api::namespaced(client, namespace);
    let created = runs
        .create(
            &PostParams::default(),
            &WorkflowRun::of(&args.workflow, input),
        )
        .await?;
    let name = created.name_any();
    if args.async_ {
        return Ok(Ran::Started(name));
    }
    let done = |r: Option<&WorkflowRun>| r.is_none_or(|r| phase::finished(phase_of(r)));
    let ended = match tokio::time::timeout(args.timeout, await_condition(runs, &name, done)).await {
        Err(_) => bail!(
            "workflowrun {name} has not finished after {}s (`kubectl get workflowrun {name} -w` follows it)",
            args.timeout.as_secs_f64()
        ),
        Ok(ended) => ended.with_context(|| format!("watching workflowrun {name}"))?,
    };
    match ended {
        Some(ended) => Ok(Ran::Ended(Box::new(ended))),
        None => bail!("workflowrun {name} was deleted before it finished"),
    }
}

fn phase_of(run: &WorkflowRun) -> Option<&str> {
    run.status.as_ref()?.phase.as_deref()
}

/// A finished run's output as one line of JSON, or what to say of its failure:
/// `Error: <error>: <cause>`.
fn outcome(run: &WorkflowRun) -> Result<String, String> {
    let status = run.status.clone().unwrap_or_default();
    let phase = status.phase.as_deref().unwrap_or_default();
    if phase == phase::SUCCEEDED {
        return Ok(status.output.unwrap_or(Value::Null).to_string());
    }
    Err(match (status.error, status.cause) {
        (Some(error), Some(cause)) => format!("Error: {error}: {cause}"),
        (Some(error), None) => format!("Error: {error}"),
        (None, Some(cause)) => format!("Error: {phase}: {cause}"),
        (None, None) => format!("Error: workflowrun {} {phase}", run.name_any()),
    })
}

/// The input `--input` names: inline JSON, or a file's after `@`.
fn input(text: &str) -> anyhow::Result<Value> {
    match text.strip_prefix('@') {
        Some(file) => {
            let body = std::fs::read(Path::new(file)).with_context(|| format!("reading {file}"))?;
            serde_json::from_slice(&body)
                .with_context(|| format!("--input @{file} is not valid JSON"))
        }
        None => serde_json::from_str(text).context("--input is not valid JSON"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_inline_and_from_file() {
        assert_eq!(input("{}").unwrap(), json!({}));
        assert_eq!(input(r#"{"a": [1]}"#).unwrap(), json!({"a": [1]}));
        let err = format!("{:#}", input("{a: 1}").unwrap_err());
        assert!(err.starts_with("--input is not valid JSON: "), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("in.json");
        std::fs::write(&file, "[1, 2]\n").unwrap();
        let arg = format!("@{}", file.display());
        assert_eq!(input(&arg).unwrap(), json!([1, 2]));
        std::fs::write(&file, "nope").unwrap();
        let err = format!("{:#}", input(&arg).unwrap_err());
        assert!(
            err.starts_with(&format!("--input {arg} is not valid JSON")),
            "{err}"
        );
        let err = format!("{:#}", input("@/nonexistent.json").unwrap_err());
        assert!(err.starts_with("reading /nonexistent.json: "), "{err}");
    }

    fn ended(status: Value) -> WorkflowRun {
        let mut run = WorkflowRun::of("order", json!({}));
        run.metadata.name = Some("order-x1".into());
        run.status = Some(serde_json::from_value(status).unwrap());
        run
    }

    #[test]
    fn outcomes() {
        let run = ended(json!({"phase": "Succeeded", "output": {"total": 3}}));
        assert_eq!(outcome(&run), Ok(r#"{"total":3}"#.to_owned()));
        let run = ended(json!({"phase": "Succeeded"}));
        assert_eq!(outcome(&run), Ok("null".to_owned()));
        let run = ended(json!({"phase": "Failed", "error": "NotReady", "cause": "later"}));
        assert_eq!(outcome(&run), Err("Error: NotReady: later".to_owned()));
        let run = ended(json!({"phase": "TimedOut", "error": "States.Timeout"}));
        assert_eq!(outcome(&run), Err("Error: States.Timeout".to_owned()));
        let run = ended(json!({"phase": "Aborted"}));
        assert_eq!(
            outcome(&run),
            Err("Error: workflowrun order-x1 Aborted".to_owned())
        );
    }

    /// A stand-in for the workflow controller: each new run succeeds with its input as its
    /// output, and a history through its only state, unless its input says `"stay"`.
    async fn finisher(client: kube::Client) {
        use futures::StreamExt;
        use kube::api::{Patch, PatchParams};
        use kube::runtime::{WatchStreamExt, watcher};
        let runs: Api<WorkflowRun> = Api::namespaced(client, "default");
        let events = watcher::watcher(runs.clone(), watcher::Config::default()).touched_objects();
        let mut events = Box::pin(events);
        while let Some(Ok(run)) = events.next().await {
            let input = run.spec.input.clone().unwrap_or_default();
            if run.status.is_some() || input.get("stay").is_some() {
                continue;
            }
            let event = |type_: &str| json!({"type": type_, "state": "Echo", "timestamp": "2024-01-01T00:00:00Z"});
            let status = json!({
                "phase": "Succeeded",
                "output": input,
                "definition": {"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": true}}},
                "history": [event("StateEntered"), event("StateExited")],
            });
            let patch = Patch::Merge(json!({ "status": status }));
            runs.patch_status(&run.name_any(), &PatchParams::default(), &patch)
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn runs_and_graphs_against_an_api_server() -> anyhow::Result<()> {
        let api = testkit::InProcess::start_with(testkit::Backend::Sqlite, |c| {
            c.crds = knative_lite::crds()
        })
        .await?;
        let client = api.client();
        let args = |workflow: &str, async_: bool| RunArgs {
            workflow: workflow.to_owned(),
            input: String::new(),
            async_,
            timeout: Duration::from_secs(20),
        };

        let err = start(client.clone(), "default", &args("order", false), json!({}))
            .await
            .unwrap_err();
        assert_eq!(
            crate::client::error_message(&err),
            r#"Error from server (NotFound): workflows.functions.minik8s.io "order" not found"#
        );

        let workflows: Api<Workflow> = Api::namespaced(client.clone(), "default");
        let workflow: Workflow = serde_json::from_value(json!({
            "apiVersion": "functions.minik8s.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "order"},
            "spec": {"definition": {"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": true}}}}
        }))?;
        workflows.create(&PostParams::default(), &workflow).await?;
        let finisher = tokio::spawn(finisher(client.clone()));

        let ran = start(
            client.clone(),
            "default",
            &args("order", false),
            json!({"a": 1}),
        )
        .await?;
        let Ran::Ended(ended) = ran else {
            panic!("not waited for: {ran:?}")
        };
        assert_eq!(outcome(&ended), Ok(r#"{"a":1}"#.to_owned()));
        assert_eq!(
            ended.labels()[knative_lite::workflow::WORKFLOW_LABEL],
            "order"
        );

        let ran = start(
            client.clone(),
            "default",
            &args("order", true),
            json!({"stay": 1}),
        )
        .await?;
        let Ran::Started(name) = ran else {
            panic!("waited for: {ran:?}")
        };
        assert!(name.starts_with("order-"), "{name}");

        // The graph of the workflow, and of the run that went through it.
        let graph = |run: Option<&str>| crate::graph::GraphArgs {
            workflow: "order".into(),
            run: run.map(String::from),
        };
        let dot = crate::graph::render(client.clone(), "default", &graph(None)).await?;
        assert!(
            dot.contains(r#""Echo" [label="Echo", shape=box, style="filled,dashed"];"#),
            "{dot}"
        );
        let run = ended.name_any();
        let dot = crate::graph::render(client.clone(), "default", &graph(Some(&run))).await?;
        assert!(dot.contains("fillcolor=palegreen"), "{dot}");
        let other = crate::graph::GraphArgs {
            workflow: "other".into(),
            run: Some(run.clone()),
        };
        let err = crate::graph::render(client.clone(), "default", &other)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("workflowrun {run} is a run of workflow order, not of other")
        );
        finisher.abort();
        Ok(())
    }
}
