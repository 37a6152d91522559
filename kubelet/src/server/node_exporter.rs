//! `/metrics/node` (a minik8s path, authorized as `nodes/metrics`): what Prometheus's node
//! exporter reports of a Linux host, under its names, labels and help, read from the same
//! files it reads (`/proc/stat`, `/proc/meminfo`, `/proc/loadavg`, `/proc/net/dev`, the mount
//! table and statvfs), so that node dashboards and alerts work without a node exporter
//! DaemonSet. The CPU, memory and load are the host's; network devices are those of the
//! kubelet's network namespace (a worker node's own, where nodes are namespaces).

use std::path::{Path, PathBuf};

use super::exposition::{Families, Family};

/// Seconds in one USER_HZ tick of /proc/stat (100 per second on Linux).
const TICK: f64 = 0.01;

/// The modes of `node_cpu_seconds_total`, in /proc/stat's column order (guest time is in
/// `node_cpu_guest_seconds_total`).
const CPU_MODES: &[&str] = &[
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

/// /proc/net/dev's columns, as the node exporter names them.
const NET_DEV_FIELDS: [&str; 16] = [
    "receive_bytes",
    "receive_packets",
    "receive_errs",
    "receive_drop",
    "receive_fifo",
    "receive_frame",
    "receive_compressed",
    "receive_multicast",
    "transmit_bytes",
    "transmit_packets",
    "transmit_errs",
    "transmit_drop",
    "transmit_fifo",
    "transmit_colls",
    "transmit_carrier",
    "transmit_compressed",
];

/// One network device's counters from /proc/net/dev (also what cAdvisor reads for a pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetDev {
    pub device: String,
    pub counters: [u64; 16],
}

impl NetDev {
    pub fn receive_bytes(&self) -> u64 {
        self.counters[0]
    }
    pub fn receive_packets(&self) -> u64 {
        self.counters[1]
    }
    pub fn receive_errs(&self) -> u64 {
        self.counters[2]
    }
    pub fn receive_drop(&self) -> u64 {
        self.counters[3]
    }
    pub fn transmit_bytes(&self) -> u64 {
        self.counters[8]
    }
    pub fn transmit_packets(&self) -> u64 {
        self.counters[9]
    }
    pub fn transmit_errs(&self) -> u64 {
        self.counters[10]
    }
    pub fn transmit_drop(&self) -> u64 {
        self.counters[11]
    }
}

/// The devices of a /proc/net/dev.
pub fn parse_net_dev(text: &str) -> Vec<NetDev> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let values: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(NetDev {
                device: name.trim().to_string(),
                counters: values.try_into().ok()?,
            })
        })
        .collect()
}

/// One mounted filesystem, as /proc/mounts lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub device: String,
    pub mountpoint: String,
    pub fstype: String,
    pub read_only: bool,
}

/// /proc/mounts, its `\040`-style escapes undone.
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    let unescape = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let octal = bytes
                .get(i + 1..i + 4)
                .filter(|o| o.iter().all(|d| (b'0'..=b'7').contains(d)))
                .and_then(|o| u8::from_str_radix(std::str::from_utf8(o).ok()?, 8).ok());
            match (bytes[i], octal) {
                (b'\\', Some(b)) => {
                    out.push(b);
                    i += 4;
                }
                (c, _) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let options = f.get(3)?;
            Some(Mount {
                device: unescape(f[0]),
                mountpoint: unescape(f[1]),
                fstype: f[2].to_string(),
                read_only: options.split(',').any(|o| o == "ro"),
            })
        })
        .collect()
}

/// The node exporter's default `--collector.filesystem.fs-types-exclude`.
const EXCLUDED_FS_TYPES: &[&str] = &[
    "autofs",
    "binfmt_misc",
    "bpf",
    "cgroup",
    "cgroup2",
    "configfs",
    "debugfs",
    "devpts",
    "devtmpfs",
    "fusectl",
    "hugetlbfs",
    "iso9660",
    "mqueue",
    "nsfs",
    "overlay",
    "proc",
    "procfs",
    "pstore",
    "rpc_pipefs",
    "securityfs",
    "selinuxfs",
    "squashfs",
    "erofs",
    "sysfs",
    "tracefs",
];

