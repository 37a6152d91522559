//! hostPath: a path of the node, checked (and for the `...OrCreate` types created) as
//! upstream's hostPath plugin does before the runtime bind-mounts it.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::util::path_error;

/// What a path on the host is (upstream's hostutil.GetFileType, which follows symlinks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileType {
    Directory,
    File,
    Socket,
    CharDevice,
    BlockDevice,
}

fn file_type(path: &Path) -> Option<FileType> {
    let t = fs::metadata(path).ok()?.file_type();
    Some(if t.is_dir() {
        FileType::Directory
    } else if t.is_socket() {
        FileType::Socket
    } else if t.is_char_device() {
        FileType::CharDevice
    } else if t.is_block_device() {
        FileType::BlockDevice
    } else {
        // Regular files, and FIFOs as upstream counts them.
        FileType::File
    })
}

fn make_dir(path: &Path) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(|e| path_error("mkdir", path, &e))
}

/// Upstream's makeFile: an empty file, 0644; the parent directory must exist.
fn make_file(path: &Path) -> Result<(), String> {
    match fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        // An existing directory: the type check that follows reports it.
        Err(e) if e.raw_os_error() == Some(nix::libc::EISDIR) => Ok(()),
        Err(e) => Err(path_error("open", path, &e)),
    }
}

/// Upstream's checkTypeInternal.
pub(crate) fn check_type(path: &Path, path_type: &str) -> Result<(), String> {
    let shown = path.display();
    let is = |t: FileType| file_type(path) == Some(t);
    match path_type {
        "" => Ok(()),
        "DirectoryOrCreate" | "Directory" => {
            if path_type == "DirectoryOrCreate" && fs::metadata(path).is_err() {
                return make_dir(path);
            }
            if is(FileType::Directory) {
                Ok(())
            } else {
                Err(format!(
                    "hostPath type check failed: {shown} is not a directory"
                ))
            }
        }
        "FileOrCreate" | "File" => {
            if path_type == "FileOrCreate" && fs::metadata(path).is_err() {
                return make_file(path);
            }
            if is(FileType::File) {
                Ok(())
            } else {
                Err(format!("hostPath type check failed: {shown} is not a file"))
            }
        }
        "Socket" if is(FileType::Socket) => Ok(()),
        "Socket" => Err(format!(
            "hostPath type check failed: {shown} is not a socket file"
        )),
        "CharDevice" if is(FileType::CharDevice) => Ok(()),
        "CharDevice" => Err(format!(
            "hostPath type check failed: {shown} is not a character device"
        )),
        "BlockDevice" if is(FileType::BlockDevice) => Ok(()),
        "BlockDevice" => Err(format!(
            "hostPath type check failed: {shown} is not a block device"
        )),
        other => Err(format!("{other} is an invalid volume type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn types_are_checked_on_the_host() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let file = dir.join("f");
        fs::write(&file, "x").unwrap();
        let sock_path = dir.join("s.sock");
        let _sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
        let missing = dir.join("missing");

        assert_eq!(check_type(&missing, ""), Ok(()));
        assert_eq!(check_type(dir, "Directory"), Ok(()));
        assert_eq!(
            check_type(&file, "Directory"),
            Err(format!(
                "hostPath type check failed: {} is not a directory",
                file.display()
            ))
        );
        assert_eq!(
            check_type(&missing, "Directory"),
            Err(format!(
                "hostPath type check failed: {} is not a directory",
                missing.display()
            ))
        );
        assert_eq!(check_type(&file, "File"), Ok(()));
        assert_eq!(
            check_type(dir, "File"),
            Err(format!(
                "hostPath type check failed: {} is not a file",
                dir.display()
            ))
        );
        assert_eq!(check_type(&sock_path, "Socket"), Ok(()));
        assert_eq!(
            check_type(&file, "Socket"),
            Err(format!(
                "hostPath type check failed: {} is not a socket file",
                file.display()
            ))
        );
        assert_eq!(check_type(Path::new("/dev/null"), "CharDevice"), Ok(()));
        assert_eq!(
            check_type(&file, "CharDevice"),
            Err(format!(
                "hostPath type check failed: {} is not a character device",
                file.display()
            ))
        );
        assert_eq!(
            check_type(Path::new("/dev/null"), "BlockDevice"),
            Err("hostPath type check failed: /dev/null is not a block device".into())
        );
        assert_eq!(
            check_type(dir, "Bogus"),
            Err("Bogus is an invalid volume type".into())
        );
    }

    #[test]
    fn or_create_types_create_with_upstreams_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let new_dir = tmp.path().join("a/b/c");
        assert_eq!(check_type(&new_dir, "DirectoryOrCreate"), Ok(()));
        assert!(new_dir.is_dir());
        assert_eq!(fs::metadata(&new_dir).unwrap().mode() & 0o777, 0o755);
        // Existing: checked, not touched.
        assert_eq!(check_type(&new_dir, "DirectoryOrCreate"), Ok(()));
        let file = tmp.path().join("a/file");
        assert_eq!(check_type(&file, "FileOrCreate"), Ok(()));
        assert!(file.is_file());
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o644);
        fs::write(&file, "keep").unwrap();
        assert_eq!(check_type(&file, "FileOrCreate"), Ok(()));
        assert_eq!(fs::read_to_string(&file).unwrap(), "keep");
        // The parent of a FileOrCreate path is not created.
        let orphan = tmp.path().join("nope/file");
        let err = check_type(&orphan, "FileOrCreate").unwrap_err();
        assert_eq!(
            err,
            format!("open {}: no such file or directory", orphan.display())
        );
        // A directory where a file is wanted fails the type check.
        assert!(check_type(&new_dir, "FileOrCreate").is_err_and(|e| e.ends_with("is not a file")));
        assert!(
            check_type(&file, "DirectoryOrCreate")
                .is_err_and(|e| e.ends_with("is not a directory"))
        );
    }
}
