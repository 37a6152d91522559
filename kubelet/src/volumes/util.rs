//! Helpers the plugins share: rounded-up division, the mount table, directory modes,
//! fsGroup ownership (upstream's SetVolumeOwnership) and Go-style error aggregation.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(crate) fn ceil_div(a: i128, b: i128) -> i128 {
    if b == 0 {
        return 0;
    }
    let (a, b) = if b < 0 { (-a, -b) } else { (a, b) };
    -((-a).div_euclid(b))
}

/// Mount points of this mount namespace, from `/proc/self/mountinfo`.
pub(crate) fn mount_points() -> io::Result<Vec<PathBuf>> {
    let table = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .collect())
}

/// Mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the mount holding `path` (canonical) propagates as a shared mount.
pub(crate) fn is_shared(path: &Path) -> io::Result<bool> {
    let table = fs::read_to_string("/proc/self/mountinfo")?;
    let mut best: Option<(usize, bool)> = None;
    for line in table.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(point) = fields.get(4).map(|p| PathBuf::from(unescape_mountinfo(p))) else {
            continue;
        };
        if !path.starts_with(&point) {
            continue;
        }
        let shared = fields[6..]
            .iter()
            .take_while(|f| **f != "-")
            .any(|f| f.starts_with("shared:"));
        let depth = point.components().count();
        // The last of equally deep entries is the one on top.
        if best.is_none_or(|(d, _)| depth >= d) {
            best = Some((depth, shared));
        }
    }
    Ok(best.is_some_and(|(_, shared)| shared))
}

/// Whether `path` (canonical) is a mount point. Bind mounts from the same filesystem are
/// found too, which a device-number comparison would miss.
pub(crate) fn is_mount_point(path: &Path) -> io::Result<bool> {
    Ok(mount_points()?.iter().any(|m| m == path))
}

/// Mount points at or below `dir` (canonical), deepest first.
pub(crate) fn mounts_under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = mount_points()?
        .into_iter()
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    Ok(found)
}

/// Creates `dir` and its missing parents with `mode` (umask notwithstanding for `dir` itself).
pub(crate) fn make_dir_all(dir: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    let meta = fs::metadata(dir)?;
    if meta.permissions().mode() & 0o7777 != mode {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// A random number, without a dependency: std's per-instance hash keys are random.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.finish()
}

/// Upstream's SetVolumeOwnership: every file and directory of the volume gets group `fs_group`,
/// files gain `rw` (`r` for read-only volumes) for owner and group, directories also gain
/// setgid and `x`. Symlinks are re-owned but never chmod-ed (that would follow them).
pub(crate) fn set_volume_ownership(dir: &Path, fs_group: i64, read_only: bool) -> io::Result<()> {
    let gid = u32::try_from(fs_group)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "fsGroup out of range"))?;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path)?;
        if let Err(e) = std::os::unix::fs::lchown(&path, None, Some(gid)) {
            tracing::warn!(path = %path.display(), error = %e, "lchown failed");
        }
        if meta.file_type().is_symlink() {
            continue;
        }
        let mut mask = if read_only { 0o440 } else { 0o660 };
        if meta.is_dir() {
            mask |= 0o2000 | 0o110;
            for entry in fs::read_dir(&path)? {
                let entry = entry?;
                // Never walk into another filesystem mounted inside the volume.
                if entry.metadata().is_ok_and(|m| m.dev() == meta.dev()) {
                    stack.push(entry.path());
                }
            }
        }
        let mode = (meta.mode() & 0o7777) | mask;
        if let Err(e) = fs::set_permissions(&path, fs::Permissions::from_mode(mode)) {
            tracing::warn!(path = %path.display(), error = %e, "chmod failed");
        }
    }
    Ok(())
}

/// [`set_volume_ownership`] unless `policy` is `OnRootMismatch` and the volume's root already
/// has the group, setgid and the group's permissions (upstream's skipPermissionChange).
pub(crate) fn set_volume_ownership_with_policy(
    dir: &Path,
    fs_group: i64,
    read_only: bool,
    policy: Option<&str>,
) -> io::Result<()> {
    if policy == Some("OnRootMismatch") && !requires_permission_change(dir, fs_group, read_only) {
        tracing::debug!(dir = %dir.display(), "volume root already has the fsGroup; skipping ownership change");
        return Ok(());
    }
    set_volume_ownership(dir, fs_group, read_only)
}

/// Upstream's requiresPermissionChange: the root is not a directory of group `fs_group` with
/// setgid and at least the group's permissions.
fn requires_permission_change(dir: &Path, fs_group: i64, read_only: bool) -> bool {
    let Ok(meta) = fs::metadata(dir) else {
        return true;
    };
    if i64::from(meta.gid()) != fs_group || !meta.is_dir() {
        return true;
    }
    let wanted = if read_only { 0o440 } else { 0o660 } | 0o110;
    let mode = meta.mode();
    mode & wanted != wanted || mode & 0o2000 == 0
}

/// Upstream's utilerrors.NewAggregate(...).Error(): one message as is, several in brackets.
pub(crate) fn aggregate(errors: Vec<String>) -> Result<(), String> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// An I/O error as Go prints a `PathError`: `open /x: no such file or directory`.
pub(crate) fn path_error(op: &str, path: &Path, e: &io::Error) -> String {
    let text = match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_lowercase(),
        None => e.to_string(),
    };
    format!("{op} {}: {text}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_root_mismatch_skips_a_volume_whose_root_is_right_already() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let gid = i64::from(fs::metadata(root).unwrap().gid());
        let file = root.join("f");
        fs::write(&file, "x").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(root, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(requires_permission_change(root, gid, false));
        set_volume_ownership_with_policy(root, gid, false, Some("OnRootMismatch")).unwrap();
        assert_eq!(fs::metadata(root).unwrap().mode() & 0o7777, 0o2770);
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o660);
        // The root is right now: files made since are left as they are.
        let later = root.join("later");
        fs::write(&later, "y").unwrap();
        fs::set_permissions(&later, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!requires_permission_change(root, gid, false));
        set_volume_ownership_with_policy(root, gid, false, Some("OnRootMismatch")).unwrap();
        assert_eq!(fs::metadata(&later).unwrap().mode() & 0o777, 0o600);
        // Always (the default) walks the whole volume again.
        set_volume_ownership_with_policy(root, gid, false, None).unwrap();
        assert_eq!(fs::metadata(&later).unwrap().mode() & 0o777, 0o660);
        // Another group is a mismatch.
        assert!(requires_permission_change(root, gid + 1, false));
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/a\040b\134c"), "/a b\\c");
        assert_eq!(unescape_mountinfo(r"/plain\04"), r"/plain\04");
    }

    #[test]
    fn aggregates_as_go() {
        assert_eq!(aggregate(vec![]), Ok(()));
        assert_eq!(aggregate(vec!["a".into()]), Err("a".into()));
        assert_eq!(
            aggregate(vec!["a".into(), "b".into()]),
            Err("[a, b]".into())
        );
    }

    #[test]
    fn go_style_path_errors() {
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(
            path_error("open", Path::new("/x"), &e),
            "open /x: no such file or directory"
        );
    }
}
