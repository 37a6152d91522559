//! Ranking the nodes that passed the filters. The strategy (`--scoring-strategy`) gives each
//! node 0–100 as upstream's NodeResourcesFit and BalancedAllocation plugins do; preferred node
//! affinity (weight 2), PreferNoSchedule taints (weight 3), inter-pod affinity (weight 2) and
//! topology spreading (weight 2) are added on top, normalised across the candidates like
//! upstream's NodeAffinity, TaintToleration, InterPodAffinity and PodTopologySpread scores. Ties go to
//! a random best node, as upstream's `selectHost`, except under RoundRobin, which walks the
//! nodes in name order.

use std::fmt;
use std::str::FromStr;

use super::cache::{NodeState, NodeUsage, PodInfo};

pub const MAX_NODE_SCORE: i64 = 100;
/// Upstream's default plugin weights.
const NODE_AFFINITY_WEIGHT: i64 = 2;
const TAINT_TOLERATION_WEIGHT: i64 = 3;
const INTER_POD_AFFINITY_WEIGHT: i64 = 2;
const POD_TOPOLOGY_SPREAD_WEIGHT: i64 = 2;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScoringStrategy {
    /// Prefer the emptiest node (upstream's default): spreads pods.
    #[default]
    LeastAllocated,
    /// Prefer the fullest node that still fits: packs pods.
    MostAllocated,
    /// Prefer nodes whose cpu and memory use stay in proportion.
    BalancedAllocation,
    /// Take the nodes in turn.
    RoundRobin,
    /// Any node that fits.
    Random,
    /// Prefer the node running the fewest pods.
    LeastPods,
    /// Prefer the node whose measured cpu use, with the pod's request, is the smallest
    /// share of its allocatable cpu (Trimaran-style; see `load`).
    LeastCpu,
    /// The same for memory.
    LeastMem,
}

impl ScoringStrategy {
    pub const ALL: [ScoringStrategy; 8] = [
        ScoringStrategy::LeastAllocated,
        ScoringStrategy::MostAllocated,
        ScoringStrategy::BalancedAllocation,
        ScoringStrategy::RoundRobin,
        ScoringStrategy::Random,
        ScoringStrategy::LeastPods,
        ScoringStrategy::LeastCpu,
        ScoringStrategy::LeastMem,
    ];

    /// Whether it scores by the nodes' measured use.
    pub fn load_aware(self) -> bool {
        matches!(self, ScoringStrategy::LeastCpu | ScoringStrategy::LeastMem)
    }

    pub fn name(self) -> &'static str {
        match self {
            ScoringStrategy::LeastAllocated => "LeastAllocated",
            ScoringStrategy::MostAllocated => "MostAllocated",
            ScoringStrategy::BalancedAllocation => "BalancedAllocation",
            ScoringStrategy::RoundRobin => "RoundRobin",
            ScoringStrategy::Random => "Random",
            ScoringStrategy::LeastPods => "LeastPods",
            ScoringStrategy::LeastCpu => "LeastCpu",
            ScoringStrategy::LeastMem => "LeastMem",
        }
    }
}

impl fmt::Display for ScoringStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "unknown scoring strategy {0:?} (one of LeastAllocated, MostAllocated, BalancedAllocation, RoundRobin, Random, LeastPods, LeastCpu, LeastMem)"
)]
pub struct UnknownStrategy(String);

