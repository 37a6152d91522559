//! The TTL-after-finished controller, as upstream's pkg/controller/ttlafterfinished: deletes a
//! finished Job `ttlSecondsAfterFinished` after the transition time of its Complete or Failed
//! condition. It requeues at the expiry instead of polling, and re-reads the Job from the API
//! before deleting it, since the TTL may have been changed after the cache saw it.
//!
//! Upstream deletes with Foreground propagation; this one uses Background (the task asked for
//! it), so the Job disappears at once and the garbage collector removes its pods afterwards.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use crate::informers::Informers;
use crate::util::clock::{Clock, RealClock};
use crate::util::reconciler::Error;
use crate::util::runtime;

struct Ctx {
    client: Client,
    clock: Arc<dyn Clock>,
}

pub async fn run(informers: Arc<Informers>) {
    run_with(informers, Arc::new(RealClock)).await
}

pub async fn run_with(informers: Arc<Informers>, clock: Arc<dyn Clock>) {
    let client = informers.client();
    let jobs = informers.of::<Job>();
    let queue = jobs.touched().map(|j| ObjectRef::from_obj(j.as_ref()));
    let ctx = Arc::new(Ctx { client, clock });
    runtime::run("ttl_jobs_to_delete", jobs.store(), queue, reconcile, ctx).await
}

/// When a finished Job with a TTL expires; `None` for Jobs that are not to be cleaned up.
pub fn expires_at(job: &Job) -> Option<Timestamp> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let finished = job
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")?;
    let at = finished.last_transition_time.as_ref()?.0;
    at.checked_add(SignedDuration::from_secs(i64::from(ttl)))
        .ok()
}

/// Time left before `at`, or `None` once it has passed.
fn left(now: Timestamp, at: Timestamp) -> Option<Duration> {
    let d = at.duration_since(now);
    d.is_positive()
        .then(|| Duration::try_from(d).unwrap_or_default())
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(at) = expires_at(&job) else {
        return Ok(Action::await_change());
    };
    if let Some(wait) = left(ctx.clock.now(), at) {
        return Ok(Action::requeue(wait));
    }
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let Some(fresh) = api.get_opt(&job.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let Some(at) = expires_at(&fresh) else {
        return Ok(Action::await_change());
    };
    if let Some(wait) = left(ctx.clock.now(), at) {
        return Ok(Action::requeue(wait));
    }
    tracing::info!(job = %fresh.name_any(), "deleting finished job after its TTL");
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: fresh.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&fresh.name_any(), &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_finished_jobs_with_a_ttl_expire() {
        let job = |ttl: Option<i32>, cond: &str| -> Job {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "j"},
                "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
                "status": {"conditions": [{
                    "type": cond, "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]},
            }))
            .unwrap()
        };
        let at: Timestamp = "2026-01-01T00:01:40Z".parse().unwrap();
        assert_eq!(expires_at(&job(Some(100), "Complete")), Some(at));
        assert_eq!(expires_at(&job(Some(100), "Failed")), Some(at));
        assert_eq!(expires_at(&job(None, "Complete")), None);
        assert_eq!(expires_at(&job(Some(100), "Suspended")), None);
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        assert_eq!(left(now, at), Some(Duration::from_secs(40)));
        assert_eq!(left(at, at), None);
    }
}
