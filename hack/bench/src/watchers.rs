//! `minik8s-bench watchers`: many concurrent watches of pods on one server while the pods
//! churn. What one watcher costs the server in memory, and how long an update takes to reach
//! every watcher, which is what a watch cache is for. Run it against two builds in one sitting
//! to compare them (`--server-bin`).
//!
//! The watchers are bare HTTP/2 streams (no kube-rs decode per event) so that the client's
//! own work stays small next to the server's: a watcher only scans each line for the
//! sequence number the churn wrote into an annotation.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::FutureExt;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;

use crate::api::{admin_client, all_signalled, drive, resolve_server_bin, wait_ready};
use crate::h2::{H2, tls_connections};
use crate::proc::{CpuMark, Server, rss_mib};
use crate::stats::{Samples, num};

#[derive(clap::Args, Clone, Debug)]
pub struct WatchersArgs {
    /// The minik8s binary (default: `minik8s` next to this binary).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// Pods created before the watchers start, spread over the namespaces.
    #[arg(long, default_value_t = 30_000)]
    pub pods: usize,
    /// Namespaces the pods and the watchers are spread over.
    #[arg(long, default_value_t = 10)]
    pub namespaces: usize,
    /// Concurrent watches; watcher `i` watches the pods of namespace `i % namespaces`.
    #[arg(long, default_value_t = 1_000)]
    pub watchers: usize,
    /// HTTP/2 connections the watches are multiplexed over.
    #[arg(long, default_value_t = 20)]
    pub connections: usize,
    /// Pod updates per second during the churn (a merge patch of one annotation each).
    #[arg(long, default_value_t = 100)]
    pub churn_rate: usize,
    /// Length of the churn in seconds.
    #[arg(long, default_value_t = 20)]
    pub churn_seconds: usize,
}

fn ns_name(i: usize) -> String {
    format!("watch-{i}")
}

/// A pod of about 1.5 KiB of JSON that no scheduler picks up (`schedulerName` names none),
/// so nothing but the churn writes it.
fn pod_json(name: &str) -> Bytes {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "minik8s-bench", "tier": "watchers", "pod-template-hash": "5d8f7c9b6"},
            "annotations": {"bench/seq": "none"}
        },
        "spec": {
            "schedulerName": "minik8s-bench-nobody",
            "containers": [{
                "name": "app",
                "image": "registry.example/minik8s-bench/app:1.0",
                "args": ["--listen", ":8080", "--log-level", "info"],
                "ports": [{"containerPort": 8080, "name": "http"}],
                "env": [
                    {"name": "MODE", "value": "bench"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
            }],
            "terminationGracePeriodSeconds": 5
        }
    });
    Bytes::from(serde_json::to_vec(&pod).expect("a pod serializes"))
}

