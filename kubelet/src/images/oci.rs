//! The OCI image layout, as a tarball: `oci-layout`, `index.json` and `blobs/sha256/<hex>`
//! holding one config, one manifest and uncompressed tar layers. Layers are written from a
//! [`Tree`] of paths in sorted order with fixed owners and mtimes, so the same files always
//! give the same digests.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Error, IoContext, Result};

pub const MEDIA_TYPE_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_TYPE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_TYPE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_TYPE_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
pub const MEDIA_TYPE_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const MEDIA_TYPE_DOCKER_LIST: &str =
    "application/vnd.docker.distribution.manifest.list.v2+json";
/// The reference an image in a layout is known by (we store the full reference, as
/// `ctr images import` and containerd's exporter understand it).
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";
/// containerd's own annotation for the full image name.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";
/// The `created` time of every image we build: fixed, so digests do not change.
pub const EPOCH: &str = "1970-01-01T00:00:00Z";

/// `sha256:<hex>` of some bytes.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

/// The chain ID of a stack of layers (OCI image spec): the identity of the snapshot that holds
/// the layers' union, as containerd names committed snapshots.
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let next = match out.last() {
            None => diff.clone(),
            Some(parent) => sha256_digest(format!("{parent} {diff}").as_bytes()),
        };
        out.push(next);
    }
    out
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// The platform of this machine, in Go's names (as image configs spell them).
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        };
        Platform {
            architecture: architecture.to_string(),
            os: "linux".to_string(),
            variant: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The image configuration (`application/vnd.oci.image.config.v1+json`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ImageConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    pub architecture: String,
    pub os: String,
    #[serde(default)]
    pub config: ContainerConfig,
    pub rootfs: RootFs,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<History>,
}

/// What a container of the image runs by default.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cmd: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct History {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// Where a regular file's bytes come from.
#[derive(Clone, Debug)]
pub enum Source {
    Bytes(Vec<u8>),
    Path(PathBuf),
}

/// One entry of a layer.
#[derive(Clone, Debug)]
pub enum Node {
    Dir {
        mode: u32,
    },
    File {
        mode: u32,
        source: Source,
    },
    Symlink {
        target: String,
    },
    /// A hard link to another path of the same layer (which sorts before it).
    Hardlink {
        target: String,
    },
}

/// The files of one layer, by path relative to the root (no leading `/`).
#[derive(Clone, Debug, Default)]
pub struct Tree {
    entries: BTreeMap<String, Node>,
}

/// `/usr/bin/` → `usr/bin`; refuses `..`.
fn clean(path: &str) -> Result<String> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(Error::Invalid(format!("path {path:?} leaves the root"))),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(Error::Invalid(format!("path {path:?} names the root")));
    }
    Ok(parts.join("/"))
}

