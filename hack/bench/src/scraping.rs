//! `minik8s-bench metrics`: what being monitored costs the API. The create load of
//! `minik8s-bench api` (ConfigMaps over raw HTTP/2, one client, then many) against fresh
//! servers left alone and scraped the way Prometheus scrapes them (`GET /metrics` every
//! `--scrape-interval`), alternating which goes first each round so drift on the machine
//! falls on both. Instrumentation itself is always on; this measures what reading it adds.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use http::{Method, StatusCode};
use tokio::sync::watch;

use crate::api::{
    Op, admin_client, cm_path, configmap_json, drive, resolve_server_bin, wait_ready,
};
use crate::h2::H2;
use crate::proc::Server;
use crate::stats::{Samples, num};

const NS: &str = "bench";
const MODES: [&str; 2] = ["not scraped", "scraped"];

#[derive(clap::Args, Clone, Debug)]
pub struct MetricsArgs {
    /// The minik8s binary (default: `minik8s` next to this binary).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Rounds; each starts one fresh server per mode.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Seconds between scrapes of `/metrics` (Prometheus's `scrape_interval`).
    #[arg(long, default_value_t = 5)]
    scrape_interval: u64,
    /// Sequential creates with one client.
    #[arg(long, default_value_t = 15_000)]
    creates_single: usize,
    /// Creates with `--clients` concurrent clients.
    #[arg(long, default_value_t = 120_000)]
    creates_concurrent: usize,
    #[arg(long, default_value_t = 64)]
    clients: usize,
}

/// Creates per second of each phase, and the scrapes made meanwhile.
struct Figures {
    phases: Vec<(String, f64)>,
    scrapes: Samples,
    scrape_bytes: usize,
}

pub async fn run(args: MetricsArgs) -> anyhow::Result<()> {
    let bin = resolve_server_bin(&args.server_bin)?;
    let mut by_mode: Vec<Vec<Figures>> = vec![Vec::new(), Vec::new()];
    for round in 0..args.rounds.max(1) {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for m in order {
            eprintln!("[round {}] {}", round + 1, MODES[m]);
            let scrape = (m == 1).then(|| Duration::from_secs(args.scrape_interval.max(1)));
            by_mode[m].push(run_mode(&args, &bin, scrape).await?);
        }
    }
    print(&args, &by_mode);
    Ok(())
}

fn mean(rounds: &[Figures], phase: usize) -> f64 {
    rounds.iter().map(|f| f.phases[phase].1).sum::<f64>() / rounds.len().max(1) as f64
}

fn print(args: &MetricsArgs, by_mode: &[Vec<Figures>]) {
    println!(
        "\n## Cost of scraping /metrics every {} s (ConfigMap creates, sqlite store, raw HTTP/2, mean of {} rounds)\n",
        args.scrape_interval,
        args.rounds.max(1)
    );
    println!("| phase | not scraped creates/s | scraped creates/s | scraped / not scraped |");
    println!("|---|---|---|---|");
    let phases = by_mode[0].first().map_or(0, |f| f.phases.len());
    for p in 0..phases {
        let name = &by_mode[0][0].phases[p].0;
        let (quiet, scraped) = (mean(&by_mode[0], p), mean(&by_mode[1], p));
        println!(
            "| {name} | {} | {} | {:.3} |",
            num(quiet),
            num(scraped),
            scraped / quiet
        );
    }
    let mut all = Samples::default();
    let mut bytes = 0;
    for f in &by_mode[1] {
        all.extend(f.scrapes.clone());
        bytes = bytes.max(f.scrape_bytes);
    }
    if !all.is_empty() {
        println!(
            "\nscrapes under load: {}, duration p50 {} ms, p99 {} ms; largest exposition {} KiB",
            all.len(),
            num(all.p50()),
            num(all.p99()),
            num(bytes as f64 / 1024.0)
        );
    }
    for (m, rounds) in by_mode.iter().enumerate() {
        for (r, f) in rounds.iter().enumerate() {
            let line: Vec<String> = f
                .phases
                .iter()
                .map(|(n, v)| format!("{n} {}", num(*v)))
                .collect();
            eprintln!("{} round {}: {}", MODES[m], r + 1, line.join(", "));
        }
    }
}

/// Scrapes `/metrics` every `every` until `stop` changes; returns the scrapes' durations
/// and the largest body.
async fn scraper(
    h2: H2,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<(Samples, usize)> {
    let mut samples = Samples::default();
    let mut largest = 0;
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let t = Instant::now();
                let body = h2.expect(Method::GET, "/metrics", Bytes::new(), StatusCode::OK).await?;
                samples.push(t.elapsed());
                largest = largest.max(body.len());
            }
            _ = stop.changed() => return Ok((samples, largest)),
        }
    }
}

async fn run_mode(
    args: &MetricsArgs,
    bin: &std::path::Path,
    scrape: Option<Duration>,
) -> anyhow::Result<Figures> {
    let mut server = Server::start(bin, false)?;
    server.wait_for_kubeconfig(Duration::from_secs(60)).await?;
    let client = admin_client(&server).await?;
    wait_ready(&client, &mut server).await?;
    let h2 = H2::connect(&server.kubeconfig, 1).await?;
    h2.expect(
        Method::POST,
        "/api/v1/namespaces",
        Bytes::from(serde_json::json!({"metadata": {"name": NS}}).to_string()),
        StatusCode::CREATED,
    )
    .await?;
    let creates = |offset: usize| -> Op {
        let h2 = h2.clone();
        Arc::new(move |k| {
            let h2 = h2.clone();
            async move {
                h2.expect(
                    Method::POST,
                    &cm_path(NS),
                    configmap_json(&format!("cm-{}", offset + k)),
                    StatusCode::CREATED,
                )
                .await?;
                Ok(())
            }
            .boxed()
        })
    };
    drive(100, 1, creates(1_000_000)).await?;

    // Prometheus scrapes on a connection of its own.
    let (stop, stopped) = watch::channel(false);
    let scraper = match scrape {
        Some(every) => {
            let own = H2::connect(&server.kubeconfig, 1).await?;
            Some(tokio::spawn(scraper(own, every, stopped)))
        }
        None => None,
    };
    let mut phases = Vec::new();
    let (wall, _) = drive(args.creates_single, 1, creates(0)).await?;
    phases.push((
        "creates, 1 client".to_string(),
        args.creates_single as f64 / wall.as_secs_f64(),
    ));
    let (wall, _) = drive(
        args.creates_concurrent,
        args.clients,
        creates(args.creates_single),
    )
    .await?;
    phases.push((
        format!("creates, {} clients", args.clients),
        args.creates_concurrent as f64 / wall.as_secs_f64(),
    ));
    stop.send(true)?;
    let (scrapes, scrape_bytes) = match scraper {
        Some(task) => task.await??,
        None => (Samples::default(), 0),
    };
    for (name, v) in &phases {
        eprintln!("  {name}: {}/s", num(*v));
    }
    if !scrapes.is_empty() {
        eprintln!(
            "  {} scrapes, p50 {} ms, {} KiB",
            scrapes.len(),
            num(scrapes.p50()),
            num(scrape_bytes as f64 / 1024.0)
        );
    }
    drop(server);
    Ok(Figures {
        phases,
        scrapes,
        scrape_bytes,
    })
}
