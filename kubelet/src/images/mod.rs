//! Container images without a registry: we build OCI image layout tarballs from files on this
//! machine (`build`), and import them into containerd through its gRPC API (`import`) so that
//! the CRI plugin runs containers from them without ever pulling.

pub mod apt;
pub mod build;
pub mod import;
pub mod oci;
pub mod prometheus;

use std::path::Path;
use std::process::{Command, Stdio};

pub use build::{BuildOptions, BuiltImage, ImageKind};
pub use import::{ImportOptions, ImportedImage, import_archive, import_dir};

/// What can go wrong building or importing images.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command}: {detail}")]
    Command { command: String, detail: String },
    #[error("{context}: {source}")]
    Json {
        context: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("connecting to containerd at {socket}: {source}")]
    Connect {
        socket: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("containerd: {context}: {} ({:?})", .source.message(), .source.code())]
    Grpc {
        context: String,
        #[source]
        source: Box<tonic::Status>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds what was being done to an I/O error.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: context(),
            source,
        })
    }
}

pub(crate) fn grpc(context: impl Into<String>) -> impl FnOnce(tonic::Status) -> Error {
    let context = context.into();
    move |source| Error::Grpc {
        context,
        source: Box::new(source),
    }
}

pub(crate) fn ensure_dir(dir: &Path) -> Result<&Path> {
    std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Runs a command and returns its standard output; a failure carries its standard error.
pub(crate) fn run(cmd: &mut Command) -> Result<Vec<u8>> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Command {
            command: shown.clone(),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: shown,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(out.stdout)
}
