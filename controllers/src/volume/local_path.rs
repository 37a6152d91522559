//! The local-path provisioner, as k3s's rancher/local-path-provisioner on
//! sig-storage-lib-external-provisioner, built in. A node-local volume is a directory on the
//! node that uses it, so the provisioner runs in every node agent beside the kubelet and
//! acts only for its own node: a claim whose `volume.kubernetes.io/storage-provisioner` is
//! `rancher.io/local-path` and whose `volume.kubernetes.io/selected-node` (set by the
//! scheduler for WaitForFirstConsumer) is this node gets a directory under
//! `<data dir>/storage/` and a PersistentVolume `pvc-<claim uid>` pinned to the node, bound
//! to the claim through its claimRef (the binder finishes the binding). A Released volume
//! with reclaim policy Delete that it made on this node has its directory removed and is
//! deleted.
//!
//! Idempotent across restarts: what exists is read from the API (the volume named after the
//! claim) and the disk (creating an existing directory is no error), never from a file of its
//! own. A claim with no selected node cannot be served by a node-local volume; one agent
//! (the first node by name) says so with local-path-provisioner's `ProvisioningFailed`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream;
use k8s_openapi::api::core::v1::{
    LocalVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use minik8s_api::volume::{
    self, ANN_BETA_STORAGE_PROVISIONER, ANN_PROVISIONED_BY, ANN_SELECTED_NODE,
    ANN_STORAGE_PROVISIONER, LOCAL_PATH_PROVISIONER,
};

use super::binder::protocol::claim_ref;
use crate::informers::{Cache, Informers};
use crate::util::events::{Recorder, record};
use crate::util::reconciler::Error;
use crate::util::runtime;

/// The node label local-path pins volumes with (its `nodeAffinityKey` default).
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Where local-path records the node a volume was made on.
const ANN_NODE: &str = "local.path.provisioner/selected-node";

/// Where and for which node volumes are made.
#[derive(Clone, Debug)]
pub struct LocalPathOptions {
    pub node_name: String,
    /// The node's data dir: volumes go to `<data_dir>/storage/`.
    pub data_dir: PathBuf,
}

impl LocalPathOptions {
    pub fn storage_dir(&self) -> PathBuf {
        self.data_dir.join("storage")
    }
}

struct Ctx {
    client: Client,
    options: LocalPathOptions,
    classes: Cache<StorageClass>,
    nodes: Cache<Node>,
    volumes: Cache<PersistentVolume>,
    recorder: Recorder,
}

impl Ctx {
    async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        record(&self.recorder, obj, type_, reason, note, None).await
    }
}

/// Runs the provisioner of `options.node_name` until dropped; `client` writes, `informers`
/// read (they may belong to another identity of the same process).
pub async fn run(client: Client, informers: Arc<Informers>, options: LocalPathOptions) {
    let claims = informers.of::<PersistentVolumeClaim>();
    let volumes = informers.of::<PersistentVolume>();
    let classes = informers.of::<StorageClass>();
    let nodes = informers.of::<Node>();
    for ready in [
        classes.store().wait_until_ready().await,
        volumes.store().wait_until_ready().await,
        nodes.store().wait_until_ready().await,
    ] {
        if ready.is_err() {
            return;
        }
    }
    tracing::info!(node = %options.node_name, dir = %options.storage_dir().display(), "local-path provisioner running");
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: format!("{LOCAL_PATH_PROVISIONER}_{}", options.node_name),
                instance: None,
            },
        ),
        client,
        options,
        classes: classes.store(),
        nodes: nodes.store(),
        volumes: volumes.store(),
    });
    // A class that appears may be what a waiting claim lacked.
    let claim_store = claims.store();
    let from_classes = classes.touched().flat_map(move |class| {
        let name = class.name_any();
        let keys: Vec<_> = claim_store
            .state()
            .iter()
            .filter(|c| volume::claim_class(c) == name)
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect();
        stream::iter(keys)
    });
    let claim_queue = stream::select(
        claims.touched().map(|c| ObjectRef::from_obj(c.as_ref())),
        from_classes,
    );
    let volume_queue = volumes.touched().map(|v| ObjectRef::from_obj(v.as_ref()));
    tokio::join!(
        runtime::run(
            "local_path_provisioner",
            claims.store(),
            claim_queue,
            provision,
            ctx.clone()
        ),
        runtime::run(
            "local_path_provisioner",
            volumes.store(),
            volume_queue,
            delete,
            ctx
        ),
    );
}

/// The volume a claim gets (the library's `getProvisionedVolumeNameForClaim`).
pub fn volume_name(claim: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", claim.metadata.uid.as_deref().unwrap_or_default())
}

