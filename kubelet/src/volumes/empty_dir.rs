//! emptyDir: a directory of the pod (mode 0777), on the node's disk or, with `medium: Memory`,
//! on a tmpfs mounted there (sized as upstream's calculateEmptyDirMemorySize). Secret,
//! downwardAPI and projected volumes sit on such a tmpfs too; configMap on a disk one.

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use nix::mount::{MsFlags, mount};

use minik8s_api::quantity::Quantity as Exact;

use super::util::{is_mount_point, make_dir_all, path_error, set_volume_ownership};

pub(crate) const PLUGIN: &str = "kubernetes.io~empty-dir";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Medium {
    Disk,
    Memory,
}

pub(crate) fn medium(source: &EmptyDirVolumeSource) -> Result<Medium, String> {
    match source.medium.as_deref().unwrap_or("") {
        "" => Ok(Medium::Disk),
        "Memory" => Ok(Medium::Memory),
        m if m.starts_with("HugePages") => Err(format!(
            "emptyDir medium {m:?} is not supported by this kubelet"
        )),
        m => Err(format!("unknown storage medium {m:?}")),
    }
}

/// Upstream's setupDir: the directory exists with mode 0777 whatever the umask. Returns whether
/// it was created now.
pub(crate) fn setup_dir(dir: &Path) -> Result<bool, String> {
    let existed = dir.is_dir();
    make_dir_all(dir, 0o777).map_err(|e| path_error("mkdir", dir, &e))?;
    Ok(!existed)
}

/// A tmpfs mounted on `dir` (created 0777 first), `size=<bytes>` when `size > 0`. Idempotent:
/// a directory that is already a mount point is left alone. Returns whether it mounted now.
pub(crate) fn setup_tmpfs(dir: &Path, size: i128) -> Result<bool, String> {
    setup_dir(dir)?;
    let canonical = dir
        .canonicalize()
        .map_err(|e| path_error("stat", dir, &e))?;
    if is_mount_point(&canonical).map_err(|e| format!("reading the mount table: {e}"))? {
        return Ok(false);
    }
    let options = (size > 0).then(|| format!("size={size}"));
    mount(
        Some("tmpfs"),
        &canonical,
        Some("tmpfs"),
        MsFlags::empty(),
        options.as_deref(),
    )
    .map_err(|e| {
        format!(
            "mount failed: {e}\nMounting command: mount\nMounting arguments: -t tmpfs{} tmpfs {}",
            options
                .as_deref()
                .map(|o| format!(" -o {o}"))
                .unwrap_or_default(),
            canonical.display()
        )
    })?;
    tracing::debug!(dir = %canonical.display(), size, "mounted tmpfs");
    Ok(true)
}

fn memory_limit(c: &Container) -> Option<i128> {
    c.resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")
        .and_then(|q| Exact::parse(&q.0))
        .map(|q| q.value())
        .filter(|v| *v > 0)
}

/// The pod's memory limit as its cgroup gets it: known only when every app container has one;
/// the larger of their sum and the largest init container limit, plus the pod overhead.
pub(crate) fn pod_memory_limit(pod: &Pod) -> Option<i128> {
    let spec = pod.spec.as_ref()?;
    let mut sum = 0i128;
    for c in &spec.containers {
        sum += memory_limit(c)?;
    }
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .filter_map(memory_limit)
        .max()
        .unwrap_or(0);
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get("memory"))
        .and_then(|q| Exact::parse(&q.0))
        .map(|q| q.value())
        .unwrap_or(0);
    Some(sum.max(init) + overhead)
}

/// Upstream's calculateEmptyDirMemorySize: the node's allocatable memory, lowered to the pod's
/// memory limit and then to the volume's sizeLimit when those are set and smaller.
pub(crate) fn memory_size(node_memory: i128, pod: &Pod, size_limit: Option<&Quantity>) -> i128 {
    let mut size = node_memory;
    if let Some(limit) = pod_memory_limit(pod)
        && limit > 0
        && limit <= size
    {
        size = limit;
    }
    if let Some(limit) = size_limit
        .and_then(|q| Exact::parse(&q.0))
        .map(|q| q.value())
        && limit > 0
        && limit <= size
    {
        size = limit;
    }
    size
}

/// Sets up an emptyDir volume at `dir`; fsGroup ownership is applied when it is new. Without
/// `mounts`, a memory medium is a plain directory too.
pub(crate) fn setup(
    dir: &Path,
    source: &EmptyDirVolumeSource,
    pod: &Pod,
    node_memory: i128,
    fs_group: Option<i64>,
    mounts: bool,
) -> Result<(), String> {
    let created = match medium(source)? {
        Medium::Disk => setup_dir(dir)?,
        Medium::Memory if !mounts => setup_dir(dir)?,
        Medium::Memory => setup_tmpfs(
            dir,
            memory_size(node_memory, pod, source.size_limit.as_ref()),
        )?,
    };
    if created && let Some(gid) = fs_group {
        set_volume_ownership(dir, gid, false).map_err(|e| path_error("chown", dir, &e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": containers}
        }))
        .unwrap()
    }

    #[test]
    fn directory_is_0777() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        assert!(setup_dir(&dir).unwrap());
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o777);
        assert!(!setup_dir(&dir).unwrap());
    }

    #[test]
    fn media() {
        let src = |m: &str| EmptyDirVolumeSource {
            medium: Some(m.into()),
            ..Default::default()
        };
        assert_eq!(medium(&src("")), Ok(Medium::Disk));
        assert_eq!(medium(&src("Memory")), Ok(Medium::Memory));
        assert!(medium(&src("HugePages-2Mi")).is_err());
        assert_eq!(
            medium(&src("Floppy")),
            Err("unknown storage medium \"Floppy\"".into())
        );
    }

    #[test]
    fn tmpfs_size_is_the_smallest_limit() {
        let gi = 1i128 << 30;
        let limited = pod(serde_json::json!([
            {"name": "a", "resources": {"limits": {"memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"memory": "512Mi"}}}
        ]));
        let unlimited = pod(serde_json::json!([
            {"name": "a", "resources": {"limits": {"memory": "1Gi"}}},
            {"name": "b"}
        ]));
        assert_eq!(pod_memory_limit(&limited), Some(gi + gi / 2));
        assert_eq!(pod_memory_limit(&unlimited), None);
        assert_eq!(memory_size(8 * gi, &unlimited, None), 8 * gi);
        assert_eq!(memory_size(8 * gi, &limited, None), gi + gi / 2);
        assert_eq!(
            memory_size(8 * gi, &limited, Some(&Quantity("64Mi".into()))),
            64 << 20
        );
        // A sizeLimit above what the pod may use does not raise it.
        assert_eq!(
            memory_size(8 * gi, &limited, Some(&Quantity("4Gi".into()))),
            gi + gi / 2
        );
        assert_eq!(memory_size(gi, &limited, None), gi);
    }
}
