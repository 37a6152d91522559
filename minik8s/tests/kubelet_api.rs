//! End to end through the kubelet's API: a whole `minik8s server` (API server, private
//! containerd, kubelet) on loopback ports and a bridge of its own, pods on its node, and then
//! logs (tail, follow, previous), exec, attach and port-forward with kube-rs, and stock
//! kubectl's `logs`, `exec`, `cp` both ways and `port-forward` (then curl). Needs root,
//! containerd, runc and busybox-static; without root it says so and passes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{AttachParams, DeleteParams, ListParams, LogParams, PostParams};
use serde_json::json;
use testkit::{eventually, free_port, kube_client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The binary under test; `MINIK8S_BIN` overrides it (a copy made while others build into the
/// same target directory).
fn binary() -> PathBuf {
    std::env::var_os("MINIK8S_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_minik8s")))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// A node of its own: the server process, its data directory and bridge; everything is
/// removed on drop, whatever failed.
struct Cluster {
    child: Option<Child>,
    dir: tempfile::TempDir,
    bridge: String,
    node: String,
    port: u16,
}

impl Cluster {
    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let images = dir.path().join("images");
        let built = Command::new(binary())
            .args(["image", "build", "--out"])
            .arg(&images)
            .args(["--busybox", "/bin/busybox", "pause", "busybox"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(built.success(), "building the images failed");
        let port = free_port();
        let kubelet_port = free_port();
        // A pod range, bridge and node name of its own, so that it shares the machine with
        // other nodes: routes go to this bridge only for this range.
        let net = 200 + kubelet_port % 50;
        let cidr = format!("10.244.{net}.0/24");
        let bridge = format!("m8se{kubelet_port}");
        let node = format!("e2e-{kubelet_port}");
        let child = Command::new(binary())
            .args(["server", "--data-dir"])
            .arg(dir.path())
            .args(["--secure-port", &port.to_string()])
            .args(["--bind-address", "127.0.0.1"])
            .args(["--node-ip", "127.0.0.1"])
            .args(["--node-name", &node])
            .args(["--kubelet-port", &kubelet_port.to_string()])
            .args(["--kubelet-address", "127.0.0.1"])
            .args(["--bridge", &bridge])
            .args(["--pod-cidr", &cidr, "--cluster-cidr", &cidr])
            .arg("--disable-ingress")
            .args(["--service-cluster-ip-range", &cidr])
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start minik8s");
        Cluster {
            child: Some(child),
            dir,
            bridge,
            node,
            port,
        }
    }

    async fn client(&self) -> kube::Client {
        eventually(Duration::from_secs(60), "the server to answer", || async {
            let client = kube_client(&self.kubeconfig()).await.ok()?;
            client.apiserver_version().await.ok()?;
            Some(client)
        })
        .await
    }

    /// Runs stock kubectl against the cluster.
    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        let home = self.dir.path().join("home");
        let _ = std::fs::create_dir_all(&home);
        Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .env("HOME", &home)
            .output()
            .expect("running kubectl")
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Mount points under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut out: Vec<PathBuf> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(PathBuf::from))
        .filter(|p| p.starts_with(&dir))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// Processes started to serve containers of the containerd at `socket`.
fn shims_of(socket: &Path) -> Vec<u32> {
    let needle = format!("-address\0{}\0", socket.display());
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes every pod through the API and waits, with a watch per pod, until they are gone:
/// the kubelet removes a pod's containers before it lets the API forget it. Returns the UIDs
/// of the pods, or `None` when the API failed or a pod outlived a minute.
async fn delete_pods(kubeconfig: &Path) -> Option<Vec<String>> {
    use kube::runtime::wait::{await_condition, conditions};
    let client = kube_client(kubeconfig).await.ok()?;
    let list = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    let mut waits = Vec::new();
    let mut uids = Vec::new();
    for p in list.items {
        let (Some(name), Some(uid)) = (p.metadata.name.clone(), p.metadata.uid.clone()) else {
            continue;
        };
        let ns: Api<Pod> = Api::namespaced(
            client.clone(),
            p.metadata.namespace.as_deref().unwrap_or("default"),
        );
        if p.metadata.deletion_timestamp.is_none() {
            let params = DeleteParams {
                grace_period_seconds: Some(1),
                ..Default::default()
            };
            let _ = ns.delete(&name, &params).await;
        }
        waits.push(async move { await_condition(ns, &name, conditions::is_deleted(&uid)).await });
        uids.push(p.metadata.uid.unwrap_or_default());
    }
    let all_gone = futures::future::join_all(waits);
    let done = tokio::time::timeout(Duration::from_secs(60), all_gone)
        .await
        .ok()?;
    done.into_iter().all(|r| r.is_ok()).then_some(uids)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let kubeconfig = self.kubeconfig();
        let dir = self.dir.path().to_path_buf();
        let pid = child.id();
        // Its own thread and runtime: this may run while a test's runtime unwinds.
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let uids = rt.block_on(delete_pods(&kubeconfig));
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            // Wait for the exit on a thread of its own, up to 30 s, then kill.
            let (exited, wait) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                let _ = child.wait();
                let _ = exited.send(());
            });
            if wait.recv_timeout(Duration::from_secs(30)).is_err() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            let _ = waiter.join();
            let mut uids = uids.unwrap_or_default();
            let ctd = dir.join("containerd");
            if !shims_of(&ctd.join("containerd.sock")).is_empty() {
                // Containers outlived the kubelet: stop them with containerd's help.
                use minik8s_kubelet::containerd::{Containerd, ContainerdConfig};
                use minik8s_kubelet::runtime::{CriRuntime, Runtime};
                rt.block_on(async {
                    let Ok(c) =
                        Containerd::start(ContainerdConfig::new(&ctd), Duration::from_secs(30))
                            .await
                    else {
                        return;
                    };
                    if let Ok(cri) = CriRuntime::connect(&c.socket()).await {
                        for s in cri.list_pod_sandboxes().await.unwrap_or_default() {
                            uids.extend(s.metadata.map(|m| m.uid));
                        }
                    }
                    c.shutdown().await;
                });
            }
            // Pod cgroups the kubelet made for these pods only: others share /kubepods.
            for uid in uids {
                let uid = uid.replace('-', "_");
                for qos in ["", "besteffort/", "burstable/"] {
                    let _ = minik8s_kubelet::cgroups::remove(
                        Path::new("/sys/fs/cgroup"),
                        &format!("/kubepods/{qos}pod{uid}"),
                    );
                }
            }
        });
        let _ = cleanup.join();
        for m in mounts_under(self.dir.path()) {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
    }
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    eventually(
        Duration::from_secs(60),
        &format!("{name} to run"),
        || async {
            let p = pods.get(name).await.ok()?;
            let statuses = p.status.as_ref()?.container_statuses.clone()?;
            statuses
                .iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
                .then_some(p)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_exec_attach_and_port_forward() {
    if !is_root() {
        eprintln!("skipping: containers need root");
        return;
    }
    for bin in ["/usr/bin/containerd", "/usr/sbin/runc", "/bin/busybox"] {
        assert!(
            Path::new(bin).exists(),
            "{bin} is missing: run hack/lib.sh install_packages"
        );
    }
    testkit::init_tracing();
    let cluster = Cluster::start();
    let client = cluster.client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(Duration::from_secs(60), "the node to be ready", || async {
        let n = nodes.get(&cluster.node).await.ok()?;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let node = cluster.node.clone();
    pods.create(
        &PostParams::default(),
        &pod(json!({
            "metadata": {"name": "web"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [
                {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c",
                    "echo started; echo to-stderr >&2; i=0; while true; i=$((i+1)); do echo tick $i; sleep 1; done"]},
                {"name": "httpd", "image": "busybox:1.36", "command": ["sh", "-c",
                    "mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www"]}
            ]}
        })),
    )
    .await
    .unwrap();
    // Runs once, then again and stays: `--previous` shows the first run.
    pods.create(
        &PostParams::default(),
        &pod(json!({
            "metadata": {"name": "again"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "state", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "busybox:1.36",
                    "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                    "command": ["sh", "-c",
                        "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; echo run $n; if [ $n -ge 2 ]; then exec sleep 3600; fi; exit 1"]}]}
        })),
    )
    .await
    .unwrap();
    // Prints three lines and ends: a followed log ends with it.
    pods.create(
        &PostParams::default(),
        &pod(json!({
            "metadata": {"name": "short"},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox:1.36", "command": ["sh", "-c",
                    "for i in 1 2 3; do echo line $i; sleep 1; done"]}]}
        })),
    )
    .await
    .unwrap();
    running(&pods, "web").await;

    // ---- logs with kube-rs ----
    let main = |lp: LogParams| LogParams {
        container: Some("main".into()),
        ..lp
    };
    let all = eventually(Duration::from_secs(20), "a few ticks", || async {
        match pods.logs("web", &main(LogParams::default())).await {
            Ok(l) => l.contains("tick 4").then_some(l),
            Err(e) => {
                eprintln!("logs: {e}");
                None
            }
        }
    })
    .await;
    // stdout and stderr are separate pipes that the shim reads concurrently, so
    // only the order within one stream is defined.
    let stdout: Vec<&str> = all.lines().filter(|l| *l != "to-stderr").collect();
    assert_eq!(stdout.first(), Some(&"started"), "{all:?}");
    assert_eq!(stdout.get(1), Some(&"tick 1"), "{all:?}");
    assert!(
        all.contains("to-stderr\n"),
        "stderr is interleaved: {all:?}"
    );
    let tail = pods
        .logs(
            "web",
            &main(LogParams {
                tail_lines: Some(1),
                timestamps: true,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    assert_eq!(tail.lines().count(), 1, "{tail:?}");
    let (ts, text) = tail.trim_end().split_once(' ').unwrap();
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{tail:?}");
    assert!(text.starts_with("tick "), "{tail:?}");
    let limited = pods
        .logs(
            "web",
            &main(LogParams {
                limit_bytes: Some(4),
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    // The first 4 bytes of the log, of whichever stream reached it first.
    assert_eq!(limited, all[..4], "{all:?}");
    assert!(["star", "to-s"].contains(&limited.as_str()), "{limited:?}");
    let recent = pods
        .logs(
            "web",
            &main(LogParams {
                since_seconds: Some(1),
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    assert!(
        !recent.contains("started") && recent.contains("tick "),
        "{recent:?}"
    );
    {
        let stream = pods
            .log_stream(
                "web",
                &main(LogParams {
                    follow: true,
                    tail_lines: Some(0),
                    ..Default::default()
                }),
            )
            .await
            .unwrap();
        let mut lines = stream.lines();
        // New lines arrive as they are written.
        let first = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let n = |l: &str| l.strip_prefix("tick ").unwrap().parse::<u32>().unwrap();
        assert_eq!(n(&second), n(&first) + 1);
    }
    // A followed log ends when its container does.
    {
        let stream = eventually(Duration::from_secs(30), "short's log", || async {
            pods.log_stream(
                "short",
                &LogParams {
                    follow: true,
                    ..Default::default()
                },
            )
            .await
            .ok()
        })
        .await;
        let lines: Vec<String> = tokio::time::timeout(
            Duration::from_secs(30),
            stream.lines().try_collect::<Vec<_>>(),
        )
        .await
        .expect("the followed log of a finished container ends")
        .unwrap();
        assert_eq!(lines, ["line 1", "line 2", "line 3"]);
    }
    // After a restart: the current run and the previous one.
    eventually(Duration::from_secs(60), "a restarted container", || async {
        let p = pods.get("again").await.ok()?;
        let cs = p.status?.container_statuses?.into_iter().next()?;
        (cs.restart_count >= 1 && cs.state?.running.is_some()).then_some(())
    })
    .await;
    let now = pods.logs("again", &LogParams::default()).await.unwrap();
    assert_eq!(now, "run 2\n");
    let before = pods
        .logs(
            "again",
            &LogParams {
                previous: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(before, "run 1\n");

    // ---- exec and attach with kube-rs (WebSocket) ----
    let mut p = pods
        .exec(
            "web",
            ["sh", "-c", "echo out; echo err >&2; exit 3"],
            &AttachParams::default().container("main"),
        )
        .await
        .unwrap();
    let mut stdout = p.stdout().unwrap();
    let mut stderr = p.stderr().unwrap();
    let status = p.take_status().unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    stdout.read_to_string(&mut out).await.unwrap();
    stderr.read_to_string(&mut err).await.unwrap();
    let status = status.await.expect("an exit status");
    p.join().await.unwrap();
    assert_eq!((out.as_str(), err.as_str()), ("out\n", "err\n"));
    assert_eq!(status.status.as_deref(), Some("Failure"), "{status:?}");
    assert_eq!(
        status.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{status:?}"
    );
    let code = status
        .details
        .and_then(|d| d.causes)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
        })
        .and_then(|c| c.message);
    assert_eq!(code.as_deref(), Some("3"));
    // stdin reaches the command; a clean exit says Success.
    let mut p = pods
        .exec(
            "web",
            ["head", "-c", "5"],
            &AttachParams::default()
                .container("main")
                .stdin(true)
                .stderr(false),
        )
        .await
        .unwrap();
    let mut stdin = p.stdin().unwrap();
    let mut stdout = p.stdout().unwrap();
    let status = p.take_status().unwrap();
    stdin.write_all(b"hello world").await.unwrap();
    stdin.flush().await.unwrap();
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "hello");
    assert_eq!(
        status.await.and_then(|s| s.status).as_deref(),
        Some("Success")
    );
    drop(stdin);
    p.join().await.unwrap();
    // attach: what the container writes from now on.
    let mut p = pods
        .attach(
            "web",
            &AttachParams::default().container("main").stderr(false),
        )
        .await
        .unwrap();
    let mut stdout = p.stdout().unwrap();
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), stdout.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("tick "),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    p.abort();

    // ---- port-forward with kube-rs ----
    let mut pf = pods.portforward("web", &[8080]).await.unwrap();
    let mut conn = pf.take_stream(8080).unwrap();
    conn.write_all(b"GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut resp = String::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut resp))
        .await
        .unwrap()
        .unwrap();
    assert!(
        resp.starts_with("HTTP/1.") && resp.lines().next().unwrap().ends_with(" 200 OK"),
        "{resp:?}"
    );
    assert!(resp.ends_with("hello-from-httpd\n"), "{resp:?}");
    drop(conn);
    pf.abort();

    // ---- stock kubectl ----
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("kubectl is not installed: skipping the kubectl half");
        return;
    }
    let out = cluster.kubectl_ok(&["logs", "web", "-c", "main", "--tail=2"]);
    assert_eq!(out.lines().count(), 2, "{out:?}");
    assert!(out.lines().all(|l| l.starts_with("tick ")), "{out:?}");
    assert_eq!(
        cluster.kubectl_ok(&["logs", "again", "--previous"]),
        "run 1\n"
    );
    let bad = cluster.kubectl(&["logs", "web", "-c", "nope"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("container nope is not valid for pod web"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert_eq!(
        cluster.kubectl_ok(&["exec", "web", "-c", "main", "--", "echo", "hi"]),
        "hi\n"
    );
    let failed = cluster.kubectl(&["exec", "web", "-c", "main", "--", "sh", "-c", "exit 7"]);
    assert_eq!(failed.status.code(), Some(7));
    // cp both ways (tar over exec, stdin and stdout).
    let local = cluster.dir.path().join("payload.bin");
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&local, &payload).unwrap();
    cluster.kubectl_ok(&[
        "cp",
        &local.to_string_lossy(),
        "web:/tmp/payload.bin",
        "-c",
        "main",
    ]);
    let sum = cluster.kubectl_ok(&[
        "exec",
        "web",
        "-c",
        "main",
        "--",
        "wc",
        "-c",
        "/tmp/payload.bin",
    ]);
    assert!(sum.starts_with("300000 "), "{sum:?}");
    let back = cluster.dir.path().join("back.bin");
    cluster.kubectl_ok(&[
        "cp",
        "web:/tmp/payload.bin",
        &back.to_string_lossy(),
        "-c",
        "main",
    ]);
    assert_eq!(std::fs::read(&back).unwrap(), payload);
    // port-forward, then curl through it.
    let local_port = free_port();
    let home = cluster.dir.path().join("home");
    let mut pf = Command::new("kubectl")
        .args([
            "port-forward",
            "pod/web",
            &format!("{local_port}:8080"),
            "--address",
            "127.0.0.1",
        ])
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(pf.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("Forwarding from 127.0.0.1:"), "{first:?}");
    let curl = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .arg(format!("http://127.0.0.1:{local_port}/index.html"))
        .output()
        .unwrap();
    let _ = pf.kill();
    let _ = pf.wait();
    assert_eq!(
        String::from_utf8_lossy(&curl.stdout),
        "hello-from-httpd\n",
        "{}",
        String::from_utf8_lossy(&curl.stderr)
    );
    // The kubelet's API through nodes/proxy.
    let health = cluster.kubectl_ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/healthz", cluster.node),
    ]);
    assert_eq!(health, "ok");
    let summary = cluster.kubectl_ok(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{}/proxy/stats/summary", cluster.node),
    ]);
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let web = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "web")
        .expect("web in the summary");
    assert!(web["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0);
    assert!(web["memory"]["workingSetBytes"].as_u64().unwrap() > 0);
    let _ = cluster.port;
}