impl Tree {
    pub fn new() -> Tree {
        Tree::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        clean(path).ok().and_then(|p| self.entries.get(&p))
    }

    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Adds a node, creating missing parent directories (0755). A directory never replaces
    /// what is there; anything else does.
    pub fn insert(&mut self, path: &str, node: Node) -> Result<()> {
        let path = clean(path)?;
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let parent = &path[..at + i];
            self.entries
                .entry(parent.to_string())
                .or_insert(Node::Dir { mode: 0o755 });
            at += i + 1;
        }
        match node {
            Node::Dir { mode } => {
                let e = self.entries.entry(path).or_insert(Node::Dir { mode });
                if let Node::Dir { mode: m } = e {
                    *m = mode;
                }
            }
            other => {
                self.entries.insert(path, other);
            }
        }
        Ok(())
    }

    pub fn dir(&mut self, path: &str, mode: u32) -> Result<()> {
        self.insert(path, Node::Dir { mode })
    }

    pub fn file(&mut self, path: &str, mode: u32, data: impl Into<Vec<u8>>) -> Result<()> {
        self.insert(
            path,
            Node::File {
                mode,
                source: Source::Bytes(data.into()),
            },
        )
    }

    pub fn host_file(&mut self, path: &str, mode: u32, host: impl Into<PathBuf>) -> Result<()> {
        self.insert(
            path,
            Node::File {
                mode,
                source: Source::Path(host.into()),
            },
        )
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> Result<()> {
        self.insert(
            path,
            Node::Symlink {
                target: target.to_string(),
            },
        )
    }

    pub fn hardlink(&mut self, path: &str, target: &str) -> Result<()> {
        let target = clean(target)?;
        self.insert(path, Node::Hardlink { target })
    }

    /// Adds everything under the host directory `root`. `map` turns each relative path into
    /// its path in the layer, or `None` to leave it out (a directory left out takes its
    /// contents with it). Files with several links become one file and hard links to it.
    pub fn add_host_dir(
        &mut self,
        root: &Path,
        map: &dyn Fn(&str) -> Option<String>,
    ) -> Result<()> {
        let mut inodes: HashMap<(u64, u64), Vec<String>> = HashMap::new();
        let mut stack = vec![(root.to_path_buf(), String::new())];
        while let Some((dir, rel)) = stack.pop() {
            let read = std::fs::read_dir(&dir).ctx(|| format!("reading {}", dir.display()))?;
            for entry in read {
                let entry = entry.ctx(|| format!("reading {}", dir.display()))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let rel = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let Some(dest) = map(&rel) else { continue };
                let host = entry.path();
                let meta =
                    std::fs::symlink_metadata(&host).ctx(|| format!("stat {}", host.display()))?;
                let mode = meta.permissions().mode() & 0o7777;
                let ft = meta.file_type();
                if ft.is_dir() {
                    self.dir(&dest, mode)?;
                    stack.push((host, rel));
                } else if ft.is_symlink() {
                    let target =
                        std::fs::read_link(&host).ctx(|| format!("readlink {}", host.display()))?;
                    self.symlink(&dest, &target.to_string_lossy())?;
                } else if ft.is_file() {
                    self.host_file(&dest, mode, host)?;
                    if meta.nlink() > 1 {
                        inodes
                            .entry((meta.dev(), meta.ino()))
                            .or_default()
                            .push(clean(&dest)?);
                    }
                }
                // Devices, fifos and sockets have no place in an image layer of ours.
            }
        }
        for mut paths in inodes.into_values() {
            paths.sort();
            let (first, rest) = paths.split_first().expect("one path at least");
            for p in rest {
                self.hardlink(p, first)?;
            }
        }
        Ok(())
    }

    /// Writes the layer as an uncompressed tar: entries in path order, owned by root, mtime 0.
    pub fn write_tar<W: Write>(&self, out: W) -> Result<W> {
        let mut tar = tar::Builder::new(out);
        for (path, node) in &self.entries {
            let mut h = tar::Header::new_gnu();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            let res = match node {
                Node::Dir { mode } => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(*mode);
                    h.set_size(0);
                    tar.append_data(&mut h, format!("{path}/"), io::empty())
                }
                Node::File { mode, source } => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(*mode);
                    match source {
                        Source::Bytes(b) => {
                            h.set_size(b.len() as u64);
                            tar.append_data(&mut h, path, b.as_slice())
                        }
                        Source::Path(p) => {
                            let f = File::open(p).ctx(|| format!("opening {}", p.display()))?;
                            let len = f.metadata().ctx(|| format!("stat {}", p.display()))?.len();
                            h.set_size(len);
                            // Take exactly `len` bytes even if the file changes under us.
                            tar.append_data(&mut h, path, f.take(len))
                        }
                    }
                }
                Node::Symlink { target } => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    tar.append_link(&mut h, path, target)
                }
                Node::Hardlink { target } => {
                    h.set_entry_type(tar::EntryType::Link);
                    h.set_mode(0o644);
                    h.set_size(0);
                    tar.append_link(&mut h, path, target)
                }
            };
            res.ctx(|| format!("writing layer entry {path}"))?;
        }
        tar.into_inner().ctx(|| "finishing a layer".to_string())
    }
}

