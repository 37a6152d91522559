//! scheduling.k8s.io PriorityClasses: the names pods use to get a priority. Values above a
//! billion belong to the system classes the server creates at start, so that no workload can
//! outrank the pods that keep nodes and the cluster running; a class's value and preemption
//! policy cannot change, since pods copied them when they were admitted.

use jiff::Timestamp;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, column, integer, name, string, text};
use crate::validation::{Errors, FieldError, Path, immutable};

/// Names with this prefix are reserved for the system classes.
const SYSTEM_PREFIX: &str = "system-";
/// The highest value a user's class may have (`HighestUserDefinablePriority`).
const HIGHEST_USER_DEFINABLE_PRIORITY: i32 = 1_000_000_000;
/// `SystemCriticalPriority`: twice the highest user value.
const SYSTEM_CRITICAL_PRIORITY: i32 = 2 * HIGHEST_USER_DEFINABLE_PRIORITY;
const PREEMPTION_POLICIES: &[&str] = &["PreemptLowerPriority", "Never"];

/// The system classes, as upstream's apiserver creates them when it starts.
pub fn system_priority_classes() -> Vec<PriorityClass> {
    let class = |name: &str, value: i32, description: &str| PriorityClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        value,
        description: Some(description.into()),
        ..Default::default()
    };
    vec![
        class(
            "system-node-critical",
            SYSTEM_CRITICAL_PRIORITY + 1000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        class(
            "system-cluster-critical",
            SYSTEM_CRITICAL_PRIORITY,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ]
}

/// IsKnownSystemPriorityClass: why a `system-` class is not one of the system's, if it is not.
fn not_a_system_class(name: &str, value: i32, global_default: bool) -> Option<String> {
    let Some(known) = system_priority_classes()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
    else {
        return Some(format!("{name} is not a known system priority class"));
    };
    if known.value != value {
        return Some(format!(
            "value of {name} PriorityClass must be {}",
            known.value
        ));
    }
    let known_default = known.global_default.unwrap_or(false);
    if known_default != global_default {
        return Some(format!(
            "globalDefault of {name} PriorityClass must be {known_default}"
        ));
    }
    None
}

impl Kind for PriorityClass {
    const COLUMNS: &'static [Column] = PRIORITY_CLASS_COLUMNS;

    fn default_fields(&mut self) {
        self.preemption_policy
            .get_or_insert_with(|| "PreemptLowerPriority".into());
    }

    fn validate(&self, errs: &mut Errors) {
        let name = self.metadata.name.as_deref().unwrap_or("");
        if name.starts_with(SYSTEM_PREFIX) {
            if let Some(why) =
                not_a_system_class(name, self.value, self.global_default.unwrap_or(false))
            {
                errs.push(FieldError::forbidden(
                    &Path::new("metadata").child("name"),
                    format!(
                        "priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system use only. error: {why}"
                    ),
                ));
            }
        } else if self.value > HIGHEST_USER_DEFINABLE_PRIORITY {
            errs.push(FieldError::forbidden(
                &Path::new("value"),
                format!(
                    "maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
                ),
            ));
        }
        match self.preemption_policy.as_deref() {
            None => {}
            Some("") => errs.push(FieldError::required(&Path::new("preemptionPolicy"), "")),
            Some(p) if !PREEMPTION_POLICIES.contains(&p) => errs.push(FieldError::not_supported(
                &Path::new("preemptionPolicy"),
                p,
                PREEMPTION_POLICIES,
            )),
            Some(_) => {}
        }
    }

    /// Upstream validates only what may not change on update.
    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        if self.value != old.value {
            errs.push(FieldError::forbidden(
                &Path::new("value"),
                "may not be changed in an update.",
            ));
        }
        immutable(
            &self.preemption_policy.as_deref().unwrap_or(""),
            &old.preemption_policy.as_deref().unwrap_or(""),
            &Path::new("preemptionPolicy"),
            errs,
        );
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(priority_class_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

/// Upstream adds PreemptionPolicy only to wide output, and the server always prints wide,
/// so it is an ordinary column.
const PRIORITY_CLASS_COLUMNS: &[Column] = &[
    NAME,
    integer("Value", doc::VALUE),
    column("Global-Default", "boolean", doc::GLOBAL_DEFAULT),
    AGE,
    string("PreemptionPolicy", doc::PREEMPTION_POLICY),
];

fn priority_class_cells(pc: &PriorityClass, now: Timestamp) -> Vec<Value> {
    vec![
        name(&pc.metadata),
        Value::from(i64::from(pc.value)),
        Value::Bool(pc.global_default.unwrap_or(false)),
        age(&pc.metadata, now),
        text(pc.preemption_policy.clone().unwrap_or_default()),
    ]
}

mod doc {
    pub const VALUE: &str = "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.";
    pub const GLOBAL_DEFAULT: &str = "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.";
    pub const PREEMPTION_POLICY: &str = "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn class(body: Value) -> PriorityClass {
        let mut pc: PriorityClass = serde_json::from_value(body).unwrap();
        pc.default_fields();
        pc
    }

    fn errors(pc: &PriorityClass) -> Vec<String> {
        let mut errs = Vec::new();
        pc.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn system_classes_validate() {
        for mut pc in system_priority_classes() {
            pc.default_fields();
            assert_eq!(errors(&pc), Vec::<String>::new());
            assert_eq!(
                pc.preemption_policy.as_deref(),
                Some("PreemptLowerPriority")
            );
        }
        let values: Vec<i32> = system_priority_classes().iter().map(|c| c.value).collect();
        assert_eq!(values, [2000001000, 2000000000]);
    }

    #[test]
    fn validation() {
        assert_eq!(
            errors(&class(
                json!({"metadata": {"name": "high"}, "value": 1000000001})
            )),
            vec![
                "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
            ]
        );
        assert_eq!(
            errors(&class(
                json!({"metadata": {"name": "system-foo"}, "value": 1})
            )),
            vec![
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-foo is not a known system priority class"
            ]
        );
        assert_eq!(
            errors(&class(
                json!({"metadata": {"name": "system-node-critical"}, "value": 2000001000, "globalDefault": true})
            )),
            vec![
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: globalDefault of system-node-critical PriorityClass must be false"
            ]
        );
        assert_eq!(
            errors(&class(
                json!({"metadata": {"name": "low"}, "value": -5, "preemptionPolicy": "Sometimes"})
            )),
            vec![
                "preemptionPolicy: Unsupported value: \"Sometimes\": supported values: \"PreemptLowerPriority\", \"Never\""
            ]
        );
        let old = class(json!({"metadata": {"name": "low"}, "value": 1}));
        let new =
            class(json!({"metadata": {"name": "low"}, "value": 2, "preemptionPolicy": "Never"}));
        let mut errs = Vec::new();
        new.validate_update(&old, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "value: Forbidden: may not be changed in an update.",
                "preemptionPolicy: Invalid value: \"Never\": field is immutable",
            ]
        );
    }

    #[test]
    fn priority_class_row() {
        let pc = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "system-node-critical", "creationTimestamp": ago(3600)},
            "value": 2000001000, "preemptionPolicy": "PreemptLowerPriority"});
        assert_eq!(
            row_of::<PriorityClass>(pc),
            vec![
                json!("system-node-critical"),
                json!(2000001000),
                json!(false),
                json!("60m"),
                json!("PreemptLowerPriority")
            ]
        );
    }
}
