//! Hollow nodes against the in-process API server: registration, leases, and pods walked
//! through their phases as a kubelet would report them.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use minik8s_controllers::hollow::{self, HollowConfig};
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(20);

fn pod(name: &str, node: &str, restart: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart,
            "containers": [{"name": "c", "image": "busybox:1.36"}],
        },
    }))
    .unwrap()
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

#[tokio::test]
async fn hollow_nodes_register_and_run_pods() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let config = HollowConfig {
        count: 2,
        ..Default::default()
    };
    let hollow = tokio::spawn(hollow::run(client.clone(), config));

    let nodes: Api<Node> = Api::all(client.clone());
    eventually(WAIT, "two Ready hollow nodes", || async {
        let list = nodes.list(&Default::default()).await.ok()?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        (ready == 2).then_some(())
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    eventually(WAIT, "a lease for each node", || async {
        let l = leases.get_opt("hollow-node-1").await.ok()??;
        l.spec?.renew_time.map(|_| ())
    })
    .await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    pods.create(
        &pp,
        &pod("serve", "hollow-node-0", "Always", serde_json::json!({})),
    )
    .await?;
    pods.create(
        &pp,
        &pod("done", "hollow-node-1", "Never", serde_json::json!({})),
    )
    .await?;
    pods.create(
        &pp,
        &pod(
            "fail",
            "hollow-node-1",
            "Never",
            serde_json::json!({"hollow.minik8s.io/exit-code": "2"}),
        ),
    )
    .await?;
    pods.create(
        &pp,
        &pod(
            "unready",
            "hollow-node-0",
            "Always",
            serde_json::json!({"hollow.minik8s.io/ready": "false"}),
        ),
    )
    .await?;
    pods.create(
        &pp,
        &pod("elsewhere", "real-node", "Always", serde_json::json!({})),
    )
    .await?;

    let serve = eventually(WAIT, "serve Running and Ready", || async {
        let p = pods.get("serve").await.ok()?;
        (phase(&p) == "Running" && ready(&p)).then_some(p)
    })
    .await;
    let status = serve.status.unwrap();
    assert!(status.pod_ip.unwrap().starts_with("100.64.0."));
    assert_eq!(status.host_ip.as_deref(), Some("100.127.0.0"));
    eventually(WAIT, "done Succeeded", || async {
        let p = pods.get("done").await.ok()?;
        (phase(&p) == "Succeeded").then_some(())
    })
    .await;
    let failed = eventually(WAIT, "fail Failed", || async {
        let p = pods.get("fail").await.ok()?;
        (phase(&p) == "Failed").then_some(p)
    })
    .await;
    let code = failed.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap()
        .exit_code;
    assert_eq!(code, 2);
    eventually(WAIT, "unready Running but not Ready", || async {
        let p = pods.get("unready").await.ok()?;
        (phase(&p) == "Running" && !ready(&p)).then_some(())
    })
    .await;
    // Readiness follows the annotation.
    pods.patch(
        "unready",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"metadata": {"annotations": {"hollow.minik8s.io/ready": "true"}}}),
        ),
    )
    .await?;
    eventually(WAIT, "unready becomes Ready", || async {
        let p = pods.get("unready").await.ok()?;
        ready(&p).then_some(())
    })
    .await;
    // A graceful delete completes: the hollow kubelet confirms it.
    pods.delete("serve", &DeleteParams::default()).await?;
    eventually(WAIT, "serve deleted", || async {
        pods.get_opt("serve").await.ok()?.is_none().then_some(())
    })
    .await;
    // Pods on other nodes are left alone.
    let other = pods.get("elsewhere").await?;
    assert_eq!(phase(&other), "Pending");

    // A node marked not Ready is reported Ready again.
    nodes
        .patch_status(
            "hollow-node-0",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"conditions": [
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
            ]}})),
        )
        .await?;
    eventually(WAIT, "hollow-node-0 Ready again", || async {
        let n = nodes.get("hollow-node-0").await.ok()?;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    hollow.abort();
    Ok(())
}
