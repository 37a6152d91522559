//! `minik8s-bench authz`: what authorization costs the API. The same load (creates and GETs
//! of ConfigMaps by a ServiceAccount-token client that the `edit` role allows, among a few
//! hundred other bindings) against fresh servers with `--authorization-mode=AlwaysAllow` and
//! with the default `Node,RBAC`, alternating which goes first each round so drift on the
//! machine falls on both. The admin client of the other benchmarks is in `system:masters`,
//! which skips authorization: it would measure nothing here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::FutureExt;
use http::{Method, StatusCode};

use crate::api::{
    Op, admin_client, cm_path, configmap_json, drive, resolve_server_bin, wait_ready,
};
use crate::h2::H2;
use crate::proc::Server;
use crate::stats::num;

const NS: &str = "bench";
const SA: &str = "bench";
const MODES: [&str; 2] = ["AlwaysAllow", "Node,RBAC"];

#[derive(clap::Args, Clone, Debug)]
pub struct AuthzArgs {
    /// The minik8s binary (default: `minik8s` next to this binary).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Rounds; each starts one fresh server per mode.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Sequential creates with one client.
    #[arg(long, default_value_t = 2_000)]
    creates_single: usize,
    /// Creates with `--clients` concurrent clients.
    #[arg(long, default_value_t = 10_000)]
    creates_concurrent: usize,
    /// GETs with one client, then again with `--clients`.
    #[arg(long, default_value_t = 5_000)]
    gets: usize,
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// RoleBindings in the client's namespace and ClusterRoleBindings besides the client's
    /// own (each for another user), so RBAC searches as it would in a used cluster.
    #[arg(long, default_value_t = 200)]
    other_bindings: usize,
}

/// Requests per second of each measured phase, in order.
type Figures = Vec<(String, f64)>;

pub async fn run(args: AuthzArgs) -> anyhow::Result<()> {
    let bin = resolve_server_bin(&args.server_bin)?;
    let mut by_mode: Vec<Vec<Figures>> = vec![Vec::new(); MODES.len()];
    for round in 0..args.rounds.max(1) {
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1]
        } else {
            vec![1, 0]
        };
        for m in order {
            eprintln!("[round {}] --authorization-mode={}", round + 1, MODES[m]);
            let figures = run_mode(&args, &bin, MODES[m])
                .await
                .with_context(|| format!("--authorization-mode={}", MODES[m]))?;
            by_mode[m].push(figures);
        }
    }
    print(&args, &by_mode);
    Ok(())
}

fn mean(rounds: &[Figures], phase: usize) -> f64 {
    rounds.iter().map(|f| f[phase].1).sum::<f64>() / rounds.len().max(1) as f64
}

fn print(args: &AuthzArgs, by_mode: &[Vec<Figures>]) {
    println!(
        "\n## Authorization cost (ServiceAccount-token client allowed by `edit`; {} other RoleBindings and {} other ClusterRoleBindings; mean of {} rounds, sqlite store, raw HTTP/2)\n",
        args.other_bindings,
        args.other_bindings,
        args.rounds.max(1)
    );
    println!("| phase | AlwaysAllow req/s | Node,RBAC req/s | Node,RBAC / AlwaysAllow |");
    println!("|---|---|---|---|");
    let phases = by_mode[0].first().map(|f| f.len()).unwrap_or(0);
    for p in 0..phases {
        let name = &by_mode[0][0][p].0;
        let (allow, rbac) = (mean(&by_mode[0], p), mean(&by_mode[1], p));
        println!(
            "| {name} | {} | {} | {:.3} |",
            num(allow),
            num(rbac),
            rbac / allow
        );
    }
    for (m, rounds) in by_mode.iter().enumerate() {
        for (r, figures) in rounds.iter().enumerate() {
            let line: Vec<String> = figures
                .iter()
                .map(|(n, v)| format!("{n} {}", num(*v)))
                .collect();
            eprintln!("{} round {}: {}", MODES[m], r + 1, line.join(", "));
        }
    }
}