/// The volume's directory name, as local-path names it: `<volume>_<namespace>_<claim>`.
pub fn folder_name(claim: &PersistentVolumeClaim) -> String {
    format!(
        "{}_{}_{}",
        volume_name(claim),
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    )
}

fn annotation<'a>(claim: &'a PersistentVolumeClaim, key: &str) -> Option<&'a str> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// What this provisioner does with a claim.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// Not for this provisioner or this node, not yet, or done already.
    Nothing,
    /// Make its volume here.
    Provision,
    /// Asked of local-path with no node chosen: this node reports it.
    NoNode,
}

/// The library's `shouldProvision`, narrowed to this node.
fn plan(claim: &PersistentVolumeClaim, class: &StorageClass, node: &str, first_node: bool) -> Plan {
    let named = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if named || claim.metadata.deletion_timestamp.is_some() {
        return Plan::Nothing;
    }
    let provisioner = annotation(claim, ANN_STORAGE_PROVISIONER)
        .or_else(|| annotation(claim, ANN_BETA_STORAGE_PROVISIONER));
    if provisioner != Some(LOCAL_PATH_PROVISIONER) || class.provisioner != LOCAL_PATH_PROVISIONER {
        return Plan::Nothing;
    }
    let delayed = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
    match annotation(claim, ANN_SELECTED_NODE).filter(|n| !n.is_empty()) {
        Some(selected) if selected == node => Plan::Provision,
        Some(_) => Plan::Nothing,
        None if delayed => Plan::Nothing,
        None if first_node => Plan::NoNode,
        None => Plan::Nothing,
    }
}

/// local-path-provisioner's own refusals for a node-local volume.
fn check_claim(claim: &PersistentVolumeClaim) -> Result<(), String> {
    let spec = claim.spec.clone().unwrap_or_default();
    if spec.selector.is_some() {
        return Err("claim.Spec.Selector is not supported".into());
    }
    let modes = spec.access_modes.unwrap_or_default();
    if modes
        .iter()
        .any(|m| m != "ReadWriteOnce" && m != "ReadWriteOncePod")
    {
        return Err(
            "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes".into(),
        );
    }
    Ok(())
}

/// The volume for `claim` on `node` at `path` (local-path's, with `local` as k3s configures
/// it, and the library's claimRef, class and provisioned-by annotation).
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &Node,
    path: &Path,
) -> PersistentVolume {
    let node_name = node.name_any();
    let hostname = node
        .labels()
        .get(HOSTNAME_LABEL)
        .cloned()
        .unwrap_or_else(|| node_name.clone());
    let spec = claim.spec.clone().unwrap_or_default();
    let request = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned();
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(volume_name(claim)),
            annotations: Some(BTreeMap::from([
                (
                    ANN_PROVISIONED_BY.to_string(),
                    LOCAL_PATH_PROVISIONER.to_string(),
                ),
                (ANN_NODE.to_string(), node_name),
            ])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: spec.access_modes.clone(),
            capacity: request.map(|q| BTreeMap::from([("storage".to_string(), q)])),
            claim_ref: Some(claim_ref(claim)),
            local: Some(LocalVolumeSource {
                path: path.display().to_string(),
                fs_type: None,
            }),
            mount_options: class.mount_options.clone(),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: "In".into(),
                            values: Some(vec![hostname]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: Some(spec.volume_mode.unwrap_or_else(|| "Filesystem".into())),
            ..Default::default()
        }),
        status: None,
    }
}

/// The first node by name answers for claims no node was chosen for, so one event says so.
fn first_node(ctx: &Ctx) -> bool {
    let names = ctx.nodes.state();
    names.iter().map(|n| n.name_any()).min().as_deref() == Some(ctx.options.node_name.as_str())
}

