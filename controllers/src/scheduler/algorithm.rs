//! One scheduling decision: filter every node, score the ones left, pick the best; or explain,
//! in upstream's words, why no node fits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use minik8s_api::selector::Selector;

use super::cache::{Cache, NodeState, NodeUsage, PodInfo};
use super::filters::{self, PodFilters, Rejection};
use super::pod_affinity::{self, NamespaceLabels};
use super::scoring::{self, Candidate, ScoringStrategy};
use super::topology_spread;
use super::volume_binding;

/// Why a pod could not be placed; its `Display` is the message of the `FailedScheduling`
/// event and of the PodScheduled condition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("no nodes available to schedule pods")]
    NoNodes,
    #[error("{}", fit_message(.num_nodes, .rejections, *.preemption_never, .prefilter.as_deref()))]
    Unfit {
        num_nodes: usize,
        /// A PreFilter's reason, which stands for every node's.
        prefilter: Option<String>,
        /// One per node.
        rejections: Vec<Rejection>,
        /// The pod may not preempt (`preemptionPolicy: Never`).
        preemption_never: bool,
        /// The nodes whose reasons evictions could change.
        preemptable: Vec<String>,
    },
}

impl ScheduleError {
    /// The message once preemption has found victims: upstream's FitError without the
    /// preemption part.
    pub fn without_preemption(&self) -> String {
        match self {
            ScheduleError::Unfit {
                num_nodes,
                rejections,
                prefilter,
                ..
            } => format!(
                "0/{num_nodes} nodes are available: {}.",
                filter_reasons(rejections, prefilter.as_deref())
            ),
            other => other.to_string(),
        }
    }

    /// Whether other pods keep this one out (affinity, anti-affinity or spreading), so that
    /// a pod placed or changed somewhere may let it in.
    pub fn waits_on_pods(&self) -> bool {
        let ScheduleError::Unfit { rejections, .. } = self else {
            return false;
        };
        rejections.iter().flat_map(|r| &r.reasons).any(|r| {
            [
                pod_affinity::ERR_AFFINITY_RULES,
                pod_affinity::ERR_ANTI_AFFINITY_RULES,
                pod_affinity::ERR_EXISTING_ANTI_AFFINITY,
                topology_spread::ERR_CONSTRAINTS,
            ]
            .contains(&r.as_str())
        })
    }
}

/// What a decision reads of the cluster beyond its nodes and pods.
pub struct Context<'a> {
    pub namespace_labels: NamespaceLabels<'a>,
    /// What the Services and the controller selecting the pod select: the pods it is
    /// spread among when it has no constraints of its own.
    pub default_spread_selector: Option<Selector>,
    /// Pods of at least this pod's priority nominated to a node by preemption: the room
    /// they wait for is theirs (upstream's addNominatedPods).
    pub nominated: Vec<(&'a str, &'a PodInfo)>,
    /// A node's predicted use (millicores, bytes), for the load-aware strategies.
    pub load: &'a dyn Fn(&str) -> Option<(i64, i64)>,
    /// The claims, volumes and classes (VolumeBinding); `None` before their caches exist.
    pub volumes: Option<&'a dyn volume_binding::Objects>,
}

/// The filters' states for `pod` that depend on other pods (upstream's PreFilter).
pub fn pod_filters(
    pod: &Pod,
    info: &PodInfo,
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
    context: &Context<'_>,
) -> (topology_spread::Constraints, PodFilters) {
    let spread = topology_spread::constraints(pod, context.default_spread_selector.as_ref());
    let (volumes, prefilter_rejection) = match context.volumes {
        Some(objects) => match volume_binding::prefilter(pod, objects) {
            Ok(claims) => (claims, None),
            Err(message) => (None, Some(message)),
        },
        None => (None, None),
    };
    let pods = PodFilters {
        spread: topology_spread::prefilter(pod, info, &spread, nodes, cache),
        affinity: pod_affinity::prefilter(info, nodes, cache, context.namespace_labels),
        volumes,
        prefilter_rejection,
    };
    (spread, pods)
}