impl FromStr for ScoringStrategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownStrategy(s.to_string()))
    }
}

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// Upstream's BalancedAllocation: 100 × (1 − the standard deviation of the cpu and memory
/// fractions the node would have with the pod).
fn balanced(fractions: &[f64]) -> i64 {
    let std = match fractions {
        [a, b] => ((a - b) / 2.0).abs(),
        [] | [_] => 0.0,
        many => {
            let mean = many.iter().sum::<f64>() / many.len() as f64;
            (many.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / many.len() as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// The strategy's score of one node for the pod, 0–100. `load` is the node's predicted use
/// (millicores, bytes) for the load-aware strategies; a node never measured scores 0.
pub fn strategy_score(
    strategy: ScoringStrategy,
    pod: &PodInfo,
    node: &NodeState,
    usage: &NodeUsage,
    load: Option<(i64, i64)>,
) -> i64 {
    let cpu = usage.nonzero_cpu + pod.nonzero.0;
    let memory = usage.nonzero_memory + pod.nonzero.1;
    let alloc = &node.allocatable;
    match strategy {
        ScoringStrategy::LeastAllocated => {
            (least_requested(cpu, alloc.milli_cpu) + least_requested(memory, alloc.memory)) / 2
        }
        ScoringStrategy::MostAllocated => {
            (most_requested(cpu, alloc.milli_cpu) + most_requested(memory, alloc.memory)) / 2
        }
        ScoringStrategy::BalancedAllocation => {
            let fractions: Vec<f64> = [
                (
                    usage.requested.milli_cpu + pod.requests.milli_cpu,
                    alloc.milli_cpu,
                ),
                (usage.requested.memory + pod.requests.memory, alloc.memory),
            ]
            .into_iter()
            .filter(|(_, a)| *a > 0)
            .map(|(r, a)| (r as f64 / a as f64).min(1.0))
            .collect();
            balanced(&fractions)
        }
        ScoringStrategy::LeastPods => least_requested(usage.pods + 1, node.allowed_pods),
        ScoringStrategy::LeastCpu => load.map_or(0, |(used, _)| {
            least_requested(used + pod.nonzero.0, alloc.milli_cpu)
        }),
        ScoringStrategy::LeastMem => load.map_or(0, |(_, used)| {
            least_requested(used + pod.nonzero.1, alloc.memory)
        }),
        ScoringStrategy::RoundRobin | ScoringStrategy::Random => 0,
    }
}

/// Upstream's `DefaultNormalizeScore`: scales so the best node gets 100 (or, reversed, the
/// worst gets 0); all zero stays zero (reversed: all 100).
pub fn normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
        if reverse {
            *s = MAX_NODE_SCORE - *s;
        }
    }
}

/// What is known of one feasible node when ranking.
pub struct Candidate<'a> {
    pub name: &'a str,
    pub strategy_score: i64,
    /// Sum of the weights of the preferred node affinity terms it matches.
    pub affinity_weight: i64,
    /// PreferNoSchedule taints the pod does not tolerate.
    pub intolerable_taints: i64,
    /// Inter-pod affinity weights of the domains it is in (may be negative).
    pub pod_affinity: i64,
    /// The spreading score before normalising (fewer is better); `None` when the node is
    /// not scored for spreading.
    pub spread: Option<i64>,
}

/// Upstream's InterPodAffinity NormalizeScore: min-max scaled to 0–100; all equal is 0.
fn normalize_min_max(scores: &mut [i64]) {
    let (Some(min), Some(max)) = (scores.iter().min().copied(), scores.iter().max().copied())
    else {
        return;
    };
    for s in scores.iter_mut() {
        *s = if max > min {
            MAX_NODE_SCORE * (*s - min) / (max - min)
        } else {
            0
        };
    }
}

/// The total score of each candidate, in order.
pub fn total_scores(candidates: &[Candidate<'_>]) -> Vec<i64> {
    let mut affinity: Vec<i64> = candidates.iter().map(|c| c.affinity_weight).collect();
    normalize(&mut affinity, false);
    let mut taints: Vec<i64> = candidates.iter().map(|c| c.intolerable_taints).collect();
    normalize(&mut taints, true);
    let mut pods: Vec<i64> = candidates.iter().map(|c| c.pod_affinity).collect();
    normalize_min_max(&mut pods);
    let spread_raw: Vec<Option<i64>> = candidates.iter().map(|c| c.spread).collect();
    let spread = if spread_raw.iter().all(Option::is_none) {
        vec![0; candidates.len()]
    } else {
        super::topology_spread::normalize(&spread_raw)
    };
    candidates
        .iter()
        .zip(affinity)
        .zip(taints)
        .zip(pods.iter().zip(spread))
        .map(|(((c, a), t), (p, s))| {
            c.strategy_score
                + a * NODE_AFFINITY_WEIGHT
                + t * TAINT_TOLERATION_WEIGHT
                + p * INTER_POD_AFFINITY_WEIGHT
                + s * POD_TOPOLOGY_SPREAD_WEIGHT
        })
        .collect()
}

/// Picks among the best-scoring candidates: the first after `last` in name order under
/// RoundRobin (candidates come sorted by name), otherwise `random(n)` of the `n` tied.
pub fn select(
    strategy: ScoringStrategy,
    candidates: &[Candidate<'_>],
    last: Option<&str>,
    random: impl FnOnce(usize) -> usize,
) -> Option<usize> {
    let scores = total_scores(candidates);
    let best = *scores.iter().max()?;
    let tied: Vec<usize> = (0..candidates.len())
        .filter(|i| scores[*i] == best)
        .collect();
    if strategy == ScoringStrategy::RoundRobin {
        let next = tied
            .iter()
            .find(|i| last.is_none_or(|l| candidates[**i].name > l))
            .or(tied.first());
        return next.copied();
    }
    Some(tied[random(tied.len()) % tied.len()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::resources::Resources;
    use k8s_openapi::api::core::v1::Node;
    use std::sync::Arc;

    fn node(cpu: i64, memory: i64, pods: i64) -> NodeState {
        NodeState {
            node: Arc::new(Node::default()),
            allocatable: Resources {
                milli_cpu: cpu,
                memory,
                ..Default::default()
            },
            allowed_pods: pods,
            taints: vec![],
        }
    }

    fn usage(cpu: i64, memory: i64, pods: i64) -> NodeUsage {
        NodeUsage {
            requested: Resources {
                milli_cpu: cpu,
                memory,
                ..Default::default()
            },
            nonzero_cpu: cpu,
            nonzero_memory: memory,
            pods,
            ..Default::default()
        }
    }

    fn pod(cpu: i64, memory: i64) -> PodInfo {
        PodInfo {
            requests: Resources {
                milli_cpu: cpu,
                memory,
                ..Default::default()
            },
            nonzero: (cpu, memory),
            ..Default::default()
        }
    }

    #[test]
    fn allocation_strategies() {
        let n = node(4000, 10000, 10);
        let p = pod(1000, 2500);
        let empty = usage(0, 0, 0);
        let half = usage(1000, 2500, 1);
        use ScoringStrategy::*;
        // (75 + 75) / 2 and (50 + 50) / 2
        assert_eq!(strategy_score(LeastAllocated, &p, &n, &empty, None), 75);
        assert_eq!(strategy_score(LeastAllocated, &p, &n, &half, None), 50);
        assert_eq!(strategy_score(MostAllocated, &p, &n, &empty, None), 25);
        assert_eq!(strategy_score(MostAllocated, &p, &n, &half, None), 50);
        // Over capacity: least gives 0, most caps at 100.
        let full = usage(4000, 10000, 1);
        assert_eq!(strategy_score(LeastAllocated, &p, &n, &full, None), 0);
        assert_eq!(strategy_score(MostAllocated, &p, &n, &full, None), 100);
        // Balanced: cpu 2000/4000 = 0.5, memory 2500/10000 = 0.25: 100 × (1 − 0.125).
        assert_eq!(
            strategy_score(BalancedAllocation, &pod(1000, 0), &n, &half, None),
            87
        );
        assert_eq!(strategy_score(BalancedAllocation, &p, &n, &half, None), 100);
        assert_eq!(strategy_score(LeastPods, &p, &n, &empty, None), 90);
        assert_eq!(strategy_score(LeastPods, &p, &n, &usage(0, 0, 4), None), 50);
        assert_eq!(strategy_score(RoundRobin, &p, &n, &empty, None), 0);
        // Load-aware: measured use plus the pod's request, whatever the requests say.
        assert_eq!(strategy_score(LeastCpu, &p, &n, &full, Some((1000, 0))), 50);
        assert_eq!(strategy_score(LeastMem, &p, &n, &full, Some((0, 5000))), 25);
        assert_eq!(
            strategy_score(LeastCpu, &p, &n, &empty, None),
            0,
            "never measured"
        );
    }

    #[test]
    fn normalizing_like_upstream() {
        let mut s = vec![0, 5, 10];
        normalize(&mut s, false);
        assert_eq!(s, vec![0, 50, 100]);
        let mut s = vec![0, 1, 2];
        normalize(&mut s, true);
        assert_eq!(s, vec![100, 50, 0]);
        let mut s = vec![0, 0];
        normalize(&mut s, true);
        assert_eq!(s, vec![100, 100]);
        let mut s = vec![0, 0];
        normalize(&mut s, false);
        assert_eq!(s, vec![0, 0]);
    }

    fn cand(name: &str, score: i64, affinity: i64, taints: i64) -> Candidate<'_> {
        Candidate {
            name,
            strategy_score: score,
            affinity_weight: affinity,
            intolerable_taints: taints,
            pod_affinity: 0,
            spread: None,
        }
    }

    #[test]
    fn pod_affinity_and_spreading_add_their_weighted_scores() {
        let mut c = [
            cand("a", 50, 0, 0),
            cand("b", 50, 0, 0),
            cand("c", 50, 0, 0),
        ];
        c[0].pod_affinity = -5;
        c[2].pod_affinity = 10;
        // Min-max: a 0, b 33, c 100, times 2.
        assert_eq!(total_scores(&c), vec![350, 416, 550]);
        c.iter_mut().for_each(|c| c.pod_affinity = 0);
        (c[0].spread, c[1].spread, c[2].spread) = (Some(4), Some(0), None);
        // Fewest matching pods: 100; ignored: 0.
        assert_eq!(total_scores(&c), vec![350, 550, 350]);
    }

    #[test]
    fn preferred_affinity_outweighs_a_small_allocation_difference() {
        let c = [cand("a", 80, 0, 0), cand("b", 60, 3, 0)];
        // b: 60 + 100 × 2 + 100 × 3; a: 80 + 0 + 100 × 3.
        assert_eq!(total_scores(&c), vec![380, 560]);
        assert_eq!(
            select(ScoringStrategy::LeastAllocated, &c, None, |_| 0),
            Some(1)
        );
        // An untolerated PreferNoSchedule taint costs 300.
        let c = [cand("a", 50, 0, 1), cand("b", 40, 0, 0)];
        assert_eq!(
            select(ScoringStrategy::LeastAllocated, &c, None, |_| 0),
            Some(1)
        );
    }

    #[test]
    fn ties_rotate_under_round_robin_and_are_random_otherwise() {
        let c = [cand("a", 0, 0, 0), cand("b", 0, 0, 0), cand("c", 0, 0, 0)];
        let rr = ScoringStrategy::RoundRobin;
        assert_eq!(select(rr, &c, None, |_| 0), Some(0));
        assert_eq!(select(rr, &c, Some("a"), |_| 0), Some(1));
        assert_eq!(select(rr, &c, Some("c"), |_| 0), Some(0));
        assert_eq!(
            select(ScoringStrategy::Random, &c, None, |n| n - 1),
            Some(2)
        );
        assert_eq!(select(ScoringStrategy::Random, &[], None, |_| 0), None);
        assert_eq!(
            "mostallocated".parse::<ScoringStrategy>().unwrap(),
            ScoringStrategy::MostAllocated
        );
        assert!("Best".parse::<ScoringStrategy>().is_err());
    }
}
