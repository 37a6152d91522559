//! One sync of one HPA, upstream's `reconcileAutoscaler`: scale read, replicas proposed by
//! every metric, the largest normalized, the scale written, the status recorded. Messages,
//! reasons and events are upstream's, so `kubectl describe hpa` reads the same.

use std::sync::{Arc, LazyLock};

use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscaler, HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus,
    MetricValueStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use minik8s_api::selector::Selector;

use super::conditions::{self, ABLE_TO_SCALE, SCALING_ACTIVE, SCALING_LIMITED};
use super::metrics::{self, milli_quantity};
use super::replica_calculator as calc;
use super::{Ctx, behavior, key_of};
use crate::util::events::record;
use crate::util::reconciler::Error;

/// One metric's proposal.
struct Proposal {
    replicas: i32,
    /// How the rescale reason names the metric (`cpu resource utilization (percentage of
    /// request)`).
    name: String,
    status: MetricStatus,
}

/// Why a metric gave no proposal: the condition it sets and the error it counts as.
struct MetricFailure {
    reason: &'static str,
    condition_message: String,
    error: String,
}

/// Syncs by what they did (`horizontal_pod_autoscaler_controller_reconciliations_total`, as
/// upstream's monitor: `action` scale_up, scale_down or none; `error` internal or none).
static RECONCILIATIONS: LazyLock<prometheus::IntCounterVec> = LazyLock::new(|| {
    let c = prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "horizontal_pod_autoscaler_controller_reconciliations_total",
            "Number of reconciliations of HPA controller",
        ),
        &["action", "error"],
    )
    .expect("metric");
    crate::metrics::register(crate::metrics::controller_manager(), &c);
    c
});

