//! PersistentVolumes against the in-process API server: the binder (static binding of the
//! smallest fit, a too-large claim left Pending, pre-binding by either side), reclaiming
//! (Retain keeps a Released volume, Delete removes it and its `/tmp` directory, a volume
//! nothing can delete fails), the protection finalizers, and the local-path provisioner on a
//! temp dir with expansion of what it made.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use minik8s_api::volume::{
    ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_PROVISIONED_BY, ANN_SELECTED_NODE,
    ANN_STORAGE_PROVISIONER, LOCAL_PATH_PROVISIONER,
};
use minik8s_controllers::informers::Informers;
use minik8s_controllers::volume::{binder, expander, local_path, pv_protection, pvc_protection};
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually};

use crate::common::{WAIT, event_reasons};

struct Storage {
    _api: InProcess,
    client: Client,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl Drop for Storage {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Storage {
    /// The API server with the binder, both protection controllers and the expander.
    async fn start() -> Storage {
        testkit::init_tracing();
        let api = InProcess::start(Backend::Sqlite).await.unwrap();
        let client = api.client();
        let informers = Informers::new(client.clone());
        let tasks = vec![
            tokio::spawn(binder::run(informers.clone())),
            tokio::spawn(pv_protection::run(informers.clone())),
            tokio::spawn(pvc_protection::run(informers.clone())),
            tokio::spawn(expander::run(informers)),
        ];
        // Under /tmp, where upstream's hostPath deleter works.
        let dir = tempfile::Builder::new()
            .prefix("minik8s-pv-")
            .tempdir_in("/tmp")
            .unwrap();
        Storage {
            _api: api,
            client,
            tasks,
            dir,
        }
    }

    fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// A hostPath volume under the test's temp dir.
    async fn volume(&self, name: &str, size: &str, extra: Value) -> PersistentVolume {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        let mut v = json!({"metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": path}}});
        merge(&mut v, extra);
        let v: PersistentVolume = serde_json::from_value(v).unwrap();
        self.volumes()
            .create(&PostParams::default(), &v)
            .await
            .unwrap()
    }

