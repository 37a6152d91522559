//! Which pods a ReplicaSet deletes first when it has too many (upstream's `getPodsToDelete`
//! with the `ActivePodsWithRanks` ordering), as a sort key, so the order is total.
//!
//! Upstream's `Less` is not a strict weak order: two ready times that are equal fall through
//! to the restart counts, while two that differ but share a power-of-two age bucket are
//! decided by UID at once. Go's sort tolerates that; Rust's sort panics on it ("user-provided
//! comparison function does not correctly implement a total order"), which stopped the
//! controller at scale. Here an age bucket is an age: pods in the same bucket are equally old
//! (LogarithmicScaleDown's intent), the later criteria decide between them, and the UID last.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::util::pods::{is_active, is_ready, phase, ready_condition};

pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The `diff` pods to delete, least valuable first. `related` are the pods of every
/// ReplicaSet of the same owner: a pod on a node crowded with its siblings goes first.
pub fn pods_to_delete(
    pods: &[Arc<Pod>],
    related: &[Arc<Pod>],
    diff: usize,
    now: Timestamp,
) -> Vec<Arc<Pod>> {
    if diff >= pods.len() {
        return pods.to_vec();
    }
    let mut on_node: HashMap<&str, i32> = HashMap::new();
    for p in related.iter().filter(|p| is_active(p)) {
        *on_node.entry(node_name(p)).or_default() += 1;
    }
    let mut ranked: Vec<(DeletionKey<'_>, &Arc<Pod>)> = pods
        .iter()
        .map(|p| {
            let crowding = on_node.get(node_name(p)).copied().unwrap_or(0);
            (DeletionKey::of(p, crowding, now), p)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0));
    ranked
        .into_iter()
        .take(diff)
        .map(|(_, p)| p.clone())
        .collect()
}

/// How old something is, for "newer first": an unknown time before any, then by the power of
/// two of the age in nanoseconds (upstream's `logarithmicRankDiff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Age {
    Unknown,
    Bucket(i64),
}

impl Age {
    fn of(t: Option<Timestamp>, now: Timestamp) -> Age {
        match t {
            None => Age::Unknown,
            Some(t) => {
                let nanos = now.duration_since(t).as_nanos();
                Age::Bucket(if nanos > 0 {
                    (nanos as f64).log2() as i64
                } else {
                    -1
                })
            }
        }
    }
}

/// Upstream's criteria in its order; the least key is deleted first.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct DeletionKey<'a> {
    /// Unassigned before assigned.
    assigned: bool,
    /// Pending (and any other phase) < Unknown < Running.
    phase: u8,
    /// Not ready before ready.
    ready: bool,
    /// Lower `controller.kubernetes.io/pod-deletion-cost` first.
    cost: i32,
    /// More siblings on the pod's node first.
    crowding: Reverse<i32>,
    /// Between ready pods: ready for less time first.
    ready_for: Age,
    /// More container restarts first.
    restarts: Reverse<i32>,
    /// Newer first.
    created: Age,
    uid: &'a str,
}

