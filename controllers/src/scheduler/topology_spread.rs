//! Upstream's PodTopologySpread plugin: `topologySpreadConstraints` keep the pods a selector
//! names spread over the domains of a node label, as a filter (`DoNotSchedule`: the skew may
//! not pass `maxSkew`) or as a score (`ScheduleAnyway`). A pod without constraints of its own
//! gets upstream's system defaults when Services or its controller select it (at most 3 more
//! per node than the emptiest node, 5 per zone, both as scores), which is what spreads a
//! Deployment's replicas over the nodes.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Node, Pod};
use minik8s_api::selector::{Requirement, Selector};

use super::cache::{Cache, NodeState, NodeUsage, PodInfo};
use super::filters::{self, Rejection};

pub const ERR_CONSTRAINTS: &str = "node(s) didn't match pod topology spread constraints";
pub const ERR_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// One constraint, parsed, with upstream's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    pub max_skew: i64,
    pub key: String,
    /// `DoNotSchedule` (a filter) rather than `ScheduleAnyway` (a score).
    pub hard: bool,
    pub selector: Selector,
    pub min_domains: i64,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes the pod's node selector and
    /// required node affinity admit are counted.
    honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose taints the pod tolerates are counted.
    honor_taints: bool,
}

impl Constraint {
    fn soft(key: &str, max_skew: i64, selector: Selector) -> Self {
        Constraint {
            max_skew,
            key: key.to_string(),
            hard: false,
            selector,
            min_domains: 1,
            honor_node_affinity: true,
            honor_taints: false,
        }
    }

    /// Whether `node` counts for this constraint (upstream's matchNodeInclusionPolicies).
    fn includes(&self, pod: &Pod, node: &NodeState) -> bool {
        if self.honor_node_affinity && filters::node_affinity(pod, &node.node).is_err() {
            return false;
        }
        if self.honor_taints {
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default();
            let taints = node.node.spec.as_ref().and_then(|s| s.taints.as_deref());
            let untolerated = taints.unwrap_or_default().iter().any(|taint| {
                matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
                    && !tolerations.iter().any(|t| filters::tolerates(t, taint))
            });
            if untolerated {
                return false;
            }
        }
        true
    }
}

/// A pod's constraints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Constraints {
    pub list: Vec<Constraint>,
    /// The system defaults, not the pod's own: a node needs only the keys of the constraints
    /// it is scored on, not all of them.
    pub system_default: bool,
}

