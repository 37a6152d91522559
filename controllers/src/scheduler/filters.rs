//! The filters that decide whether a pod may run on a node, in upstream's order and with
//! upstream's reasons (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts,
//! NodeResourcesFit, then PodTopologySpread and InterPodAffinity from their own modules), because users and tools read those reasons in `FailedScheduling`
//! events. The first filter that rejects a node decides its reasons, as upstream.
//!
//! Nothing here does I/O: a filter sees the pod, the node and what is already bound to it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};
use minik8s_api::selector::{Requirement, Selector};

use super::cache::{HostPort, NodeState, NodeUsage, PodInfo};
use super::resources::Resources;
use super::{pod_affinity, topology_spread, volume_binding};

pub const ERR_NODE_NAME: &str = "node(s) didn't match the requested node name";
pub const ERR_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const ERR_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
pub const ERR_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
pub const ERR_TOO_MANY_PODS: &str = "Too many pods";

pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Why a node cannot take a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reasons: Vec<String>,
    /// Whether evicting pods could change the answer (upstream's `Unschedulable` as opposed to
    /// `UnschedulableAndUnresolvable`); it only shapes the preemption part of the message.
    pub resolvable: bool,
}

impl Rejection {
    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Rejection {
            reasons: vec![reason.into()],
            resolvable: false,
        }
    }

    pub fn resolvable(reason: impl Into<String>) -> Self {
        Rejection {
            reasons: vec![reason.into()],
            resolvable: true,
        }
    }
}

/// What the filters of other pods compute once per decision (upstream's PreFilter states).
#[derive(Debug, Default)]
pub struct PodFilters {
    pub spread: Option<topology_spread::FilterState>,
    pub affinity: Option<pod_affinity::FilterState>,
    /// The pod's claims (VolumeBinding's PreFilter), when it has any.
    pub volumes: Option<volume_binding::PodClaims>,
    /// Why no node can take the pod, when a PreFilter said so (its message stands for every
    /// node's reasons).
    pub prefilter_rejection: Option<String>,
}

/// Every filter, in upstream's order.
pub fn run_all(
    pod: &Pod,
    info: &PodInfo,
    node: &NodeState,
    usage: &NodeUsage,
    pods: &PodFilters,
) -> Result<(), Rejection> {
    if let Some(message) = &pods.prefilter_rejection {
        return Err(Rejection::unresolvable(message.clone()));
    }
    node_unschedulable(pod, &node.node)?;
    node_name(pod, &node.node)?;
    taint_toleration(pod, &node.taints)?;
    node_affinity(pod, &node.node)?;
    node_ports(&info.ports, usage)?;
    fits(
        &info.requests,
        &node.allocatable,
        node.allowed_pods,
        &usage.requested,
        usage.pods,
    )?;
    if let Some(claims) = &pods.volumes {
        volume_binding::filter(claims, &node.node)?;
    }
    if let Some(state) = &pods.spread {
        topology_spread::filter(state, info, &node.node)?;
    }
    if let Some(state) = &pods.affinity {
        pod_affinity::filter(state, &node.node)?;
    }
    Ok(())
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

fn node_name_of(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

fn node_labels(node: &Node) -> Option<&BTreeMap<String, String>> {
    node.metadata.labels.as_ref()
}

/// Upstream's `ToleratesTaint`.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    let operator = t.operator.as_deref().unwrap_or("Equal");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match operator {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// `spec.unschedulable` keeps new pods off unless they tolerate the taint the node lifecycle
/// controller puts on such nodes.
pub fn node_unschedulable(pod: &Pod, node: &Node) -> Result<(), Rejection> {
    if !node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
    {
        return Ok(());
    }
    let taint = Taint {
        key: TAINT_UNSCHEDULABLE.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    if tolerated(tolerations(pod), &taint) {
        Ok(())
    } else {
        Err(Rejection::unresolvable(ERR_UNSCHEDULABLE))
    }
}

pub fn node_name(pod: &Pod, node: &Node) -> Result<(), Rejection> {
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(wanted) if !wanted.is_empty() && wanted != node_name_of(node) => {
            Err(Rejection::unresolvable(ERR_NODE_NAME))
        }
        _ => Ok(()),
    }
}

/// The node's taints, plus the ones the node lifecycle controller would add for its
/// conditions (a NotReady or unreachable node, or one under pressure, takes no new pods
/// unless they tolerate it), so the scheduler behaves the same whether or not that controller
/// has caught up.
pub fn effective_taints(node: &Node) -> Vec<Taint> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let status = |ty: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == ty)
            .map(|c| c.status.as_str())
    };
    let mut implied = Vec::new();
    match status("Ready") {
        Some("True") => {}
        Some("Unknown") => implied.push(TAINT_UNREACHABLE),
        _ => implied.push(TAINT_NOT_READY),
    }
    for (ty, key) in [
        ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
        ("DiskPressure", "node.kubernetes.io/disk-pressure"),
        ("PIDPressure", "node.kubernetes.io/pid-pressure"),
        (
            "NetworkUnavailable",
            "node.kubernetes.io/network-unavailable",
        ),
    ] {
        if status(ty) == Some("True") {
            implied.push(key);
        }
    }
    for key in implied {
        if !taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoSchedule")
        {
            taints.push(Taint {
                key: key.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            });
        }
    }
    taints
}

