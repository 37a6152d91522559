//! Pod volumes against an in-process API server: ConfigMaps and Secrets are created and changed
//! through kube-rs, volumes set up, refreshed and torn down in a temporary pods directory.
//! tmpfs and bind mounts need root (tests run as root here and in CI).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use minik8s_kubelet::volumes::{Plugin, VolumeError, VolumeManager, read_termination_message};
use serde_json::json;
use testkit::jwt_claims as claims;
use testkit::{Backend, InProcess};

struct Env {
    _server: InProcess,
    client: kube::Client,
    tmp: tempfile::TempDir,
    vm: VolumeManager,
}

impl Env {
    async fn start() -> Env {
        let server = InProcess::start(Backend::Sqlite).await.unwrap();
        let client = server.client();
        let tmp = tempfile::tempdir().unwrap();
        let vm = VolumeManager::new(tmp.path().join("pods"), client.clone());
        Env {
            _server: server,
            client,
            tmp,
            vm,
        }
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn config_map(&self, name: &str, data: serde_json::Value) {
        let cm = serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
        self.config_maps()
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }

    async fn patch_config_map(&self, name: &str, data: serde_json::Value) {
        self.config_maps()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": data})),
            )
            .await
            .unwrap();
    }

    async fn secret(&self, name: &str, data: serde_json::Value) {
        let s = serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data}))
            .unwrap();
        self.secrets()
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // Never leave mounts behind in /tmp, whatever failed.
        for uid in self.vm.known_pods() {
            let dir = self.vm.pod_dir(&uid);
            for m in mounts_under(&dir) {
                let _ = nix::mount::umount2(&m, nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
}

/// (mount point, fstype, super options) of every mount.
fn mount_table() -> Vec<(PathBuf, String, String)> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?.replace("\\040", " ");
            let mut r = right.split(' ');
            let fstype = r.next()?.to_string();
            let opts = r.nth(1).unwrap_or_default().to_string();
            Some((PathBuf::from(point), fstype, opts))
        })
        .collect()
}

fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(dir) = dir.canonicalize() else {
        return vec![];
    };
    mount_table()
        .into_iter()
        .map(|(p, _, _)| p)
        .filter(|p| p.starts_with(&dir))
        .collect()
}

fn fstype(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    mount_table()
        .into_iter()
        .rev()
        .find(|(p, _, _)| *p == path)
        .map(|(_, t, _)| t)
}

fn tmpfs_size(path: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(path).unwrap();
    s.blocks() * s.fragment_size()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn pod(uid: &str, volumes: serde_json::Value, container: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": uid,
                     "labels": {"app": "web", "tier": "front"},
                     "annotations": {"build": "1"}},
        "spec": {"containers": [container], "volumes": volumes}
    }))
    .unwrap()
}

fn container(mounts: serde_json::Value) -> serde_json::Value {
    json!({"name": "app", "image": "busybox",
           "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
           "terminationMessagePath": "/dev/termination-log",
           "volumeMounts": mounts})
}

fn data_dir(vol: &Path) -> PathBuf {
    fs::read_link(vol.join("..data")).unwrap()
}

