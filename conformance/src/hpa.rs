//! HorizontalPodAutoscalers on the cluster's real kubelets and metrics, once per run:
//! Deployments whose pods burn CPU until a deadline (written into the pod template, so pods
//! added by a scale-up burn and stop with the rest) scale up to maxReplicas and back to
//! minReplicas once idle; memory against an AverageValue; scale-up policies seen step by step
//! through a watch of the Deployment; the scale-down window holding the replicas
//! (`ScaleDownStabilized`); a missing target (`FailedGetScale`); an HPA written through
//! autoscaling/v1 read through v2 and back; `/scale` writes overridden at the next sync; and a
//! rollout of an autoscaled Deployment.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, ensure};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler as HpaV1;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::Env;
use crate::support::{self, CaseFn, eventually};

pub const CASES: &[(&str, CaseFn<Ctx>)] = crate::cases! { Ctx;
    "missing-target" => missing_target,
    "autoscaling-v1" => autoscaling_v1,
    "scale-overridden" => scale_overridden,
    "cpu-up-and-down" => cpu_up_and_down,
    "memory-average-value" => memory_average_value,
    "scale-up-policies" => scale_up_policies,
    "rollout-while-autoscaled" => rollout_while_autoscaled,
};

/// Two sync periods and a metrics resolution, with room for a busy machine.
const SCALED: Duration = Duration::from_secs(120);
/// How long the pods of `cpu-up-and-down` burn CPU, from the Deployment's creation.
const LOAD_SECONDS: i64 = 60;

pub struct Ctx {
    client: kube::Client,
    ns: String,
}

pub async fn run(env: &Arc<Env>) {
    let ctx = Ctx {
        client: env.client.clone(),
        ns: format!("conf-hpa-{}", env.run),
    };
    if let Err(e) = support::create_namespace(&ctx.client, &ctx.ns).await {
        support::fail_set_up("hpa", CASES, &env.selection, &env.report, &e);
        return;
    }
    support::run_cases(
        "hpa",
        &ctx,
        CASES,
        &env.selection,
        &env.report,
        Duration::from_secs(420),
    )
    .await;
    support::remove_namespace(&ctx.client, &ctx.ns, &[]).await;
}

/// A Deployment of busybox pods that request `cpu` and either burn CPU until the unix time
/// `burn_until` or idle.
fn burner(name: &str, replicas: i32, burn_until: Option<i64>) -> Value {
    let script = match burn_until {
        Some(end) => format!(
            "while [ $(date +%s) -lt {end} ]; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; done; exec sleep 1000000"
        ),
        None => "exec sleep 1000000".to_string(),
    };
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "main", "image": "busybox:1.36",
                        "command": ["sh", "-c", script],
                        "resources": {
                            "requests": {"cpu": "20m", "memory": "8Mi"},
                            "limits": {"cpu": "100m"}
                        }
                    }]
                }
            }
        }
    })
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn hpa(name: &str, min: i32, max: i32, metrics: Value, behavior: Option<Value>) -> Value {
    let mut spec = json!({
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicas": min,
        "maxReplicas": max,
        "metrics": metrics,
    });
    if let Some(b) = behavior {
        spec["behavior"] = b;
    }
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn cpu_utilization(percent: i32) -> Value {
    json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": percent}}}])
}

/// The `spec.replicas` a Deployment is given, in order, from its creation on.
#[derive(Clone, Default)]
struct Steps(Arc<Mutex<Vec<i32>>>);

impl Steps {
    fn seen(&self) -> Vec<i32> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

impl Ctx {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn create<K>(&self, obj: Value) -> anyhow::Result<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj: K = serde_json::from_value(obj)?;
        Ok(self.api::<K>().create(&PostParams::default(), &obj).await?)
    }

    /// Watches Deployment `name` and records every new `spec.replicas`.
    fn watch_steps(&self, name: &str) -> (Steps, tokio::task::JoinHandle<()>) {
        let steps = Steps::default();
        let api = self.api::<Deployment>();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let record = steps.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher::watcher(api, config).boxed();
            while let Some(ev) = events.next().await {
                let objects = match ev {
                    Ok(watcher::Event::Apply(d)) | Ok(watcher::Event::InitApply(d)) => vec![d],
                    _ => continue,
                };
                for d in objects {
                    let r = d.spec.and_then(|s| s.replicas).unwrap_or(1);
                    if let Ok(mut v) = record.0.lock()
                        && v.last() != Some(&r)
                    {
                        v.push(r);
                    }
                }
            }
        });
        (steps, task)
    }

    async fn hpa_until(
        &self,
        name: &str,
        limit: Duration,
        what: &str,
        ok: impl Fn(&HorizontalPodAutoscaler) -> bool,
    ) -> anyhow::Result<HorizontalPodAutoscaler> {
        let api = self.api::<HorizontalPodAutoscaler>();
        eventually(limit, what, || async {
            let h = api.get(name).await?;
            ensure!(ok(&h), "status: {}", status_text(&h));
            Ok(h)
        })
        .await
    }

    async fn replicas_until(&self, name: &str, want: i32, limit: Duration) -> anyhow::Result<()> {
        let api = self.api::<Deployment>();
        eventually(limit, &format!("{name} at {want} replicas"), || async {
            let d = api.get(name).await?;
            let r = d.spec.and_then(|s| s.replicas);
            ensure!(r == Some(want), "spec.replicas {r:?}");
            Ok(())
        })
        .await
    }

    /// Events of HPA `name`, as `reason: message` lines.
    async fn events_of(&self, name: &str) -> anyhow::Result<Vec<String>> {
        let events = self
            .api::<Event>()
            .list(&ListParams::default().fields(&format!(
                "involvedObject.kind=HorizontalPodAutoscaler,involvedObject.name={name}"
            )))
            .await?;
        Ok(events
            .items
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or(""),
                    e.message.as_deref().unwrap_or("")
                )
            })
            .collect())
    }

    async fn event_until(&self, name: &str, line: &str) -> anyhow::Result<()> {
        eventually(
            Duration::from_secs(30),
            &format!("event {line:?}"),
            || async {
                let events = self.events_of(name).await?;
                ensure!(events.iter().any(|e| e == line), "events: {events:?}");
                Ok(())
            },
        )
        .await
    }
}

