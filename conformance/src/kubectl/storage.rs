//! Persistent volumes as kubectl users meet them: the server's default `local-path` class in
//! `kubectl get sc`; static hostPath volumes (under the suite's temp dir) bound smallest fit
//! first, with `kubectl get pv,pvc` in upstream's columns and a claim too large for any of
//! them left Pending with the binder's `FailedBinding`; Retain leaving a Released volume;
//! pvc-protection holding a claim a pod uses in Terminating until the pod is gone; a claim
//! provisioned by the node's local-path provisioner growing; and data written through a
//! dynamically provisioned WaitForFirstConsumer claim read by the next pod.
//!
//! Static volumes are cluster-scoped and every kubectl of the matrix runs at once, so each
//! case's volumes carry a label of its own and its claims select by it (with
//! `storageClassName: ""`, static volumes only): no case can take another's volume.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use serde_json::{Value, json};

use super::{Ctx, cleanup, header, row, yaml};
use crate::support::{contains, eventually};

const WAIT: Duration = Duration::from_secs(60);

/// A case's own names and label for its cluster-scoped volumes.
struct Volumes<'a> {
    c: &'a Ctx,
    case: &'static str,
}

impl<'a> Volumes<'a> {
    fn new(c: &'a Ctx, case: &'static str) -> Self {
        Volumes { c, case }
    }

    fn label(&self) -> String {
        format!("{}-{}-{}", self.case, self.c.bin.tag, self.c.env.run)
    }

    fn name(&self, short: &str) -> String {
        format!("{}-{short}", self.label())
    }

    fn api(&self) -> Api<PersistentVolume> {
        Api::all(self.c.client.clone())
    }

    /// Creates hostPath volumes `(short name, size, reclaim policy)` with `kubectl create`.
    async fn create(&self, volumes: &[(&str, &str, &str)]) -> anyhow::Result<()> {
        let mut docs = Vec::new();
        for (short, size, policy) in volumes {
            let name = self.name(short);
            let path = self.c.dir.join("volumes").join(&name);
            std::fs::create_dir_all(&path)?;
            docs.push(yaml(&json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"storage-case": self.label()}},
                "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": policy,
                         "hostPath": {"path": path, "type": "Directory"}},
            })));
        }
        let file = self
            .c
            .write(&format!("{}-volumes.yaml", self.case), &docs.join("---\n"))?;
        self.c.ok(&["create", "-f", &file]).await?;
        Ok(())
    }

    /// A claim of `size` that only this case's volumes can satisfy.
    fn claim(&self, name: &str, size: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "selector": {"matchLabels": {"storage-case": self.label()}},
                     "resources": {"requests": {"storage": size}}}})
    }

    async fn remove(&self, shorts: &[&str]) {
        let names: Vec<String> = shorts.iter().map(|s| self.name(s)).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        cleanup(&self.api(), &names).await;
    }
}

/// Waits until `kubectl get pvc <name>` prints `phase`; returns its row's columns.
async fn claim_phase(c: &Ctx, name: &str, phase: &str) -> anyhow::Result<Vec<String>> {
    eventually(WAIT, &format!("claim {name} {phase}"), || async {
        let out = c.ok(&["get", "pvc", name]).await?;
        let r = row(&out, name)?;
        ensure!(r.get(1) == Some(&phase), "claim row: {r:?}");
        Ok(r.iter().map(|s| s.to_string()).collect())
    })
    .await
}

/// The messages of the events of `reason` about `name`.
async fn event_messages(c: &Ctx, name: &str, reason: &str) -> anyhow::Result<String> {
    let selector = format!("reason={reason},involvedObject.name={name}");
    c.ok(&[
        "get",
        "events",
        "--field-selector",
        &selector,
        "-o",
        "jsonpath={.items[*].message}",
    ])
    .await
}

pub async fn storage_classes(c: &Ctx) -> anyhow::Result<()> {
    let out = c.ok(&["get", "storageclass"]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "PROVISIONER",
                "RECLAIMPOLICY",
                "VOLUMEBINDINGMODE",
                "ALLOWVOLUMEEXPANSION",
                "AGE"
            ],
        "storageclass header: {out}"
    );
    let r = row(&out, "local-path")?;
    ensure!(
        r[1..6]
            == [
                "(default)",
                "rancher.io/local-path",
                "Delete",
                "WaitForFirstConsumer",
                "true"
            ],
        "local-path row: {r:?}"
    );
    let out = c
        .ok(&[
            "get",
            "sc",
            "local-path",
            "-o",
            "jsonpath={.metadata.annotations.storageclass\\.kubernetes\\.io/is-default-class}",
        ])
        .await?;
    ensure!(out == "true", "default-class annotation: {out:?}");
    Ok(())
}