#[tokio::test]
async fn projections_setup_refresh_and_teardown() {
    let env = Env::start().await;
    env.config_map("cfg", json!({"a": "1", "b": "2"})).await;
    env.secret("sec", json!({"user": "admin", "pass": "s3cr3t"}))
        .await;
    let host = env.tmp.path().join("host/data");
    let volumes = json!([
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "cfg-items", "configMap": {"name": "cfg", "defaultMode": 0o600,
            "items": [{"key": "a", "path": "conf/a.txt", "mode": 0o444}]}},
        {"name": "sec", "secret": {"secretName": "sec"}},
        {"name": "sec-opt", "secret": {"secretName": "absent", "optional": true}},
        {"name": "dapi", "downwardAPI": {"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}}
        ]}},
        {"name": "proj", "projected": {"sources": [
            {"configMap": {"name": "cfg", "items": [{"key": "b", "path": "b"}]}},
            {"secret": {"name": "sec", "items": [{"key": "user", "path": "creds/user"}]}},
            {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
        ]}},
        {"name": "scratch", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {"name": "host", "hostPath": {"path": host, "type": "DirectoryOrCreate"}}
    ]);
    let mut p = pod("uid-1", volumes, container(json!([])));
    let vols = env.vm.setup(&p).await.unwrap();
    assert_eq!(vols.volumes.len(), 9);

    // configMap: on disk, 0777 directory, all keys, 0644.
    let cfg = env.vm.volume_dir("uid-1", Plugin::ConfigMap, "cfg");
    assert_eq!(vols.get("cfg").unwrap().path, cfg);
    assert!(vols.get("cfg").unwrap().read_only);
    assert!(cfg.ends_with("pods/uid-1/volumes/kubernetes.io~configmap/cfg"));
    assert_eq!(fstype(&cfg), None, "configMap volumes are not mounts");
    assert_eq!(mode(&cfg), 0o777);
    assert_eq!(read(&cfg.join("a")), "1");
    assert_eq!(fs::read_link(cfg.join("a")).unwrap(), Path::new("..data/a"));
    assert_eq!(mode(&cfg.join("a")), 0o644);
    let items = env.vm.volume_dir("uid-1", Plugin::ConfigMap, "cfg-items");
    assert_eq!(read(&items.join("conf/a.txt")), "1");
    assert_eq!(mode(&items.join("conf/a.txt")), 0o444);
    assert!(!items.join("b").exists());

    // secret: its own tmpfs, sized by the pod's memory limit, files 0644.
    let sec = env.vm.volume_dir("uid-1", Plugin::Secret, "sec");
    assert_eq!(fstype(&sec).as_deref(), Some("tmpfs"));
    assert_eq!(tmpfs_size(&sec), 64 << 20);
    assert_eq!(read(&sec.join("pass")), "s3cr3t");
    assert_eq!(mode(&sec.join("pass")), 0o644);
    let opt = env.vm.volume_dir("uid-1", Plugin::Secret, "sec-opt");
    assert!(opt.join("..data").exists());
    assert_eq!(fs::read_dir(opt.join(data_dir(&opt))).unwrap().count(), 0);

    // downwardAPI: tmpfs, upstream's formats.
    let dapi = env.vm.volume_dir("uid-1", Plugin::DownwardApi, "dapi");
    assert_eq!(fstype(&dapi).as_deref(), Some("tmpfs"));
    assert_eq!(read(&dapi.join("labels")), "app=\"web\"\ntier=\"front\"");
    assert_eq!(read(&dapi.join("name")), "web");
    assert_eq!(read(&dapi.join("mem")), "64");

    // projected: one tmpfs with all sources.
    let proj = env.vm.volume_dir("uid-1", Plugin::Projected, "proj");
    assert_eq!(fstype(&proj).as_deref(), Some("tmpfs"));
    assert_eq!(read(&proj.join("b")), "2");
    assert_eq!(read(&proj.join("creds/user")), "admin");
    assert_eq!(read(&proj.join("ns")), "default");

    // emptyDir: a 0777 directory; Memory: a tmpfs of sizeLimit.
    let scratch = env.vm.volume_dir("uid-1", Plugin::EmptyDir, "scratch");
    assert!(scratch.is_dir());
    assert_eq!(mode(&scratch), 0o777);
    let mem = env.vm.volume_dir("uid-1", Plugin::EmptyDir, "mem");
    assert_eq!(fstype(&mem).as_deref(), Some("tmpfs"));
    assert_eq!(tmpfs_size(&mem), 16 << 20);

    // hostPath: created 0755, and the volume is the host path itself.
    assert!(host.is_dir());
    assert_eq!(mode(&host), 0o755);
    assert_eq!(vols.get("host").unwrap().path, host);
    assert!(!vols.get("host").unwrap().read_only);

    // Idempotent: a second sync changes nothing and mounts nothing twice.
    let before = data_dir(&cfg);
    let mounts_before = mounts_under(&env.vm.pod_dir("uid-1")).len();
    fs::write(scratch.join("keep"), "x").unwrap();
    let again = env.vm.setup(&p).await.unwrap();
    assert_eq!(again, vols);
    assert_eq!(data_dir(&cfg), before);
    assert_eq!(mounts_under(&env.vm.pod_dir("uid-1")).len(), mounts_before);
    assert_eq!(mounts_before, 5, "sec, sec-opt, dapi, proj, mem");
    assert_eq!(read(&scratch.join("keep")), "x");

    // Refresh without changes: nothing rewritten.
    env.vm.refresh(&p).await.unwrap();
    assert_eq!(data_dir(&cfg), before);

    // A ConfigMap change: a new ..data, the old directory gone, the projection updated too.
    let a_handle = fs::File::open(cfg.join("a")).unwrap();
    env.patch_config_map("cfg", json!({"a": "10", "b": null, "c": "3"}))
        .await;
    // The projected volume's required key "b" is gone: an error for that volume alone, whose
    // old content stays; the other volumes are refreshed.
    let err = env.vm.refresh(&p).await.unwrap_err();
    assert_eq!(
        err,
        VolumeError::SetUp {
            volume: "proj".into(),
            reason: "configmap references non-existent config key: b".into()
        }
    );
    assert_eq!(read(&proj.join("b")), "2");
    let after = data_dir(&cfg);
    assert_ne!(after, before);
    assert!(!cfg.join(&before).exists());
    assert_eq!(read(&cfg.join("a")), "10");
    assert_eq!(read(&cfg.join("c")), "3");
    assert!(fs::symlink_metadata(cfg.join("b")).is_err());
    let mut old = String::new();
    std::io::Read::read_to_string(&mut &a_handle, &mut old).unwrap();
    assert_eq!(old, "1", "an open file keeps the old version");
    assert_eq!(read(&items.join("conf/a.txt")), "10");
    env.patch_config_map("cfg", json!({"b": "20"})).await;
    env.vm.refresh(&p).await.unwrap();
    assert_eq!(read(&proj.join("b")), "20");

    // Pod metadata changes reach the downward API files.
    p.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("version".into(), "v2".into());
    env.vm.refresh(&p).await.unwrap();
    assert_eq!(
        read(&dapi.join("labels")),
        "app=\"web\"\ntier=\"front\"\nversion=\"v2\""
    );

    // An optional Secret that appears later fills its volume.
    env.secret("absent", json!({"k": "v"})).await;
    env.vm.refresh(&p).await.unwrap();
    assert_eq!(read(&opt.join("k")), "v");

    // Teardown: every tmpfs unmounted, the directory gone; the host path stays.
    assert_eq!(env.vm.known_pods(), vec!["uid-1".to_string()]);
    env.vm.teardown("uid-1").await.unwrap();
    assert!(mounts_under(&env.vm.pods_dir().join("uid-1")).is_empty());
    assert!(!env.vm.pod_dir("uid-1").exists());
    assert!(env.vm.known_pods().is_empty());
    assert!(host.is_dir());
    // Tearing down twice is fine.
    env.vm.teardown("uid-1").await.unwrap();
}

