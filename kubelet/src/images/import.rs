//! Imports OCI image layout tarballs into containerd through its gRPC API, as
//! `ctr images import` does: blobs into the content store (with the garbage collector's
//! reference labels), layers unpacked into the snapshotter, and an image record the CRI plugin
//! sees. Everything written is held by a lease until the image record references it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use containerd_client::services::v1::content_client::ContentClient;
use containerd_client::services::v1::diff_client::DiffClient;
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::snapshots::snapshots_client::SnapshotsClient;
use containerd_client::services::v1::snapshots::{
    CommitSnapshotRequest, PrepareSnapshotRequest, RemoveSnapshotRequest, StatSnapshotRequest,
};
use containerd_client::services::v1::{
    ApplyRequest, CreateImageRequest, CreateRequest as CreateLeaseRequest,
    DeleteRequest as DeleteLeaseRequest, GetImageRequest, Image, Info, InfoRequest,
    UpdateImageRequest, UpdateRequest, WriteAction, WriteContentRequest,
};
use containerd_client::types::Descriptor as CtrDescriptor;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use super::oci::{
    ANNOTATION_CONTAINERD_NAME, ANNOTATION_REF_NAME, Descriptor, ImageConfig, Index,
    MEDIA_TYPE_DOCKER_LIST, MEDIA_TYPE_DOCKER_MANIFEST, MEDIA_TYPE_INDEX, MEDIA_TYPE_MANIFEST,
    Manifest, Platform, chain_ids,
};
use super::{Error, IoContext, Result, grpc};

/// The namespace the CRI plugin keeps its images and containers in.
pub const CRI_NAMESPACE: &str = "k8s.io";
const NAMESPACE_HEADER: &str = "containerd-namespace";
const LEASE_HEADER: &str = "containerd-lease";
const CHUNK: usize = 1 << 20;

/// Where and how to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// containerd namespace (the CRI plugin's is `k8s.io`).
    pub namespace: String,
    /// The snapshotter to unpack into (the CRI plugin's default is `overlayfs`).
    pub snapshotter: String,
    /// Which manifest of a multi-platform index to unpack.
    pub platform: Platform,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            namespace: CRI_NAMESPACE.to_string(),
            snapshotter: "overlayfs".to_string(),
            platform: Platform::host(),
        }
    }
}

/// One image record that an import created or updated.
#[derive(Clone, Debug)]
pub struct ImportedImage {
    pub name: String,
    pub archive: PathBuf,
    /// What the image record points at (a manifest or an index).
    pub target: Descriptor,
    /// The image ID (the config's digest) of the unpacked manifest.
    pub config_digest: String,
    /// The committed snapshot holding the image's root filesystem.
    pub chain_id: String,
    /// Blobs written to the content store, and blobs that were there already.
    pub blobs_written: usize,
    pub blobs_present: usize,
    /// Layers applied to new snapshots (0 when the snapshot chain existed).
    pub layers_unpacked: usize,
    /// Writing this image's blobs, and unpacking its layers.
    pub write_time: Duration,
    pub unpack_time: Duration,
    /// The whole import of the archive this image came from.
    pub duration: Duration,
}

/// Imports every `*.tar` in `dir` (in name order) into the containerd at `socket`.
pub async fn import_dir(
    socket: &Path,
    dir: &Path,
    opts: &ImportOptions,
) -> Result<Vec<ImportedImage>> {
    let channel = crate::containerd::connect(socket)
        .await
        .map_err(|source| Error::Connect {
            socket: socket.display().to_string(),
            source,
        })?;
    let importer = Importer::new(channel, opts.clone());
    let mut archives = Vec::new();
    for entry in std::fs::read_dir(dir).ctx(|| format!("reading {}", dir.display()))? {
        let path = entry.ctx(|| format!("reading {}", dir.display()))?.path();
        if path.extension().is_some_and(|e| e == "tar") && path.is_file() {
            archives.push(path);
        }
    }
    archives.sort();
    let mut out = Vec::new();
    for path in archives {
        out.extend(importer.import_archive(&path).await?);
    }
    Ok(out)
}

