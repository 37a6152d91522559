//! Upstream's VolumeBinding plugin: pods that use PersistentVolumeClaims go only where their
//! volumes can be. A bound claim pins the pod to the nodes its volume's node affinity allows;
//! a claim of a `WaitForFirstConsumer` class is bound only once the scheduler has picked a
//! node, so that a node-local volume is chosen or provisioned where the pod runs. Claims of
//! an `Immediate` class are the PV controller's to bind first: the pod waits for them.
//!
//! The decision ([`prefilter`], [`filter`]) reads the claims, volumes and classes through
//! [`Objects`], with no I/O, so its cases are tested against fixtures. Once a node is chosen
//! the scheduler assumes the result ([`NodeVolumes`]: a static volume's `claimRef`, or the
//! claim's `volume.kubernetes.io/selected-node`) so the next decision sees it, and its binding
//! task writes them and waits for the claims to be bound ([`bind_volumes`]) before it binds the
//! pod, as upstream's PreBind does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod, Volume,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use minik8s_api::quantity::Quantity;
use minik8s_api::selector::Selector;

use super::filters::{Rejection, term_matches};
use crate::informers::{Cache as Lister, Informer};

pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The class annotation that predates `storageClassName` and still wins over it.
const ANN_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner of classes whose volumes are made by hand.
const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";

pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
pub const ERR_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
pub const ERR_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const ERR_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

/// Upstream's default `bindTimeoutSeconds` of the VolumeBinding args.
pub const DEFAULT_BIND_TIMEOUT: Duration = Duration::from_secs(600);

/// What a decision reads of the cluster's storage objects.
pub trait Objects {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    /// The volumes of one class (`""`: those without).
    fn volumes_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>>;
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
}

/// The claim a pod volume uses: its own, or the one a generic ephemeral volume's template
/// makes (`<pod>-<volume>`, upstream's `ephemeral.VolumeClaimName`).
pub fn claim_name(pod: &Pod, volume: &Volume) -> Option<(String, bool)> {
    if let Some(source) = &volume.persistent_volume_claim {
        return Some((source.claim_name.clone(), false));
    }
    volume
        .ephemeral
        .as_ref()
        .map(|_| (format!("{}-{}", pod.name_any(), volume.name), true))
}

/// Whether any of the pod's volumes is a claim.
pub fn has_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| v.iter().any(|v| claim_name(pod, v).is_some()))
}

/// Whether the pod uses claim `namespace/name`.
pub fn uses_claim(pod: &Pod, namespace: &str, name: &str) -> bool {
    pod.metadata.namespace.as_deref() == Some(namespace)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|v| {
                v.iter()
                    .filter_map(|v| claim_name(pod, v))
                    .any(|(n, _)| n == name)
            })
}

/// Upstream's `GetPersistentVolumeClaimClass`.
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    if let Some(class) = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_STORAGE_CLASS))
    {
        return class;
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// Upstream's `GetPersistentVolumeClass`.
pub fn volume_class(pv: &PersistentVolume) -> &str {
    if let Some(class) = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_STORAGE_CLASS))
    {
        return class;
    }
    pv.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Upstream's `isPVCFullyBound`: the PV controller has finished binding it.
pub fn fully_bound(claim: &PersistentVolumeClaim) -> bool {
    volume_name(claim).is_some() && annotation(&claim.metadata, ANN_BIND_COMPLETED).is_some()
}

