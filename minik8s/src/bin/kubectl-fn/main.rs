//! `kubectl fn`: Functions from the command line, as a kubectl plugin (kubectl runs any
//! `kubectl-<name>` on PATH for `kubectl <name>`), so users keep the kubeconfig, context and
//! namespace flags they know. Each command is a few API calls that `kubectl apply` and
//! `kubectl logs` could do too; the plugin saves writing the manifest and finding the pods
//! and the gateway, which is what a function's author should not have to know.

mod client;
mod delete;
mod deploy;
mod invoke;
mod list;
mod logs;

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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{}", client::error_message(&err));
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
}
