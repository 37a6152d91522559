//! StatefulSets: ordered pods with stable names, their update strategy and claim retention.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{
    RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetUpdateStrategy,
};
use serde_json::Value;

use super::{scale_view, validate_workload};
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
