//! apps/v1 workloads: defaults, the rules they share about selectors and pod templates, and
//! what the scale subresource reads and writes.

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetUpdateStrategy, Deployment, DeploymentStrategy, ReplicaSet,
    RollingUpdateDaemonSet, RollingUpdateDeployment, RollingUpdateStatefulSetStrategy, StatefulSet,
    StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::kinds::pod::{default_template, validate_template};
use crate::selector::Selector;
use crate::spec_and_status;
use crate::strategy::{Kind, ScaleView};
use crate::validation::{Errors, FieldError, Path, immutable, validate_labels};

/// Rules every apps/v1 workload has: a non-empty selector that matches the template, a
/// template that restarts Always, non-negative counts.
fn validate_workload(
    what: &str,
    selector: Option<&LabelSelector>,
    template: &PodTemplateSpec,
    replicas: Option<i32>,
    full_template: bool,
    errs: &mut Errors,
) {
    let spec = Path::new("spec");
    if let Some(r) = replicas
        && r < 0
    {
        errs.push(FieldError::invalid(
            &spec.child("replicas"),
            r,
            "must be greater than or equal to 0",
        ));
    }
    match selector {
        None => errs.push(FieldError::required(&spec.child("selector"), "")),
        Some(sel) => {
            let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && sel.match_expressions.as_ref().is_none_or(|m| m.is_empty());
            if empty {
                errs.push(FieldError::invalid(
                    &spec.child("selector"),
                    "",
                    format!("empty selector is invalid for {what}"),
                ));
            }
            if let Some(m) = &sel.match_labels {
                validate_labels(m, &spec.child("selector").child("matchLabels"), errs);
            }
            match Selector::from_label_selector(Some(sel)) {
                Err(e) => errs.push(FieldError::invalid(&spec.child("selector"), "", e.0)),
                Ok(s) if !empty => {
                    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
                    if !s.matches(labels) {
                        errs.push(FieldError::invalid(
                            &spec.child("template").child("metadata").child("labels"),
                            format!("{:?}", labels.cloned().unwrap_or_default()),
                            "`selector` does not match template `labels`",
                        ));
                    }
                }
                Ok(_) => {}
            }
        }
    }
    let tpath = spec.child("template");
    if full_template {
        validate_template(template, &tpath, errs);
    }
    if let Some(ps) = &template.spec {
        if let Some(rp) = &ps.restart_policy
            && rp != "Always"
        {
            errs.push(FieldError::not_supported(
                &tpath.child("spec").child("restartPolicy"),
                rp,
                &["Always"],
            ));
        }
        if ps.active_deadline_seconds.is_some() {
            errs.push(FieldError::forbidden(
                &tpath.child("spec").child("activeDeadlineSeconds"),
                format!(
                    "activeDeadlineSeconds in {} is not Supported",
                    if what == "daemonset" {
                        "DaemonSet"
                    } else if what == "statefulset" {
                        "StatefulSet"
                    } else {
                        "ReplicaSet"
                    }
                ),
            ));
        }
    }
}

fn selector_string(sel: Option<&LabelSelector>) -> Option<String> {
    Selector::from_label_selector(sel)
        .ok()
        .map(|s| s.to_string())
}

fn validate_int_or_percent(v: &IntOrString, path: &Path, errs: &mut Errors) {
    match v {
        IntOrString::Int(n) if *n < 0 => errs.push(FieldError::invalid(
            path,
            n,
            "must be greater than or equal to 0",
        )),
        IntOrString::String(s) => {
            let ok = s.ends_with('%')
                && s.len() > 1
                && s[..s.len() - 1].bytes().all(|c| c.is_ascii_digit());
            if !ok {
                errs.push(FieldError::invalid(
                    path,
                    s,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ));
            }
        }
        _ => {}
    }
}

fn is_zero(v: Option<&IntOrString>) -> bool {
    match v {
        None => true,
        Some(IntOrString::Int(n)) => *n == 0,
        Some(IntOrString::String(s)) => s.trim_end_matches('%') == "0",
    }
}

impl Kind for Deployment {
    const STATUS_WRITES_ANNOTATIONS: bool = true;

