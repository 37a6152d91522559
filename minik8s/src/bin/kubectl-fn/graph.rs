//! `graph` prints a Workflow as Graphviz DOT (`kubectl fn graph wf | dot -Tsvg > wf.svg`),
//! and with `--run` the states that run went through, coloured: what the Step Functions
//! console's graph view shows, without a console.

use anyhow::bail;
use clap::Args;
use knative_lite::workflow::asl::StateMachine;
use knative_lite::workflow::{Workflow, WorkflowRun, graph};
use kube::api::Api;

use crate::client::ClientArgs;

#[derive(Args, Debug)]
pub struct GraphArgs {
    /// The Workflow's name.
    pub workflow: String,
    /// A WorkflowRun of that Workflow, whose history colours the states.
    #[arg(long, value_name = "RUN")]
    pub run: Option<String>,
}

pub async fn run(cluster: &ClientArgs, args: GraphArgs) -> anyhow::Result<()> {
    let cluster = cluster.connect().await?;
    print!(
        "{}",
        render(cluster.client, &cluster.namespace, &args).await?
    );
    Ok(())
}

/// The DOT text of the graph `args` asks for.
pub async fn render(
    client: kube::Client,
    namespace: &str,
    args: &GraphArgs,
) -> anyhow::Result<String> {
    let run = match &args.run {
        None => None,
        Some(name) => {
            let runs: Api<WorkflowRun> = Api::namespaced(client.clone(), namespace);
            let run = runs.get(name).await?;
            if run.spec.workflow != args.workflow {
                bail!(
                    "workflowrun {name} is a run of workflow {}, not of {}",
                    run.spec.workflow,
                    args.workflow
                );
            }
            Some(run)
        }
    };
    // A run is drawn on the definition it started with, which a later edit of the
    // Workflow does not change.
    let recorded = run
        .as_ref()
        .and_then(|r| r.status.as_ref()?.definition.clone());
    let definition = match recorded {
        Some(definition) => definition,
        None => {
            let workflows: Api<Workflow> = Api::namespaced(client, namespace);
            workflows.get(&args.workflow).await?.spec.definition
        }
    };
    let machine = parse(&args.workflow, &definition)?;
    let status = run.as_ref().and_then(|r| r.status.as_ref());
    Ok(graph::dot(&args.workflow, &machine, status))
}

/// The state machine, or every problem of the definition.
fn parse(workflow: &str, definition: &serde_json::Value) -> anyhow::Result<StateMachine> {
    StateMachine::parse(definition).map_err(|problems| {
        let problems: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        anyhow::anyhow!(
            "the definition of workflow {workflow} is not valid:\n{}",
            problems.join("\n")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bad_definition_lists_its_problems() {
        let definition = json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "B"}}});
        let err = parse("wf", &definition).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "the definition of workflow wf is not valid:\n  MISSING_TRANSITION_TARGET: "
            ),
            "{err}"
        );
        let definition = json!({"StartAt": "A", "States": {"A": {"Type": "Succeed"}}});
        assert!(parse("wf", &definition).is_ok());
    }
}