#[tokio::test]
async fn missing_sources_fail_with_upstreams_messages() {
    let env = Env::start().await;
    let p = pod(
        "uid-2",
        json!([
            {"name": "cfg", "configMap": {"name": "nope"}},
            {"name": "sec", "secret": {"secretName": "nope"}},
            {"name": "scratch", "emptyDir": {}}
        ]),
        container(json!([])),
    );
    let err = env.vm.setup(&p).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "MountVolume.SetUp failed for volume \"cfg\" : configmap \"nope\" not found"
    );
    assert_eq!(err.reason(), "FailedMount");
    // The volumes that could be set up were; the failed Secret left no tmpfs behind.
    assert!(
        env.vm
            .volume_dir("uid-2", Plugin::EmptyDir, "scratch")
            .is_dir()
    );
    assert!(mounts_under(&env.vm.pod_dir("uid-2")).is_empty());
    assert!(!env.vm.volume_dir("uid-2", Plugin::Secret, "sec").exists());

    env.config_map("nope", json!({"k": "v"})).await;
    let err = env.vm.setup(&p).await.unwrap_err();
    assert_eq!(
        err,
        VolumeError::SetUp {
            volume: "sec".into(),
            reason: "secret \"nope\" not found".into()
        }
    );
    env.secret("nope", json!({"k": "v"})).await;
    let vols = env.vm.setup(&p).await.unwrap();
    assert_eq!(read(&vols.get("sec").unwrap().path.join("k")), "v");

    // A missing key named in items.
    let keyed = pod(
        "uid-3",
        json!([{"name": "cfg", "configMap": {"name": "nope", "items": [{"key": "x", "path": "x"}]}}]),
        container(json!([])),
    );
    assert_eq!(
        env.vm.setup(&keyed).await.unwrap_err().to_string(),
        "MountVolume.SetUp failed for volume \"cfg\" : configmap references non-existent config key: x"
    );

    // hostPath type checks.
    let missing = env.tmp.path().join("missing");
    let hp = pod(
        "uid-4",
        json!([{"name": "h", "hostPath": {"path": missing, "type": "Directory"}}]),
        container(json!([])),
    );
    assert_eq!(
        env.vm.setup(&hp).await.unwrap_err(),
        VolumeError::SetUp {
            volume: "h".into(),
            reason: format!(
                "hostPath type check failed: {} is not a directory",
                missing.display()
            )
        }
    );

    // A token for an account that does not exist.
    let token = pod(
        "uid-5",
        json!([{"name": "kube-api-access", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}]),
        container(json!([])),
    );
    let err = env.vm.setup(&token).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "MountVolume.SetUp failed for volume \"kube-api-access\" : failed to fetch token: serviceaccounts \"default\" not found"
    );
    assert!(mounts_under(&env.vm.pod_dir("uid-5")).is_empty());

    for uid in env.vm.known_pods() {
        env.vm.teardown(&uid).await.unwrap();
    }
    assert!(env.vm.known_pods().is_empty());
}

fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn find<'a>(mounts: &'a [cri::Mount], container_path: &str) -> &'a cri::Mount {
    mounts
        .iter()
        .find(|m| m.container_path == container_path)
        .unwrap_or_else(|| panic!("no mount at {container_path}: {mounts:?}"))
}