    /// A claim with no class (static volumes only) unless `extra` says otherwise.
    async fn claim(&self, name: &str, size: &str, extra: Value) -> PersistentVolumeClaim {
        let mut c = json!({"metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "resources": {"requests": {"storage": size}}}});
        merge(&mut c, extra);
        let c: PersistentVolumeClaim = serde_json::from_value(c).unwrap();
        self.claims()
            .create(&PostParams::default(), &c)
            .await
            .unwrap()
    }

    async fn bound(&self, claim: &str) -> (PersistentVolumeClaim, PersistentVolume) {
        eventually(WAIT, &format!("{claim} bound"), || async {
            let c = self.claims().get(claim).await.ok()?;
            if phase_of_claim(&c) != "Bound" {
                return None;
            }
            let v = self.volumes().get(&volume_of(&c)).await.ok()?;
            (phase_of_volume(&v) == "Bound").then_some((c, v))
        })
        .await
    }

    async fn volume_phase(&self, name: &str, phase: &str) -> PersistentVolume {
        eventually(WAIT, &format!("{name} {phase}"), || async {
            let v = self.volumes().get(name).await.ok()?;
            (phase_of_volume(&v) == phase).then_some(v)
        })
        .await
    }

    async fn gone<K>(&self, api: &Api<K>, name: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        eventually(WAIT, &format!("{name} gone"), || async {
            matches!(api.get_opt(name).await, Ok(None)).then_some(())
        })
        .await
    }

    async fn events(&self, name: &str, reporter: &str) -> Vec<String> {
        event_reasons(&self.client, "default", name, reporter).await
    }

    async fn has_event(&self, name: &str, reporter: &str, reason: &str) {
        eventually(WAIT, &format!("{reason} about {name}"), || async {
            self.events(name, reporter)
                .await
                .iter()
                .any(|r| r == reason)
                .then_some(())
        })
        .await
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, extra) {
        for (k, v) in b {
            match a.get_mut(&k) {
                Some(existing @ Value::Object(_)) if v.is_object() => merge(existing, v),
                _ => {
                    a.insert(k, v);
                }
            }
        }
    }
}

fn phase_of_claim(c: &PersistentVolumeClaim) -> String {
    c.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn phase_of_volume(v: &PersistentVolume) -> String {
    v.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn volume_of(c: &PersistentVolumeClaim) -> String {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default()
}

fn annotations(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Vec<&str> {
    meta.annotations
        .iter()
        .flat_map(BTreeMap::keys)
        .map(String::as_str)
        .collect()
}

fn capacity(
    resources: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> String {
    resources
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_smallest_fitting_volume_is_bound_and_a_too_large_claim_waits() {
    let s = Storage::start().await;
    for (name, size) in [("small", "1Gi"), ("mid", "2Gi"), ("big", "10Gi")] {
        s.volume(name, size, json!({})).await;
    }
    s.claim("data", "1500Mi", json!({})).await;
    let (claim, volume) = s.bound("data").await;
    assert_eq!(volume.name_any(), "mid");
    assert_eq!(
        annotations(&claim.metadata),
        [ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER]
    );
    assert_eq!(annotations(&volume.metadata), [ANN_BOUND_BY_CONTROLLER]);
    let r = volume.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(r.uid, claim.metadata.uid);
    let status = claim.status.as_ref().unwrap();
    assert_eq!(capacity(status.capacity.as_ref()), "2Gi");
    assert_eq!(
        status.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_string()][..])
    );
    // Free volumes stay Available.
    assert_eq!(
        phase_of_volume(&s.volume_phase("small", "Available").await),
        "Available"
    );

    // Nothing holds 20Gi: Pending, and the binder says why.
    s.claim("huge", "20Gi", json!({})).await;
    s.has_event("huge", binder::REPORTER, "FailedBinding").await;
    let huge = s.claims().get("huge").await.unwrap();
    assert_eq!(phase_of_claim(&huge), "Pending");
    assert_eq!(volume_of(&huge), "");
    // A volume that fits appears: the waiting claim takes it, without a resync.
    s.volume("huger", "30Gi", json!({})).await;
    let (_, volume) = s.bound("huge").await;
    assert_eq!(volume.name_any(), "huger");
}

#[tokio::test]
async fn pre_bound_claims_and_volumes_bind_to_each_other() {
    let s = Storage::start().await;
    // The claim names a volume that does not exist yet.
    s.claim(
        "wants-named",
        "1Gi",
        json!({"spec": {"volumeName": "named"}}),
    )
    .await;
    s.volume("decoy", "1Gi", json!({})).await;
    s.volume("named", "5Gi", json!({})).await;
    let (claim, volume) = s.bound("wants-named").await;
    assert_eq!(volume.name_any(), "named");
    assert_eq!(annotations(&claim.metadata), [ANN_BIND_COMPLETED]);
    assert_eq!(annotations(&volume.metadata), [ANN_BOUND_BY_CONTROLLER]);

    // The volume names the claim: it wins over a smaller free one.
    s.volume(
        "reserved",
        "8Gi",
        json!({"spec": {"claimRef": {"namespace": "default", "name": "reserved-for"}}}),
    )
    .await;
    s.claim("reserved-for", "1Gi", json!({})).await;
    let (claim, volume) = s.bound("reserved-for").await;
    assert_eq!(volume.name_any(), "reserved");
    assert!(annotations(&volume.metadata).is_empty());
    assert_eq!(
        annotations(&claim.metadata),
        [ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER]
    );

    // A named volume that does not satisfy the claim: VolumeMismatch, Pending.
    s.volume("tiny", "100Mi", json!({})).await;
    s.claim("wants-tiny", "1Gi", json!({"spec": {"volumeName": "tiny"}}))
        .await;
    s.has_event("wants-tiny", binder::REPORTER, "VolumeMismatch")
        .await;
    assert_eq!(
        phase_of_claim(&s.claims().get("wants-tiny").await.unwrap()),
        "Pending"
    );
}

#[tokio::test]
async fn released_volumes_follow_their_reclaim_policy() {
    let s = Storage::start().await;
    let delete = |name: &str| {
        let claims = s.claims();
        let name = name.to_string();
        async move {
            claims
                .delete(&name, &DeleteParams::default())
                .await
                .unwrap()
        }
    };
    // Retain: Released, and it stays.
    s.volume(
        "kept",
        "1Gi",
        json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}}),
    )
    .await;
    s.claim("a", "1Gi", json!({})).await;
    s.bound("a").await;
    delete("a").await;
    s.gone(&s.claims(), "a").await;
    s.volume_phase("kept", "Released").await;
    assert!(s.dir.path().join("kept").is_dir());

    // Delete of a hostPath volume under /tmp: its directory and the volume go.
    s.volume(
        "erased",
        "1Gi",
        json!({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    )
    .await;
    s.claim("b", "1Gi", json!({})).await;
    assert_eq!(s.bound("b").await.1.name_any(), "erased");
    delete("b").await;
    s.gone(&s.volumes(), "erased").await;
    assert!(!s.dir.path().join("erased").exists());

    // Delete of a local volume: nothing here can delete it: Failed, with upstream's event.
    let local: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "stuck"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "local": {"path": "/mnt/x"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}}}}))
    .unwrap();
    s.volumes()
        .create(&PostParams::default(), &local)
        .await
        .unwrap();
    s.claim("c", "1Gi", json!({})).await;
    assert_eq!(s.bound("c").await.1.name_any(), "stuck");
    delete("c").await;
    let failed = s.volume_phase("stuck", "Failed").await;
    assert_eq!(
        failed.status.as_ref().unwrap().message.as_deref(),
        Some(
            "error getting deleter volume plugin for volume \"stuck\": no deletable volume plugin matched"
        )
    );
    // Events about volumes are in the default namespace, as upstream's recorder puts them.
    s.has_event("stuck", binder::REPORTER, "VolumeFailedDelete")
        .await;

    // Recycle: no recycler here.
    s.volume(
        "recycled",
        "1Gi",
        json!({"spec": {"persistentVolumeReclaimPolicy": "Recycle"}}),
    )
    .await;
    s.claim("d", "1Gi", json!({})).await;
    assert_eq!(s.bound("d").await.1.name_any(), "recycled");
    delete("d").await;
    s.volume_phase("recycled", "Failed").await;
    s.has_event("recycled", binder::REPORTER, "VolumeFailedRecycle")
        .await;
}