/// NoSchedule and NoExecute taints keep off pods that do not tolerate them; the first one
/// not tolerated is named, as upstream.
pub fn taint_toleration(pod: &Pod, taints: &[Taint]) -> Result<(), Rejection> {
    let tols = tolerations(pod);
    match taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerated(tols, t))
    {
        None => Ok(()),
        Some(t) => Err(Rejection::unresolvable(format!(
            "node(s) had untolerated taint {{{}: {}}}",
            t.key,
            t.value.as_deref().unwrap_or("")
        ))),
    }
}

/// PreferNoSchedule taints the pod does not tolerate: fewer is better when scoring.
pub fn intolerable_prefer_no_schedule(pod: &Pod, taints: &[Taint]) -> i64 {
    let tols: Vec<&Toleration> = tolerations(pod)
        .iter()
        .filter(|t| {
            matches!(
                t.effect.as_deref(),
                None | Some("") | Some("PreferNoSchedule")
            )
        })
        .collect();
    taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|t| !tols.iter().any(|tol| tolerates(tol, t)))
        .count() as i64
}

/// One node selector requirement as a label requirement; `None` when it is malformed, which
/// upstream treats as matching nothing.
fn requirement(r: &NodeSelectorRequirement) -> Option<Requirement> {
    let values = r.values.clone().unwrap_or_default();
    let single_int = || match values.as_slice() {
        [v] => v.parse::<i64>().ok(),
        _ => None,
    };
    Some(match r.operator.as_str() {
        "In" if !values.is_empty() => Requirement::In(r.key.clone(), values),
        "NotIn" if !values.is_empty() => Requirement::NotIn(r.key.clone(), values),
        "Exists" if values.is_empty() => Requirement::Exists(r.key.clone()),
        "DoesNotExist" if values.is_empty() => Requirement::DoesNotExist(r.key.clone()),
        "Gt" => Requirement::GreaterThan(r.key.clone(), single_int()?),
        "Lt" => Requirement::LessThan(r.key.clone(), single_int()?),
        _ => return None,
    })
}

fn requirements_match(reqs: &[NodeSelectorRequirement], fields: &BTreeMap<String, String>) -> bool {
    let parsed: Option<Vec<Requirement>> = reqs.iter().map(requirement).collect();
    match parsed {
        Some(requirements) => Selector {
            requirements,
            nothing: false,
        }
        .matches(Some(fields)),
        None => false,
    }
}

