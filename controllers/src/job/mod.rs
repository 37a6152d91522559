//! The Job controller, as upstream's pkg/controller/job: runs pods until enough succeed, or
//! gives up after too many failures or too much time.
//!
//! Pods are counted through the `batch.kubernetes.io/job-tracking` finalizer, as upstream does
//! since 1.26: a finished pod keeps its finalizer until its UID is recorded in
//! `status.uncountedTerminatedPods`; only then is the finalizer removed and the pod moved into
//! `succeeded`/`failed`. That order survives crashes and pods deleted right after they finish,
//! which counting pods in the cache could not. A pod whose finalizer this controller removed is
//! remembered until the cache shows the removal, so it is never counted twice.
//!
//! Finishing is two-phase as in 1.31+: `SuccessCriteriaMet` or `FailureTarget` first, then,
//! once no pod is still running or terminating, `Complete` or `Failed`.

mod indexed;
mod pod_failure_policy;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::util::events::Recorder;
use futures::{StreamExt, stream};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use minik8s_api::selector::Selector;

use crate::informers::{ByController, Change, Informers};
use crate::util::clock::{Clock, RealClock};
use crate::util::controller_ref::{
    claim_with_finalizers, controller_of, controller_ref, owners_of,
};
use crate::util::events::record;
use crate::util::expectations::{Expectations, observe_pods};
use crate::util::pods::{
    deletion_order, is_active, is_ready, is_terminating, phase, pod_from_template,
};
use crate::util::reconciler::Error;
use crate::util::runtime;

use crate::informers::Cache;
pub use indexed::COMPLETION_INDEX;
use pod_failure_policy::Verdict;

pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
const REPORTER: &str = "job-controller";

/// Knobs upstream sets by flags or constants.
#[derive(Clone, Debug)]
pub struct JobOptions {
    pub clock: Arc<dyn Clock>,
    /// Delay before a pod replaces a failed one, doubled per consecutive failure (upstream's
    /// `DefaultJobPodFailureBackOff`, 10s).
    pub pod_failure_backoff: Duration,
    /// Upstream's `MaxJobPodFailureBackOff`, 10 minutes.
    pub max_pod_failure_backoff: Duration,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            clock: Arc::new(RealClock),
            pod_failure_backoff: Duration::from_secs(10),
            max_pod_failure_backoff: Duration::from_secs(600),
        }
    }
}

/// Consecutive failures since the last success (upstream's `backoffRecord`).
#[derive(Clone, Copy, Debug, Default)]
struct Backoff {
    failures: u32,
    last_failure: Option<Timestamp>,
}

struct Ctx {
    client: Client,
    jobs: Cache<Job>,
    pods: Cache<Pod>,
    pods_by_controller: ByController<Pod>,
    expectations: Expectations,
    /// Per Job key, UIDs of pods whose finalizer was removed but whose cached copy may still
    /// show it (upstream's finalizer expectations).
    removed_finalizers: Mutex<HashMap<String, HashSet<String>>>,
    backoff: Mutex<HashMap<String, Backoff>>,
    recorder: Recorder,
    options: JobOptions,
}

pub async fn run(informers: Arc<Informers>) {
    run_with(informers, JobOptions::default()).await
}

