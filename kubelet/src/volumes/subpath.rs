//! `subPath` and `subPathExpr` mounts without escapes, as upstream's Linux subpath code does
//! them: symlinks in the subpath are resolved once and the result must stay inside the volume;
//! the resolved path is then opened component by component with `openat(O_NOFOLLOW|O_PATH)`,
//! so that nothing swapped in meanwhile (a directory replaced by a symlink) is followed, and
//! the opened file itself (`/proc/self/fd/N`) is bind-mounted at
//! `<pod>/volume-subpaths/<volume>/<container>/<mount index>`. The container gets that bind
//! mount, which pins the checked inode: a later change of the path in the volume cannot
//! redirect it.
//!
//! Races: the symlink resolution (canonicalize) and the open are separate steps. A component
//! turned into a symlink between them fails the O_NOFOLLOW open (an error, never an escape);
//! a directory renamed meanwhile can only be replaced by another one inside the volume, as
//! each step opens relative to an already checked descriptor. As upstream, mount points
//! inside the volume are crossed: only a privileged (Bidirectional) container could make one.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{OFlag, openat};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::{Mode, SFlag, fchmod, fstat, mkdirat};

use super::util::{is_mount_point, make_dir_all};

pub(crate) const SUBPATHS_DIR: &str = "volume-subpaths";