/// A term matches when all its expressions and fields do; an empty term matches nothing.
pub fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let empty = BTreeMap::new();
    let labels = node_labels(node).unwrap_or(&empty);
    if !requirements_match(exprs, labels) {
        return false;
    }
    // Only `metadata.name` is supported as a field, as upstream.
    if fields.iter().any(|f| f.key != "metadata.name") {
        return false;
    }
    let node_fields =
        BTreeMap::from([("metadata.name".to_string(), node_name_of(node).to_string())]);
    requirements_match(fields, &node_fields)
}

/// `nodeSelector` and required node affinity, both of which must hold.
pub fn node_affinity(pod: &Pod, node: &Node) -> Result<(), Rejection> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let labels = node_labels(node);
    if let Some(selector) = spec.node_selector.as_ref()
        && !selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    {
        return Err(Rejection::unresolvable(ERR_AFFINITY));
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(required) = required
        && !required
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node))
    {
        return Err(Rejection::unresolvable(ERR_AFFINITY));
    }
    Ok(())
}

/// The sum of the weights of the preferred node affinity terms the node matches.
pub fn preferred_affinity_weight(pod: &Pod, node: &Node) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .filter(|t| t.weight != 0 && term_matches(&t.preference, node))
        .map(|t| i64::from(t.weight))
        .sum()
}

/// Two host ports clash on the same protocol and port when either listens on every address.
fn ports_conflict(a: &HostPort, b: &HostPort) -> bool {
    let any = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
    a.protocol == b.protocol && a.port == b.port && (a.ip == b.ip || any(&a.ip) || any(&b.ip))
}

pub fn node_ports(wanted: &[HostPort], usage: &NodeUsage) -> Result<(), Rejection> {
    let clash = wanted
        .iter()
        .any(|w| usage.ports.keys().any(|used| ports_conflict(w, used)));
    if clash {
        Err(Rejection {
            reasons: vec![ERR_PORTS.into()],
            resolvable: true,
        })
    } else {
        Ok(())
    }
}

