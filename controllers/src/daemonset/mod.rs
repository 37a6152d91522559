//! The DaemonSet controller, as upstream's pkg/controller/daemon: one pod on every node the
//! template fits (node selector, required node affinity, taints). Pods are not bound by the
//! controller: each gets a required node affinity on `metadata.name` of its node, which the
//! scheduler honours, so the scheduler still checks resources and ports.
//!
//! Pods carry the default DaemonSet tolerations (not-ready and unreachable NoExecute, the
//! pressure and unschedulable NoSchedule taints), so daemons survive node trouble that evicts
//! other pods. A `controller-revision-hash` label tells current pods from old ones for
//! RollingUpdate (maxUnavailable or maxSurge) and status; OnDelete leaves old pods alone. The
//! label is the hash of the template's ControllerRevision (see [`history`]), which
//! `kubectl rollout history|undo daemonset` read.

mod history;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::util::events::Recorder;
use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use minik8s_api::selector::Selector;

use crate::informers::Cache;
use crate::informers::{ByController, Informers};
use crate::util::controller_ref::{claim, controller_ref, owners_of};
use crate::util::events::record;
use crate::util::expectations::{Expectations, observe_pods};
use crate::util::pods::{is_available, is_ready, phase, pod_from_template};
use crate::util::reconciler::Error;
use crate::util::runtime;

const REPORTER: &str = "daemonset-controller";
pub const REVISION_HASH: &str = "controller-revision-hash";
pub const TEMPLATE_GENERATION: &str = "pod-template-generation";

struct Ctx {
    client: Client,
    pods: Cache<Pod>,
    pods_by_controller: ByController<Pod>,
    revisions: ByController<ControllerRevision>,
    nodes: Cache<Node>,
    expectations: Expectations,
    recorder: Recorder,
}

pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let (set_informer, pod_informer, node_informer, revision_informer) = (
        informers.of::<DaemonSet>(),
        informers.of::<Pod>(),
        informers.of::<Node>(),
        informers.of::<ControllerRevision>(),
    );
    let (sets, pods, nodes) = (
        set_informer.store(),
        pod_informer.store(),
        node_informer.store(),
    );
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        pods: pods.clone(),
        pods_by_controller: pod_informer.by_controller(),
        revisions: revision_informer.by_controller(),
        nodes,
        expectations: Expectations::new(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
    });
    let ds_events = set_informer.touched();
    let pod_events = {
        let ctx = ctx.clone();
        pod_informer
            .touched_and_left_after(move |c| observe_pods(&ctx.expectations, "DaemonSet", c))
    };
    let node_events = node_informer.touched();
    let pod_keys = {
        let sets = sets.clone();
        pod_events.flat_map(move |pod| {
            stream::iter(owners_of(&sets, pod.as_ref(), |d: &DaemonSet| {
                d.spec.as_ref().map(|s| &s.selector)
            }))
        })
    };
    // A node change may change where every DaemonSet should run.
    let node_keys = {
        let sets = sets.clone();
        node_events.flat_map(move |_| {
            stream::iter(
                sets.state()
                    .iter()
                    .map(|d| ObjectRef::from_obj(d.as_ref()))
                    .collect::<Vec<_>>(),
            )
        })
    };
    let revision_keys = {
        let sets = sets.clone();
        revision_informer.touched().flat_map(move |r| {
            stream::iter(owners_of(&sets, r.as_ref(), |d: &DaemonSet| {
                d.spec.as_ref().map(|s| &s.selector)
            }))
        })
    };
    let queue = stream::select(
        stream::select(
            ds_events.map(|d| ObjectRef::from_obj(d.as_ref())),
            revision_keys,
        ),
        stream::select(pod_keys, node_keys),
    );
    runtime::run("daemonset", sets, queue, reconcile, ctx).await
}

/// The tolerations upstream adds to every daemon pod (`AddOrUpdateDaemonPodTolerations`).
pub fn default_tolerations(host_network: bool) -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    };
    let mut out = vec![
        t("node.kubernetes.io/not-ready", "NoExecute"),
        t("node.kubernetes.io/unreachable", "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        out.push(t("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    out
}

fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => {
            key == taint.key
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

/// A term matches when all its requirements do; a term without any matches nothing.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            let v = (r.key == "metadata.name").then(|| node.name_any());
            requirement_matches(r, v.as_deref())
        })
}

