//! PersistentVolumeClaims on the real kubelet, as kubectl users meet them.
//!
//! A static `local` PersistentVolume (a directory the case makes on the node, pinned to the
//! node by node affinity) pre-bound to a claim: a pod writes through it (with a subPath, and
//! its fsGroup on what it writes), a second pod reads it back through a read-only claim and
//! cannot write. A pod whose claim is never bound shows why in `kubectl describe pod`: the
//! scheduler's FailedScheduling, or, for a pod given its node directly, the kubelet's
//! FailedMount. A Block-mode claim is refused by the kubelet with an event.
//!
//! Pre-bound claims are bound by the PV controller; on a cluster without one the case binds
//! them as it would (the claimRef's UID, both Bound), so it checks the kubelet and scheduler
//! either way.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::{Ctx, yaml};
use crate::support::{contains, eventually};

const FS_GROUP: u32 = 2000;

/// The node's `kubernetes.io/hostname`, what local volumes are pinned to.
async fn hostname(c: &Ctx, node: &str) -> anyhow::Result<String> {
    let nodes: Api<Node> = Api::all(c.client.clone());
    let n = nodes.get(node).await?;
    Ok(n.metadata
        .labels
        .and_then(|l| l.get("kubernetes.io/hostname").cloned())
        .unwrap_or_else(|| node.to_string()))
}

fn local_volume(name: &str, ns: &str, claim: &str, path: &str, host: &str, mode: &str) -> String {
    yaml(&json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": mode,
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": ns, "name": claim},
            "local": {"path": path},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}},
        }
    }))
}

fn claim(name: &str, volume: Option<&str>, size: &str, mode: &str) -> String {
    let mut spec = json!({
        "storageClassName": "",
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": mode,
        "resources": {"requests": {"storage": size}},
    });
    if let Some(v) = volume {
        spec["volumeName"] = json!(v);
    }
    yaml(&json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": name}, "spec": spec}))
}

/// Waits for `claim` to be Bound to `volume`; binds it as the PV controller would when none
/// does it within a few seconds.
async fn bound(c: &Ctx, claim: &str, volume: &str) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.client.clone(), &c.ns);
    let is_bound = || async {
        let pvc = claims.get(claim).await?;
        let phase = pvc.status.and_then(|s| s.phase).unwrap_or_default();
        ensure!(phase == "Bound", "claim {claim} is {phase:?}");
        Ok(())
    };
    if eventually(Duration::from_secs(5), "the claim bound", is_bound)
        .await
        .is_ok()
    {
        return Ok(());
    }
    let uid = claims.get(claim).await?.metadata.uid;
    let volumes: Api<PersistentVolume> = Api::all(c.client.clone());
    let pp = PatchParams::default();
    volumes
        .patch(
            volume,
            &pp,
            &Patch::Merge(json!({"spec": {"claimRef": {"uid": uid}}})),
        )
        .await?;
    volumes
        .patch_status(
            volume,
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Bound"}})),
        )
        .await?;
    claims
        .patch(
            claim,
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {
                "pv.kubernetes.io/bind-completed": "yes"}}})),
        )
        .await?;
    claims
        .patch_status(
            claim,
            &pp,
            &Patch::Merge(
                json!({"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"}}}),
            ),
        )
        .await?;
    eventually(Duration::from_secs(10), "the claim bound", is_bound).await
}

fn pod(name: &str, claim: &str, read_only: bool, script: &str) -> String {
    yaml(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"fsGroup": FS_GROUP},
            "volumes": [{"name": "data", "persistentVolumeClaim":
                {"claimName": claim, "readOnly": read_only}}],
            "containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Never",
                "command": ["sh", "-c", script],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "data", "mountPath": "/sub", "subPath": "sub"}]}],
        }
    }))
}

async fn succeeded(c: &Ctx, name: &str) -> anyhow::Result<String> {
    eventually(
        Duration::from_secs(90),
        &format!("pod {name} done"),
        || async {
            let phase = c
                .ok(&["get", "pod", name, "-o", "jsonpath={.status.phase}"])
                .await?;
            ensure!(phase == "Succeeded", "pod {name} is {phase:?}");
            Ok(())
        },
    )
    .await?;
    c.ok(&["logs", name]).await
}

/// `kubectl describe pod` until it shows `needle`.
async fn described(c: &Ctx, pod: &str, needle: &str) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(60),
        &format!("{needle:?} in describe pod {pod}"),
        || async {
            let out = c.ok(&["describe", "pod", pod]).await?;
            contains(&out, needle)
        },
    )
    .await
}