fn volume_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Upstream's `IsDelayBindingMode`: a class that does not exist (yet) binds immediately.
fn delays_binding(
    claim: &PersistentVolumeClaim,
    objects: &dyn Objects,
) -> Option<Arc<StorageClass>> {
    let name = claim_class(claim);
    if name.is_empty() {
        return None;
    }
    let class = objects.class(name)?;
    (class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")).then_some(class)
}

/// A claim waiting for the scheduler, with what could satisfy it.
#[derive(Clone, Debug)]
pub struct DelayedClaim {
    pub claim: Arc<PersistentVolumeClaim>,
    pub class: Arc<StorageClass>,
    /// The volumes of its class.
    pub candidates: Vec<Arc<PersistentVolume>>,
}

/// What PreFilter found of a pod's claims, for the Filter of every node.
#[derive(Clone, Debug, Default)]
pub struct PodClaims {
    /// Bound claims and their volumes (`None`: the volume does not exist).
    pub bound: Vec<(Arc<PersistentVolumeClaim>, Option<Arc<PersistentVolume>>)>,
    pub delayed: Vec<DelayedClaim>,
}

/// Upstream's PreFilter: `Ok(None)` for a pod without claims; `Err` with the reason when no
/// node can take the pod (a claim missing, being deleted, lost, or unbound while of an
/// Immediate class).
pub fn prefilter(pod: &Pod, objects: &dyn Objects) -> Result<Option<PodClaims>, String> {
    let namespace = pod.namespace().unwrap_or_default();
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut claims = Vec::new();
    for v in volumes {
        let Some((name, ephemeral)) = claim_name(pod, v) else {
            continue;
        };
        let Some(claim) = objects.claim(&namespace, &name) else {
            return Err(if ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}"
                )
            } else {
                format!("persistentvolumeclaim {name:?} not found")
            });
        };
        if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return Err(format!(
                "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {:?}",
                volume_name(&claim).unwrap_or_default()
            ));
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
        }
        if ephemeral {
            minik8s_api::volume::ephemeral_claim_is_for_pod(pod, &claim)?;
        }
        claims.push(claim);
    }
    if claims.is_empty() {
        return Ok(None);
    }
    let mut out = PodClaims::default();
    let mut unbound_immediate = false;
    for claim in claims {
        if fully_bound(&claim) {
            let pv = volume_name(&claim).and_then(|n| objects.volume(n));
            out.bound.push((claim, pv));
            continue;
        }
        // A claim pre-bound to a volume is the PV controller's to finish, whatever its class.
        match delays_binding(&claim, objects).filter(|_| volume_name(&claim).is_none()) {
            Some(class) => {
                let candidates = objects.volumes_of_class(claim_class(&claim));
                out.delayed.push(DelayedClaim {
                    claim,
                    class,
                    candidates,
                });
            }
            None => unbound_immediate = true,
        }
    }
    if unbound_immediate {
        return Err(ERR_UNBOUND_IMMEDIATE.into());
    }
    Ok(Some(out))
}

/// What binding the pod's claims on one node takes: static volumes to bind to claims, and
/// claims to provision there.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeVolumes {
    pub static_bindings: Vec<(PersistentVolume, Arc<PersistentVolumeClaim>)>,
    pub provisions: Vec<PersistentVolumeClaim>,
}

impl NodeVolumes {
    /// Whether every claim is bound already (nothing for PreBind to do).
    pub fn all_bound(&self) -> bool {
        self.static_bindings.is_empty() && self.provisions.is_empty()
    }
}

/// A node with only its labels, as upstream's `CheckNodeAffinity` matches volumes against.
fn labels_only(node: &Node) -> Node {
    Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            labels: node.metadata.labels.clone(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Upstream's `CheckNodeAffinity`.
pub fn volume_fits_node(pv: &PersistentVolume, labelled: &Node) -> bool {
    let required = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref());
    match required {
        None => true,
        Some(selector) => selector
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, labelled)),
    }
}

fn storage(
    q: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> i128 {
    q.and_then(|r| r.get("storage"))
        .and_then(|q| Quantity::parse(&q.0))
        .map(|q| q.value())
        .unwrap_or(0)
}

fn requested(claim: &PersistentVolumeClaim) -> i128 {
    storage(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    )
}

fn capacity(pv: &PersistentVolume) -> i128 {
    storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref()))
}

/// Upstream's `IsVolumeBoundToClaim`.
pub fn bound_to_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name.as_deref() != claim.metadata.name.as_deref()
        || r.namespace.as_deref() != claim.metadata.namespace.as_deref()
    {
        return false;
    }
    match r.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => claim.metadata.uid.as_deref() == Some(uid),
        None => true,
    }
}

fn volume_mode_mismatch(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let wanted = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    let has = pv
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or("Filesystem");
    wanted != has
}

/// Upstream's `CheckAccessModes`: the volume offers every mode the claim asks.
fn access_modes_fit(claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let offered = pv
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
        .iter()
        .all(|m| offered.contains(m))
}