/// Whether the template's nodeSelector and required node affinity admit `node`.
fn fits_node(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = &pod.spec else { return true };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    selector_ok
        && required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, node)))
}

/// Upstream's `NodeShouldRunDaemonPod`: whether a daemon pod should be started on `node`, and
/// whether one already there may keep running (it may despite new NoSchedule taints).
pub fn should_run(template_pod: &Pod, node: &Node) -> (bool, bool) {
    let spec = template_pod.spec.clone().unwrap_or_default();
    if spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n != node.name_any())
    {
        return (false, false);
    }
    if !fits_node(template_pod, node) {
        return (false, false);
    }
    let tolerations = spec.tolerations.unwrap_or_default();
    let untolerated = |effects: &[&str]| {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| effects.contains(&t.effect.as_str()))
            .any(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
    };
    if untolerated(&["NoSchedule", "NoExecute"]) {
        return (false, !untolerated(&["NoExecute"]));
    }
    (true, true)
}

/// The node a daemon pod is for: bound, or named by its node affinity (upstream's
/// `GetTargetNodeName`).
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        let r = t
            .match_fields
            .iter()
            .flatten()
            .find(|r| r.key == "metadata.name" && r.operator == "In")?;
        match r.values.as_deref() {
            Some([v]) => Some(v.clone()),
            _ => None,
        }
    })
}

/// Pins a pod to `node` by required node affinity, replacing the template's required terms
/// (already checked by the controller), as upstream's `ReplaceDaemonSetPodNodeNameNodeAffinity`.
fn pin_to_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let mut affinity = affinity.unwrap_or_default();
    let na = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
            match_expressions: None,
        }],
    });
    affinity
}

/// The template as a pod with the daemon tolerations and revision labels (no node yet).
fn template_pod(ds: &DaemonSet, hash: &str) -> Pod {
    let spec = ds.spec.clone().unwrap_or_default();
    let mut template = spec.template;
    let meta = template.metadata.get_or_insert_with(Default::default);
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(REVISION_HASH.into(), hash.to_string());
    labels.insert(
        TEMPLATE_GENERATION.into(),
        ds.metadata.generation.unwrap_or(1).to_string(),
    );
    if let Some(ps) = template.spec.as_mut() {
        let tolerations = ps.tolerations.get_or_insert_with(Vec::new);
        for t in default_tolerations(ps.host_network == Some(true)) {
            let present = tolerations
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect);
            if !present {
                tolerations.push(t);
            }
        }
    }
    pod_from_template(
        &template,
        &ds.namespace().unwrap_or_default(),
        &ds.name_any(),
        controller_ref(ds),
    )
}

fn pod_for_node(template: &Pod, node: &str) -> Pod {
    let mut pod = template.clone();
    if let Some(spec) = pod.spec.as_mut() {
        spec.affinity = Some(pin_to_node(spec.affinity.take(), node));
    }
    pod
}

/// Whether `pod` runs the current template (upstream's `IsPodUpdated`): its revision hash,
/// or the template generation it was made from.
fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let labels = pod.labels();
    let hash_matches =
        !hash.is_empty() && labels.get(REVISION_HASH).map(String::as_str) == Some(hash);
    let generation_matches =
        generation.is_some_and(|g| labels.get(TEMPLATE_GENERATION) == Some(&g.to_string()));
    hash_matches || generation_matches
}

fn created(p: &Pod) -> Option<Timestamp> {
    p.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// `IntOrString` against `total`, percentages rounded up as upstream does here.
fn scaled(v: Option<&IntOrString>, total: i32) -> i32 {
    match v {
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            ((pct * i64::from(total) + 99) / 100) as i32
        }
        None => 0,
    }
}