pub async fn persistent_volumes(c: &Ctx) -> anyhow::Result<()> {
    let node = c.ready_node().await?;
    let host = hostname(c, &node).await?;
    let dir = c.dir.join("local-pv");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    let path = dir.to_string_lossy().into_owned();
    let (pv, block_pv) = (
        format!("local-{}-{}", c.bin.tag, c.env.run),
        format!("block-{}-{}", c.bin.tag, c.env.run),
    );
    let volumes: Api<PersistentVolume> = Api::all(c.client.clone());
    for name in [&pv, &block_pv] {
        let _ = volumes.delete(name, &DeleteParams::default()).await;
    }

    // A static local volume and its pre-bound claim.
    let file = c.write(
        "pv-local.yaml",
        &format!(
            "{}---\n{}",
            local_volume(&pv, &c.ns, "data", &path, &host, "Filesystem"),
            claim("data", Some(&pv), "1Gi", "Filesystem")
        ),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    bound(c, "data", &pv).await?;
    let out = c
        .ok(&["get", "pvc", "data", "-o", "jsonpath={.spec.volumeName}"])
        .await?;
    ensure!(out == pv, "claim data bound to {out:?}");

    // A pod writes, through the volume and a subPath; what it writes gets the fsGroup.
    let file = c.write(
        "pv-writer.yaml",
        &pod(
            "writer",
            "data",
            false,
            "echo hello > /data/file && echo inner > /sub/inner && stat -c %g /data/file",
        ),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    let logs = succeeded(c, "writer").await?;
    ensure!(
        logs.trim() == FS_GROUP.to_string(),
        "writer's file group: {logs:?}"
    );
    ensure!(
        std::fs::read_to_string(dir.join("file"))? == "hello\n",
        "file on the node"
    );
    ensure!(
        std::fs::read_to_string(dir.join("sub/inner"))? == "inner\n",
        "subPath file on the node"
    );
    let meta = std::fs::metadata(&dir)?;
    ensure!(
        meta.gid() == FS_GROUP && meta.mode() & 0o2000 != 0,
        "volume root: gid {} mode {:o}",
        meta.gid(),
        meta.mode()
    );

    // A second pod reads it back through a read-only claim, and cannot write.
    let file = c.write(
        "pv-reader.yaml",
        &pod(
            "reader",
            "data",
            true,
            "cat /data/file /sub/inner; if touch /data/new 2>/dev/null; then echo writable; \
             else echo read-only; fi",
        ),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    let logs = succeeded(c, "reader").await?;
    ensure!(
        logs == "hello\ninner\nread-only\n",
        "reader's output: {logs:?}"
    );
    ensure!(!dir.join("new").exists(), "the read-only pod wrote");

    // A claim nothing binds (no class, a size no volume has): the scheduler says so, and a
    // pod given its node directly waits in ContainerCreating with the kubelet's reason.
    let file = c.write(
        "pv-unbound.yaml",
        &claim("unbound", None, "1000Ti", "Filesystem"),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    let file = c.write(
        "pv-unbound-pods.yaml",
        &format!(
            "{}---\n{}",
            pod("unscheduled", "unbound", false, "true"),
            pod("unmounted", "unbound", false, "true")
                .replace("spec:\n", &format!("spec:\n  nodeName: {node}\n"))
        ),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    described(
        c,
        "unscheduled",
        "pod has unbound immediate PersistentVolumeClaims",
    )
    .await?;
    described(c, "unscheduled", "FailedScheduling").await?;
    described(c, "unmounted", "FailedMount").await?;
    described(
        c,
        "unmounted",
        &format!("error processing PVC {}/unbound: PVC is not bound", c.ns),
    )
    .await?;
    let reason = c
        .ok(&[
            "get",
            "pod",
            "unmounted",
            "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[0].state.waiting.reason}",
        ])
        .await?;
    ensure!(
        reason == "Pending ContainerCreating",
        "pod unmounted: {reason:?}"
    );

    // Block volumes are refused by the kubelet with an event.
    let file = c.write(
        "pv-block.yaml",
        &format!(
            "{}---\n{}",
            local_volume(&block_pv, &c.ns, "block", &path, &host, "Block"),
            claim("block", Some(&block_pv), "1Gi", "Block")
        ),
    )?;
    c.ok(&["create", "-f", &file]).await?;
    bound(c, "block", &block_pv).await?;
    let block_pod = yaml(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "block"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "raw", "persistentVolumeClaim": {"claimName": "block"}}],
            "containers": [{"name": "c", "image": "busybox:1.36", "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "volumeDevices": [{"name": "raw", "devicePath": "/dev/xvda"}]}],
        }
    }));
    let file = c.write("pv-block-pod.yaml", &block_pod)?;
    c.ok(&["create", "-f", &file]).await?;
    described(
        c,
        "block",
        "volume raw has volumeMode Block: block volumes are not supported by this kubelet",
    )
    .await?;

    c.ok(&[
        "delete",
        "pod",
        "writer",
        "reader",
        "unscheduled",
        "unmounted",
        "block",
        "--timeout=60s",
    ])
    .await?;
    c.ok(&["delete", "pvc", "data", "unbound", "block", "--wait=false"])
        .await?;
    for name in [&pv, &block_pv] {
        let _ = volumes.delete(name, &DeleteParams::default()).await;
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
