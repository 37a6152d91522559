//! The CRD controllers' rules, without I/O: which names a CRD may claim in its group
//! (upstream's NamingConditionController), when it is Established (EstablishingController),
//! and how conditions are set.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionCondition, CustomResourceDefinitionNames,
    CustomResourceDefinitionStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const NAMES_ACCEPTED: &str = "NamesAccepted";
pub const ESTABLISHED: &str = "Established";
pub const TERMINATING: &str = "Terminating";
/// The finalizer that keeps a deleted CRD until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

pub fn find_condition<'a>(
    crd: &'a CustomResourceDefinition,
    type_: &str,
) -> Option<&'a CustomResourceDefinitionCondition> {
    crd.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

pub fn is_true(crd: &CustomResourceDefinition, type_: &str) -> bool {
    find_condition(crd, type_).is_some_and(|c| c.status == "True")
}

pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> CustomResourceDefinitionCondition {
    CustomResourceDefinitionCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: None,
    }
}

/// Upstream's `SetCRDCondition`: the transition time moves only when the status changes.
pub fn set_condition(
    status: &mut CustomResourceDefinitionStatus,
    mut new: CustomResourceDefinitionCondition,
    now: &Time,
) {
    new.last_transition_time = Some(now.clone());
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => conditions.push(new),
        Some(existing) => {
            if existing.status != new.status || existing.last_transition_time.is_none() {
                existing.last_transition_time = new.last_transition_time;
            }
            existing.status = new.status;
            existing.reason = new.reason;
            existing.message = new.message;
        }
    }
}

fn list(v: &Option<Vec<String>>) -> &[String] {
    v.as_deref().unwrap_or_default()
}

/// Spec and accepted names, compared as upstream's semantic equality does (an empty list is
/// no list).
fn same_names(a: &CustomResourceDefinitionNames, b: &CustomResourceDefinitionNames) -> bool {
    a.plural == b.plural
        && a.kind == b.kind
        && a.singular.as_deref().unwrap_or_default() == b.singular.as_deref().unwrap_or_default()
        && a.list_kind.as_deref().unwrap_or_default() == b.list_kind.as_deref().unwrap_or_default()
        && list(&a.short_names) == list(&b.short_names)
        && list(&a.categories) == list(&b.categories)
}

fn fresh(requested: &str, accepted: &str, used: &BTreeSet<String>) -> Result<(), String> {
    if requested == accepted || !used.contains(requested) {
        Ok(())
    } else {
        Err(format!("{requested:?} is already in use"))
    }
}

/// The accepted names and the NamesAccepted and Established conditions upstream's naming
/// controller computes for `crd`, given every CRD of its group (`group`, which may include
/// `crd` itself) with the names they have already claimed.
pub fn calculate_names<'a>(
    crd: &CustomResourceDefinition,
    group: impl IntoIterator<Item = &'a CustomResourceDefinition>,
) -> (
    CustomResourceDefinitionNames,
    CustomResourceDefinitionCondition,
    CustomResourceDefinitionCondition,
) {
    let mut resources = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for other in group {
        if other.spec.group != crd.spec.group {
            continue;
        }
        if let Some(a) = other
            .status
            .as_ref()
            .and_then(|s| s.accepted_names.as_ref())
        {
            resources.insert(a.plural.clone());
            resources.insert(a.singular.clone().unwrap_or_default());
            resources.extend(list(&a.short_names).iter().cloned());
            kinds.insert(a.kind.clone());
            kinds.insert(a.list_kind.clone().unwrap_or_default());
        }
    }
    let requested = &crd.spec.names;
    let accepted = crd
        .status
        .as_ref()
        .and_then(|s| s.accepted_names.clone())
        .unwrap_or_default();
    let mut names = accepted.clone();
    let mut failure: Option<(&str, String)> = None;
    match fresh(&requested.plural, &accepted.plural, &resources) {
        Ok(()) => names.plural = requested.plural.clone(),
        Err(e) => failure = Some(("PluralConflict", e)),
    }
    let singular = requested.singular.clone().unwrap_or_default();
    match fresh(
        &singular,
        accepted.singular.as_deref().unwrap_or_default(),
        &resources,
    ) {
        Ok(()) => names.singular = requested.singular.clone(),
        Err(e) => failure = Some(("SingularConflict", e)),
    }
    if list(&requested.short_names) != list(&accepted.short_names) {
        let ours: BTreeSet<&String> = list(&accepted.short_names).iter().collect();
        let errs: Vec<String> = list(&requested.short_names)
            .iter()
            .filter(|s| !ours.contains(s))
            .filter_map(|s| fresh(s, "", &resources).err())
            .collect();
        if errs.is_empty() {
            names.short_names = requested.short_names.clone();
        } else {
            let message = if errs.len() == 1 {
                errs[0].clone()
            } else {
                format!("[{}]", errs.join(", "))
            };
            failure = Some(("ShortNamesConflict", message));
        }
    }
    match fresh(&requested.kind, &accepted.kind, &kinds) {
        Ok(()) => names.kind = requested.kind.clone(),
        Err(e) => failure = Some(("KindConflict", e)),
    }
    let list_kind = requested.list_kind.clone().unwrap_or_default();
    match fresh(
        &list_kind,
        accepted.list_kind.as_deref().unwrap_or_default(),
        &kinds,
    ) {
        Ok(()) => names.list_kind = requested.list_kind.clone(),
        Err(e) => failure = Some(("ListKindConflict", e)),
    }
    names.categories = requested.categories.clone();
    let accepted_condition = match &failure {
        Some((reason, message)) => condition(NAMES_ACCEPTED, "False", reason, message),
        None => condition(NAMES_ACCEPTED, "True", "NoConflicts", "no conflicts found"),
    };
    let mut established = find_condition(crd, ESTABLISHED)
        .cloned()
        .unwrap_or_else(|| {
            condition(
                ESTABLISHED,
                "False",
                "NotAccepted",
                "not all names are accepted",
            )
        });
    if established.status != "True" && failure.is_none() {
        established = condition(
            ESTABLISHED,
            "False",
            "Installing",
            "the initial names have been accepted",
        );
    }
    (names, accepted_condition, established)
}