    spec_and_status!();

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.spec != old.spec || self.metadata.annotations != old.metadata.annotations)
    }

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        spec.replicas.get_or_insert(1);
        let strategy = spec
            .strategy
            .get_or_insert_with(DeploymentStrategy::default);
        let ty = strategy
            .type_
            .get_or_insert_with(|| "RollingUpdate".into())
            .clone();
        if ty == "RollingUpdate" {
            let ru = strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateDeployment::default);
            ru.max_unavailable
                .get_or_insert_with(|| IntOrString::String("25%".into()));
            ru.max_surge
                .get_or_insert_with(|| IntOrString::String("25%".into()));
        }
        spec.revision_history_limit.get_or_insert(10);
        spec.progress_deadline_seconds.get_or_insert(600);
        default_template(&mut spec.template);
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        validate_workload(
            "deployment",
            Some(&spec.selector),
            &spec.template,
            spec.replicas,
            true,
            errs,
        );
        let sp = Path::new("spec").child("strategy");
        if let Some(strategy) = &spec.strategy {
            match strategy.type_.as_deref() {
                Some("Recreate") if strategy.rolling_update.is_some() => {
                    errs.push(FieldError::forbidden(
                        &sp.child("rollingUpdate"),
                        "may not be specified when strategy `type` is 'Recreate'",
                    ))
                }
                Some("Recreate") | Some("RollingUpdate") | None => {}
                Some(t) => errs.push(FieldError::not_supported(
                    &sp.child("type"),
                    t,
                    &["Recreate", "RollingUpdate"],
                )),
            }
            if let Some(ru) = &strategy.rolling_update {
                if let Some(v) = &ru.max_unavailable {
                    validate_int_or_percent(
                        v,
                        &sp.child("rollingUpdate").child("maxUnavailable"),
                        errs,
                    );
                }
                if let Some(v) = &ru.max_surge {
                    validate_int_or_percent(v, &sp.child("rollingUpdate").child("maxSurge"), errs);
                }
                if is_zero(ru.max_unavailable.as_ref()) && is_zero(ru.max_surge.as_ref()) {
                    errs.push(FieldError::invalid(
                        &sp.child("rollingUpdate").child("maxUnavailable"),
                        0,
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
            }
        }
        if let (Some(p), m) = (
            spec.progress_deadline_seconds,
            spec.min_ready_seconds.unwrap_or(0),
        ) && p <= m
        {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("progressDeadlineSeconds"),
                p,
                "must be greater than minReadySeconds",
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.selector,
                &o.selector,
                &Path::new("spec").child("selector"),
                errs,
            );
        }
    }

    fn scale(&self) -> Option<ScaleView> {
        let spec = self.spec.as_ref()?;
        Some(ScaleView {
            spec_replicas: spec.replicas.unwrap_or(1),
            status_replicas: self.status.as_ref().and_then(|s| s.replicas).unwrap_or(0),
            selector: selector_string(Some(&spec.selector)),
        })
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }
}

impl Kind for ReplicaSet {
    const FIELDS: &'static [&'static str] = &["status.replicas"];

    spec_and_status!(generation);

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        spec.replicas.get_or_insert(1);
        if let Some(t) = spec.template.as_mut() {
            default_template(t);
        }
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        let template = spec.template.clone().unwrap_or_default();
        validate_workload(
            "deployment",
            Some(&spec.selector),
            &template,
            spec.replicas,
            spec.template.is_some(),
            errs,
        );
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.selector,
                &o.selector,
                &Path::new("spec").child("selector"),
                errs,
            );
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "status.replicas" => Some(
                self.status
                    .as_ref()
                    .map(|s| s.replicas)
                    .unwrap_or(0)
                    .to_string(),
            ),
            _ => None,
        }
    }

    fn scale(&self) -> Option<ScaleView> {
        let spec = self.spec.as_ref()?;
        Some(ScaleView {
            spec_replicas: spec.replicas.unwrap_or(1),
            status_replicas: self.status.as_ref().map(|s| s.replicas).unwrap_or(0),
            selector: selector_string(Some(&spec.selector)),
        })
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }
}