fn condition<'a>(
    h: &'a HorizontalPodAutoscaler,
    type_: &str,
) -> Option<&'a k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerCondition> {
    h.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn has_condition(h: &HorizontalPodAutoscaler, type_: &str, status: &str, reason: &str) -> bool {
    condition(h, type_).is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason))
}

fn status_text(h: &HorizontalPodAutoscaler) -> String {
    serde_json::to_string(&h.status).unwrap_or_default()
}

/// A target that does not exist: AbleToScale False, FailedGetScale, and the event.
async fn missing_target(c: &Ctx) -> anyhow::Result<()> {
    c.create::<HorizontalPodAutoscaler>(hpa("absent", 1, 3, cpu_utilization(50), None))
        .await?;
    let h = c
        .hpa_until("absent", Duration::from_secs(30), "FailedGetScale", |h| {
            has_condition(h, "AbleToScale", "False", "FailedGetScale")
        })
        .await?;
    let message = condition(&h, "AbleToScale")
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    support::contains(
        &message,
        "the HPA controller was unable to get the target's current scale: ",
    )?;
    eventually(
        Duration::from_secs(30),
        "the FailedGetScale event",
        || async {
            let events = c.events_of("absent").await?;
            ensure!(
                events.iter().any(|e| e.starts_with("FailedGetScale: ")),
                "events: {events:?}"
            );
            Ok(())
        },
    )
    .await
}

/// Written through autoscaling/v1, read through v2 (and the controller's status back through
/// v1).
async fn autoscaling_v1(c: &Ctx) -> anyhow::Result<()> {
    c.create::<Deployment>(burner("v1-target", 1, None)).await?;
    let created: HpaV1 = c
        .create(json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "v1-target"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "v1-target"},
                "minReplicas": 2, "maxReplicas": 4, "targetCPUUtilizationPercentage": 70
            }
        }))
        .await?;
    ensure!(
        created
            .spec
            .as_ref()
            .and_then(|s| s.target_cpu_utilization_percentage)
            == Some(70),
        "created through v1: {created:?}"
    );
    let v2 = c.api::<HorizontalPodAutoscaler>().get("v1-target").await?;
    let metrics = v2
        .spec
        .as_ref()
        .and_then(|s| s.metrics.clone())
        .unwrap_or_default();
    ensure!(
        metrics.len() == 1
            && metrics[0].resource.as_ref().is_some_and(|r| r.name == "cpu"
                && r.target.type_ == "Utilization"
                && r.target.average_utilization == Some(70)),
        "read through v2: {metrics:?}"
    );
    // The controller raises the target to minReplicas and says so in the status, which v1
    // shows too.
    c.replicas_until("v1-target", 2, SCALED).await?;
    let api = c.api::<HpaV1>();
    eventually(SCALED, "the status through v1", || async {
        let h = api.get("v1-target").await?;
        let s = h.status.clone().unwrap_or_default();
        ensure!(
            s.desired_replicas == 2 && s.last_scale_time.is_some(),
            "v1 status: {s:?}"
        );
        let conditions = h
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("autoscaling.alpha.kubernetes.io/conditions"))
            .cloned()
            .unwrap_or_default();
        support::contains(&conditions, "AbleToScale")?;
        Ok(())
    })
    .await
}