#[tokio::test]
async fn container_mounts_subpaths_and_termination_log() {
    let env = Env::start().await;
    env.config_map("cfg", json!({"app.conf": "x=1"})).await;
    let host = env.tmp.path().join("host");
    fs::create_dir_all(&host).unwrap();
    let mounts = json!([
        {"name": "cfg", "mountPath": "/etc/app"},
        {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
        {"name": "scratch", "mountPath": "/data", "readOnly": true},
        {"name": "scratch", "mountPath": "/logs", "subPathExpr": "logs/$(POD_NAME)"},
        {"name": "host", "mountPath": "/host", "mountPropagation": "HostToContainer"},
        {"name": "host", "mountPath": "/host-bi", "mountPropagation": "Bidirectional"}
    ]);
    let p = pod(
        "uid-6",
        json!([
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "host", "hostPath": {"path": host}}
        ]),
        container(mounts),
    );
    let c: Container = p.spec.as_ref().unwrap().containers[0].clone();
    let vols = env.vm.setup(&p).await.unwrap();
    let env_vars = env_of(&[("POD_NAME", "web")]);
    let m = env.vm.mounts(&p, &vols, &c, &env_vars).unwrap();
    assert_eq!(m.len(), 7);

    let cfg = find(&m, "/etc/app");
    assert!(cfg.readonly, "configMap volumes are always read-only");
    assert_eq!(
        cfg.propagation,
        cri::MountPropagation::PropagationPrivate as i32
    );
    assert_eq!(
        PathBuf::from(&cfg.host_path),
        env.vm.volume_dir("uid-6", Plugin::ConfigMap, "cfg")
    );

    // subPath of a configMap key: the checked file bind-mounted under volume-subpaths.
    let conf = find(&m, "/etc/app.conf");
    assert!(conf.readonly);
    let target = env.vm.pod_dir("uid-6").join("volume-subpaths/cfg/app/1");
    assert_eq!(PathBuf::from(&conf.host_path), target);
    assert_eq!(read(&target), "x=1");
    assert!(mounts_under(&target).len() == 1);

    let data = find(&m, "/data");
    assert!(data.readonly);
    let scratch = env.vm.volume_dir("uid-6", Plugin::EmptyDir, "scratch");
    assert_eq!(PathBuf::from(&data.host_path), scratch);

    // subPathExpr: expanded, created inside the volume with its mode, bind-mounted.
    let logs = find(&m, "/logs");
    assert!(!logs.readonly);
    assert!(scratch.join("logs/web").is_dir());
    assert_eq!(mode(&scratch.join("logs/web")), 0o777);
    fs::write(scratch.join("logs/web/out"), "hello").unwrap();
    assert_eq!(read(&Path::new(&logs.host_path).join("out")), "hello");

    assert_eq!(
        find(&m, "/host").propagation,
        cri::MountPropagation::PropagationHostToContainer as i32
    );
    assert_eq!(
        find(&m, "/host-bi").propagation,
        cri::MountPropagation::PropagationBidirectional as i32
    );

    // The termination-message file: a fresh empty 0666 file per container instance.
    let log = find(&m, "/dev/termination-log");
    let log_path = PathBuf::from(&log.host_path);
    assert!(log_path.starts_with(env.vm.pod_dir("uid-6").join("containers/app")));
    assert_eq!(mode(&log_path), 0o666);
    fs::write(&log_path, "bye").unwrap();
    assert_eq!(
        read_termination_message(&m, "/dev/termination-log").as_deref(),
        Some("bye")
    );

    // A restarted container: new termination file, the same subPath bind mounts reused.
    let m2 = env.vm.mounts(&p, &vols, &c, &env_vars).unwrap();
    assert_ne!(find(&m2, "/dev/termination-log").host_path, log.host_path);
    assert_eq!(find(&m2, "/etc/app.conf").host_path, conf.host_path);
    assert_eq!(mounts_under(&target).len(), 1, "not mounted twice");

    // subPathExpr with an unset variable.
    let mut bad = c.clone();
    bad.volume_mounts = Some(vec![
        serde_json::from_value(
            json!({"name": "scratch", "mountPath": "/x", "subPathExpr": "$(NOPE)/a"}),
        )
        .unwrap(),
    ]);
    let err = env.vm.mounts(&p, &vols, &bad, &env_vars).unwrap_err();
    assert_eq!(err.to_string(), "missing value for NOPE");
    assert_eq!(err.reason(), "CreateContainerConfigError");

    // A volume the pod does not have.
    bad.volume_mounts = Some(vec![
        serde_json::from_value(json!({"name": "ghost", "mountPath": "/x"})).unwrap(),
    ]);
    assert_eq!(
        env.vm
            .mounts(&p, &vols, &bad, &env_vars)
            .unwrap_err()
            .to_string(),
        "cannot find volume \"ghost\" to mount into container \"app\""
    );

    env.vm.teardown("uid-6").await.unwrap();
    assert!(!env.vm.pod_dir("uid-6").exists());
    assert!(host.is_dir(), "the host path survives");
}