pub async fn run_with(informers: Arc<Informers>, options: JobOptions) {
    let client = informers.client();
    let (job_informer, pod_informer) = (informers.of::<Job>(), informers.of::<Pod>());
    let (jobs, pods) = (job_informer.store(), pod_informer.store());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        jobs: jobs.clone(),
        pods: pods.clone(),
        pods_by_controller: pod_informer.by_controller(),
        expectations: Expectations::new(),
        removed_finalizers: Mutex::default(),
        backoff: Mutex::default(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
        options,
    });
    let (orphans_tx, orphans_rx) = futures::channel::mpsc::unbounded::<ObjectRef<Pod>>();

    // A deleted Job leaves its pods' finalizers to the orphan queue (upstream's
    // cleanupPodFinalizers).
    let job_events = {
        let (pods, orphans_tx) = (pod_informer.by_controller(), orphans_tx.clone());
        job_informer.touched_after(move |c| {
            if let Change::Deleted(job) = c {
                for pod in pods.controlled_by(&job.uid().unwrap_or_default(), None) {
                    if has_finalizer(&pod) {
                        let _ = orphans_tx.unbounded_send(ObjectRef::from_obj(pod.as_ref()));
                    }
                }
            }
        })
    };
    let pod_events = {
        let ctx = ctx.clone();
        pod_informer.touched_and_left_after(move |c| observe_pods(&ctx.expectations, "Job", c))
    };
    let pod_keys = {
        let jobs = jobs.clone();
        pod_events.flat_map(move |pod| {
            let keys = owners_of(&jobs, pod.as_ref(), |j: &Job| {
                j.spec.as_ref().and_then(|s| s.selector.as_ref())
            });
            if has_finalizer(&pod) && is_orphan(&jobs, &pod) {
                let _ = orphans_tx.unbounded_send(ObjectRef::from_obj(&pod));
            }
            stream::iter(keys)
        })
    };
    let queue = stream::select(
        job_events.map(|j| ObjectRef::from_obj(j.as_ref())),
        pod_keys,
    );
    tokio::join!(
        runtime::run("job", jobs, queue, reconcile, ctx.clone()),
        runtime::run("job_orphan_pod", pods, orphans_rx, reconcile_orphan, ctx),
    );
}

fn has_finalizer(pod: &Pod) -> bool {
    pod.finalizers().iter().any(|f| f == TRACKING_FINALIZER)
}

/// A pod with the tracking finalizer that no live, unfinished Job controls (upstream's
/// orphan-pod check).
fn is_orphan(jobs: &Cache<Job>, pod: &Pod) -> bool {
    let Some(r) = controller_of(pod) else {
        return true;
    };
    if r.kind != "Job" || r.api_version != "batch/v1" {
        return false;
    }
    let key = ObjectRef::new(&r.name).within(&pod.namespace().unwrap_or_default());
    match jobs.get(&key) {
        Some(job) => {
            job.uid().as_deref() != Some(r.uid.as_str()) || is_finished(job.status.as_ref())
        }
        None => true,
    }
}

async fn reconcile_orphan(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !has_finalizer(&pod) || !is_orphan(&ctx.jobs, &pod) {
        return Ok(Action::await_change());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    remove_finalizer(&api, &pod).await?;
    Ok(Action::await_change())
}

/// Removes the tracking finalizer without a read-modify-write, so it never conflicts with the
/// kubelet's status writes (upstream's `removeTrackingFinalizerPatch`). The UID precondition
/// keeps it off a recreated pod of the same name.
async fn remove_finalizer(api: &Api<Pod>, pod: &Pod) -> Result<(), kube::Error> {
    let patch = serde_json::json!({
        "metadata": {
            "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
            "uid": pod.uid(),
        }
    });
    match api
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn condition<'a>(status: Option<&'a JobStatus>, type_: &str) -> Option<&'a JobCondition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

fn is_finished(status: Option<&JobStatus>) -> bool {
    condition(status, "Complete").is_some() || condition(status, "Failed").is_some()
}

/// Sets a condition's status, reason and message; returns whether anything changed
/// (upstream's `ensureJobConditionStatus`: a False condition is only written over an existing
/// one).
fn set_condition(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status == status && c.reason.as_deref() == Some(reason) {
            return false;
        }
        if c.status != status {
            c.last_transition_time = Some(Time(now));
        }
        c.status = status.into();
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        c.last_probe_time = Some(Time(now));
        return true;
    }
    if status == "False" {
        return false;
    }
    conditions.push(JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    });
    true
}

/// Why the Job is done, before its pods are gone.
#[derive(Clone, Debug)]
struct Target {
    success: bool,
    reason: String,
    message: String,
}

/// Failed, or terminating without having succeeded (upstream's `isPodFailed`: a deleted pod may
/// never reach a phase).
fn is_failed(pod: &Pod, replace_only_failed: bool) -> bool {
    match phase(pod) {
        "Failed" => true,
        "Succeeded" => false,
        _ => !replace_only_failed && pod.metadata.deletion_timestamp.is_some(),
    }
}

