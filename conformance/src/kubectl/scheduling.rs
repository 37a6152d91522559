//! Where and how pods run, as kubectl users meet it on the real kubelet.
//!
//! Preemption: a pod of higher priority that wants the host port a pod of lower priority
//! holds on the node evicts it (a `Preempted` event, the victim gone), is nominated to the
//! node and runs there. The port is the case's own per kubectl version and both pods are
//! pinned to one node by its hostname label, so the suite's other pods are never victims.
//!
//! RuntimeClasses: a pod of a class whose handler containerd has (`runc`) runs with the
//! class's overhead; one whose handler it lacks never gets a sandbox, and containerd's own
//! refusal of that handler shows in the pod's events, which proves the kubelet passed it.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use super::{Ctx, yaml};
use crate::support::{contains, eventually};

/// Creates the cluster-scoped `object`, deleting first what a previous run left of it.
async fn recreate<K>(api: &Api<K>, object: serde_json::Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object)?;
    let name = object.meta().name.clone().unwrap_or_default();
    let _ = api.delete(&name, &DeleteParams::default()).await;
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

pub async fn preemption(c: &Ctx) -> anyhow::Result<()> {
    let port = 19000 + c.bin.minor.unwrap_or(99);
    let node = c.ready_node().await?;
    let classes: Api<PriorityClass> = Api::all(c.client.clone());
    let (low, high) = (
        format!("low-{}-{}", c.bin.tag, c.env.run),
        format!("high-{}-{}", c.bin.tag, c.env.run),
    );
    for (name, value) in [(&low, 10), (&high, 1000)] {
        recreate(
            &classes,
            json!({"metadata": {"name": name}, "value": value}),
        )
        .await?;
    }
    let pod = |name: &str, class: &str| {
        yaml(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "priorityClassName": class,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "ports": [{"containerPort": 8080, "hostPort": port}]}],
            }
        }))
    };
    let file = c.write("preemption-victim.yaml", &pod("victim", &low))?;
    c.ok(&["create", "-f", &file]).await?;
    c.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/victim",
        "--timeout=60s",
    ])
    .await?;
    let file = c.write("preemption-high.yaml", &pod("preemptor", &high))?;
    c.ok(&["create", "-f", &file]).await?;
    c.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/preemptor",
        "--timeout=90s",
    ])
    .await?;
    let out = c
        .ok(&[
            "get",
            "pod",
            "preemptor",
            "-o",
            "jsonpath={.metadata.uid} {.spec.nodeName} {.status.nominatedNodeName}",
        ])
        .await?;
    let fields: Vec<&str> = out.split_whitespace().collect();
    ensure!(
        fields.len() == 3 && fields[1] == node && fields[2] == node,
        "preemptor uid, node and nomination: {out:?}"
    );
    let uid = fields[0].to_string();
    eventually(Duration::from_secs(30), "the victim gone", || async {
        let out = c
            .run(&["get", "pod", "victim", "--ignore-not-found", "-o", "name"])
            .await?;
        ensure!(
            out.stdout.trim().is_empty(),
            "victim still there: {}",
            out.stdout
        );
        Ok(())
    })
    .await?;
    let out = c
        .ok(&[
            "get",
            "events",
            "--field-selector",
            "reason=Preempted,involvedObject.name=victim",
            "-o",
            "jsonpath={.items[*].message}",
        ])
        .await?;
    contains(&out, &format!("Preempted by pod {uid} on node {node}"))?;
    c.ok(&["delete", "pod", "preemptor", "--wait=false"])
        .await?;
    for name in [&low, &high] {
        classes.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

pub async fn runtime_class(c: &Ctx) -> anyhow::Result<()> {
    let classes: Api<RuntimeClass> = Api::all(c.client.clone());
    let (runc, missing) = (
        format!("runc-{}-{}", c.bin.tag, c.env.run),
        format!("missing-{}-{}", c.bin.tag, c.env.run),
    );
    for (name, handler) in [(&runc, "runc"), (&missing, "no-such-handler")] {
        let class = json!({"metadata": {"name": name}, "handler": handler,
                           "overhead": {"podFixed": {"cpu": "10m"}}});
        recreate(&classes, class).await?;
    }
    let pod = |name: &str, class: &str| {
        yaml(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "runtimeClassName": class,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"]}],
            }
        }))
    };
    let file = c.write(
        "runtime-class-pods.yaml",
        &format!("{}---\n{}", pod("runs", &runc), pod("stuck", &missing)),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    c.ok(&["wait", "--for=condition=Ready", "pod/runs", "--timeout=60s"])
        .await?;
    let overhead = c
        .ok(&["get", "pod", "runs", "-o", "jsonpath={.spec.overhead.cpu}"])
        .await?;
    ensure!(
        overhead.trim() == "10m",
        "overhead of pod runs: {overhead:?}"
    );
    eventually(
        Duration::from_secs(60),
        "the stuck pod's sandbox refused",
        || async {
            let out = c
                .ok(&[
                    "get",
                    "events",
                    "--field-selector",
                    "reason=FailedCreatePodSandBox,involvedObject.name=stuck",
                    "-o",
                    "jsonpath={.items[*].message}",
                ])
                .await?;
            contains(&out, "no-such-handler")
        },
    )
    .await?;
    let phase = c
        .ok(&["get", "pod", "stuck", "-o", "jsonpath={.status.phase}"])
        .await?;
    ensure!(
        phase.trim() == "Pending",
        "pod stuck is {phase:?}, not Pending"
    );
    c.ok(&["delete", "pod", "runs", "stuck", "--wait=false"])
        .await?;
    for name in [&runc, &missing] {
        classes.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}