async fn provision(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let class_name = volume::claim_class(&claim).to_string();
    let Some(class) = ctx.classes.get(&ObjectRef::new(&class_name)) else {
        return Ok(Action::await_change());
    };
    let node_name = ctx.options.node_name.clone();
    match plan(&claim, &class, &node_name, first_node(&ctx)) {
        Plan::Nothing => return Ok(Action::await_change()),
        Plan::NoNode => {
            let note = format!(
                "failed to provision volume with StorageClass {class_name:?}: configuration error, no node was specified"
            );
            ctx.event(
                claim.as_ref(),
                EventType::Warning,
                "ProvisioningFailed",
                note,
            )
            .await;
            return Ok(Action::await_change());
        }
        Plan::Provision => {}
    }
    let name = volume_name(&claim);
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    if ctx.volumes.get(&ObjectRef::new(&name)).is_some() || volumes.get_opt(&name).await?.is_some()
    {
        tracing::debug!(volume = %name, "already provisioned");
        return Ok(Action::await_change());
    }
    let key = format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    );
    let failed =
        |why: String| format!("failed to provision volume with StorageClass {class_name:?}: {why}");
    if let Err(why) = check_claim(&claim) {
        ctx.event(
            claim.as_ref(),
            EventType::Warning,
            "ProvisioningFailed",
            failed(why),
        )
        .await;
        return Ok(Action::await_change());
    }
    ctx.event(
        claim.as_ref(),
        EventType::Normal,
        "Provisioning",
        format!("External provisioner is provisioning volume for claim {key:?}"),
    )
    .await;
    let Some(node) = ctx.nodes.get(&ObjectRef::new(&node_name)) else {
        let why = format!("failed to get target node: nodes {node_name:?} not found");
        ctx.event(
            claim.as_ref(),
            EventType::Warning,
            "ProvisioningFailed",
            why.clone(),
        )
        .await;
        return Err(Error::Stale(why));
    };
    let path = ctx.options.storage_dir().join(folder_name(&claim));
    if let Err(e) = make_dir(&path) {
        let why = failed(format!("failed to create volume {name}: {e}"));
        ctx.event(
            claim.as_ref(),
            EventType::Warning,
            "ProvisioningFailed",
            why.clone(),
        )
        .await;
        return Err(Error::Failed(why));
    }
    tracing::info!(volume = %name, path = %path.display(), "created volume");
    let volume = volume_for(&claim, &class, &node, &path);
    match volumes.create(&PostParams::default(), &volume).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::await_change()),
        Err(e) => {
            let why = failed(e.to_string());
            ctx.event(
                claim.as_ref(),
                EventType::Warning,
                "ProvisioningFailed",
                why,
            )
            .await;
            return Err(e.into());
        }
    }
    ctx.event(
        claim.as_ref(),
        EventType::Normal,
        "ProvisioningSucceeded",
        format!("Successfully provisioned volume {name}"),
    )
    .await;
    Ok(Action::await_change())
}

/// local-path's setup: the directory, writable by any user of the pod (`mkdir -m 0777 -p`).
fn make_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
}

/// The node a volume is pinned to and its path (local-path's `getPathAndNodeForPV`).
fn path_and_node(volume: &PersistentVolume) -> Result<(String, String), String> {
    let spec = volume.spec.clone().unwrap_or_default();
    let path = match (&spec.local, &spec.host_path) {
        (Some(l), None) => l.path.clone(),
        (None, Some(h)) => h.path.clone(),
        _ => return Err("no path set".into()),
    };
    let required = spec
        .node_affinity
        .ok_or("no NodeAffinity set")?
        .required
        .ok_or("no NodeAffinity.Required set")?;
    for term in &required.node_selector_terms {
        for e in term.match_expressions.iter().flatten() {
            if e.operator == "In" {
                let values = e.values.clone().unwrap_or_default();
                if values.len() != 1 {
                    return Err("multiple values for the node affinity".into());
                }
                return Ok((path, values[0].clone()));
            }
        }
    }
    Err("cannot find affinited node".into())
}

/// The library's `shouldDelete`: a Released volume with policy Delete that local-path made.
fn should_delete(volume: &PersistentVolume) -> bool {
    volume.metadata.deletion_timestamp.is_none()
        && volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")
        && volume
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            == Some("Delete")
        && volume
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_PROVISIONED_BY))
            .map(String::as_str)
            == Some(LOCAL_PATH_PROVISIONER)
}

/// Whether the volume is pinned to this node (by name, or by its hostname label).
fn on_this_node(ctx: &Ctx, pinned: &str) -> bool {
    if pinned == ctx.options.node_name {
        return true;
    }
    ctx.nodes
        .get(&ObjectRef::new(&ctx.options.node_name))
        .and_then(|n| n.labels().get(HOSTNAME_LABEL).cloned())
        .is_some_and(|h| h == pinned)
}