/// Upstream's `FindMatchingVolume` on the scheduler's path: the volume pre-bound to the
/// claim if it fits the node, else the smallest available one of the claim's class, modes,
/// size and selector that fits the node.
fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    candidates: &[Arc<PersistentVolume>],
    labelled: &Node,
    chosen: &[String],
) -> Option<Arc<PersistentVolume>> {
    let wanted = requested(claim);
    let class = claim_class(claim);
    let selector = claim
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .map(|s| Selector::from_label_selector(Some(s)));
    let mut smallest: Option<(&Arc<PersistentVolume>, i128)> = None;
    for pv in candidates {
        if chosen.iter().any(|c| Some(c) == pv.metadata.name.as_ref()) {
            continue;
        }
        let claimed = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_some();
        if claimed && !bound_to_claim(pv, claim) {
            continue;
        }
        let size = capacity(pv);
        if size < wanted
            || volume_mode_mismatch(claim, pv)
            || pv.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let fits = volume_fits_node(pv, labelled);
        if bound_to_claim(pv, claim) {
            return fits.then(|| pv.clone());
        }
        if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Available") {
            continue;
        }
        match &selector {
            Some(Ok(s)) if !s.matches(pv.metadata.labels.as_ref()) => continue,
            // A selector that does not parse matches nothing.
            Some(Err(_)) => continue,
            _ => {}
        }
        if volume_class(pv) != class || !fits || !access_modes_fit(claim, pv) {
            continue;
        }
        if smallest.is_none_or(|(_, s)| s > size) {
            smallest = Some((pv, size));
        }
    }
    smallest.map(|(pv, _)| pv.clone())
}

/// Upstream's `MatchTopologySelectorTerms`: no terms allow every node.
fn class_allows(class: &StorageClass, node: &Node) -> bool {
    let Some(terms) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    terms.iter().any(|term| {
        term.match_label_expressions
            .iter()
            .flatten()
            .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
    })
}

/// Upstream's GetBindVolumeToClaim: the volume with its `claimRef` set to the claim.
fn bind_volume_to_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> PersistentVolume {
    let mut out = pv.clone();
    let already = bound_to_claim(pv, claim);
    let spec = out.spec.get_or_insert_default();
    let same = spec.claim_ref.as_ref().is_some_and(|r| {
        r.name == claim.metadata.name
            && r.namespace == claim.metadata.namespace
            && r.uid == claim.metadata.uid
    });
    if !same {
        spec.claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            name: claim.metadata.name.clone(),
            namespace: claim.metadata.namespace.clone(),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            ..Default::default()
        });
    }
    if !already {
        out.metadata
            .annotations
            .get_or_insert_default()
            .entry(ANN_BOUND_BY_CONTROLLER.into())
            .or_insert_with(|| "yes".into());
    }
    out
}

/// Upstream's Filter (`FindPodVolumes`): whether the pod's claims can be had on `node`, and
/// how. The reasons are upstream's, in its order.
pub fn filter(claims: &PodClaims, node: &Node) -> Result<NodeVolumes, Rejection> {
    let labelled = labels_only(node);
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let mut bound_satisfied = true;
    let mut pvs_found = true;
    for (_, pv) in &claims.bound {
        match pv {
            None => {
                pvs_found = false;
                break;
            }
            Some(pv) if !volume_fits_node(pv, &labelled) => {
                bound_satisfied = false;
                break;
            }
            Some(_) => {}
        }
    }
    let mut out = NodeVolumes::default();
    let mut unbound_satisfied = true;
    'unbound: {
        if claims.delayed.is_empty() {
            break 'unbound;
        }
        let mut to_provision: Vec<&DelayedClaim> = Vec::new();
        let mut to_match: Vec<&DelayedClaim> = Vec::new();
        for d in &claims.delayed {
            match annotation(&d.claim.metadata, ANN_SELECTED_NODE) {
                Some(selected) if selected != node_name => {
                    unbound_satisfied = false;
                    break 'unbound;
                }
                Some(_) => to_provision.push(d),
                None => to_match.push(d),
            }
        }
        // The smallest requests first, so that they get the smallest volumes.
        to_match.sort_by_key(|d| requested(&d.claim));
        let mut chosen: Vec<String> = Vec::new();
        for d in to_match {
            match find_matching_volume(&d.claim, &d.candidates, &labelled, &chosen) {
                Some(pv) => {
                    chosen.push(pv.name_any());
                    out.static_bindings
                        .push((bind_volume_to_claim(&pv, &d.claim), d.claim.clone()));
                }
                None => {
                    unbound_satisfied = false;
                    to_provision.push(d);
                }
            }
        }
        if to_provision.is_empty() {
            break 'unbound;
        }
        for d in to_provision {
            let provisioner = d.class.provisioner.as_str();
            if provisioner.is_empty()
                || provisioner == NOT_SUPPORTED_PROVISIONER
                || !class_allows(&d.class, node)
            {
                unbound_satisfied = false;
                out.provisions.clear();
                break 'unbound;
            }
            let mut claim = (*d.claim).clone();
            claim
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(ANN_SELECTED_NODE.into(), node_name.into());
            out.provisions.push(claim);
        }
        unbound_satisfied = true;
    }
    let mut reasons = Vec::new();
    if !bound_satisfied {
        reasons.push(ERR_NODE_CONFLICT.to_string());
    }
    if !unbound_satisfied {
        reasons.push(ERR_BIND_CONFLICT.to_string());
    }
    if !pvs_found {
        reasons.push(ERR_PV_NOT_EXIST.to_string());
    }
    if reasons.is_empty() {
        Ok(out)
    } else {
        Err(Rejection {
            reasons,
            resolvable: false,
        })
    }
}