impl<'a> DeletionKey<'a> {
    fn of(pod: &'a Pod, crowding: i32, now: Timestamp) -> Self {
        let ready = is_ready(pod);
        DeletionKey {
            assigned: !node_name(pod).is_empty(),
            phase: match phase(pod) {
                "Unknown" => 1,
                "Running" => 2,
                _ => 0,
            },
            ready,
            cost: pod
                .annotations()
                .get(DELETION_COST_ANNOTATION)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            crowding: Reverse(crowding),
            ready_for: if ready {
                Age::of(ready_time(pod), now)
            } else {
                Age::Unknown
            },
            restarts: Reverse(max_restarts(pod)),
            created: Age::of(pod.metadata.creation_timestamp.as_ref().map(|t| t.0), now),
            uid: pod.metadata.uid.as_deref().unwrap_or_default(),
        }
    }
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn ready_time(pod: &Pod) -> Option<Timestamp> {
    ready_condition(pod)
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

fn max_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::SignedDuration;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn pod(name: &str, node: &str, phase: &str, ready_secs_ago: Option<i64>) -> Arc<Pod> {
        let now = Timestamp::now();
        let conditions = ready_secs_ago.map(|s| {
            vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(Time(now - SignedDuration::from_secs(s))),
                ..Default::default()
            }]
        });
        let mut p = Pod {
            spec: Some(PodSpec {
                node_name: (!node.is_empty()).then(|| node.to_string()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions,
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(name.into());
        p.metadata.creation_timestamp = Some(Time(now - SignedDuration::from_secs(3600)));
        Arc::new(p)
    }

    fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn deletion_prefers_unscheduled_pending_unready_then_newer() {
        let pods = vec![
            pod("old-ready", "n1", "Running", Some(3000)),
            pod("new-ready", "n1", "Running", Some(2)),
            pod("unready", "n1", "Running", None),
            pod("pending", "n1", "Pending", None),
            pod("unscheduled", "", "Pending", None),
        ];
        let order = names(pods_to_delete(&pods, &[], 4, Timestamp::now()));
        assert_eq!(order, ["unscheduled", "pending", "unready", "new-ready"]);
    }

    #[test]
    fn deletion_prefers_crowded_nodes_and_lower_cost() {
        let a = pod("a", "n1", "Running", Some(100));
        let b = pod("b", "n2", "Running", Some(100));
        let c = pod("c", "n2", "Running", Some(100));
        let related = vec![a.clone(), b.clone(), c.clone()];
        let order = names(pods_to_delete(
            &[a.clone(), b.clone()],
            &related,
            1,
            Timestamp::now(),
        ));
        assert_eq!(order, ["b"]);
        let mut cheap = (*a).clone();
        cheap
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(DELETION_COST_ANNOTATION.into(), "-5".into());
        let order = names(pods_to_delete(
            &[b.clone(), Arc::new(cheap)],
            &related,
            1,
            Timestamp::now(),
        ));
        assert_eq!(order, ["a"]);
    }

    /// A random pod from a small space of values, so that ties of every criterion happen.
    fn random_pod(rng: &mut StdRng, i: usize, now: Timestamp) -> Pod {
        let secs_ago = |rng: &mut StdRng| -> Option<Time> {
            // Some equal, some in one power-of-two bucket, some absent.
            match rng.random_range(0..6) {
                0 => None,
                n => Some(Time(
                    now - SignedDuration::from_secs([1, 3, 5, 100, 120][n - 1]),
                )),
            }
        };
        let ready = rng.random_bool(0.6);
        let mut p = Pod {
            spec: Some(PodSpec {
                node_name: rng
                    .random_bool(0.8)
                    .then(|| format!("n{}", rng.random_range(0..3))),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(["Pending", "Running", "Unknown"][rng.random_range(0..3)].into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: secs_ago(rng),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    restart_count: rng.random_range(0..3),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.uid = Some(format!("uid-{i}"));
        p.metadata.name = Some(format!("p{i}"));
        p.metadata.creation_timestamp = secs_ago(rng);
        if rng.random_bool(0.2) {
            p.metadata.annotations = Some(
                [(
                    DELETION_COST_ANNOTATION.to_string(),
                    rng.random_range(-1..2).to_string(),
                )]
                .into(),
            );
        }
        p
    }

    /// The order is total on random pod sets full of ties: antisymmetric, transitive, and
    /// sorting never panics.
    #[test]
    fn the_deletion_order_is_total() {
        let now = Timestamp::now();
        let mut rng = StdRng::seed_from_u64(13);
        for _ in 0..200 {
            let pods: Vec<Arc<Pod>> = (0..24)
                .map(|i| Arc::new(random_pod(&mut rng, i, now)))
                .collect();
            let keys: Vec<DeletionKey<'_>> = pods
                .iter()
                .map(|p| DeletionKey::of(p, rng.random_range(0..3), now))
                .collect();
            for a in &keys {
                for b in &keys {
                    assert_eq!(a.cmp(b), b.cmp(a).reverse());
                    for c in &keys {
                        if a <= b && b <= c {
                            assert!(a <= c, "{a:?} <= {b:?} <= {c:?}");
                        }
                    }
                }
            }
            let chosen = pods_to_delete(&pods, &pods, 10, now);
            assert_eq!(chosen.len(), 10);
        }
    }
}
