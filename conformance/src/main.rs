//! Drives a running cluster only through stock clients (kubectl 1.27–1.33, a kube-rs program,
//! the official Python client) and checks what they print and what the API then holds. One
//! line per case, then `N passed, M failed`; exit status 1 on failure.
//!
//! Every suite works in its own namespace, `conf-<suite>-<run id>`, created before its first
//! case and removed after its last (finalized through `/finalize` if nothing else empties it).

mod admission;
mod hpa;
mod incluster;
mod knative;
mod kubectl;
mod kubers;
mod python;
mod support;
mod workflows;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use tokio::sync::Semaphore;

use anyhow::Context;
use support::{Report, Selection, Verdict};

#[derive(Parser)]
#[command(about = "Conformance suite for a running minik8s cluster")]
struct Args {
    /// Admin kubeconfig of the cluster under test.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// kubectl binaries to run the kubectl cases with; default: every
    /// /usr/lib/google-cloud-sdk/bin/kubectl.1.NN for NN in 27..=33 that is installed.
    #[arg(long)]
    kubectl: Vec<String>,
    /// Only run cases whose name (as `--list` prints it) contains one of these.
    #[arg(long)]
    filter: Vec<String>,
    /// Print the name of every case and exit.
    #[arg(long)]
    list: bool,
    /// How many suites (one per kubectl binary, kube-rs, python...) run at once. All 11 at
    /// once on 2 cores took 374 s, but a pod's start took 10.8 s at p90 and rollouts brushed
    /// the 60 s limits; 6 at once took 405 s with pods started in 3.2 s at p90.
    #[arg(long, default_value_t = 6)]
    jobs: usize,
    /// The Python interpreter that creates the venv for the Python suite.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Where the Python suite's venv lives; default: a cache directory, reused across runs.
    #[arg(long)]
    python_venv: Option<PathBuf>,
    /// Print the whole message of a failing case below its line.
    #[arg(long, short)]
    verbose: bool,
    /// A file of cases expected to fail for now (`<pattern> <why>` lines, `*` wildcards):
    /// they print as XFAIL and do not count as failures; listed cases that pass do.
    #[arg(long)]
    known_failures: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Runs inside a pod of the kube-rs suite's `in-cluster` case: finds the API with
    /// `Config::incluster_dns()`, lists pods and watches a ConfigMap until it says go.
    InCluster {
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        config_map: String,
    },
}

/// One group of cases that runs in order, in its own namespace.
#[derive(Clone)]
pub enum Suite {
    Kubectl(kubectl::Binary),
    KubeRs,
    Python,
    Knative,
    Hpa,
    Admission,
    Workflows,
}

impl Suite {
    fn prefix(&self) -> String {
        match self {
            Suite::Kubectl(b) => b.label.clone(),
            Suite::KubeRs => "kube-rs".into(),
            Suite::Python => "python".into(),
            Suite::Knative => "knative".into(),
            Suite::Hpa => "hpa".into(),
            Suite::Admission => "admission".into(),
            Suite::Workflows => "workflows".into(),
        }
    }

    fn cases(&self) -> Vec<&'static str> {
        match self {
            Suite::Kubectl(_) => kubectl::CASES.iter().map(|(n, _)| *n).collect(),
            Suite::KubeRs => kubers::CASES.iter().map(|(n, _)| *n).collect(),
            Suite::Python => python::CASES.to_vec(),
            Suite::Knative => knative::CASES.iter().map(|(n, _)| *n).collect(),
            Suite::Hpa => hpa::CASES.iter().map(|(n, _)| *n).collect(),
            Suite::Admission => admission::CASES.iter().map(|(n, _)| *n).collect(),
            Suite::Workflows => workflows::CASES.iter().map(|(n, _)| *n).collect(),
        }
    }
}

