//! The cluster a command talks to, chosen as kubectl chooses it (`--kubeconfig`, else
//! `$KUBECONFIG`, else `~/.kube/config`; `--context`; `-n`, else the context's namespace), so
//! that `kubectl fn` and `kubectl` never disagree about where a Function is. Errors print as
//! kubectl prints them, so scripts that match kubectl's messages match these too.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace (default: the context's, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

/// A client and the namespace the command acts in.
pub struct Cluster {
    pub client: kube::Client,
    pub namespace: String,
}

impl ClientArgs {
    pub async fn connect(&self) -> anyhow::Result<Cluster> {
        let config = self.config().await?;
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config).context("building the API client")?;
        Ok(Cluster { client, namespace })
    }

    /// The namespace alone: `-n`, else the context's (reading the kubeconfig only then, so a
    /// command that needs no API server works without one when `-n` is given).
    pub async fn namespace(&self) -> anyhow::Result<String> {
        match &self.namespace {
            Some(namespace) => Ok(namespace.clone()),
            None => Ok(self.config().await?.default_namespace),
        }
    }

    async fn config(&self) -> anyhow::Result<Config> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        Ok(match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options).await?
            }
            None => Config::from_kubeconfig(&options).await?,
        })
    }
}

/// The API's refusal, as kubectl words it: `Error from server (<Reason>): <message>`;
/// anything else as `error: <what>: <cause>`.
pub fn error_message(err: &anyhow::Error) -> String {
    let status = err
        .chain()
        .find_map(|e| match e.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => Some(status),
            _ => None,
        });
    match status {
        Some(status) if status.reason.is_empty() => {
            format!("Error from server: {}", status.message)
        }
        Some(status) => format!("Error from server ({}): {}", status.reason, status.message),
        None => format!("error: {err:#}"),
    }
}

/// An error the command has printed already, in its own words: `main` only exits non-zero.
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the command failed (reported above)")
    }
}

impl std::error::Error for Reported {}

/// Whether `err` is the API's answer with this reason (`NotFound`, `Conflict`, ...).
pub fn is_reason(err: &kube::Error, reason: &str) -> bool {
    matches!(err, kube::Error::Api(status) if status.reason == reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_print_like_kubectl() {
        let status = kube::core::Status::failure(
            "functions.functions.minik8s.io \"a\" not found",
            "NotFound",
        )
        .with_code(404);
        let err = anyhow::Error::from(kube::Error::Api(status.boxed())).context("deleting a");
        assert_eq!(
            error_message(&err),
            "Error from server (NotFound): functions.functions.minik8s.io \"a\" not found"
        );
        let err = anyhow::anyhow!("No such file or directory (os error 2)").context("reading h.py");
        assert_eq!(
            error_message(&err),
            "error: reading h.py: No such file or directory (os error 2)"
        );
    }
}
