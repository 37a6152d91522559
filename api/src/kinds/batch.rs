//! batch/v1 Jobs and CronJobs: defaults, the generated selector that ties a Job to its pods
//! by uid, and template rules.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::JobCondition;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::kinds::pod::default_template;
use crate::kinds::pod::validation::validate_template;
use crate::selector::Selector;
use crate::spec_and_status;
use crate::strategy::{GcPolicy, Kind};
use crate::table::{
    AGE, CONTAINERS, Column, IMAGES, NAME, Row, age, column, format_label_selector, human_duration,
    integer, layout_containers, name, num, set, string, template_containers, text,
    translate_timestamp_since,
};
use crate::validation::{Errors, FieldError, Path, immutable};

const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const JOB_NAME: &str = "batch.kubernetes.io/job-name";

impl Kind for Job {
    const COLUMNS: &'static [Column] = JOB_COLUMNS;
    const FIELDS: &'static [&'static str] = &["status.successful"];
    const GC_POLICY: GcPolicy = GcPolicy::OrphanDependents;

    spec_and_status!(generation);

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        if spec.completions.is_none() && spec.parallelism.is_none() {
            spec.completions = Some(1);
        }
        spec.parallelism.get_or_insert(1);
        spec.backoff_limit
            .get_or_insert(if spec.backoff_limit_per_index.is_some() {
                i32::MAX
            } else {
                6
            });
        spec.completion_mode
            .get_or_insert_with(|| "NonIndexed".into());
        spec.suspend.get_or_insert(false);
        spec.manual_selector.get_or_insert(false);
        spec.pod_replacement_policy.get_or_insert_with(|| {
            if spec.pod_failure_policy.is_some() {
                "Failed".into()
            } else {
                "TerminatingOrFailed".into()
            }
        });
        let template_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone());
        if self.metadata.labels.as_ref().is_none_or(|l| l.is_empty())
            && let Some(l) = template_labels
        {
            self.metadata.labels = Some(l);
        }
        default_template(&mut spec.template);
    }

    fn prepare_create(&mut self) {
        self.status = None;
        let uid = self.metadata.uid.clone().unwrap_or_default();
        let name = self.metadata.name.clone().unwrap_or_default();
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        if spec.manual_selector == Some(true) {
            return;
        }
        generate_selector(spec, &uid, &name);
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        validate_job_spec(spec, &Path::new("spec"), true, errs);
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        let (Some(n), Some(o)) = (&self.spec, &old.spec) else {
            return;
        };
        let sp = Path::new("spec");
        immutable(&n.selector, &o.selector, &sp.child("selector"), errs);
        immutable(
            &n.completions,
            &o.completions,
            &sp.child("completions"),
            errs,
        );
        immutable(
            &n.completion_mode,
            &o.completion_mode,
            &sp.child("completionMode"),
            errs,
        );
        immutable(
            &n.pod_failure_policy,
            &o.pod_failure_policy,
            &sp.child("podFailurePolicy"),
            errs,
        );
        // A suspended job that never ran may still change where its pods go.
        let never_started =
            o.suspend == Some(true) && old.status.as_ref().is_none_or(|s| s.start_time.is_none());
        let mut template = n.template.clone();
        if never_started
            && let (Some(t), Some(ot)) = (template.spec.as_mut(), o.template.spec.as_ref())
        {
            t.node_selector = ot.node_selector.clone();
            t.tolerations = ot.tolerations.clone();
            t.affinity = ot.affinity.clone();
            t.scheduling_gates = ot.scheduling_gates.clone();
            template.metadata = o.template.metadata.clone();
        }
        if template != o.template {
            errs.push(FieldError::invalid(
                &sp.child("template"),
                "",
                "field is immutable",
            ));
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "status.successful" => Some(
                self.status
                    .as_ref()
                    .and_then(|s| s.succeeded)
                    .unwrap_or(0)
                    .to_string(),
            ),
            _ => None,
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(job_cells(self, now))
    }
}

