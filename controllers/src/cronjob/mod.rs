//! The CronJob controller, as upstream's pkg/controller/cronjob (the v2 controller): creates a
//! Job per schedule time, named `<cronjob>-<minutes since the epoch>` so that a retried or
//! repeated sync can never start the same run twice, and sleeps until the next schedule time
//! instead of polling. Only the most recent missed time is started, as upstream does.
//!
//! The clock is injected so tests move time instead of waiting for it. Without `spec.timeZone`
//! schedules are read in UTC (upstream uses the controller-manager's local zone, UTC in the
//! usual container).

use std::sync::Arc;
use std::time::Duration;

use crate::util::events::Recorder;
use futures::{StreamExt, stream};
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};

use crate::informers::Cache;
use crate::informers::Informers;
use crate::util::clock::{Clock, RealClock};
use crate::util::controller_ref::{controller_of, controller_ref, is_controlled_by};
use crate::util::events::record;
use crate::util::reconciler::Error;
use crate::util::runtime;

pub use minik8s_api::cron::{Schedule, ScheduleError, parse};

const REPORTER: &str = "cronjob-controller";
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// More missed start times than this are reported (upstream's limit).
const MAX_MISSED: usize = 100;

struct Ctx {
    client: Client,
    jobs: Cache<Job>,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
}

pub async fn run(informers: Arc<Informers>) {
    run_with(informers, Arc::new(RealClock)).await
}

pub async fn run_with(informers: Arc<Informers>, clock: Arc<dyn Clock>) {
    let client = informers.client();
    let (cj_informer, job_informer) = (informers.of::<CronJob>(), informers.of::<Job>());
    let (cronjobs, jobs) = (cj_informer.store(), job_informer.store());
    let cj_events = cj_informer.touched();
    let job_events = job_informer.touched();
    let owners = job_events.filter_map(|job| async move {
        let r = controller_of(job.as_ref()).filter(|r| r.kind == "CronJob")?;
        Some(ObjectRef::new(&r.name).within(&job.namespace().unwrap_or_default()))
    });
    let queue = stream::select(cj_events.map(|c| ObjectRef::from_obj(c.as_ref())), owners);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: REPORTER.into(),
            instance: None,
        },
    );
    let ctx = Arc::new(Ctx {
        client,
        jobs,
        recorder,
        clock,
    });
    runtime::run("cronjob", cronjobs, queue, reconcile, ctx).await
}

fn finished(job: &Job) -> Option<&'static str> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    ["Complete", "Failed"]
        .into_iter()
        .find(|t| conds.iter().any(|c| c.type_ == *t && c.status == "True"))
}

/// `scheduled` as Go's RFC3339 prints it in `zone`.
fn rfc3339(scheduled: Timestamp, zone: &TimeZone) -> String {
    let s = scheduled
        .to_zoned(zone.clone())
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string();
    match s.strip_suffix("+00:00") {
        Some(base) => format!("{base}Z"),
        None => s,
    }
}

/// The Job for the run at `scheduled` (upstream's `getJobFromTemplate2`).
pub fn job_for(cj: &CronJob, scheduled: Timestamp, zone: &TimeZone) -> Job {
    let template = cj
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(SCHEDULED_TIMESTAMP.into(), rfc3339(scheduled, zone));
    Job {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}-{}",
                cj.name_any(),
                scheduled.as_second().div_euclid(60)
            )),
            namespace: cj.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_ref(cj)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The most recent schedule time in `(earliest, now]` and how many there were, stopping