#[tokio::test]
async fn subpath_escapes_are_refused() {
    let env = Env::start().await;
    let secret_file = env.tmp.path().join("outside/secret");
    fs::create_dir_all(secret_file.parent().unwrap()).unwrap();
    fs::write(&secret_file, "host secret").unwrap();
    let p = pod(
        "uid-7",
        json!([{"name": "scratch", "emptyDir": {}}]),
        container(json!([])),
    );
    let vols = env.vm.setup(&p).await.unwrap();
    let scratch = env.vm.volume_dir("uid-7", Plugin::EmptyDir, "scratch");
    // What a container could plant in its emptyDir: symlinks leading out.
    std::os::unix::fs::symlink(&secret_file, scratch.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../../../../../outside", scratch.join("rel-link")).unwrap();
    std::os::unix::fs::symlink("/", scratch.join("root")).unwrap();
    fs::create_dir_all(scratch.join("ok/dir")).unwrap();
    std::os::unix::fs::symlink("ok/dir", scratch.join("inner-link")).unwrap();

    let with = |mount: serde_json::Value| -> Container {
        let mut c: Container = serde_json::from_value(container(json!([mount]))).unwrap();
        c.termination_message_path = Some(String::new());
        c
    };
    let try_mount = |mount: serde_json::Value| {
        env.vm
            .mounts(&p, &vols, &with(mount), &env_of(&[("DIR", "..")]))
    };

    for sub in [
        "abs-link",
        "rel-link",
        "rel-link/secret",
        "root/etc",
        "root",
    ] {
        let err =
            try_mount(json!({"name": "scratch", "mountPath": "/x", "subPath": sub})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to prepare subPath for volumeMount \"scratch\" of container \"app\"",
            "{sub}"
        );
    }
    // A subpath to create below an escaping symlink is refused before anything is created.
    let err =
        try_mount(json!({"name": "scratch", "mountPath": "/x", "subPath": "rel-link/newdir"}))
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to create subPath directory for volumeMount \"scratch\" of container \"app\""
    );
    assert!(!env.tmp.path().join("outside/newdir").exists());
    // `..` is refused outright, also when it comes from the environment.
    let err = try_mount(json!({"name": "scratch", "mountPath": "/x", "subPath": "ok/../../x"}))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unable to provision SubPath `ok/../../x`: must not contain '..'"
    );
    let err = try_mount(json!({"name": "scratch", "mountPath": "/x", "subPathExpr": "$(DIR)/x"}))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unable to provision SubPath `../x`: must not contain '..'"
    );
    let err =
        try_mount(json!({"name": "scratch", "mountPath": "/x", "subPath": "/etc"})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "error SubPath `/etc` must not be an absolute path"
    );
    // A symlink that stays inside the volume is fine: its target is what gets mounted.
    let ok =
        try_mount(json!({"name": "scratch", "mountPath": "/x", "subPath": "inner-link"})).unwrap();
    assert_eq!(ok.len(), 1);
    fs::write(scratch.join("ok/dir/f"), "in").unwrap();
    assert_eq!(read(&Path::new(&ok[0].host_path).join("f")), "in");
    // Nothing from outside was ever mounted.
    for m in mounts_under(&env.vm.pod_dir("uid-7")) {
        assert!(fs::metadata(m.join("secret")).is_err());
    }

    env.vm.teardown("uid-7").await.unwrap();
    assert_eq!(read(&secret_file), "host secret");
    assert!(!env.vm.pod_dir("uid-7").exists());
}

#[tokio::test]
async fn fs_group_ownership() {
    let env = Env::start().await;
    env.secret("sec", json!({"k": "v"})).await;
    let mut p = pod(
        "uid-8",
        json!([
            {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
            {"name": "scratch", "emptyDir": {}}
        ]),
        container(json!([])),
    );
    p.spec.as_mut().unwrap().security_context =
        Some(serde_json::from_value(json!({"fsGroup": 1234})).unwrap());
    let vols = env.vm.setup(&p).await.unwrap();
    let sec = &vols.get("sec").unwrap().path;
    let meta = fs::metadata(sec.join("k")).unwrap();
    assert_eq!(meta.gid(), 1234);
    // Read-only volumes: group read added to the 0400 file, as upstream does.
    assert_eq!(meta.mode() & 0o7777, 0o440);
    let scratch = fs::metadata(&vols.get("scratch").unwrap().path).unwrap();
    assert_eq!(scratch.gid(), 1234);
    assert_eq!(scratch.mode() & 0o7777, 0o2777);
    env.vm.teardown("uid-8").await.unwrap();
}

#[tokio::test]
async fn shared_pods_dir() {
    let env = Env::start().await;
    env.vm.make_shared().unwrap();
    let dir = env.vm.pods_dir().canonicalize().unwrap();
    let line = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
        .map(str::to_string)
        .expect("the pods dir is a mount point");
    assert!(line.contains(" shared:"), "{line}");
    // Idempotent.
    env.vm.make_shared().unwrap();
    nix::mount::umount2(&dir, nix::mount::MntFlags::MNT_DETACH).unwrap();
}

/// A container run directly by runc, with the CRI mounts as containerd turns them into OCI
/// mounts (rbind, ro/rw, rprivate/rslave/rshared).
struct RuncContainer {
    id: String,
    state: PathBuf,
}

impl RuncContainer {
    fn start(bundle: &Path, mounts: &[cri::Mount]) -> RuncContainer {
        let rootfs = bundle.join("rootfs");
        for d in ["bin", "proc", "dev", "sys", "etc", "tmp"] {
            fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
        for tool in ["sh", "cat", "ls", "sleep", "grep", "echo", "readlink"] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(tool)).unwrap();
        }
        let spec = std::process::Command::new("runc")
            .args(["spec", "--bundle"])
            .arg(bundle)
            .status()
            .unwrap();
        assert!(spec.success());
        let mut config: serde_json::Value =
            serde_json::from_slice(&fs::read(bundle.join("config.json")).unwrap()).unwrap();
        config["process"]["terminal"] = json!(false);
        config["process"]["args"] = json!(["sleep", "1000"]);
        let oci_mounts = config["mounts"].as_array_mut().unwrap();
        for m in mounts {
            let propagation = match cri::MountPropagation::try_from(m.propagation) {
                Ok(cri::MountPropagation::PropagationHostToContainer) => "rslave",
                Ok(cri::MountPropagation::PropagationBidirectional) => "rshared",
                _ => "rprivate",
            };
            oci_mounts.push(json!({
                "destination": m.container_path, "type": "bind", "source": m.host_path,
                "options": ["rbind", if m.readonly { "ro" } else { "rw" }, propagation]
            }));
        }
        fs::write(
            bundle.join("config.json"),
            serde_json::to_vec(&config).unwrap(),
        )
        .unwrap();
        let c = RuncContainer {
            id: format!("minik8s-volumes-{}", std::process::id()),
            state: bundle.join("state"),
        };
        let out = std::process::Command::new("runc")
            .arg("--root")
            .arg(&c.state)
            .args(["run", "-d", "--bundle"])
            .arg(bundle)
            .arg(&c.id)
            // The detached container keeps runc's stdio: no pipes, or waiting for them hangs.
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(fs::File::create(bundle.join("runc.log")).unwrap())
            .status()
            .unwrap();
        assert!(
            out.success(),
            "runc run: {}",
            fs::read_to_string(bundle.join("runc.log")).unwrap_or_default()
        );
        c
    }

    /// Runs `sh -c script` in the container: (success, stdout + stderr).
    fn sh(&self, script: &str) -> (bool, String) {
        let out = std::process::Command::new("runc")
            .arg("--root")
            .arg(&self.state)
            .args(["exec", &self.id, "sh", "-c", script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }
}

impl Drop for RuncContainer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("runc")
            .arg("--root")
            .arg(&self.state)
            .args(["delete", "--force", &self.id])
            .output();
    }
}