/// Upstream's expansion.Expand as ExpandContainerVolumeMounts uses it: `$(VAR)` from the
/// container's environment, `$$` for `$`; a variable that is unset or empty is an error.
pub(crate) fn expand(expr: &str, env: &BTreeMap<String, String>) -> Result<String, String> {
    let mut missing = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut out = String::with_capacity(expr.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&expr[checkpoint..cursor]);
            let rest = &expr[cursor + 1..];
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match env.get(name).filter(|v| !v.is_empty()) {
                            Some(v) => out.push_str(v),
                            None => {
                                missing.insert(name.to_string());
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // `$` and the next character, kept as they are.
                    let c = rest.chars().next().unwrap_or_default();
                    out.push('$');
                    out.push(c);
                    c.len_utf8()
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < expr.len() {
        out.push_str(&expr[checkpoint..]);
    }
    if !missing.is_empty() {
        return Err(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(out)
}

/// Upstream's ValidatePathNoBacksteps.
pub(crate) fn validate_no_backsteps(path: &str) -> Result<(), String> {
    if path.split('/').any(|p| p == "..") {
        return Err("must not contain '..'".into());
    }
    Ok(())
}

/// The path's elements, without `.` and empty ones (a `..` was refused before).
fn segments(rel: &Path) -> Vec<&std::ffi::OsStr> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn describe(e: nix::Error) -> String {
    e.desc().to_lowercase()
}

/// Upstream's doSafeOpen: opens `path` (inside `base`, both free of symlinks) one element at
/// a time with O_NOFOLLOW, failing on any symlink met on the way.
pub(crate) fn safe_open(path: &Path, base: &Path) -> Result<OwnedFd, String> {
    let rel = path.strip_prefix(base).map_err(|_| {
        format!(
            "path {} is outside of allowed base {}",
            path.display(),
            base.display()
        )
    })?;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut fd = nix::fcntl::open(base, flags, Mode::empty())
        .map_err(|e| format!("cannot open directory {}: {}", base.display(), describe(e)))?;
    let st = fstat(&fd)
        .map_err(|e| format!("error running fstat on {}: {}", base.display(), describe(e)))?;
    if st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits() {
        return Err(format!("unexpected symlink found {}", base.display()));
    }
    let mut current = base.to_path_buf();
    for seg in segments(rel) {
        current.push(seg);
        let child = openat(&fd, seg, flags, Mode::empty())
            .map_err(|e| format!("cannot open {}: {}", current.display(), describe(e)))?;
        let st = fstat(&child).map_err(|e| {
            format!(
                "error running fstat on {}: {}",
                current.display(),
                describe(e)
            )
        })?;
        if st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits() {
            return Err(format!("unexpected symlink found {}", current.display()));
        }
        fd = child;
    }
    Ok(fd)
}

/// Upstream's SafeMakeDir: creates the missing directories of `subdir` inside `base` with
/// mkdirat/openat(O_NOFOLLOW), so none of them can be redirected out of the volume.
pub(crate) fn safe_make_dir(subdir: &str, base: &Path, perm: u32) -> Result<(), String> {
    let base = base
        .canonicalize()
        .map_err(|e| format!("error resolving symlinks in {}: {e}", base.display()))?;
    let segs: Vec<_> = segments(Path::new(subdir))
        .into_iter()
        .map(|s| s.to_owned())
        .collect();
    let full = segs.iter().fold(base.clone(), |p, s| p.join(s));
    if let Ok(meta) = fs::metadata(&full) {
        if meta.is_dir() {
            return Ok(());
        }
        return Err(format!("mkdir {}: not a directory", full.display()));
    }
    // The longest existing prefix (symlinks followed), which must resolve inside the base.
    let mut existing = base.clone();
    let mut to_create = segs.as_slice();
    while let Some((first, rest)) = to_create.split_first() {
        match fs::symlink_metadata(existing.join(first)) {
            Ok(_) => {
                existing.push(first);
                to_create = rest;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(format!("error opening directory {}: {e}", full.display())),
        }
    }
    let real = existing
        .canonicalize()
        .map_err(|e| format!("error opening directory {}: {e}", existing.display()))?;
    if !real.starts_with(&base) {
        return Err(format!(
            "path {} is outside of allowed base {}",
            real.display(),
            base.display()
        ));
    }
    let mut parent = safe_open(&real, &base)?;
    let mut current = real;
    for dir in to_create {
        current.push(dir);
        mkdirat(&parent, dir.as_os_str(), Mode::from_bits_truncate(perm)).map_err(|e| {
            format!(
                "cannot create directory {}: {}",
                current.display(),
                describe(e)
            )
        })?;
        let child = openat(
            &parent,
            dir.as_os_str(),
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open {}: {}", current.display(), describe(e)))?;
        // mkdirat was subject to the umask.
        fchmod(&child, Mode::from_bits_truncate(perm & 0o777))
            .map_err(|e| format!("chmod {:?} failed: {}", current.display(), describe(e)))?;
        parent = child;
    }
    Ok(())
}

/// One subPath mount to prepare.
pub(crate) struct Subpath<'a> {
    pub pod_dir: &'a Path,
    pub volume_name: &'a str,
    pub volume_path: &'a Path,
    pub container_name: &'a str,
    pub index: usize,
    pub sub_path: &'a str,
}

impl Subpath<'_> {
    fn bind_target(&self) -> PathBuf {
        self.pod_dir
            .join(SUBPATHS_DIR)
            .join(self.volume_name)
            .join(self.container_name)
            .join(self.index.to_string())
    }
}

/// Upstream's doBindSubPath: the bind mount a container gets for a subPath; reused when it
/// already holds the same file (a restarted container).
pub(crate) fn prepare(sp: &Subpath<'_>) -> Result<PathBuf, String> {
    let volume_path = sp.volume_path.canonicalize().map_err(|e| {
        format!(
            "error resolving symlinks in {:?}: {e}",
            sp.volume_path.display()
        )
    })?;
    let joined = sp.volume_path.join(sp.sub_path);
    let path = joined
        .canonicalize()
        .map_err(|e| format!("error resolving symlinks in {:?}: {e}", joined.display()))?;
    if !path.starts_with(&volume_path) {
        return Err(format!(
            "subpath {:?} not within volume path {:?}",
            path.display(),
            volume_path.display()
        ));
    }
    let fd = safe_open(&path, &volume_path)
        .map_err(|e| format!("error opening subpath {}: {e}", path.display()))?;
    let st = fstat(&fd).map_err(|e| format!("fstat {}: {}", path.display(), describe(e)))?;
    let is_dir = st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits();

    let target = sp.bind_target();
    if let Some(parent) = target.parent() {
        make_dir_all(parent, 0o750).map_err(|e| format!("mkdir {}: {e}", parent.display()))?;
    }
    if target_is_mount(&target)? {
        let same = fs::metadata(&target)
            .is_ok_and(|m| m.dev() == st.st_dev as u64 && m.ino() == st.st_ino as u64);
        if same {
            tracing::debug!(target = %target.display(), "subpath already bind-mounted");
            return Ok(target);
        }
        umount2(&target, MntFlags::empty())
            .map_err(|e| format!("error unmounting {}: {}", target.display(), describe(e)))?;
    }
    // The target must be of the source's kind: a directory or a file.
    match fs::symlink_metadata(&target) {
        Ok(m) if m.is_dir() == is_dir && !m.file_type().is_symlink() => {}
        Ok(m) => {
            let removed = if m.is_dir() {
                fs::remove_dir(&target)
            } else {
                fs::remove_file(&target)
            };
            removed.map_err(|e| format!("remove {}: {e}", target.display()))?;
            create_target(&target, is_dir)?;
        }
        Err(_) => create_target(&target, is_dir)?,
    }
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    mount(
        Some(source.as_str()),
        &target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| format!("error mounting {}: {}", path.display(), describe(e)))?;
    tracing::debug!(subpath = %path.display(), target = %target.display(), "bound subPath");
    Ok(target)
}

fn target_is_mount(target: &Path) -> Result<bool, String> {
    match target.canonicalize() {
        Ok(c) => is_mount_point(&c).map_err(|e| format!("reading the mount table: {e}")),
        Err(_) => Ok(false),
    }
}

fn create_target(target: &Path, is_dir: bool) -> Result<(), String> {
    let made = if is_dir {
        make_dir_all(target, 0o750)
    } else {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o640)
            .open(target)
            .map(drop)
    };
    made.map_err(|e| format!("creating {}: {e}", target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expands_as_upstream() {
        let e = env(&[("POD", "web-0"), ("NS", "prod"), ("EMPTY", "")]);
        assert_eq!(expand("logs/$(POD)", &e).unwrap(), "logs/web-0");
        assert_eq!(expand("$(NS)/$(POD)", &e).unwrap(), "prod/web-0");
        assert_eq!(expand("a$$(POD)", &e).unwrap(), "a$(POD)");
        assert_eq!(expand("cost$5", &e).unwrap(), "cost$5");
        assert_eq!(expand("open$(POD", &e).unwrap(), "open$(POD");
        assert_eq!(expand("end$", &e).unwrap(), "end$");
        assert_eq!(expand("plain", &e).unwrap(), "plain");
        assert_eq!(
            expand("$(B)/$(A)/$(EMPTY)", &e),
            Err("missing value for A, B, EMPTY".into())
        );
    }

    #[test]
    fn backsteps_refused() {
        assert!(validate_no_backsteps("a/b").is_ok());
        assert!(validate_no_backsteps("a..b").is_ok());
        assert_eq!(
            validate_no_backsteps("a/../../etc"),
            Err("must not contain '..'".into())
        );
    }

    #[test]
    fn safe_open_refuses_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        fs::create_dir_all(base.join("a/b")).unwrap();
        std::os::unix::fs::symlink("/etc", base.join("a/link")).unwrap();
        std::os::unix::fs::symlink("b", base.join("a/inner")).unwrap();
        assert!(safe_open(&base.join("a/b"), &base).is_ok());
        assert!(safe_open(&base, &base).is_ok());
        let err = safe_open(&base.join("a/link/passwd"), &base).unwrap_err();
        assert!(err.contains("unexpected symlink found"), "{err}");
        // Even a symlink that stays inside is refused at this stage (it was resolved before).
        let err = safe_open(&base.join("a/inner"), &base).unwrap_err();
        assert!(err.contains("unexpected symlink found"), "{err}");
        let err = safe_open(Path::new("/etc"), &base).unwrap_err();
        assert!(err.contains("outside of allowed base"), "{err}");
    }

    #[test]
    fn safe_make_dir_stays_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("vol");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(&base).unwrap();
        fs::create_dir_all(&outside).unwrap();
        safe_make_dir("x/y/z", &base, 0o777).unwrap();
        assert_eq!(
            fs::metadata(base.join("x/y/z")).unwrap().mode() & 0o777,
            0o777
        );
        std::os::unix::fs::symlink(&outside, base.join("esc")).unwrap();
        let err = safe_make_dir("esc/new", &base, 0o755).unwrap_err();
        assert!(err.contains("outside of allowed base"), "{err}");
        assert!(!outside.join("new").exists());
    }
}
