//! Workflows on a running cluster (hack/up.sh's), with a warm function (min-scale 1, one
//! pod, so its own call counter sees every call): a 10-Task chain end to end through the
//! gateway's `/workflow/` door against the same 10 calls made in sequence straight through
//! the function gateway (the floor: the functions' own work), the per-transition overhead
//! that leaves, and 100 runs at once: their throughput, and whether any was lost or any
//! Task called twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Namespace;
use knative_lite::function::{Function, FunctionSpec, Scaling};
use knative_lite::workflow::{
    WORKFLOW_LABEL, Workflow, WorkflowRun, WorkflowRunSpec, WorkflowSpec, phase,
};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::stats::Samples;

#[derive(clap::Args, Clone, Debug)]
pub struct WorkflowsArgs {
    /// Admin kubeconfig of the cluster.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Runs of the chain (and sequences of direct calls) measured one after another.
    #[arg(long, default_value_t = 50)]
    samples: usize,
    /// Runs started at once.
    #[arg(long, default_value_t = 100)]
    concurrent: usize,
}

const GATEWAY: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
const CHAIN: usize = 10;

/// Counts its calls per `$.key` and hands its input on; `{"count": key}` reads a count.
const COUNTER: &str = r#"
calls = {}

def handle(event):
    if "count" in event:
        return {"calls": calls.get(event["count"], 0)}
    key = event.get("key", "")
    calls[key] = calls.get(key, 0) + 1
    return event
"#;

type Http = Client<HttpConnector, Full<Bytes>>;

/// Status, JSON body and `X-Workflow-Run` of a POST to the gateway.
async fn post_run(
    http: &Http,
    path: &str,
    body: &Value,
) -> anyhow::Result<(u16, Value, Option<String>)> {
    let req = http::Request::post(format!("http://{GATEWAY}{path}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))?;
    let resp = http
        .request(req)
        .await
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let status = resp.status().as_u16();
    let run = resp
        .headers()
        .get("x-workflow-run")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let bytes = resp.into_body().collect().await?.to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, v, run))
}

async fn post(http: &Http, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
    let (status, v, _) = post_run(http, path, body).await?;
    Ok((status, v))
}

/// A run's own duration (`status.duration`, `1.042s`), start to completion in the controller.
fn run_duration(run: &WorkflowRun) -> Option<Duration> {
    let text = run.status.as_ref()?.duration.as_deref()?;
    let secs: f64 = text.strip_suffix('s')?.parse().ok()?;
    Some(Duration::from_secs_f64(secs))
}

fn chain() -> Value {
    let mut states = serde_json::Map::new();
    for i in 1..=CHAIN {
        let mut s = json!({"Type": "Task", "Resource": "counter"});
        if i == CHAIN {
            s["End"] = json!(true);
        } else {
            s["Next"] = json!(format!("T{}", i + 1));
        }
        states.insert(format!("T{i}"), s);
    }
    json!({"StartAt": "T1", "States": states})
}

