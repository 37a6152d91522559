//! Upstream's DefaultPreemption (the PostFilter): when no node fits a pod, look for the node
//! where evicting pods of lower priority lets it fit, evicting as few and as unimportant pods
//! as possible and, where it can, none that a PodDisruptionBudget protects. The victims are
//! deleted and the pod is nominated to the node (`status.nominatedNodeName`); it lands there
//! once they are gone, and meanwhile other pods of lower priority are not let into the room
//! it is waiting for.
//!
//! The choice is computed here without I/O; [`evict_and_nominate`] carries it out.
//!
//! Only resources, ports and the pod count are simulated without the victims: a pod kept out
//! by inter-pod affinity or spreading is not helped by preemption here.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use minik8s_api::selector::Selector;

use crate::util::events::Recorder;

use super::cache::{Cache, NodeState, PodInfo};
use super::filters::{self, PodFilters};

/// What one PodDisruptionBudget still allows.
#[derive(Clone, Debug)]
pub struct Budget {
    namespace: String,
    selector: Selector,
    allowed: i32,
    /// Pods already counted as disrupted (`status.disruptedPods`).
    disrupted: HashSet<String>,
}

impl Budget {
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        let spec = pdb.spec.as_ref();
        let selector = spec
            .and_then(|s| s.selector.as_ref())
            .map(|s| {
                Selector::from_label_selector(Some(s)).unwrap_or(Selector {
                    requirements: vec![],
                    nothing: true,
                })
            })
            .unwrap_or(Selector {
                requirements: vec![],
                nothing: true,
            });
        let status = pdb.status.as_ref();
        Budget {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            selector,
            allowed: status.map_or(0, |s| s.disruptions_allowed),
            disrupted: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    fn covers(&self, pod: &PodInfo) -> bool {
        // An empty selector protects nothing (upstream skips it).
        self.namespace == pod.group.namespace
            && !self.selector.is_empty()
            && self.selector.matches(Some(pod.group.labels.as_ref()))
    }
}

/// Splits `pods` (most important first) into the ones whose eviction would break a budget
/// and the others, charging each eviction to the budgets that cover the pod (upstream's
/// filterPodsWithPDBViolation).
fn split_by_budgets<'a>(
    pods: &[&'a PodInfo],
    budgets: &[Budget],
) -> (Vec<&'a PodInfo>, Vec<&'a PodInfo>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.allowed).collect();
    let (mut violating, mut other) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut breaks = false;
        for (i, b) in budgets.iter().enumerate() {
            if !b.covers(pod) || b.disrupted.contains(&pod.name) {
                continue;
            }
            allowed[i] -= 1;
            if allowed[i] < 0 {
                breaks = true;
            }
        }
        if breaks {
            violating.push(*pod)
        } else {
            other.push(*pod)
        }
    }
    (violating, other)
}

/// The node chosen and the pods to evict from it, most important first.
#[derive(Clone, Debug)]
pub struct Choice {
    pub node: String,
    pub victims: Vec<PodInfo>,
    pub budget_violations: usize,
}

/// Whether the pod may preempt (upstream's PodEligibleToPreemptOthers): not with
/// `preemptionPolicy: Never`, and not again while pods of lower priority are still going
/// away from the node it was nominated to.
pub fn eligible(pod: &Pod, info: &PodInfo, cache: &Cache) -> bool {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
        return false;
    }
    let nominated = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty());
    if let Some(node) = nominated {
        let on = cache.pods_on(&HashSet::from([node]));
        let leaving = on
            .get(node)
            .into_iter()
            .flatten()
            .any(|p| p.group.terminating && p.priority < info.priority);
        if leaving {
            return false;
        }
    }
    true
}

/// More important first: higher priority, then the one started earlier.
fn more_important_first(a: &&PodInfo, b: &&PodInfo) -> std::cmp::Ordering {
    b.priority
        .cmp(&a.priority)
        .then_with(|| a.start.cmp(&b.start))
}

