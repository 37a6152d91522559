//! `deploy` is `kubectl apply` of a Function built from flags: the spec is exactly what the
//! flags say (a flag left out is a field left out, as in a manifest), and the metadata of an
//! existing Function (labels, annotations, owners others set) is kept. By default it waits
//! for the new generation to be Ready, because a deploy whose revision cannot start (a
//! syntax error, a missing wheel) should fail where the author is looking.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{ArgAction, Args, ValueEnum};
use knative_lite::function::{Function, FunctionSpec, PYTHON3, Scaling};
use knative_lite::serving::Condition;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::wait::await_condition;

use crate::client::{ClientArgs, is_reason};

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// The Function's name.
    pub name: String,
    /// The Python module to serve.
    #[arg(long, value_name = "FILE")]
    pub from_file: PathBuf,
    /// The function of the module that requests call (default `handle`).
    #[arg(long, value_name = "NAME")]
    pub handler: Option<String>,
    /// A requirements.txt to install before the function first runs on a node.
    #[arg(long, value_name = "FILE")]
    pub requirements: Option<PathBuf>,
    /// The fewest pods (0 lets the function scale to zero).
    #[arg(long, value_name = "N")]
    pub min: Option<i32>,
    /// The most pods.
    #[arg(long, value_name = "N")]
    pub max: Option<i32>,
    /// The target per pod, of --metric.
    #[arg(long, value_name = "N")]
    pub target: Option<i64>,
    /// What the autoscaler counts.
    #[arg(long, value_enum)]
    pub metric: Option<Metric>,
    /// Wait until the Function is Ready (`--wait=false` to return at once).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub wait: bool,
    /// How long to wait for Ready.
    #[arg(long, default_value = "120s", value_parser = crate::parse_duration)]
    pub timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Metric {
    Concurrency,
    Rps,
}

impl Metric {
    fn as_str(self) -> &'static str {
        match self {
            Metric::Concurrency => "concurrency",
            Metric::Rps => "rps",
        }
    }
}

pub async fn run(cluster: &ClientArgs, args: DeployArgs) -> anyhow::Result<()> {
    let source = read(&args.from_file)?;
    let requirements = args.requirements.as_deref().map(read).transpose()?;
    let spec = spec_from(&args, source, requirements)?;
    let cluster = cluster.connect().await?;
    let api: Api<Function> = Api::namespaced(cluster.client, &cluster.namespace);
    let verb = apply(&api, &args.name, spec).await?;
    println!("function.functions.minik8s.io/{} {verb}", args.name);
    if args.wait {
        wait_ready(api, &args.name, args.timeout).await?;
    }
    Ok(())
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The spec the flags describe.
fn spec_from(
    args: &DeployArgs,
    source: String,
    requirements: Option<String>,
) -> anyhow::Result<FunctionSpec> {
    if let (Some(min), Some(max)) = (args.min, args.max)
        && min > max
    {
        bail!("--min {min} is more than --max {max}");
    }
    if args.min.is_some_and(|n| n < 0) || args.max.is_some_and(|n| n < 0) {
        bail!("--min and --max cannot be negative");
    }
    if args.target.is_some_and(|n| n <= 0) {
        bail!("--target must be positive");
    }
    let scaling = Scaling {
        metric: args.metric.map(|m| m.as_str().to_owned()),
        target: args.target,
        min_scale: args.min,
        max_scale: args.max,
    };
    Ok(FunctionSpec {
        runtime: Some(PYTHON3.to_owned()),
        source: Some(source),
        source_from: None,
        handler: args.handler.clone(),
        requirements,
        scaling: (scaling != Scaling::default()).then_some(scaling),
    })
}

/// Creates the Function, or replaces the spec of the one there; a write that raced another
/// (409) is read and tried again.
async fn apply(
    api: &Api<Function>,
    name: &str,
    spec: FunctionSpec,
) -> anyhow::Result<&'static str> {
    const ATTEMPTS: usize = 5;
    let params = PostParams::default();
    for attempt in 1..=ATTEMPTS {
        let last = attempt == ATTEMPTS;
        let result = match api.get_opt(name).await? {
            None => {
                let function = Function {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        ..ObjectMeta::default()
                    },
                    spec: spec.clone(),
                    status: None,
                };
                match api.create(&params, &function).await {
                    Err(e) if !last && is_reason(&e, "AlreadyExists") => continue,
                    result => result.map(|_| "created"),
                }
            }
            Some(mut function) => {
                function.spec = spec.clone();
                match api.replace(name, &params, &function).await {
                    Err(e) if !last && (is_reason(&e, "Conflict") || is_reason(&e, "NotFound")) => {
                        continue;
                    }
                    result => result.map(|_| "configured"),
                }
            }
        };
        return Ok(result?);
    }
    unreachable!("the last attempt returns")
}