pub async fn static_binding(c: &Ctx) -> anyhow::Result<()> {
    let v = Volumes::new(c, "bind");
    let all = ["small", "mid", "big", "huge"];
    v.remove(&all).await;
    v.create(&[
        ("small", "1Gi", "Retain"),
        ("mid", "2Gi", "Retain"),
        ("big", "10Gi", "Retain"),
    ])
    .await?;
    let file = c.write("bind-claim.yaml", &yaml(&v.claim("data", "1500Mi")))?;
    c.ok(&["create", "-f", &file]).await?;
    let mid = v.name("mid");
    let r = claim_phase(c, "data", "Bound").await?;
    // NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS(empty) VOLUMEATTRIBUTESCLASS AGE
    ensure!(
        r[2] == mid && r[3] == "2Gi" && r[4] == "RWO" && r[5] == "<unset>",
        "claim row: {r:?}"
    );
    let out = c.ok(&["get", "pvc"]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "STATUS",
                "VOLUME",
                "CAPACITY",
                "ACCESS",
                "MODES",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "AGE"
            ],
        "pvc header: {out}"
    );
    let out = c.ok(&["get", "pv", &mid, &v.name("small")]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "CAPACITY",
                "ACCESS",
                "MODES",
                "RECLAIM",
                "POLICY",
                "STATUS",
                "CLAIM",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "REASON",
                "AGE"
            ],
        "pv header: {out}"
    );
    let claim = format!("{}/data", c.ns);
    let r = row(&out, &mid)?;
    ensure!(
        r[1..6] == ["2Gi", "RWO", "Retain", "Bound", claim.as_str()],
        "bound volume row: {r:?}"
    );
    let r = row(&out, &v.name("small"))?;
    ensure!(
        r[1..5] == ["1Gi", "RWO", "Retain", "Available"],
        "free volume row: {r:?}"
    );
    // Both kinds in one command, as `kubectl get pv,pvc` prints them.
    let out = c.ok(&["get", "pv,pvc", "-o", "name"]).await?;
    contains(&out, &format!("persistentvolume/{mid}"))?;
    contains(&out, "persistentvolumeclaim/data")?;

    // Nothing holds 20Gi: Pending, and the binder says why.
    let file = c.write("bind-huge.yaml", &yaml(&v.claim("too-large", "20Gi")))?;
    c.ok(&["create", "-f", &file]).await?;
    eventually(WAIT, "FailedBinding", || async {
        let out = event_messages(c, "too-large", "FailedBinding").await?;
        contains(
            &out,
            "no persistent volumes available for this claim and no storage class is set",
        )
    })
    .await?;
    claim_phase(c, "too-large", "Pending").await?;
    // A volume that holds it appears: the claim takes it.
    v.create(&[("huge", "30Gi", "Retain")]).await?;
    let r = claim_phase(c, "too-large", "Bound").await?;
    ensure!(r[2] == v.name("huge"), "too-large claim row: {r:?}");

    c.ok(&["delete", "pvc", "data", "too-large"]).await?;
    v.remove(&all).await;
    Ok(())
}

pub async fn retain(c: &Ctx) -> anyhow::Result<()> {
    let v = Volumes::new(c, "retain");
    v.remove(&["kept"]).await;
    v.create(&[("kept", "1Gi", "Retain")]).await?;
    let file = c.write("retain-claim.yaml", &yaml(&v.claim("kept", "1Gi")))?;
    c.ok(&["create", "-f", &file]).await?;
    claim_phase(c, "kept", "Bound").await?;
    // Deleted (no pod uses it): the volume is Released and stays, still naming its claim.
    c.ok(&["delete", "pvc", "kept", "--timeout=60s"]).await?;
    let kept = v.name("kept");
    let claim = format!("{}/kept", c.ns);
    eventually(WAIT, "the volume Released", || async {
        let out = c.ok(&["get", "pv", &kept]).await?;
        let r = row(&out, &kept)?;
        ensure!(
            r[1..6] == ["1Gi", "RWO", "Retain", "Released", claim.as_str()],
            "released volume row: {r:?}"
        );
        Ok(())
    })
    .await?;
    ensure!(
        c.dir.join("volumes").join(&kept).is_dir(),
        "a retained volume's directory stays"
    );
    v.remove(&["kept"]).await;
    Ok(())
}

