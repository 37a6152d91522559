//! The server under test as a child process, and what `/proc` says about processes.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tempfile::TempDir;
use testkit::Etcd;

/// A `minik8s server` process on a loopback port with a data dir of its own, and its etcd
/// for the etcd backend; both are killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: TempDir,
    pub kubeconfig: PathBuf,
    _etcd: Option<Etcd>,
    pub etcd_pid: Option<u32>,
    /// When the server process was spawned.
    pub spawned: Instant,
}

impl Server {
    pub fn start(bin: &Path, etcd: bool) -> anyhow::Result<Server> {
        Self::start_with(bin, etcd, &[])
    }

    /// [`Server::start`] with more flags for `minik8s server`.
    pub fn start_with(bin: &Path, etcd: bool, extra: &[&str]) -> anyhow::Result<Server> {
        let etcd = if etcd {
            Some(Etcd::start().context("starting etcd")?)
        } else {
            None
        };
        let etcd_pid = etcd.as_ref().and_then(|e| find_etcd_pid(&e.endpoint));
        let dir = tempfile::Builder::new()
            .prefix("minik8s-bench.")
            .tempdir()?;
        let port = testkit::free_port();
        let log = File::create(dir.path().join("server.log"))?;
        let mut cmd = Command::new(bin);
        cmd.arg("server")
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--secure-port", &port.to_string()])
            .args(["--bind-address", "127.0.0.1"])
            // The API alone: no node agent competing for the CPU.
            .arg("--disable-agent")
            // Pod ranges for 16,384 nodes (the default /16 has 256): the scale benchmark's
            // hollow nodes each get one, as kubemark clusters are sized.
            .args(["--cluster-cidr", "100.64.0.0/10"])
            // The production default log level, whatever the caller's environment says.
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(e) = &etcd {
            cmd.args(["--etcd-servers", &e.endpoint]);
        }
        cmd.args(extra);
        let spawned = Instant::now();
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Server {
            child,
            port,
            kubeconfig: dir.path().join("admin.kubeconfig"),
            dir,
            _etcd: etcd,
            etcd_pid,
            spawned,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the process has exited, with the end of its log.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let log =
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!("the server exited ({status}); log:\n{}", tail.join("\n"));
        }
        Ok(())
    }

    /// Waits for the admin kubeconfig to exist (it may not be completely written yet).
    pub async fn wait_for_kubeconfig(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.kubeconfig.exists() {
            self.check_alive()?;
            if Instant::now() > deadline {
                bail!("no {} after {timeout:?}", self.kubeconfig.display());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The etcd whose command line listens on `endpoint` (testkit does not expose its pid).
fn find_etcd_pid(endpoint: &str) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_etcd = args
            .first()
            .is_some_and(|a| a.ends_with(b"/etcd") || *a == b"etcd");
        if is_etcd && args.contains(&endpoint.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// Resident memory of a process (VmRSS), in MiB.
pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS")?;
    let kib: f64 = line
        .split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()?;
    Ok(kib / 1024.0)
}

/// User plus system CPU time a process has used so far ("self" for this one).
pub fn cpu_time(pid: &str) -> Duration {
    // Clock ticks are 100 per second on every Linux this runs on (CONFIG_HZ aside, USER_HZ).
    const TICKS: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    let Some((_, after)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command name: state is field 3 of the line, utime 14 and stime 15.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    Duration::from_secs_f64(ticks / TICKS)
}

/// CPU time of the server, its etcd and this process, to tell where a phase's CPU went.
#[derive(Clone, Copy, Debug)]
pub struct CpuMark {
    at: Instant,
    machine: Duration,
    server: Duration,
    etcd: Duration,
    client: Duration,
}

impl CpuMark {
    pub fn now(server: &Server) -> CpuMark {
        CpuMark {
            at: Instant::now(),
            machine: machine_busy(),
            server: cpu_time(&server.pid().to_string()),
            etcd: server
                .etcd_pid
                .map(|p| cpu_time(&p.to_string()))
                .unwrap_or_default(),
            client: cpu_time("self"),
        }
    }

    /// CPU use since `self` in percent of one core: (server, etcd, client, everything else
    /// on the machine).
    pub fn since(&self, server: &Server) -> (f64, f64, f64, f64) {
        let now = CpuMark::now(server);
        let wall = now.at.duration_since(self.at).as_secs_f64().max(1e-9);
        let pct = |a: Duration, b: Duration| (a.saturating_sub(b)).as_secs_f64() / wall * 100.0;
        let ours = (now.server + now.etcd + now.client)
            .saturating_sub(self.server + self.etcd + self.client);
        let machine = now.machine.saturating_sub(self.machine);
        (
            pct(now.server, self.server),
            pct(now.etcd, self.etcd),
            pct(now.client, self.client),
            pct(machine, ours),
        )
    }
}

/// CPU time the whole machine has been busy (not idle, not waiting for I/O).
fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return Duration::ZERO;
    };
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is within user already).
    let busy: f64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Duration::from_secs_f64(busy / 100.0)
}

/// Established TCP connections accepted on loopback port `port` (server side).
pub fn established_connections(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && *state == "01" {
                n += 1;
            }
        }
    }
    n
}

/// The file system type a path lives on (the longest mount point that prefixes it).
pub fn fs_type(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((*f.get(1)?, *f.get(2)?, *f.first()?))
        })
        .filter(|(mnt, _, _)| path.starts_with(mnt))
        .max_by_key(|(mnt, _, _)| mnt.len())
        .map(|(mnt, ty, dev)| format!("{ty} ({dev} on {mnt})"))
        .unwrap_or_else(|| "unknown".into())
}

/// Latency of a 4 KiB append plus `fdatasync` in `dir`, `n` times: what one durable commit
/// costs on this disk at the least. Returns the samples.
pub fn fsync_probe(dir: &Path, n: usize) -> anyhow::Result<crate::stats::Samples> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = File::create(&path)?;
    let block = vec![0x5au8; 4096];
    let mut samples = crate::stats::Samples::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        samples.push(t.elapsed());
    }
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(samples)
}
