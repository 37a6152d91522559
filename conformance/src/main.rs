//! Drives a running cluster only through stock clients and checks what they print and what
//! the API then holds. One line per case, then `N passed, M failed`; exit status 1 on failure.

mod kubectl;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Conformance suite for a running minik8s cluster")]
struct Args {
    /// Admin kubeconfig of the cluster under test.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// kubectl binaries to run the kubectl cases with; default: the stock `kubectl` and every
    /// `kubectl.1.NN` installed beside it.
    #[arg(long)]
    kubectl: Vec<String>,
    /// Only run cases whose name contains this.
    #[arg(long)]
    filter: Option<String>,
}

/// The outcome of one case.
pub struct Outcome {
    pub name: String,
    pub result: anyhow::Result<()>,
}

/// The kubectl binaries present on this machine.
fn kubectls() -> Vec<String> {
    let mut found = vec!["kubectl".to_string()];
    let dir = std::path::Path::new("/usr/lib/google-cloud-sdk/bin");
    for minor in 27..=33 {
        let p = dir.join(format!("kubectl.1.{minor}"));
        if p.exists() {
            found.push(p.to_string_lossy().into_owned());
        }
    }
    found
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = {
        let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        kube::Client::try_from(config)?
    };
    let binaries = if args.kubectl.is_empty() {
        kubectls()
    } else {
        args.kubectl.clone()
    };
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for bin in &binaries {
        let k = kubectl::Kubectl::new(bin, &args.kubeconfig);
        outcomes.extend(kubectl::run_all(&k, &client, args.filter.as_deref()).await);
    }
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    println!(
        "{} passed, {} failed ({:.1}s)",
        outcomes.len() - failed,
        failed,
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
