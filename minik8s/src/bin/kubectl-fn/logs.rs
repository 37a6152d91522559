//! `logs` finds a Function's pods by the label its revisions put on them, since their names
//! (revision and replica hashes) change with every deploy and scale. A function scaled to
//! zero has no pods and so no logs: that is said, not treated as an error.

use anyhow::Context;
use clap::Args;
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use knative_lite::function::labels;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};

use crate::client::ClientArgs;

/// The container that runs the function's code in each of its pods.
const CONTAINER: &str = "user-container";

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The Function's name.
    pub name: String,
    /// Keep printing new lines until interrupted.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The last N lines of each pod only (-1: all).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub tail: Option<i64>,
}

pub async fn run(cluster: &ClientArgs, args: LogsArgs) -> anyhow::Result<()> {
    let cluster = cluster.connect().await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client, &cluster.namespace);
    let selector = format!("{}={}", labels::FUNCTION, args.name);
    // Pods whose container has not started yet have no logs (kubectl logs would fail).
    let mut names: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .iter()
        .filter(|p| started(p))
        .map(|p| p.name_any())
        .collect();
    if names.is_empty() {
        eprintln!(
            "no pods of function {} are running (it is scaled to zero)",
            args.name
        );
        return Ok(());
    }
    names.sort();
    let params = LogParams {
        container: Some(CONTAINER.to_owned()),
        follow: args.follow,
        tail_lines: args.tail.filter(|n| *n >= 0),
        ..LogParams::default()
    };
    let prefixed = names.len() > 1;
    if args.follow {
        // Every pod at once: a follow never ends while its pod runs.
        let streams = names
            .iter()
            .map(|name| print_log(&pods, name, &params, prefixed));
        futures::future::try_join_all(streams).await?;
    } else {
        for name in &names {
            print_log(&pods, name, &params, prefixed).await?;
        }
    }
    Ok(())
}

/// Whether the function's container has run (running now, or terminated).
fn started(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
}

async fn print_log(
    pods: &Api<Pod>,
    name: &str,
    params: &LogParams,
    prefixed: bool,
) -> anyhow::Result<()> {
    let prefix = if prefixed {
        format!("[pod/{name}] ")
    } else {
        String::new()
    };
    let stream = pods
        .log_stream(name, params)
        .await
        .with_context(|| format!("reading the logs of pod/{name}"))?;
    let mut lines = stream.lines();
    while let Some(line) = lines
        .try_next()
        .await
        .with_context(|| format!("reading the logs of pod/{name}"))?
    {
        println!("{prefix}{line}");
    }
    Ok(())
}
