//! A Function's `requirements.txt`, installed on the node rather than in its pods (which
//! reach no network): each node's router installs every set of requirements its revisions
//! name, once, with the host's pip, into a directory of its own under [`HOST_DIR`] keyed by
//! the requirements' digest; runtime pods mount that tree read-only and put their set's
//! directory first on `sys.path`. Packages come from the wheel directory [`WHEELS_DIR`]
//! when it exists (no index is asked), else from whatever index the host's pip is set up
//! with. A set is published by renaming a finished directory, so a pod never sees half of
//! one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

/// Where the node keeps installed requirements.
pub const HOST_DIR: &str = "/var/lib/minik8s/functions";
/// Where runtime pods see [`HOST_DIR`].
pub const POD_DIR: &str = "/var/lib/minik8s-functions";
/// Wheels the node installs from, without an index, when the directory exists.
pub const WHEELS_DIR: &str = "/var/lib/minik8s/wheels";
/// The annotation that carries a revision's requirements to the nodes.
pub const ANNOTATION: &str = "functions.minik8s.io/requirements";

/// The directory name of a set of requirements.
pub fn key(requirements: &str) -> String {
    let digest = Sha256::digest(requirements.trim().as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The set's directory as pods see it.
pub fn pod_path(requirements: &str) -> String {
    format!("{POD_DIR}/{}", key(requirements))
}

/// One set's installation: done once, its outcome kept.
type Installation = Arc<OnceCell<Result<(), String>>>;

/// Installs sets of requirements on this node, each once.
#[derive(Debug)]
pub struct Installer {
    root: PathBuf,
    wheels: PathBuf,
    sets: Mutex<HashMap<String, Installation>>,
}

impl Default for Installer {
    fn default() -> Self {
        Installer::new(Path::new(HOST_DIR), Path::new(WHEELS_DIR))
    }
}

impl Installer {
    pub fn new(root: &Path, wheels: &Path) -> Installer {
        Installer {
            root: root.to_path_buf(),
            wheels: wheels.to_path_buf(),
            sets: Mutex::new(HashMap::new()),
        }
    }

    /// Installs `requirements` unless done already; the error is pip's.
    pub async fn ensure(&self, requirements: &str) -> Result<(), String> {
        let key = key(requirements);
        let cell = self
            .sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| self.install(&key, requirements))
            .await
            .clone()
    }

    async fn install(&self, key: &str, requirements: &str) -> Result<(), String> {
        let dir = self.root.join(key);
        if dir.join(".installed").exists() {
            return Ok(());
        }
        let tmp = self
            .root
            .join(format!("{key}.partial-{}", std::process::id()));
        let _ = tokio::fs::remove_dir_all(&tmp).await;
        tokio::fs::create_dir_all(&tmp)
            .await
            .map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        let file = tmp.join("requirements.txt");
        tokio::fs::write(&file, requirements)
            .await
            .map_err(|e| e.to_string())?;
        let mut pip = tokio::process::Command::new("python3");
        pip.args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .arg("--target")
        .arg(&tmp)
        .arg("-r")
        .arg(&file);
        if self.wheels.is_dir() {
            pip.arg("--no-index").arg("--find-links").arg(&self.wheels);
        }
        let out = pip
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| format!("running pip: {e}"))?;
        if !out.status.success() {
            let _ = tokio::fs::remove_dir_all(&tmp).await;
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(format!("pip install failed: {}", last.trim()));
        }
        tokio::fs::write(tmp.join(".installed"), b"")
            .await
            .map_err(|e| e.to_string())?;
        let _ = tokio::fs::remove_dir_all(&dir).await;
        tokio::fs::rename(&tmp, &dir)
            .await
            .map_err(|e| format!("publishing {}: {e}", dir.display()))?;
        tracing::info!(key, "installed a function's requirements");
        Ok(())
    }
}
