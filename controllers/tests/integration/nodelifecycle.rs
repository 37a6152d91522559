//! The node lifecycle and taint eviction controllers against the in-process API server, with
//! hollow nodes whose lease renewals stop when their task is aborted: a silent node turns
//! Unknown and tainted, its pods NotReady and evicted as their tolerations say, and all of it
//! is undone when the node comes back.

use minik8s_controllers::informers::Informers;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use minik8s_controllers::hollow::{self, HollowConfig};
use minik8s_controllers::nodelifecycle::{self, NodeLifecycleConfig};
use minik8s_controllers::tainteviction;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

fn hollow_config(prefix: &str) -> HollowConfig {
    HollowConfig {
        count: 1,
        prefix: prefix.into(),
        lease_renew_interval: Duration::from_millis(300),
        ..Default::default()
    }
}

fn pod(name: &str, node: &str, tolerations: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "busybox:1.36"}],
            "tolerations": tolerations,
        },
    }))
    .unwrap()
}

fn ready(node: &Node) -> Option<(String, Option<String>)> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone()))
}

fn taints(node: &Node) -> Vec<(String, String)> {
    let mut t: Vec<_> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect();
    t.sort();
    t
}

fn pod_condition(pod: &Pod, ty: &str) -> Option<k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)
        .cloned()
}

async fn event_with(client: &Client, ns: &str, reason: &str, note: &str) -> Option<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason) && e.note.as_deref() == Some(note))
}

#[tokio::test]
async fn silent_node_goes_unknown_is_tainted_evicted_and_recovers() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let stable = tokio::spawn(hollow::run(client.clone(), hollow_config("stable-")));
    let doomed = tokio::spawn(hollow::run(client.clone(), hollow_config("doomed-")));
    let lifecycle = tokio::spawn(nodelifecycle::run(
        Informers::new(client.clone()),
        NodeLifecycleConfig {
            node_monitor_grace_period: Duration::from_secs(2),
            ..Default::default()
        },
    ));
    let eviction = tokio::spawn(tainteviction::run(Informers::new(client.clone())));

    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually(WAIT, "both hollow nodes Ready", || async {
        let a = nodes.get_opt("stable-0").await.ok()??;
        let b = nodes.get_opt("doomed-0").await.ok()??;
        (ready(&a)?.0 == "True" && ready(&b)?.0 == "True").then_some(())
    })
    .await;

    let pp = PostParams::default();
    // Tolerates the key only with a value the taint does not have: not tolerated at all.
    pods.create(
        &pp,
        &pod(
            "intolerant",
            "doomed-0",
            serde_json::json!([{"key": UNREACHABLE, "operator": "Equal", "value": "x", "effect": "NoExecute"}]),
        ),
    )
    .await?;
    pods.create(
        &pp,
        &pod(
            "brief",
            "doomed-0",
            serde_json::json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3}]),
        ),
    )
    .await?;
    pods.create(
        &pp,
        &pod(
            "patient",
            "doomed-0",
            serde_json::json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]),
        ),
    )
    .await?;
    // No tolerations: admission gives it 300 s, far longer than this test.
    let defaulted = pods
        .create(&pp, &pod("defaulted", "doomed-0", serde_json::json!(null)))
        .await?;
    let tolerations = defaulted.spec.unwrap().tolerations.unwrap_or_default();
    assert!(
        tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some(UNREACHABLE) && t.toleration_seconds == Some(300)),
        "{tolerations:?}"
    );
    for name in ["intolerant", "brief", "patient", "defaulted"] {
        eventually(WAIT, &format!("{name} Ready"), || async {
            let p = pods.get(name).await.ok()?;
            (pod_condition(&p, "Ready")?.status == "True").then_some(())
        })
        .await;
    }

    // The node falls silent.
    doomed.abort();
    let _ = doomed.await;
    let node = eventually(WAIT, "doomed-0 Unknown and tainted unreachable", || async {
        let n = nodes.get("doomed-0").await.ok()?;
        let (status, reason) = ready(&n)?;
        let want = vec![
            (UNREACHABLE.to_string(), "NoExecute".to_string()),
            (UNREACHABLE.to_string(), "NoSchedule".to_string()),
        ];
        (status == "Unknown" && taints(&n) == want).then_some((n, reason))
    })
    .await;
    assert_eq!(node.1.as_deref(), Some("NodeStatusUnknown"));
    let conditions = node.0.status.unwrap().conditions.unwrap();
    for ty in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = conditions.iter().find(|c| c.type_ == ty).unwrap();
        assert_eq!(c.status, "Unknown", "{ty}");
        assert_eq!(
            c.message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
    }
    let tainted_at = node_taint_time(&nodes).await;

    eventually(WAIT, "the node's pods marked not Ready", || async {
        let p = pods.get("defaulted").await.ok()?;
        (pod_condition(&p, "Ready")?.status == "False").then_some(())
    })
    .await;
    eventually(WAIT, "the intolerant pod evicted", || async {
        let p = pods.get("intolerant").await.ok()?;
        let c = pod_condition(&p, "DisruptionTarget")?;
        (p.metadata.deletion_timestamp.is_some()
            && c.reason.as_deref() == Some("DeletionByTaintManager"))
        .then_some(())
    })
    .await;
    let brief = eventually(WAIT, "the briefly tolerating pod evicted", || async {
        let p = pods.get("brief").await.ok()?;
        p.metadata.deletion_timestamp.as_ref()?;
        pod_condition(&p, "DisruptionTarget")
    })
    .await;
    // Never before its toleration ran out (second-granular times, hence one second of slack).
    let waited = brief
        .last_transition_time
        .unwrap()
        .0
        .duration_since(tainted_at);
    assert!(waited.as_secs() >= 2, "evicted {waited:?} after the taint");
    let events = eventually(WAIT, "eviction events", || async {
        event_with(
            &client,
            "default",
            "TaintManagerEviction",
            "Marking for deletion Pod default/intolerant",
        )
        .await
    })
    .await;
    assert_eq!(
        events.reporting_controller.as_deref(),
        Some("taint-eviction-controller")
    );
    eventually(WAIT, "a NodeNotReady event", || async {
        event_with(
            &client,
            "default",
            "NodeNotReady",
            "Node doomed-0 status is now: NodeNotReady",
        )
        .await
    })
    .await;

    // The node comes back: Ready again, untainted, scheduled evictions cancelled.
    let back = tokio::spawn(hollow::run(client.clone(), hollow_config("doomed-")));
    eventually(WAIT, "doomed-0 Ready and untainted again", || async {
        let n = nodes.get("doomed-0").await.ok()?;
        (ready(&n)?.0 == "True" && taints(&n).is_empty()).then_some(())
    })
    .await;
    eventually(WAIT, "the defaulted pod's eviction cancelled", || async {
        event_with(
            &client,
            "default",
            "TaintManagerEviction",
            "Cancelling deletion of Pod default/defaulted",
        )
        .await
    })
    .await;
    for name in ["patient", "defaulted"] {
        let p = pods.get(name).await?;
        assert!(
            p.metadata.deletion_timestamp.is_none(),
            "{name} was evicted"
        );
    }
    let s = nodes.get("stable-0").await?;
    assert_eq!(ready(&s).unwrap().0, "True");
    assert!(taints(&s).is_empty());

    for t in [stable, back] {
        t.abort();
    }
    lifecycle.abort();
    eviction.abort();
    Ok(())
}

