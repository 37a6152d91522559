//! Knative's condition sets (knative.dev/pkg/apis ConditionSet, the "living" kind): a
//! top-level `Ready` follows its dependents, True when all are, False with the reason of
//! the one that is False, Unknown otherwise. `lastTransitionTime` moves only when a status
//! changes, so repeated reconciles leave the object alone.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::serving::Condition;

pub const READY: &str = "Ready";

/// The conditions of one kind: `Ready` and what it depends on.
pub struct ConditionSet {
    pub dependents: &'static [&'static str],
}

pub const SERVICE: ConditionSet = ConditionSet {
    dependents: &["ConfigurationsReady", "RoutesReady"],
};
pub const FUNCTION: ConditionSet = ConditionSet {
    dependents: &["SourceReady", "ServiceReady"],
};
pub const CONFIGURATION: ConditionSet = ConditionSet { dependents: &[] };
pub const REVISION: ConditionSet = ConditionSet {
    dependents: &["ResourcesAvailable", "ContainerHealthy"],
};
pub const ROUTE: ConditionSet = ConditionSet {
    dependents: &[
        "AllTrafficAssigned",
        "IngressReady",
        "CertificateProvisioned",
    ],
};

/// The condition of type `ty`, if set.
pub fn get<'a>(conditions: &'a [Condition], ty: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == ty)
}

/// The status of condition `ty`: "True", "False" or "Unknown" (also when unset).
pub fn status<'a>(conditions: &'a [Condition], ty: &str) -> &'a str {
    get(conditions, ty).map_or("Unknown", |c| c.status.as_str())
}

pub fn is_true(conditions: &[Condition], ty: &str) -> bool {
    status(conditions, ty) == "True"
}

/// Sets one condition, keeping its transition time when the status did not change.
fn set(conditions: &mut Vec<Condition>, mut c: Condition) {
    match conditions.iter_mut().find(|o| o.type_ == c.type_) {
        Some(old) => {
            c.last_transition_time = if old.status == c.status {
                old.last_transition_time.clone()
            } else {
                Some(Time(Timestamp::now()))
            };
            *old = c;
        }
        None => {
            c.last_transition_time = Some(Time(Timestamp::now()));
            conditions.push(c);
        }
    }
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

fn condition(ty: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> Condition {
    Condition {
        type_: ty.into(),
        status: status.into(),
        reason: reason.filter(|r| !r.is_empty()).map(Into::into),
        message: message.filter(|m| !m.is_empty()).map(Into::into),
        ..Default::default()
    }
}

impl ConditionSet {
    /// Every condition of the set that is not there yet, as Unknown.
    pub fn initialize(&self, conditions: &mut Vec<Condition>) {
        for ty in self.dependents.iter().chain(&[READY]) {
            if get(conditions, ty).is_none() {
                set(conditions, condition(ty, "Unknown", None, None));
            }
        }
    }

    pub fn mark_true(&self, conditions: &mut Vec<Condition>, ty: &str) {
        set(conditions, condition(ty, "True", None, None));
        if ty != READY && self.dependents.iter().all(|d| is_true(conditions, d)) {
            set(conditions, condition(READY, "True", None, None));
        }
    }

    pub fn mark_false(&self, conditions: &mut Vec<Condition>, ty: &str, reason: &str, msg: &str) {
        set(conditions, condition(ty, "False", Some(reason), Some(msg)));
        if ty != READY {
            set(
                conditions,
                condition(READY, "False", Some(reason), Some(msg)),
            );
        }
    }

    pub fn mark_unknown(&self, conditions: &mut Vec<Condition>, ty: &str, reason: &str, msg: &str) {
        set(
            conditions,
            condition(ty, "Unknown", Some(reason), Some(msg)),
        );
        let another_false = self
            .dependents
            .iter()
            .any(|d| *d != ty && status(conditions, d) == "False");
        if ty != READY && !another_false {
            set(
                conditions,
                condition(READY, "Unknown", Some(reason), Some(msg)),
            );
        }
    }

    /// Copies `ty` from another object's conditions (a Service takes its Configuration's
    /// and Route's `Ready` as its own dependents), Unknown when the other has none.
    pub fn propagate(&self, conditions: &mut Vec<Condition>, ty: &str, from: Option<&Condition>) {
        let reason = from.and_then(|c| c.reason.as_deref()).unwrap_or_default();
        let message = from.and_then(|c| c.message.as_deref()).unwrap_or_default();
        match from.map(|c| c.status.as_str()) {
            Some("True") => self.mark_true(conditions, ty),
            Some("False") => self.mark_false(conditions, ty, reason, message),
            _ => self.mark_unknown(conditions, ty, reason, message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_follows_the_dependents() {
        let mut c = Vec::new();
        SERVICE.initialize(&mut c);
        assert_eq!(status(&c, READY), "Unknown");
        SERVICE.mark_true(&mut c, "ConfigurationsReady");
        assert_eq!(status(&c, READY), "Unknown");
        SERVICE.mark_true(&mut c, "RoutesReady");
        assert_eq!(status(&c, READY), "True");
        SERVICE.mark_false(&mut c, "ConfigurationsReady", "RevisionFailed", "boom");
        let ready = get(&c, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("RevisionFailed"))
        );
        // Another dependent going Unknown leaves the False in place.
        SERVICE.mark_unknown(&mut c, "RoutesReady", "Pending", "");
        assert_eq!(status(&c, READY), "False");
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut c = Vec::new();
        REVISION.mark_false(&mut c, "ContainerHealthy", "ExitCode1", "x");
        let before = get(&c, "ContainerHealthy")
            .unwrap()
            .last_transition_time
            .clone();
        REVISION.mark_false(&mut c, "ContainerHealthy", "ExitCode1", "y");
        let after = get(&c, "ContainerHealthy")
            .unwrap()
            .last_transition_time
            .clone();
        assert_eq!(before, after);
    }
}
