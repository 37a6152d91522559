//! End to end without a registry: build the pause and busybox images, start a private
//! containerd in a temporary directory, import them through containerd's API, and run a busybox
//! container in a pod sandbox through the CRI. Needs root and Debian's containerd, runc and
//! busybox-static (hack/lib.sh `install_packages`).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use containerd_client::services::v1::content_client::ContentClient;
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::snapshots::StatSnapshotRequest;
use containerd_client::services::v1::snapshots::snapshots_client::SnapshotsClient;
use containerd_client::services::v1::{
    CreateRequest, DeleteImageRequest, DeleteRequest, InfoRequest,
};

use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerState, ContainerStatusRequest,
    CreateContainerRequest, ImageSpec, ImageStatusRequest, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopPodSandboxRequest,
};
use minik8s_kubelet::containerd::{Containerd, ContainerdConfig};
use minik8s_kubelet::images::build::build;
use minik8s_kubelet::images::oci::{
    ANNOTATION_REF_NAME, Descriptor, Index, MEDIA_TYPE_INDEX, MEDIA_TYPE_MANIFEST, Platform,
    sha256_digest,
};
use minik8s_kubelet::images::{BuildOptions, ImageKind, ImportOptions, import_archive, import_dir};
use testkit::eventually;
use tonic::transport::Channel;

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Root and the runtime are needed; without root the test says so and passes (CI runs as
/// root, where missing binaries are a failure).
fn runtime_available() -> bool {
    if !is_root() {
        eprintln!("skipping: containers need root");
        return false;
    }
    for bin in ["/usr/bin/containerd", "/usr/sbin/runc", "/bin/busybox"] {
        assert!(
            Path::new(bin).exists(),
            "{bin} is missing: run hack/lib.sh install_packages"
        );
    }
    true
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Waits until the CRI image service knows `image` (the CRI plugin learns of imported images
/// from containerd's events, so just after an import it may not yet) and returns its ID and
/// tags.
async fn image_status(channel: &Channel, image: &str) -> (String, Vec<String>) {
    let images = ImageServiceClient::new(channel.clone());
    eventually(
        Duration::from_secs(5),
        &format!("CRI ImageStatus {image}"),
        || {
            let mut images = images.clone();
            async move {
                let status = images
                    .image_status(ImageStatusRequest {
                        image: Some(ImageSpec {
                            image: image.to_string(),
                            ..Default::default()
                        }),
                        verbose: false,
                    })
                    .await
                    .expect("ImageStatus")
                    .into_inner();
                status.image.map(|i| (i.id, i.repo_tags))
            }
        },
    )
    .await
}
/// A request in the CRI's containerd namespace.
fn ns<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut()
        .insert("containerd-namespace", "k8s.io".parse().unwrap());
    req
}

/// Runs containerd's garbage collector now (deleting a lease with `sync` does).
async fn collect_garbage(channel: &Channel) {
    let mut leases = LeasesClient::new(channel.clone());
    let id = "minik8s-test-gc".to_string();
    leases
        .create(ns(CreateRequest {
            id: id.clone(),
            labels: Default::default(),
        }))
        .await
        .expect("creating a lease");
    leases
        .delete(ns(DeleteRequest { id, sync: true }))
        .await
        .expect("deleting a lease");
}

async fn snapshot_exists(channel: &Channel, key: &str) -> bool {
    SnapshotsClient::new(channel.clone())
        .stat(ns(StatSnapshotRequest {
            snapshotter: "overlayfs".to_string(),
            key: key.to_string(),
        }))
        .await
        .is_ok()
}

async fn content_labels(channel: &Channel, digest: &str) -> Option<HashMap<String, String>> {
    ContentClient::new(channel.clone())
        .info(ns(InfoRequest {
            digest: digest.to_string(),
        }))
        .await
        .ok()
        .and_then(|r| r.into_inner().info)
        .map(|i| i.labels)
}

/// Copies an OCI layout archive, naming an image index (over its one manifest) instead of
/// the manifest.
fn write_index_archive(from: &Path, to: &Path, name: &str) {
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    let mut ar = tar::Archive::new(std::fs::File::open(from).unwrap());
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if !e.header().entry_type().is_file() {
            continue;
        }
        let path = e.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut data).unwrap();
        entries.push((path, data));
    }
    let old: Index =
        serde_json::from_slice(&entries.iter().find(|(p, _)| p == "index.json").unwrap().1)
            .unwrap();
    let mut manifest = old.manifests[0].clone();
    manifest.annotations.clear();
    manifest.platform = Some(Platform::host());
    assert_eq!(manifest.media_type, MEDIA_TYPE_MANIFEST);
    let index = Index {
        schema_version: 2,
        media_type: Some(MEDIA_TYPE_INDEX.to_string()),
        manifests: vec![manifest],
        annotations: Default::default(),
    };
    let index_blob = serde_json::to_vec(&index).unwrap();
    let top = Index {
        schema_version: 2,
        media_type: Some(MEDIA_TYPE_INDEX.to_string()),
        manifests: vec![Descriptor {
            media_type: MEDIA_TYPE_INDEX.to_string(),
            digest: sha256_digest(&index_blob),
            size: index_blob.len() as u64,
            annotations: [(ANNOTATION_REF_NAME.to_string(), name.to_string())].into(),
            platform: None,
        }],
        annotations: Default::default(),
    };
    entries.retain(|(p, _)| p != "index.json");
    entries.push((
        format!(
            "blobs/sha256/{}",
            sha256_digest(&index_blob).trim_start_matches("sha256:")
        ),
        index_blob,
    ));
    entries.push(("index.json".to_string(), serde_json::to_vec(&top).unwrap()));
    let mut out = tar::Builder::new(std::fs::File::create(to).unwrap());
    for (path, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        out.append_data(&mut h, path, data.as_slice()).unwrap();
    }
    out.into_inner().unwrap();
}

