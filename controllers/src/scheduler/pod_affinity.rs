//! Upstream's InterPodAffinity plugin: a pod's required and preferred affinity and
//! anti-affinity to other pods within a topology domain (the nodes sharing the value of a
//! label such as `kubernetes.io/hostname` or `topology.kubernetes.io/zone`), and the symmetry
//! that a running pod's anti-affinity keeps matching pods away from its domain.
//!
//! As upstream, the counts per domain are computed once per decision (its PreFilter and
//! PreScore) and each node is then checked or scored by a lookup. Other pods are matched by
//! group ([`PodGroup`]): the pods of one ReplicaSet on a node are matched once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm};
use minik8s_api::selector::Selector;

use super::cache::{Cache, NodeState, PodGroup, PodInfo};
use super::filters::Rejection;

pub const ERR_AFFINITY_RULES: &str = "node(s) didn't match pod affinity rules";
pub const ERR_ANTI_AFFINITY_RULES: &str = "node(s) didn't match pod anti-affinity rules";
pub const ERR_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Upstream's default `hardPodAffinityWeight`: what a running pod's required affinity to the
/// incoming pod adds to the score of its domain.
const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// The labels of a namespace, by name (for `namespaceSelector`).
pub type NamespaceLabels<'a> = &'a dyn Fn(&str) -> Option<BTreeMap<String, String>>;

/// What a selector that does not parse selects (the API refuses such pods; a pod admitted
/// before that check matches nothing).
const NOTHING: Selector = Selector {
    requirements: vec![],
    nothing: true,
};

/// One `PodAffinityTerm`, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// `namespaces`, or the pod's own namespace when neither it nor a selector is given.
    namespaces: Vec<String>,
    /// `namespaceSelector`: `None` (nil) selects no namespace, `{}` every one.
    namespace_selector: Option<Selector>,
    selector: Selector,
    pub topology_key: String,
}

impl Term {
    fn new(
        pod_namespace: &str,
        pod_labels: &BTreeMap<String, String>,
        t: &PodAffinityTerm,
    ) -> Self {
        let mut selector =
            Selector::from_label_selector(t.label_selector.as_ref()).unwrap_or(NOTHING);
        // matchLabelKeys and mismatchLabelKeys take their values from the pod's own labels.
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = pod_labels.get(key) {
                selector
                    .requirements
                    .push(minik8s_api::selector::Requirement::In(
                        key.clone(),
                        vec![v.clone()],
                    ));
            }
        }
        for key in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = pod_labels.get(key) {
                selector
                    .requirements
                    .push(minik8s_api::selector::Requirement::NotIn(
                        key.clone(),
                        vec![v.clone()],
                    ));
            }
        }
        let namespace_selector = t
            .namespace_selector
            .as_ref()
            .map(|s| Selector::from_label_selector(Some(s)).unwrap_or(NOTHING));
        let mut namespaces = t.namespaces.clone().unwrap_or_default();
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.push(pod_namespace.to_string());
        }
        Term {
            namespaces,
            namespace_selector,
            selector,
            topology_key: t.topology_key.clone(),
        }
    }

    /// Whether pods of `group` are what the term names.
    fn matches(&self, group: &PodGroup, ns_labels: NamespaceLabels<'_>) -> bool {
        let in_namespace = self.namespaces.contains(&group.namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.is_empty() || s.matches(ns_labels(&group.namespace).as_ref()));
        in_namespace && self.selector.matches(Some(group.labels.as_ref()))
    }
}

/// A pod's affinity and anti-affinity terms to other pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AffinityTerms {
    pub required_affinity: Vec<Term>,
    pub required_anti_affinity: Vec<Term>,
    pub preferred_affinity: Vec<(i64, Term)>,
    pub preferred_anti_affinity: Vec<(i64, Term)>,
}

impl AffinityTerms {
    /// The pod's terms; `None` when it has none.
    pub fn of(pod: &Pod) -> Option<Self> {
        let affinity = pod.spec.as_ref()?.affinity.as_ref()?;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let term = |t: &PodAffinityTerm| Term::new(ns, labels, t);
        let mut terms = AffinityTerms::default();
        if let Some(a) = &affinity.pod_affinity {
            let required = a.required_during_scheduling_ignored_during_execution.iter();
            terms.required_affinity = required.flatten().map(term).collect();
            let preferred = a
                .preferred_during_scheduling_ignored_during_execution
                .iter();
            terms.preferred_affinity = preferred
                .flatten()
                .map(|w| (w.weight as i64, term(&w.pod_affinity_term)))
                .collect();
        }
        if let Some(a) = &affinity.pod_anti_affinity {
            let required = a.required_during_scheduling_ignored_during_execution.iter();
            terms.required_anti_affinity = required.flatten().map(term).collect();
            let preferred = a
                .preferred_during_scheduling_ignored_during_execution
                .iter();
            terms.preferred_anti_affinity = preferred
                .flatten()
                .map(|w| (w.weight as i64, term(&w.pod_affinity_term)))
                .collect();
        }
        let none = terms.required_affinity.is_empty()
            && terms.required_anti_affinity.is_empty()
            && terms.preferred_affinity.is_empty()
            && terms.preferred_anti_affinity.is_empty();
        (!none).then_some(terms)
    }