async fn delete(volume: Arc<PersistentVolume>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !should_delete(&volume) {
        return Ok(Action::await_change());
    }
    let name = volume.name_any();
    let (path, node) = match path_and_node(&volume) {
        Ok(found) => found,
        Err(why) => {
            // Only the node the volume is on may act; one without a node is nobody's.
            tracing::debug!(volume = %name, %why, "not a volume of this node");
            return Ok(Action::await_change());
        }
    };
    if !on_this_node(&ctx, &node) {
        return Ok(Action::await_change());
    }
    if let Err(why) = remove_dir(&ctx.options.storage_dir(), Path::new(&path)) {
        let why = format!("failed to delete volume {name}: {why}");
        ctx.event(
            volume.as_ref(),
            EventType::Warning,
            "VolumeFailedDelete",
            why.clone(),
        )
        .await;
        return Err(Error::Failed(why));
    }
    tracing::info!(volume = %name, %path, "deleted volume");
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: volume.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match volumes.delete(&name, &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// local-path's teardown (`rm -rf`), for directories under this node's storage dir only: a
/// volume that names another path (written by hand with the annotation) is refused.
fn remove_dir(storage: &Path, path: &Path) -> Result<(), String> {
    let inside = path.starts_with(storage)
        && path != storage
        && !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if !inside {
        return Err(format!(
            "path {} is not under {}",
            path.display(),
            storage.display()
        ));
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claim(annotations: serde_json::Value, modes: &[&str]) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "data", "namespace": "ns",
                "uid": "1234", "resourceVersion": "5", "annotations": annotations},
            "spec": {"accessModes": modes, "storageClassName": "local-path",
                     "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap()
    }

    fn class(mode: &str) -> StorageClass {
        let mut c = minik8s_api::kinds::storage::local_path_class();
        c.volume_binding_mode = Some(mode.into());
        c
    }

    const RWO: &[&str] = &["ReadWriteOnce"];

    #[test]
    fn only_claims_for_this_node_are_provisioned_here() {
        let asked = |node: Option<&str>| {
            let mut a = json!({ANN_STORAGE_PROVISIONER: LOCAL_PATH_PROVISIONER});
            if let Some(n) = node {
                a[ANN_SELECTED_NODE] = json!(n);
            }
            claim(a, RWO)
        };
        let wffc = class("WaitForFirstConsumer");
        assert_eq!(
            plan(&asked(Some("n1")), &wffc, "n1", false),
            Plan::Provision
        );
        assert_eq!(plan(&asked(Some("n2")), &wffc, "n1", true), Plan::Nothing);
        assert_eq!(plan(&asked(None), &wffc, "n1", true), Plan::Nothing);
        let immediate = class("Immediate");
        assert_eq!(plan(&asked(None), &immediate, "n1", true), Plan::NoNode);
        assert_eq!(plan(&asked(None), &immediate, "n2", false), Plan::Nothing);
        // Not asked of local-path (yet).
        assert_eq!(
            plan(&claim(json!({}), RWO), &wffc, "n1", true),
            Plan::Nothing
        );
    }

    #[test]
    fn node_local_volumes_refuse_shared_modes_and_selectors() {
        assert!(check_claim(&claim(json!({}), RWO)).is_ok());
        assert_eq!(
            check_claim(&claim(json!({}), &["ReadWriteMany"])),
            Err(
                "NodePath only supports ReadWriteOnce and ReadWriteOncePod (1.22+) access modes"
                    .into()
            )
        );
    }

    #[test]
    fn the_volume_is_pinned_to_its_node_and_bound_to_its_claim() {
        let c = claim(json!({}), RWO);
        assert_eq!(folder_name(&c), "pvc-1234_ns_data");
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "n1", "labels": {HOSTNAME_LABEL: "host-1"}}}),
        )
        .unwrap();
        let v = volume_for(
            &c,
            &class("WaitForFirstConsumer"),
            &node,
            Path::new("/d/storage/x"),
        );
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["metadata"]["name"], "pvc-1234");
        assert_eq!(
            j["metadata"]["annotations"][ANN_PROVISIONED_BY],
            LOCAL_PATH_PROVISIONER
        );
        assert_eq!(j["spec"]["local"]["path"], "/d/storage/x");
        assert_eq!(j["spec"]["capacity"]["storage"], "1Gi");
        assert_eq!(j["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(j["spec"]["storageClassName"], "local-path");
        assert_eq!(j["spec"]["claimRef"]["uid"], "1234");
        assert_eq!(
            j["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0],
            json!({"key": HOSTNAME_LABEL, "operator": "In", "values": ["host-1"]})
        );
        assert_eq!(
            path_and_node(&v),
            Ok(("/d/storage/x".into(), "host-1".into()))
        );
    }

    #[test]
    fn only_directories_under_the_storage_dir_are_removed() {
        let storage = Path::new("/var/lib/minik8s/storage");
        assert!(remove_dir(storage, Path::new("/etc")).is_err());
        assert!(remove_dir(storage, storage).is_err());
        assert!(remove_dir(storage, &storage.join("../x")).is_err());
        assert_eq!(remove_dir(storage, &storage.join("pvc-gone_ns_c")), Ok(()));
    }
}