fn have_runc() -> bool {
    let found = Path::new("/bin/busybox").exists()
        && std::process::Command::new("runc")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("runc or /bin/busybox missing: skipping the container test");
    }
    found
}

/// What a container sees: volumes, atomic updates while it runs, read-only mounts, subPaths
/// and the termination-message file, through a real OCI runtime.
#[tokio::test]
async fn a_running_container_sees_volumes_and_updates() {
    if !have_runc() {
        return;
    }
    let env = Env::start().await;
    env.config_map("cfg", json!({"a": "1", "app.conf": "x=1"}))
        .await;
    env.secret("sec", json!({"pass": "s3cr3t"})).await;
    let p = pod(
        "uid-9",
        json!([
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "sec", "secret": {"secretName": "sec"}},
            {"name": "dapi", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"name": "scratch", "emptyDir": {}}
        ]),
        container(json!([
            {"name": "cfg", "mountPath": "/etc/app"},
            {"name": "cfg", "mountPath": "/etc/app.conf", "subPath": "app.conf"},
            {"name": "sec", "mountPath": "/etc/secret"},
            {"name": "dapi", "mountPath": "/etc/podinfo"},
            {"name": "scratch", "mountPath": "/data"},
            {"name": "scratch", "mountPath": "/logs", "subPathExpr": "logs/$(POD_NAME)"}
        ])),
    );
    let c: Container = p.spec.as_ref().unwrap().containers[0].clone();
    let vols = env.vm.setup(&p).await.unwrap();
    let mounts = env
        .vm
        .mounts(&p, &vols, &c, &env_of(&[("POD_NAME", "web")]))
        .unwrap();
    let bundle = env.tmp.path().join("bundle");
    let ctr = RuncContainer::start(&bundle, &mounts);

    assert_eq!(ctr.sh("cat /etc/app/a"), (true, "1".into()));
    assert_eq!(ctr.sh("cat /etc/app.conf"), (true, "x=1".into()));
    assert_eq!(ctr.sh("cat /etc/secret/pass"), (true, "s3cr3t".into()));
    assert_eq!(
        ctr.sh("cat /etc/podinfo/labels"),
        (true, "app=\"web\"\ntier=\"front\"".into())
    );
    let (_, proc_mounts) = ctr.sh("cat /proc/mounts");
    assert!(
        proc_mounts
            .lines()
            .any(|l| l.starts_with("tmpfs /etc/secret tmpfs ro")),
        "{proc_mounts}"
    );
    // Read-only volumes are read-only; emptyDir is writable and shared with the host.
    assert!(!ctr.sh("echo x > /etc/app/new").0);
    assert!(ctr.sh("echo y > /data/from-container").0);
    let scratch = env.vm.volume_dir("uid-9", Plugin::EmptyDir, "scratch");
    assert_eq!(read(&scratch.join("from-container")), "y\n");
    assert!(ctr.sh("echo line > /logs/out").0);
    assert_eq!(read(&scratch.join("logs/web/out")), "line\n");

    // An update appears in the running container, atomically, through the ..data swap.
    env.patch_config_map("cfg", json!({"a": "2"})).await;
    env.vm.refresh(&p).await.unwrap();
    assert_eq!(ctr.sh("cat /etc/app/a"), (true, "2".into()));
    assert_eq!(ctr.sh("readlink /etc/app/a"), (true, "..data/a\n".into()));
    // A subPath mount is pinned to the file it was made from, as upstream's.
    assert_eq!(ctr.sh("cat /etc/app.conf"), (true, "x=1".into()));

    // The termination message written in the container is read back on the host.
    assert!(ctr.sh("echo -n finished > /dev/termination-log").0);
    assert_eq!(
        read_termination_message(&mounts, "/dev/termination-log").as_deref(),
        Some("finished")
    );

    drop(ctr);
    env.vm.teardown("uid-9").await.unwrap();
    assert!(!env.vm.pod_dir("uid-9").exists());
}