/// `"<count> <reason>"` for each reason, sorted as strings (as upstream sorts them).
fn histogram<'a>(reasons: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reasons {
        *counts.entry(r).or_default() += 1;
    }
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    parts.join(", ")
}

/// The filters' part of upstream's `FitError.Error()`: a PreFilter's message alone (the
/// same status was given to every node), else each reason counted over the nodes.
fn filter_reasons(rejections: &[Rejection], prefilter: Option<&str>) -> String {
    match prefilter {
        Some(message) => message.to_string(),
        None => histogram(
            rejections
                .iter()
                .flat_map(|r| r.reasons.iter().map(String::as_str)),
        ),
    }
}

/// Upstream's `FitError.Error()` followed by what its default preemption plugin reports when
/// it finds no victims: nodes where evictions could help are reported as having none, the
/// others as not helped by preemption.
fn fit_message(
    num_nodes: &usize,
    rejections: &[Rejection],
    preemption_never: bool,
    prefilter: Option<&str>,
) -> String {
    let filters = filter_reasons(rejections, prefilter);
    let preemption = if preemption_never {
        "not eligible due to preemptionPolicy=Never.".to_string()
    } else {
        let per_node = rejections.iter().map(|r| {
            if r.resolvable {
                "No preemption victims found for incoming pod"
            } else {
                "Preemption is not helpful for scheduling"
            }
        });
        format!(
            "0/{num_nodes} nodes are available: {}.",
            histogram(per_node)
        )
    };
    format!("0/{num_nodes} nodes are available: {filters}. preemption: {preemption}.")
}