/// The number after `"bench/seq":"` in a watch event's line, if any.
fn seq_of(line: &[u8]) -> Option<usize> {
    const KEY: &[u8] = b"\"bench/seq\":\"";
    let at = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// HTTP/2 connections for the watches (a stream each), authenticated with the admin cert.
async fn watch_connections(
    kubeconfig: &std::path::Path,
    n: usize,
) -> anyhow::Result<(
    Vec<hyper::client::conn::http2::SendRequest<Empty<Bytes>>>,
    String,
)> {
    let (streams, base) = tls_connections(kubeconfig, n).await?;
    let mut conns = Vec::new();
    for stream in streams {
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(32 << 20)
            .handshake(TokioIo::new(stream))
            .await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        conns.push(send);
    }
    Ok((conns, base))
}

/// What one watcher saw: when it received each churn sequence number, and when it saw the
/// start marker of its namespace.
struct Seen {
    ns: usize,
    at: Vec<(usize, Instant)>,
}

pub async fn run(args: WatchersArgs) -> anyhow::Result<()> {
    let bin = resolve_server_bin(&args.server_bin)?;
    let namespaces = args.namespaces.max(1);
    eprintln!("server binary {}", bin.display());
    let mut server = Server::start(&bin, false)?;
    server.wait_for_kubeconfig(Duration::from_secs(60)).await?;
    let client = admin_client(&server).await?;
    wait_ready(&client, &mut server).await?;
    let h2 = H2::connect(&server.kubeconfig, 4).await?;
    for i in 0..namespaces {
        let body = Bytes::from(serde_json::to_vec(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns_name(i)}}),
        )?);
        h2.expect(
            Method::POST,
            "/api/v1/namespaces",
            body,
            StatusCode::CREATED,
        )
        .await?;
    }

    // --- Seed the pods.
    let pods = args.pods;
    let seed = {
        let h2 = h2.clone();
        Arc::new(move |k: usize| {
            let h2 = h2.clone();
            async move {
                let path = format!("/api/v1/namespaces/{}/pods", ns_name(k % namespaces));
                h2.expect(
                    Method::POST,
                    &path,
                    pod_json(&format!("p-{k}")),
                    StatusCode::CREATED,
                )
                .await?;
                Ok(())
            }
            .boxed()
        }) as crate::api::Op
    };
    let (took, _) = drive(pods, 64, seed).await?;
    eprintln!(
        "seeded {pods} pods in {} namespaces in {:.1} s",
        namespaces,
        took.as_secs_f64()
    );
    let rss_seeded = rss_mib(server.pid())?;

    // --- Open the watches from the current resourceVersion.
    let (_, list) = h2
        .request(
            Method::GET,
            &format!("/api/v1/namespaces/{}/pods?limit=1", ns_name(0)),
            Bytes::new(),
        )
        .await?;
    let list: serde_json::Value = serde_json::from_slice(&list)?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .context("list without resourceVersion")?
        .to_string();
    let (conns, base) = watch_connections(&server.kubeconfig, args.connections).await?;
    let total = args.churn_rate * args.churn_seconds;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let opened = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..args.watchers {
        let ns = w % namespaces;
        let mut send = conns[w % conns.len()].clone();
        let uri = format!(
            "{base}/api/v1/namespaces/{}/pods?watch=true&resourceVersion={rv}&timeoutSeconds=3000",
            ns_name(ns)
        );
        let ready_tx = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            send.ready().await?;
            let req = Request::builder()
                .method(Method::GET)
                .uri(uri)
                .header(http::header::ACCEPT, "application/json")
                .body(Empty::<Bytes>::new())?;
            let resp = send.send_request(req).await?;
            if resp.status() != StatusCode::OK {
                bail!("watch answered {}", resp.status());
            }
            let mut body = resp.into_body();
            let mut seen = Seen {
                ns,
                at: Vec::with_capacity(total / namespaces + 16),
            };
            let mut buf: Vec<u8> = Vec::new();
            let mut ready = false;
            let mut done = 0;
            let want = (0..total).filter(|s| s % namespaces == ns).count();
            while let Some(frame) = body.frame().await {
                let frame = frame?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let now = Instant::now();
                buf.extend_from_slice(&data);
                while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=end).collect();
                    if !ready && line.windows(7).any(|w| w == b"\"ready\"") {
                        ready = true;
                        let _ = ready_tx.send(());
                    }
                    if let Some(s) = seq_of(&line) {
                        seen.at.push((s, now));
                        done += 1;
                    }
                }
                if done >= want && ready {
                    break;
                }
            }
            anyhow::Ok(seen)
        }));
    }
    drop(ready_tx);
    // Every watch is established once it has seen its namespace's marker pod.
    for i in 0..namespaces {
        h2.expect(
            Method::POST,
            &format!("/api/v1/namespaces/{}/pods", ns_name(i)),
            pod_json("ready"),
            StatusCode::CREATED,
        )
        .await?;
    }
    if !all_signalled(&mut ready_rx, args.watchers, Duration::from_secs(120)).await {
        bail!("not every watcher saw its namespace's marker within 120 s");
    }
    let open_took = opened.elapsed();
    let rss_watching = rss_mib(server.pid())?;

    // --- Churn: `churn_rate` merge patches per second, each on its own task so that a slow
    // answer does not slow the rate.
    let cpu = CpuMark::now(&server);
    let mut issued: Vec<Option<Instant>> = vec![None; total];
    let mut ticker =
        tokio::time::interval(Duration::from_secs_f64(1.0 / args.churn_rate.max(1) as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut writes = Vec::with_capacity(total);
    let mut rss_peak = rss_watching;
    let per_ns = pods.div_ceil(namespaces);
    for (s, slot) in issued.iter_mut().enumerate() {
        ticker.tick().await;
        // Sequence s goes to namespace s % namespaces, a different pod each time.
        let ns = s % namespaces;
        let k = ((s / namespaces) % per_ns) * namespaces + ns;
        let path = format!("/api/v1/namespaces/{}/pods/p-{k}", ns_name(ns));
        let body = Bytes::from(format!(
            r#"{{"metadata":{{"annotations":{{"bench/seq":"{s}"}}}}}}"#
        ));
        *slot = Some(Instant::now());
        let h2 = h2.clone();
        writes.push(tokio::spawn(async move {
            let t = Instant::now();
            let (status, _) = h2
                .request_as(Method::PATCH, &path, body, "application/merge-patch+json")
                .await?;
            anyhow::Ok((status, t.elapsed()))
        }));
        if s % args.churn_rate == 0 {
            rss_peak = rss_peak.max(rss_mib(server.pid())?);
        }
    }
    let mut write_lat = Samples::with_capacity(total);
    for w in writes {
        let (status, took) = w.await??;
        if status != StatusCode::OK {
            bail!("a churn patch answered {status}");
        }
        write_lat.push(took);
    }
    let mut lat = Samples::with_capacity(total * args.watchers / namespaces);
    let mut missing = 0usize;
    for t in tasks {
        let seen = tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .context("a watcher did not get every update within 120 s")???;
        let mut got = vec![false; total];
        for (s, at) in seen.at {
            if s < total && !got[s] {
                got[s] = true;
                if let Some(t0) = issued[s] {
                    lat.push(at.saturating_duration_since(t0));
                }
            }
        }
        missing += (0..total)
            .filter(|s| s % namespaces == seen.ns && !got[*s])
            .count();
    }
    let (srv, _, client_cpu, others) = cpu.since(&server);
    rss_peak = rss_peak.max(rss_mib(server.pid())?);
    let rss_after = rss_mib(server.pid())?;

    println!("watchers benchmark ({})", bin.display());
    println!(
        "  {pods} pods in {namespaces} namespaces; {} watchers (watcher i on namespace i % {namespaces}) over {} HTTP/2 connections",
        args.watchers, args.connections
    );
    println!(
        "  server RSS: {} MiB seeded, {} MiB with the watchers open ({} KiB per watcher); peak during the churn {} MiB, after {} MiB",
        num(rss_seeded),
        num(rss_watching),
        num((rss_watching - rss_seeded) * 1024.0 / args.watchers.max(1) as f64),
        num(rss_peak),
        num(rss_after)
    );
    println!(
        "  watches open and receiving after {:.2} s",
        open_took.as_secs_f64()
    );
    println!(
        "  churn: {total} pod patches at {}/s; patch latency p50 {} p99 {} ms",
        args.churn_rate,
        num(write_lat.p50()),
        num(write_lat.p99())
    );
    println!(
        "  delivery (patch issued to a watcher reading the event): {} deliveries, p50 {} p99 {} max {} ms, {missing} missing",
        lat.len(),
        num(lat.p50()),
        num(lat.p99()),
        num(lat.max_ms())
    );
    println!(
        "  CPU during the churn (100% = one core): server {srv:.0}%, bench client {client_cpu:.0}%, other processes {others:.0}%"
    );
    Ok(())
}
