//! How `kubectl get pods` prints a pod: upstream's `printPod`, with its status reasons,
//! restart counts of sidecars and init containers, and the `Completed` row condition.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, ContainerStateTerminated, ContainerStatus, Pod};

use crate::table::{
    AGE, Column, NAME, Row, RowCondition, age, name, or_empty, set, since, string, text,
};

pub(super) const POD_COLUMNS: &[Column] = &[
    NAME,
    string(
        "Ready",
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    string(
        "Status",
        "The aggregate status of the containers in this pod.",
    ),
    string(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    string("IP", doc::POD_IP).wide(),
    string("Node", doc::POD_NODE_NAME).wide(),
    string("Nominated Node", doc::POD_NOMINATED_NODE_NAME).wide(),
    string("Readiness Gates", doc::POD_READINESS_GATES).wide(),
];

fn is_restartable_init_container(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn finished_at(t: &ContainerStateTerminated) -> Option<Timestamp> {
    set(t.finished_at.as_ref().map(|t| t.0))
}

/// Go's `Time.Before` with the zero time as `None`.
fn before(a: Option<Timestamp>, b: Option<Timestamp>) -> bool {
    match (a, b) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a < b,
    }
}

fn last_terminated(c: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    c.last_state.as_ref().and_then(|s| s.terminated.as_ref())
}

pub(super) fn pod_row(pod: &Pod, now: Timestamp) -> Row {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let containers = spec.map_or(&[][..], |s| s.containers.as_slice());
    let init_containers = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or(&[]);
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let init_statuses = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[]);
    let statuses = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or(&[]);
    let phase = or_empty(status.and_then(|s| s.phase.as_ref()));
    let status_reason = or_empty(status.and_then(|s| s.reason.as_ref()));

    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut total = containers.len();
    let mut ready = 0usize;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;

    let mut reason = if status_reason.is_empty() {
        phase.to_string()
    } else {
        status_reason.to_string()
    };
    if conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("SchedulingGated"))
    {
        reason = "SchedulingGated".to_string();
    }

    let conditions_out = match phase {
        "Succeeded" => vec![completed_condition(
            "Succeeded",
            "The pod has completed successfully.",
        )],
        "Failed" => vec![completed_condition("Failed", "The pod failed.")],
        _ => Vec::new(),
    };

    total += init_containers
        .iter()
        .filter(|c| is_restartable_init_container(c))
        .count();
    let restartable = |name: &str| {
        init_containers
            .iter()
            .rev()
            .find(|c| c.name == name)
            .is_some_and(is_restartable_init_container)
    };

    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        restarts += i64::from(c.restart_count);
        if let Some(t) = last_terminated(c) {
            let finished = finished_at(t);
            if before(last_restart, finished) {
                last_restart = finished;
            }
        }
        let is_restartable = restartable(&c.name);
        if is_restartable {
            restartable_restarts += i64::from(c.restart_count);
            if let Some(t) = last_terminated(c) {
                let finished = finished_at(t);
                if before(last_restartable_restart, finished) {
                    last_restartable_restart = finished;
                }
            }
        }
        let state = c.state.as_ref();
        let terminated = state.and_then(|s| s.terminated.as_ref());
        let waiting_reason = state
            .and_then(|s| s.waiting.as_ref())
            .map(|w| or_empty(w.reason.as_ref()));
        if terminated.is_some_and(|t| t.exit_code == 0) {
            continue;
        }
        if is_restartable && c.started == Some(true) {
            if c.ready {
                ready += 1;
            }
            continue;
        }
        reason = if let Some(t) = terminated {
            match t.reason.as_deref() {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ => match t.signal.unwrap_or(0) {
                    0 => format!("Init:ExitCode:{}", t.exit_code),
                    signal => format!("Init:Signal:{signal}"),
                },
            }
        } else if let Some(r) = waiting_reason.filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{}", init_containers.len())
        };
        initializing = true;
        break;
    }

    let initialized = conditions
        .iter()
        .find(|c| c.type_ == "Initialized")
        .is_some_and(|c| c.status == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for c in statuses.iter().rev() {
            restarts += i64::from(c.restart_count);
            if let Some(t) = last_terminated(c) {
                let finished = finished_at(t);
                if before(last_restart, finished) {
                    last_restart = finished;
                }
            }
            let state = c.state.as_ref();
            let waiting_reason = state
                .and_then(|s| s.waiting.as_ref())
                .map(|w| or_empty(w.reason.as_ref()))
                .filter(|r| !r.is_empty());
            let terminated = state.and_then(|s| s.terminated.as_ref());
            if let Some(r) = waiting_reason {
                reason = r.to_string();
            } else if let Some(t) = terminated {
                reason = match t.reason.as_deref() {
                    Some(r) if !r.is_empty() => r.to_string(),
                    _ => match t.signal.unwrap_or(0) {
                        0 => format!("ExitCode:{}", t.exit_code),
                        signal => format!("Signal:{signal}"),
                    },
                };
            } else if c.ready && state.is_some_and(|s| s.running.is_some()) {
                has_running = true;
                ready += 1;
            }
        }
        // A pod whose first container completed while another still runs is not Completed.
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.to_string();
        }
    }

    if pod.metadata.deletion_timestamp.is_some() {
        if status_reason == "NodeLost" {
            reason = "Unknown".to_string();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_string();
        }
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };

    // A pod IP given only as status.podIP counts, as the conversion to the internal form does.
    let pod_ip = status
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
        .or_else(|| {
            status
                .and_then(|s| s.pod_ips.as_ref())
                .and_then(|ips| ips.first())
                .map(|ip| ip.ip.as_str())
        })
        .filter(|ip| !ip.is_empty())
        .unwrap_or("<none>");
    let node_name = spec
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or("<none>");
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or("<none>");
    let gates = spec
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or(&[]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_conditions = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c.type_ == g.condition_type)
                    .is_some_and(|c| c.status == "True")
            })
            .count();
        format!("{true_conditions}/{}", gates.len())
    };

    Row {
        cells: vec![
            name(&pod.metadata),
            text(format!("{ready}/{total}")),
            text(reason),
            text(restarts_cell),
            age(&pod.metadata, now),
            text(pod_ip),
            text(node_name),
            text(nominated),
            text(readiness_gates),
        ],
        conditions: conditions_out,
    }
}