/// The victims on one node: the fewest, least important pods of lower priority without
/// which the pod fits; `None` when even evicting all of them does not help.
fn victims_on(
    pod: &Pod,
    info: &PodInfo,
    node: &NodeState,
    cache: &Cache,
    on_node: &[&PodInfo],
    filters_state: &PodFilters,
    budgets: &[Budget],
) -> Option<(Vec<PodInfo>, usize)> {
    let mut lower: Vec<&PodInfo> = on_node
        .iter()
        .copied()
        .filter(|p| p.priority < info.priority)
        .collect();
    if lower.is_empty() {
        return None;
    }
    let name = node.node.metadata.name.as_deref().unwrap_or_default();
    let mut usage = cache.usage(name).cloned().unwrap_or_default();
    for p in &lower {
        usage.sub(p);
    }
    filters::run_all(pod, info, node, &usage, filters_state).ok()?;
    lower.sort_by(more_important_first);
    let (violating, other) = split_by_budgets(&lower, budgets);
    let mut victims = Vec::new();
    let mut violations = 0;
    // Give back as many pods as still let the pod fit, the protected ones first.
    for (protected, p) in violating
        .iter()
        .map(|p| (true, *p))
        .chain(other.iter().map(|p| (false, *p)))
    {
        usage.add(p);
        if filters::run_all(pod, info, node, &usage, filters_state).is_err() {
            usage.sub(p);
            victims.push(p.clone());
            violations += protected as usize;
        }
    }
    victims.sort_by(|a, b| more_important_first(&a, &b));
    Some((victims, violations))
}

/// The node to preempt on, among `candidates` (the nodes that rejected the pod for reasons
/// evictions may change), by upstream's pickOneNodeForPreemption: fewest budget
/// violations, then the lowest highest victim priority, the lowest sum of priorities, the
/// fewest victims, and the latest start among the most important victims.
pub fn choose(
    pod: &Pod,
    info: &PodInfo,
    candidates: &[String],
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
    filters_state: &PodFilters,
    budgets: &[Budget],
) -> Option<Choice> {
    let wanted: HashSet<&str> = candidates.iter().map(String::as_str).collect();
    let on = cache.pods_on(&wanted);
    let mut choices = Vec::new();
    for name in candidates {
        let (Some(node), Some(pods)) = (nodes.get(name), on.get(name.as_str())) else {
            continue;
        };
        if let Some((victims, budget_violations)) =
            victims_on(pod, info, node, cache, pods, filters_state, budgets)
        {
            choices.push(Choice {
                node: name.clone(),
                victims,
                budget_violations,
            });
        }
    }
    let rank = |c: &Choice| {
        let highest = c.victims.first().map_or(i32::MIN, |v| v.priority);
        // Priorities shifted to be positive before summing, as upstream.
        let sum: i64 = c
            .victims
            .iter()
            .map(|v| v.priority as i64 + i32::MAX as i64 + 1)
            .sum();
        let earliest_of_highest = c
            .victims
            .iter()
            .filter(|v| v.priority == highest)
            .filter_map(|v| v.start)
            .min();
        (
            c.budget_violations,
            highest,
            sum,
            c.victims.len(),
            std::cmp::Reverse(earliest_of_highest),
        )
    };
    choices.into_iter().min_by_key(rank)
}