async fn node_taint_time(nodes: &Api<Node>) -> k8s_openapi::jiff::Timestamp {
    let n = nodes.get("doomed-0").await.unwrap();
    n.spec
        .unwrap()
        .taints
        .unwrap()
        .into_iter()
        .find(|t| t.effect == "NoExecute")
        .and_then(|t| t.time_added)
        .expect("NoExecute taints carry timeAdded")
        .0
}

#[tokio::test]
async fn no_eviction_taints_when_every_node_is_down() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let only = tokio::spawn(hollow::run(client.clone(), hollow_config("only-")));
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(WAIT, "the node Ready", || async {
        let n = nodes.get_opt("only-0").await.ok()??;
        (ready(&n)?.0 == "True").then_some(())
    })
    .await;
    let lifecycle = tokio::spawn(nodelifecycle::run(
        Informers::new(client.clone()),
        NodeLifecycleConfig {
            node_monitor_grace_period: Duration::from_secs(2),
            ..Default::default()
        },
    ));
    only.abort();
    // Upstream's "master disruption" mode: with every node down the control plane is the
    // likelier culprit, so the node is marked Unknown and kept off the scheduler's list, but
    // nothing is evicted.
    eventually(
        WAIT,
        "only-0 Unknown and tainted NoSchedule only",
        || async {
            let n = nodes.get("only-0").await.ok()?;
            (ready(&n)?.0 == "Unknown"
                && taints(&n) == vec![(UNREACHABLE.to_string(), "NoSchedule".to_string())])
            .then_some(())
        },
    )
    .await;
    lifecycle.abort();
    Ok(())
}
