//! One scheduling decision: filter every node, score the ones left, pick the best; or explain,
//! in upstream's words, why no node fits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::cache::{Cache, NodeState, NodeUsage, PodInfo};
use super::filters::{self, Rejection};
use super::scoring::{self, Candidate, ScoringStrategy};

/// Why a pod could not be placed; its `Display` is the message of the `FailedScheduling`
/// event and of the PodScheduled condition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("no nodes available to schedule pods")]
    NoNodes,
    #[error("{}", fit_message(.num_nodes, .rejections, *.preemption_never))]
    Unfit {
        num_nodes: usize,
        /// One per node.
        rejections: Vec<Rejection>,
        /// The pod may not preempt (`preemptionPolicy: Never`).
        preemption_never: bool,
    },
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

/// Upstream's `FitError.Error()` followed by what its default preemption plugin reports. This
/// scheduler does not preempt: nodes where preemption could help are reported as having no
/// victims, which is what upstream says when no pod of lower priority runs there.
fn fit_message(num_nodes: &usize, rejections: &[Rejection], preemption_never: bool) -> String {
    let filters = histogram(
        rejections
            .iter()
            .flat_map(|r| r.reasons.iter().map(String::as_str)),
    );
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

/// Chooses a node for `pod` among `nodes` given what `cache` counts on them. `last` is the
/// previous choice (for RoundRobin); `random(n)` picks among `n` equally good nodes.
pub fn schedule(
    pod: &Pod,
    info: &PodInfo,
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
    strategy: ScoringStrategy,
    last: Option<&str>,
    random: impl FnOnce(usize) -> usize,
) -> Result<String, ScheduleError> {
    if nodes.is_empty() {
        return Err(ScheduleError::NoNodes);
    }
    let empty = NodeUsage::default();
    let mut rejections = Vec::new();
    let mut candidates = Vec::new();
    for (name, node) in nodes {
        let usage = cache.usage(name).unwrap_or(&empty);
        match filters::run_all(pod, info, node, usage) {
            Ok(()) => candidates.push(Candidate {
                name,
                strategy_score: scoring::strategy_score(strategy, info, node, usage),
                affinity_weight: filters::preferred_affinity_weight(pod, &node.node),
                intolerable_taints: filters::intolerable_prefer_no_schedule(pod, &node.taints),
            }),
            Err(r) => rejections.push(r),
        }
    }
    match scoring::select(strategy, &candidates, last, random) {
        Some(i) => Ok(candidates[i].name.to_string()),
        None => Err(ScheduleError::Unfit {
            num_nodes: nodes.len(),
            rejections,
            preemption_never: pod
                .spec
                .as_ref()
                .and_then(|s| s.preemption_policy.as_deref())
                == Some("Never"),
        }),
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
        let err = schedule(
            &p,
            &PodInfo::new(&p),
            &ns,
            &Cache::default(),
            ScoringStrategy::LeastAllocated,
            None,
            |_| 0,
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
        let err = schedule(
            &never,
            &PodInfo::new(&never),
            &ns,
            &Cache::default(),
            ScoringStrategy::LeastAllocated,
            None,
            |_| 0,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "0/3 nodes are available: 3 Insufficient cpu. preemption: not eligible due to \
             preemptionPolicy=Never.."
        );
        let err = schedule(
            &p,
            &PodInfo::new(&p),
            &BTreeMap::new(),
            &Cache::default(),
            ScoringStrategy::LeastAllocated,
            None,
            |_| 0,
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "no nodes available to schedule pods");
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
            let chosen = schedule(
                &p,
                &info,
                &ns,
                &cache,
                ScoringStrategy::LeastAllocated,
                None,
                |_| 0,
            )
            .unwrap();
            cache.assume(&i.to_string(), &chosen, info.clone());
            *counts.entry(chosen).or_insert(0) += 1;
        }
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), vec![5, 5]);

        // MostAllocated packs instead.
        let mut cache = Cache::default();
        for i in 0..4 {
            let chosen = schedule(
                &p,
                &info,
                &ns,
                &cache,
                ScoringStrategy::MostAllocated,
                None,
                |_| 0,
            )
            .unwrap();
            cache.assume(&i.to_string(), &chosen, info.clone());
        }
        assert_eq!(cache.usage("a").map(|u| u.pods), Some(4));
        assert!(cache.usage("b").is_none());
    }
}