/// Syncs of every HPA so far, in this process.
pub fn reconciliations() -> u64 {
    use prometheus::core::Collector;
    RECONCILIATIONS
        .collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

pub async fn reconcile(hpa: Arc<HorizontalPodAutoscaler>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let now = ctx.clock.now();
    let mut status = hpa.status.clone().unwrap_or_default();
    let outcome = sync(&hpa, &ctx, &mut status, now).await;
    // A sync that rescaled leaves desired and current apart.
    let action = match status.current_replicas {
        Some(current) if status.desired_replicas > current => "scale_up",
        Some(current) if status.desired_replicas < current => "scale_down",
        _ => "none",
    };
    let error = if outcome.is_err() { "internal" } else { "none" };
    RECONCILIATIONS.with_label_values(&[action, error]).inc();
    if let Err(message) = &outcome {
        tracing::info!(error = %message, "hpa sync failed");
    }
    write_status(&hpa, &ctx, status).await?;
    Ok(Action::requeue(ctx.options.sync_period))
}

/// Computes and applies the scale, recording what happened in `status`; `Err` carries what
/// went wrong for the log (conditions and events say it to the user).
async fn sync(
    hpa: &HorizontalPodAutoscaler,
    ctx: &Ctx,
    status: &mut HorizontalPodAutoscalerStatus,
    now: Timestamp,
) -> Result<(), String> {
    let Some(spec) = &hpa.spec else {
        return Ok(());
    };
    let namespace = hpa.metadata.namespace.as_deref().unwrap_or("default");
    let key = key_of(hpa);
    let target = &spec.scale_target_ref;
    let reference = format!("{}/{}", target.kind, target.name);
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let scale = match ctx.targets.get(&ctx.client, namespace, target).await {
        Ok(scale) => scale,
        Err(e) => {
            let message = e.to_string();
            event(
                ctx,
                hpa,
                EventType::Warning,
                "FailedGetScale",
                message.clone(),
            )
            .await;
            conditions::set(
                conds,
                ABLE_TO_SCALE,
                false,
                "FailedGetScale",
                format!(
                    "the HPA controller was unable to get the target's current scale: {message}"
                ),
                now,
            );
            return Err(format!(
                "failed to query scale subresource for {reference}: {message}"
            ));
        }
    };
    conditions::set(
        conds,
        ABLE_TO_SCALE,
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
        now,
    );
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    ctx.with_history(&key, |history| {
        if history.recommendations.is_empty() {
            history.recommendations.push(behavior::Recommendation {
                at: now,
                replicas: current,
            });
        }
    });

    let mut metric_statuses = status.current_metrics.clone().unwrap_or_default();
    let mut rescale_reason = String::new();
    let desired;
    let rescale;
    if current == 0 && min != 0 {
        desired = 0;
        rescale = false;
        conditions::set(
            conds,
            SCALING_ACTIVE,
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero",
            now,
        );
    } else if current > max {
        rescale_reason = "Current number of replicas above Spec.MaxReplicas".into();
        desired = max;
        rescale = true;
    } else if current < min {
        rescale_reason = "Current number of replicas below Spec.MinReplicas".into();
        desired = min;
        rescale = true;
    } else {
        let selector = scale.status.as_ref().and_then(|s| s.selector.clone());
        let computed = compute_replicas(
            ctx,
            hpa,
            namespace,
            selector.as_deref(),
            current,
            spec.metrics.as_deref().unwrap_or_default(),
            conds,
            now,
        )
        .await;
        let (proposed, metric_name, statuses) = match computed {
            Ok(c) => c,
            Err((statuses, message)) => {
                status.current_replicas = Some(current);
                status.current_metrics = (!statuses.is_empty()).then_some(statuses);
                event(
                    ctx,
                    hpa,
                    EventType::Warning,
                    "FailedComputeMetricsReplicas",
                    message.clone(),
                )
                .await;
                return Err(format!(
                    "failed to compute desired number of replicas based on listed metrics for {reference}: {message}"
                ));
            }
        };
        metric_statuses = statuses;
        if proposed > current {
            rescale_reason = format!("{metric_name} above target");
        } else if proposed < current {
            rescale_reason = "All metrics below target".into();
        }
        let proposal = behavior::Proposal {
            current_replicas: current,
            desired_replicas: proposed,
            min_replicas: min,
            max_replicas: max,
        };
        let window = ctx.options.downscale_stabilization;
        let normalized = ctx.with_history(&key, |history| {
            let normalized = match &spec.behavior {
                None => behavior::normalize_without_behavior(
                    &mut history.recommendations,
                    proposal,
                    window,
                    now,
                ),
                Some(b) => behavior::normalize_with_behaviors(b, history, proposal, window, now),
            };
            history.prune(
                &behavior::effective_rules(spec.behavior.as_ref(), window),
                now,
            );
            normalized
        });
        let able = normalized.able_to_scale;
        conditions::set(conds, ABLE_TO_SCALE, true, able.reason, able.message, now);
        let limit = normalized.limit;
        conditions::set(
            conds,
            SCALING_LIMITED,
            normalized.scaling_limited,
            limit.reason,
            limit.message,
            now,
        );
        desired = normalized.replicas;
        rescale = desired != current;
    }

    if rescale {
        match ctx
            .targets
            .update(&ctx.client, namespace, target, scale, desired)
            .await
        {
            Ok(_) => {
                conditions::set(
                    conds,
                    ABLE_TO_SCALE,
                    true,
                    "SucceededRescale",
                    format!("the HPA controller was able to update the target scale to {desired}"),
                    now,
                );
                event(
                    ctx,
                    hpa,
                    EventType::Normal,
                    "SuccessfulRescale",
                    format!("New size: {desired}; reason: {rescale_reason}"),
                )
                .await;
                ctx.with_history(&key, |history| {
                    behavior::store_scale_event(
                        spec.behavior.as_ref(),
                        history,
                        current,
                        desired,
                        now,
                    )
                });
                status.last_scale_time = Some(Time(now));
            }
            Err(e) => {
                let message = e.to_string();
                event(
                    ctx,
                    hpa,
                    EventType::Warning,
                    "FailedRescale",
                    format!("New size: {desired}; reason: {rescale_reason}; error: {message}"),
                )
                .await;
                conditions::set(
                    conds,
                    ABLE_TO_SCALE,
                    false,
                    "FailedUpdateScale",
                    format!("the HPA controller was unable to update the target scale: {message}"),
                    now,
                );
                status.current_replicas = Some(current);
                status.current_metrics = (!metric_statuses.is_empty()).then_some(metric_statuses);
                return Err(format!("failed to rescale {reference}: {message}"));
            }
        }
    }
    status.current_replicas = Some(current);
    status.desired_replicas = if rescale { desired } else { current };
    status.current_metrics = (!metric_statuses.is_empty()).then_some(metric_statuses);
    status.observed_generation = hpa.metadata.generation;
    Ok(())
}

/// Upstream's `computeReplicasForMetrics`: the largest proposal of the metrics that gave one,
/// unless all failed, or some failed and the rest would scale down.
#[allow(clippy::too_many_arguments)]
async fn compute_replicas(
    ctx: &Ctx,
    hpa: &HorizontalPodAutoscaler,
    namespace: &str,
    selector: Option<&str>,
    current: i32,
    specs: &[MetricSpec],
    conds: &mut Vec<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerCondition>,
    now: Timestamp,
) -> Result<(i32, String, Vec<MetricStatus>), (Vec<MetricStatus>, String)> {
    let selector = match selector.filter(|s| !s.is_empty()) {
        Some(s) => s,
        None => {
            let message = "selector is required";
            event(
                ctx,
                hpa,
                EventType::Warning,
                "SelectorRequired",
                message.into(),
            )
            .await;
            conditions::set(
                conds,
                SCALING_ACTIVE,
                false,
                "InvalidSelector",
                "the HPA target's scale is missing a selector",
                now,
            );
            return Err((Vec::new(), message.into()));
        }
    };
    let parsed = match Selector::parse(selector) {
        Ok(s) => s,
        Err(e) => {
            let message = format!(
                "couldn't convert selector into a corresponding internal selector object: {e}"
            );
            event(
                ctx,
                hpa,
                EventType::Warning,
                "InvalidSelector",
                message.clone(),
            )
            .await;
            conditions::set(
                conds,
                SCALING_ACTIVE,
                false,
                "InvalidSelector",
                message.clone(),
                now,
            );
            return Err((Vec::new(), message));
        }
    };
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && parsed.matches(p.metadata.labels.as_ref())
        })
        .collect();
    let mut statuses = Vec::with_capacity(specs.len());
    let mut best: Option<(i32, String)> = None;
    let mut invalid = 0usize;
    let mut first_failure: Option<MetricFailure> = None;
    for spec in specs {
        match proposal(ctx, namespace, selector, &pods, current, spec, now).await {
            Ok(p) => {
                statuses.push(p.status);
                if best
                    .as_ref()
                    .is_none_or(|(r, _)| *r == 0 || p.replicas > *r)
                {
                    best = Some((p.replicas, p.name));
                }
            }
            Err(f) => {
                // As upstream: the failed metric's place in the status stays empty.
                statuses.push(MetricStatus::default());
                if first_failure.is_none() {
                    event(
                        ctx,
                        hpa,
                        EventType::Warning,
                        f.reason,
                        f.condition_message.clone(),
                    )
                    .await;
                    first_failure = Some(f);
                }
                invalid += 1;
            }
        }
    }
    let replicas = best.as_ref().map_or(0, |(r, _)| *r);
    if invalid >= specs.len() || (invalid > 0 && replicas < current) {
        let f = first_failure.unwrap_or(MetricFailure {
            reason: "InvalidMetricSourceType",
            condition_message: "the HPA has no metrics".into(),
            error: "no metrics".into(),
        });
        conditions::set(
            conds,
            SCALING_ACTIVE,
            false,
            f.reason,
            f.condition_message,
            now,
        );
        return Err((
            statuses,
            format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {}",
                specs.len(),
                f.error
            ),
        ));
    }
    let (replicas, name) = best.unwrap_or((current, String::new()));
    conditions::set(
        conds,
        SCALING_ACTIVE,
        true,
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {name}"),
        now,
    );
    Ok((replicas, name, statuses))
}