/// Imports one OCI layout tarball into the containerd at `socket`.
pub async fn import_archive(
    socket: &Path,
    path: &Path,
    opts: &ImportOptions,
) -> Result<Vec<ImportedImage>> {
    let channel = crate::containerd::connect(socket)
        .await
        .map_err(|source| Error::Connect {
            socket: socket.display().to_string(),
            source,
        })?;
    Importer::new(channel, opts.clone())
        .import_archive(path)
        .await
}

/// The entries of a tar file: name → (offset of the data, size).
struct Archive {
    path: PathBuf,
    entries: HashMap<String, (u64, u64)>,
}

impl Archive {
    fn open(path: &Path) -> Result<Archive> {
        let file = File::open(path).ctx(|| format!("opening {}", path.display()))?;
        let mut tar = tar::Archive::new(file);
        let mut entries = HashMap::new();
        for entry in tar
            .entries_with_seek()
            .ctx(|| format!("reading {}", path.display()))?
        {
            let entry = entry.ctx(|| format!("reading {}", path.display()))?;
            let name = entry
                .path()
                .ctx(|| format!("reading {}", path.display()))?
                .to_string_lossy()
                .trim_start_matches("./")
                .to_string();
            if entry.header().entry_type().is_file() {
                entries.insert(name, (entry.raw_file_position(), entry.size()));
            }
        }
        Ok(Archive {
            path: path.to_path_buf(),
            entries,
        })
    }

    fn blob_name(digest: &str) -> Result<String> {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| Error::Invalid(format!("unsupported digest {digest:?}")))?;
        Ok(format!("blobs/sha256/{hex}"))
    }

    fn blob(&self, digest: &str) -> Result<Option<(u64, u64)>> {
        Ok(self.entries.get(&Archive::blob_name(digest)?).copied())
    }

    fn read(&self, name: &str) -> Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let &(offset, size) = self
            .entries
            .get(name)
            .ok_or_else(|| Error::Invalid(format!("{} has no {name}", self.path.display())))?;
        if size > 64 << 20 {
            return Err(Error::Invalid(format!("{name} is too large to be JSON")));
        }
        let mut f = File::open(&self.path).ctx(|| format!("opening {}", self.path.display()))?;
        f.seek(SeekFrom::Start(offset))
            .ctx(|| format!("reading {}", self.path.display()))?;
        let mut data = vec![0; size as usize];
        f.read_exact(&mut data)
            .ctx(|| format!("reading {name} from {}", self.path.display()))?;
        Ok(data)
    }

    fn json<T: DeserializeOwned>(&self, name: &str) -> Result<T> {
        serde_json::from_slice(&self.read(name)?).map_err(|source| Error::Json {
            context: format!("{name} in {}", self.path.display()),
            source,
        })
    }

    fn blob_json<T: DeserializeOwned>(&self, digest: &str) -> Result<T> {
        self.json(&Archive::blob_name(digest)?)
    }
}

/// The full form of an image reference, as the CRI looks images up: `busybox:1.36` →
/// `docker.io/library/busybox:1.36`, `example.com/x` → `example.com/x:latest`. `None` for
/// what is no reference (empty, spaces, upper case in the path).
pub fn normalize_reference(name: &str) -> Option<String> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace()) {
        return None;
    }
    let (first, rest) = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_string(), rest.to_string())
        }
        Some(_) => ("docker.io".to_string(), name.to_string()),
        None => ("docker.io".to_string(), format!("library/{name}")),
    };
    let (path, suffix) = match rest.find(['@', ':']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest.as_str(), ":latest"),
    };
    if path.is_empty() || path.chars().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    Some(format!("{first}/{path}{suffix}"))
}

fn is_index(media_type: &str) -> bool {
    media_type == MEDIA_TYPE_INDEX || media_type == MEDIA_TYPE_DOCKER_LIST
}