fn generate_selector(spec: &mut JobSpec, uid: &str, name: &str) {
    let labels = spec
        .template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    for (k, v) in [
        (CONTROLLER_UID, uid),
        ("controller-uid", uid),
        (JOB_NAME, name),
        ("job-name", name),
    ] {
        labels.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    let selector = spec.selector.get_or_insert_with(LabelSelector::default);
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(CONTROLLER_UID.into(), uid.into());
}

const JOB_RESTART_POLICIES: &[&str] = &["OnFailure", "Never"];

fn validate_job_spec(spec: &JobSpec, path: &Path, selector_required: bool, errs: &mut Errors) {
    for (name, v) in [
        ("parallelism", spec.parallelism),
        ("completions", spec.completions),
        ("backoffLimit", spec.backoff_limit),
        ("ttlSecondsAfterFinished", spec.ttl_seconds_after_finished),
    ] {
        if let Some(n) = v
            && n < 0
        {
            errs.push(FieldError::invalid(
                &path.child(name),
                n,
                "must be greater than or equal to 0",
            ));
        }
    }
    if let Some(n) = spec.active_deadline_seconds
        && n < 0
    {
        errs.push(FieldError::invalid(
            &path.child("activeDeadlineSeconds"),
            n,
            "must be greater than or equal to 0",
        ));
    }
    match spec.completion_mode.as_deref() {
        Some("Indexed") if spec.completions.is_none() => {
            errs.push(FieldError::required(
                &path.child("completions"),
                "when completion mode is Indexed",
            ));
        }
        Some("Indexed") | Some("NonIndexed") | None => {}
        Some(m) => errs.push(FieldError::not_supported(
            &path.child("completionMode"),
            m,
            &["Indexed", "NonIndexed"],
        )),
    }
    if selector_required {
        match &spec.selector {
            None => errs.push(FieldError::required(&path.child("selector"), "")),
            Some(sel) => match Selector::from_label_selector(Some(sel)) {
                Err(e) => errs.push(FieldError::invalid(&path.child("selector"), "", e.0)),
                Ok(s) => {
                    let labels = spec
                        .template
                        .metadata
                        .as_ref()
                        .and_then(|m| m.labels.as_ref());
                    if !s.matches(labels) {
                        errs.push(FieldError::invalid(
                            &path.child("template").child("metadata").child("labels"),
                            format!("{:?}", labels.cloned().unwrap_or_default()),
                            "`selector` does not match template `labels`",
                        ));
                    }
                }
            },
        }
    }
    let tpath = path.child("template");
    validate_template(&spec.template, &tpath, errs);
    if let Some(ps) = &spec.template.spec {
        match ps.restart_policy.as_deref() {
            None | Some("Always") => errs.push(FieldError::required(
                &tpath.child("spec").child("restartPolicy"),
                "valid values: \"OnFailure\", \"Never\"",
            )),
            Some(rp) if !JOB_RESTART_POLICIES.contains(&rp) => {
                errs.push(FieldError::not_supported(
                    &tpath.child("spec").child("restartPolicy"),
                    rp,
                    JOB_RESTART_POLICIES,
                ))
            }
            _ => {}
        }
    }
}

impl Kind for CronJob {
    const COLUMNS: &'static [Column] = CRON_JOB_COLUMNS;

    spec_and_status!(generation);

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        spec.concurrency_policy
            .get_or_insert_with(|| "Allow".into());
        spec.suspend.get_or_insert(false);
        spec.successful_jobs_history_limit.get_or_insert(3);
        spec.failed_jobs_history_limit.get_or_insert(1);
        if let Some(js) = spec.job_template.spec.as_mut() {
            default_template(&mut js.template);
        }
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        if self.metadata.name.as_deref().is_some_and(|n| n.len() > 52) {
            errs.push(FieldError::invalid(
                &Path::new("metadata").child("name"),
                self.metadata.name.clone().unwrap_or_default(),
                "must be no more than 52 characters",
            ));
        }
        let sp = Path::new("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&sp, ""));
            return;
        };
        if spec.schedule.trim().is_empty() {
            errs.push(FieldError::required(&sp.child("schedule"), ""));
        } else if spec.schedule.contains("TZ=") {
            errs.push(FieldError::invalid(
                &sp.child("schedule"),
                &spec.schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        } else if let Err(e) = crate::cron::parse(&spec.schedule) {
            errs.push(FieldError::invalid(
                &sp.child("schedule"),
                &spec.schedule,
                e.to_string(),
            ));
        }
        if let Some(tz) = &spec.time_zone
            && (tz == "Local" || jiff::tz::TimeZone::get(tz).is_err())
        {
            errs.push(FieldError::invalid(
                &sp.child("timeZone"),
                tz,
                format!("unknown time zone {tz}"),
            ));
        }
        if let Some(p) = &spec.concurrency_policy
            && !["Allow", "Forbid", "Replace"].contains(&p.as_str())
        {
            errs.push(FieldError::not_supported(
                &sp.child("concurrencyPolicy"),
                p,
                &["Allow", "Forbid", "Replace"],
            ));
        }
        if let Some(n) = spec.starting_deadline_seconds
            && n < 0
        {
            errs.push(FieldError::invalid(
                &sp.child("startingDeadlineSeconds"),
                n,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(js) = &spec.job_template.spec {
            let jp = sp.child("jobTemplate").child("spec");
            if js.selector.is_some() {
                errs.push(FieldError::invalid(
                    &jp.child("selector"),
                    "",
                    "`selector` will be auto-generated",
                ));
            }
            if js.manual_selector == Some(true) {
                errs.push(FieldError::not_supported(
                    &jp.child("manualSelector"),
                    true,
                    &["nil", "false"],
                ));
            }
            validate_job_spec(js, &jp, false, errs);
        } else {
            errs.push(FieldError::required(
                &sp.child("jobTemplate").child("spec"),
                "",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(cron_job_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const JOB_COLUMNS: &[Column] = &[
    NAME,
    string("Status", "Status of the job."),
    string("Completions", doc::JOB_SUCCEEDED),
    string("Duration", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    string("Selector", doc::JOB_SELECTOR).wide(),
];

const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    string("Schedule", doc::CRON_JOB_SCHEDULE),
    string("Timezone", doc::CRON_JOB_TIME_ZONE),
    column("Suspend", "boolean", doc::CRON_JOB_SUSPEND),
    integer("Active", doc::CRON_JOB_ACTIVE),
    string("Last Schedule", doc::CRON_JOB_LAST_SCHEDULE_TIME),
    AGE,
    CONTAINERS,
    IMAGES,
    string("Selector", doc::JOB_SELECTOR).wide(),
];

/// Whether the first condition of this type is true.
fn has_job_condition(conditions: &[JobCondition], type_: &str) -> bool {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .is_some_and(|c| c.status == "True")
}

fn job_cells(job: &Job, now: Timestamp) -> Vec<Value> {
    let spec = job.spec.clone().unwrap_or_default();
    let status = job.status.clone().unwrap_or_default();
    let succeeded = status.succeeded.unwrap_or(0);
    let completions = match spec.completions {
        Some(c) => format!("{succeeded}/{c}"),
        None => match spec.parallelism.unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = set(status.start_time.as_ref().map(|t| t.0));
    let completion = set(status.completion_time.as_ref().map(|t| t.0));
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now.duration_since(start)),
        (Some(start), Some(end)) => human_duration(end.duration_since(start)),
    };
    let conditions = status.conditions.as_deref().unwrap_or(&[]);
    let state = if has_job_condition(conditions, "Complete") {
        "Complete"
    } else if has_job_condition(conditions, "Failed") {
        "Failed"
    } else if job.metadata.deletion_timestamp.is_some() {
        "Terminating"
    } else if has_job_condition(conditions, "Suspended") {
        "Suspended"
    } else if has_job_condition(conditions, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&job.metadata),
        text(state),
        text(completions),
        text(duration),
        age(&job.metadata, now),
        containers,
        images,
        text(format_label_selector(spec.selector.as_ref())),
    ]
}

fn cron_job_cells(cj: &CronJob, now: Timestamp) -> Vec<Value> {
    let spec = cj.spec.clone().unwrap_or_default();
    let status = cj.status.clone().unwrap_or_default();
    let last_schedule = match status.last_schedule_time.as_ref() {
        Some(t) => translate_timestamp_since(Some(t), now),
        None => "<none>".to_string(),
    };
    let job_spec = spec.job_template.spec.clone().unwrap_or_default();
    let (containers, images) = layout_containers(template_containers(&job_spec.template));
    vec![
        name(&cj.metadata),
        text(spec.schedule),
        text(spec.time_zone.as_deref().unwrap_or("<none>")),
        text(bool_ptr(spec.suspend)),
        num(status.active.as_ref().map_or(0, Vec::len) as i64),
        text(last_schedule),
        age(&cj.metadata, now),
        containers,
        images,
        text(format_label_selector(job_spec.selector.as_ref())),
    ]
}

fn bool_ptr(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

mod doc {
    pub const JOB_SUCCEEDED: &str = "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.";
    pub const JOB_SELECTOR: &str = "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const CRON_JOB_SCHEDULE: &str =
        "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.";
    pub const CRON_JOB_TIME_ZONE: &str = "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones";
    pub const CRON_JOB_SUSPEND: &str = "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.";
    pub const CRON_JOB_ACTIVE: &str = "A list of pointers to currently running jobs.";
    pub const CRON_JOB_LAST_SCHEDULE_TIME: &str =
        "Information when was the last time the job was successfully scheduled.";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn job(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "job1", "creationTimestamp": ago(3600)},
               "spec": spec, "status": status})
    }

    #[test]
    fn job_rows() {
        let template = json!({"spec": {"containers": [{"name": "pi", "image": "perl"}]}});
        let cond = |t: &str| json!([{"type": t, "status": "True"}]);
        assert_eq!(
            row_of::<Job>(job(
                json!({"completions": 2, "template": template, "selector": {"matchLabels": {"job-label": "v"}}}),
                json!({"succeeded": 1, "startTime": ago(1200)})
            )),
            vec![
                json!("job1"),
                json!("Running"),
                json!("1/2"),
                json!("20m"),
                json!("60m"),
                json!("pi"),
                json!("perl"),
                json!("job-label=v")
            ]
        );
        let narrow_job = |spec: Value, status: Value| narrow::<Job>(job(spec, status));
        // Completed: the duration is start to completion.
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"succeeded": 1, "startTime": ago(2000), "completionTime": ago(200), "conditions": cond("Complete")})
            ),
            vec![
                json!("job1"),
                json!("Complete"),
                json!("1/1"),
                json!("30m"),
                json!("60m")
            ]
        );
        // Parallel without completions; not started.
        assert_eq!(
            narrow_job(json!({"parallelism": 3, "template": template}), json!({}))[2..4],
            [json!("0/1 of 3"), json!("")]
        );
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": cond("Failed")})
            )[1],
            "Failed"
        );
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": cond("Suspended")})
            )[1],
            "Suspended"
        );
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": cond("FailureTarget")})
            )[1],
            "FailureTarget"
        );
        // Only a true condition counts.
        assert_eq!(
            narrow_job(
                json!({"template": template}),
                json!({"conditions": [{"type": "Complete", "status": "False"}]})
            )[1],
            "Running"
        );
        let mut deleting = job(
            json!({"template": template}),
            json!({"conditions": cond("Suspended")}),
        );
        deleting["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(narrow::<Job>(deleting)[1], "Terminating");
    }

    #[test]
    fn cron_job_rows() {
        let cj = |spec: Value, status: Value| {
            row_of::<CronJob>(json!({"apiVersion": "batch/v1", "kind": "CronJob",
                       "metadata": {"name": "hello", "creationTimestamp": ago(3 * 86400)},
                       "spec": spec, "status": status}))
        };
        let template = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
                                       "selector": {"matchLabels": {"a": "b"}}}});
        assert_eq!(
            cj(
                json!({"schedule": "*/1 * * * *", "suspend": false, "jobTemplate": template}),
                json!({"active": [{"name": "hello-1"}], "lastScheduleTime": ago(45)})
            ),
            vec![
                json!("hello"),
                json!("*/1 * * * *"),
                json!("<none>"),
                json!("False"),
                json!(1),
                json!("45s"),
                json!("3d"),
                json!("c"),
                json!("busybox"),
                json!("a=b")
            ]
        );
        let fresh = cj(
            json!({"schedule": "0 0 * * *", "timeZone": "Etc/UTC", "jobTemplate": {}}),
            json!({}),
        );
        assert_eq!(
            fresh[2..6],
            [
                json!("Etc/UTC"),
                json!("<unset>"),
                json!(0),
                json!("<none>")
            ]
        );
        assert_eq!(fresh[9], "<none>");
    }
}