/// A pod sandbox (host network) with one started container.
struct Pod {
    pod: String,
    container: String,
    log: std::path::PathBuf,
    sandbox_time: Duration,
    container_time: Duration,
}

fn host_network() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// Starts `command` in a container of `image` in a fresh pod sandbox on the host network (no
/// CNI needed).
async fn start_pod(
    channel: &Channel,
    logs: &Path,
    name: &str,
    image: &str,
    command: &[&str],
) -> Pod {
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let log_dir = logs.join(name);
    std::fs::create_dir_all(&log_dir).unwrap();
    let sandbox_config = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "default".to_string(),
            attempt: 0,
        }),
        log_directory: log_dir.to_string_lossy().into_owned(),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(host_network()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let t = Instant::now();
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox")
        .into_inner()
        .pod_sandbox_id;
    let sandbox_time = t.elapsed();

    let t = Instant::now();
    let container = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: name.to_string(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                command: command.iter().map(|s| s.to_string()).collect(),
                log_path: format!("{name}.log"),
                linux: Some(LinuxContainerConfig {
                    security_context: Some(LinuxContainerSecurityContext {
                        namespace_options: Some(host_network()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sandbox_config: Some(sandbox_config),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    rt.start_container(StartContainerRequest {
        container_id: container.clone(),
    })
    .await
    .expect("StartContainer");
    Pod {
        pod,
        container,
        log: log_dir.join(format!("{name}.log")),
        sandbox_time,
        container_time: t.elapsed(),
    }
}

/// What one pod with one container showed.
struct Ran {
    exit_code: i32,
    log: String,
    sandbox: Duration,
    container: Duration,
}

/// Runs `command` in a container of `image` in a fresh host-network pod sandbox, waits for it
/// to exit, and removes the sandbox.
async fn run_pod(channel: &Channel, logs: &Path, name: &str, image: &str, command: &[&str]) -> Ran {
    let pod = start_pod(channel, logs, name, image, command).await;
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let exit_code = eventually(Duration::from_secs(20), "the container to exit", || {
        let mut rt = rt.clone();
        let id = pod.container.clone();
        async move {
            let status = rt
                .container_status(ContainerStatusRequest {
                    container_id: id,
                    verbose: false,
                })
                .await
                .expect("ContainerStatus")
                .into_inner()
                .status
                .expect("a status");
            (status.state == ContainerState::ContainerExited as i32).then_some(status.exit_code)
        }
    })
    .await;
    let log = std::fs::read_to_string(&pod.log).unwrap_or_default();
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: pod.pod.clone(),
    })
    .await
    .expect("StopPodSandbox");
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: pod.pod.clone(),
    })
    .await
    .expect("RemovePodSandbox");
    Ran {
        exit_code,
        log,
        sandbox: pod.sandbox_time,
        container: pod.container_time,
    }
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(needle) && !name.eq(&std::process::id().to_string()) {
            out.push(format!("{name}: {cmdline}"));
        }
    }
    out
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| Path::new(m).starts_with(&dir))
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busybox_runs_from_imported_images() {
    init_tracing();
    if !runtime_available() {
        return;
    }
    let start = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let images_dir = dir.path().join("images");
    // Debian 13's busybox, as `minik8s image build` makes it: apt fetches it (about 1 MB, and
    // the release's package lists once per cache; `MINIK8S_IMAGE_CACHE` keeps them).
    let mut opts = BuildOptions::new(&images_dir);
    if let Some(cache) = std::env::var_os("MINIK8S_IMAGE_CACHE") {
        opts.cache_dir = cache.into();
    }
    let pause = build(ImageKind::Pause, &opts).expect("building pause");
    let busybox = build(ImageKind::Busybox, &opts).expect("building busybox");
    eprintln!(
        "built pause in {:?}, busybox in {:?}",
        pause.duration, busybox.duration
    );

    let t = Instant::now();
    let ctd = Containerd::start(
        ContainerdConfig::new(dir.path().join("containerd")),
        Duration::from_secs(20),
    )
    .await
    .expect("starting containerd");
    eprintln!("containerd ready in {:?}", t.elapsed());

    let imported = import_dir(&ctd.socket(), &images_dir, &ImportOptions::default())
        .await
        .expect("import");
    let mut names: Vec<&str> = imported.iter().map(|i| i.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "docker.io/library/busybox:1.36",
            "registry.k8s.io/pause:3.9"
        ]
    );
    for image in &imported {
        eprintln!(
            "imported {} in {:?} ({} blobs written in {:?}, {} layers unpacked in {:?})",
            image.name,
            image.duration,
            image.blobs_written,
            image.write_time,
            image.layers_unpacked,
            image.unpack_time
        );
        assert_eq!(image.blobs_written, 3, "config, manifest, layer");
        assert_eq!(image.layers_unpacked, 1);
    }
    let bb = imported
        .iter()
        .find(|i| i.name.contains("busybox"))
        .unwrap();
    assert_eq!(bb.target.digest, busybox.image.manifest.digest);
    assert_eq!(bb.config_digest, busybox.image.config_digest);

    // Importing again writes and unpacks nothing.
    let again = import_dir(&ctd.socket(), &images_dir, &ImportOptions::default())
        .await
        .expect("second import");
    for image in &again {
        assert_eq!(image.blobs_written, 0, "{}", image.name);
        assert_eq!(image.blobs_present, 3, "{}", image.name);
        assert_eq!(image.layers_unpacked, 0, "{}", image.name);
    }

    let channel = ctd.channel().await.expect("connecting");
    // Without the import's lease, the labels keep everything alive: a synchronous garbage
    // collection leaves the content and the snapshots in place.
    collect_garbage(&channel).await;
    for image in &imported {
        assert!(
            snapshot_exists(&channel, &image.chain_id).await,
            "{}",
            image.name
        );
        let labels = content_labels(&channel, &image.target.digest)
            .await
            .expect("the manifest");
        assert_eq!(
            labels.get("containerd.io/gc.ref.content.config"),
            Some(&image.config_digest)
        );
        assert!(labels.contains_key("containerd.io/gc.ref.content.l.0"));
        let labels = content_labels(&channel, &image.config_digest)
            .await
            .expect("the config");
        assert_eq!(
            labels.get("containerd.io/gc.ref.snapshot.overlayfs"),
            Some(&image.chain_id)
        );
    }

    // An image index (as multi-platform layouts have) imports too, labelled with its
    // manifests, and reuses the unpacked snapshot.
    let index_tar = dir.path().join("busybox-index.tar");
    let index_name = "docker.io/library/busybox:index";
    write_index_archive(&busybox.image.path, &index_tar, index_name);
    let idx = import_archive(&ctd.socket(), &index_tar, &ImportOptions::default())
        .await
        .expect("importing an index");
    assert_eq!(idx.len(), 1);
    assert_eq!(idx[0].target.media_type, MEDIA_TYPE_INDEX);
    assert_eq!(idx[0].blobs_written, 1, "only the index is new");
    assert_eq!(idx[0].layers_unpacked, 0);
    assert_eq!(idx[0].chain_id, bb.chain_id);
    let labels = content_labels(&channel, &idx[0].target.digest)
        .await
        .expect("the index");
    assert_eq!(
        labels.get("containerd.io/gc.ref.content.m.0"),
        Some(&busybox.image.manifest.digest)
    );
    image_status(&channel, "busybox:index").await;
    // Deleting that image collects the index and nothing the other image still holds.
    ImagesClient::new(channel.clone())
        .delete(ns(DeleteImageRequest {
            name: index_name.to_string(),
            sync: true,
            ..Default::default()
        }))
        .await
        .expect("deleting an image");
    assert!(
        content_labels(&channel, &idx[0].target.digest)
            .await
            .is_none()
    );
    assert!(
        content_labels(&channel, &busybox.image.manifest.digest)
            .await
            .is_some()
    );
    assert!(snapshot_exists(&channel, &bb.chain_id).await);

    // The CRI normalizes short names as docker.io/library/...
    let (id, tags) = image_status(&channel, "busybox:1.36").await;
    assert_eq!(id, busybox.image.config_digest);
    assert!(
        tags.contains(&"docker.io/library/busybox:1.36".to_string()),
        "{tags:?}"
    );
    let (pause_id, _) = image_status(&channel, "registry.k8s.io/pause:3.9").await;
    assert_eq!(pause_id, pause.image.config_digest);

    let ran = run_pod(
        &channel,
        &dir.path().join("logs"),
        "hello",
        "busybox:1.36",
        // Debian 12's busybox 1.35 crashed on `wget -T` (exit 139); this one reports the
        // refused connection.
        &[
            "sh",
            "-c",
            "echo hello; busybox | head -n 1; wget -q -T 2 -O- http://127.0.0.1:1/; echo wget=$?; sleep 1",
        ],
    )
    .await;
    eprintln!(
        "RunPodSandbox {:?}, CreateContainer+StartContainer {:?}",
        ran.sandbox, ran.container
    );
    assert_eq!(ran.exit_code, 0, "log: {}", ran.log);
    assert!(
        ran.log.lines().any(|l| l.ends_with(" stdout F hello")),
        "CRI log: {:?}",
        ran.log
    );
    assert!(
        ran.log.contains("BusyBox v1.37"),
        "busybox version: {:?}",
        ran.log
    );
    assert!(ran.log.contains("wget=1"), "wget -T: {:?}", ran.log);

    let t = Instant::now();
    ctd.shutdown().await;
    eprintln!(
        "containerd stopped in {:?}; whole test {:?}",
        t.elapsed(),
        start.elapsed()
    );
}