/// counting past [`MAX_MISSED`].
fn most_recent(
    s: &Schedule,
    zone: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> (Option<Timestamp>, usize) {
    let (mut last, mut count) = (None, 0);
    let mut t = earliest;
    while let Some(next) = s.next_after(t, zone) {
        if next > now {
            break;
        }
        last = Some(next);
        count += 1;
        t = next;
        if count > MAX_MISSED {
            // Jump to the end: only the most recent time matters from here.
            let back = now
                .checked_sub(SignedDuration::from_secs(366 * 24 * 3600))
                .unwrap_or(now);
            if back > t {
                t = back;
            }
        }
    }
    (last, count)
}

fn requeue_at(now: Timestamp, next: Option<Timestamp>) -> Action {
    match next {
        // A little after the time, so the clock has surely passed it (as upstream's 100ms).
        Some(at) => {
            let d = at
                .duration_since(now)
                .checked_add(SignedDuration::from_millis(100))
                .unwrap_or_default();
            Action::requeue(Duration::try_from(d).unwrap_or_default())
        }
        None => Action::await_change(),
    }
}

async fn reconcile(cj: Arc<CronJob>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let _ = ctx.jobs.wait_until_ready().await;
    let now = ctx.clock.now();
    let ns = cj.namespace().unwrap_or_default();
    let name = cj.name_any();
    let api: Api<CronJob> = Api::namespaced(ctx.client.clone(), &ns);
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let spec = cj.spec.clone().unwrap_or_default();
    let old = cj.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let mut active: Vec<ObjectReference> = status.active.take().unwrap_or_default();
    let children: Vec<Arc<Job>> = ctx
        .jobs
        .state()
        .into_iter()
        .filter(|j| {
            j.metadata.namespace.as_deref() == Some(ns.as_str())
                && is_controlled_by(j.as_ref(), cj.as_ref())
        })
        .collect();

    // Finished runs leave the active list; successful ones move lastSuccessfulTime.
    for job in &children {
        let Some(how) = finished(job) else { continue };
        if let Some(i) = active.iter().position(|r| r.uid == job.uid()) {
            active.remove(i);
            let note = format!("Saw completed job: {}, condition: {how}", job.name_any());
            record(
                &ctx.recorder,
                cj.as_ref(),
                EventType::Normal,
                "SawCompletedJob",
                note,
                None,
            )
            .await;
        }
        if how == "Complete"
            && let Some(done) = job.status.as_ref().and_then(|s| s.completion_time.clone())
            && status
                .last_successful_time
                .as_ref()
                .is_none_or(|t| t.0 < done.0)
        {
            status.last_successful_time = Some(done);
        }
    }
    // Active runs that are gone (confirmed with the API: the cache may not have a new Job yet).
    let mut kept = Vec::new();
    for r in active {
        if children.iter().any(|j| j.uid() == r.uid) {
            kept.push(r);
            continue;
        }
        let job_name = r.name.clone().unwrap_or_default();
        match jobs_api.get_opt(&job_name).await? {
            Some(j) if j.uid() == r.uid && finished(&j).is_none() => kept.push(r),
            _ => {
                let note = format!("Active job went missing: {job_name}");
                record(
                    &ctx.recorder,
                    cj.as_ref(),
                    EventType::Normal,
                    "MissingJob",
                    note,
                    None,
                )
                .await;
            }
        }
    }
    active = kept;

    let action = if cj.metadata.deletion_timestamp.is_some() || spec.suspend == Some(true) {
        Action::await_change()
    } else {
        schedule(&cj, &ctx, &jobs_api, &mut active, &mut status, now).await?
    };

    status.active = (!active.is_empty()).then_some(active);
    if status != old {
        let mut current = (*cj).clone();
        current.status = Some(status);
        api.replace_status(&name, &PostParams::default(), &current)
            .await?;
    }
    cleanup_history(&cj, &ctx, &jobs_api, &children).await;
    Ok(action)
}

/// Starts the run that is due, if any; returns when to look again.
async fn schedule(
    cj: &Arc<CronJob>,
    ctx: &Ctx,
    jobs_api: &Api<Job>,
    active: &mut Vec<ObjectReference>,
    status: &mut k8s_openapi::api::batch::v1::CronJobStatus,
    now: Timestamp,
) -> Result<Action, kube::Error> {
    let spec = cj.spec.clone().unwrap_or_default();
    let warn = |reason: &'static str, note: String| async move {
        record(
            &ctx.recorder,
            cj.as_ref(),
            EventType::Warning,
            reason,
            note,
            None,
        )
        .await;
    };
    let zone = match spec.time_zone.as_deref() {
        None => TimeZone::UTC,
        Some(tz) => match TimeZone::get(tz) {
            Ok(z) => z,
            Err(e) => {
                warn("UnknownTimeZone", format!("invalid timeZone: {tz:?}: {e}")).await;
                return Ok(Action::await_change());
            }
        },
    };
    let sched = match parse(&spec.schedule) {
        Ok(s) => s,
        Err(e) => {
            warn(
                "UnparseableSchedule",
                format!("unparseable schedule: {:?} : {e}", spec.schedule),
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    let zone = sched.zone.clone().unwrap_or(zone);
    let next = requeue_at(now, sched.next_after(now, &zone));

    let mut earliest = status
        .last_schedule_time
        .as_ref()
        .or(cj.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
        .unwrap_or(now);
    if let Some(sds) = spec.starting_deadline_seconds
        && let Ok(deadline) = now.checked_sub(SignedDuration::from_secs(sds))
        && deadline > earliest
    {
        earliest = deadline;
    }
    if earliest > now {
        return Ok(next);
    }
    let (scheduled, missed) = most_recent(&sched, &zone, earliest, now);
    if missed > MAX_MISSED {
        warn(
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".into(),
        )
        .await;
    }
    let Some(scheduled) = scheduled else {
        return Ok(next);
    };
    if let Some(sds) = spec.starting_deadline_seconds
        && scheduled
            .checked_add(SignedDuration::from_secs(sds))
            .is_ok_and(|late| late < now)
    {
        let note = format!(
            "Missed scheduled time to start a job: {}",
            rfc3339(scheduled, &zone)
        );
        record(
            &ctx.recorder,
            cj.as_ref(),
            EventType::Normal,
            "MissSchedule",
            note,
            None,
        )
        .await;
        return Ok(next);
    }
    let job = job_for(cj, scheduled, &zone);
    let job_name = job.name_any();
    if active
        .iter()
        .any(|r| r.name.as_deref() == Some(job_name.as_str()))
        || status
            .last_schedule_time
            .as_ref()
            .is_some_and(|t| t.0 == scheduled)
    {
        return Ok(next);
    }
    match spec.concurrency_policy.as_deref() {
        Some("Forbid") if !active.is_empty() => {
            let note = "Not starting job because prior execution is running and concurrency policy is Forbid";
            record(
                &ctx.recorder,
                cj.as_ref(),
                EventType::Normal,
                "JobAlreadyActive",
                note.into(),
                None,
            )
            .await;
            return Ok(next);
        }
        Some("Replace") => {
            for r in std::mem::take(active) {
                let old = r.name.clone().unwrap_or_default();
                let params = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..Default::default()
                };
                match jobs_api.delete(&old, &params).await {
                    Ok(_) => {
                        let note = format!("Deleted job {old}");
                        record(
                            &ctx.recorder,
                            cj.as_ref(),
                            EventType::Normal,
                            "SuccessfulDelete",
                            note,
                            None,
                        )
                        .await;
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        active.push(r);
                        return Err(e);
                    }
                }
            }
        }
        _ => {}
    }
    let created = match jobs_api.create(&PostParams::default(), &job).await {
        Ok(j) => {
            let note = format!("Created job {job_name}");
            record(
                &ctx.recorder,
                cj.as_ref(),
                EventType::Normal,
                "SuccessfulCreate",
                note,
                None,
            )
            .await;
            j
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // Created by an earlier sync whose status write was lost: take it over if it is ours.
            let existing = jobs_api.get(&job_name).await?;
            if !is_controlled_by(&existing, cj.as_ref()) {
                return Err(kube::Error::Api(s));
            }
            existing
        }
        Err(e) => {
            if let kube::Error::Api(s) = &e {
                warn("FailedCreate", format!("Error creating job: {}", s.message)).await;
            }
            return Err(e);
        }
    };
    if finished(&created).is_none() {
        active.push(created.object_ref(&()));
    }
    status.last_schedule_time = Some(Time(scheduled));
    Ok(next)
}

/// Deletes the oldest finished runs beyond the history limits (upstream's
/// `cleanupFinishedJobs`: oldest by start time first).
async fn cleanup_history(cj: &CronJob, ctx: &Ctx, jobs_api: &Api<Job>, children: &[Arc<Job>]) {
    let spec = cj.spec.clone().unwrap_or_default();
    for (how, limit) in [
        ("Complete", spec.successful_jobs_history_limit),
        ("Failed", spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut done: Vec<&Arc<Job>> = children
            .iter()
            .filter(|j| finished(j) == Some(how) && j.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = done.len().saturating_sub(limit.max(0) as usize);
        if excess == 0 {
            continue;
        }
        done.sort_by_key(|j| {
            let start = j
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0);
            (start.is_none(), start, j.name_any())
        });
        for job in done.into_iter().take(excess) {
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            };
            match jobs_api.delete(&job.name_any(), &params).await {
                Ok(_) => {
                    let note = format!("Deleted job {}", job.name_any());
                    record(
                        &ctx.recorder,
                        cj,
                        EventType::Normal,
                        "SuccessfulDelete",
                        note,
                        None,
                    )
                    .await;
                }
                Err(e) => tracing::debug!(job = %job.name_any(), error = %e, "deleting old job"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_named_by_their_minute() {
        let cj: CronJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "hello", "namespace": "ns", "uid": "u"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"template": {}},
            }},
        }))
        .unwrap();
        let at: Timestamp = "2026-01-01T00:02:00Z".parse().unwrap();
        let job = job_for(&cj, at, &TimeZone::UTC);
        assert_eq!(job.name_any(), format!("hello-{}", at.as_second() / 60));
        assert_eq!(
            job.annotations()[SCHEDULED_TIMESTAMP],
            "2026-01-01T00:02:00Z"
        );
        assert_eq!(job.labels()["app"], "x");
        assert_eq!(job.owner_references()[0].kind, "CronJob");
    }

    #[test]
    fn only_the_most_recent_missed_time_runs() {
        let s = parse("*/10 * * * *").unwrap();
        let earliest: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let now: Timestamp = "2026-01-01T00:35:00Z".parse().unwrap();
        let (last, count) = most_recent(&s, &TimeZone::UTC, earliest, now);
        assert_eq!(last, Some("2026-01-01T00:30:00Z".parse().unwrap()));
        assert_eq!(count, 3);
        let (none, _) = most_recent(&s, &TimeZone::UTC, now, now);
        assert_eq!(none, None);
    }
}