pub async fn pvc_protection(c: &Ctx) -> anyhow::Result<()> {
    let v = Volumes::new(c, "protect");
    v.remove(&["held"]).await;
    let held = v.name("held");
    // Pre-bound both ways: the volume names the claim and the claim the volume.
    let path = c.dir.join("volumes").join(&held);
    std::fs::create_dir_all(&path)?;
    let node = c.ready_node().await?;
    let manifest = [
        json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": held},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "claimRef": {"namespace": c.ns, "name": "held"},
                     "hostPath": {"path": path, "type": "Directory"}}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "held"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "volumeName": held, "resources": {"requests": {"storage": "1Gi"}}}}),
        // On the node already: the claim is in use from now on, whether or not its
        // containers have started.
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "holder"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox:1.36",
                         "imagePullPolicy": "Never", "command": ["sleep", "3600"],
                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data",
                         "persistentVolumeClaim": {"claimName": "held"}}]}}),
    ];
    let docs: Vec<String> = manifest.iter().map(yaml).collect();
    let file = c.write("protect.yaml", &docs.join("---\n"))?;
    c.ok(&["create", "-f", &file]).await?;
    claim_phase(c, "held", "Bound").await?;
    let out = c
        .ok(&[
            "get",
            "pvc",
            "held",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ])
        .await?;
    contains(&out, "kubernetes.io/pvc-protection")?;

    c.ok(&["delete", "pvc", "held", "--wait=false"]).await?;
    // Terminating while the pod is there: a change of the claim makes the protection
    // controller look at it again, and it still keeps it.
    claim_phase(c, "held", "Terminating").await?;
    c.ok(&["label", "pvc", "held", "looked-at=again"]).await?;
    let out = c
        .ok(&["get", "pod", "holder", "-o", "jsonpath={.status.phase}"])
        .await?;
    ensure!(
        out != "Succeeded" && out != "Failed",
        "the pod finished: {out}"
    );
    claim_phase(c, "held", "Terminating").await?;
    c.ok(&["delete", "pod", "holder", "--timeout=60s"]).await?;
    c.ok(&["wait", "--for=delete", "pvc/held", "--timeout=60s"])
        .await?;
    eventually(WAIT, "the volume Released", || async {
        let out = c.ok(&["get", "pv", &held]).await?;
        ensure!(row(&out, &held)?.get(4) == Some(&"Released"), "{out}");
        Ok(())
    })
    .await?;
    v.remove(&["held"]).await;
    Ok(())
}

/// A claim provisioned on `node` by the node's local-path provisioner: the claim carries the
/// node the scheduler would have chosen, so no pod is needed.
async fn provisioned_claim(c: &Ctx, name: &str, node: &str) -> anyhow::Result<String> {
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name,
                     "annotations": {"volume.kubernetes.io/selected-node": node}},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}});
    let file = c.write(&format!("{name}-claim.yaml"), &yaml(&claim))?;
    c.ok(&["create", "-f", &file]).await?;
    let r = claim_phase(c, name, "Bound").await?;
    ensure!(
        r[3] == "1Gi" && r[4] == "RWO" && r[5] == "local-path",
        "provisioned claim row: {r:?}"
    );
    Ok(r[2].clone())
}

pub async fn expand(c: &Ctx) -> anyhow::Result<()> {
    let node = c.ready_node().await?;
    let volume = provisioned_claim(c, "grows", &node).await?;
    let path = c
        .ok(&["get", "pv", &volume, "-o", "jsonpath={.spec.local.path}"])
        .await?;
    ensure!(
        std::path::Path::new(&path).is_dir(),
        "the provisioned directory {path:?} exists"
    );
    contains(&path, &format!("/storage/{volume}_{}_grows", c.ns))?;
    c.ok(&[
        "patch",
        "pvc",
        "grows",
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
    ])
    .await?;
    eventually(WAIT, "the claim grown", || async {
        let out = c.ok(&["get", "pvc", "grows"]).await?;
        let r = row(&out, "grows")?;
        ensure!(r[3] == "2Gi", "claim row: {r:?}");
        Ok(())
    })
    .await?;
    let out = c.ok(&["get", "pv", &volume]).await?;
    ensure!(row(&out, &volume)?[1] == "2Gi", "volume row: {out}");
    let out = event_messages(c, "grows", "VolumeResizeSuccessful").await?;
    contains(&out, "Resize volume succeeded")?;
    // Shrinking is refused by validation.
    let err = c
        .fails(&[
            "patch",
            "pvc",
            "grows",
            "-p",
            r#"{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}"#,
        ])
        .await?;
    contains(&err, "field can not be less than previous value")?;
    // Deleted: the volume (policy Delete) and its directory go.
    c.ok(&["delete", "pvc", "grows", "--timeout=60s"]).await?;
    c.ok(&[
        "wait",
        "--for=delete",
        &format!("pv/{volume}"),
        "--timeout=60s",
    ])
    .await?;
    ensure!(
        !std::path::Path::new(&path).exists(),
        "{path} removed with its volume"
    );
    Ok(())
}