/// The python image: Debian's packages fetched with apt (network to Debian's mirror, tens of
/// MB), so not part of every run: `cargo test -p minik8s-kubelet --test images -- --ignored`.
/// `MINIK8S_IMAGE_CACHE` keeps the downloaded packages between runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "downloads Debian packages"]
async fn python_runs_from_imported_image() {
    init_tracing();
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let images_dir = dir.path().join("images");
    let mut opts = BuildOptions::new(&images_dir);
    if let Some(cache) = std::env::var_os("MINIK8S_IMAGE_CACHE") {
        opts.cache_dir = cache.into();
    }
    for kind in [ImageKind::Pause, ImageKind::Python] {
        let built = build(kind, &opts).expect("building");
        eprintln!(
            "built {kind} in {:?} ({} bytes)",
            built.duration, built.image.archive_size
        );
    }
    let ctd = Containerd::start(
        ContainerdConfig::new(dir.path().join("containerd")),
        Duration::from_secs(20),
    )
    .await
    .expect("starting containerd");
    for image in import_dir(&ctd.socket(), &images_dir, &ImportOptions::default())
        .await
        .expect("import")
    {
        eprintln!(
            "imported {} in {:?} (write {:?}, unpack {:?})",
            image.name, image.duration, image.write_time, image.unpack_time
        );
    }
    let channel = ctd.channel().await.expect("connecting");
    image_status(&channel, "python:3").await;
    let ran = run_pod(
        &channel,
        &dir.path().join("logs"),
        "py",
        "python:3",
        &[
            "python3",
            "-c",
            "import json, http.server, urllib.request, ssl, sqlite3; print('python ok')",
        ],
    )
    .await;
    assert_eq!(ran.exit_code, 0, "log: {}", ran.log);
    assert!(ran.log.contains("python ok"), "{}", ran.log);
    ctd.shutdown().await;
}