fn pod_using(claim: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "user"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1.36"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}))
    .unwrap()
}

#[tokio::test]
async fn claims_in_use_and_bound_volumes_are_protected() {
    let s = Storage::start().await;
    let vol = s.volume("pv", "1Gi", json!({})).await;
    assert_eq!(
        vol.metadata.finalizers.as_deref(),
        Some(&["kubernetes.io/pv-protection".to_string()][..])
    );
    let claim = s.claim("data", "1Gi", json!({})).await;
    assert_eq!(
        claim.metadata.finalizers.as_deref(),
        Some(&["kubernetes.io/pvc-protection".to_string()][..])
    );
    s.bound("data").await;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    pods.create(&PostParams::default(), &pod_using("data"))
        .await
        .unwrap();

    // A bound volume deleted: Terminating while bound.
    s.volumes()
        .delete("pv", &DeleteParams::default())
        .await
        .unwrap();
    // A claim in use deleted: Terminating while the pod runs.
    s.claims()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    // Until the pod goes, both stay (the claim is checked after every pod and claim change;
    // another claim's churn proves the controllers are running meanwhile).
    s.claim(
        "other",
        "1Gi",
        json!({"spec": {"storageClassName": "none"}}),
    )
    .await;
    s.has_event("other", binder::REPORTER, "ProvisioningFailed")
        .await;
    let data = s.claims().get("data").await.unwrap();
    assert!(data.metadata.deletion_timestamp.is_some());
    assert_eq!(phase_of_claim(&data), "Bound");
    let pv = s.volumes().get("pv").await.unwrap();
    assert!(pv.metadata.deletion_timestamp.is_some());

    // The pod finishes: the claim goes, the volume is released and goes too.
    let mut user = pods.get("user").await.unwrap();
    user.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
    pods.replace_status("user", &PostParams::default(), &user)
        .await
        .unwrap();
    s.gone(&s.claims(), "data").await;
    s.gone(&s.volumes(), "pv").await;
}