/// A writer that counts and hashes what passes through it.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    /// The inner writer, the `sha256:` digest and the size of everything written.
    pub fn finish(self) -> (W, String, u64) {
        let digest = format!("sha256:{:x}", self.hasher.finalize());
        (self.inner, digest, self.written)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// What to put in an image archive.
#[derive(Clone, Debug)]
pub struct ImageSpec {
    /// The full reference, e.g. `docker.io/library/busybox:1.36`.
    pub reference: String,
    pub config: ContainerConfig,
    /// Layers, bottom first.
    pub layers: Vec<Tree>,
    /// One line per layer for the config's history.
    pub created_by: Vec<String>,
}

/// What [`write_archive`] wrote.
#[derive(Clone, Debug)]
pub struct WrittenImage {
    pub path: PathBuf,
    pub reference: String,
    /// The manifest's descriptor, as `index.json` lists it.
    pub manifest: Descriptor,
    /// The config's digest: the image ID.
    pub config_digest: String,
    /// The layers' descriptors (uncompressed: each digest is also the diff ID).
    pub layers: Vec<Descriptor>,
    /// Bytes of the archive.
    pub archive_size: u64,
}

fn to_json<T: Serialize>(what: &str, v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|source| Error::Json {
        context: format!("encoding the {what}"),
        source,
    })
}

enum Blob {
    Bytes(Vec<u8>),
    File(File, u64),
}