/// containerd can be stopped alone and a new one takes its containers over; one left running
/// by a dead parent is stopped by the next start; dropping one that still runs containers
/// takes its shims, their containers, cgroups and mounts with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_restarts_and_teardown() {
    init_tracing();
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let images_dir = dir.path().join("images");
    let opts = BuildOptions {
        busybox: Some("/bin/busybox".into()),
        ..BuildOptions::new(&images_dir)
    };
    build(ImageKind::Pause, &opts).expect("building pause");
    build(ImageKind::Busybox, &opts).expect("building busybox");
    let config = ContainerdConfig::new(dir.path().join("containerd"));
    let start = || Containerd::start(config.clone(), Duration::from_secs(20));
    let mut first = start().await.expect("starting containerd");
    let socket = first.socket().to_string_lossy().into_owned();
    import_dir(&first.socket(), &images_dir, &ImportOptions::default())
        .await
        .expect("import");
    let channel = first.channel().await.expect("connecting");
    image_status(&channel, "busybox:1.36").await;
    // A container that would outlive the test, with a marker to find it by.
    let marker = format!("sleep {}", 100_000 + std::process::id() % 100_000);
    let pod = start_pod(
        &channel,
        &dir.path().join("logs"),
        "sleeper",
        "busybox:1.36",
        &["sh", "-c", &marker],
    )
    .await;
    eventually(Duration::from_secs(10), "the container to run", || {
        let found = !processes_with(&marker).is_empty();
        async move { found.then_some(()) }
    })
    .await;
    assert!(!processes_with(&socket).is_empty(), "shims name the socket");
    assert!(!mounts_under(dir.path()).is_empty(), "a rootfs is mounted");

    // Stopped alone, containerd leaves the container running; the next one takes it over.
    first.stop_keeping_containers();
    assert!(!processes_with(&marker).is_empty(), "the container stopped");
    let second = start().await.expect("restarting containerd");
    assert_eq!(
        container_state(&second, &pod.container).await,
        ContainerState::ContainerRunning
    );

    // As if its parent had been killed: the next start stops it first.
    let second_pid = second.pid().unwrap();
    std::mem::forget(second);
    let third = start().await.expect("starting over a stale containerd");
    assert_ne!(third.pid(), Some(second_pid));
    assert!(
        processes_with(&config.config_path().to_string_lossy())
            .iter()
            .all(|p| !p.starts_with(&format!("{second_pid}:"))),
        "the stale containerd runs on"
    );
    assert_eq!(
        container_state(&third, &pod.container).await,
        ContainerState::ContainerRunning
    );

    let t = Instant::now();
    drop(third);
    eprintln!("containerd dropped in {:?}", t.elapsed());
    assert_eq!(
        processes_with(&marker),
        Vec::<String>::new(),
        "the container lives on"
    );
    assert_eq!(
        processes_with(&socket),
        Vec::<String>::new(),
        "a shim lives on"
    );
    assert_eq!(
        mounts_under(dir.path()),
        Vec::<String>::new(),
        "mounts are left"
    );
    assert_eq!(
        cgroups_of(&pod.container),
        Vec::<String>::new(),
        "cgroups are left"
    );
    assert_eq!(
        cgroups_of(&pod.pod),
        Vec::<String>::new(),
        "cgroups are left"
    );
}

async fn container_state(ctd: &Containerd, id: &str) -> ContainerState {
    let channel = ctd.channel().await.expect("connecting");
    let status = RuntimeServiceClient::new(channel)
        .container_status(ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await
        .expect("ContainerStatus")
        .into_inner()
        .status
        .expect("a status");
    ContainerState::try_from(status.state).expect("a known state")
}

/// containerd's default cgroup of a container, `/k8s.io/<id>`, in any hierarchy.
fn cgroups_of(id: &str) -> Vec<String> {
    let mut candidates = vec![Path::new("/sys/fs/cgroup/k8s.io").join(id)];
    for entry in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        candidates.push(entry.path().join("k8s.io").join(id));
    }
    candidates
        .into_iter()
        .filter(|p| p.is_dir())
        .map(|p| p.display().to_string())
        .collect()
}