    fn has_preferred(&self) -> bool {
        !self.preferred_affinity.is_empty() || !self.preferred_anti_affinity.is_empty()
    }
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a String> {
    node.metadata.labels.as_ref()?.get(key)
}

/// Counts per topology domain (label key, value).
pub type DomainCounts = HashMap<(String, String), i64>;

fn add(counts: &mut DomainCounts, node: &Node, key: &str, n: i64) {
    if let Some(v) = label(node, key) {
        *counts.entry((key.to_string(), v.clone())).or_default() += n;
    }
}

/// Upstream's PreFilter state: which domains hold pods the incoming pod wants, or must avoid,
/// and which domains running pods keep it out of.
#[derive(Debug, Default)]
pub struct FilterState {
    terms: Option<Arc<AffinityTerms>>,
    /// Pods matching every required affinity term, per domain of each term's key.
    affinity: DomainCounts,
    /// Pods matching a required anti-affinity term, per domain.
    anti_affinity: DomainCounts,
    /// Running pods whose required anti-affinity matches the incoming pod, per domain.
    existing_anti_affinity: DomainCounts,
    /// The incoming pod matches all its own required affinity terms.
    matches_itself: bool,
}

/// The filter's state for `pod`; `None` when there is nothing to check (no terms of its own
/// and no running pod with required anti-affinity that it matches).
pub fn prefilter(
    info: &PodInfo,
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
    ns_labels: NamespaceLabels<'_>,
) -> Option<FilterState> {
    let mut state = FilterState::default();
    for (node_name, existing) in cache.pods_with_affinity() {
        let (Some(node), Some(terms)) = (nodes.get(node_name), existing.affinity.as_ref()) else {
            continue;
        };
        for t in &terms.required_anti_affinity {
            if t.matches(&info.group, ns_labels) {
                add(
                    &mut state.existing_anti_affinity,
                    &node.node,
                    &t.topology_key,
                    1,
                );
            }
        }
    }
    if let Some(terms) = info
        .affinity
        .as_ref()
        .filter(|t| !t.required_affinity.is_empty() || !t.required_anti_affinity.is_empty())
    {
        for (name, usage) in cache.usages() {
            let Some(node) = nodes.get(name) else {
                continue;
            };
            for (group, n) in &usage.groups {
                let n = *n as i64;
                let all = terms.required_affinity.iter();
                if !terms.required_affinity.is_empty()
                    && all.clone().all(|t| t.matches(group, ns_labels))
                {
                    for t in all {
                        add(&mut state.affinity, &node.node, &t.topology_key, n);
                    }
                }
                for t in &terms.required_anti_affinity {
                    if t.matches(group, ns_labels) {
                        add(&mut state.anti_affinity, &node.node, &t.topology_key, n);
                    }
                }
            }
        }
        state.matches_itself = terms
            .required_affinity
            .iter()
            .all(|t| t.matches(&info.group, ns_labels));
        state.terms = Some(terms.clone());
    }
    let nothing = state.terms.is_none() && state.existing_anti_affinity.is_empty();
    (!nothing).then_some(state)
}

/// Upstream's Filter, in its order: the pod's affinity, its anti-affinity, then the running
/// pods' anti-affinity.
pub fn filter(state: &FilterState, node: &Node) -> Result<(), Rejection> {
    if let Some(terms) = &state.terms {
        let mut pods_exist = true;
        for t in &terms.required_affinity {
            let Some(v) = label(node, &t.topology_key) else {
                return Err(Rejection::unresolvable(ERR_AFFINITY_RULES));
            };
            if state
                .affinity
                .get(&(t.topology_key.clone(), v.clone()))
                .copied()
                .unwrap_or(0)
                <= 0
            {
                pods_exist = false;
            }
        }
        // The first pod of a series with affinity to itself may go anywhere the labels
        // exist, or it would wait forever.
        let first_of_series = state.affinity.is_empty() && state.matches_itself;
        if !(pods_exist || first_of_series) {
            return Err(Rejection::unresolvable(ERR_AFFINITY_RULES));
        }
        for t in &terms.required_anti_affinity {
            if let Some(v) = label(node, &t.topology_key)
                && state
                    .anti_affinity
                    .get(&(t.topology_key.clone(), v.clone()))
                    .copied()
                    .unwrap_or(0)
                    > 0
            {
                return Err(Rejection::resolvable(ERR_ANTI_AFFINITY_RULES));
            }
        }
    }
    if !state.existing_anti_affinity.is_empty() {
        for (k, v) in node.metadata.labels.iter().flatten() {
            if state
                .existing_anti_affinity
                .get(&(k.clone(), v.clone()))
                .copied()
                .unwrap_or(0)
                > 0
            {
                return Err(Rejection::resolvable(ERR_EXISTING_ANTI_AFFINITY));
            }
        }
    }
    Ok(())
}

/// Upstream's PreScore: the weight each domain gets from the incoming pod's preferred terms
/// (for the pods they match there) and from the terms of running pods that match the
/// incoming pod (their preferred terms, and their required affinity at the hard weight).
pub fn score_map(
    info: &PodInfo,
    nodes: &BTreeMap<String, NodeState>,
    cache: &Cache,
    ns_labels: NamespaceLabels<'_>,
) -> DomainCounts {
    let mut scores = DomainCounts::new();
    if let Some(terms) = info.affinity.as_ref().filter(|t| t.has_preferred()) {
        for (name, usage) in cache.usages() {
            let Some(node) = nodes.get(name) else {
                continue;
            };
            for (group, n) in &usage.groups {
                let n = *n as i64;
                for (w, t) in &terms.preferred_affinity {
                    if t.matches(group, ns_labels) {
                        add(&mut scores, &node.node, &t.topology_key, w * n);
                    }
                }
                for (w, t) in &terms.preferred_anti_affinity {
                    if t.matches(group, ns_labels) {
                        add(&mut scores, &node.node, &t.topology_key, -w * n);
                    }
                }
            }
        }
    }
    for (node_name, existing) in cache.pods_with_affinity() {
        let (Some(node), Some(terms)) = (nodes.get(node_name), existing.affinity.as_ref()) else {
            continue;
        };
        let weighted = terms
            .required_affinity
            .iter()
            .map(|t| (HARD_POD_AFFINITY_WEIGHT, t))
            .chain(terms.preferred_affinity.iter().map(|(w, t)| (*w, t)))
            .chain(terms.preferred_anti_affinity.iter().map(|(w, t)| (-w, t)));
        for (w, t) in weighted {
            if t.matches(&info.group, ns_labels) {
                add(&mut scores, &node.node, &t.topology_key, w);
            }
        }
    }
    scores
}

/// A node's raw score: the weights of the domains it is in.
pub fn score(map: &DomainCounts, node: &Node) -> i64 {
    if map.is_empty() {
        return 0;
    }
    node.metadata
        .labels
        .iter()
        .flatten()
        .filter_map(|(k, v)| map.get(&(k.clone(), v.clone())))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: &str) -> NodeState {
        NodeState::new(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name,
                    "topology.kubernetes.io/zone": zone,
                }},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
            }))
            .unwrap(),
        ))
    }

    fn pod(ns: &str, labels: serde_json::Value, affinity: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i"}], "affinity": affinity},
        }))
        .unwrap()
    }

    fn term(key: &str, app: &str) -> serde_json::Value {
        json!({"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key})
    }

    fn nodes() -> BTreeMap<String, NodeState> {
        [node("a1", "a"), node("a2", "a"), node("b1", "b")]
            .into_iter()
            .map(|n| (n.node.metadata.name.clone().unwrap(), n))
            .collect()
    }

    fn no_ns(_: &str) -> Option<BTreeMap<String, String>> {
        None
    }

    fn feasible(p: &Pod, nodes: &BTreeMap<String, NodeState>, cache: &Cache) -> Vec<String> {
        let info = PodInfo::new(p);
        let Some(state) = prefilter(&info, nodes, cache, &no_ns) else {
            return nodes.keys().cloned().collect();
        };
        nodes
            .iter()
            .filter(|(_, n)| filter(&state, &n.node).is_ok())
            .map(|(name, _)| name.clone())
            .collect()
    }

    #[test]
    fn required_affinity_follows_the_matching_pods_domain() {
        let nodes = nodes();
        let mut cache = Cache::default();
        cache.add_bound(
            "db",
            "a2",
            PodInfo::new(&pod("default", json!({"app": "db"}), json!(null))),
        );
        let web = pod(
            "default",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                term("topology.kubernetes.io/zone", "db")]}}),
        );
        assert_eq!(feasible(&web, &nodes, &cache), ["a1", "a2"]);
        let info = PodInfo::new(&web);
        let state = prefilter(&info, &nodes, &cache, &no_ns).unwrap();
        let r = filter(&state, &nodes["b1"].node).unwrap_err();
        assert_eq!(
            (r.reasons[0].as_str(), r.resolvable),
            (ERR_AFFINITY_RULES, false)
        );

        // Another namespace's db does not count; with no match anywhere a pod that does not
        // match its own terms fits nowhere.
        let other = pod(
            "other",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                term("kubernetes.io/hostname", "db")]}}),
        );
        assert!(feasible(&other, &nodes, &cache).is_empty());
        // ... unless its namespaceSelector takes in every namespace.
        let mut t = term("kubernetes.io/hostname", "db");
        t["namespaceSelector"] = json!({});
        let everywhere = pod(
            "other",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [t]}}),
        );
        assert_eq!(feasible(&everywhere, &nodes, &cache), ["a2"]);
    }

    #[test]
    fn the_first_pod_of_a_self_affine_series_goes_anywhere() {
        let nodes = nodes();
        let cache = Cache::default();
        let first = pod(
            "default",
            json!({"app": "cache"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                term("topology.kubernetes.io/zone", "cache")]}}),
        );
        assert_eq!(feasible(&first, &nodes, &cache), ["a1", "a2", "b1"]);
    }

    #[test]
    fn anti_affinity_both_ways() {
        let nodes = nodes();
        let mut cache = Cache::default();
        // A running pod that keeps `app=web` pods off its node.
        let guard = pod(
            "default",
            json!({"app": "guard"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                term("kubernetes.io/hostname", "web")]}}),
        );
        cache.add_bound("guard", "a1", PodInfo::new(&guard));
        let web = pod("default", json!({"app": "web"}), json!(null));
        assert_eq!(feasible(&web, &nodes, &cache), ["a2", "b1"]);
        let info = PodInfo::new(&web);
        let state = prefilter(&info, &nodes, &cache, &no_ns).unwrap();
        let r = filter(&state, &nodes["a1"].node).unwrap_err();
        assert_eq!(
            (r.reasons[0].as_str(), r.resolvable),
            (ERR_EXISTING_ANTI_AFFINITY, true)
        );

        // One replica per zone.
        cache.add_bound(
            "w1",
            "a2",
            PodInfo::new(&pod("default", json!({"app": "spread"}), json!(null))),
        );
        let spread = pod(
            "default",
            json!({"app": "spread"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                term("topology.kubernetes.io/zone", "spread")]}}),
        );
        assert_eq!(feasible(&spread, &nodes, &cache), ["b1"]);
        let info = PodInfo::new(&spread);
        let state = prefilter(&info, &nodes, &cache, &no_ns).unwrap();
        let r = filter(&state, &nodes["a1"].node).unwrap_err();
        assert_eq!(r.reasons, [ERR_ANTI_AFFINITY_RULES]);
        // A pod without terms and no running anti-affinity: nothing to check.
        let plain = PodInfo::new(&pod("default", json!({"app": "x"}), json!(null)));
        assert!(prefilter(&plain, &nodes, &Cache::default(), &no_ns).is_none());
    }

    #[test]
    fn preferred_terms_and_running_pods_terms_weigh_domains() {
        let nodes = nodes();
        let mut cache = Cache::default();
        cache.add_bound(
            "db",
            "b1",
            PodInfo::new(&pod("default", json!({"app": "db"}), json!(null))),
        );
        cache.add_bound(
            "noisy",
            "a1",
            PodInfo::new(&pod("default", json!({"app": "noisy"}), json!(null))),
        );
        let web = pod(
            "default",
            json!({"app": "web"}),
            json!({
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": term("topology.kubernetes.io/zone", "db")}]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": term("kubernetes.io/hostname", "noisy")}]},
            }),
        );
        let info = PodInfo::new(&web);
        let map = score_map(&info, &nodes, &cache, &no_ns);
        let scores: Vec<i64> = ["a1", "a2", "b1"]
            .iter()
            .map(|n| score(&map, &nodes[*n].node))
            .collect();
        assert_eq!(scores, [-5, 0, 10]);

        // A running pod's required affinity to `app=web` draws web to its zone at weight 1.
        let fan = pod(
            "default",
            json!({"app": "fan"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                term("topology.kubernetes.io/zone", "web")]}}),
        );
        let mut cache = Cache::default();
        cache.add_bound("fan", "a2", PodInfo::new(&fan));
        let plain = PodInfo::new(&pod("default", json!({"app": "web"}), json!(null)));
        let map = score_map(&plain, &nodes, &cache, &no_ns);
        let scores: Vec<i64> = ["a1", "a2", "b1"]
            .iter()
            .map(|n| score(&map, &nodes[*n].node))
            .collect();
        assert_eq!(scores, [1, 1, 0]);
    }
}