/// What ServiceAccount admission mounts: a token bound to the pod from TokenRequest, the
/// cluster CA and the namespace, in one projected volume; the token is kept, not asked for
/// again on every refresh.
#[tokio::test]
async fn service_account_token_projection() {
    let env = Env::start().await;
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(env.client.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap(),
        )
        .await
        .unwrap();
    env.config_map("kube-root-ca.crt", json!({"ca.crt": "PEM"}))
        .await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    let projected = json!({"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"serviceAccountToken": {"path": "vault-token", "audience": "vault", "expirationSeconds": 7200}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}});
    let spec = |fs_group: Option<i64>| {
        json!({"serviceAccountName": "robot",
               "securityContext": fs_group.map(|g| json!({"fsGroup": g})).unwrap_or(json!({})),
               "containers": [{"name": "app", "image": "busybox"}],
               "volumes": [projected.clone()]})
    };
    let p = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "tok"}, "spec": spec(None)}))
                .unwrap(),
        )
        .await
        .unwrap();
    let uid = p.metadata.uid.clone().unwrap();
    let vols = env.vm.setup(&p).await.unwrap();
    let dir = vols.get("kube-api-access-abcde").unwrap().path.clone();
    assert_eq!(fstype(&dir).as_deref(), Some("tmpfs"));
    let token = read(&dir.join("token"));
    let c = claims(&token);
    assert_eq!(c["sub"], "system:serviceaccount:default:robot");
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "tok");
    assert_eq!(c["kubernetes.io"]["pod"]["uid"], uid.as_str());
    assert_eq!(
        c["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        3600
    );
    assert_eq!(mode(&dir.join("..data/token")), 0o644);
    let vault = claims(&read(&dir.join("vault-token")));
    assert_eq!(vault["aud"], json!(["vault"]));
    assert_eq!(
        vault["exp"].as_i64().unwrap() - vault["iat"].as_i64().unwrap(),
        7200
    );
    assert_eq!(read(&dir.join("ca.crt")), "PEM");
    assert_eq!(read(&dir.join("namespace")), "default");

    // The periodic refresh keeps a fresh token: the file is not rewritten.
    let version = data_dir(&dir);
    env.vm.refresh(&p).await.unwrap();
    assert_eq!(data_dir(&dir), version);
    assert_eq!(read(&dir.join("token")), token);
    env.vm.teardown(&uid).await.unwrap();

    // With an fsGroup only the owner (and, through the group, the pod) reads the token.
    let p = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "tok2"}, "spec": spec(Some(2000))}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let vols = env.vm.setup(&p).await.unwrap();
    let dir = vols.get("kube-api-access-abcde").unwrap().path.clone();
    let file = dir.join("..data/token");
    assert_eq!(mode(&file) & 0o077, 0o040, "{:o}", mode(&file));
    assert_eq!(fs::metadata(&file).unwrap().gid(), 2000);
    env.vm
        .teardown(p.metadata.uid.as_deref().unwrap())
        .await
        .unwrap();
}

/// Creates claim `name` (Pending) and, when `pv` is given, a volume bound to it, with the
/// claim bound as the PV controller binds it.
async fn claim_and_volume(env: &Env, name: &str, pv: Option<serde_json::Value>) {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), "default");
    let existing = claims.get_opt(name).await.unwrap();
    let claim = match existing {
        Some(c) => c,
        None => {
            let c = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
            }))
            .unwrap();
            claims.create(&PostParams::default(), &c).await.unwrap()
        }
    };
    let Some(mut spec) = pv else { return };
    let pv_name = format!("pv-{name}");
    spec["claimRef"] = json!({"namespace": "default", "name": name, "uid": claim.metadata.uid});
    spec["capacity"] = json!({"storage": "1Gi"});
    spec["accessModes"] = json!(["ReadWriteOnce"]);
    if spec.get("local").is_some() {
        // Upstream's validation: a local volume names the node it lives on.
        spec["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]}});
    }
    let volumes: Api<PersistentVolume> = Api::all(env.client.clone());
    let volume =
        serde_json::from_value(json!({"metadata": {"name": pv_name}, "spec": spec})).unwrap();
    volumes
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    claims
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"volumeName": pv_name}})),
        )
        .await
        .unwrap();
    claims
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await
        .unwrap();
}

fn claim_volume(name: &str, read_only: bool) -> serde_json::Value {
    json!([{"name": "data", "persistentVolumeClaim": {"claimName": name, "readOnly": read_only}}])
}