impl Kind for StatefulSet {
    spec_and_status!(generation);

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        spec.replicas.get_or_insert(1);
        spec.pod_management_policy
            .get_or_insert_with(|| "OrderedReady".into());
        let strategy = spec
            .update_strategy
            .get_or_insert_with(StatefulSetUpdateStrategy::default);
        if strategy.type_.is_none() {
            strategy.type_ = Some("RollingUpdate".into());
            strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateStatefulSetStrategy::default);
        }
        if let Some(ru) = strategy.rolling_update.as_mut() {
            ru.partition.get_or_insert(0);
        }
        let policy = spec
            .persistent_volume_claim_retention_policy
            .get_or_insert_with(StatefulSetPersistentVolumeClaimRetentionPolicy::default);
        policy.when_deleted.get_or_insert_with(|| "Retain".into());
        policy.when_scaled.get_or_insert_with(|| "Retain".into());
        spec.revision_history_limit.get_or_insert(10);
        default_template(&mut spec.template);
        for pvc in spec.volume_claim_templates.iter_mut().flatten() {
            if let Some(s) = pvc.spec.as_mut() {
                s.volume_mode.get_or_insert_with(|| "Filesystem".into());
            }
            pvc.status
                .get_or_insert_with(Default::default)
                .phase
                .get_or_insert_with(|| "Pending".into());
        }
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        validate_workload(
            "statefulset",
            Some(&spec.selector),
            &spec.template,
            spec.replicas,
            false,
            errs,
        );
        let sp = Path::new("spec");
        if let Some(p) = &spec.pod_management_policy
            && p != "OrderedReady"
            && p != "Parallel"
        {
            errs.push(FieldError::invalid(
                &sp.child("podManagementPolicy"),
                p,
                "must be 'OrderedReady' or 'Parallel'",
            ));
        }
        if let Some(s) = &spec.update_strategy {
            match s.type_.as_deref() {
                Some("OnDelete") if s.rolling_update.is_some() => errs.push(FieldError::invalid(
                    &sp.child("updateStrategy").child("rollingUpdate"),
                    "",
                    "only allowed for updateStrategy 'RollingUpdate'",
                )),
                Some("RollingUpdate") | Some("OnDelete") | None => {}
                Some(t) => errs.push(FieldError::invalid(
                    &sp.child("updateStrategy"),
                    t,
                    "must be 'RollingUpdate' or 'OnDelete'",
                )),
            }
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            let mut comparable = n.clone();
            comparable.replicas = o.replicas;
            comparable.ordinals = o.ordinals.clone();
            comparable.template = o.template.clone();
            comparable.update_strategy = o.update_strategy.clone();
            comparable.persistent_volume_claim_retention_policy =
                o.persistent_volume_claim_retention_policy.clone();
            comparable.min_ready_seconds = o.min_ready_seconds;
            if comparable != *o {
                errs.push(FieldError::forbidden(
                    &Path::new("spec"),
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
        }
    }

    fn scale(&self) -> Option<ScaleView> {
        let spec = self.spec.as_ref()?;
        Some(ScaleView {
            spec_replicas: spec.replicas.unwrap_or(1),
            status_replicas: self.status.as_ref().map(|s| s.replicas).unwrap_or(0),
            selector: selector_string(Some(&spec.selector)),
        })
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }
}

impl Kind for DaemonSet {
    spec_and_status!(generation);

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let strategy = spec
            .update_strategy
            .get_or_insert_with(DaemonSetUpdateStrategy::default);
        let ty = strategy
            .type_
            .get_or_insert_with(|| "RollingUpdate".into())
            .clone();
        if ty == "RollingUpdate" {
            let ru = strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateDaemonSet::default);
            ru.max_unavailable.get_or_insert(IntOrString::Int(1));
            ru.max_surge.get_or_insert(IntOrString::Int(0));
        }
        spec.revision_history_limit.get_or_insert(10);
        default_template(&mut spec.template);
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        validate_workload(
            "daemonset",
            Some(&spec.selector),
            &spec.template,
            None,
            true,
            errs,
        );
        let sp = Path::new("spec").child("updateStrategy");
        if let Some(s) = &spec.update_strategy {
            match s.type_.as_deref() {
                Some("RollingUpdate") => {
                    if let Some(ru) = &s.rolling_update {
                        let unavailable_zero = is_zero(ru.max_unavailable.as_ref());
                        let surge_zero = is_zero(ru.max_surge.as_ref());
                        if unavailable_zero && surge_zero {
                            errs.push(FieldError::required(
                                &sp.child("rollingUpdate").child("maxUnavailable"),
                                "cannot be 0 when maxSurge is 0",
                            ));
                        } else if !unavailable_zero && !surge_zero {
                            errs.push(FieldError::invalid(
                                &sp.child("rollingUpdate").child("maxSurge"),
                                "",
                                "may not be set when maxUnavailable is non-zero",
                            ));
                        }
                    }
                }
                Some("OnDelete") | None => {}
                Some(t) => errs.push(FieldError::not_supported(
                    &sp.child("type"),
                    t,
                    &["OnDelete", "RollingUpdate"],
                )),
            }
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.selector,
                &o.selector,
                &Path::new("spec").child("selector"),
                errs,
            );
        }
    }
}
