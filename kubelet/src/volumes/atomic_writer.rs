//! Upstream's AtomicWriter: projects a set of files into a volume directory so that a running
//! container sees either the whole old set or the whole new one, never a mix.
//!
//! ```text
//! <volume>/..2026_01_02_15_04_05.123456789/   the real files of one version (0755)
//! <volume>/..data -> ..2026_01_02_15_04_05.123456789
//! <volume>/key    -> ..data/key               one link per top-level path
//! ```
//!
//! An update writes a new timestamped directory, points a fresh `..data_tmp` link at it and
//! renames that over `..data` (rename(2) is atomic), adds links for new top-level paths,
//! removes links for paths that are gone, then deletes the old timestamped directory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path};

use super::util::{make_dir_all, path_error, random_u64};

pub(crate) const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_PATH_LENGTH: usize = 4096;
const MAX_FILE_NAME_LENGTH: usize = 255;

/// One file of a payload: its bytes and mode (upstream's FileProjection).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Files by path relative to the volume.
pub(crate) type Payload = BTreeMap<String, FileProjection>;

/// Sets ownership and modes of the volume before a new version is published.
pub(crate) type SetPerms<'a> = &'a dyn Fn(&Path) -> io::Result<()>;

/// Whether a payload was ever published in `target`.
pub(crate) fn is_ready(target: &Path) -> bool {
    fs::symlink_metadata(target.join(DATA_DIR)).is_ok()
}

/// Upstream's validatePath: relative, no `..` element, not starting with `..`, bounded lengths.
pub(crate) fn validate_path(target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err(format!("invalid path: must not be empty: {target:?}"));
    }
    if target.starts_with('/') {
        return Err(format!("invalid path: must be relative path: {target}"));
    }
    if target.len() > MAX_PATH_LENGTH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    let items: Vec<&str> = target.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(format!("invalid path: must not contain '..': {target}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(format!(
                "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(format!("invalid path: must not start with '..': {target}"));
    }
    Ok(())
}

/// filepath.Clean for a validated relative path: no empty or `.` elements.
fn clean(target: &str) -> String {
    let parts: Vec<&str> = Path::new(target)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    parts.join("/")
}

fn validate_payload(payload: &Payload) -> Result<Payload, String> {
    let mut clean_payload = Payload::new();
    for (path, file) in payload {
        validate_path(path)?;
        let cleaned = clean(path);
        if cleaned.is_empty() {
            return Err(format!("invalid path: must not be empty: {path:?}"));
        }
        clean_payload.insert(cleaned, file.clone());
    }
    Ok(clean_payload)
}

/// The relative paths (files and directories) under a timestamped directory.
fn walk(root: &Path) -> io::Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&rel)
        };
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if entry.file_type()?.is_dir() {
                stack.push(child.clone());
            }
            found.insert(child);
        }
    }
    Ok(found)
}

/// Paths of the old version that the new payload no longer has (parents of new files stay).
fn paths_to_remove(payload: &Payload, old_ts: Option<&Path>) -> io::Result<BTreeSet<String>> {
    let Some(old_ts) = old_ts else {
        return Ok(BTreeSet::new());
    };
    let current = match walk(old_ts) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(e),
    };
    let mut new_paths = BTreeSet::new();
    for file in payload.keys() {
        let mut p = Some(Path::new(file.as_str()));
        while let Some(sub) = p.filter(|s| !s.as_os_str().is_empty()) {
            new_paths.insert(sub.to_string_lossy().into_owned());
            p = sub.parent();
        }
    }
    Ok(current.difference(&new_paths).cloned().collect())
}

fn should_write_payload(payload: &Payload, old_ts: &Path) -> io::Result<bool> {
    for (path, file) in payload {
        let full = old_ts.join(path);
        match fs::read(&full) {
            Ok(on_disk) if on_disk == file.data => {}
            Ok(_) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// `..2006_01_02_15_04_05.<random>` as Go's os.MkdirTemp names it, mode 0755.
fn new_timestamp_dir(target: &Path) -> Result<String, String> {
    let stamp = jiff::Timestamp::now()
        .strftime("..%Y_%m_%d_%H_%M_%S.")
        .to_string();
    for _ in 0..100 {
        let name = format!("{stamp}{}", random_u64() % 10_000_000_000);
        let dir = target.join(&name);
        match fs::create_dir(&dir) {
            Ok(()) => {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
                    .map_err(|e| path_error("chmod", &dir, &e))?;
                return Ok(name);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(path_error("mkdir", &dir, &e)),
        }
    }
    Err(format!(
        "mkdir {}: could not find a free name",
        target.display()
    ))
}

fn write_payload_to_dir(payload: &Payload, dir: &Path) -> Result<(), String> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            make_dir_all(parent, 0o755).map_err(|e| path_error("mkdir", parent, &e))?;
        }
        let mode = file.mode & 0o7777;
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&full)
            .map_err(|e| path_error("open", &full, &e))?;
        f.write_all(&file.data)
            .map_err(|e| path_error("write", &full, &e))?;
        // The umask applied at open; the mode asked for is what the container must see.
        fs::set_permissions(&full, fs::Permissions::from_mode(mode))
            .map_err(|e| path_error("chmod", &full, &e))?;
    }
    Ok(())
}

