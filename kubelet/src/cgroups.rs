//! Pod-level cgroups (cgroup v1, cgroupfs layout) that the kubelet creates and removes itself:
//! containerd puts each container under its pod's cgroup but never removes the pod's. The
//! containers' usage is read here too ([`usage`]): the files answer at once whatever load the
//! runtime is under.

use std::path::{Path, PathBuf};

const CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "memory",
    "pids",
    "cpuset",
    "blkio",
    "freezer",
    "devices",
    "hugetlb",
    "perf_event",
    "net_cls",
    "net_prio",
    "systemd",
];

/// Every place the cgroup of the pod with `uid` may be under `cgroup_root`, one per QoS class
/// (Guaranteed pods sit directly under the root; see `pod::spec::pod_cgroup`): for finding or
/// removing it when the class it was made under is not at hand.
pub fn pod_cgroup_candidates(cgroup_root: &str, uid: &str) -> impl Iterator<Item = String> {
    let root = cgroup_root.trim_end_matches('/').to_string();
    let uid = uid.replace('-', "_");
    ["", "burstable/", "besteffort/"]
        .into_iter()
        .map(move |qos| format!("{root}/{qos}pod{uid}"))
}

/// The pod's directories under every mounted controller.
fn dirs(root: &Path, cgroup: &str) -> Vec<PathBuf> {
    CONTROLLERS
        .iter()
        .map(|c| root.join(c))
        .filter(|d| d.is_dir())
        .map(|d| d.join(cgroup.trim_start_matches('/')))
        .collect()
}

/// Creates the pod cgroup and sets pod-wide limits (memory limit when every container has
/// one; cpu shares from requests).
pub fn create(
    root: &Path,
    cgroup: &str,
    memory_limit: Option<u64>,
    cpu_shares: u64,
) -> std::io::Result<()> {
    for dir in dirs(root, cgroup) {
        if dir.starts_with(root.join("cpuset")) {
            // cpuset children need cpus and mems before tasks can join; runc fills them in.
            continue;
        }
        std::fs::create_dir_all(&dir)?;
    }
    let cpu = root.join("cpu").join(cgroup.trim_start_matches('/'));
    if cpu.is_dir() {
        let _ = std::fs::write(cpu.join("cpu.shares"), cpu_shares.max(2).to_string());
    }
    if let Some(limit) = memory_limit {
        let mem = root.join("memory").join(cgroup.trim_start_matches('/'));
        if mem.is_dir() {
            let _ = std::fs::write(mem.join("memory.limit_in_bytes"), limit.to_string());
        }
    }
    Ok(())
}

fn remove_tree(dir: &Path) -> std::io::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    // cgroup directories are removed with rmdir even though they list files.
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes the pod cgroup (after its containers are gone).
pub fn remove(root: &Path, cgroup: &str) -> std::io::Result<()> {
    let mut first_error = None;
    for dir in dirs(root, cgroup) {
        if let Err(e) = remove_tree(&dir) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// What a cgroup has used: cumulative CPU time and the memory working set (usage less the
/// inactive page cache, as cAdvisor and containerd count it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub cpu_ns: u64,
    /// CPU time in user and in kernel mode (`cpuacct.stat`, USER_HZ ticks), in nanoseconds.
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub memory_usage: u64,
    pub working_set: u64,
    pub rss: Option<u64>,
    /// Page cache.
    pub cache: Option<u64>,
}

/// Nanoseconds in one USER_HZ tick (100 per second on Linux).
const NS_PER_TICK: u64 = 10_000_000;

/// `key value` lines (memory.stat, cpuacct.stat): the value of `name`.
fn stat_field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse::<u64>().ok()).flatten()
    })
}

/// Reads a cgroup's usage from the `cpuacct` and `memory` hierarchies under `root`; `None`
/// when either is missing (the container is gone).
pub fn usage(root: &Path, cgroup: &str) -> Option<Usage> {
    let rel = cgroup.trim_start_matches('/');
    let number =
        |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let cpuacct = root.join("cpuacct").join(rel);
    let cpu_ns = number(cpuacct.join("cpuacct.usage"))?;
    let cpu_stat = std::fs::read_to_string(cpuacct.join("cpuacct.stat")).unwrap_or_default();
    let memory = root.join("memory").join(rel);
    let memory_usage = number(memory.join("memory.usage_in_bytes"))?;
    let stat = std::fs::read_to_string(memory.join("memory.stat")).unwrap_or_default();
    let field = |name: &str| stat_field(&stat, name);
    let inactive = field("total_inactive_file").unwrap_or(0);
    Some(Usage {
        cpu_ns,
        cpu_user_ns: stat_field(&cpu_stat, "user").map(|t| t * NS_PER_TICK),
        cpu_system_ns: stat_field(&cpu_stat, "system").map(|t| t * NS_PER_TICK),
        memory_usage,
        working_set: memory_usage.saturating_sub(inactive),
        rss: field("total_rss"),
        cache: field("total_cache"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_cpuacct_and_memory() {
        let root = tempfile::tempdir().unwrap();
        let cg = "kubepods/burstable/poda/c1";
        let cpu = root.path().join("cpuacct").join(cg);
        let mem = root.path().join("memory").join(cg);
        assert_eq!(usage(root.path(), cg), None);
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::write(cpu.join("cpuacct.usage"), "1500000000\n").unwrap();
        assert_eq!(usage(root.path(), cg), None);
        std::fs::write(mem.join("memory.usage_in_bytes"), "10485760\n").unwrap();
        std::fs::write(
            mem.join("memory.stat"),
            "cache 4096\nrss 100\ninactive_file 7\ntotal_rss 8388608\ntotal_inactive_file 2097152\n",
        )
        .unwrap();
        std::fs::write(cpu.join("cpuacct.stat"), "user 120\nsystem 30\n").unwrap();
        let u = usage(root.path(), &format!("/{cg}")).unwrap();
        assert_eq!(u.cpu_ns, 1_500_000_000);
        assert_eq!(
            (u.cpu_user_ns, u.cpu_system_ns),
            (Some(1_200_000_000), Some(300_000_000))
        );
        assert_eq!(u.cache, None);
        assert_eq!(u.memory_usage, 10 * 1024 * 1024);
        assert_eq!(u.working_set, 8 * 1024 * 1024);
        assert_eq!(u.rss, Some(8 * 1024 * 1024));
        // More inactive cache than usage (a race between the two reads): zero, not a wrap.
        std::fs::write(mem.join("memory.stat"), "total_inactive_file 20971520\n").unwrap();
        assert_eq!(usage(root.path(), cg).unwrap().working_set, 0);
    }
}