fn completed_condition(reason: &str, message: &str) -> RowCondition {
    RowCondition {
        type_: "Completed".to_string(),
        status: "True".to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

mod doc {
    pub const POD_IP: &str = "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.";
    pub const POD_NOMINATED_NODE_NAME: &str = "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.";
    pub const POD_NODE_NAME: &str = "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename";
    pub const POD_READINESS_GATES: &str = "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::row;
    use crate::table::testing::*;

    fn pod(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec, "status": status})
    }

    fn two_containers() -> Value {
        json!({"containers": [{"name": "a"}, {"name": "b"}]})
    }

    fn pod_cells(spec: Value, status: Value) -> (String, String, String) {
        let c = narrow::<Pod>(pod(spec, status));
        let s = |i: usize| c[i].as_str().unwrap().to_string();
        (s(1), s(2), s(3))
    }

    fn running() -> Value {
        json!({"running": {}})
    }

    #[test]
    fn pod_ready_status_restarts() {
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        // Ready containers, restarts summed.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running()},
                    {"name": "b", "image": "", "imageID": "", "ready": false, "restartCount": 3}]})
            ),
            t("1/2", "podPhase", "6")
        );
        // A waiting reason replaces the phase; the first container's reason wins.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "podPhase", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                    {"name": "b", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]})
            ),
            t("0/2", "CrashLoopBackOff", "6")
        );
        // Ready but not running is not counted ready; status.reason beats the phase.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "podPhase", "reason": "podReason", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running()},
                    {"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 3}]})
            ),
            t("1/2", "podReason", "6")
        );
        // One container completed, one running: NotReady without the Ready condition...
        let statuses = json!([
            {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            {"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running()}]);
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Running", "containerStatuses": statuses})
            ),
            t("1/2", "NotReady", "6")
        );
        // ...and Running with it.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Running", "containerStatuses": statuses,
                       "conditions": [{"type": "Ready", "status": "True"}]})
            ),
            t("1/2", "Running", "6")
        );
        // Terminated without a reason: the signal, else the exit code.
        assert_eq!(
            pod_cells(
                json!({"containers": [{"name": "a"}]}),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "signal": 9}}}]})
            ),
            t("0/1", "Signal:9", "0")
        );
        assert_eq!(
            pod_cells(
                json!({"containers": [{"name": "a"}]}),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}]})
            ),
            t("0/1", "ExitCode:2", "0")
        );
        // Restarts with the time of the last one.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 6, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(5 * 86400)}}},
                    {"name": "b", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(20 * 86400)}}}]})
            ),
            t("2/2", "Running", "9 (5d ago)")
        );
        assert_eq!(
            pod_cells(
                json!({"containers": [{"name": "a"}]}),
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(330)}}}]})
            ),
            t("1/1", "Running", "3 (5m30s ago)")
        );
        // Scheduling gates.
        assert_eq!(
            pod_cells(
                two_containers(),
                json!({"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})
            ),
            t("0/2", "SchedulingGated", "0")
        );
    }

    #[test]
    fn pod_init_containers() {
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        let spec = |n: usize| {
            let init: Vec<Value> = (0..n)
                .map(|i| json!({"name": format!("init{i}")}))
                .collect();
            json!({"initContainers": init, "containers": [{"name": "main"}]})
        };
        let waiting_main = json!([{"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {}}}]);
        // The first init container restarting: Init:0/1, its restarts and when.
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "containerStatuses": waiting_main, "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}}]})
            ),
            t("0/1", "Init:0/1", "3 (10s ago)")
        );
        // The first completed (restarts counted), the second running: Init:1/2.
        assert_eq!(
            pod_cells(
                spec(2),
                json!({"phase": "Pending", "containerStatuses": waiting_main, "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 2, "state": {"terminated": {"exitCode": 0}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(120)}}},
                    {"name": "init1", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}}]})
            ),
            t("0/1", "Init:1/2", "5 (10s ago)")
        );
        // A failing init container shows its reason, or its exit code or signal.
        assert_eq!(
            pod_cells(
                spec(2),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]})
            ),
            t("0/1", "Init:CrashLoopBackOff", "1")
        );
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 3}}}]})
            ),
            t("0/1", "Init:ExitCode:3", "0")
        );
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]})
            ),
            t("0/1", "Init:Error", "0")
        );
        // PodInitializing is not a reason to show.
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Pending", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]})
            ),
            t("0/1", "Init:0/1", "0")
        );
        // Once initialized, only the app containers' restarts count.
        assert_eq!(
            pod_cells(
                spec(1),
                json!({"phase": "Running", "initContainerStatuses": [
                    {"name": "init0", "image": "", "imageID": "", "ready": false, "restartCount": 2, "state": {"terminated": {"exitCode": 0}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(120)}}}],
                    "containerStatuses": [
                    {"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 4, "state": running(),
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(20)}}}]})
            ),
            t("0/1", "Running", "4 (20s ago)")
        );
    }

    #[test]
    fn pod_sidecars() {
        let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        let spec = json!({"initContainers": [
            {"name": "sidecar-1", "restartPolicy": "Always"},
            {"name": "sidecar-2", "restartPolicy": "Always"}],
            "containers": [{"name": "main"}]});
        let main = |ready: bool, state: Value| {
            json!([{"name": "main", "image": "", "imageID": "", "ready": ready, "restartCount": 4, "state": state,
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(20)}}}])
        };
        // The first sidecar started, the second not yet: Init:1/2, sidecars count in the total.
        assert_eq!(
            pod_cells(
                spec.clone(),
                json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False"}],
                    "containerStatuses": [{"name": "main", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {}}}],
                    "initContainerStatuses": [
                    {"name": "sidecar-1", "image": "", "imageID": "", "ready": false, "restartCount": 3, "state": running(), "started": true,
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}},
                    {"name": "sidecar-2", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": running(), "started": false}]})
            ),
            t("0/3", "Init:1/2", "3 (10s ago)")
        );
        // All started and initialized: sidecar restarts count with the app containers'.
        assert_eq!(
            pod_cells(
                spec.clone(),
                json!({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}],
                    "containerStatuses": main(true, running()),
                    "initContainerStatuses": [
                    {"name": "sidecar-1", "image": "", "imageID": "", "ready": true, "restartCount": 3, "state": running(), "started": true,
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(10)}}},
                    {"name": "sidecar-2", "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": running(), "started": true}]})
            ),
            t("2/3", "Running", "7 (10s ago)")
        );
        // Statuses for containers the spec does not have are not sidecars.
        assert_eq!(
            pod_cells(
                json!({"initContainers": [{"name": "init1"}, {"name": "sidecar1", "restartPolicy": "Always"}],
                       "containers": [{"name": "container1"}]}),
                json!({"phase": "Running", "initContainerStatuses": [
                    {"name": "initinvalid", "image": "", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "init1", "image": "", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "sidecar1", "image": "", "imageID": "", "ready": false, "restartCount": 0}],
                    "containerStatuses": [
                    {"name": "containerinvalid", "image": "", "imageID": "", "ready": false, "restartCount": 0},
                    {"name": "container1", "image": "", "imageID": "", "ready": false, "restartCount": 0}]})
            ),
            t("0/2", "Init:0/2", "0")
        );
    }

    #[test]
    fn pod_terminating_and_completed() {
        let mut p = pod(
            json!({"containers": [{"name": "a"}]}),
            json!({"phase": "Running", "containerStatuses": [
                {"name": "a", "image": "", "imageID": "", "ready": true, "restartCount": 0, "state": running()}]}),
        );
        p["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(narrow::<Pod>(p.clone())[2], "Terminating");
        p["status"]["reason"] = json!("NodeLost");
        assert_eq!(narrow::<Pod>(p)[2], "Unknown");

        // A finished pod keeps its status and is marked Completed.
        let mut done = pod(
            json!({"containers": [{"name": "a"}]}),
            json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "a", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        );
        done["metadata"]["deletionTimestamp"] = json!(ago(1));
        let r = row::<Pod>(&done, now()).unwrap();
        assert_eq!(r.cells[2], "Completed");
        assert_eq!(
            serde_json::to_value(&r.conditions).unwrap(),
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                    "message": "The pod has completed successfully."}])
        );
        let failed = pod(json!({"containers": []}), json!({"phase": "Failed"}));
        let r = row::<Pod>(&failed, now()).unwrap();
        assert_eq!(r.conditions[0].reason, "Failed");
        assert_eq!(r.conditions[0].message, "The pod failed.");
    }

    #[test]
    fn pod_wide() {
        let mut p = pod(
            json!({"containers": [{"name": "a"}], "nodeName": "n1",
                   "readinessGates": [{"conditionType": "c1"}, {"conditionType": "c2"}, {"conditionType": "c3"}]}),
            json!({"phase": "Running", "podIPs": [{"ip": "1.1.1.1"}, {"ip": "2001:db8::"}],
                   "nominatedNodeName": "n2",
                   "conditions": [{"type": "c1", "status": "False"}, {"type": "c2", "status": "True"}]}),
        );
        p["metadata"]["creationTimestamp"] = json!(ago(3 * 3600 + 60));
        assert_eq!(
            row_of::<Pod>(p),
            vec![
                json!("p"),
                json!("0/1"),
                json!("Running"),
                json!("0"),
                json!("3h1m"),
                json!("1.1.1.1"),
                json!("n1"),
                json!("n2"),
                json!("1/3")
            ]
        );
        let bare = pod(json!({"containers": []}), json!({}));
        assert_eq!(
            row_of::<Pod>(bare)[4..],
            [
                json!("<unknown>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>")
            ]
        );
        // status.podIP alone counts.
        let legacy = pod(json!({"containers": []}), json!({"podIP": "10.0.0.7"}));
        assert_eq!(row_of::<Pod>(legacy)[5], "10.0.0.7");
    }
}
