//! Pod-level cgroups (cgroup v1, cgroupfs layout) that the kubelet creates and removes itself:
//! containerd puts each container under its pod's cgroup but never removes the pod's.

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
