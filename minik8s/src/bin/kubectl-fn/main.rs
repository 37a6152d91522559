//! `kubectl fn`: Functions from the command line, as a kubectl plugin (kubectl runs any
//! `kubectl-<name>` on PATH for `kubectl <name>`), so users keep the kubeconfig, context and
//! namespace flags they know. Each command is a few API calls that `kubectl apply` and
//! `kubectl logs` could do too; the plugin saves writing the manifest and finding the pods
//! and the gateway, which is what a function's author should not have to know.

mod client;
mod delete;
mod deploy;
mod graph;
mod invoke;
mod list;
mod logs;
mod run;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl fn",
    bin_name = "kubectl fn",
    version,
    about = "Deploy, invoke and watch minik8s Functions (functions.minik8s.io)"
)]
struct Cli {
    #[command(flatten)]
    cluster: client::ClientArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a Function from a Python file, or update it when it exists.
    Deploy(deploy::DeployArgs),
    /// Call a Function through the node's function gateway.
    Invoke(invoke::InvokeArgs),
    /// List Functions.
    #[command(visible_alias = "ls")]
    List(list::ListArgs),
    /// Print the logs of a Function's pods.
    Logs(logs::LogsArgs),
    /// Delete a Function.
    Delete(delete::DeleteArgs),
    /// Run a Workflow with an input, and print its output when it ends.
    Run(run::RunArgs),
    /// Print a Workflow as a Graphviz (DOT) graph, coloured by a run with --run.
    Graph(graph::GraphArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Deploy(args) => deploy::run(&cli.cluster, args).await,
        Command::Invoke(args) => invoke::run(&cli.cluster, args).await,
        Command::List(args) => list::run(&cli.cluster, args).await,
        Command::Logs(args) => logs::run(&cli.cluster, args).await,
        Command::Delete(args) => delete::run(&cli.cluster, args).await,
        Command::Run(args) => run::run(&cli.cluster, args).await,
        Command::Graph(args) => graph::run(&cli.cluster, args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if !err.is::<client::Reported>() {
                eprintln!("{}", client::error_message(&err));
            }
            ExitCode::FAILURE
        }
    }
}

/// A duration as kubectl's flags take them (`90s`, `2m`, `500ms`), or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    minik8s_controllers::util::duration::parse_flag(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_anywhere() {
        let cli = Cli::try_parse_from(["kubectl-fn", "invoke", "hello", "-n", "team"]).unwrap();
        assert_eq!(cli.cluster.namespace.as_deref(), Some("team"));
        let cli = Cli::try_parse_from(["kubectl-fn", "--context", "c", "ls"]).unwrap();
        assert_eq!(cli.cluster.context.as_deref(), Some("c"));
        assert!(matches!(cli.command, Command::List(_)));
    }

    #[test]
    fn run_flags() {
        let cli = Cli::try_parse_from(["kubectl-fn", "run", "order"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run: {:?}", cli.command)
        };
        assert_eq!(args.workflow, "order");
        assert_eq!(args.input, "{}");
        assert!(!args.async_);
        assert_eq!(args.timeout, Duration::from_secs(60));

        let argv = [
            "kubectl-fn",
            "run",
            "order",
            "--input",
            r#"{"a": 1}"#,
            "--async",
            "--timeout",
            "2m",
            "-n",
            "shop",
        ];
        let cli = Cli::try_parse_from(argv).unwrap();
        assert_eq!(cli.cluster.namespace.as_deref(), Some("shop"));
        let Command::Run(args) = cli.command else {
            panic!("not run: {:?}", cli.command)
        };
        assert_eq!(
            (args.input.as_str(), args.async_, args.timeout),
            (r#"{"a": 1}"#, true, Duration::from_secs(120))
        );
        let cli = Cli::try_parse_from(["kubectl-fn", "run", "order", "-i", "@in.json"]).unwrap();
        assert!(matches!(cli.command, Command::Run(args) if args.input == "@in.json"));
        assert!(Cli::try_parse_from(["kubectl-fn", "run"]).is_err());
        assert!(Cli::try_parse_from(["kubectl-fn", "run", "order", "--timeout", "soon"]).is_err());
    }

    #[test]
    fn graph_flags() {
        let cli = Cli::try_parse_from(["kubectl-fn", "graph", "order"]).unwrap();
        let Command::Graph(args) = cli.command else {
            panic!("not graph: {:?}", cli.command)
        };
        assert_eq!((args.workflow.as_str(), args.run), ("order", None));
        let argv = [
            "kubectl-fn",
            "graph",
            "order",
            "--run",
            "order-x1",
            "-n",
            "shop",
        ];
        let cli = Cli::try_parse_from(argv).unwrap();
        assert_eq!(cli.cluster.namespace.as_deref(), Some("shop"));
        assert!(
            matches!(cli.command, Command::Graph(args) if args.run.as_deref() == Some("order-x1"))
        );
        assert!(Cli::try_parse_from(["kubectl-fn", "graph"]).is_err());
    }
}