fn duration_until(now: Timestamp, at: Timestamp) -> Option<Duration> {
    let left = at.duration_since(now);
    left.is_positive()
        .then(|| Duration::try_from(left).unwrap_or_default())
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let _ = ctx.pods.wait_until_ready().await;
    let _ = ctx.pods_by_controller.wait_until_ready().await;
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let key = format!("{ns}/{name}");
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let now = ctx.options.clock.now();
    let removed = ctx.settle_removed_finalizers(&key, &ns);

    if job.metadata.deletion_timestamp.is_some() || is_finished(job.status.as_ref()) {
        // Pods that finish after their Job must not keep their finalizer.
        let uid = job.uid().unwrap_or_default();
        for pod in ctx.pods_by_controller.controlled_by(&uid, None) {
            if has_finalizer(&pod) && !removed.contains(&pod.uid().unwrap_or_default()) {
                remove_finalizer(&pods_api, &pod).await?;
            }
        }
        return Ok(Action::await_change());
    }
    if !ctx.expectations.satisfied(&key) {
        return Ok(Action::await_change());
    }

    let spec = job.spec.clone().unwrap_or_default();
    let old = job.status.clone().unwrap_or_default();
    let selector = Selector::from_label_selector(spec.selector.as_ref())?;
    let candidates = ctx
        .pods_by_controller
        .controlled_by(&job.uid().unwrap_or_default(), Some(&ns))
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()));
    let pods = claim_with_finalizers(
        job.as_ref(),
        &jobs_api,
        &pods_api,
        &selector,
        candidates,
        &[TRACKING_FINALIZER],
    )
    .await?;

    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions;
    let parallelism = spec.parallelism.unwrap_or(1);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let replace_only_failed = spec.pod_replacement_policy.as_deref() == Some("Failed");
    let suspended = spec.suspend == Some(true);
    let in_range = |i: i32| completions.is_some_and(|c| i < c);

    // Finished pods not yet recorded: into uncountedTerminatedPods (or, for Indexed Jobs,
    // straight into completedIndexes, which already prevents counting twice).
    let uncounted = old.uncounted_terminated_pods.clone().unwrap_or_default();
    let mut unc_succeeded = uncounted.succeeded.unwrap_or_default();
    let mut unc_failed = uncounted.failed.unwrap_or_default();
    let mut completed = indexed::parse(old.completed_indexes.as_deref());
    let completed_before = completed.clone();
    let (mut new_failures, mut new_success) = (0u32, false);
    let mut to_release: Vec<Arc<Pod>> = Vec::new();
    for pod in &pods {
        let uid = pod.uid().unwrap_or_default();
        if !has_finalizer(pod) || removed.contains(&uid) {
            continue;
        }
        if phase(pod) == "Succeeded" && !unc_failed.contains(&uid) {
            if indexed {
                if let Some(ix) = indexed::pod_index(pod).filter(|i| in_range(*i))
                    && completed.insert(ix)
                {
                    new_success = true;
                }
            } else if !unc_succeeded.contains(&uid) {
                unc_succeeded.push(uid);
                new_success = true;
            }
            to_release.push(pod.clone());
        } else if is_failed(pod, replace_only_failed) {
            let ignored = spec.pod_failure_policy.as_ref().is_some_and(|policy| {
                matches!(
                    pod_failure_policy::matching(policy, pod),
                    Some((Verdict::Ignore, _))
                )
            });
            let counts = !ignored && (!indexed || indexed::pod_index(pod).is_some_and(in_range));
            if counts && !unc_failed.contains(&uid) {
                unc_failed.push(uid);
                new_failures += 1;
            }
            to_release.push(pod.clone());
        }
    }
    let backoff = ctx.record_backoff(&key, new_success, new_failures, now);

    let succeeded = if indexed {
        completed.len() as i32
    } else {
        old.succeeded.unwrap_or(0) + unc_succeeded.len() as i32
    };
    let failed = old.failed.unwrap_or(0) + unc_failed.len() as i32;
    let active: Vec<Arc<Pod>> = pods.iter().filter(|p| is_active(p)).cloned().collect();
    let mut terminating = pods.iter().filter(|p| is_terminating(p)).count() as i32;
    let ready = active.iter().filter(|p| is_ready(p)).count() as i32;

    let mut status = old.clone();
    let mut conditions = status.conditions.take().unwrap_or_default();
    let mut events: Vec<(EventType, String, String)> = Vec::new();
    if suspended {
        if set_condition(
            &mut conditions,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            now,
        ) {
            events.push((
                EventType::Normal,
                "Suspended".into(),
                "Job suspended".into(),
            ));
        }
    } else if set_condition(
        &mut conditions,
        "Suspended",
        "False",
        "JobResumed",
        "Job resumed",
        now,
    ) {
        events.push((EventType::Normal, "Resumed".into(), "Job resumed".into()));
        // Resuming restarts the activeDeadlineSeconds clock.
        status.start_time = Some(Time(now));
    }
    if status.start_time.is_none() && !suspended {
        status.start_time = Some(Time(now));
    }

    let existing_target = ["SuccessCriteriaMet", "FailureTarget"]
        .into_iter()
        .find_map(|t| condition(Some(&old), t))
        .map(|c| Target {
            success: c.type_ == "SuccessCriteriaMet",
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        });
    let deadline = match (spec.active_deadline_seconds, &status.start_time) {
        (Some(s), Some(start)) if !suspended => {
            start.0.checked_add(SignedDuration::from_secs(s)).ok()
        }
        _ => None,
    };
    let mut requeue: Option<Duration> = None;
    let fail_job = spec.pod_failure_policy.as_ref().and_then(|policy| {
        pods.iter()
            .filter(|p| phase(p) == "Failed" && has_finalizer(p))
            .find_map(|p| match pod_failure_policy::matching(policy, p) {
                Some((Verdict::FailJob, message)) => Some(message),
                _ => None,
            })
    });
    let target = existing_target.or_else(|| {
        if let Some(message) = fail_job {
            return Some(Target {
                success: false,
                reason: "PodFailurePolicy".into(),
                message,
            });
        }
        if failed > backoff_limit {
            return Some(Target {
                success: false,
                reason: "BackoffLimitExceeded".into(),
                message: "Job has reached the specified backoff limit".into(),
            });
        }
        if let Some(d) = deadline {
            match duration_until(now, d) {
                None => {
                    return Some(Target {
                        success: false,
                        reason: "DeadlineExceeded".into(),
                        message: "Job was active longer than specified deadline".into(),
                    });
                }
                Some(left) => requeue = Some(left),
            }
        }
        let complete = match completions {
            Some(c) => succeeded >= c,
            None => succeeded > 0 && active.is_empty(),
        };
        complete.then(|| Target {
            success: true,
            reason: "CompletionsReached".into(),
            message: "Reached expected number of succeeded pods".into(),
        })
    });

    let mut active_now = active.len() as i32;
    let mut manage_err: Option<Error> = None;
    if target.is_some() || suspended {
        // A finishing Job's pods keep their finalizers and are counted as failed once gone;
        // a suspended Job's pods are let go of first and never count (upstream's
        // deleteActivePods and deleteJobPods).
        let deleted = ctx
            .delete_pods(&job, &key, &pods_api, &active, target.is_none())
            .await;
        active_now -= deleted;
        terminating += deleted;
        if deleted < active.len() as i32 {
            manage_err.get_or_insert(Error::failed(format!(
                "{} of {} pod deletions failed",
                active.len() as i32 - deleted,
                active.len()
            )));
        }
    } else {
        let want = match completions {
            Some(c) => (c - succeeded).clamp(0, parallelism),
            None if succeeded > 0 => active_now,
            None => parallelism,
        };
        // Pods of indexes that are done, out of range, or run twice go first.
        let mut surplus: Vec<Arc<Pod>> = Vec::new();
        let mut keep: Vec<Arc<Pod>> = Vec::new();
        let mut running_indexes = BTreeSet::new();
        for p in &active {
            let ok = !indexed
                || indexed::pod_index(p).is_some_and(|i| {
                    in_range(i) && !completed.contains(&i) && running_indexes.insert(i)
                });
            if ok {
                keep.push(p.clone())
            } else {
                surplus.push(p.clone())
            }
        }
        let busy = keep.len() as i32 + if replace_only_failed { terminating } else { 0 };
        if busy > want {
            keep.sort_by(|a, b| deletion_order(a, b));
            let extra = ((busy - want) as usize).min(keep.len());
            surplus.extend(keep.drain(..extra));
        }
        if !surplus.is_empty() {
            let deleted = ctx.delete_pods(&job, &key, &pods_api, &surplus, true).await;
            active_now -= deleted;
            terminating += deleted;
        }
        let missing = (want - busy).max(0) as usize;
        if missing > 0 {
            match ctx.backoff_left(backoff, now) {
                Some(left) => requeue = Some(requeue.map_or(left, |r| r.min(left))),
                None => {
                    let indexes: Vec<Option<i32>> = if indexed {
                        (0..completions.unwrap_or(0))
                            .filter(|i| !completed.contains(i) && !running_indexes.contains(i))
                            .take(missing)
                            .map(Some)
                            .collect()
                    } else {
                        vec![None; missing]
                    };
                    let (created, err) = ctx.create_pods(&job, &key, &pods_api, &indexes).await;
                    active_now += created;
                    if let Some(e) = err {
                        manage_err = Some(e);
                    }
                }
            }
        }
    }

    // Record newly finished pods before their finalizers go.
    let mut current = (*job).clone();
    let uncounted_changed = unc_succeeded.len()
        != old
            .uncounted_terminated_pods
            .as_ref()
            .and_then(|u| u.succeeded.as_ref())
            .map_or(0, Vec::len)
        || unc_failed.len()
            != old
                .uncounted_terminated_pods
                .as_ref()
                .and_then(|u| u.failed.as_ref())
                .map_or(0, Vec::len)
        || completed != completed_before;
    if uncounted_changed {
        let mut s = old.clone();
        s.uncounted_terminated_pods = Some(uncounted_pods(&unc_succeeded, &unc_failed));
        if indexed {
            s.completed_indexes = Some(indexed::format(&completed));
            s.succeeded = Some(completed.len() as i32);
        }
        current.status = Some(s);
        current = jobs_api
            .replace_status(&name, &PostParams::default(), &current)
            .await?;
    }
    let mut released = HashSet::new();
    for pod in &to_release {
        remove_finalizer(&pods_api, pod).await?;
        let uid = pod.uid().unwrap_or_default();
        ctx.expect_removed_finalizer(&key, &uid);
        released.insert(uid);
    }
    let tracked: HashSet<String> = pods
        .iter()
        .filter(|p| has_finalizer(p))
        .filter_map(|p| p.uid())
        .filter(|u| !removed.contains(u) && !released.contains(u))
        .collect();
    let (counted_s, left_s): (Vec<String>, Vec<String>) = unc_succeeded
        .into_iter()
        .partition(|u| !tracked.contains(u));
    let (counted_f, left_f): (Vec<String>, Vec<String>) =
        unc_failed.into_iter().partition(|u| !tracked.contains(u));
    status.succeeded = Some(if indexed {
        completed.len() as i32
    } else {
        old.succeeded.unwrap_or(0) + counted_s.len() as i32
    });
    status.failed = Some(old.failed.unwrap_or(0) + counted_f.len() as i32);
    if indexed {
        status.completed_indexes = Some(indexed::format(&completed));
    }
    let uncounted_left = left_s.len() + left_f.len();
    status.uncounted_terminated_pods = Some(uncounted_pods(&left_s, &left_f));
    status.active = Some(active_now);
    status.ready = Some(ready);
    status.terminating = Some(terminating);

    if let Some(t) = &target {
        let type_ = if t.success {
            "SuccessCriteriaMet"
        } else {
            "FailureTarget"
        };
        set_condition(&mut conditions, type_, "True", &t.reason, &t.message, now);
        if uncounted_left == 0 && active_now == 0 && terminating == 0 {
            let type_ = if t.success { "Complete" } else { "Failed" };
            if set_condition(&mut conditions, type_, "True", &t.reason, &t.message, now) {
                if t.success {
                    status.completion_time = Some(Time(now));
                    events.push((
                        EventType::Normal,
                        "Completed".into(),
                        "Job completed".into(),
                    ));
                } else {
                    events.push((EventType::Warning, t.reason.clone(), t.message.clone()));
                }
            }
        }
    }
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    if current.status.as_ref() != Some(&status) {
        current.status = Some(status);
        jobs_api
            .replace_status(&name, &PostParams::default(), &current)
            .await?;
    }
    for (type_, reason, note) in events {
        record(&ctx.recorder, job.as_ref(), type_, &reason, note, None).await;
    }
    if let Some(e) = manage_err {
        return Err(e);
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

fn uncounted_pods(succeeded: &[String], failed: &[String]) -> UncountedTerminatedPods {
    let list = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
    UncountedTerminatedPods {
        succeeded: list(succeeded),
        failed: list(failed),
    }
}

/// A pod for `job`, with the tracking finalizer, and for Indexed Jobs its completion index as
/// annotation, label, hostname and `JOB_COMPLETION_INDEX` variable, as upstream writes them.
fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    let name = job.name_any();
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let prefix = match index {
        Some(i) => format!("{name}-{i}"),
        None => name.clone(),
    };
    let mut pod = pod_from_template(
        &template,
        &job.namespace().unwrap_or_default(),
        &prefix,
        controller_ref(job),
    );
    pod.metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(TRACKING_FINALIZER.into());
    if let Some(i) = index {
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), i.to_string());
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), i.to_string());
        if let Some(spec) = pod.spec.as_mut() {
            if spec.hostname.as_deref().unwrap_or("").is_empty() {
                spec.hostname = Some(format!("{name}-{i}"));
            }
            let env = EnvVar {
                name: "JOB_COMPLETION_INDEX".into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                    }),
                    ..Default::default()
                }),
            };
            let containers = spec
                .containers
                .iter_mut()
                .chain(spec.init_containers.iter_mut().flatten());
            for c in containers {
                let vars = c.env.get_or_insert_with(Vec::new);
                if !vars.iter().any(|v| v.name == env.name) {
                    vars.push(env.clone());
                }
            }
        }
    }
    pod
}