pub async fn run(args: WorkflowsArgs) -> anyhow::Result<()> {
    let client = testkit::kube_client(&args.kubeconfig).await?;
    let ns = format!("bench-workflows-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await?;
    let result = measure(&client, &ns, &args).await;
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    result
}

async fn measure(client: &kube::Client, ns: &str, args: &WorkflowsArgs) -> anyhow::Result<()> {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    let http: Http = Client::builder(TokioExecutor::new()).build(c);
    let functions: Api<Function> = Api::namespaced(client.clone(), ns);
    let mut f = Function::new(
        "counter",
        FunctionSpec {
            source: Some(COUNTER.into()),
            scaling: Some(Scaling {
                min_scale: Some(1),
                max_scale: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    f.metadata.namespace = Some(ns.into());
    functions.create(&PostParams::default(), &f).await?;
    let direct = format!("/function/counter.{ns}");
    let deadline = Instant::now() + Duration::from_secs(180);
    while post(&http, &direct, &json!({"key": "warm"}))
        .await
        .map(|r| r.0)
        .unwrap_or(0)
        != 200
    {
        if Instant::now() > deadline {
            bail!("the counter function never answered");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let workflows: Api<Workflow> = Api::namespaced(client.clone(), ns);
    workflows
        .create(
            &PostParams::default(),
            &Workflow::new(
                "chain",
                WorkflowSpec {
                    definition: chain(),
                },
            ),
        )
        .await?;
    let through = format!("/workflow/chain.{ns}?timeout=60");
    // Warm both paths.
    for _ in 0..3 {
        let (code, body) = post(&http, &through, &json!({"key": "warm"})).await?;
        ensure!(code == 200, "a warm-up run answered {code}: {body}");
    }

    let mut direct_seq = Samples::with_capacity(args.samples);
    let mut runs = Samples::with_capacity(args.samples);
    let mut overhead = Samples::with_capacity(args.samples);
    let mut inside = Samples::with_capacity(args.samples);
    let mut inside_overhead = Samples::with_capacity(args.samples);
    let runs_api: Api<WorkflowRun> = Api::namespaced(client.clone(), ns);
    for i in 0..args.samples {
        let input = json!({"key": format!("seq-{i}")});
        let started = Instant::now();
        for _ in 0..CHAIN {
            let (code, _) = post(&http, &direct, &input).await?;
            ensure!(code == 200, "a direct call answered {code}");
        }
        let floor = started.elapsed();
        direct_seq.push(floor);
        let started = Instant::now();
        let (code, body, run) =
            post_run(&http, &through, &json!({"key": format!("wf-{i}")})).await?;
        let took = started.elapsed();
        ensure!(code == 200, "a run answered {code}: {body}");
        runs.push(took);
        overhead.push(took.saturating_sub(floor) / CHAIN as u32);
        let run = runs_api.get(&run.context("no X-Workflow-Run")?).await?;
        let own = run_duration(&run).context("a finished run has a duration")?;
        inside.push(own);
        inside_overhead.push(own.saturating_sub(floor) / CHAIN as u32);
    }
    println!(
        "workflows: a {CHAIN}-Task chain of a warm function, {} runs one at a time",
        args.samples
    );
    println!(
        "  {CHAIN} direct calls in sequence (floor)  p50 {:>8.2} ms  p99 {:>8.2} ms",
        direct_seq.p50(),
        direct_seq.p99()
    );
    println!(
        "  the chain through /workflow/        p50 {:>8.2} ms  p99 {:>8.2} ms  ({:.2}x the floor at p50)",
        runs.p50(),
        runs.p99(),
        runs.p50() / direct_seq.p50()
    );
    println!(
        "  overhead per transition             p50 {:>8.2} ms  p99 {:>8.2} ms  (target: p50 <= 5 ms)",
        overhead.p50(),
        overhead.p99()
    );
    println!(
        "  the run's own duration (controller) p50 {:>8.2} ms  p99 {:>8.2} ms: {:.2} ms p50 per transition over the floor",
        inside.p50(),
        inside.p99(),
        inside_overhead.p50()
    );

    // Runs at once, created through the API and watched to the end.
    let started = Instant::now();
    let mut names = Vec::new();
    for i in 0..args.concurrent {
        let mut run = WorkflowRun::new(
            "",
            WorkflowRunSpec {
                workflow: "chain".into(),
                input: Some(json!({"key": format!("many-{i}")})),
            },
        );
        run.metadata.name = None;
        run.metadata.generate_name = Some("chain-".into());
        run.metadata.labels = Some([(WORKFLOW_LABEL.to_string(), "many".to_string())].into());
        names.push((
            i,
            runs_api
                .create(&PostParams::default(), &run)
                .await?
                .name_any(),
        ));
    }
    let created = started.elapsed();
    let mut done: HashMap<String, WorkflowRun> = HashMap::new();
    let config = watcher::Config::default().labels(&format!("{WORKFLOW_LABEL}=many"));
    let mut stream = Box::pin(watcher(runs_api.clone(), config).applied_objects());
    let limit = tokio::time::sleep(Duration::from_secs(600));
    tokio::pin!(limit);
    while done.len() < args.concurrent {
        tokio::select! {
            item = stream.next() => {
                let run = item.context("watch ended")??;
                if phase::finished(run.status.as_ref().and_then(|s| s.phase.as_deref())) {
                    done.insert(run.name_any(), run);
                }
            }
            _ = &mut limit => bail!("only {} of {} runs ended within 600 s", done.len(), args.concurrent),
        }
    }
    let all = started.elapsed();
    let mut lost = 0;
    let mut duplicated = 0;
    for (i, name) in &names {
        let key = format!("many-{i}");
        let run = &done[name];
        let status = run.status.clone().unwrap_or_default();
        if status.phase.as_deref() != Some(phase::SUCCEEDED)
            || status.output != Some(json!({"key": key}))
        {
            lost += 1;
        }
        let (_, counted) = post(&http, &direct, &json!({"count": key})).await?;
        if counted["calls"] != json!(CHAIN) {
            duplicated += 1;
            eprintln!(
                "  {name}: {} calls of the counter, want {CHAIN}",
                counted["calls"]
            );
        }
    }
    let transitions = (args.concurrent * CHAIN) as f64;
    println!(
        "  {} runs at once: created in {:.2} s, all ended {:.2} s after the first create: {:.1} runs/s, {:.0} transitions/s",
        args.concurrent,
        created.as_secs_f64(),
        all.as_secs_f64(),
        args.concurrent as f64 / all.as_secs_f64(),
        transitions / all.as_secs_f64()
    );
    println!(
        "  lost or wrong runs: {lost}; runs whose Tasks were called other than once each: {duplicated}"
    );
    Ok(())
}