/// The scheduler's assumptions about storage objects it is binding (upstream's assume
/// caches): by pod UID, the volumes and claims as its PreBind will write them.
#[derive(Debug, Default)]
pub struct Assumed {
    by_pod: HashMap<String, NodeVolumes>,
}

impl Assumed {
    pub fn assume(&mut self, pod_uid: &str, volumes: NodeVolumes) {
        self.by_pod.insert(pod_uid.to_string(), volumes);
    }

    /// The pod's binding is over (done or failed): the caches speak for themselves again.
    pub fn forget(&mut self, pod_uid: &str) {
        self.by_pod.remove(pod_uid);
    }

    fn volume(&self, name: &str) -> Option<&PersistentVolume> {
        self.by_pod
            .values()
            .flat_map(|v| v.static_bindings.iter().map(|(pv, _)| pv))
            .find(|pv| pv.metadata.name.as_deref() == Some(name))
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<&PersistentVolumeClaim> {
        self.by_pod.values().flat_map(|v| &v.provisions).find(|c| {
            c.metadata.name.as_deref() == Some(name)
                && c.metadata.namespace.as_deref() == Some(namespace)
        })
    }
}

/// The shared caches of the storage kinds.
#[derive(Clone)]
pub struct StorageListers {
    pub claims: Lister<PersistentVolumeClaim>,
    pub volumes: Lister<PersistentVolume>,
    pub classes: Lister<StorageClass>,
}

/// The caches with the scheduler's assumptions laid over them.
pub struct View<'a> {
    pub listers: &'a StorageListers,
    pub assumed: &'a Assumed,
}

impl Objects for View<'_> {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        if let Some(c) = self.assumed.claim(namespace, name) {
            return Some(Arc::new(c.clone()));
        }
        self.listers
            .claims
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        if let Some(pv) = self.assumed.volume(name) {
            return Some(Arc::new(pv.clone()));
        }
        self.listers.volumes.get(&ObjectRef::new(name))
    }

    fn volumes_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        self.listers
            .volumes
            .state()
            .into_iter()
            .filter(|pv| volume_class(pv) == class)
            .map(|pv| match self.assumed.volume(&pv.name_any()) {
                Some(assumed) => Arc::new(assumed.clone()),
                None => pv,
            })
            .collect()
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.listers.classes.get(&ObjectRef::new(name))
    }
}

/// What a binding task needs to wait for claims: the informers' caches and changes.
#[derive(Clone)]
pub struct BindWatch {
    pub claims: Informer<PersistentVolumeClaim>,
    pub volumes: Informer<PersistentVolume>,
    pub pods: Lister<Pod>,
    pub nodes: Lister<Node>,
    pub timeout: Duration,
}