#[tokio::test]
async fn claims_wait_until_bound_then_mount_their_local_volume() {
    let env = Env::start().await;
    let disk = env.tmp.path().join("disk");
    fs::create_dir_all(&disk).unwrap();
    fs::write(disk.join("old"), "kept").unwrap();
    let mounts = json!([
        {"name": "data", "mountPath": "/data"},
        {"name": "data", "mountPath": "/sub", "subPath": "nested/dir"}
    ]);
    let mut p = pod("uid-claim", claim_volume("data", false), container(mounts));
    p.spec.as_mut().unwrap().security_context =
        Some(serde_json::from_value(json!({"fsGroup": 2345})).unwrap());

    let missing = env.vm.setup(&p).await.unwrap_err();
    assert_eq!(missing.reason(), "FailedMount");
    assert!(missing.waits_on_claims());
    assert_eq!(
        missing.to_string(),
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], \
         failed to process volumes=[data]: error processing PVC default/data: failed to fetch \
         PVC from API server: persistentvolumeclaims \"data\" not found"
    );
    claim_and_volume(&env, "data", None).await;
    assert_eq!(
        env.vm.setup(&p).await.unwrap_err().to_string(),
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], \
         failed to process volumes=[data]: error processing PVC default/data: PVC is not bound"
    );

    claim_and_volume(&env, "data", Some(json!({"local": {"path": disk}}))).await;
    let vols = env.vm.setup(&p).await.unwrap();
    let vol = vols.get("data").unwrap();
    assert_eq!(vol.plugin, Plugin::Local);
    assert_eq!(
        vol.path,
        env.vm
            .pod_dir("uid-claim")
            .join("volumes/kubernetes.io~local-volume/pv-data")
    );
    assert!(!vol.read_only);
    // The node's directory, bind-mounted, with the pod's fsGroup.
    assert_eq!(read(&vol.path.join("old")), "kept");
    let root = fs::metadata(&disk).unwrap();
    assert_eq!(root.gid(), 2345);
    assert_eq!(root.mode() & 0o7777, 0o2770 | (root.mode() & 0o007));
    assert_eq!(fs::metadata(disk.join("old")).unwrap().gid(), 2345);
    // Setting up again changes nothing.
    assert_eq!(env.vm.setup(&p).await.unwrap(), vols);

    let c: Container = p.spec.as_ref().unwrap().containers[0].clone();
    let m = env.vm.mounts(&p, &vols, &c, &BTreeMap::new()).unwrap();
    assert!(!find(&m, "/data").readonly);
    assert!(
        disk.join("nested/dir").is_dir(),
        "subPath made in the volume"
    );

    env.vm.teardown("uid-claim").await.unwrap();
    assert!(!env.vm.pod_dir("uid-claim").exists());
    assert_eq!(
        read(&disk.join("old")),
        "kept",
        "the node's data outlives the pod"
    );
}

#[tokio::test]
async fn claims_honour_read_only_and_refuse_what_cannot_be_mounted() {
    let env = Env::start().await;
    let host = env.tmp.path().join("host");
    fs::create_dir_all(&host).unwrap();
    claim_and_volume(
        &env,
        "host",
        Some(json!({"hostPath": {"path": host, "type": "Directory"}})),
    )
    .await;
    let p = pod(
        "uid-ro",
        claim_volume("host", true),
        container(json!([{"name": "data", "mountPath": "/data"}])),
    );
    let vols = env.vm.setup(&p).await.unwrap();
    let vol = vols.get("data").unwrap();
    assert_eq!(
        (vol.plugin, vol.path.clone(), vol.read_only),
        (Plugin::HostPath, host.clone(), true)
    );
    let c: Container = p.spec.as_ref().unwrap().containers[0].clone();
    let m = env.vm.mounts(&p, &vols, &c, &BTreeMap::new()).unwrap();
    assert!(
        find(&m, "/data").readonly,
        "the claim's readOnly makes the mount read-only"
    );
    env.vm.teardown("uid-ro").await.unwrap();

    // A local path that is gone.
    claim_and_volume(
        &env,
        "gone",
        Some(json!({"local": {"path": env.tmp.path().join("gone")}})),
    )
    .await;
    let p = pod(
        "uid-gone",
        claim_volume("gone", false),
        container(json!([])),
    );
    assert_eq!(
        env.vm.setup(&p).await.unwrap_err().to_string(),
        format!(
            "MountVolume.NewMounter initialization failed for volume \"pv-gone\" : path {:?} does not exist",
            env.tmp.path().join("gone").display().to_string()
        )
    );

    // A source this kubelet has no plugin for.
    claim_and_volume(
        &env,
        "nfs",
        Some(json!({"nfs": {"server": "nfs.example", "path": "/export"}})),
    )
    .await;
    let p = pod("uid-nfs", claim_volume("nfs", false), container(json!([])));
    assert_eq!(
        env.vm.setup(&p).await.unwrap_err().to_string(),
        "MountVolume.SetUp failed for volume \"pv-nfs\" : nfs volumes are not supported by this kubelet"
    );

    // Block volumes are refused, whether mounted or used as devices.
    claim_and_volume(
        &env,
        "block",
        Some(json!({"volumeMode": "Block", "local": {"path": host}})),
    )
    .await;
    let mut p = pod(
        "uid-block",
        claim_volume("block", false),
        container(json!([])),
    );
    p.spec.as_mut().unwrap().containers[0].volume_devices = Some(vec![
        serde_json::from_value(json!({"name": "data", "devicePath": "/dev/xvda"})).unwrap(),
    ]);
    let e = env.vm.setup(&p).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], \
         failed to process volumes=[data]: error processing PVC default/block: volume data has \
         volumeMode Block: block volumes are not supported by this kubelet"
    );
    for uid in ["uid-gone", "uid-nfs", "uid-block"] {
        env.vm.teardown(uid).await.unwrap();
    }
}