/// NodeResourcesFit: the pod count and every requested resource against what is allocatable
/// and not yet requested by the pods bound (or assumed) there.
pub fn fits(
    request: &Resources,
    allocatable: &Resources,
    allowed_pods: i64,
    requested: &Resources,
    pods: i64,
) -> Result<(), Rejection> {
    let mut reasons = Vec::new();
    if pods + 1 > allowed_pods {
        reasons.push(ERR_TOO_MANY_PODS.to_string());
    }
    if !request.is_zero() {
        let checks = [
            (
                "cpu",
                request.milli_cpu,
                requested.milli_cpu,
                allocatable.milli_cpu,
            ),
            (
                "memory",
                request.memory,
                requested.memory,
                allocatable.memory,
            ),
            (
                "ephemeral-storage",
                request.ephemeral_storage,
                requested.ephemeral_storage,
                allocatable.ephemeral_storage,
            ),
        ];
        for (name, want, used, have) in checks {
            if want > 0 && have < want + used {
                reasons.push(format!("Insufficient {name}"));
            }
        }
        for (name, want) in &request.scalar {
            let used = requested.scalar.get(name).copied().unwrap_or(0);
            let have = allocatable.scalar.get(name).copied().unwrap_or(0);
            if *want > 0 && have < want + used {
                reasons.push(format!("Insufficient {name}"));
            }
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Rejection {
            reasons,
            resolvable: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn affinity(terms: serde_json::Value) -> Pod {
        pod(serde_json::json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms,
            }}},
        }))
    }

    #[test]
    fn node_selector_needs_every_label() {
        let n = node("n", &[("disk", "ssd"), ("zone", "a")]);
        let ok = pod(serde_json::json!({"containers": [], "nodeSelector": {"disk": "ssd"}}));
        let bad = pod(
            serde_json::json!({"containers": [], "nodeSelector": {"disk": "ssd", "zone": "b"}}),
        );
        assert!(node_affinity(&ok, &n).is_ok());
        assert_eq!(
            node_affinity(&bad, &n).unwrap_err().reasons,
            vec![ERR_AFFINITY.to_string()]
        );
    }

    #[test]
    fn required_affinity_operators() {
        let n = node("n1", &[("zone", "a"), ("cores", "8")]);
        let check = |expr: serde_json::Value| {
            node_affinity(
                &affinity(serde_json::json!([{"matchExpressions": [expr]}])),
                &n,
            )
            .is_ok()
        };
        assert!(check(
            serde_json::json!({"key": "zone", "operator": "In", "values": ["a", "b"]})
        ));
        assert!(!check(
            serde_json::json!({"key": "zone", "operator": "NotIn", "values": ["a"]})
        ));
        assert!(check(
            serde_json::json!({"key": "gpu", "operator": "NotIn", "values": ["x"]})
        ));
        assert!(check(
            serde_json::json!({"key": "zone", "operator": "Exists"})
        ));
        assert!(!check(
            serde_json::json!({"key": "gpu", "operator": "Exists"})
        ));
        assert!(check(
            serde_json::json!({"key": "gpu", "operator": "DoesNotExist"})
        ));
        assert!(check(
            serde_json::json!({"key": "cores", "operator": "Gt", "values": ["4"]})
        ));
        assert!(!check(
            serde_json::json!({"key": "cores", "operator": "Lt", "values": ["8"]})
        ));
        assert!(!check(
            serde_json::json!({"key": "cores", "operator": "Gt", "values": ["x"]})
        ));
        assert!(!check(
            serde_json::json!({"key": "zone", "operator": "Bogus", "values": ["a"]})
        ));
        // Terms are ORed; an empty term matches nothing.
        let terms = serde_json::json!([
            {},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        ]);
        assert!(node_affinity(&affinity(terms), &n).is_ok());
        let other = serde_json::json!([
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
        ]);
        assert!(node_affinity(&affinity(other), &n).is_err());
        assert!(node_affinity(&affinity(serde_json::json!([{}])), &n).is_err());
    }

    #[test]
    fn preferred_weights_add_up_for_matching_terms() {
        let n = node("n", &[("zone", "a")]);
        let p = pod(serde_json::json!({
            "containers": [],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
                {"weight": 7, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
                {"weight": 11, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}},
            ]}},
        }));
        assert_eq!(preferred_affinity_weight(&p, &n), 12);
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            ..Default::default()
        }
    }

    #[test]
    fn taints_and_tolerations() {
        let taints = vec![
            taint("dedicated", "gpu", "NoSchedule"),
            taint("soft", "x", "PreferNoSchedule"),
        ];
        let plain = pod(serde_json::json!({"containers": []}));
        assert_eq!(
            taint_toleration(&plain, &taints).unwrap_err().reasons,
            vec!["node(s) had untolerated taint {dedicated: gpu}".to_string()]
        );
        assert_eq!(intolerable_prefer_no_schedule(&plain, &taints), 1);
        let equal = pod(serde_json::json!({"containers": [], "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ]}));
        assert!(taint_toleration(&equal, &taints).is_ok());
        let wrong_value = pod(serde_json::json!({"containers": [], "tolerations": [
            {"key": "dedicated", "value": "cpu"},
        ]}));
        assert!(taint_toleration(&wrong_value, &taints).is_err());
        let everything =
            pod(serde_json::json!({"containers": [], "tolerations": [{"operator": "Exists"}]}));
        assert!(taint_toleration(&everything, &taints).is_ok());
        assert_eq!(intolerable_prefer_no_schedule(&everything, &taints), 0);
        let no_execute_only = pod(serde_json::json!({"containers": [], "tolerations": [
            {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        ]}));
        assert!(taint_toleration(&no_execute_only, &taints).is_err());
    }

    #[test]
    fn not_ready_and_unschedulable_nodes() {
        let mut n = node("n", &[]);
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let plain = pod(serde_json::json!({"containers": []}));
        assert_eq!(
            taint_toleration(&plain, &effective_taints(&n))
                .unwrap_err()
                .reasons,
            vec!["node(s) had untolerated taint {node.kubernetes.io/not-ready: }".to_string()]
        );
        let tolerant = pod(serde_json::json!({"containers": [], "tolerations": [
            {"key": TAINT_NOT_READY, "operator": "Exists"},
            {"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"},
        ]}));
        assert!(taint_toleration(&tolerant, &effective_taints(&n)).is_ok());
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "Unknown".into();
        assert_eq!(effective_taints(&n)[0].key, TAINT_UNREACHABLE);

        n.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        assert_eq!(
            node_unschedulable(&plain, &n).unwrap_err().reasons,
            vec![ERR_UNSCHEDULABLE.to_string()]
        );
        assert!(node_unschedulable(&tolerant, &n).is_ok());
    }

    #[test]
    fn node_name_must_match_when_set() {
        let n = node("a", &[]);
        assert!(
            node_name(
                &pod(serde_json::json!({"containers": [], "nodeName": "a"})),
                &n
            )
            .is_ok()
        );
        assert!(
            node_name(
                &pod(serde_json::json!({"containers": [], "nodeName": "b"})),
                &n
            )
            .is_err()
        );
        assert!(node_name(&pod(serde_json::json!({"containers": []})), &n).is_ok());
    }

    #[test]
    fn host_ports_clash_on_protocol_port_and_address() {
        let hp = |protocol: &str, ip: &str, port: i32| HostPort {
            protocol: protocol.into(),
            ip: ip.into(),
            port,
        };
        let mut usage = NodeUsage::default();
        usage.ports.insert(hp("TCP", "10.0.0.1", 80), 1);
        assert!(node_ports(&[hp("TCP", "10.0.0.2", 80)], &usage).is_ok());
        assert!(node_ports(&[hp("UDP", "0.0.0.0", 80)], &usage).is_ok());
        let err = node_ports(&[hp("TCP", "0.0.0.0", 80)], &usage).unwrap_err();
        assert_eq!(err.reasons, vec![ERR_PORTS.to_string()]);
        assert!(err.resolvable);
        assert!(node_ports(&[hp("TCP", "10.0.0.1", 80)], &usage).is_err());
    }

    #[test]
    fn resources_fit_against_what_is_left() {
        let alloc = Resources {
            milli_cpu: 4000,
            memory: 1000,
            ephemeral_storage: 100,
            scalar: [("example.com/gpu".to_string(), 1)].into(),
        };
        let used = Resources {
            milli_cpu: 3500,
            memory: 500,
            ..Default::default()
        };
        let want = |cpu, mem| Resources {
            milli_cpu: cpu,
            memory: mem,
            ..Default::default()
        };
        assert!(fits(&want(500, 500), &alloc, 110, &used, 10).is_ok());
        assert_eq!(
            fits(&want(501, 501), &alloc, 110, &used, 10)
                .unwrap_err()
                .reasons,
            vec![
                "Insufficient cpu".to_string(),
                "Insufficient memory".to_string()
            ]
        );
        assert_eq!(
            fits(&want(0, 0), &alloc, 10, &used, 10)
                .unwrap_err()
                .reasons,
            vec![ERR_TOO_MANY_PODS.to_string()]
        );
        let mut gpus = want(0, 0);
        gpus.scalar.insert("example.com/gpu".into(), 2);
        gpus.ephemeral_storage = 101;
        assert_eq!(
            fits(&gpus, &alloc, 110, &used, 0).unwrap_err().reasons,
            vec![
                "Insufficient ephemeral-storage".to_string(),
                "Insufficient example.com/gpu".to_string()
            ]
        );
    }
}
