//! batch/v1 Jobs and CronJobs: defaults, the generated selector that ties a Job to its pods
//! by uid, and template rules.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::kinds::pod::{default_template, validate_template};
use crate::selector::Selector;
use crate::spec_and_status;
use crate::strategy::{GcPolicy, Kind};
use crate::validation::{Errors, FieldError, Path, immutable};

const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const JOB_NAME: &str = "batch.kubernetes.io/job-name";

impl Kind for Job {
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
}