#[tokio::test]
async fn local_path_provisions_on_the_selected_node_grows_and_deletes() {
    let s = Storage::start().await;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1",
        "labels": {"kubernetes.io/hostname": "n1"}}}))
    .unwrap();
    Api::<Node>::all(s.client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let data_dir = s.dir.path().join("node");
    let options = local_path::LocalPathOptions {
        node_name: "n1".into(),
        data_dir: data_dir.clone(),
    };
    let provisioner = tokio::spawn(local_path::run(
        s.client.clone(),
        Informers::new(s.client.clone()),
        options,
    ));

    // No class named: the default class (local-path, WaitForFirstConsumer) is given.
    let claim = s
        .claim("data", "1Gi", json!({"spec": {"storageClassName": null}}))
        .await;
    assert_eq!(
        claim.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some("local-path")
    );
    s.has_event("data", binder::REPORTER, "WaitForFirstConsumer")
        .await;
    let waiting = s.claims().get("data").await.unwrap();
    assert!(!annotations(&waiting.metadata).contains(&ANN_STORAGE_PROVISIONER));

    // The scheduler picks n1.
    s.claims()
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}})),
        )
        .await
        .unwrap();
    let (claim, volume) = s.bound("data").await;
    let uid = claim.uid().unwrap();
    assert_eq!(volume.name_any(), format!("pvc-{uid}"));
    let dir = data_dir
        .join("storage")
        .join(format!("pvc-{uid}_default_data"));
    assert!(dir.is_dir(), "{}", dir.display());
    let spec = volume.spec.as_ref().unwrap();
    assert_eq!(
        spec.local.as_ref().map(|l| l.path.clone()),
        Some(dir.display().to_string())
    );
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(
        volume
            .annotations()
            .get(ANN_PROVISIONED_BY)
            .map(String::as_str),
        Some(LOCAL_PATH_PROVISIONER)
    );
    assert_eq!(
        claim
            .annotations()
            .get(ANN_STORAGE_PROVISIONER)
            .map(String::as_str),
        Some(LOCAL_PATH_PROVISIONER)
    );
    let reporter = format!("{LOCAL_PATH_PROVISIONER}_n1");
    let reasons = s.events("data", &reporter).await;
    assert!(
        reasons.contains(&"Provisioning".to_string())
            && reasons.contains(&"ProvisioningSucceeded".to_string()),
        "{reasons:?}"
    );
    s.has_event("data", binder::REPORTER, "ExternalProvisioning")
        .await;

    // Grown: the volume and the claim's capacity follow.
    s.claims()
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "3Gi"}}}})),
        )
        .await
        .unwrap();
    let grown = eventually(WAIT, "claim grown", || async {
        let c = s.claims().get("data").await.ok()?;
        (capacity(c.status.as_ref()?.capacity.as_ref()) == "3Gi").then_some(c)
    })
    .await;
    let status = grown.status.as_ref().unwrap();
    assert_eq!(capacity(status.allocated_resources.as_ref()), "3Gi");
    assert!(status.allocated_resource_statuses.is_none());
    let volume = s.volumes().get(&volume.name_any()).await.unwrap();
    assert_eq!(
        capacity(volume.spec.as_ref().unwrap().capacity.as_ref()),
        "3Gi"
    );
    s.has_event("data", "volume_expand", "ExternalExpanding")
        .await;
    s.has_event(
        "data",
        &format!("external-resizer {LOCAL_PATH_PROVISIONER}"),
        "VolumeResizeSuccessful",
    )
    .await;

    // Deleted: the volume is released, its directory removed, and it goes.
    s.claims()
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    s.gone(&s.volumes(), &volume.name_any()).await;
    assert!(!dir.exists());
    provisioner.abort();
    let _ = tokio::time::timeout(Duration::from_secs(1), provisioner).await;
}

#[tokio::test]
async fn a_bound_claim_whose_volume_is_gone_is_lost() {
    let s = Storage::start().await;
    s.volume("doomed", "1Gi", json!({})).await;
    s.claim("data", "1Gi", json!({})).await;
    s.bound("data").await;
    // Removed by force: its protection finalizer dropped first.
    s.volumes()
        .patch(
            "doomed",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    s.volumes()
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    s.has_event("data", binder::REPORTER, "ClaimLost").await;
    let lost = s.claims().get("data").await.unwrap();
    assert_eq!(phase_of_claim(&lost), "Lost");
    let status = lost.status.as_ref().unwrap();
    assert!(status.capacity.is_none() && status.access_modes.is_none());
}