/// Evicts the victims (a DisruptionTarget condition, a graceful delete and a `Preempted`
/// event each) and nominates the preemptor to the node, as upstream's preparation of a
/// preemption candidate.
pub async fn evict_and_nominate(
    client: Client,
    recorder: Recorder,
    preemptor: Arc<Pod>,
    choice: Choice,
) {
    let preemptor_uid = preemptor.uid().unwrap_or_default();
    let scheduler = preemptor
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_else(|| super::SCHEDULER_NAME.to_string());
    for v in &choice.victims {
        let victim = Pod {
            metadata: ObjectMeta {
                name: Some(v.name.clone()),
                namespace: Some(v.group.namespace.clone()),
                uid: Some(v.uid.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let condition = PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("PreemptionByScheduler".into()),
            message: Some(format!(
                "{scheduler}: preempting to accommodate a higher priority pod"
            )),
            last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        };
        if let Err(e) =
            crate::util::pods::add_condition_and_delete(&client, &victim, condition).await
        {
            tracing::warn!(pod = %v.name, error = %e, "preempting a victim");
            continue;
        }
        let event = Event {
            type_: EventType::Normal,
            reason: "Preempted".into(),
            note: Some(format!(
                "Preempted by pod {preemptor_uid} on node {}",
                choice.node
            )),
            action: "Preempting".into(),
            secondary: Some(preemptor.object_ref(&())),
        };
        if let Err(e) = recorder.publish(&event, &victim.object_ref(&())).await {
            tracing::debug!(error = %e, "recording the Preempted event");
        }
    }
    let patch = serde_json::json!({
        "metadata": {"uid": preemptor.uid()},
        "status": {"nominatedNodeName": choice.node},
    });
    let api: Api<Pod> = Api::namespaced(client, &preemptor.namespace().unwrap_or_default());
    if let Err(e) = api
        .patch_status(
            &preemptor.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        tracing::debug!(error = %e, "nominating the preemptor");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn node(name: &str, cpu: &str) -> NodeState {
        NodeState::new(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        ))
    }

    fn pod(name: &str, cpu: &str, priority: i32, app: &str, started: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name,
                         "labels": {"app": app}, "creationTimestamp": started},
            "spec": {"priority": priority, "containers": [{"name": "c", "image": "i",
                     "resources": {"requests": {"cpu": cpu}}}]},
        }))
        .unwrap()
    }

    fn setup(placed: &[(&str, &Pod)]) -> (BTreeMap<String, NodeState>, Cache) {
        let nodes = [node("n1", "2"), node("n2", "2")]
            .into_iter()
            .map(|n| (n.node.metadata.name.clone().unwrap(), n))
            .collect();
        let mut cache = Cache::default();
        for (node, p) in placed {
            cache.add_bound(p.metadata.name.as_deref().unwrap(), node, PodInfo::new(p));
        }
        (nodes, cache)
    }

    fn victims(c: &Choice) -> Vec<&str> {
        c.victims.iter().map(|v| v.name.as_str()).collect()
    }

    const T0: &str = "2026-01-01T00:00:00Z";
    const T1: &str = "2026-01-01T01:00:00Z";

    #[test]
    fn the_fewest_least_important_victims() {
        let low1 = pod("low1", "1", 10, "a", T0);
        let low2 = pod("low2", "1", 20, "a", T0);
        let mid = pod("mid", "1", 500, "a", T0);
        let other = pod("other", "1500m", 5, "b", T0);
        let (nodes, cache) = setup(&[("n1", &low1), ("n1", &low2), ("n2", &mid), ("n2", &other)]);
        let high = pod("high", "1", 1000, "h", T1);
        let info = PodInfo::new(&high);
        let all = vec!["n1".to_string(), "n2".to_string()];
        let f = PodFilters::default();
        let c = choose(&high, &info, &all, &nodes, &cache, &f, &[]).unwrap();
        // On n1 evicting low1 (priority 10) is enough, low2 is given back; on n2 `other`
        // (priority 5), `mid` is given back. The lower highest victim priority wins.
        assert_eq!((c.node.as_str(), victims(&c)), ("n2", vec!["other"]));

        // Nothing of lower priority anywhere: no choice.
        let mid2 = pod("mid2", "1", 500, "a", T0);
        let (nodes, cache) = setup(&[("n1", &mid), ("n2", &mid2)]);
        let low = pod("low", "2", 1, "l", T1);
        let info = PodInfo::new(&low);
        assert!(choose(&low, &info, &all, &nodes, &cache, &f, &[]).is_none());
    }

    #[test]
    fn budgets_are_spared_where_possible() {
        let a1 = pod("a1", "1", 10, "a", T0);
        let a2 = pod("a2", "1", 10, "a", T0);
        let b1 = pod("b1", "1", 10, "b", T0);
        let b2 = pod("b2", "1", 10, "b", T0);
        let (nodes, cache) = setup(&[("n1", &a1), ("n1", &a2), ("n2", &b1), ("n2", &b2)]);
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2,
                       "expectedPods": 2, "observedGeneration": 1},
        }))
        .unwrap();
        let high = pod("high", "1", 1000, "h", T1);
        let info = PodInfo::new(&high);
        let all = vec!["n1".to_string(), "n2".to_string()];
        let c = choose(
            &high,
            &info,
            &all,
            &nodes,
            &cache,
            &PodFilters::default(),
            &[Budget::of(&pdb)],
        )
        .unwrap();
        assert_eq!(c.node, "n2");
        assert_eq!(c.budget_violations, 0);
        assert_eq!(c.victims.len(), 1);
    }

    #[test]
    fn eligibility() {
        let (_, mut cache) = setup(&[]);
        let mut high = pod("high", "1", 1000, "h", T1);
        let info = PodInfo::new(&high);
        assert!(eligible(&high, &info, &cache));
        high.spec.as_mut().unwrap().preemption_policy = Some("Never".into());
        assert!(!eligible(&high, &info, &cache));
        high.spec.as_mut().unwrap().preemption_policy = None;
        // Nominated to n1 where a victim is still terminating: wait for it.
        high.status = Some(k8s_openapi::api::core::v1::PodStatus {
            nominated_node_name: Some("n1".into()),
            ..Default::default()
        });
        let mut victim = pod("victim", "1", 1, "v", T0);
        victim.metadata.deletion_timestamp = victim.metadata.creation_timestamp.clone();
        cache.add_bound("victim", "n1", PodInfo::new(&victim));
        assert!(!eligible(&high, &info, &cache));
    }
}