fn resource_version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Upstream's PreBind (`BindPodVolumes`): writes the assumed bindings (a volume's `claimRef`,
/// a claim's selected node), then waits, on the caches' changes and at most the bind timeout,
/// until the PV controller and the provisioner have bound every claim. The error is the
/// message of the FailedScheduling event.
pub async fn bind_volumes(
    client: Client,
    watch: BindWatch,
    pod: &Pod,
    node: &str,
    mut volumes: NodeVolumes,
) -> Result<(), String> {
    let wrap = |e: String| format!("running PreBind plugin \"VolumeBinding\": {e}");
    // Subscribed before the writes, so no change after them is missed.
    let claim_changes = watch.claims.changes();
    let volume_changes = watch.volumes.changes();
    let mut changes = Box::pin(futures::stream::select(
        claim_changes.map(|_| ()),
        volume_changes.map(|_| ()),
    ));
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for (pv, claim) in &mut volumes.static_bindings {
        tracing::info!(pv = %pv.name_any(), claim = %format!("{}/{}", claim.namespace().unwrap_or_default(), claim.name_any()), "binding volume to claim");
        *pv = pvs
            .replace(&pv.name_any(), &PostParams::default(), pv)
            .await
            .map_err(|e| wrap(api_message(e)))?;
    }
    for claim in &mut volumes.provisions {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(client.clone(), &claim.namespace().unwrap_or_default());
        *claim = api
            .replace(&claim.name_any(), &PostParams::default(), claim)
            .await
            .map_err(|e| wrap(api_message(e)))?;
    }
    let deadline = tokio::time::Instant::now() + watch.timeout;
    loop {
        match check_bindings(&watch, pod, node, &volumes) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => return Err(wrap(format!("binding volumes: {e}"))),
        }
        tokio::select! {
            next = changes.next() => if next.is_none() {
                return Err(wrap("binding volumes: the caches stopped".into()));
            },
            _ = tokio::time::sleep_until(deadline) => {
                return Err(wrap("binding volumes: context deadline exceeded".into()));
            }
        }
    }
}

fn api_message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        e => e.to_string(),
    }
}

/// Upstream's `checkBindings`: `Ok(true)` once every claim is fully bound, an error when the
/// binding was undone (and scheduling must start over).
fn check_bindings(
    watch: &BindWatch,
    pod: &Pod,
    node_name: &str,
    volumes: &NodeVolumes,
) -> Result<bool, String> {
    let node = watch
        .nodes
        .get(&ObjectRef::new(node_name))
        .ok_or_else(|| format!("failed to get node {node_name:?}: node {node_name:?} not found"))?;
    let labelled = labels_only(&node);
    let namespace = pod.namespace().unwrap_or_default();
    if watch
        .pods
        .get(&ObjectRef::new(&pod.name_any()).within(&namespace))
        .is_none_or(|p| p.metadata.uid != pod.metadata.uid)
    {
        return Err(format!(
            "pod does not exist any more: pods {:?} not found",
            pod.name_any()
        ));
    }
    let claim_of = |c: &PersistentVolumeClaim| {
        watch
            .claims
            .store()
            .get(&ObjectRef::new(&c.name_any()).within(&c.namespace().unwrap_or_default()))
    };
    for (written, claim) in &volumes.static_bindings {
        let name = written.name_any();
        let pv = watch
            .volumes
            .store()
            .get(&ObjectRef::new(&name))
            .ok_or_else(|| format!("failed to check binding: cannot find volume {name:?}"))?;
        let claim = claim_of(claim).ok_or_else(|| {
            format!(
                "failed to check binding: cannot find claim \"{}/{}\"",
                claim.namespace().unwrap_or_default(),
                claim.name_any()
            )
        })?;
        if resource_version(&written.metadata) > resource_version(&pv.metadata) {
            return Ok(false);
        }
        if !volume_fits_node(&pv, &labelled) {
            return Err(format!(
                "pv {name:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
            ));
        }
        let reset = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_none_or(|r| r.uid.as_deref().unwrap_or_default().is_empty());
        if reset {
            return Err(format!("ClaimRef got reset for pv {name:?}"));
        }
        if !fully_bound(&claim) {
            return Ok(false);
        }
    }
    for written in &volumes.provisions {
        let name = written.name_any();
        let claim = claim_of(written).ok_or_else(|| {
            format!(
                "failed to check provisioning pvc: cannot find claim \"{}/{name}\"",
                written.namespace().unwrap_or_default()
            )
        })?;
        if resource_version(&written.metadata) > resource_version(&claim.metadata) {
            return Ok(false);
        }
        if annotation(&claim.metadata, ANN_SELECTED_NODE) != Some(node_name) {
            // The provisioner takes the annotation away when it cannot provision.
            return Err(format!("provisioning failed for PVC {name:?}"));
        }
        if let Some(pv_name) = volume_name(&claim) {
            let Some(pv) = watch.volumes.store().get(&ObjectRef::new(pv_name)) else {
                return Ok(false);
            };
            if !volume_fits_node(&pv, &labelled) {
                return Err(format!(
                    "pv {pv_name:?} node affinity doesn't match node {node_name:?}: no matching NodeSelectorTerms"
                ));
            }
        }
        if !fully_bound(&claim) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