async fn run_mode(args: &AuthzArgs, bin: &std::path::Path, mode: &str) -> anyhow::Result<Figures> {
    let mut server = Server::start_with(bin, false, &["--authorization-mode", mode])?;
    server.wait_for_kubeconfig(Duration::from_secs(60)).await?;
    let client = admin_client(&server).await?;
    wait_ready(&client, &mut server).await?;
    let admin = H2::connect(&server.kubeconfig, 1).await?;
    setup(&admin, args.other_bindings).await?;
    let token = token(&admin).await?;
    let h2 = H2::connect_with_token(&server.kubeconfig, &token, 1).await?;
    // The bindings reach the authorizer's cache through a watch: wait until the client may
    // write, then warm the connection and the code paths.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) = h2
            .request(Method::POST, &cm_path(NS), configmap_json("warm-0"))
            .await?;
        if status == StatusCode::CREATED {
            break;
        }
        if Instant::now() > deadline {
            bail!("the ServiceAccount's creates still answer {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in 1..50 {
        h2.expect(
            Method::POST,
            &cm_path(NS),
            configmap_json(&format!("warm-{i}")),
            StatusCode::CREATED,
        )
        .await?;
    }

    let mut figures = Figures::new();
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
    let (wall, _) = drive(args.creates_single, 1, creates(0)).await?;
    figures.push((
        "creates, 1 client".into(),
        args.creates_single as f64 / wall.as_secs_f64(),
    ));
    let (wall, _) = drive(
        args.creates_concurrent,
        args.clients,
        creates(args.creates_single),
    )
    .await?;
    figures.push((
        format!("creates, {} clients", args.clients),
        args.creates_concurrent as f64 / wall.as_secs_f64(),
    ));
    let stored = args.creates_single + args.creates_concurrent;
    let gets: Op = {
        let h2 = h2.clone();
        Arc::new(move |k| {
            let h2 = h2.clone();
            async move {
                let path = format!("{}/cm-{}", cm_path(NS), k % stored);
                h2.expect(Method::GET, &path, Bytes::new(), StatusCode::OK)
                    .await?;
                Ok(())
            }
            .boxed()
        })
    };
    let (wall, _) = drive(args.gets, 1, gets.clone()).await?;
    figures.push((
        "GETs, 1 client".into(),
        args.gets as f64 / wall.as_secs_f64(),
    ));
    let many = args.gets * 4;
    let (wall, _) = drive(many, args.clients, gets).await?;
    figures.push((
        format!("GETs, {} clients", args.clients),
        many as f64 / wall.as_secs_f64(),
    ));
    for (name, v) in &figures {
        eprintln!("  {mode}: {name}: {}/s", num(*v));
    }
    drop(server);
    Ok(figures)
}

async fn post(admin: &H2, path: &str, body: serde_json::Value) -> anyhow::Result<Bytes> {
    admin
        .expect(
            Method::POST,
            path,
            Bytes::from(body.to_string()),
            StatusCode::CREATED,
        )
        .await
}

/// The namespace, the ServiceAccount bound to `edit` there, and `others` bindings of other
/// users in the namespace and cluster-wide.
async fn setup(admin: &H2, others: usize) -> anyhow::Result<()> {
    post(
        admin,
        "/api/v1/namespaces",
        serde_json::json!({"metadata": {"name": NS}}),
    )
    .await?;
    post(
        admin,
        &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
        serde_json::json!({"metadata": {"name": SA}}),
    )
    .await?;
    let binding = |name: String, role: &str, subject: serde_json::Value| {
        serde_json::json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject],
        })
    };
    let user = |i: usize| serde_json::json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": format!("user-{i}")});
    let rb = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings");
    let crb = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    for i in 0..others {
        post(admin, &rb, binding(format!("other-{i}"), "view", user(i))).await?;
        post(
            admin,
            crb,
            binding(format!("bench-other-{i}"), "view", user(i)),
        )
        .await?;
    }
    post(
        admin,
        &rb,
        binding(
            "bench-edit".into(),
            "edit",
            serde_json::json!({"kind": "ServiceAccount", "name": SA, "namespace": NS}),
        ),
    )
    .await?;
    Ok(())
}

async fn token(admin: &H2) -> anyhow::Result<String> {
    let body = post(
        admin,
        &format!("/api/v1/namespaces/{NS}/serviceaccounts/{SA}/token"),
        serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        }),
    )
    .await?;
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    v["status"]["token"]
        .as_str()
        .map(str::to_string)
        .context("TokenRequest without status.token")
}
