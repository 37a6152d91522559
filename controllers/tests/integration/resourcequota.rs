//! The resource quota controller against the in-process API server: `status.used` follows
//! pods and objects as they come and go, within the quota's scopes.

use crate::common;

use common::{Cluster, WAIT};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, PostParams};
use minik8s_controllers::informers::Informers;
use minik8s_controllers::resourcequota;
use serde_json::json;
use testkit::eventually;

fn pod(name: &str, cpu: Option<&str>) -> Pod {
    let resources = cpu.map(|c| json!({"requests": {"cpu": c}, "limits": {"cpu": c}}));
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
            "resources": resources.unwrap_or(json!({}))}]},
    }))
    .unwrap()
}

/// Waits until the quota's status reads `want` (resource, used) for every pair.
async fn used_reads(quotas: &Api<ResourceQuota>, name: &str, want: &[(&str, &str)]) {
    eventually(WAIT, &format!("{name} used {want:?}"), || async {
        let q = quotas.get(name).await.ok()?;
        let status = q.status?;
        let used = status.used?;
        let hard_copied = status.hard == q.spec.and_then(|s| s.hard);
        let all = want
            .iter()
            .all(|(k, v)| used.get(*k).map(|q| q.0.as_str()) == Some(*v));
        (hard_copied && all).then_some(())
    })
    .await
}

#[tokio::test]
async fn used_follows_the_namespace() -> anyhow::Result<()> {
    let mut cluster = Cluster::start().await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(cluster.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let pp = PostParams::default();
    // A BestEffort pod can only come before a quota on requests.cpu is counted: after, it
    // is refused for stating none (upstream's `must specify`).
    pods.create(&pp, &pod("a", Some("250m"))).await?;
    pods.create(&pp, &pod("plain", None)).await?;
    let all: ResourceQuota = serde_json::from_value(json!({"metadata": {"name": "all"},
        "spec": {"hard": {"pods": "10", "requests.cpu": "2", "configmaps": "4"}}}))?;
    quotas.create(&pp, &all).await?;
    let best_effort: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "best-effort"},
        "spec": {"hard": {"pods": "5"}, "scopes": ["BestEffort"]}}))?;
    quotas.create(&pp, &best_effort).await?;

    cluster.spawn(resourcequota::run(Informers::new(cluster.client.clone())));
    used_reads(&quotas, "all", &[("pods", "2"), ("requests.cpu", "250m")]).await;
    used_reads(&quotas, "best-effort", &[("pods", "1")]).await;

    pods.create(&pp, &pod("b", Some("500m"))).await?;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cm"}}))?;
    maps.create(&pp, &cm).await?;
    used_reads(
        &quotas,
        "all",
        &[("pods", "3"), ("requests.cpu", "750m"), ("configmaps", "1")],
    )
    .await;
    used_reads(&quotas, "best-effort", &[("pods", "1")]).await;

    // Deleted at once (no kubelet holds them): the usage goes with them.
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("a", &now).await?;
    maps.delete("cm", &now).await?;
    used_reads(
        &quotas,
        "all",
        &[("pods", "2"), ("requests.cpu", "500m"), ("configmaps", "0")],
    )
    .await;
    Ok(())
}
