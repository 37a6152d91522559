//! ResourceQuotas, and the rules for resource names and quantities that LimitRanges and
//! RuntimeClass overheads share with them: a quota that names a resource nothing counts, or
//! a scope that cannot apply to it, would never be enforced, so upstream refuses it up front.

mod usage;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec, ResourceQuotaStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use crate::quantity::Quantity as ParsedQuantity;
use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, canonical_quantity, name, string, text};
use crate::validation::{ErrorKind, Errors, FieldError, Path, qualified_name};

pub use usage::{Usage, charge, charge_update, used};

impl Kind for ResourceQuota {
    const COLUMNS: &'static [Column] = RESOURCE_QUOTA_COLUMNS;

    spec_and_status!();

    fn prepare_create(&mut self) {
        self.status = Some(ResourceQuotaStatus::default());
    }

    fn validate(&self, errs: &mut Errors) {
        if let Some(spec) = &self.spec {
            validate_spec(spec, &Path::new("spec"), errs);
        }
        if let Some(status) = &self.status {
            validate_status(status, &Path::new("status"), errs);
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        let scopes = |q: &Self| -> BTreeSet<String> {
            q.spec
                .as_ref()
                .and_then(|s| s.scopes.clone())
                .unwrap_or_default()
                .into_iter()
                .collect()
        };
        if scopes(self) != scopes(old) {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("scopes"),
                self.spec
                    .as_ref()
                    .and_then(|s| s.scopes.clone())
                    .unwrap_or_default(),
                "field is immutable",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(resource_quota_cells(self, now))
    }
}

fn validate_spec(spec: &ResourceQuotaSpec, path: &Path, errs: &mut Errors) {
    let hard = spec.hard.clone().unwrap_or_default();
    for (k, v) in &hard {
        let p = path.child("hard").key(k);
        validate_quota_resource_name(k, &p, errs);
        validate_quantity_value(k, v, &p, errs);
    }
    validate_scopes(spec, &hard, path, errs);
    validate_scope_selector(spec, &hard, path, errs);
}

fn validate_status(status: &ResourceQuotaStatus, path: &Path, errs: &mut Errors) {
    for (field, list) in [("hard", &status.hard), ("used", &status.used)] {
        for (k, v) in list.iter().flatten() {
            let p = path.child(field).key(k);
            validate_quota_resource_name(k, &p, errs);
            validate_quantity_value(k, v, &p, errs);
        }
    }
}

const BEST_EFFORT: &str = "BestEffort";
const NOT_BEST_EFFORT: &str = "NotBestEffort";
const TERMINATING: &str = "Terminating";
const NOT_TERMINATING: &str = "NotTerminating";
const PRIORITY_CLASS: &str = "PriorityClass";
const CROSS_NAMESPACE_POD_AFFINITY: &str = "CrossNamespacePodAffinity";

/// Scopes no object can be in at once.
const CONFLICTING_SCOPES: &[[&str; 2]] = &[
    [BEST_EFFORT, NOT_BEST_EFFORT],
    [TERMINATING, NOT_TERMINATING],
];

fn is_standard_scope(scope: &str) -> bool {
    [
        TERMINATING,
        NOT_TERMINATING,
        BEST_EFFORT,
        NOT_BEST_EFFORT,
        PRIORITY_CLASS,
        CROSS_NAMESPACE_POD_AFFINITY,
    ]
    .contains(&scope)
}

/// Whether a quota of `resource` can be restricted to `scope`: the pod scopes only count pods
/// and their compute, and best-effort pods have no compute to count.
fn scope_applies_to(scope: &str, resource: &str) -> bool {
    const POD_COMPUTE: &[&str] = &[
        "cpu",
        "memory",
        "limits.cpu",
        "limits.memory",
        "requests.cpu",
        "requests.memory",
    ];
    match scope {
        TERMINATING
        | NOT_TERMINATING
        | NOT_BEST_EFFORT
        | PRIORITY_CLASS
        | CROSS_NAMESPACE_POD_AFFINITY => resource == "pods" || POD_COMPUTE.contains(&resource),
        BEST_EFFORT => resource == "pods",
        _ => true,
    }
}

fn validate_scopes(
    spec: &ResourceQuotaSpec,
    hard: &BTreeMap<String, Quantity>,
    path: &Path,
    errs: &mut Errors,
) {
    let scopes = spec.scopes.clone().unwrap_or_default();
    if scopes.is_empty() {
        return;
    }
    let p = path.child("scopes");
    for scope in &scopes {
        if !is_standard_scope(scope) {
            errs.push(FieldError::invalid(&p, &scopes, "unsupported scope"));
        }
        for k in hard.keys() {
            if is_standard_quota_resource(k) && !scope_applies_to(scope, k) {
                errs.push(FieldError::invalid(
                    &p,
                    &scopes,
                    "unsupported scope applied to resource",
                ));
            }
        }
    }
    for pair in CONFLICTING_SCOPES {
        if pair.iter().all(|s| scopes.iter().any(|x| x == s)) {
            errs.push(FieldError::invalid(&p, &scopes, "conflicting scopes"));
        }
    }
}

fn validate_scope_selector(
    spec: &ResourceQuotaSpec,
    hard: &BTreeMap<String, Quantity>,
    path: &Path,
    errs: &mut Errors,
) {
    let Some(selector) = &spec.scope_selector else {
        return;
    };
    // Upstream reports every expression at the list's path, without an index.
    let p = path.child("scopeSelector").child("matchExpressions");
    let mut seen = BTreeSet::new();
    for req in selector.match_expressions.iter().flatten() {
        let scope = req.scope_name.as_str();
        if !is_standard_scope(scope) {
            errs.push(FieldError::invalid(
                &p.child("scopeName"),
                scope,
                "unsupported scope",
            ));
        }
        for k in hard.keys() {
            if is_standard_quota_resource(k) && !scope_applies_to(scope, k) {
                errs.push(FieldError::new(
                    ErrorKind::Invalid,
                    &p,
                    None,
                    "unsupported scope applied to resource",
                ));
            }
        }
        if [
            BEST_EFFORT,
            NOT_BEST_EFFORT,
            TERMINATING,
            NOT_TERMINATING,
            CROSS_NAMESPACE_POD_AFFINITY,
        ]
        .contains(&scope)
            && req.operator != "Exists"
        {
            errs.push(FieldError::invalid(
                &p.child("operator"),
                &req.operator,
                "must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
            ));
        }
        let values = req.values.as_deref().unwrap_or(&[]);
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                &p.child("values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::invalid(
                &p.child("values"),
                values,
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.push(FieldError::invalid(
                &p.child("operator"),
                op,
                "not a valid selector operator",
            )),
        }
        seen.insert(scope);
    }
    for pair in CONFLICTING_SCOPES {
        if pair.iter().all(|s| seen.contains(s)) {
            // Upstream shows `spec.scopes` as the value here, whatever the selector holds.
            errs.push(FieldError::invalid(
                &p,
                spec.scopes.clone().unwrap_or_default(),
                "conflicting scopes",
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Resource names and quantities (upstream's core/helper), shared with LimitRanges and
// RuntimeClasses.

/// Every resource name the system knows (`standardResources`).
pub(crate) const STANDARD_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
];

/// What the quota system tracks (`standardQuotaResources`).
const STANDARD_QUOTA_RESOURCES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
];

/// Resources counted in whole units (`integerResources`).
const INTEGER_RESOURCES: &[&str] = &[
    "pods",
    "resourcequotas",
    "services",
    "replicationcontrollers",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
];

/// The regular expression upstream's quantity parser names when it refuses a value.
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

pub(crate) fn is_huge_page(name: &str) -> bool {
    name.starts_with("hugepages-")
}

fn is_standard_quota_resource(name: &str) -> bool {
    STANDARD_QUOTA_RESOURCES.contains(&name)
        || is_huge_page(name)
        || name.starts_with("requests.hugepages-")
}

fn is_standard_resource(name: &str) -> bool {
    STANDARD_RESOURCES.contains(&name)
        || is_huge_page(name)
        || name.starts_with("requests.hugepages-")
}

/// Unprefixed names and `kubernetes.io/` ones belong to Kubernetes.
fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// A device plugin's resource: prefixed outside `kubernetes.io/`, and still a qualified name
/// once quota prefixes it with `requests.`.
fn is_extended_resource(name: &str) -> bool {
    !is_native_resource(name)
        && !name.starts_with("requests.")
        && qualified_name(&format!("requests.{name}")).is_empty()
}

/// Whether a request may be below its limit: not for hugepages or extended resources.
pub(crate) fn is_overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !is_huge_page(name)
}

/// Upstream's `validateResourceName`: a qualified name, standard unless prefixed.
pub(crate) fn validate_resource_name(name: &str, path: &Path, errs: &mut Errors) {
    let qualified = qualified_name(name);
    if !qualified.is_empty() {
        for msg in qualified {
            errs.push(FieldError::invalid(path, name, msg));
        }
        return;
    }
    if !name.contains('/') && !is_standard_resource(name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "must be a standard resource type or fully qualified",
        ));
    }
}

/// Upstream's `validateContainerResourceName`: what a container may request or limit.
pub(crate) fn validate_container_resource_name(name: &str, path: &Path, errs: &mut Errors) {
    validate_resource_name(name, path, errs);
    if !name.contains('/') {
        if !["cpu", "memory", "ephemeral-storage"].contains(&name) && !is_huge_page(name) {
            errs.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name) && !is_extended_resource(name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

/// Upstream's `ValidateResourceQuotaResourceName`.
fn validate_quota_resource_name(name: &str, path: &Path, errs: &mut Errors) {
    validate_resource_name(name, path, errs);
    if !name.contains('/') && !is_standard_quota_resource(name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "must be a standard resource for quota",
        ));
    }
}

/// A quantity that parses, or an error at `path` (upstream refuses it while decoding).
pub(crate) fn parse_quantity(
    q: &Quantity,
    path: &Path,
    errs: &mut Errors,
) -> Option<ParsedQuantity> {
    let parsed = ParsedQuantity::parse(&q.0);
    if parsed.is_none() {
        errs.push(FieldError::invalid(path, &q.0, QUANTITY_FORMAT));
    }
    parsed
}

/// Upstream's `ValidateResourceQuantityValue`: never negative, whole for counted resources.
pub(crate) fn validate_quantity_value(name: &str, q: &Quantity, path: &Path, errs: &mut Errors) {
    let Some(parsed) = parse_quantity(q, path, errs) else {
        return;
    };
    if parsed.is_negative() {
        errs.push(FieldError::invalid(
            path,
            canonical_quantity(&q.0),
            "must be greater than or equal to 0",
        ));
    }
    if (INTEGER_RESOURCES.contains(&name) || is_extended_resource(name))
        && parsed.milli_value() % 1000 != 0
    {
        errs.push(quantity_error(path, q, "must be an integer"));
    }
}

/// An Invalid error whose value is a quantity, printed as upstream's `Quantity.String()`.
pub(crate) fn quantity_error(path: &Path, q: &Quantity, detail: impl Into<String>) -> FieldError {
    FieldError::new(
        ErrorKind::Invalid,
        path,
        Some(canonical_quantity(&q.0)),
        detail,
    )
}

/// Upstream's `Quantity.Cmp`.
pub(crate) fn compare_quantities(a: &ParsedQuantity, b: &ParsedQuantity) -> Ordering {
    a.milli_value()
        .cmp(&b.milli_value())
        .then_with(|| a.as_f64().total_cmp(&b.as_f64()))
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const RESOURCE_QUOTA_COLUMNS: &[Column] = &[
    NAME,
    string(
        "Request",
        "Request represents a minimum amount of cpu/memory that a container may consume.",
    ),
    string(
        "Limit",
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
    ),
    AGE,
];

/// `used/hard` for every resource the status enforces, sorted by name: `limits.*` ones in the
/// Limit column, the rest in Request.
fn resource_quota_cells(q: &ResourceQuota, now: Timestamp) -> Vec<Value> {
    let status = q.status.clone().unwrap_or_default();
    let hard = status.hard.unwrap_or_default();
    let used = status.used.unwrap_or_default();
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    for (resource, hard_quantity) in &hard {
        let used_quantity = used
            .get(resource)
            .map_or_else(|| "0".to_string(), |u| canonical_quantity(&u.0));
        let cell = format!(
            "{resource}: {used_quantity}/{}",
            canonical_quantity(&hard_quantity.0)
        );
        let pieces: Vec<&str> = resource.split('.').collect();
        if pieces.len() > 1 && pieces[0] == "limits" {
            limits.push(cell);
        } else {
            requests.push(cell);
        }
    }
    vec![
        name(&q.metadata),
        text(requests.join(", ")),
        text(limits.join(", ")),
        age(&q.metadata, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn quota(spec: Value) -> ResourceQuota {
        serde_json::from_value(
            json!({"metadata": {"name": "q", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    fn errors(q: &ResourceQuota) -> Vec<String> {
        let mut errs = Vec::new();
        q.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn valid_quotas() {
        let q = quota(
            json!({"hard": {"pods": "10", "requests.cpu": "1", "limits.memory": "2Gi",
            "count/deployments.apps": "5", "example.com/gpu": "2"},
            "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
        );
        assert_eq!(errors(&q), Vec::<String>::new());
        let q = quota(
            json!({"hard": {"pods": "3", "cpu": "1"}, "scopes": ["NotTerminating", "NotBestEffort"]}),
        );
        assert_eq!(errors(&q), Vec::<String>::new());
    }

    #[test]
    fn resources_and_quantities() {
        assert_eq!(
            errors(&quota(
                json!({"hard": {"pods": "1.5", "cpu": "-1", "widgets": "1", "memory": "lots"}})
            )),
            vec![
                "spec.hard[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "spec.hard[memory]: Invalid value: \"lots\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                "spec.hard[pods]: Invalid value: 1500m: must be an integer",
                "spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource type or fully qualified",
                "spec.hard[widgets]: Invalid value: \"widgets\": must be a standard resource for quota",
            ]
        );
    }

    #[test]
    fn scopes() {
        assert_eq!(
            errors(&quota(
                json!({"hard": {"services": "1"}, "scopes": ["BestEffort", "NotBestEffort", "Sometimes"]})
            )),
            vec![
                "spec.scopes: Invalid value: [\"BestEffort\", \"NotBestEffort\", \"Sometimes\"]: unsupported scope applied to resource",
                "spec.scopes: Invalid value: [\"BestEffort\", \"NotBestEffort\", \"Sometimes\"]: unsupported scope applied to resource",
                "spec.scopes: Invalid value: [\"BestEffort\", \"NotBestEffort\", \"Sometimes\"]: unsupported scope",
                "spec.scopes: Invalid value: [\"BestEffort\", \"NotBestEffort\", \"Sometimes\"]: conflicting scopes",
            ]
        );
        assert_eq!(
            errors(&quota(json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "Terminating", "operator": "In", "values": ["x"]},
                {"scopeName": "PriorityClass", "operator": "In"},
                {"scopeName": "PriorityClass", "operator": "Exists", "values": ["a"]},
                {"scopeName": "PriorityClass", "operator": "Gt", "values": ["a"]}]}}))),
            vec![
                "spec.scopeSelector.matchExpressions.operator: Invalid value: \"In\": must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
                "spec.scopeSelector.matchExpressions.values: Required value: must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                "spec.scopeSelector.matchExpressions.values: Invalid value: [\"a\"]: must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
                "spec.scopeSelector.matchExpressions.operator: Invalid value: \"Gt\": not a valid selector operator",
            ]
        );
        let old = quota(json!({"scopes": ["Terminating"]}));
        let new = quota(json!({"scopes": ["NotTerminating"]}));
        let mut errs = Vec::new();
        new.validate_update(&old, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec!["spec.scopes: Invalid value: [\"NotTerminating\"]: field is immutable"]
        );
    }

    #[test]
    fn resource_quota_row() {
        let q = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
            "spec": {"hard": {"pods": "10"}},
            "status": {"hard": {"pods": "10", "requests.cpu": "1", "limits.cpu": "2", "limits.memory": "2048Mi"},
                       "used": {"pods": "3", "requests.cpu": "500m", "limits.memory": "1Gi"}}});
        assert_eq!(
            row_of::<ResourceQuota>(q),
            vec![
                json!("compute"),
                json!("pods: 3/10, requests.cpu: 500m/1"),
                json!("limits.cpu: 0/2, limits.memory: 1Gi/2Gi"),
                json!("<unknown>")
            ]
        );
        let fresh = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}});
        assert_eq!(row_of::<ResourceQuota>(fresh)[1..3], [json!(""), json!("")]);
    }
}