/// One metric's proposal (`computeReplicasForMetric`), for the metric types this controller
/// reads: Resource and ContainerResource.
async fn proposal(
    ctx: &Ctx,
    namespace: &str,
    selector: &str,
    pods: &[Arc<Pod>],
    current: i32,
    spec: &MetricSpec,
    now: Timestamp,
) -> Result<Proposal, MetricFailure> {
    let (resource, container, target) = match spec.type_.as_str() {
        "Resource" => match &spec.resource {
            Some(r) => (r.name.as_str(), None, &r.target),
            None => return Err(invalid_source(&spec.type_)),
        },
        "ContainerResource" => match &spec.container_resource {
            Some(r) => (r.name.as_str(), Some(r.container.as_str()), &r.target),
            None => return Err(invalid_source(&spec.type_)),
        },
        other => {
            let message = format!("unknown metric source type \"{other}\"");
            return Err(MetricFailure {
                reason: "InvalidMetricSourceType",
                condition_message: format!(
                    "the HPA was unable to compute the replica count: {message}"
                ),
                error: message,
            });
        }
    };
    let kind = if container.is_some() {
        "container resource"
    } else {
        "resource"
    };
    let failed = |what: &str, e: String| MetricFailure {
        reason: if container.is_some() {
            "FailedGetContainerResourceMetric"
        } else {
            "FailedGetResourceMetric"
        },
        condition_message: format!("the HPA was unable to compute the replica count: {e}"),
        error: format!("failed to get {resource} {what}: {e}"),
    };
    let usage = async {
        let items = metrics::list(&ctx.client, namespace, selector)
            .await
            .map_err(|e| format!("unable to get metrics for resource {resource}: {e}"))?;
        metrics::per_pod(&items, resource, container)
            .map_err(|e| format!("unable to get metrics for resource {resource}: {e}"))
    };
    let config = &ctx.options.calculator;
    if let Some(utilization) = target.average_utilization {
        let what = if container.is_some() {
            "container utilization"
        } else {
            "utilization"
        };
        let usage = usage.await.map_err(|e| failed(what, e))?;
        let r = calc::resource_replicas(
            current,
            utilization,
            resource,
            container,
            pods,
            &usage,
            now,
            config,
        )
        .map_err(|e| failed(what, e.to_string()))?;
        return Ok(Proposal {
            replicas: r.replicas,
            name: format!("{resource} {kind} utilization (percentage of request)"),
            status: resource_status(
                resource,
                container,
                MetricValueStatus {
                    average_utilization: Some(r.utilization),
                    average_value: Some(milli_quantity(r.raw_average_value)),
                    value: None,
                },
            ),
        });
    }
    if let Some(value) = &target.average_value {
        let what = if container.is_some() {
            "container usage"
        } else {
            "usage"
        };
        let Some(target_milli) = minik8s_api::quantity::Quantity::parse(&value.0)
            .and_then(|q| i64::try_from(q.milli_value()).ok())
        else {
            return Err(invalid_source(&spec.type_));
        };
        let usage = usage.await.map_err(|e| failed(what, e))?;
        let r = calc::raw_resource_replicas(
            current,
            target_milli,
            resource,
            container,
            pods,
            &usage,
            now,
            config,
        )
        .map_err(|e| failed(what, e.to_string()))?;
        return Ok(Proposal {
            replicas: r.replicas,
            name: format!("{resource} {kind}"),
            status: resource_status(
                resource,
                container,
                MetricValueStatus {
                    average_value: Some(milli_quantity(r.average_value)),
                    ..Default::default()
                },
            ),
        });
    }
    Err(invalid_source(&spec.type_))
}