/// The Function's `Ready` condition.
pub fn ready_condition(function: &Function) -> Option<&Condition> {
    function
        .status
        .as_ref()?
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Whether the controller has seen the Function's current spec and decided (Ready is True
/// or False, not Unknown).
fn settled(function: &Function) -> bool {
    let observed = function
        .status
        .as_ref()
        .and_then(|s| s.status.observed_generation);
    let current = function.metadata.generation;
    let seen = match (observed, current) {
        (Some(observed), Some(current)) => observed >= current,
        (Some(_), None) => true,
        (None, _) => false,
    };
    seen && ready_condition(function).is_some_and(|c| c.status == "True" || c.status == "False")
}

async fn wait_ready(api: Api<Function>, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let cond = |f: Option<&Function>| f.is_none_or(settled);
    let function = match tokio::time::timeout(timeout, await_condition(api, name, cond)).await {
        Err(_) => bail!(
            "timed out after {}s waiting for function {name} to become Ready",
            timeout.as_secs_f64()
        ),
        Ok(result) => result.with_context(|| format!("watching function {name}"))?,
    };
    let Some(function) = function else {
        bail!("function {name} was deleted while waiting for it to become Ready");
    };
    match ready_condition(&function) {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => bail!(
            "function {name} is not Ready: {}: {}",
            c.reason.as_deref().unwrap_or("Unknown"),
            c.message.as_deref().unwrap_or("")
        ),
        None => bail!("function {name} has no Ready condition"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use knative_lite::function::FunctionStatus;
    use knative_lite::serving::Status;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: DeployArgs,
    }

    fn args(extra: &[&str]) -> DeployArgs {
        let argv = ["deploy", "hello", "--from-file", "h.py"]
            .iter()
            .chain(extra);
        Cmd::try_parse_from(argv).unwrap().args
    }

    #[test]
    fn spec_without_scaling_flags() {
        let spec = spec_from(&args(&[]), "def handle(x): return x".into(), None).unwrap();
        assert_eq!(spec.runtime.as_deref(), Some("python3"));
        assert_eq!(spec.source.as_deref(), Some("def handle(x): return x"));
        assert_eq!(spec.handler, None);
        assert_eq!(spec.requirements, None);
        assert_eq!(spec.scaling, None);
        let a = args(&[]);
        assert!(a.wait);
        assert_eq!(a.timeout, Duration::from_secs(120));
    }

    #[test]
    fn spec_with_flags() {
        let a = args(&[
            "--handler",
            "main",
            "--min",
            "1",
            "--max",
            "3",
            "--target",
            "10",
            "--metric",
            "rps",
            "--wait=false",
            "--timeout",
            "30s",
        ]);
        assert!(!a.wait);
        assert_eq!(a.timeout, Duration::from_secs(30));
        let spec = spec_from(&a, "src".into(), Some("numpy\n".into())).unwrap();
        assert_eq!(spec.handler.as_deref(), Some("main"));
        assert_eq!(spec.requirements.as_deref(), Some("numpy\n"));
        let scaling = spec.scaling.unwrap();
        assert_eq!(scaling.metric.as_deref(), Some("rps"));
        assert_eq!(scaling.target, Some(10));
        assert_eq!((scaling.min_scale, scaling.max_scale), (Some(1), Some(3)));
        let json =
            serde_json::to_value(spec_from(&args(&["--max", "2"]), "s".into(), None).unwrap())
                .unwrap();
        assert_eq!(json["scaling"], serde_json::json!({"maxScale": 2}));
    }

    #[test]
    fn bad_scaling_flags() {
        assert!(spec_from(&args(&["--min", "3", "--max", "1"]), "s".into(), None).is_err());
        assert!(spec_from(&args(&["--target", "0"]), "s".into(), None).is_err());
        assert!(Cmd::try_parse_from(["d", "x", "--from-file", "f", "--metric", "cpu"]).is_err());
    }

    #[test]
    fn missing_file_names_it() {
        let err = read(Path::new("/nonexistent/handler.py")).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            "reading /nonexistent/handler.py: No such file or directory (os error 2)"
        );
    }

    fn function(generation: i64, observed: Option<i64>, ready: Option<&str>) -> Function {
        let mut f = Function::new("hello", FunctionSpec::default());
        f.metadata.generation = Some(generation);
        f.status = Some(FunctionStatus {
            status: Status {
                observed_generation: observed,
                conditions: ready
                    .map(|s| Condition {
                        type_: "Ready".into(),
                        status: s.into(),
                        ..Condition::default()
                    })
                    .into_iter()
                    .collect(),
            },
            ..FunctionStatus::default()
        });
        f
    }

    #[test]
    fn settles_on_current_generation_only() {
        assert!(settled(&function(2, Some(2), Some("True"))));
        assert!(settled(&function(2, Some(2), Some("False"))));
        assert!(!settled(&function(2, Some(1), Some("True"))));
        assert!(!settled(&function(2, Some(2), Some("Unknown"))));
        assert!(!settled(&function(2, None, None)));
    }
}
