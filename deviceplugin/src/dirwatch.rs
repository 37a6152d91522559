//! Changes to the files of one directory, from inotify: how a plugin learns that the kubelet
//! restarted (its `kubelet.sock` is made anew) and how the fake plugin learns that its health
//! file changed, without polling.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::unix::AsyncFd;

/// What happened to a file of the watched directory, by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Made (or moved in).
    Created(String),
    /// Removed (or moved away).
    Removed(String),
    /// Closed after writing.
    Written(String),
}

impl Change {
    pub fn name(&self) -> &str {
        match self {
            Change::Created(n) | Change::Removed(n) | Change::Written(n) => n,
        }
    }
}

/// A watch on one directory; changes are read with [`DirWatch::next`]. Those that happen
/// between two reads queue up in the kernel, so none is missed.
pub struct DirWatch {
    fd: AsyncFd<OwnedFd>,
    buf: Vec<MaybeUninit<u8>>,
}

impl std::fmt::Debug for DirWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatch").finish_non_exhaustive()
    }
}

impl DirWatch {
    /// Watches `dir`, which must exist.
    pub fn new(dir: &Path) -> io::Result<DirWatch> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        inotify::add_watch(
            &fd,
            dir,
            WatchFlags::CREATE
                | WatchFlags::DELETE
                | WatchFlags::MOVED_TO
                | WatchFlags::MOVED_FROM
                | WatchFlags::CLOSE_WRITE,
        )?;
        Ok(DirWatch {
            // `register` is the unsafe spelling of the same; the fd is ours, owned by the
            // AsyncFd and closed with it, which is what `new` assumed.
            #[allow(deprecated)]
            fd: AsyncFd::new(fd)?,
            buf: vec![MaybeUninit::uninit(); 8192],
        })
    }

    /// The next changes, waiting for at least one.
    pub async fn next(&mut self) -> io::Result<Vec<Change>> {
        loop {
            let mut guard = self.fd.readable().await?;
            let mut out = Vec::new();
            let mut reader = inotify::Reader::new(self.fd.get_ref(), &mut self.buf);
            loop {
                match reader.next() {
                    Ok(event) => {
                        let flags = event.events();
                        let name = event
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
                            out.push(Change::Created(name));
                        } else if flags.intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM) {
                            out.push(Change::Removed(name));
                        } else if flags.contains(ReadFlags::CLOSE_WRITE) {
                            out.push(Change::Written(name));
                        }
                        if reader.is_buffer_empty() {
                            break;
                        }
                    }
                    Err(rustix::io::Errno::AGAIN) => {
                        guard.clear_ready();
                        break;
                    }
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }

    /// Waits for a change to the file called `name`.
    pub async fn wait_for(&mut self, name: &str) -> io::Result<Change> {
        loop {
            if let Some(c) = self.next().await?.into_iter().find(|c| c.name() == name) {
                return Ok(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sees_files_made_written_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut watch = DirWatch::new(dir.path()).unwrap();
        std::fs::write(dir.path().join("a"), "x").unwrap();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            seen.extend(watch.next().await.unwrap());
        }
        assert_eq!(
            seen,
            vec![Change::Created("a".into()), Change::Written("a".into())]
        );
        std::fs::remove_file(dir.path().join("a")).unwrap();
        assert_eq!(
            watch.wait_for("a").await.unwrap(),
            Change::Removed("a".into())
        );
    }
}
