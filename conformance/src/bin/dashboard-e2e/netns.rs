//! The browser runs in a network namespace of its own, with nothing but a loopback device.
//! Chromium aborts every request in flight (`ERR_NETWORK_CHANGED`) whenever an address of
//! the machine changes, and a node adds one (an IPv6 link-local address of a pod's veth) for
//! every pod it starts; in a namespace of its own it sees none of them. It also cannot reach
//! anything beyond the cluster's API server: the only way out is this relay.
//!
//! Inside (this binary again, under `unshare --net`): the API server's port on loopback,
//! relayed through a Unix socket in the shared filesystem to the real server outside, and
//! Chromium's DevTools port, offered outside the same way.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::process::{Child, Command};

/// The Unix socket inside connections to the API server go through.
pub const API_SOCKET: &str = "api.sock";
/// The Unix socket that reaches Chromium's DevTools endpoint.
pub const DEVTOOLS_SOCKET: &str = "devtools.sock";
/// Written once Chromium listens: the path of its browser target.
pub const DEVTOOLS_READY: &str = "devtools";

#[derive(clap::Args)]
pub struct InsideArgs {
    /// The directory shared with the test: sockets, Chromium's profile.
    #[arg(long)]
    dir: PathBuf,
    /// The API server's port, served on this namespace's loopback.
    #[arg(long)]
    port: u16,
    #[arg(long)]
    chromium: String,
    /// Chromium's standard error goes here.
    #[arg(long)]
    log: PathBuf,
}

/// Joins each connection accepted on a Unix socket to a new one to `target` (`host:port`).
fn unix_to_tcp(listener: UnixListener, target: String) {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

/// Joins each connection accepted on a TCP port to a new one to the Unix socket `target`.
fn tcp_to_unix(listener: TcpListener, target: PathBuf) {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = UnixStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

/// Relays `dir`/[`API_SOCKET`] to the API server at `server` (`host:port`), outside.
pub fn serve_api(dir: &Path, server: String) -> anyhow::Result<()> {
    unix_to_tcp(UnixListener::bind(dir.join(API_SOCKET))?, server);
    Ok(())
}

/// Chromium writes the port it picked (`--remote-debugging-port=0`) and the browser
/// target's path into this file of its profile once it listens.
async fn devtools_address(profile: &Path, child: &mut Child) -> anyhow::Result<(u16, String)> {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(Ok(port)), Some(path)) = (lines.next().map(str::parse), lines.next()) {
                return Ok((port, path.to_owned()));
            }
        }
        if let Some(status) = child.try_wait()? {
            bail!("chromium exited before it listened: {status}");
        }
        if Instant::now() > deadline {
            bail!("chromium did not write {} within 30 s", file.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}

/// The namespace's side: runs until the test closes this process's standard input (or
/// goes away), then stops Chromium.
pub async fn inside(args: InsideArgs) -> anyhow::Result<()> {
    let up = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .await
        .context("running ip")?;
    ensure!(up.success(), "ip link set lo up: {up}");
    let api = TcpListener::bind(("127.0.0.1", args.port)).await?;
    tcp_to_unix(api, args.dir.join(API_SOCKET));

    let profile = args.dir.join("profile");
    let log = std::fs::File::create(&args.log)
        .with_context(|| format!("creating {}", args.log.display()))?;
    let mut chromium = Command::new(&args.chromium)
        .args([
            "--headless=new",
            "--remote-debugging-port=0",
            "--remote-debugging-address=127.0.0.1",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-breakpad",
            "--metrics-recording-only",
            // The page is the test's own API server, whose CA the browser cannot be given.
            "--ignore-certificate-errors",
            "--hide-scrollbars",
            "--window-size=1440,900",
        ])
        // As root there is no user namespace sandbox to drop into.
        .args(if is_root() {
            &["--no-sandbox"][..]
        } else {
            &[][..]
        })
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        // A group of its own, so that its helpers (zygote, renderers) go with it.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", args.chromium))?;
    let (port, path) = devtools_address(&profile, &mut chromium).await?;
    let devtools = UnixListener::bind(args.dir.join(DEVTOOLS_SOCKET))?;
    unix_to_tcp(devtools, format!("127.0.0.1:{port}"));
    let ready = args.dir.join(DEVTOOLS_READY);
    std::fs::write(ready.with_extension("tmp"), &path)?;
    std::fs::rename(ready.with_extension("tmp"), &ready)?;

    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    let closed = async {
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::select! {
        () = closed => {}
        status = chromium.wait() => bail!("chromium exited: {}", status?),
    }
    if let Some(pid) = chromium.id() {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status()
            .await;
    }
    chromium.wait().await?;
    Ok(())
}