/// The status the naming and establishing controllers leave `crd` with, given the CRDs of its
/// group; `None` when they would change nothing.
pub fn reconcile_status<'a>(
    crd: &CustomResourceDefinition,
    group: impl IntoIterator<Item = &'a CustomResourceDefinition>,
    now: &Time,
) -> Option<CustomResourceDefinitionStatus> {
    let current = crd.status.clone().unwrap_or_default();
    let mut status = current.clone();
    let names_match = current
        .accepted_names
        .as_ref()
        .is_some_and(|a| same_names(&crd.spec.names, a));
    if !names_match || find_condition(crd, NAMES_ACCEPTED).is_none() {
        let (names, accepted, established) = calculate_names(crd, group);
        status.accepted_names = Some(names);
        set_condition(&mut status, accepted, now);
        // Our establishing step follows at once: a single server needs no grace period.
        set_condition(&mut status, established, now);
    }
    let view = CustomResourceDefinition {
        status: Some(status.clone()),
        ..Default::default()
    };
    if is_true(&view, NAMES_ACCEPTED) && !is_true(&view, ESTABLISHED) {
        set_condition(
            &mut status,
            condition(
                ESTABLISHED,
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
            now,
        );
    }
    (status != current).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionSpec;

    fn crd(plural: &str, kind: &str, short: &[&str]) -> CustomResourceDefinition {
        CustomResourceDefinition {
            metadata: Default::default(),
            spec: CustomResourceDefinitionSpec {
                group: "example.com".into(),
                names: CustomResourceDefinitionNames {
                    plural: plural.into(),
                    singular: Some(kind.to_lowercase()),
                    kind: kind.into(),
                    list_kind: Some(format!("{kind}List")),
                    short_names: Some(short.iter().map(|s| s.to_string()).collect()),
                    categories: None,
                },
                scope: "Namespaced".into(),
                ..Default::default()
            },
            status: None,
        }
    }

    #[test]
    fn naming_and_establishing() {
        let now = crate::meta::now();
        let mut a = crd("foos", "Foo", &["f"]);
        a.status = reconcile_status(&a, [], &now);
        assert!(is_true(&a, NAMES_ACCEPTED) && is_true(&a, ESTABLISHED));
        let est = find_condition(&a, ESTABLISHED).unwrap();
        assert_eq!(est.reason.as_deref(), Some("InitialNamesAccepted"));
        assert_eq!(reconcile_status(&a, [&a], &now), None);

        // Another CRD asking for the same plural is refused; so is one reusing the kind.
        let mut b = crd("foos", "Bar", &[]);
        b.status = reconcile_status(&b, [&a], &now);
        let c = find_condition(&b, NAMES_ACCEPTED).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            (
                "False",
                Some("PluralConflict"),
                Some("\"foos\" is already in use")
            )
        );
        let est = find_condition(&b, ESTABLISHED).unwrap();
        assert_eq!(
            (est.status.as_str(), est.reason.as_deref()),
            ("False", Some("NotAccepted"))
        );
        let mut k = crd("bars", "Foo", &["f"]);
        k.status = reconcile_status(&k, [&a], &now);
        let c = find_condition(&k, NAMES_ACCEPTED).unwrap();
        // Each check overwrites the condition: the list kind is checked last.
        assert_eq!(c.reason.as_deref(), Some("ListKindConflict"));
        assert!(!is_true(&k, ESTABLISHED));
    }
}