/// `/scale` set past maxReplicas by hand: the next sync brings it back, as upstream.
async fn scale_overridden(c: &Ctx) -> anyhow::Result<()> {
    c.create::<Deployment>(burner("by-hand", 1, None)).await?;
    c.create::<HorizontalPodAutoscaler>(hpa("by-hand", 1, 2, cpu_utilization(50), None))
        .await?;
    c.hpa_until("by-hand", SCALED, "the first sync", |h| {
        has_condition(h, "AbleToScale", "True", "SucceededGetScale")
            || has_condition(h, "AbleToScale", "True", "ReadyForNewScale")
            || condition(h, "ScalingActive").is_some()
    })
    .await?;
    c.api::<Deployment>()
        .patch_scale(
            "by-hand",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await?;
    c.replicas_until("by-hand", 2, SCALED).await?;
    c.event_until(
        "by-hand",
        "SuccessfulRescale: New size: 2; reason: Current number of replicas above Spec.MaxReplicas",
    )
    .await
}

/// Load until a deadline: up to maxReplicas in one step (no behavior: up to 4 or double),
/// `ScaleDownStabilized` while the window holds the replicas after the load, then down to
/// minReplicas.
async fn cpu_up_and_down(c: &Ctx) -> anyhow::Result<()> {
    let (steps, watch) = c.watch_steps("burn");
    // Long enough for a loaded machine to start the pods and measure them twice; the
    // scale-down is waited for from the end of the load.
    let load_end = now_unix() + LOAD_SECONDS;
    c.create::<Deployment>(burner("burn", 1, Some(load_end)))
        .await?;
    c.create::<HorizontalPodAutoscaler>(hpa(
        "burn",
        1,
        3,
        cpu_utilization(50),
        Some(json!({"scaleDown": {"stabilizationWindowSeconds": 60}})),
    ))
    .await?;
    c.replicas_until("burn", 3, SCALED).await?;
    c.event_until(
        "burn",
        "SuccessfulRescale: New size: 3; reason: cpu resource utilization (percentage of request) above target",
    )
    .await?;
    let h = c.api::<HorizontalPodAutoscaler>().get("burn").await?;
    let current = h
        .status
        .as_ref()
        .and_then(|s| s.current_metrics.as_ref())
        .and_then(|m| m.first())
        .and_then(|m| m.resource.as_ref())
        .and_then(|r| r.current.average_utilization);
    ensure!(
        current.is_some_and(|u| u > 50),
        "status: {}",
        status_text(&h)
    );
    let load_left = Duration::from_secs(load_end.saturating_sub(now_unix()).max(0) as u64);
    c.hpa_until(
        "burn",
        load_left + SCALED,
        "ScaleDownStabilized after the load",
        |h| has_condition(h, "AbleToScale", "True", "ScaleDownStabilized"),
    )
    .await?;
    c.replicas_until("burn", 1, SCALED).await?;
    c.event_until(
        "burn",
        "SuccessfulRescale: New size: 1; reason: All metrics below target",
    )
    .await?;
    watch.abort();
    let seen = steps.seen();
    ensure!(
        seen.first() == Some(&1) && seen.contains(&3) && seen.last() == Some(&1),
        "replicas seen: {seen:?}"
    );
    Ok(())
}

/// Pods holding about 40 MiB against an AverageValue of 16Mi: two replicas, and the memory
/// average in the status.
async fn memory_average_value(c: &Ctx) -> anyhow::Result<()> {
    c.create::<Deployment>(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "mem"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "mem"}},
            "template": {
                "metadata": {"labels": {"app": "mem"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "main", "image": "python:3",
                        "command": ["python3", "-c",
                            "import time\nb = b'x' * (40 * 1024 * 1024)\ntime.sleep(1e6)"],
                        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}
                    }]
                }
            }
        }
    }))
    .await?;
    c.create::<HorizontalPodAutoscaler>(hpa(
        "mem",
        1,
        2,
        json!([{"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "AverageValue", "averageValue": "16Mi"}}}]),
        None,
    ))
    .await?;
    c.replicas_until("mem", 2, SCALED).await?;
    c.event_until(
        "mem",
        "SuccessfulRescale: New size: 2; reason: memory resource above target",
    )
    .await?;
    let h = c
        .hpa_until("mem", SCALED, "the memory average in the status", |h| {
            h.status
                .as_ref()
                .and_then(|s| s.current_metrics.as_ref())
                .and_then(|m| m.first())
                .and_then(|m| m.resource.as_ref())
                .is_some_and(|r| r.name == "memory" && r.current.average_value.is_some())
        })
        .await?;
    let value = h
        .status
        .and_then(|s| s.current_metrics)
        .and_then(|m| m.into_iter().next())
        .and_then(|m| m.resource)
        .and_then(|r| r.current.average_value)
        .context("no average value")?;
    let bytes = quantity_value(&value.0);
    ensure!(
        bytes > 16.0 * 1024.0 * 1024.0,
        "memory average {} is not above the 16Mi target",
        value.0
    );
    Ok(())
}

/// A quantity's value, for the few suffixes the metrics API prints.
fn quantity_value(q: &str) -> f64 {
    let (digits, suffix) = q.split_at(q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len()));
    let n: f64 = digits.parse().unwrap_or(0.0);
    n * match suffix {
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        _ => 1.0,
    }
}

/// Two Deployments under the same load: one limited to one pod per 15 s (no step of more
/// than one seen through a watch), one with `selectPolicy: Min` over "4 pods" and "100 %"
/// (no step past double).
async fn scale_up_policies(c: &Ctx) -> anyhow::Result<()> {
    let end = Some(now_unix() + 90);
    let (one, one_watch) = c.watch_steps("one-by-one");
    let (min, min_watch) = c.watch_steps("select-min");
    c.create::<Deployment>(burner("one-by-one", 1, end)).await?;
    c.create::<Deployment>(burner("select-min", 1, end)).await?;
    c.create::<HorizontalPodAutoscaler>(hpa(
        "one-by-one",
        1,
        3,
        cpu_utilization(50),
        Some(json!({"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}]}})),
    ))
    .await?;
    c.create::<HorizontalPodAutoscaler>(hpa(
        "select-min",
        1,
        4,
        cpu_utilization(50),
        Some(json!({"scaleUp": {"selectPolicy": "Min", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]}})),
    ))
    .await?;
    c.replicas_until("one-by-one", 3, Duration::from_secs(150))
        .await?;
    c.replicas_until("select-min", 4, Duration::from_secs(60))
        .await?;
    one_watch.abort();
    min_watch.abort();
    let (one, min) = (one.seen(), min.seen());
    ensure!(
        one.windows(2).all(|w| w[1] - w[0] <= 1) && one.first() == Some(&1),
        "one-by-one stepped {one:?}"
    );
    ensure!(
        min.windows(2).all(|w| w[1] <= 2 * w[0]) && min.first() == Some(&1),
        "select-min stepped {min:?}"
    );
    c.event_until(
        "one-by-one",
        "SuccessfulRescale: New size: 2; reason: cpu resource utilization (percentage of request) above target",
    )
    .await
}

/// A new template on an autoscaled Deployment rolls out at the replicas the HPA set.
async fn rollout_while_autoscaled(c: &Ctx) -> anyhow::Result<()> {
    c.create::<Deployment>(burner("rolling", 1, None)).await?;
    c.create::<HorizontalPodAutoscaler>(hpa("rolling", 2, 3, cpu_utilization(80), None))
        .await?;
    c.replicas_until("rolling", 2, SCALED).await?;
    let api = c.api::<Deployment>();
    api.patch(
        "rolling",
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}),
        ),
    )
    .await?;
    eventually(SCALED, "the rollout at 2 replicas", || async {
        let d = api.get("rolling").await?;
        let s = d.status.clone().unwrap_or_default();
        let generation = d.metadata.generation;
        ensure!(
            d.spec.as_ref().and_then(|s| s.replicas) == Some(2)
                && s.observed_generation == generation
                && s.updated_replicas == Some(2)
                && s.available_replicas == Some(2)
                && s.replicas == Some(2),
            "status: {s:?}"
        );
        Ok(())
    })
    .await
}