/// Needs the scheduler's volume binding and the kubelet's claim mounts (listed in
/// known-failures until they land).
pub async fn dynamic_wffc(c: &Ctx) -> anyhow::Result<()> {
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "shared"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "64Mi"}}}});
    let file = c.write("wffc-claim.yaml", &yaml(&claim))?;
    c.ok(&["create", "-f", &file]).await?;
    let r = claim_phase(c, "shared", "Pending").await?;
    ensure!(r[2] == "local-path", "waiting claim row: {r:?}");
    eventually(WAIT, "WaitForFirstConsumer", || async {
        let out = event_messages(c, "shared", "WaitForFirstConsumer").await?;
        contains(
            &out,
            "waiting for first consumer to be created before binding",
        )
    })
    .await?;
    let message = format!("written-{}-{}", c.bin.tag, c.env.run);
    let pod = |name: &str, script: &str| {
        yaml(
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": "busybox:1.36",
                         "imagePullPolicy": "Never", "command": ["sh", "-c", script],
                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data",
                         "persistentVolumeClaim": {"claimName": "shared"}}]}}),
        )
    };
    let succeeded = |name: &'static str| async move {
        c.ok(&[
            "wait",
            "--for=jsonpath={.status.phase}=Succeeded",
            &format!("pod/{name}"),
            "--timeout=120s",
        ])
        .await
        .with_context(|| format!("pod {name} succeeded"))
    };
    let file = c.write(
        "wffc-writer.yaml",
        &pod("writer", &format!("echo {message} > /data/msg")),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    succeeded("writer").await?;
    let r = claim_phase(c, "shared", "Bound").await?;
    let volume = r[2].clone();
    // Provisioned on the writer's node and pinned to it.
    let node = c
        .ok(&["get", "pod", "writer", "-o", "jsonpath={.spec.nodeName}"])
        .await?;
    let pinned = c
        .ok(&[
            "get",
            "pv",
            &volume,
            "-o",
            "jsonpath={.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}",
        ])
        .await?;
    let hostname = c
        .ok(&[
            "get",
            "node",
            &node,
            "-o",
            "jsonpath={.metadata.labels.kubernetes\\.io/hostname}",
        ])
        .await?;
    ensure!(
        pinned == hostname,
        "volume pinned to {pinned:?}, writer ran on {node} ({hostname})"
    );
    let out = c
        .ok(&[
            "get",
            "pvc",
            "shared",
            "-o",
            "jsonpath={.metadata.annotations.volume\\.kubernetes\\.io/selected-node}",
        ])
        .await?;
    ensure!(out == node, "selected node {out:?}, writer's node {node}");
    let out = event_messages(c, "shared", "ProvisioningSucceeded").await?;
    contains(&out, &format!("Successfully provisioned volume {volume}"))?;

    let file = c.write("wffc-reader.yaml", &pod("reader", "cat /data/msg"))?;
    c.ok(&["create", "-f", &file]).await?;
    succeeded("reader").await?;
    let logs = c.ok(&["logs", "reader"]).await?;
    ensure!(logs.trim() == message, "reader read {logs:?}");
    let reader_node = c
        .ok(&["get", "pod", "reader", "-o", "jsonpath={.spec.nodeName}"])
        .await?;
    ensure!(
        reader_node == node,
        "reader on {reader_node}, volume on {node}"
    );

    c.ok(&["delete", "pod", "writer", "reader", "--timeout=60s"])
        .await?;
    c.ok(&["delete", "pvc", "shared", "--timeout=60s"]).await?;
    c.ok(&[
        "wait",
        "--for=delete",
        &format!("pv/{volume}"),
        "--timeout=60s",
    ])
    .await?;
    Ok(())
}
