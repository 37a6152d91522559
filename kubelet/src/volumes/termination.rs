//! The termination-message file: a fresh empty host file (0666) per container instance under
//! `<pod>/containers/<name>/`, bind-mounted at `terminationMessagePath`, and read back from the
//! container's CRI mounts once it exits (upstream's getTerminationMessage).

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;

use super::util::{make_dir_all, random_u64};

pub(crate) const CONTAINERS_DIR: &str = "containers";
/// Upstream's MaxContainerTerminationMessageLength.
pub const MAX_TERMINATION_MESSAGE_LENGTH: u64 = 1024 * 4;
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// Creates the host file for one container instance: `<pod>/containers/<name>/<8 hex digits>`.
pub(crate) fn create_file(pod_dir: &Path, container: &str) -> io::Result<PathBuf> {
    let dir = pod_dir.join(CONTAINERS_DIR).join(container);
    make_dir_all(&dir, 0o750)?;
    loop {
        let path = dir.join(format!("{:08x}", random_u64() as u32));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o666))?;
                return Ok(path);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The termination message of an exited container, from the host file mounted at `path`
/// among its CRI status mounts: at most the last 4096 bytes. `None` when there is no such
/// mount or file (the caller may then fall back to the log, per terminationMessagePolicy).
pub fn read_termination_message(mounts: &[cri::Mount], path: &str) -> Option<String> {
    if path.is_empty() {
        return None;
    }
    let mount = mounts.iter().find(|m| m.container_path == path)?;
    match read_at_most(Path::new(&mount.host_path), MAX_TERMINATION_MESSAGE_LENGTH) {
        Ok(data) => Some(String::from_utf8_lossy(&data).into_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(format!(
            "Error on reading termination log {}: {e}",
            mount.host_path
        )),
    }
}

/// Upstream's tail.ReadAtMost: the last `max` bytes of a file.
fn read_at_most(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len > max {
        f.seek(SeekFrom::Start(len - max))?;
    }
    let mut data = Vec::new();
    f.take(max).read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn file_per_instance_and_tail_read() {
        let tmp = tempfile::tempdir().unwrap();
        let a = create_file(tmp.path(), "app").unwrap();
        let b = create_file(tmp.path(), "app").unwrap();
        assert_ne!(a, b);
        assert_eq!(a.parent().unwrap(), tmp.path().join("containers/app"));
        assert_eq!(fs::metadata(&a).unwrap().mode() & 0o777, 0o666);
        assert_eq!(fs::metadata(&a).unwrap().len(), 0);
        let mounts = vec![cri::Mount {
            container_path: "/dev/termination-log".into(),
            host_path: a.to_string_lossy().into_owned(),
            ..Default::default()
        }];
        assert_eq!(
            read_termination_message(&mounts, "/dev/termination-log"),
            Some(String::new())
        );
        fs::write(&a, "x".repeat(5000) + "END").unwrap();
        let msg = read_termination_message(&mounts, "/dev/termination-log").unwrap();
        assert_eq!(msg.len(), 4096);
        assert!(msg.ends_with("END"));
        assert_eq!(read_termination_message(&mounts, "/other"), None);
        fs::remove_file(&a).unwrap();
        assert_eq!(
            read_termination_message(&mounts, "/dev/termination-log"),
            None
        );
    }
}