async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let _ = ctx.pods.wait_until_ready().await;
    let _ = ctx.pods_by_controller.wait_until_ready().await;
    let _ = ctx.nodes.wait_until_ready().await;
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = ds.namespace().unwrap_or_default();
    let name = ds.name_any();
    let key = format!("{ns}/{name}");
    let api: Api<DaemonSet> = Api::namespaced(ctx.client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let spec = ds.spec.clone().unwrap_or_default();
    let selector = Selector::from_label_selector(Some(&spec.selector))?;
    let (current, old) = history::construct(&ds, &ctx, &selector).await?;
    let hash = current
        .labels()
        .get(REVISION_HASH)
        .cloned()
        .unwrap_or_default();
    let generation = ds.metadata.generation;
    let is_updated = |p: &Pod| is_updated(p, &hash, generation);
    let template = template_pod(&ds, &hash);
    let min_ready = spec.min_ready_seconds.unwrap_or(0);
    let now = Timestamp::now();

    let candidates = ctx
        .pods_by_controller
        .controlled_by(&ds.uid().unwrap_or_default(), Some(&ns))
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()));
    let pods = claim(ds.as_ref(), &api, &pods_api, &selector, candidates).await?;
    let mut by_node: HashMap<String, Vec<Arc<Pod>>> = HashMap::new();
    for p in &pods {
        if let Some(n) = target_node(p) {
            by_node.entry(n).or_default().push(p.clone());
        }
    }
    for list in by_node.values_mut() {
        list.sort_by_key(|p| (created(p), p.name_any()));
    }
    let nodes = ctx.nodes.state();
    let eligibility: HashMap<String, (bool, bool)> = nodes
        .iter()
        .map(|n| (n.name_any(), should_run(&template, n)))
        .collect();

    let rolling = spec
        .update_strategy
        .as_ref()
        .filter(|s| s.type_.as_deref() != Some("OnDelete"))
        .and_then(|s| s.rolling_update.clone())
        .unwrap_or_default();
    let desired = eligibility.values().filter(|(run, _)| *run).count() as i32;
    let mut max_surge = scaled(rolling.max_surge.as_ref(), desired);
    let mut max_unavailable = scaled(rolling.max_unavailable.as_ref(), desired);
    let rolling_update = spec
        .update_strategy
        .as_ref()
        .is_none_or(|s| s.type_.as_deref() != Some("OnDelete"));
    if !rolling_update {
        max_surge = 0;
    }
    if max_surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }

    let mut to_create: Vec<String> = Vec::new();
    let mut to_delete: Vec<Arc<Pod>> = Vec::new();
    if ctx.expectations.satisfied(&key) {
        let mut unavailable_nodes = 0;
        let mut surging = 0;
        // (node, old available pod) candidates for a rolling replacement.
        let mut replaceable: Vec<(String, Arc<Pod>)> = Vec::new();
        let mut surge_candidates: Vec<String> = Vec::new();
        for node in &nodes {
            let node_name = node.name_any();
            let (run, keep) = eligibility[&node_name];
            let here: Vec<Arc<Pod>> = by_node.get(&node_name).cloned().unwrap_or_default();
            if !keep {
                to_delete.extend(
                    here.into_iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none()),
                );
                continue;
            }
            // Failed daemons are replaced (upstream kills them and starts anew).
            let mut live = Vec::new();
            for p in here {
                if phase(&p) == "Failed" {
                    if p.metadata.deletion_timestamp.is_none() {
                        let note = format!(
                            "Found failed daemon pod {ns}/{} on node {node_name}, will try to kill it",
                            p.name_any()
                        );
                        record(
                            &ctx.recorder,
                            ds.as_ref(),
                            EventType::Warning,
                            "FailedDaemonPod",
                            note,
                            None,
                        )
                        .await;
                        to_delete.push(p);
                    }
                } else if p.metadata.deletion_timestamp.is_none() {
                    live.push(p);
                }
            }
            if live.is_empty() {
                if run {
                    to_create.push(node_name);
                    unavailable_nodes += 1;
                }
                continue;
            }
            let (new, old): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
                live.into_iter().partition(|p| is_updated(p));
            // Keep the oldest pod of each revision; with surge an old pod stays until the
            // new one is available.
            let kept_new = new.first().cloned();
            let mut kept_old = old.first().cloned();
            to_delete.extend(new.iter().skip(1).cloned());
            to_delete.extend(old.iter().skip(1).cloned());
            if max_surge == 0 && kept_new.is_some() && kept_old.is_some() {
                to_delete.extend(kept_old.take());
            }
            if let (Some(n), Some(o)) = (&kept_new, &kept_old) {
                if is_available(n, min_ready, now) {
                    to_delete.push(o.clone());
                    kept_old = None;
                } else {
                    surging += 1;
                }
            }
            let serving = kept_new.as_ref().or(kept_old.as_ref()).cloned();
            let available = serving
                .as_ref()
                .is_some_and(|p| is_available(p, min_ready, now));
            if !available {
                unavailable_nodes += 1;
            }
            if !rolling_update || !run {
                continue;
            }
            if let (None, Some(o)) = (&kept_new, kept_old.take()) {
                if max_surge > 0 {
                    surge_candidates.push(node_name.clone());
                } else if !available {
                    // An old pod that does not serve anyway goes at once.
                    to_delete.push(o);
                } else {
                    replaceable.push((node_name.clone(), o));
                }
            }
        }
        if max_surge > 0 {
            let room = (max_surge - surging).max(0) as usize;
            to_create.extend(surge_candidates.into_iter().take(room));
        } else {
            let room = (max_unavailable - unavailable_nodes).max(0) as usize;
            to_delete.extend(replaceable.into_iter().take(room).map(|(_, p)| p));
        }
        // Unbound pods for nodes that no longer exist.
        for (node, list) in &by_node {
            if !eligibility.contains_key(node) {
                to_delete.extend(
                    list.iter()
                        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .cloned(),
                );
            }
        }
        let mut seen = HashSet::new();
        to_delete.retain(|p| seen.insert(p.uid()));

        ctx.expectations.expect_creations(&key, to_create.len());
        for node in &to_create {
            match pods_api
                .create(&PostParams::default(), &pod_for_node(&template, node))
                .await
            {
                Ok(p) => {
                    let note = format!("Created pod: {}", p.name_any());
                    record(
                        &ctx.recorder,
                        ds.as_ref(),
                        EventType::Normal,
                        "SuccessfulCreate",
                        note,
                        Some(p.object_ref(&())),
                    )
                    .await;
                }
                Err(e) => {
                    ctx.expectations.creation_observed(&key);
                    tracing::warn!(node, error = %e, "creating daemon pod");
                }
            }
        }
        ctx.expectations
            .expect_deletions(&key, to_delete.iter().filter_map(|p| p.uid()));
        for p in &to_delete {
            match pods_api
                .delete(&p.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    let note = format!("Deleted pod: {}", p.name_any());
                    record(
                        &ctx.recorder,
                        ds.as_ref(),
                        EventType::Normal,
                        "SuccessfulDelete",
                        note,
                        Some(p.object_ref(&())),
                    )
                    .await;
                }
                Err(e) => {
                    ctx.expectations
                        .deletion_observed(&key, &p.uid().unwrap_or_default());
                    if !matches!(&e, kube::Error::Api(s) if s.code == 404) {
                        tracing::warn!(pod = %p.name_any(), error = %e, "deleting daemon pod");
                    }
                }
            }
        }
        history::cleanup(&ds, &ctx, &old, &pods).await?;
    }

    // Status, from the cache as read (upstream's updateDaemonSetStatus).
    let mut status = DaemonSetStatus {
        observed_generation: ds.metadata.generation,
        collision_count: ds.status.as_ref().and_then(|s| s.collision_count),
        conditions: ds.status.as_ref().and_then(|s| s.conditions.clone()),
        ..Default::default()
    };
    let mut requeue: Option<Duration> = None;
    for (node, (run, _)) in &eligibility {
        let here: Vec<&Arc<Pod>> = by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if !*run {
            if !here.is_empty() {
                status.number_misscheduled += 1;
            }
            continue;
        }
        status.desired_number_scheduled += 1;
        let Some(pod) = here.iter().find(|p| is_updated(p)).or(here.first()) else {
            continue;
        };
        status.current_number_scheduled += 1;
        if is_ready(pod) {
            status.number_ready += 1;
            if is_available(pod, min_ready, now) {
                status.number_available = Some(status.number_available.unwrap_or(0) + 1);
            } else if min_ready > 0 {
                requeue = Some(Duration::from_secs(min_ready as u64));
            }
        }
        if is_updated(pod) {
            status.updated_number_scheduled =
                Some(status.updated_number_scheduled.unwrap_or(0) + 1);
        }
    }
    let unavailable = status.desired_number_scheduled - status.number_available.unwrap_or(0);
    status.number_unavailable = (unavailable > 0).then_some(unavailable);
    status.number_available = status.number_available.filter(|n| *n > 0);
    if ds.status.as_ref() != Some(&status) {
        let mut current = (*ds).clone();
        current.status = Some(status);
        api.replace_status(&name, &PostParams::default(), &current)
            .await?;
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    fn ds(spec: serde_json::Value) -> DaemonSet {
        let mut template = serde_json::json!({"containers": [{"name": "c", "image": "i"}]});
        if let Some(obj) = spec.as_object() {
            for (k, v) in obj {
                template[k] = v.clone();
            }
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "namespace": "ns", "uid": "u", "generation": 2},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": template},
            },
        }))
        .unwrap()
    }

    #[test]
    fn nodes_are_chosen_by_selector_affinity_and_taints() {
        let plain = node(
            "a",
            serde_json::json!({"disk": "ssd"}),
            serde_json::json!([]),
        );
        let tainted = node(
            "b",
            serde_json::json!({}),
            serde_json::json!([{"key": "gpu", "effect": "NoSchedule"}]),
        );
        let evicting = node(
            "c",
            serde_json::json!({}),
            serde_json::json!([{"key": "gpu", "effect": "NoExecute"}]),
        );
        let not_ready = node(
            "d",
            serde_json::json!({}),
            serde_json::json!([
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            ]),
        );
        let any = template_pod(&ds(serde_json::json!({})), "h");
        assert_eq!(should_run(&any, &plain), (true, true));
        // A new NoSchedule taint stops new daemons but keeps running ones.
        assert_eq!(should_run(&any, &tainted), (false, true));
        assert_eq!(should_run(&any, &evicting), (false, false));
        // The default tolerations cover node trouble.
        assert_eq!(should_run(&any, &not_ready), (true, true));

        let ssd = template_pod(
            &ds(serde_json::json!({"nodeSelector": {"disk": "ssd"}})),
            "h",
        );
        assert_eq!(should_run(&ssd, &plain), (true, true));
        assert_eq!(should_run(&ssd, &not_ready), (false, false));
        let affinity = template_pod(
            &ds(
                serde_json::json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "NotIn", "values": ["ssd"]}]}],
                }}}}),
            ),
            "h",
        );
        assert_eq!(should_run(&affinity, &plain), (false, false));
        assert!(should_run(&affinity, &tainted).1);
        let tolerant = template_pod(
            &ds(serde_json::json!({"tolerations": [{"key": "gpu", "operator": "Exists"}]})),
            "h",
        );
        assert_eq!(should_run(&tolerant, &evicting), (true, true));
    }

    #[test]
    fn pods_are_pinned_by_node_affinity() {
        let d = ds(serde_json::json!({}));
        let pod = pod_for_node(&template_pod(&d, "abc"), "node-1");
        assert_eq!(target_node(&pod).as_deref(), Some("node-1"));
        assert!(pod.spec.as_ref().unwrap().node_name.is_none());
        assert_eq!(pod.labels()[REVISION_HASH], "abc");
        assert_eq!(pod.labels()[TEMPLATE_GENERATION], "2");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("d-"));
        let tolerations = pod.spec.unwrap().tolerations.unwrap();
        assert_eq!(tolerations.len(), 6);
    }

    #[test]
    fn pods_are_updated_by_hash_or_template_generation() {
        let d = ds(serde_json::json!({}));
        let pod = template_pod(&d, "abc");
        assert!(is_updated(&pod, "abc", Some(7)));
        // Generation 2 made it, whatever its hash.
        assert!(is_updated(&pod, "other", Some(2)));
        assert!(!is_updated(&pod, "other", Some(3)));
        assert!(!is_updated(&pod, "", None));
    }
}