/// Whether `path` is `dir` or below it.
fn under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// Whether the node exporter would report `m`: its default exclusions (`/dev`, `/proc`,
/// `/sys`, `/run/credentials/*`, container storage, pseudo filesystems), plus what
/// kube-prometheus leaves out on Kubernetes nodes: the kubelet's pod volumes
/// (`<kubelet root>/pods/*`) and the runtime's per-container mounts.
pub fn reported(m: &Mount, kubelet_root: &Path) -> bool {
    let pods = kubelet_root.join("pods").to_string_lossy().into_owned();
    let p = m.mountpoint.as_str();
    let excluded_point = ["/dev", "/proc", "/sys"].iter().any(|d| under(p, d))
        || [
            "/run/credentials",
            "/var/lib/docker",
            "/var/lib/containers/storage",
            "/var/lib/kubelet/pods",
            "/run/containerd",
            pods.as_str(),
        ]
        .iter()
        .any(|d| under(p, d) && p != d.trim_end_matches('/'))
        || p.contains("/io.containerd.");
    !excluded_point && !EXCLUDED_FS_TYPES.contains(&m.fstype.as_str())
}

/// statvfs of one filesystem, as the node exporter reports it (in `f_bsize` blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsSize {
    pub size: u64,
    pub free: u64,
    pub avail: u64,
    pub files: u64,
    pub files_free: u64,
}

fn statvfs(path: &Path) -> Option<FsSize> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let bsize = s.block_size() as u64;
    Some(FsSize {
        size: s.blocks() as u64 * bsize,
        free: s.blocks_free() as u64 * bsize,
        avail: s.blocks_available() as u64 * bsize,
        files: s.files() as u64,
        files_free: s.files_free() as u64,
    })
}

/// Where a scrape reads: procfs, and the kubelet's root (whose pod volumes are left out).
pub struct Sources {
    pub proc: PathBuf,
    pub kubelet_root: PathBuf,
}

