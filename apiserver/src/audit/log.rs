//! `--audit-log-path` and its rotation (`--audit-log-maxsize`, `-maxbackup`, `-maxage`), as
//! kube-apiserver's lumberjack logger: a file grows to its size limit, is renamed with the time
//! of rotation (`audit-2006-01-02T15-04-05.000.log`, UTC) and a new one is started; old files
//! past the count or age are removed. `-` writes to standard output.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// lumberjack's size limit when none is given: 100 MB.
const DEFAULT_MAX_MB: u64 = 100;

/// Where events are written, one JSON object per line; each write is whole before the
/// request goes on (upstream's default `blocking` mode).
pub struct LogBackend {
    out: Mutex<Output>,
}

impl std::fmt::Debug for LogBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogBackend")
    }
}

enum Output {
    Stdout,
    File(Rotating),
}

struct Rotating {
    path: PathBuf,
    file: File,
    size: u64,
    max_size: u64,
    max_backups: usize,
    max_age: Option<Duration>,
    /// The time a rotated file is named after.
    clock: fn() -> jiff::Timestamp,
}

/// Rotation limits, named as the flags: megabytes, files and days; 0 is the default (100 MB)
/// for the size and no limit for the others.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rotation {
    pub max_size_mb: u64,
    pub max_backups: usize,
    pub max_age_days: u64,
}

impl LogBackend {
    pub fn open(path: &str, rotation: Rotation) -> std::io::Result<LogBackend> {
        if path == "-" {
            return Ok(LogBackend {
                out: Mutex::new(Output::Stdout),
            });
        }
        let mb = if rotation.max_size_mb == 0 {
            DEFAULT_MAX_MB
        } else {
            rotation.max_size_mb
        };
        Self::with_limit(Path::new(path), mb * 1024 * 1024, rotation)
    }

    fn with_limit(path: &Path, max_size: u64, rotation: Rotation) -> std::io::Result<LogBackend> {
        let file = open_log(path)?;
        let size = file.metadata()?.len();
        Ok(LogBackend {
            out: Mutex::new(Output::File(Rotating {
                path: path.to_path_buf(),
                file,
                size,
                max_size,
                max_backups: rotation.max_backups,
                max_age: (rotation.max_age_days > 0)
                    .then(|| Duration::from_secs(rotation.max_age_days * 24 * 3600)),
                clock: jiff::Timestamp::now,
            })),
        })
    }

    /// Appends one line; failures are logged (an audit sink that cannot write does not fail
    /// the request, as upstream's log backend).
    pub fn write_line(&self, line: &[u8]) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let result = match &mut *out {
            Output::Stdout => {
                let mut stdout = std::io::stdout().lock();
                stdout.write_all(line).and_then(|_| stdout.flush())
            }
            Output::File(f) => f.write(line),
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "writing the audit log failed");
        }
    }
}

/// Creates the directory (0700) and the file (0600) as upstream's `ensureLogFile`.
fn open_log(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl Rotating {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max_size {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let backup = self.backup_name((self.clock)());
        std::fs::rename(&self.path, &backup)?;
        self.file = open_log(&self.path)?;
        self.size = 0;
        self.remove_old();
        Ok(())
    }

    fn parts(&self) -> (String, String) {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name.rfind('.') {
            Some(at) if at > 0 => (name[..at].to_string(), name[at..].to_string()),
            _ => (name, String::new()),
        }
    }

    fn backup_name(&self, at: jiff::Timestamp) -> PathBuf {
        let (stem, ext) = self.parts();
        let stamp = at.strftime("%Y-%m-%dT%H-%M-%S%.3f").to_string();
        self.path.with_file_name(format!("{stem}-{stamp}{ext}"))
    }

    /// Removes backups past `max_backups` (newest kept) and older than `max_age`.
    fn remove_old(&self) {
        if self.max_backups == 0 && self.max_age.is_none() {
            return;
        }
        let (stem, ext) = self.parts();
        let dir = match self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(d) => d.to_path_buf(),
            None => PathBuf::from("."),
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut backups: Vec<(jiff::Timestamp, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let stamp = name
                    .strip_prefix(&format!("{stem}-"))?
                    .strip_suffix(ext.as_str())?
                    .to_string();
                let at = jiff::civil::DateTime::strptime("%Y-%m-%dT%H-%M-%S%.f", &stamp)
                    .ok()?
                    .to_zoned(jiff::tz::TimeZone::UTC)
                    .ok()?
                    .timestamp();
                Some((at, e.path()))
            })
            .collect();
        // Newest first, by the time in the name.
        backups.sort_by_key(|b| std::cmp::Reverse(b.0));
        let now = self.max_age.map(|age| ((self.clock)(), age));
        for (i, (at, path)) in backups.iter().enumerate() {
            let too_many = self.max_backups > 0 && i >= self.max_backups;
            let too_old = now.is_some_and(|(now, age)| {
                now > *at && now.duration_since(*at).unsigned_abs() > age
            });
            if (too_many || too_old)
                && let Err(e) = std::fs::remove_file(path)
            {
                tracing::warn!(path = %path.display(), error = %e, "removing an old audit log failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_is_renamed_and_old_ones_beyond_the_count_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs").join("audit.log");
        let log = LogBackend::with_limit(
            &path,
            100,
            Rotation {
                max_backups: 2,
                ..Default::default()
            },
        )
        .unwrap();
        // Each rotation a second after the one before.
        fn clock() -> jiff::Timestamp {
            static TICKS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
            let t = TICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            jiff::Timestamp::from_second(1_700_000_000 + t).unwrap()
        }
        if let Output::File(f) = &mut *log.out.lock().unwrap() {
            f.clock = clock;
        }
        let mut line = vec![b'x'; 59];
        line.push(b'\n');
        for _ in 0..5 {
            log.write_line(&line);
        }
        let mut names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        // One line per file: the current one and the two newest backups.
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.contains(&"audit.log".to_string()));
        assert_eq!(
            names,
            [
                "audit-2023-11-14T22-13-22.000.log",
                "audit-2023-11-14T22-13-23.000.log",
                "audit.log"
            ]
        );
        assert_eq!(std::fs::read(&path).unwrap().len(), 60);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
