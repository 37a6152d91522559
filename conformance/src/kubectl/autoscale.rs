//! `kubectl autoscale`, `kubectl get hpa` and `kubectl describe hpa` as each kubectl prints
//! them, on an idle Deployment that the autoscaler raises to its minReplicas: the object
//! kubectl creates (autoscaling/v1 or v2, whichever that kubectl writes), the server's Table
//! columns, and the describer's metrics, conditions and events.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use serde_json::json;

use super::{Ctx, header, row};
use crate::support::{contains, eventually};

const NAME: &str = "as-target";

pub async fn autoscale(c: &Ctx) -> anyhow::Result<()> {
    c.ensure::<Deployment>(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "busybox:1.36",
                        "command": ["sleep", "1000000"],
                        "resources": {"requests": {"cpu": "20m"}}}]
                }
            }
        }
    }))
    .await?;
    let _ = c
        .run(&["delete", "hpa", NAME, "--ignore-not-found"])
        .await?;
    let out = c
        .ok(&[
            "autoscale",
            "deployment",
            NAME,
            "--min=2",
            "--max=3",
            "--cpu-percent=50",
        ])
        .await?;
    contains(
        &out,
        &format!("horizontalpodautoscaler.autoscaling/{NAME} autoscaled"),
    )?;
    let hpas = c.api::<HorizontalPodAutoscaler>();
    let h = hpas.get(NAME).await?;
    let spec = h.spec.clone().unwrap_or_default();
    ensure!(
        spec.min_replicas == Some(2)
            && spec.max_replicas == 3
            && spec.scale_target_ref.kind == "Deployment"
            && spec.metrics.as_ref().is_some_and(|m| m.len() == 1
                && m[0]
                    .resource
                    .as_ref()
                    .is_some_and(|r| r.name == "cpu" && r.target.average_utilization == Some(50))),
        "the autoscaler kubectl created: {spec:?}"
    );
    // Raised to minReplicas, then a metric read from the idle pods.
    eventually(
        Duration::from_secs(120),
        "the HPA to read its metric",
        || async {
            let h = hpas.get(NAME).await?;
            let s = h.status.clone().unwrap_or_default();
            let measured = s
                .current_metrics
                .as_ref()
                .and_then(|m| m.first())
                .and_then(|m| m.resource.as_ref())
                .is_some_and(|r| r.current.average_utilization.is_some());
            ensure!(s.current_replicas == Some(2) && measured, "status: {s:?}");
            Ok(())
        },
    )
    .await?;

    let out = c.ok(&["get", "hpa", NAME]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "REFERENCE",
                "TARGETS",
                "MINPODS",
                "MAXPODS",
                "REPLICAS",
                "AGE"
            ],
        "header: {out}"
    );
    let r = row(&out, NAME)?;
    // `cpu: 0%/50%` is two words.
    ensure!(
        r.len() == 8
            && r[1] == format!("Deployment/{NAME}")
            && r[2] == "cpu:"
            && r[3].ends_with("%/50%")
            && r[4..7] == ["2", "3", "2"],
        "row: {r:?}"
    );

    let out = c.ok(&["describe", "hpa", NAME]).await?;
    for line in [
        "Reference:".to_string(),
        format!("Deployment/{NAME}"),
        "Metrics:".into(),
        "( current / target )".into(),
        "resource cpu on pods  (as a percentage of request):".into(),
        "/ 50%".into(),
        "Min replicas:".into(),
        "Max replicas:".into(),
        "Deployment pods:".into(),
        "2 current / 2 desired".into(),
        "Conditions:".into(),
        "AbleToScale".into(),
        "ScalingActive".into(),
        "ValidMetricFound".into(),
        "ScalingLimited".into(),
        "Events:".into(),
        "SuccessfulRescale".into(),
        "New size: 2; reason: Current number of replicas below Spec.MinReplicas".into(),
    ] {
        contains(&out, &line)?;
    }
    Ok(())
}
