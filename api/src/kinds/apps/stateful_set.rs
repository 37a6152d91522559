//! StatefulSets: ordered pods with stable names, their update strategy and claim retention.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetUpdateStrategy,
};
use serde_json::Value;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{is_zero, scale_view, validate_int_or_percent, validate_workload};
use crate::kinds::pod::default_template;
use crate::spec_and_status;
use crate::strategy::{Kind, ScaleView};
use crate::table::{
    AGE, CONTAINERS, Column, IMAGES, NAME, Row, age, layout_containers, name, string,
    template_containers, text,
};
use crate::validation::{Errors, FieldError, Path};

impl Kind for StatefulSet {
    const COLUMNS: &'static [Column] = STATEFUL_SET_COLUMNS;

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
                Some("RollingUpdate") | None => {
                    if let Some(ru) = &s.rolling_update {
                        validate_rolling_update(
                            ru,
                            &sp.child("updateStrategy").child("rollingUpdate"),
                            errs,
                        );
                    }
                }
                Some("OnDelete") => {}
                Some(t) => errs.push(FieldError::invalid(
                    &sp.child("updateStrategy"),
                    t,
                    "must be 'RollingUpdate' or 'OnDelete'",
                )),
            }
        }
        nonnegative(spec.min_ready_seconds, &sp.child("minReadySeconds"), errs);
        if let Some(o) = &spec.ordinals {
            nonnegative(o.start, &sp.child("ordinals.start"), errs);
        }
        if let Some(p) = &spec.persistent_volume_claim_retention_policy {
            let pp = sp.child("persistentVolumeClaimRetentionPolicy");
            for (field, v) in [
                ("whenDeleted", &p.when_deleted),
                ("whenScaled", &p.when_scaled),
            ] {
                if let Some(v) = v
                    && v != "Retain"
                    && v != "Delete"
                {
                    errs.push(FieldError::not_supported(
                        &pp.child(field),
                        v,
                        &["Delete", "Retain"],
                    ));
                }
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
            comparable.revision_history_limit = o.revision_history_limit;
            if comparable != *o {
                errs.push(FieldError::forbidden(
                    &Path::new("spec"),
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
                ));
            }
        }
    }

    fn scale(&self) -> Option<ScaleView> {
        let spec = self.spec.as_ref()?;
        Some(scale_view(
            spec.replicas,
            self.status.as_ref().map(|s| s.replicas),
            &spec.selector,
        ))
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(stateful_set_cells(self, now))
    }
}

fn nonnegative(v: Option<i32>, path: &Path, errs: &mut Errors) {
    if let Some(v) = v
        && v < 0
    {
        errs.push(FieldError::invalid(
            path,
            v,
            "must be greater than or equal to 0",
        ));
    }
}

/// Upstream's `validateRollingUpdateStatefulSet`: a partition of 0 or more; `maxUnavailable`
/// a positive number or percentage up to 100%.
fn validate_rolling_update(ru: &RollingUpdateStatefulSetStrategy, path: &Path, errs: &mut Errors) {
    nonnegative(ru.partition, &path.child("partition"), errs);
    if let Some(max) = &ru.max_unavailable {
        let mp = path.child("maxUnavailable");
        validate_int_or_percent(max, &mp, errs);
        if is_zero(Some(max)) {
            errs.push(FieldError::invalid(&mp, Raw(max), "cannot be 0"));
        }
        if let IntOrString::String(s) = max
            && s.trim_end_matches('%')
                .parse::<u32>()
                .is_ok_and(|n| n > 100)
        {
            errs.push(FieldError::invalid(
                &mp,
                Raw(max),
                "must not be greater than 100%",
            ));
        }
    }
}

/// An `IntOrString` printed as Go prints it in a field error (its `String()`, unquoted).
struct Raw<'a>(&'a IntOrString);

impl std::fmt::Debug for Raw<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IntOrString::Int(n) => write!(f, "{n}"),
            IntOrString::String(s) => f.write_str(s),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const STATEFUL_SET_COLUMNS: &[Column] = &[
    NAME,
    string("Ready", "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

fn stateful_set_cells(sts: &StatefulSet, now: Timestamp) -> Vec<Value> {
    let spec = sts.spec.clone().unwrap_or_default();
    let ready = sts
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let desired = spec.replicas.unwrap_or(1);
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&sts.metadata),
        text(format!("{ready}/{desired}")),
        age(&sts.metadata, now),
        containers,
        images,
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    fn errors(sts: serde_json::Value) -> Vec<String> {
        let sts: StatefulSet = serde_json::from_value(sts).unwrap();
        let mut errs = Errors::default();
        sts.validate(&mut errs);
        errs.iter().map(|e| e.to_string()).collect()
    }

    fn valid() -> serde_json::Value {
        json!({"metadata": {"name": "db"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "pg", "image": "postgres"}]}}}})
    }

    #[test]
    fn spec_fields_are_validated_as_upstream() {
        assert!(errors(valid()).is_empty(), "{:?}", errors(valid()));
        let mut bad = valid();
        bad["spec"]["minReadySeconds"] = json!(-1);
        bad["spec"]["ordinals"] = json!({"start": -2});
        bad["spec"]["persistentVolumeClaimRetentionPolicy"] = json!({"whenDeleted": "Keep"});
        bad["spec"]["updateStrategy"] = json!({"type": "RollingUpdate",
            "rollingUpdate": {"partition": -1, "maxUnavailable": "0%"}});
        let errs = errors(bad);
        for want in [
            "spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0",
            "spec.ordinals.start: Invalid value: -2: must be greater than or equal to 0",
            "spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: \"Keep\": supported values: \"Delete\", \"Retain\"",
            "spec.updateStrategy.rollingUpdate.partition: Invalid value: -1: must be greater than or equal to 0",
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0%: cannot be 0",
        ] {
            assert!(errs.iter().any(|e| e == want), "{want} not in {errs:?}");
        }
    }

    #[test]
    fn updates_may_change_the_history_limit_but_not_the_service() {
        let old: StatefulSet = serde_json::from_value(valid()).unwrap();
        let mut new = old.clone();
        new.spec.as_mut().unwrap().revision_history_limit = Some(3);
        let mut errs = Errors::default();
        new.validate_update(&old, &mut errs);
        assert!(errs.is_empty());
        new.spec.as_mut().unwrap().service_name = Some("other".into());
        new.validate_update(&old, &mut errs);
        assert!(errs.iter().any(|e| e.to_string().contains("'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden")));
    }

    #[test]
    fn stateful_set_row() {
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                     "template": {"spec": {"containers": [{"name": "pg", "image": "postgres"}]}}},
            "status": {"replicas": 2, "readyReplicas": 2}});
        assert_eq!(
            row_of::<StatefulSet>(sts),
            vec![
                json!("db"),
                json!("2/3"),
                json!("<unknown>"),
                json!("pg"),
                json!("postgres")
            ]
        );
    }
}