/// Whether a directory entry is a timestamped data directory (`..2026_...`).
fn is_timestamp_dir(name: &str) -> bool {
    name.strip_prefix("..")
        .is_some_and(|rest| rest.len() > 4 && rest[..4].bytes().all(|b| b.is_ascii_digit()))
}

/// Projects `payload` into `target` atomically; returns whether anything changed on disk.
/// `set_perms` runs on the volume after a new version is written and before it is published.
pub(crate) fn write(
    target: &Path,
    payload: &Payload,
    context: &str,
    set_perms: Option<SetPerms<'_>>,
) -> Result<bool, String> {
    // (1) validate
    let payload = validate_payload(payload)?;
    // (2) the current version
    let data_dir = target.join(DATA_DIR);
    let old_ts_name = match fs::read_link(&data_dir) {
        Ok(p) => Some(p.to_string_lossy().into_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(path_error("readlink", &data_dir, &e)),
    };
    let old_ts = old_ts_name.as_ref().map(|n| target.join(n));
    // (3) what is gone
    let remove =
        paths_to_remove(&payload, old_ts.as_deref()).map_err(|e| path_error("walk", target, &e))?;
    // (4) whether anything changed
    let should_write = match &old_ts {
        None => true,
        Some(old) => {
            should_write_payload(&payload, old).map_err(|e| path_error("read", old, &e))?
        }
    };
    let published = should_write || !remove.is_empty();
    let mut changed = published;
    if published {
        tracing::debug!(context, target = %target.display(), "writing new data directory");
        // (5) a new timestamped directory, (6) the payload in it
        let ts_name = new_timestamp_dir(target)?;
        let ts_dir = target.join(&ts_name);
        let publish = || -> Result<(), String> {
            write_payload_to_dir(&payload, &ts_dir)?;
            // (7) ownership and modes before anyone can see the files
            if let Some(set_perms) = set_perms {
                set_perms(target).map_err(|e| path_error("chown", target, &e))?;
            }
            // (8) ..data_tmp -> new dir, (9) renamed over ..data
            let tmp = target.join(NEW_DATA_DIR);
            match fs::remove_file(&tmp) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(path_error("remove", &tmp, &e)),
            }
            std::os::unix::fs::symlink(&ts_name, &tmp)
                .map_err(|e| path_error("symlink", &tmp, &e))?;
            fs::rename(&tmp, &data_dir).map_err(|e| path_error("rename", &tmp, &e))
        };
        if let Err(e) = publish() {
            let _ = fs::remove_dir_all(&ts_dir);
            return Err(e);
        }
    }
    // (10) a link per top-level path
    for path in payload.keys() {
        let top = path.split('/').next().unwrap_or(path);
        let visible = target.join(top);
        if let Err(e) = fs::read_link(&visible)
            && e.kind() == io::ErrorKind::NotFound
        {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(top), &visible)
                .map_err(|e| path_error("symlink", &visible, &e))?;
            changed = true;
        }
    }
    // (11) links of top-level paths that are gone
    let mut last_err = None;
    for path in remove.iter().filter(|p| !p.contains('/')) {
        let visible = target.join(path);
        if let Err(e) = fs::remove_file(&visible) {
            tracing::error!(context, path = %visible.display(), error = %e, "pruning old user-visible path");
            last_err = Some(path_error("remove", &visible, &e));
        }
    }
    // (12) the previous version, and any left behind by an interrupted write
    if published {
        let current = fs::read_link(&data_dir)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        for entry in fs::read_dir(target).map_err(|e| path_error("open", target, &e))? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_timestamp_dir(&name)
                && name != current
                && let Err(e) = fs::remove_dir_all(entry.path())
            {
                tracing::error!(context, path = %entry.path().display(), error = %e, "removing old data directory");
            }
        }
    }
    match last_err {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    fn payload(entries: &[(&str, &str, u32)]) -> Payload {
        entries
            .iter()
            .map(|(k, v, m)| (k.to_string(), file(v, *m)))
            .collect()
    }

    fn ts_dirs(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| is_timestamp_dir(n))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn layout_is_upstreams() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let p = payload(&[("a", "1", 0o644), ("sub/b", "2", 0o400)]);
        assert!(write(dir, &p, "test", None).unwrap());
        let ts = fs::read_link(dir.join("..data")).unwrap();
        let ts = ts.to_str().unwrap();
        assert!(ts.starts_with("..20") && is_timestamp_dir(ts), "{ts}");
        assert_eq!(ts_dirs(dir), vec![ts.to_string()]);
        assert_eq!(fs::metadata(dir.join(ts)).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_link(dir.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(
            fs::read_link(dir.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(fs::read_to_string(dir.join("sub/b")).unwrap(), "2");
        assert_eq!(fs::metadata(dir.join("a")).unwrap().mode() & 0o7777, 0o644);
        assert_eq!(
            fs::metadata(dir.join("sub/b")).unwrap().mode() & 0o7777,
            0o400
        );
        assert_eq!(
            fs::metadata(dir.join(ts).join("sub")).unwrap().mode() & 0o7777,
            0o755
        );
    }

    #[test]
    fn update_swaps_data_and_removes_the_old_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(
            dir,
            &payload(&[("a", "1", 0o644), ("gone", "x", 0o644)]),
            "test",
            None,
        )
        .unwrap();
        let first = fs::read_link(dir.join("..data")).unwrap();
        // Same content: nothing is rewritten.
        assert!(
            !write(
                dir,
                &payload(&[("a", "1", 0o644), ("gone", "x", 0o644)]),
                "test",
                None
            )
            .unwrap()
        );
        assert_eq!(fs::read_link(dir.join("..data")).unwrap(), first);
        // A changed value and a removed key: a new version, the old one deleted.
        let a_link_inode = fs::symlink_metadata(dir.join("a")).unwrap().ino();
        assert!(
            write(
                dir,
                &payload(&[("a", "2", 0o644), ("new/c", "3", 0o644)]),
                "test",
                None
            )
            .unwrap()
        );
        let second = fs::read_link(dir.join("..data")).unwrap();
        assert_ne!(first, second);
        assert!(!dir.join(&first).exists(), "old data dir removed");
        assert_eq!(ts_dirs(dir), vec![second.to_string_lossy().into_owned()]);
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "2");
        assert_eq!(fs::read_to_string(dir.join("new/c")).unwrap(), "3");
        assert!(fs::symlink_metadata(dir.join("gone")).is_err());
        // The user-visible link itself was not replaced: only ..data moved.
        assert_eq!(
            fs::symlink_metadata(dir.join("a")).unwrap().ino(),
            a_link_inode
        );
        assert!(!dir.join("..data_tmp").exists());
    }

    #[test]
    fn an_open_handle_keeps_the_old_version() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, &payload(&[("a", "old", 0o644)]), "t", None).unwrap();
        let old = fs::File::open(dir.join("a")).unwrap();
        write(dir, &payload(&[("a", "new", 0o644)]), "t", None).unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut &old, &mut s).unwrap();
        assert_eq!(s, "old");
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "new");
    }

    #[test]
    fn empty_payload_and_stale_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // Leftovers of an interrupted write.
        fs::create_dir(dir.join("..2020_01_01_00_00_00.1")).unwrap();
        std::os::unix::fs::symlink("..2020_01_01_00_00_00.1", dir.join("..data_tmp")).unwrap();
        assert!(write(dir, &Payload::new(), "t", None).unwrap());
        assert!(is_ready(dir));
        assert_eq!(ts_dirs(dir).len(), 1);
        assert!(!dir.join("..data_tmp").exists());
        write(dir, &payload(&[("k", "v", 0o644)]), "t", None).unwrap();
        write(dir, &Payload::new(), "t", None).unwrap();
        assert!(fs::symlink_metadata(dir.join("k")).is_err());
    }

    #[test]
    fn paths_are_validated_as_upstream() {
        assert!(validate_path("a/b").is_ok());
        assert!(validate_path("..a").is_err_and(|e| e.contains("must not start with '..'")));
        assert!(validate_path("a/../b").is_err_and(|e| e.contains("must not contain '..'")));
        assert!(validate_path("/abs").is_err_and(|e| e.contains("must be relative path")));
        assert!(validate_path("").is_err());
        assert!(validate_path(&"x".repeat(256)).is_err());
        assert!(validate_path("a..b/..c").is_ok());
        let tmp = tempfile::tempdir().unwrap();
        assert!(write(tmp.path(), &payload(&[("..data", "x", 0o644)]), "t", None).is_err());
        assert!(!is_ready(tmp.path()));
        // Cleaned: ./a and a// are both "a".
        write(tmp.path(), &payload(&[("./x//y", "1", 0o644)]), "t", None).unwrap();
        assert_eq!(fs::read_to_string(tmp.path().join("x/y")).unwrap(), "1");
    }
}