fn is_manifest(media_type: &str) -> bool {
    media_type == MEDIA_TYPE_MANIFEST || media_type == MEDIA_TYPE_DOCKER_MANIFEST
}

fn to_ctr(d: &Descriptor) -> CtrDescriptor {
    CtrDescriptor {
        media_type: d.media_type.clone(),
        digest: d.digest.clone(),
        size: d.size as i64,
        annotations: d
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}-{nanos}", std::process::id())
}

#[derive(Default)]
struct Counts {
    written: usize,
    present: usize,
}

/// Imports archives over one connection to containerd.
#[derive(Clone)]
pub struct Importer {
    channel: Channel,
    opts: ImportOptions,
}

impl Importer {
    pub fn new(channel: Channel, opts: ImportOptions) -> Importer {
        Importer { channel, opts }
    }

    /// A request in our namespace, under `lease` when given.
    fn req<T>(&self, msg: T, lease: Option<&str>) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        let md = req.metadata_mut();
        if let Ok(v) = MetadataValue::try_from(self.opts.namespace.as_str()) {
            md.insert(NAMESPACE_HEADER, v);
        }
        if let Some(v) = lease.and_then(|l| MetadataValue::try_from(l).ok()) {
            md.insert(LEASE_HEADER, v);
        }
        req
    }

    /// Imports every image named in the archive's `index.json`.
    pub async fn import_archive(&self, path: &Path) -> Result<Vec<ImportedImage>> {
        let start = Instant::now();
        let archive = {
            let p = path.to_path_buf();
            tokio::task::spawn_blocking(move || Archive::open(&p))
                .await
                .map_err(|e| Error::Invalid(format!("reading {}: {e}", path.display())))??
        };
        if !archive.entries.contains_key("oci-layout") {
            return Err(Error::Invalid(format!(
                "{} is not an OCI image layout (no oci-layout)",
                path.display()
            )));
        }
        let index: Index = archive.json("index.json")?;

        // A lease holds what we write until the image records reference it; it expires by
        // itself should we die half way.
        let lease = format!("minik8s-import-{}", unique());
        let expire = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
        LeasesClient::new(self.channel.clone())
            .create(self.req(
                CreateLeaseRequest {
                    id: lease.clone(),
                    labels: HashMap::from([("containerd.io/gc.expire".to_string(), expire)]),
                },
                None,
            ))
            .await
            .map_err(grpc("creating a lease"))?;

        let result = self.import_index(&archive, &index, &lease).await;
        if let Err(e) = LeasesClient::new(self.channel.clone())
            .delete(self.req(
                DeleteLeaseRequest {
                    id: lease.clone(),
                    sync: false,
                },
                None,
            ))
            .await
        {
            tracing::warn!(%lease, error = %e, "deleting the import lease");
        }
        let mut images = result?;
        let duration = start.elapsed();
        for image in &mut images {
            image.duration = duration;
            tracing::info!(
                image = %image.name,
                archive = %path.display(),
                digest = %image.target.digest,
                blobs_written = image.blobs_written,
                layers_unpacked = image.layers_unpacked,
                write_time = ?image.write_time,
                unpack_time = ?image.unpack_time,
                ?duration,
                "imported image"
            );
        }
        Ok(images)
    }

    async fn import_index(
        &self,
        archive: &Archive,
        index: &Index,
        lease: &str,
    ) -> Result<Vec<ImportedImage>> {
        let mut out = Vec::new();
        for desc in &index.manifests {
            let Some(name) = desc
                .annotations
                .get(ANNOTATION_CONTAINERD_NAME)
                .or_else(|| desc.annotations.get(ANNOTATION_REF_NAME))
            else {
                tracing::warn!(digest = %desc.digest, archive = %archive.path.display(), "skipping a manifest with no name");
                continue;
            };
            let name = normalize_reference(name).ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: {name:?} is not an image reference",
                    archive.path.display()
                ))
            })?;
            out.push(self.import_image(archive, &name, desc, lease).await?);
        }
        if out.is_empty() {
            return Err(Error::Invalid(format!(
                "{} names no image",
                archive.path.display()
            )));
        }
        Ok(out)
    }

    async fn import_image(
        &self,
        archive: &Archive,
        name: &str,
        target: &Descriptor,
        lease: &str,
    ) -> Result<ImportedImage> {
        let mut counts = Counts::default();
        let started = Instant::now();
        let (manifest, config_digest) = if is_index(&target.media_type) {
            let index: Index = archive.blob_json(&target.digest)?;
            let mut chosen = None;
            let mut labels = BTreeMap::new();
            for (i, child) in index.manifests.iter().enumerate() {
                labels.insert(
                    format!("containerd.io/gc.ref.content.m.{i}"),
                    child.digest.clone(),
                );
                if !is_manifest(&child.media_type) || archive.blob(&child.digest)?.is_none() {
                    continue; // another platform's, not in this archive
                }
                let m = self
                    .write_manifest(archive, child, lease, &mut counts)
                    .await?;
                let fits = child.platform.as_ref().is_none_or(|p| {
                    p.os == self.opts.platform.os
                        && p.architecture == self.opts.platform.architecture
                });
                if fits && chosen.is_none() {
                    chosen = Some(m);
                }
            }
            self.write_blob(archive, target, labels, lease, &mut counts)
                .await?;
            let m: Manifest = chosen.ok_or_else(|| {
                Error::Invalid(format!(
                    "{name}: no manifest for {}/{} in {}",
                    self.opts.platform.os,
                    self.opts.platform.architecture,
                    archive.path.display()
                ))
            })?;
            let c = m.config.digest.clone();
            (m, c)
        } else if is_manifest(&target.media_type) {
            let m = self
                .write_manifest(archive, target, lease, &mut counts)
                .await?;
            let c = m.config.digest.clone();
            (m, c)
        } else {
            return Err(Error::Invalid(format!(
                "{name}: unsupported media type {}",
                target.media_type
            )));
        };

        let write_time = started.elapsed();
        let started = Instant::now();
        let config: ImageConfig = archive.blob_json(&config_digest)?;
        let (chain_id, layers_unpacked) = self
            .unpack(&manifest.layers, &config.rootfs.diff_ids, lease)
            .await?;
        let unpack_time = started.elapsed();

        // What the garbage collector follows: image → target → config/layers; config and
        // image → the snapshot chain (as containerd's own unpack labels the config).
        let snapshot_label = format!("containerd.io/gc.ref.snapshot.{}", self.opts.snapshotter);
        self.update_labels(
            &config_digest,
            BTreeMap::from([(snapshot_label.clone(), chain_id.clone())]),
            lease,
        )
        .await?;
        let image = Image {
            name: name.to_string(),
            labels: HashMap::from([
                (snapshot_label, chain_id.clone()),
                ("io.cri-containerd.image".to_string(), "managed".to_string()),
            ]),
            target: Some(to_ctr(target)),
            created_at: None,
            updated_at: None,
        };
        self.put_image(image, lease).await?;
        Ok(ImportedImage {
            name: name.to_string(),
            archive: archive.path.clone(),
            target: target.clone(),
            config_digest,
            chain_id,
            blobs_written: counts.written,
            blobs_present: counts.present,
            layers_unpacked,
            write_time,
            unpack_time,
            duration: Duration::ZERO,
        })
    }

    async fn put_image(&self, image: Image, lease: &str) -> Result<()> {
        let mut images = ImagesClient::new(self.channel.clone());
        let name = image.name.clone();
        let exists = match images
            .get(self.req(GetImageRequest { name: name.clone() }, Some(lease)))
            .await
        {
            Ok(_) => true,
            Err(s) if s.code() == Code::NotFound => false,
            Err(s) => return Err(grpc(format!("getting image {name}"))(s)),
        };
        if !exists {
            match images
                .create(self.req(
                    CreateImageRequest {
                        image: Some(image.clone()),
                        ..Default::default()
                    },
                    Some(lease),
                ))
                .await
            {
                Ok(_) => return Ok(()),
                Err(s) if s.code() == Code::AlreadyExists => {}
                Err(s) => return Err(grpc(format!("creating image {name}"))(s)),
            }
        }
        images
            .update(self.req(
                UpdateImageRequest {
                    image: Some(image),
                    ..Default::default()
                },
                Some(lease),
            ))
            .await
            .map_err(grpc(format!("updating image {name}")))?;
        Ok(())
    }

    /// Writes a manifest's layers and config, then the manifest labelled with references to
    /// them.
    async fn write_manifest(
        &self,
        archive: &Archive,
        desc: &Descriptor,
        lease: &str,
        counts: &mut Counts,
    ) -> Result<Manifest> {
        let manifest: Manifest = archive.blob_json(&desc.digest)?;
        let mut labels = BTreeMap::new();
        for (i, layer) in manifest.layers.iter().enumerate() {
            self.write_blob(archive, layer, BTreeMap::new(), lease, counts)
                .await?;
            labels.insert(
                format!("containerd.io/gc.ref.content.l.{i}"),
                layer.digest.clone(),
            );
        }
        self.write_blob(archive, &manifest.config, BTreeMap::new(), lease, counts)
            .await?;
        labels.insert(
            "containerd.io/gc.ref.content.config".to_string(),
            manifest.config.digest.clone(),
        );
        self.write_blob(archive, desc, labels, lease, counts)
            .await?;
        Ok(manifest)
    }

    async fn update_labels(
        &self,
        digest: &str,
        labels: BTreeMap<String, String>,
        lease: &str,
    ) -> Result<()> {
        if labels.is_empty() {
            return Ok(());
        }
        let paths = labels.keys().map(|k| format!("labels.{k}")).collect();
        ContentClient::new(self.channel.clone())
            .update(self.req(
                UpdateRequest {
                    info: Some(Info {
                        digest: digest.to_string(),
                        labels: labels.into_iter().collect(),
                        ..Default::default()
                    }),
                    update_mask: Some(prost_types::FieldMask { paths }),
                },
                Some(lease),
            ))
            .await
            .map_err(grpc(format!("labelling {digest}")))?;
        Ok(())
    }

    /// Writes one blob from the archive unless the content store has it (then only its labels
    /// are set).
    async fn write_blob(
        &self,
        archive: &Archive,
        desc: &Descriptor,
        labels: BTreeMap<String, String>,
        lease: &str,
        counts: &mut Counts,
    ) -> Result<()> {
        let mut content = ContentClient::new(self.channel.clone());
        let digest = desc.digest.clone();
        match content
            .info(self.req(
                InfoRequest {
                    digest: digest.clone(),
                },
                Some(lease),
            ))
            .await
        {
            Ok(_) => {
                counts.present += 1;
                return self.update_labels(&digest, labels, lease).await;
            }
            Err(s) if s.code() == Code::NotFound => {}
            Err(s) => return Err(grpc(format!("content info {digest}"))(s)),
        }
        let (offset, size) = archive.blob(&digest)?.ok_or_else(|| {
            Error::Invalid(format!(
                "{}: blob {digest} is neither in the archive nor in containerd",
                archive.path.display()
            ))
        })?;
        if size != desc.size {
            return Err(Error::Invalid(format!(
                "{}: blob {digest} has {size} bytes, its descriptor says {}",
                archive.path.display(),
                desc.size
            )));
        }

        let reference = format!("minik8s-import-{digest}");
        let (tx, rx) = tokio::sync::mpsc::channel::<WriteContentRequest>(2);
        let send = |msg: WriteContentRequest| {
            let tx = tx.clone();
            async move {
                tx.send(msg)
                    .await
                    .map_err(|_| Error::Invalid("containerd closed the write stream".into()))
            }
        };
        let ctx = format!("writing {digest}");
        send(WriteContentRequest {
            action: WriteAction::Stat as i32,
            r#ref: reference.clone(),
            total: size as i64,
            expected: digest.clone(),
            ..Default::default()
        })
        .await?;
        let mut responses = match content
            .write(self.req(tokio_stream::wrappers::ReceiverStream::new(rx), Some(lease)))
            .await
        {
            Ok(r) => r.into_inner(),
            Err(s) if s.code() == Code::AlreadyExists => {
                counts.present += 1;
                return self.update_labels(&digest, labels, lease).await;
            }
            Err(s) => return Err(grpc(ctx)(s)),
        };
        let next = |r: std::result::Result<Option<_>, tonic::Status>| match r {
            Ok(Some(resp)) => Ok(Ok(resp)),
            Ok(None) => Err(Error::Invalid(format!(
                "{digest}: containerd ended the write stream early"
            ))),
            Err(s) => Ok(Err(s)),
        };
        let stat = match next(responses.message().await)? {
            Ok(stat) => stat,
            Err(s) if s.code() == Code::AlreadyExists => {
                counts.present += 1;
                return self.update_labels(&digest, labels, lease).await;
            }
            Err(s) => return Err(grpc(ctx)(s)),
        };
        // An earlier, interrupted write under the same ref resumes where it stopped.
        let mut done = (stat.offset.max(0) as u64).min(size);
        let mut file = tokio::fs::File::open(&archive.path)
            .await
            .ctx(|| format!("opening {}", archive.path.display()))?;
        file.seek(std::io::SeekFrom::Start(offset + done))
            .await
            .ctx(|| format!("reading {}", archive.path.display()))?;
        let mut buf = vec![0u8; CHUNK];
        while done < size {
            let n = ((size - done) as usize).min(CHUNK);
            file.read_exact(&mut buf[..n])
                .await
                .ctx(|| format!("reading {digest} from {}", archive.path.display()))?;
            send(WriteContentRequest {
                action: WriteAction::Write as i32,
                r#ref: reference.clone(),
                offset: done as i64,
                data: buf[..n].to_vec(),
                ..Default::default()
            })
            .await?;
            let resp = next(responses.message().await)?.map_err(grpc(ctx.clone()))?;
            done += n as u64;
            if resp.offset as u64 != done {
                return Err(Error::Invalid(format!(
                    "{digest}: containerd is at offset {}, we wrote up to {done}",
                    resp.offset
                )));
            }
        }
        send(WriteContentRequest {
            action: WriteAction::Commit as i32,
            r#ref: reference.clone(),
            total: size as i64,
            offset: done as i64,
            expected: digest.clone(),
            labels: labels.clone().into_iter().collect(),
            ..Default::default()
        })
        .await?;
        match next(responses.message().await)? {
            Ok(_) => counts.written += 1,
            Err(s) if s.code() == Code::AlreadyExists => {
                counts.present += 1;
                self.update_labels(&digest, labels, lease).await?;
            }
            Err(s) => return Err(grpc(format!("committing {digest}"))(s)),
        }
        drop(tx);
        while let Ok(Some(_)) = responses.message().await {}
        Ok(())
    }

    /// Applies the layers into snapshots named by their chain IDs, skipping those that exist.
    /// Returns the top chain ID and how many layers were applied.
    async fn unpack(
        &self,
        layers: &[Descriptor],
        diff_ids: &[String],
        lease: &str,
    ) -> Result<(String, usize)> {
        if layers.is_empty() || layers.len() != diff_ids.len() {
            return Err(Error::Invalid(format!(
                "{} layers but {} diff IDs",
                layers.len(),
                diff_ids.len()
            )));
        }
        let chain = chain_ids(diff_ids);
        let sn = self.opts.snapshotter.clone();
        let mut snapshots = SnapshotsClient::new(self.channel.clone());
        let mut diff = DiffClient::new(self.channel.clone());
        let mut parent = String::new();
        let mut applied = 0;
        for (i, layer) in layers.iter().enumerate() {
            let chain_id = &chain[i];
            match snapshots
                .stat(self.req(
                    StatSnapshotRequest {
                        snapshotter: sn.clone(),
                        key: chain_id.clone(),
                    },
                    Some(lease),
                ))
                .await
            {
                Ok(_) => {
                    parent = chain_id.clone();
                    continue;
                }
                Err(s) if s.code() == Code::NotFound => {}
                Err(s) => return Err(grpc(format!("stat snapshot {chain_id}"))(s)),
            }
            let key = format!("extract-{} {chain_id}", unique());
            let mounts = snapshots
                .prepare(self.req(
                    PrepareSnapshotRequest {
                        snapshotter: sn.clone(),
                        key: key.clone(),
                        parent: parent.clone(),
                        labels: HashMap::new(),
                    },
                    Some(lease),
                ))
                .await
                .map_err(grpc(format!(
                    "preparing snapshot for layer {}",
                    layer.digest
                )))?
                .into_inner()
                .mounts;
            let result = async {
                let resp = diff
                    .apply(self.req(
                        ApplyRequest {
                            diff: Some(to_ctr(layer)),
                            mounts,
                            ..Default::default()
                        },
                        Some(lease),
                    ))
                    .await
                    .map_err(grpc(format!("applying layer {}", layer.digest)))?
                    .into_inner();
                let got = resp.applied.map(|d| d.digest).unwrap_or_default();
                if got != diff_ids[i] {
                    return Err(Error::Invalid(format!(
                        "layer {} unpacked to {got}, the config says {}",
                        layer.digest, diff_ids[i]
                    )));
                }
                match snapshots
                    .commit(self.req(
                        CommitSnapshotRequest {
                            snapshotter: sn.clone(),
                            name: chain_id.clone(),
                            key: key.clone(),
                            ..Default::default()
                        },
                        Some(lease),
                    ))
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(s) if s.code() == Code::AlreadyExists => Ok(false),
                    Err(s) => Err(grpc(format!("committing snapshot {chain_id}"))(s)),
                }
            }
            .await;
            let committed = match result {
                Ok(c) => c,
                Err(e) => {
                    self.remove_snapshot(&key, lease).await;
                    return Err(e);
                }
            };
            if committed {
                applied += 1;
            } else {
                // Someone else unpacked the same layer meanwhile.
                self.remove_snapshot(&key, lease).await;
            }
            parent = chain_id.clone();
        }
        Ok((parent, applied))
    }

    async fn remove_snapshot(&self, key: &str, lease: &str) {
        if let Err(e) = SnapshotsClient::new(self.channel.clone())
            .remove(self.req(
                RemoveSnapshotRequest {
                    snapshotter: self.opts.snapshotter.clone(),
                    key: key.to_string(),
                },
                Some(lease),
            ))
            .await
        {
            tracing::warn!(%key, error = %e, "removing an unfinished snapshot");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::normalize_reference as n;

    #[test]
    fn references_normalize_as_the_cri_does() {
        assert_eq!(n("busybox:1.36").unwrap(), "docker.io/library/busybox:1.36");
        assert_eq!(n("busybox").unwrap(), "docker.io/library/busybox:latest");
        assert_eq!(
            n("library/busybox").unwrap(),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(n("me/app:v1").unwrap(), "docker.io/me/app:v1");
        assert_eq!(
            n("docker.io/library/busybox:1.36").unwrap(),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(
            n("registry.k8s.io/pause:3.9").unwrap(),
            "registry.k8s.io/pause:3.9"
        );
        assert_eq!(n("localhost:5000/x").unwrap(), "localhost:5000/x:latest");
        assert_eq!(n("localhost/x:1").unwrap(), "localhost/x:1");
        let pinned = format!("quay.io/a/b@sha256:{}", "0".repeat(64));
        assert_eq!(n(&pinned).unwrap(), pinned);
        assert!(n("").is_none());
        assert!(n("a b").is_none());
        assert!(n("Busybox").is_none());
    }
}