/// What every suite gets.
pub struct Env {
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    /// Unique to this run; part of every namespace and cluster-scoped name.
    pub run: String,
    /// A temporary directory for this run, removed at the end.
    pub tmp: PathBuf,
    pub selection: Selection,
    pub report: Report,
    pub python: String,
    pub python_venv: Option<PathBuf>,
}

/// The kubectl binaries present on this machine.
fn kubectls() -> Vec<String> {
    let dir = Path::new("/usr/lib/google-cloud-sdk/bin");
    (27..=33)
        .map(|minor| dir.join(format!("kubectl.1.{minor}")))
        .filter(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::InCluster {
        namespace,
        config_map,
    }) = &args.command
    {
        return incluster::probe(namespace, config_map).await;
    }
    let binaries = if args.kubectl.is_empty() {
        kubectls()
    } else {
        args.kubectl.clone()
    };
    // Python and kube-rs first: they have set-up work to overlap with the kubectl suites.
    let mut suites = vec![
        Suite::Hpa,
        Suite::Python,
        Suite::KubeRs,
        Suite::Knative,
        Suite::Workflows,
        Suite::Admission,
    ];
    suites.extend(
        binaries
            .iter()
            .map(|b| Suite::Kubectl(kubectl::Binary::new(b))),
    );
    let selection = Selection(args.filter.clone());

    if args.list {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for s in &suites {
            for c in s.cases() {
                let name = format!("{}/{c}", s.prefix());
                if selection.wants(&name) && writeln!(out, "{name}").is_err() {
                    return Ok(());
                }
            }
        }
        return Ok(());
    }

    let Some(kubeconfig) = args.kubeconfig.clone() else {
        anyhow::bail!("--kubeconfig (or KUBECONFIG) is required");
    };
    let kubeconfig = std::fs::canonicalize(&kubeconfig).unwrap_or(kubeconfig);
    let client = {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        kube::Client::try_from(config)?
    };
    let known = match &args.known_failures {
        Some(f) => support::KnownFailures::parse(
            &std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        ),
        None => support::KnownFailures::default(),
    };
    let tmp = tempfile::Builder::new()
        .prefix("minik8s-conformance-")
        .tempdir()?;
    let env = Arc::new(Env {
        client,
        kubeconfig,
        run: support::run_id(),
        tmp: tmp.path().to_path_buf(),
        selection,
        report: Report::new(args.verbose, known),
        python: args.python.clone(),
        python_venv: args.python_venv.clone(),
    });
    let started = Instant::now();
    let jobs = args.jobs.max(1);
    println!(
        "# run {}: {} suites, up to {jobs} at once",
        env.run,
        suites.len(),
    );

    let permits = Arc::new(Semaphore::new(jobs));
    let mut tasks = tokio::task::JoinSet::new();
    for suite in suites {
        let prefix = suite.prefix();
        if !suite
            .cases()
            .iter()
            .any(|c| env.selection.wants(&format!("{prefix}/{c}")))
        {
            continue;
        }
        let env = env.clone();
        let permits = permits.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            match suite {
                Suite::Kubectl(b) => kubectl::run(&env, b).await,
                Suite::KubeRs => kubers::run(&env).await,
                Suite::Python => python::run(&env).await,
                Suite::Knative => knative::run(&env).await,
                Suite::Hpa => hpa::run(&env).await,
                Suite::Admission => admission::run(&env).await,
                Suite::Workflows => workflows::run(&env).await,
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r {
            env.report
                .fail("(suite)", &format!("a suite panicked: {e}"));
        }
    }

    let verdicts = env.report.verdicts();
    let count = |v: Verdict| verdicts.iter().filter(|(_, x)| *x == v).count();
    let (passed, failed, known) = (
        count(Verdict::Passed),
        count(Verdict::Failed),
        count(Verdict::Known),
    );
    drop(tmp);
    println!(
        "# {} cases in {:.1} s{}",
        verdicts.len(),
        started.elapsed().as_secs_f64(),
        if known > 0 {
            format!("; {known} known failures (XFAIL) not counted below")
        } else {
            String::new()
        }
    );
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