/// What the collectors that ran report of themselves (`node_scrape_collector_success`).
struct Collectors(Vec<(&'static str, bool)>);

fn cpu_families(stat: &str, out: &mut Families) -> bool {
    let mut seconds = Family::counter(
        "node_cpu_seconds_total",
        "Seconds the CPUs spent in each mode.",
    );
    let mut guest = Family::counter(
        "node_cpu_guest_seconds_total",
        "Seconds the CPUs spent in guests (VMs) for each mode.",
    );
    let mut any = false;
    for line in stat.lines() {
        let mut f = line.split_whitespace();
        let Some(cpu) = f.next().and_then(|c| c.strip_prefix("cpu")) else {
            continue;
        };
        if cpu.is_empty() {
            continue; // the total line
        }
        let v: Vec<f64> = f.filter_map(|x| x.parse::<f64>().ok()).collect();
        for (i, mode) in CPU_MODES.iter().enumerate() {
            if let Some(t) = v.get(i) {
                seconds.sample(&[("cpu", cpu), ("mode", mode)], t * TICK, None);
                any = true;
            }
        }
        for (i, mode) in [(8, "user"), (9, "nice")] {
            if let Some(t) = v.get(i) {
                guest.sample(&[("cpu", cpu), ("mode", mode)], t * TICK, None);
            }
        }
    }
    out.push(seconds);
    out.push(guest);
    any
}

fn stat_families(stat: &str, out: &mut Families) -> bool {
    let field = |key: &str| {
        stat.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
    };
    let mut any = false;
    for (key, name, help, counter) in [
        (
            "btime",
            "node_boot_time_seconds",
            "Node boot time, in unixtime.",
            false,
        ),
        (
            "ctxt",
            "node_context_switches_total",
            "Total number of context switches.",
            true,
        ),
        (
            "processes",
            "node_forks_total",
            "Total number of forks.",
            true,
        ),
        (
            "intr",
            "node_intr_total",
            "Total number of interrupts serviced.",
            true,
        ),
        (
            "procs_running",
            "node_procs_running",
            "Number of processes in runnable state.",
            false,
        ),
        (
            "procs_blocked",
            "node_procs_blocked",
            "Number of processes blocked waiting for I/O to complete.",
            false,
        ),
    ] {
        let mut f = if counter {
            Family::counter(name, help)
        } else {
            Family::gauge(name, help)
        };
        if let Some(v) = field(key) {
            f.sample(&[], v, None);
            any = true;
        }
        out.push(f);
    }
    any
}

/// `node_memory_<field>[_bytes]`: every /proc/meminfo field, `(x)` written `_x`, values in
/// kB as bytes.
fn meminfo_families(meminfo: &str, out: &mut Families) -> bool {
    let mut any = false;
    for line in meminfo.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let Some(value) = words.next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let key = key.replace('(', "_").replace(')', "");
        let (key, value) = match words.next() {
            Some("kB") => (format!("{key}_bytes"), value * 1024.0),
            _ => (key, value),
        };
        let help = format!("Memory information field {key}.");
        let name = format!("node_memory_{key}");
        let mut f = if key.ends_with("_total") {
            Family::counter(&name, &help)
        } else {
            Family::gauge(&name, &help)
        };
        f.sample(&[], value, None);
        out.push(f);
        any = true;
    }
    any
}

fn loadavg_families(loadavg: &str, out: &mut Families) -> bool {
    let v: Vec<f64> = loadavg
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    for (i, (name, help)) in [
        ("node_load1", "1m load average."),
        ("node_load5", "5m load average."),
        ("node_load15", "15m load average."),
    ]
    .into_iter()
    .enumerate()
    {
        let mut f = Family::gauge(name, help);
        if let Some(x) = v.get(i) {
            f.sample(&[], *x, None);
        }
        out.push(f);
    }
    v.len() == 3
}

fn netdev_families(devices: &[NetDev], out: &mut Families) -> bool {
    for (i, field) in NET_DEV_FIELDS.iter().enumerate() {
        let name = format!("node_network_{field}_total");
        let mut f = Family::counter(&name, &format!("Network device statistic {field}."));
        for d in devices {
            f.sample(&[("device", &d.device)], d.counters[i] as f64, None);
        }
        out.push(f);
    }
    !devices.is_empty()
}

/// The filesystem families from mounts and their statvfs (`None`: statvfs failed, the
/// node exporter's `device_error`).
pub fn filesystem_families(mounts: &[(Mount, Option<FsSize>)], out: &mut Families) {
    type Field = fn(&FsSize) -> u64;
    let fields: [(&str, &str, Field); 5] = [
        (
            "node_filesystem_size_bytes",
            "Filesystem size in bytes.",
            |s| s.size,
        ),
        (
            "node_filesystem_free_bytes",
            "Filesystem free space in bytes.",
            |s| s.free,
        ),
        (
            "node_filesystem_avail_bytes",
            "Filesystem space available to non-root users in bytes.",
            |s| s.avail,
        ),
        (
            "node_filesystem_files",
            "Filesystem total file nodes.",
            |s| s.files,
        ),
        (
            "node_filesystem_files_free",
            "Filesystem total free file nodes.",
            |s| s.files_free,
        ),
    ];
    let labels = |m: &Mount| -> [(&'static str, String); 3] {
        [
            ("device", m.device.clone()),
            ("fstype", m.fstype.clone()),
            ("mountpoint", m.mountpoint.clone()),
        ]
    };
    for (name, help, value) in fields {
        let mut f = Family::gauge(name, help);
        for (m, size) in mounts {
            if let Some(size) = size {
                let l = labels(m);
                let refs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
                f.sample(&refs, value(size) as f64, None);
            }
        }
        out.push(f);
    }
    for (name, help, value) in [
        (
            "node_filesystem_readonly",
            "Filesystem read-only status.",
            (|m, _| m.read_only as u8 as f64) as fn(&Mount, &Option<FsSize>) -> f64,
        ),
        (
            "node_filesystem_device_error",
            "Whether an error occurred while getting statistics for the given device.",
            |_, s| s.is_none() as u8 as f64,
        ),
    ] {
        let mut f = Family::gauge(name, help);
        for (m, size) in mounts {
            let l = labels(m);
            let refs: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            f.sample(&refs, value(m, size), None);
        }
        out.push(f);
    }
}

/// Everything, read now (blocking: statvfs of every filesystem).
pub fn collect(sources: &Sources, now: jiff::Timestamp) -> String {
    let read = |p: &str| std::fs::read_to_string(sources.proc.join(p)).unwrap_or_default();
    let mut out = Families::default();
    let mut collectors = Collectors(Vec::new());
    let stat = read("stat");
    collectors.0.push(("cpu", cpu_families(&stat, &mut out)));
    collectors.0.push(("stat", stat_families(&stat, &mut out)));
    collectors
        .0
        .push(("meminfo", meminfo_families(&read("meminfo"), &mut out)));
    collectors
        .0
        .push(("loadavg", loadavg_families(&read("loadavg"), &mut out)));
    collectors.0.push((
        "netdev",
        netdev_families(&parse_net_dev(&read("net/dev")), &mut out),
    ));
    let mounts: Vec<(Mount, Option<FsSize>)> = parse_mounts(&read("self/mounts"))
        .into_iter()
        .filter(|m| reported(m, &sources.kubelet_root))
        .map(|m| {
            let size = statvfs(Path::new(&m.mountpoint));
            (m, size)
        })
        .collect();
    collectors.0.push(("filesystem", !mounts.is_empty()));
    filesystem_families(&mounts, &mut out);
    let mut time = Family::gauge(
        "node_time_seconds",
        "System time in seconds since epoch (1970).",
    );
    time.sample(&[], now.as_millisecond() as f64 / 1000.0, None);
    out.push(time);
    collectors.0.push(("time", true));
    let mut success = Family::gauge(
        "node_scrape_collector_success",
        "node_exporter: Whether a collector succeeded.",
    );
    for (name, ok) in &collectors.0 {
        success.sample(&[("collector", name)], *ok as u8 as f64, None);
    }
    out.push(success);
    out.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  300 20 100 5000 10 1 2 3 0 0\ncpu0 100 10 50 2500 5 1 1 1 7 0\ncpu1 200 10 50 2500 5 0 1 2 0 0\nintr 12345 0 0\nctxt 999\nbtime 1700000000\nprocesses 4242\nprocs_running 3\nprocs_blocked 1\n";
    const MEMINFO: &str = "MemTotal:        2048000 kB\nMemFree:          512000 kB\nMemAvailable:    1024000 kB\nBuffers:           10000 kB\nCached:           300000 kB\nActive(anon):       1000 kB\nHugePages_Total:       0\n";
    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 500 5 1 2 0 0 0 0 700 7 3 4 0 0 0 0\n";

    /// A procfs fixture with these files, its mount table listing `mounts`.
    fn fixture(mounts: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join("net")).unwrap();
        std::fs::create_dir_all(p.join("self")).unwrap();
        for (file, text) in [
            ("stat", STAT),
            ("meminfo", MEMINFO),
            ("loadavg", "0.50 0.25 0.10 2/300 4242\n"),
            ("net/dev", NET_DEV),
            ("self/mounts", mounts),
        ] {
            std::fs::write(p.join(file), text).unwrap();
        }
        dir
    }

    #[test]
    fn node_exporters_names_from_proc() {
        let data = tempfile::tempdir().unwrap();
        let root = data.path().to_string_lossy().to_string();
        let mounts = format!(
            "/dev/sda1 {root} ext4 rw,relatime 0 0\n\
             proc /proc proc rw 0 0\n\
             overlay /run/containerd/x/rootfs overlay rw 0 0\n\
             tmpfs {root}/kubelet/pods/u/volumes/secret tmpfs rw 0 0\n\
             /dev/sdb /mnt/with\\040space ext4 ro 0 0\n"
        );
        let proc = fixture(&mounts);
        let text = collect(
            &Sources {
                proc: proc.path().to_path_buf(),
                kubelet_root: data.path().join("kubelet"),
            },
            "2024-05-01T10:00:00Z".parse().unwrap(),
        );
        let dev = format!("device=\"/dev/sda1\",fstype=\"ext4\",mountpoint=\"{root}\"");
        for line in [
            "node_cpu_seconds_total{cpu=\"0\",mode=\"user\"} 1".to_string(),
            "node_cpu_seconds_total{cpu=\"1\",mode=\"idle\"} 25".into(),
            "node_cpu_seconds_total{cpu=\"1\",mode=\"steal\"} 0.02".into(),
            "node_cpu_guest_seconds_total{cpu=\"0\",mode=\"user\"} 0.07".into(),
            "node_memory_MemTotal_bytes 2097152000".into(),
            "node_memory_MemAvailable_bytes 1048576000".into(),
            "node_memory_MemFree_bytes 524288000".into(),
            "node_memory_Buffers_bytes 10240000".into(),
            "node_memory_Cached_bytes 307200000".into(),
            "node_memory_Active_anon_bytes 1024000".into(),
            "node_memory_HugePages_Total 0".into(),
            "# HELP node_memory_MemTotal_bytes Memory information field MemTotal_bytes.".into(),
            "node_load1 0.5".into(),
            "node_load15 0.1".into(),
            "node_boot_time_seconds 1700000000".into(),
            "node_context_switches_total 999".into(),
            "node_forks_total 4242".into(),
            "node_intr_total 12345".into(),
            "node_procs_running 3".into(),
            "node_time_seconds 1714557600".into(),
            "node_network_receive_bytes_total{device=\"eth0\"} 500".into(),
            "node_network_transmit_bytes_total{device=\"eth0\"} 700".into(),
            "node_network_receive_drop_total{device=\"eth0\"} 2".into(),
            "node_network_receive_bytes_total{device=\"lo\"} 10".into(),
            format!("node_filesystem_readonly{{{dev}}} 0"),
            format!("node_filesystem_device_error{{{dev}}} 0"),
            // Unreadable: an error, and no sizes.
            "node_filesystem_device_error{device=\"/dev/sdb\",fstype=\"ext4\",mountpoint=\"/mnt/with space\"} 1".into(),
            "node_filesystem_readonly{device=\"/dev/sdb\",fstype=\"ext4\",mountpoint=\"/mnt/with space\"} 1".into(),
            "node_scrape_collector_success{collector=\"cpu\"} 1".into(),
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line}\n{text}");
        }
        for fs in ["size", "avail", "free"] {
            let prefix = format!("node_filesystem_{fs}_bytes{{{dev}}} ");
            let v: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("{prefix}\n{text}"))
                .parse()
                .unwrap();
            assert!(v > 0.0, "{prefix}{v}");
        }
        assert!(!text.contains("node_filesystem_size_bytes{device=\"/dev/sdb\""));
        for left_out in ["mountpoint=\"/proc\"", "overlay", "volumes/secret"] {
            assert!(!text.contains(left_out), "{left_out}");
        }
    }

    #[test]
    fn mounts_and_exclusions() {
        let m = parse_mounts("/dev/x /a\\040b ext4 rw,noatime 0 0\nshm /dev/shm tmpfs ro 0 0\n");
        assert_eq!(m[0].mountpoint, "/a b");
        assert!(!m[0].read_only && m[1].read_only);
        let root = Path::new("/var/lib/minik8s/kubelet");
        let mount = |p: &str, t: &str| Mount {
            device: "d".into(),
            mountpoint: p.into(),
            fstype: t.into(),
            read_only: false,
        };
        assert!(reported(&mount("/", "ext4"), root));
        assert!(reported(&mount("/run", "tmpfs"), root));
        assert!(reported(&mount("/var/lib/minik8s/kubelet", "ext4"), root));
        assert!(!reported(&mount("/dev/shm", "tmpfs"), root));
        assert!(!reported(&mount("/sys/fs/cgroup", "tmpfs"), root));
        assert!(!reported(&mount("/run/netns/x", "nsfs"), root));
        assert!(!reported(
            &mount("/var/lib/minik8s/kubelet/pods/u/volumes/x", "tmpfs"),
            root
        ));
        assert!(!reported(
            &mount(
                "/var/lib/minik8s/containerd/state/io.containerd.grpc.v1.cri/sandboxes/x/shm",
                "tmpfs"
            ),
            root
        ));
    }

    /// This machine's /proc: the node's CPU counters are there and move.
    #[test]
    fn the_real_proc() {
        let sources = Sources {
            proc: PathBuf::from("/proc"),
            kubelet_root: PathBuf::from("/var/lib/kubelet"),
        };
        let busy = |text: &str| -> f64 {
            text.lines()
                .filter(|l| {
                    l.starts_with("node_cpu_seconds_total{") && !l.contains("mode=\"idle\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let first = collect(&sources, jiff::Timestamp::now());
        for family in [
            "node_memory_MemTotal_bytes ",
            "node_load1 ",
            "node_boot_time_seconds ",
            "node_network_receive_bytes_total{device=\"lo\"} ",
            "node_filesystem_size_bytes{",
        ] {
            assert!(first.contains(family), "{family}");
        }
        // Burn CPU until the kernel's counters (10 ms ticks) move.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut x = 0u64;
        loop {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
            if busy(&collect(&sources, jiff::Timestamp::now())) > busy(&first) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "CPU seconds did not move"
            );
        }
        std::hint::black_box(x);
    }
}