/// Below this many nodes every node is scored (upstream's minFeasibleNodesToFind).
const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this (minFeasibleNodesPercentageToFind).
const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// How many feasible nodes are enough to pick from (upstream's numFeasibleNodesToFind with
/// the default, adaptive percentageOfNodesToScore): all of a small cluster, 42 % of 1,000
/// nodes, 10 % of 5,000, never fewer than 100.
pub fn feasible_nodes_to_find(all: usize) -> usize {
    if all < MIN_FEASIBLE_NODES_TO_FIND {
        return all;
    }
    let percentage = 50usize
        .saturating_sub(all / 125)
        .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    (all * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Chooses a node for `pod` among `nodes` given what `cache` counts on them. `last` is the
/// previous choice (for RoundRobin); `random(n)` picks among `n` equally good nodes.
///
/// As upstream, the search for feasible nodes starts where the previous one stopped
/// (`next_start`) and ends once [`feasible_nodes_to_find`] nodes pass the filters, so that
/// large clusters are not filtered and scored whole for every pod; a pod that fits nowhere
/// is still checked against every node.
#[allow(clippy::too_many_arguments)]
pub fn schedule(
    pod: &Pod,
    info: &PodInfo,
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
    context: &Context<'_>,
    strategy: ScoringStrategy,
    last: Option<&str>,
    next_start: &mut usize,
    random: impl FnOnce(usize) -> usize,
) -> Result<String, ScheduleError> {
    if nodes.is_empty() {
        return Err(ScheduleError::NoNodes);
    }
    let (spread, pods) = pod_filters(pod, info, nodes, cache, context);
    let preemption_never = pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref())
        == Some("Never");
    if let Some(message) = &pods.prefilter_rejection {
        return Err(ScheduleError::Unfit {
            num_nodes: nodes.len(),
            prefilter: Some(message.clone()),
            rejections: vec![Rejection::unresolvable(message.clone()); nodes.len()],
            preemption_never,
            preemptable: vec![],
        });
    }
    let empty = NodeUsage::default();
    let mut rejections = Vec::new();
    let mut preemptable = Vec::new();
    let mut candidates = Vec::new();
    let wanted = feasible_nodes_to_find(nodes.len());
    let start = *next_start % nodes.len();
    let mut processed = 0;
    for (name, node) in nodes.iter().skip(start).chain(nodes.iter().take(start)) {
        if candidates.len() >= wanted {
            break;
        }
        processed += 1;
        let mut usage = cache.usage(name).unwrap_or(&empty);
        let with_nominated;
        if context.nominated.iter().any(|(n, _)| *n == name.as_str()) {
            let mut u = usage.clone();
            for (_, p) in context
                .nominated
                .iter()
                .filter(|(n, _)| *n == name.as_str())
            {
                u.add(p);
            }
            with_nominated = u;
            usage = &with_nominated;
        }
        match filters::run_all(pod, info, node, usage, &pods) {
            Ok(()) => candidates.push(Candidate {
                name,
                strategy_score: scoring::strategy_score(
                    strategy,
                    info,
                    node,
                    usage,
                    (context.load)(name),
                ),
                affinity_weight: filters::preferred_affinity_weight(pod, &node.node),
                intolerable_taints: filters::intolerable_prefer_no_schedule(pod, &node.taints),
                pod_affinity: 0,
                spread: None,
            }),
            Err(r) => {
                if r.resolvable {
                    preemptable.push(name.clone());
                }
                rejections.push(r)
            }
        }
    }
    *next_start = (start + processed) % nodes.len();
    if candidates.len() > 1 {
        score_other_pods(pod, info, &spread, nodes, cache, context, &mut candidates);
    }
    match scoring::select(strategy, &candidates, last, random) {
        Some(i) => Ok(candidates[i].name.to_string()),
        None => Err(ScheduleError::Unfit {
            num_nodes: nodes.len(),
            prefilter: None,
            rejections,
            preemption_never,
            preemptable,
        }),
    }
}

/// Upstream's InterPodAffinity and PodTopologySpread scores of each candidate.
fn score_other_pods(
    pod: &Pod,
    info: &PodInfo,
    spread: &topology_spread::Constraints,
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
    context: &Context<'_>,
    candidates: &mut [Candidate<'_>],
) {
    let affinity = pod_affinity::score_map(info, nodes, cache, context.namespace_labels);
    let names: Vec<&str> = candidates.iter().map(|c| c.name).collect();
    let spreading = topology_spread::prescore(pod, info, spread, &names, nodes, cache);
    for c in candidates.iter_mut() {
        let node = &nodes[c.name].node;
        c.pod_affinity = pod_affinity::score(&affinity, node);
        if let Some(state) = &spreading {
            c.spread = topology_spread::score(state, info, c.name, node, cache);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use std::sync::Arc;

    fn node(name: &str, cpu: &str, labels: serde_json::Value) -> NodeState {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "status": {
                "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }))
        .unwrap();
        NodeState::new(Arc::new(n))
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}),
        )
        .unwrap()
    }

    /// [`schedule`] with ties going to the first candidate.
    fn pick(
        p: &Pod,
        ns: &BTreeMap<String, NodeState>,
        cache: &Cache,
        strategy: ScoringStrategy,
        next: &mut usize,
    ) -> Result<String, ScheduleError> {
        let context = Context {
            namespace_labels: &|_| None,
            default_spread_selector: None,
            nominated: vec![],
            load: &|_| None,
            volumes: None,
        };
        schedule(
            p,
            &PodInfo::new(p),
            ns,
            cache,
            &context,
            strategy,
            None,
            next,
            |_| 0,
        )
    }

    #[test]
    fn anti_affinity_places_one_replica_per_node_then_waits_on_pods() {
        let ns = nodes(vec![
            node("a", "4", serde_json::json!({"kubernetes.io/hostname": "a"})),
            node("b", "4", serde_json::json!({"kubernetes.io/hostname": "b"})),
        ]);
        let mut p = pod(serde_json::json!({
            "containers": [{"name": "c"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}},
                 "topologyKey": "kubernetes.io/hostname"}]}},
        }));
        p.metadata.namespace = Some("default".into());
        p.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
        let info = PodInfo::new(&p);
        let mut cache = Cache::default();
        let mut placed = Vec::new();
        for i in 0..2 {
            let chosen = pick(&p, &ns, &cache, ScoringStrategy::MostAllocated, &mut 0).unwrap();
            cache.assume(&i.to_string(), &chosen, info.clone());
            placed.push(chosen);
        }
        placed.sort();
        assert_eq!(placed, ["a", "b"]);
        let err = pick(&p, &ns, &cache, ScoringStrategy::MostAllocated, &mut 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. \
             preemption: 0/2 nodes are available: 2 No preemption victims found for incoming \
             pod.."
        );
        assert!(err.waits_on_pods());
    }

    #[test]
    fn default_spreading_outweighs_packing() {
        let ns = nodes(vec![
            node("a", "4", serde_json::json!({"kubernetes.io/hostname": "a"})),
            node("b", "4", serde_json::json!({"kubernetes.io/hostname": "b"})),
        ]);
        let mut p = pod(serde_json::json!({"containers": [{"name": "c"}]}));
        p.metadata.namespace = Some("default".into());
        p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        let info = PodInfo::new(&p);
        let context = Context {
            namespace_labels: &|_| None,
            default_spread_selector: Some(Selector::parse("app=web").unwrap()),
            nominated: vec![],
            load: &|_| None,
            volumes: None,
        };
        let mut cache = Cache::default();
        let mut counts = BTreeMap::new();
        for i in 0..6 {
            let chosen = schedule(
                &p,
                &info,
                &ns,
                &cache,
                &context,
                ScoringStrategy::MostAllocated,
                None,
                &mut 0,
                |_| 0,
            )
            .unwrap();
            cache.assume(&i.to_string(), &chosen, info.clone());
            *counts.entry(chosen).or_insert(0) += 1;
        }
        // MostAllocated alone packs every pod onto one node (see below); the Service's or
        // ReplicaSet's default spreading keeps them even.
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![3, 3]);
    }

    fn nodes(list: Vec<NodeState>) -> BTreeMap<String, NodeState> {
        list.into_iter()
            .map(|n| (n.node.metadata.name.clone().unwrap(), n))
            .collect()
    }

    #[test]
    fn the_message_counts_reasons_per_node_like_upstream() {
        let ns = nodes(vec![
            node("a", "1", serde_json::json!({"disk": "ssd"})),
            node("b", "8", serde_json::json!({})),
            node("c", "8", serde_json::json!({})),
        ]);
        let p = pod(serde_json::json!({
            "nodeSelector": {"disk": "ssd"},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
        }));
        let err = pick(
            &p,
            &ns,
            &Cache::default(),
            ScoringStrategy::LeastAllocated,
            &mut 0,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node \
             affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims \
             found for incoming pod, 2 Preemption is not helpful for scheduling.."
        );
        let never = pod(serde_json::json!({
            "preemptionPolicy": "Never",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "9"}}}],
        }));
        let err = pick(
            &never,
            &ns,
            &Cache::default(),
            ScoringStrategy::LeastAllocated,
            &mut 0,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/3 nodes are available: 3 Insufficient cpu. preemption: not eligible due to \
             preemptionPolicy=Never.."
        );
        let err = pick(
            &p,
            &BTreeMap::new(),
            &Cache::default(),
            ScoringStrategy::LeastAllocated,
            &mut 0,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "no nodes available to schedule pods");
    }

    #[test]
    fn large_clusters_are_searched_in_part_from_where_the_last_search_stopped() {
        assert_eq!(feasible_nodes_to_find(99), 99);
        assert_eq!(feasible_nodes_to_find(100), 100);
        assert_eq!(feasible_nodes_to_find(200), 100);
        assert_eq!(feasible_nodes_to_find(1000), 420);
        assert_eq!(feasible_nodes_to_find(5000), 500);
        let ns = nodes(
            (0..1000)
                .map(|i| node(&format!("n{i:04}"), "4", serde_json::json!({})))
                .collect(),
        );
        let p = pod(serde_json::json!({"containers": [{"name": "c"}]}));
        let cache = Cache::default();
        let mut next = 0;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3 {
            let chosen = pick(&p, &ns, &cache, ScoringStrategy::LeastAllocated, &mut next).unwrap();
            seen.insert(chosen);
        }
        // 420 + 420 + 420 nodes looked at: the third search wraps around.
        assert_eq!(next, 260);
        assert_eq!(seen.len(), 3, "each search picks among other nodes");

        // A pod that fits nowhere is checked against all 1,000.
        let big = pod(serde_json::json!({
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "9"}}}],
        }));
        let err = pick(
            &big,
            &ns,
            &cache,
            ScoringStrategy::LeastAllocated,
            &mut next,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("0/1000 nodes are available: 1000 Insufficient cpu."),
            "{err}"
        );
    }

    #[test]
    fn assumed_pods_spread_a_burst() {
        let ns = nodes(vec![
            node("a", "4", serde_json::json!({})),
            node("b", "4", serde_json::json!({})),
        ]);
        let p = pod(serde_json::json!({"containers": [{"name": "c"}]}));
        let info = PodInfo::new(&p);
        let mut cache = Cache::default();
        let mut counts = BTreeMap::new();
        for i in 0..10 {
            let chosen = pick(&p, &ns, &cache, ScoringStrategy::LeastAllocated, &mut 0).unwrap();
            cache.assume(&i.to_string(), &chosen, info.clone());
            *counts.entry(chosen).or_insert(0) += 1;
        }
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![5, 5]);

        // MostAllocated packs instead.
        let mut cache = Cache::default();
        for i in 0..4 {
            let chosen = pick(&p, &ns, &cache, ScoringStrategy::MostAllocated, &mut 0).unwrap();
            cache.assume(&i.to_string(), &chosen, info.clone());
        }
        assert_eq!(cache.usage("a").map(|u| u.pods), Some(4));
        assert!(cache.usage("b").is_none());
    }

    #[test]
    fn load_aware_strategies_follow_measured_use_and_recent_placements() {
        let ns = nodes(vec![
            node("a", "4", serde_json::json!({})),
            node("b", "4", serde_json::json!({})),
        ]);
        let p = pod(serde_json::json!({"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}));
        let info = PodInfo::new(&p);
        // Requests say both nodes are empty; measurements say a is busy on cpu, b on memory.
        let loads = super::super::load::NodeLoads::default();
        loads.record(
            [
                ("a".to_string(), (2000, 1 << 30)),
                ("b".to_string(), (500, 6 << 30)),
            ]
            .into(),
        );
        let now = tokio::time::Instant::now();
        let choose = |strategy| {
            let load = |n: &str| loads.predicted(n, now);
            let context = Context {
                namespace_labels: &|_| None,
                default_spread_selector: None,
                nominated: vec![],
                load: &load,
                volumes: None,
            };
            let cache = Cache::default();
            schedule(
                &p,
                &info,
                &ns,
                &cache,
                &context,
                strategy,
                None,
                &mut 0,
                |_| 0,
            )
            .unwrap()
        };
        assert_eq!(choose(ScoringStrategy::LeastCpu), "b");
        assert_eq!(choose(ScoringStrategy::LeastMem), "a");
        // Scores 25 (a) and 62 (b); with two pods of 1 cpu placed on b since the sample, b
        // would be at 3.5 of 4 cpus (12): a is the less loaded now.
        for _ in 0..2 {
            loads.placed("b", &info, now);
        }
        assert_eq!(choose(ScoringStrategy::LeastCpu), "a");
    }
}