/// The pod's constraints, or the system defaults over `default_selector` (what the Services,
/// ReplicationController, ReplicaSet or StatefulSet selecting the pod select) when it has
/// none.
pub fn constraints(pod: &Pod, default_selector: Option<&Selector>) -> Constraints {
    let own = pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or_default();
    if own.is_empty() {
        return match default_selector.filter(|s| !s.is_empty()) {
            Some(s) => Constraints {
                list: vec![
                    Constraint::soft(HOSTNAME, 3, s.clone()),
                    Constraint::soft(ZONE, 5, s.clone()),
                ],
                system_default: true,
            },
            None => Constraints::default(),
        };
    }
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let list = own
        .iter()
        .map(|c| {
            let mut selector =
                Selector::from_label_selector(c.label_selector.as_ref()).unwrap_or(Selector {
                    requirements: vec![],
                    nothing: true,
                });
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(key) {
                    selector
                        .requirements
                        .push(Requirement::In(key.clone(), vec![v.clone()]));
                }
            }
            Constraint {
                max_skew: c.max_skew as i64,
                key: c.topology_key.clone(),
                hard: c.when_unsatisfiable != "ScheduleAnyway",
                selector,
                min_domains: c.min_domains.unwrap_or(1) as i64,
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect();
    Constraints {
        list,
        system_default: false,
    }
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a String> {
    node.metadata.labels.as_ref()?.get(key)
}

fn has_all_keys(node: &Node, constraints: &[Constraint]) -> bool {
    constraints.iter().all(|c| label(node, &c.key).is_some())
}

/// The pods on a node that `selector` selects in `namespace`, terminating ones left out.
fn matching(usage: Option<&NodeUsage>, namespace: &str, selector: &Selector) -> i64 {
    usage.map_or(0, |u| {
        u.groups
            .iter()
            .filter(|(g, _)| {
                !g.terminating
                    && g.namespace == namespace
                    && selector.matches(Some(g.labels.as_ref()))
            })
            .map(|(_, n)| *n as i64)
            .sum()
    })
}

/// Upstream's PreFilter state: matching pods per domain of each hard constraint, and the
/// global minimum each is measured against.
#[derive(Debug)]
pub struct FilterState {
    constraints: Vec<Constraint>,
    counts: Vec<HashMap<String, i64>>,
    minimum: Vec<i64>,
}

/// The filter's state; `None` when the pod has no hard constraint.
pub fn prefilter(
    pod: &Pod,
    info: &PodInfo,
    constraints: &Constraints,
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
) -> Option<FilterState> {
    let hard: Vec<Constraint> = constraints
        .list
        .iter()
        .filter(|c| c.hard)
        .cloned()
        .collect();
    if hard.is_empty() {
        return None;
    }
    let mut counts = vec![HashMap::<String, i64>::new(); hard.len()];
    for (name, node) in nodes {
        if !has_all_keys(&node.node, &hard) {
            continue;
        }
        for (i, c) in hard.iter().enumerate() {
            if !c.includes(pod, node) {
                continue;
            }
            let value = label(&node.node, &c.key).expect("checked above").clone();
            let n = matching(cache.usage(name), &info.group.namespace, &c.selector);
            *counts[i].entry(value).or_default() += n;
        }
    }
    let minimum = hard
        .iter()
        .zip(&counts)
        .map(|(c, domains)| {
            if (domains.len() as i64) < c.min_domains {
                0
            } else {
                domains.values().copied().min().unwrap_or(0)
            }
        })
        .collect();
    Some(FilterState {
        constraints: hard,
        counts,
        minimum,
    })
}

/// Upstream's Filter: placing the pod on `node` may not raise any skew past `maxSkew`.
pub fn filter(state: &FilterState, info: &PodInfo, node: &Node) -> Result<(), Rejection> {
    for (i, c) in state.constraints.iter().enumerate() {
        let Some(value) = label(node, &c.key) else {
            return Err(Rejection::unresolvable(ERR_MISSING_LABEL));
        };
        let itself = c.selector.matches(Some(info.group.labels.as_ref())) as i64;
        let here = state.counts[i].get(value).copied().unwrap_or(0);
        if here + itself - state.minimum[i] > c.max_skew {
            return Err(Rejection::resolvable(ERR_CONSTRAINTS));
        }
    }
    Ok(())
}

/// Upstream's PreScore state for the soft constraints.
#[derive(Debug)]
pub struct ScoreState {
    constraints: Vec<Constraint>,
    /// Matching pods per domain (key, value) of the candidates, hostname excepted (counted
    /// per node when scoring).
    domains: HashMap<(String, String), i64>,
    /// `log(domains + 2)` per constraint.
    weights: Vec<f64>,
    /// Candidates without every key of the pod's own constraints: scored 0.
    ignored: HashSet<String>,
}

/// The score's state over the feasible `candidates`; `None` when the pod has no soft
/// constraint.
pub fn prescore(
    pod: &Pod,
    info: &PodInfo,
    constraints: &Constraints,
    candidates: &[&str],
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
) -> Option<ScoreState> {
    let soft: Vec<Constraint> = constraints
        .list
        .iter()
        .filter(|c| !c.hard)
        .cloned()
        .collect();
    if soft.is_empty() || candidates.is_empty() {
        return None;
    }
    let require_all = !constraints.system_default;
    let mut state = ScoreState {
        weights: Vec::new(),
        domains: HashMap::new(),
        ignored: HashSet::new(),
        constraints: soft,
    };
    let mut sizes = vec![0usize; state.constraints.len()];
    for name in candidates {
        let Some(node) = nodes.get(*name) else {
            continue;
        };
        if require_all && !has_all_keys(&node.node, &state.constraints) {
            state.ignored.insert(name.to_string());
            continue;
        }
        for (i, c) in state.constraints.iter().enumerate() {
            if c.key == HOSTNAME {
                continue;
            }
            let value = label(&node.node, &c.key).cloned().unwrap_or_default();
            if let std::collections::hash_map::Entry::Vacant(e) =
                state.domains.entry((c.key.clone(), value))
            {
                e.insert(0);
                sizes[i] += 1;
            }
        }
    }
    state.weights = state
        .constraints
        .iter()
        .zip(&sizes)
        .map(|(c, size)| {
            let size = if c.key == HOSTNAME {
                candidates.len() - state.ignored.len()
            } else {
                *size
            };
            ((size + 2) as f64).ln()
        })
        .collect();
    // Upstream also counts the pods of nodes without the key, under an empty value that no
    // node is ever scored by; they are left out here, and so is the whole pass when no
    // candidate has any key but the hostname (hollow and single-zone clusters).
    if state.domains.keys().any(|(_, v)| !v.is_empty()) {
        for (name, node) in nodes {
            if require_all && !has_all_keys(&node.node, &state.constraints) {
                continue;
            }
            for c in &state.constraints {
                if c.key == HOSTNAME || !c.includes(pod, node) {
                    continue;
                }
                let Some(value) = label(&node.node, &c.key) else {
                    continue;
                };
                if let Some(n) = state.domains.get_mut(&(c.key.clone(), value.clone())) {
                    *n += matching(cache.usage(name), &info.group.namespace, &c.selector);
                }
            }
        }
    }
    Some(state)
}

/// A candidate's raw score (more matching pods around it, higher), or `None` when ignored.
pub fn score(
    state: &ScoreState,
    info: &PodInfo,
    name: &str,
    node: &Node,
    cache: &Cache,
) -> Option<i64> {
    if state.ignored.contains(name) {
        return None;
    }
    let mut score = 0.0;
    for (i, c) in state.constraints.iter().enumerate() {
        let Some(value) = label(node, &c.key) else {
            continue;
        };
        let n = if c.key == HOSTNAME {
            matching(cache.usage(name), &info.group.namespace, &c.selector)
        } else {
            state
                .domains
                .get(&(c.key.clone(), value.clone()))
                .copied()
                .unwrap_or(0)
        };
        score += n as f64 * state.weights[i] + (c.max_skew - 1) as f64;
    }
    Some(score.round() as i64)
}

/// Upstream's NormalizeScore: the fewest matching pods get 100; ignored nodes get 0.
pub fn normalize(raw: &[Option<i64>]) -> Vec<i64> {
    let scored = raw.iter().flatten();
    let min = scored.clone().copied().min().unwrap_or(0);
    let max = scored.copied().max().unwrap_or(0).max(0);
    raw.iter()
        .map(|s| match s {
            None => 0,
            Some(_) if max == 0 => super::scoring::MAX_NODE_SCORE,
            Some(s) => super::scoring::MAX_NODE_SCORE * (max + min - s) / max,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn node(name: &str, zone: Option<&str>) -> NodeState {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(z) = zone {
            labels[ZONE] = json!(z);
        }
        NodeState::new(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
            }))
            .unwrap(),
        ))
    }

    fn nodes(list: Vec<NodeState>) -> BTreeMap<String, NodeState> {
        list.into_iter()
            .map(|n| (n.node.metadata.name.clone().unwrap(), n))
            .collect()
    }

    fn pod(app: &str, spread: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "topologySpreadConstraints": spread},
        }))
        .unwrap()
    }

    fn place(cache: &mut Cache, node: &str, app: &str, n: usize) {
        for i in 0..n {
            let uid = format!("{node}-{app}-{i}");
            cache.add_bound(&uid, node, PodInfo::new(&pod(app, json!(null))));
        }
    }

    fn feasible(p: &Pod, nodes: &BTreeMap<String, NodeState>, cache: &Cache) -> Vec<String> {
        let info = PodInfo::new(p);
        let cons = constraints(p, None);
        let state = prefilter(p, &info, &cons, nodes, cache).unwrap();
        nodes
            .iter()
            .filter(|(_, n)| filter(&state, &info, &n.node).is_ok())
            .map(|(name, _)| name.clone())
            .collect()
    }

    #[test]
    fn hard_constraint_keeps_the_skew_within_max_skew() {
        let nodes = nodes(vec![
            node("a1", Some("a")),
            node("a2", Some("a")),
            node("b1", Some("b")),
            node("x", None),
        ]);
        let mut cache = Cache::default();
        place(&mut cache, "a1", "web", 2);
        place(&mut cache, "b1", "web", 1);
        place(&mut cache, "b1", "other", 5);
        let web = pod(
            "web",
            json!([{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}}]),
        );
        // Zone a has 2, b has 1: only b may take the next one; `x` has no zone.
        assert_eq!(feasible(&web, &nodes, &cache), ["b1"]);
        let info = PodInfo::new(&web);
        let state = prefilter(&web, &info, &constraints(&web, None), &nodes, &cache).unwrap();
        let r = filter(&state, &info, &nodes["x"].node).unwrap_err();
        assert_eq!(
            (r.reasons[0].as_str(), r.resolvable),
            (ERR_MISSING_LABEL, false)
        );
        let r = filter(&state, &info, &nodes["a2"].node).unwrap_err();
        assert_eq!(
            (r.reasons[0].as_str(), r.resolvable),
            (ERR_CONSTRAINTS, true)
        );

        // minDomains 3 with two zones: the minimum is taken as 0, so no zone may pass 1.
        let web = pod(
            "web",
            json!([{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                    "minDomains": 3, "labelSelector": {"matchLabels": {"app": "web"}}}]),
        );
        assert!(feasible(&web, &nodes, &cache).is_empty());
    }

    #[test]
    fn match_label_keys_and_node_affinity_policy() {
        let nodes = nodes(vec![node("n1", Some("a")), node("n2", Some("b"))]);
        let mut cache = Cache::default();
        place(&mut cache, "n1", "web", 3);
        // The selector names no pod (matchLabelKeys adds app=api): every node has 0.
        let api = pod(
            "api",
            json!([{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                    "matchLabelKeys": ["app"]}]),
        );
        assert_eq!(feasible(&api, &nodes, &cache), ["n1", "n2"]);

        // A node selector keeps n2 out of the count (Honor): n1 alone is the minimum.
        let mut web = pod(
            "web",
            json!([{"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}}]),
        );
        web.spec.as_mut().unwrap().node_selector =
            Some([("kubernetes.io/hostname".to_string(), "n1".to_string())].into());
        let info = PodInfo::new(&web);
        let state = prefilter(&web, &info, &constraints(&web, None), &nodes, &cache).unwrap();
        assert!(filter(&state, &info, &nodes["n1"].node).is_ok());
    }

    #[test]
    fn system_defaults_prefer_the_node_with_fewest_matching_pods() {
        let nodes = nodes(vec![node("n1", None), node("n2", None), node("n3", None)]);
        let mut cache = Cache::default();
        place(&mut cache, "n1", "web", 4);
        place(&mut cache, "n2", "web", 1);
        place(&mut cache, "n3", "other", 9);
        let web = pod("web", json!(null));
        let selector = Selector::parse("app=web").unwrap();
        let cons = constraints(&web, Some(&selector));
        assert!(cons.system_default && cons.list.iter().all(|c| !c.hard));
        assert!(constraints(&web, None).list.is_empty());
        let info = PodInfo::new(&web);
        let names = ["n1", "n2", "n3"];
        let state = prescore(&web, &info, &cons, &names, &nodes, &cache).unwrap();
        let raw: Vec<Option<i64>> = names
            .iter()
            .map(|n| score(&state, &info, n, &nodes[*n].node, &cache))
            .collect();
        // 3 nodes without zones: hostname weight ln(5); count·w + (3 - 1).
        let w = 5f64.ln();
        let expect = |n: f64| Some((n * w + 2.0).round() as i64);
        assert_eq!(raw, [expect(4.0), expect(1.0), expect(0.0)]);
        let scores = normalize(&raw);
        assert_eq!(scores[2], 100);
        assert!(scores[0] < scores[1] && scores[1] < scores[2]);
    }

    #[test]
    fn own_soft_constraints_ignore_nodes_without_the_key() {
        let nodes = nodes(vec![
            node("a1", Some("a")),
            node("b1", Some("b")),
            node("x", None),
        ]);
        let mut cache = Cache::default();
        place(&mut cache, "a1", "web", 2);
        let web = pod(
            "web",
            json!([{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "web"}}}]),
        );
        let info = PodInfo::new(&web);
        let cons = constraints(&web, None);
        assert!(prefilter(&web, &info, &cons, &nodes, &cache).is_none());
        let names = ["a1", "b1", "x"];
        let state = prescore(&web, &info, &cons, &names, &nodes, &cache).unwrap();
        let raw: Vec<Option<i64>> = names
            .iter()
            .map(|n| score(&state, &info, n, &nodes[*n].node, &cache))
            .collect();
        assert_eq!(raw[2], None);
        // Zone a: 2 matching pods, weight ln(4): 3 after rounding; zone b: 0.
        assert_eq!(raw[..2], [Some(3), Some(0)]);
        assert_eq!(normalize(&raw), [0, 100, 0]);
    }
}