/// Writes an OCI image layout tarball for `spec` to `path` (through a temporary file in the
/// same directory, renamed into place).
pub fn write_archive(spec: &ImageSpec, path: &Path) -> Result<WrittenImage> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;

    let mut blobs: BTreeMap<String, Blob> = BTreeMap::new();
    let mut layers = Vec::new();
    for tree in &spec.layers {
        let tmp =
            tempfile::tempfile_in(dir).ctx(|| format!("temporary file in {}", dir.display()))?;
        let w = tree.write_tar(HashingWriter::new(BufWriter::new(tmp)))?;
        let (buf, digest, size) = w.finish();
        let file = buf
            .into_inner()
            .map_err(|e| e.into_error())
            .ctx(|| "writing a layer".to_string())?;
        layers.push(Descriptor {
            media_type: MEDIA_TYPE_LAYER.to_string(),
            digest: digest.clone(),
            size,
            annotations: BTreeMap::new(),
            platform: None,
        });
        blobs.insert(digest, Blob::File(file, size));
    }

    let platform = Platform::host();
    let config = ImageConfig {
        created: Some(EPOCH.to_string()),
        architecture: platform.architecture.clone(),
        os: platform.os.clone(),
        config: spec.config.clone(),
        rootfs: RootFs {
            kind: "layers".to_string(),
            diff_ids: layers.iter().map(|l| l.digest.clone()).collect(),
        },
        history: spec
            .created_by
            .iter()
            .map(|c| History {
                created: Some(EPOCH.to_string()),
                created_by: Some(c.clone()),
            })
            .collect(),
    };
    let config_bytes = to_json("image config", &config)?;
    let config_desc = Descriptor {
        media_type: MEDIA_TYPE_CONFIG.to_string(),
        digest: sha256_digest(&config_bytes),
        size: config_bytes.len() as u64,
        annotations: BTreeMap::new(),
        platform: None,
    };
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MEDIA_TYPE_MANIFEST.to_string()),
        config: config_desc.clone(),
        layers: layers.clone(),
        annotations: BTreeMap::new(),
    };
    let manifest_bytes = to_json("manifest", &manifest)?;
    let manifest_desc = Descriptor {
        media_type: MEDIA_TYPE_MANIFEST.to_string(),
        digest: sha256_digest(&manifest_bytes),
        size: manifest_bytes.len() as u64,
        annotations: BTreeMap::from([
            (
                ANNOTATION_CONTAINERD_NAME.to_string(),
                spec.reference.clone(),
            ),
            (ANNOTATION_REF_NAME.to_string(), spec.reference.clone()),
        ]),
        platform: Some(platform),
    };
    let index = Index {
        schema_version: 2,
        media_type: Some(MEDIA_TYPE_INDEX.to_string()),
        manifests: vec![manifest_desc.clone()],
        annotations: BTreeMap::new(),
    };
    let index_bytes = to_json("index", &index)?;
    blobs.insert(config_desc.digest.clone(), Blob::Bytes(config_bytes));
    blobs.insert(manifest_desc.digest.clone(), Blob::Bytes(manifest_bytes));

    let tmp_path = path.with_extension("tar.tmp");
    let out = File::create(&tmp_path).ctx(|| format!("creating {}", tmp_path.display()))?;
    let mut tar = tar::Builder::new(BufWriter::new(out));
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(size);
        h
    };
    let io_err = |what: &str| format!("writing {what} to {}", tmp_path.display());
    for dir in ["blobs/", "blobs/sha256/"] {
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        tar.append_data(&mut h, dir, io::empty())
            .ctx(|| io_err(dir))?;
    }
    for (digest, blob) in blobs {
        let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        match blob {
            Blob::Bytes(b) => {
                let mut h = header(tar::EntryType::Regular, 0o644, b.len() as u64);
                tar.append_data(&mut h, &name, b.as_slice())
                    .ctx(|| io_err(&name))?;
            }
            Blob::File(mut f, size) => {
                use std::io::Seek;
                f.rewind().ctx(|| io_err(&name))?;
                let mut h = header(tar::EntryType::Regular, 0o644, size);
                tar.append_data(&mut h, &name, f.take(size))
                    .ctx(|| io_err(&name))?;
            }
        }
    }
    let mut h = header(tar::EntryType::Regular, 0o644, index_bytes.len() as u64);
    tar.append_data(&mut h, "index.json", index_bytes.as_slice())
        .ctx(|| io_err("index.json"))?;
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
    let mut h = header(tar::EntryType::Regular, 0o644, layout.len() as u64);
    tar.append_data(&mut h, "oci-layout", layout.as_slice())
        .ctx(|| io_err("oci-layout"))?;
    let out = tar
        .into_inner()
        .ctx(|| io_err("the end"))?
        .into_inner()
        .map_err(|e| e.into_error())
        .ctx(|| io_err("the end"))?;
    out.sync_all().ctx(|| io_err("sync"))?;
    let archive_size = out.metadata().ctx(|| io_err("stat"))?.len();
    drop(out);
    std::fs::rename(&tmp_path, path)
        .ctx(|| format!("renaming {} to {}", tmp_path.display(), path.display()))?;
    Ok(WrittenImage {
        path: path.to_path_buf(),
        reference: spec.reference.clone(),
        manifest: manifest_desc,
        config_digest: config_desc.digest,
        layers,
        archive_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn read_archive(path: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut ar = tar::Archive::new(File::open(path).unwrap());
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            out.insert(name, data);
        }
        out
    }

    fn sample() -> ImageSpec {
        let mut t = Tree::new();
        t.file("/bin/tool", 0o755, b"#!/bin/sh\necho hi\n".to_vec())
            .unwrap();
        t.symlink("usr/bin/tool", "/bin/tool").unwrap();
        t.hardlink("bin/tool2", "bin/tool").unwrap();
        t.dir("tmp", 0o1777).unwrap();
        ImageSpec {
            reference: "docker.io/library/sample:1".to_string(),
            config: ContainerConfig {
                cmd: vec!["sh".to_string()],
                env: vec!["PATH=/bin".to_string()],
                ..Default::default()
            },
            layers: vec![t],
            created_by: vec!["test".to_string()],
        }
    }

    #[test]
    fn chain_ids_follow_the_spec() {
        let a = sha256_digest(b"a");
        let b = sha256_digest(b"b");
        let ids = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(ids[0], a);
        assert_eq!(ids[1], sha256_digest(format!("{a} {b}").as_bytes()));
        assert!(chain_ids(&[]).is_empty());
    }

    #[test]
    fn tree_creates_parents_and_refuses_escapes() {
        let mut t = Tree::new();
        t.file("a/b/c", 0o600, "x").unwrap();
        assert!(matches!(t.get("a"), Some(Node::Dir { mode: 0o755 })));
        assert!(matches!(t.get("/a/b/"), Some(Node::Dir { .. })));
        t.dir("a", 0o700).unwrap();
        assert!(matches!(t.get("a"), Some(Node::Dir { mode: 0o700 })));
        assert!(t.file("../etc/passwd", 0o644, "x").is_err());
        assert!(t.dir("/", 0o755).is_err());
        assert_eq!(t.paths().collect::<Vec<_>>(), ["a", "a/b", "a/b/c"]);
    }

    #[test]
    fn layout_structure_and_digests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sample.tar");
        let w = write_archive(&sample(), &path).unwrap();
        let files = read_archive(&path);
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        assert!(names.contains(&"oci-layout"));
        assert!(names.contains(&"index.json"));
        // Every blob is named by its own digest.
        let mut blob_count = 0;
        for (name, data) in &files {
            if let Some(hex) = name.strip_prefix("blobs/sha256/")
                && !hex.is_empty()
            {
                blob_count += 1;
                assert_eq!(sha256_digest(data), format!("sha256:{hex}"), "{name}");
            }
        }
        assert_eq!(blob_count, 3, "config, manifest, one layer: {names:?}");

        let layout: serde_json::Value = serde_json::from_slice(&files["oci-layout"]).unwrap();
        assert_eq!(layout["imageLayoutVersion"], "1.0.0");
        let index: Index = serde_json::from_slice(&files["index.json"]).unwrap();
        assert_eq!(index.schema_version, 2);
        assert_eq!(index.manifests.len(), 1);
        let md = &index.manifests[0];
        assert_eq!(md, &w.manifest);
        assert_eq!(md.media_type, MEDIA_TYPE_MANIFEST);
        assert_eq!(
            md.annotations[ANNOTATION_REF_NAME],
            "docker.io/library/sample:1"
        );
        let blob = |d: &str| &files[&format!("blobs/sha256/{}", d.trim_start_matches("sha256:"))];
        let manifest_bytes = blob(&md.digest);
        assert_eq!(manifest_bytes.len() as u64, md.size);
        let manifest: Manifest = serde_json::from_slice(manifest_bytes).unwrap();
        assert_eq!(manifest.schema_version, 2);
        assert_eq!(manifest.config.media_type, MEDIA_TYPE_CONFIG);
        assert_eq!(manifest.config.digest, w.config_digest);
        assert_eq!(manifest.layers.len(), 1);
        assert_eq!(manifest.layers[0].media_type, MEDIA_TYPE_LAYER);
        assert_eq!(
            blob(&manifest.layers[0].digest).len() as u64,
            manifest.layers[0].size
        );
        let config: ImageConfig = serde_json::from_slice(blob(&manifest.config.digest)).unwrap();
        assert_eq!(config.os, "linux");
        assert_eq!(config.rootfs.kind, "layers");
        // Uncompressed layers: the diff ID is the layer digest.
        assert_eq!(
            config.rootfs.diff_ids,
            vec![manifest.layers[0].digest.clone()]
        );
        assert_eq!(config.config.cmd, ["sh"]);
        let raw: serde_json::Value = serde_json::from_slice(blob(&manifest.config.digest)).unwrap();
        assert_eq!(raw["config"]["Cmd"][0], "sh", "Docker's field names");
        assert_eq!(raw["config"]["Env"][0], "PATH=/bin");

        // The layer holds sorted entries owned by root with mtime 0.
        let layer = blob(&manifest.layers[0].digest);
        let mut ar = tar::Archive::new(layer.as_slice());
        let mut seen = Vec::new();
        for e in ar.entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            assert_eq!(h.mtime().unwrap(), 0);
            assert_eq!(h.uid().unwrap(), 0);
            let p = e.path().unwrap().to_string_lossy().into_owned();
            match p.as_str() {
                "tmp/" | "tmp" => assert_eq!(h.mode().unwrap(), 0o1777),
                "usr/bin/tool" => {
                    assert_eq!(h.entry_type(), tar::EntryType::Symlink);
                    assert_eq!(e.link_name().unwrap().unwrap().to_str(), Some("/bin/tool"));
                }
                "bin/tool2" => {
                    assert_eq!(h.entry_type(), tar::EntryType::Link);
                    assert_eq!(e.link_name().unwrap().unwrap().to_str(), Some("bin/tool"));
                }
                _ => {}
            }
            seen.push(p.trim_end_matches('/').to_string());
        }
        assert_eq!(
            seen,
            [
                "bin",
                "bin/tool",
                "bin/tool2",
                "tmp",
                "usr",
                "usr/bin",
                "usr/bin/tool"
            ]
        );
    }

    #[test]
    fn archives_are_reproducible() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_archive(&sample(), &dir.path().join("a.tar")).unwrap();
        let b = write_archive(&sample(), &dir.path().join("b.tar")).unwrap();
        assert_eq!(a.manifest.digest, b.manifest.digest);
        assert_eq!(
            std::fs::read(dir.path().join("a.tar")).unwrap(),
            std::fs::read(dir.path().join("b.tar")).unwrap()
        );
        let mut other = sample();
        other.layers[0].file("etc/x", 0o644, "y").unwrap();
        let c = write_archive(&other, &dir.path().join("c.tar")).unwrap();
        assert_ne!(a.layers[0].digest, c.layers[0].digest);
    }

    #[test]
    fn host_dirs_keep_modes_links_and_hardlinks() {
        let src = tempfile::tempdir().unwrap();
        let root = src.path();
        std::fs::create_dir_all(root.join("lib/x")).unwrap();
        std::fs::create_dir_all(root.join("usr/share/doc/p")).unwrap();
        std::fs::write(root.join("lib/x/libz.so.1.2"), "elf").unwrap();
        std::fs::set_permissions(
            root.join("lib/x/libz.so.1.2"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("libz.so.1.2", root.join("lib/x/libz.so.1")).unwrap();
        std::fs::hard_link(root.join("lib/x/libz.so.1.2"), root.join("lib/x/a-link")).unwrap();
        std::fs::write(root.join("usr/share/doc/p/README"), "docs").unwrap();
        let mut t = Tree::new();
        t.add_host_dir(root, &|p: &str| {
            if p.starts_with("usr/share/doc") {
                None
            } else if let Some(rest) = p.strip_prefix("lib") {
                Some(format!("usr/lib{rest}"))
            } else {
                Some(p.to_string())
            }
        })
        .unwrap();
        assert!(t.get("usr/share/doc").is_none());
        assert!(matches!(
            t.get("usr/lib/x/libz.so.1"),
            Some(Node::Symlink { target }) if target == "libz.so.1.2"
        ));
        assert!(matches!(
            t.get("usr/lib/x/libz.so.1.2"),
            Some(Node::Hardlink { target }) if target == "usr/lib/x/a-link"
        ));
        assert!(matches!(
            t.get("usr/lib/x/a-link"),
            Some(Node::File { mode: 0o755, .. })
        ));
    }
}