impl Ctx {
    /// Forgets removed finalizers the cache has caught up with; returns the ones it has not.
    fn settle_removed_finalizers(&self, key: &str, ns: &str) -> HashSet<String> {
        let mut all = self
            .removed_finalizers
            .lock()
            .expect("finalizer expectations");
        let Some(set) = all.get_mut(key) else {
            return HashSet::new();
        };
        let still: HashSet<String> = self
            .pods
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns) && has_finalizer(p))
            .filter_map(|p| p.uid())
            .collect();
        set.retain(|u| still.contains(u));
        let out = set.clone();
        if set.is_empty() {
            all.remove(key);
        }
        out
    }

    fn expect_removed_finalizer(&self, key: &str, uid: &str) {
        self.removed_finalizers
            .lock()
            .expect("finalizer expectations")
            .entry(key.to_string())
            .or_default()
            .insert(uid.to_string());
    }

    fn record_backoff(&self, key: &str, success: bool, failures: u32, now: Timestamp) -> Backoff {
        let mut all = self.backoff.lock().expect("backoff");
        let b = all.entry(key.to_string()).or_default();
        if success {
            *b = Backoff::default();
        }
        if failures > 0 {
            b.failures += failures;
            b.last_failure = Some(now);
        }
        *b
    }

    /// Time left before the next pod may start after `backoff.failures` consecutive failures.
    fn backoff_left(&self, backoff: Backoff, now: Timestamp) -> Option<Duration> {
        let last = backoff.last_failure?;
        if backoff.failures == 0 {
            return None;
        }
        let factor = 2u32.saturating_pow(backoff.failures - 1);
        let delay = self
            .options
            .pod_failure_backoff
            .saturating_mul(factor)
            .min(self.options.max_pod_failure_backoff);
        let at = last
            .checked_add(SignedDuration::try_from(delay).ok()?)
            .ok()?;
        duration_until(now, at)
    }

    /// Creates pods, one per entry of `indexes`; returns how many were created and the first
    /// error.
    async fn create_pods(
        &self,
        job: &Job,
        key: &str,
        api: &Api<Pod>,
        indexes: &[Option<i32>],
    ) -> (i32, Option<Error>) {
        self.expectations.expect_creations(key, indexes.len());
        let results = futures::future::join_all(indexes.iter().map(|i| async move {
            let pod = new_pod(job, *i);
            api.create(&PostParams::default(), &pod).await
        }))
        .await;
        let (mut created, mut err) = (0, None);
        for r in results {
            match r {
                Ok(pod) => {
                    created += 1;
                    let note = format!("Created pod: {}", pod.name_any());
                    let related = Some(pod.object_ref(&()));
                    record(
                        &self.recorder,
                        job,
                        EventType::Normal,
                        "SuccessfulCreate",
                        note,
                        related,
                    )
                    .await;
                }
                Err(e) => {
                    self.expectations.creation_observed(key);
                    if let kube::Error::Api(s) = &e {
                        let note = format!("Error creating: {}", s.message);
                        record(
                            &self.recorder,
                            job,
                            EventType::Warning,
                            "FailedCreate",
                            note,
                            None,
                        )
                        .await;
                    }
                    err.get_or_insert(Error::Kube(e));
                }
            }
        }
        (created, err)
    }

    /// Deletes pods; with `release`, removes their finalizers first so that they are not
    /// counted, else they are counted as failed once they terminate. Returns how many
    /// deletions were issued.
    async fn delete_pods(
        &self,
        job: &Job,
        key: &str,
        api: &Api<Pod>,
        pods: &[Arc<Pod>],
        release: bool,
    ) -> i32 {
        if pods.is_empty() {
            return 0;
        }
        self.expectations
            .expect_deletions(key, pods.iter().filter_map(|p| p.uid()));
        let mut deleted = 0;
        for pod in pods {
            let uid = pod.uid().unwrap_or_default();
            if release && has_finalizer(pod) {
                if let Err(e) = remove_finalizer(api, pod).await {
                    tracing::warn!(pod = %pod.name_any(), error = %e, "releasing pod");
                    self.expectations.deletion_observed(key, &uid);
                    continue;
                }
                self.expect_removed_finalizer(key, &uid);
            }
            match api.delete(&pod.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    deleted += 1;
                    let note = format!("Deleted pod: {}", pod.name_any());
                    let related = Some(pod.object_ref(&()));
                    record(
                        &self.recorder,
                        job,
                        EventType::Normal,
                        "SuccessfulDelete",
                        note,
                        related,
                    )
                    .await;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.expectations.deletion_observed(key, &uid);
                    deleted += 1;
                }
                Err(e) => {
                    tracing::warn!(pod = %pod.name_any(), error = %e, "deleting pod");
                    self.expectations.deletion_observed(key, &uid);
                }
            }
        }
        deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_pods_carry_their_index() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ix", "namespace": "ns", "uid": "u1"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
        }))
        .unwrap();
        let pod = new_pod(&job, Some(3));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("ix-3-"));
        assert_eq!(pod.annotations()[COMPLETION_INDEX], "3");
        assert_eq!(pod.labels()[COMPLETION_INDEX], "3");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("ix-3"));
        let env = &spec.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, "JOB_COMPLETION_INDEX");
        assert_eq!(pod.metadata.finalizers.unwrap(), vec![TRACKING_FINALIZER]);
    }

    #[test]
    fn conditions_change_only_when_their_status_or_reason_does() {
        let now = Timestamp::now();
        let mut c = Vec::new();
        assert!(!set_condition(
            &mut c,
            "Suspended",
            "False",
            "JobResumed",
            "",
            now
        ));
        assert!(set_condition(
            &mut c,
            "Suspended",
            "True",
            "JobSuspended",
            "",
            now
        ));
        assert!(!set_condition(
            &mut c,
            "Suspended",
            "True",
            "JobSuspended",
            "",
            now
        ));
        assert!(set_condition(
            &mut c,
            "Suspended",
            "False",
            "JobResumed",
            "",
            now
        ));
        assert_eq!(c.len(), 1);
    }
}