fn invalid_source(type_: &str) -> MetricFailure {
    let what = if type_ == "ContainerResource" {
        "container resource"
    } else {
        "resource"
    };
    let message = format!(
        "invalid {what} metric source: neither a utilization target nor a value target was set"
    );
    MetricFailure {
        reason: if type_ == "ContainerResource" {
            "FailedGetContainerResourceMetric"
        } else {
            "FailedGetResourceMetric"
        },
        condition_message: format!("the HPA was unable to compute the replica count: {message}"),
        error: message,
    }
}

fn resource_status(
    resource: &str,
    container: Option<&str>,
    current: MetricValueStatus,
) -> MetricStatus {
    match container {
        Some(c) => MetricStatus {
            type_: "ContainerResource".into(),
            container_resource: Some(
                k8s_openapi::api::autoscaling::v2::ContainerResourceMetricStatus {
                    name: resource.into(),
                    container: c.into(),
                    current,
                },
            ),
            ..Default::default()
        },
        None => MetricStatus {
            type_: "Resource".into(),
            resource: Some(ResourceMetricStatus {
                name: resource.into(),
                current,
            }),
            ..Default::default()
        },
    }
}

async fn event(
    ctx: &Ctx,
    hpa: &HorizontalPodAutoscaler,
    type_: EventType,
    reason: &str,
    note: String,
) {
    record(&ctx.recorder, hpa, type_, reason, note, None).await;
}

/// Writes the status when it changed (`updateStatusIfNeeded`), at the resourceVersion the
/// sync read: a conflict means the HPA changed meanwhile, and the next sync starts over.
async fn write_status(
    hpa: &HorizontalPodAutoscaler,
    ctx: &Ctx,
    status: HorizontalPodAutoscalerStatus,
) -> Result<(), Error> {
    if hpa.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut updated = hpa.clone();
    updated.status = Some(status);
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(
        ctx.client.clone(),
        hpa.metadata.namespace.as_deref().unwrap_or("default"),
    );
    api.replace_status(
        hpa.metadata.name.as_deref().unwrap_or_default(),
        &PostParams::default(),
        &updated,
    )
    .await?;
    Ok(())
}
