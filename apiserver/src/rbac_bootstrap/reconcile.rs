//! Bringing the stored bootstrap policy up to date at start, as upstream's
//! `rbac/bootstrap-roles` post-start hook and its `reconciliation` package do: what is missing
//! is created; a role missing a default rule gets it back, a binding missing a default subject
//! gets it back, and the default labels and annotations are restored; what an administrator
//! added stays. An object annotated `rbac.authorization.kubernetes.io/autoupdate: "false"` is
//! left alone. A binding whose roleRef changed (which cannot be updated) is recreated.
//!
//! The decisions are pure ([`compute_reconciled_role`], [`compute_reconciled_binding`]); the
//! applier writes them through the served registries, so they are validated and stored as any
//! client's writes. As upstream, a failure is logged and the rest goes on: a server whose
//! defaults cannot be written still serves, and the next start tries again.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Preconditions};
use minik8s_api::ApiError;
use minik8s_api::strategy::Kind;

use super::{AUTOUPDATE_ANNOTATION, Policy, RBAC_GROUP};
use crate::authz::escalation::not_covered;
use crate::registry::generic::{DeleteOpts, Part};
use crate::server::ApiServer;

/// What reconciling one object needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    None,
    Create,
    Update,
    /// Delete and create again: a binding's roleRef cannot change.
    Recreate,
}

/// The role to write, and why.
#[derive(Clone, Debug)]
pub struct RoleResult<R> {
    pub role: R,
    /// The expected rules (broken down to single permissions) the stored role lacked.
    pub missing_rules: Vec<PolicyRule>,
    pub operation: Operation,
    /// The stored role opted out (`autoupdate: "false"`): nothing is written.
    pub protected: bool,
}

/// The binding to write, and why.
#[derive(Clone, Debug)]
pub struct BindingResult<B> {
    pub binding: B,
    pub missing_subjects: Vec<Subject>,
    pub operation: Operation,
    pub protected: bool,
}

/// A Role or ClusterRole, as reconciliation reads it (upstream's `RuleOwner`).
pub trait RuleOwner: Kind {
    fn rules(&self) -> &[PolicyRule];
    fn set_rules(&mut self, rules: Vec<PolicyRule>);
    fn aggregation(&self) -> Option<&AggregationRule> {
        None
    }
    fn set_aggregation(&mut self, _: Option<AggregationRule>) {}
}

impl RuleOwner for ClusterRole {
    fn rules(&self) -> &[PolicyRule] {
        self.rules.as_deref().unwrap_or_default()
    }
    fn set_rules(&mut self, rules: Vec<PolicyRule>) {
        self.rules = Some(rules);
    }
    fn aggregation(&self) -> Option<&AggregationRule> {
        self.aggregation_rule.as_ref()
    }
    fn set_aggregation(&mut self, rule: Option<AggregationRule>) {
        self.aggregation_rule = rule;
    }
}

impl RuleOwner for Role {
    fn rules(&self) -> &[PolicyRule] {
        self.rules.as_deref().unwrap_or_default()
    }
    fn set_rules(&mut self, rules: Vec<PolicyRule>) {
        self.rules = Some(rules);
    }
}

/// A RoleBinding or ClusterRoleBinding, as reconciliation reads it.
pub trait SubjectOwner: Kind {
    fn role_ref(&self) -> &RoleRef;
    fn subjects(&self) -> &[Subject];
    fn set_subjects(&mut self, subjects: Vec<Subject>);
}

macro_rules! subject_owner {
    ($kind:ty) => {
        impl SubjectOwner for $kind {
            fn role_ref(&self) -> &RoleRef {
                &self.role_ref
            }
            fn subjects(&self) -> &[Subject] {
                self.subjects.as_deref().unwrap_or_default()
            }
            fn set_subjects(&mut self, subjects: Vec<Subject>) {
                self.subjects = Some(subjects);
            }
        }
    };
}
subject_owner!(ClusterRoleBinding);
subject_owner!(RoleBinding);

fn protected(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(AUTOUPDATE_ANNOTATION))
        .is_some_and(|v| v == "false")
}

/// Both maps, the stored values winning (upstream's `merge(expected, existing)`).
fn merge(
    expected: &Option<BTreeMap<String, String>>,
    existing: &Option<BTreeMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    if expected.is_none() && existing.is_none() {
        return None;
    }
    let mut out = expected.clone().unwrap_or_default();
    out.extend(existing.clone().unwrap_or_default());
    Some(out)
}

/// Restores the expected labels and annotations on `into`; whether anything changed.
fn merge_metadata(into: &mut ObjectMeta, expected: &ObjectMeta) -> bool {
    let annotations = merge(&expected.annotations, &into.annotations);
    let labels = merge(&expected.labels, &into.labels);
    let changed = annotations != into.annotations || labels != into.labels;
    into.annotations = annotations;
    into.labels = labels;
    changed
}

/// The selectors of `expected` that `existing` lacks (upstream's `aggregationRuleCovers`).
fn missing_selectors(
    existing: Option<&AggregationRule>,
    expected: Option<&AggregationRule>,
) -> Vec<LabelSelector> {
    let selectors = |r: Option<&AggregationRule>| {
        r.and_then(|r| r.cluster_role_selectors.clone())
            .unwrap_or_default()
    };
    let have = selectors(existing);
    selectors(expected)
        .into_iter()
        .filter(|s| !have.contains(s))
        .collect()
}

/// What it takes for the stored `existing` to hold everything `expected` grants, keeping what
/// it has besides (upstream's `computeReconciledRole` without removing extra permissions).
pub fn compute_reconciled_role<R: RuleOwner>(existing: &R, expected: &R) -> RoleResult<R> {
    let mut role = existing.clone();
    let mut operation = Operation::None;
    if merge_metadata(role.metadata_mut(), expected.metadata()) {
        operation = Operation::Update;
    }
    let missing_rules = not_covered(existing.rules(), expected.rules());
    if !missing_rules.is_empty() {
        let mut rules = existing.rules().to_vec();
        rules.extend(missing_rules.iter().cloned());
        role.set_rules(rules);
        operation = Operation::Update;
    }
    let selectors = missing_selectors(existing.aggregation(), expected.aggregation());
    if expected.aggregation().is_none() && existing.aggregation().is_some() {
        // Not an aggregated role by default: the aggregation goes.
        role.set_aggregation(None);
        operation = Operation::Update;
    } else if !selectors.is_empty() {
        let mut rule = existing.aggregation().cloned().unwrap_or_default();
        rule.cluster_role_selectors
            .get_or_insert_with(Vec::new)
            .extend(selectors);
        role.set_aggregation(Some(rule));
        operation = Operation::Update;
    }
    RoleResult {
        role,
        missing_rules,
        operation,
        protected: protected(existing.metadata()),
    }
}

/// A subject as stored: an empty apiGroup or namespace is the same as none.
fn same_subject(a: &Subject, b: &Subject) -> bool {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    a.kind == b.kind
        && a.name == b.name
        && s(&a.api_group) == s(&b.api_group)
        && s(&a.namespace) == s(&b.namespace)
}

/// What it takes for the stored binding to bind everyone `expected` binds, keeping the
/// subjects it has besides (upstream's `computeReconciledRoleBinding` in union mode).
pub fn compute_reconciled_binding<B: SubjectOwner>(existing: &B, expected: &B) -> BindingResult<B> {
    let protected = protected(existing.metadata());
    if existing.role_ref() != expected.role_ref() {
        return BindingResult {
            binding: expected.clone(),
            missing_subjects: expected.subjects().to_vec(),
            operation: Operation::Recreate,
            protected,
        };
    }
    let mut binding = existing.clone();
    let mut operation = Operation::None;
    if merge_metadata(binding.metadata_mut(), expected.metadata()) {
        operation = Operation::Update;
    }
    let mut missing_subjects: Vec<Subject> = Vec::new();
    for s in expected.subjects() {
        let held = existing.subjects().iter().any(|e| same_subject(e, s));
        if !held && !missing_subjects.iter().any(|m| same_subject(m, s)) {
            missing_subjects.push(s.clone());
        }
    }
    if !missing_subjects.is_empty() {
        let mut subjects = existing.subjects().to_vec();
        subjects.extend(missing_subjects.iter().cloned());
        binding.set_subjects(subjects);
        operation = Operation::Update;
    }
    BindingResult {
        binding,
        missing_subjects,
        operation,
        protected,
    }
}

/// How upstream's logs name an object: `clusterrole.rbac.authorization.k8s.io/admin`, with
/// ` in <namespace>` for namespaced ones.
fn describe<K: Kind>(obj: &K) -> String {
    let meta = obj.metadata();
    let name = meta.name.as_deref().unwrap_or_default();
    let kind = K::KIND.to_lowercase();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{kind}.{RBAC_GROUP}/{name} in {ns}"),
        None => format!("{kind}.{RBAC_GROUP}/{name}"),
    }
}

fn rule_list(rules: &[PolicyRule]) -> String {
    let items: Vec<String> = rules
        .iter()
        .map(crate::authz::escalation::compact)
        .collect();
    format!("[{}]", items.join(" "))
}

fn subject_list(subjects: &[Subject]) -> String {
    let items: Vec<String> = subjects
        .iter()
        .map(|s| format!("{}/{}", s.kind, s.name))
        .collect();
    format!("[{}]", items.join(" "))
}

/// Tries of one object: a write that races with another writer is decided again on what is
/// stored then (upstream's `RetryOnConflict` around a `run` that re-runs on AlreadyExists and
/// NotFound).
const ATTEMPTS: usize = 5;

fn retriable(e: &ApiError) -> bool {
    e.code == 409 || e.code == 404
}

/// Writes the bootstrap policy, creating and completing what is missing; failures are logged
/// and the rest goes on, as upstream's post-start hook does.
pub async fn reconcile(server: &ApiServer) {
    let Policy {
        cluster_roles,
        cluster_role_bindings,
        roles,
        role_bindings,
    } = super::policy();
    for role in cluster_roles {
        reconcile_role(server, role).await;
    }
    for binding in cluster_role_bindings {
        reconcile_binding(server, binding).await;
    }
    for role in roles {
        reconcile_role(server, role).await;
    }
    for binding in role_bindings {
        reconcile_binding(server, binding).await;
    }
}

/// Runs `once` until it succeeds, [`ATTEMPTS`] times at most while it fails with what
/// another writer causes; logs the last failure (a start goes on without it, as upstream's).
async fn retried<F, Fut>(what: String, mut once: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>>,
{
    let mut last = None;
    for _ in 0..ATTEMPTS {
        match once().await {
            Ok(()) => return,
            Err(e) if retriable(&e) => last = Some(e),
            Err(e) => {
                last = Some(e);
                break;
            }
        }
    }
    if let Some(e) = last {
        tracing::warn!(error = %e.message, "unable to reconcile {what}");
    }
}

/// The stored object of `expected`'s name, or `None` once `expected` was created (its
/// namespace first) because there was none.
async fn stored_or_created<K: Kind>(
    server: &ApiServer,
    expected: &K,
) -> Result<Option<K>, ApiError> {
    let registry = server.registry::<K>();
    let meta = expected.metadata();
    let (ns, name) = (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    );
    match registry.get(ns, name).await {
        Ok(existing) => Ok(Some(existing)),
        Err(e) if e.code == 404 => {
            ensure_namespace(server, ns).await?;
            registry.create(ns, expected.clone(), false).await?;
            tracing::info!("created {}", describe(expected));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

async fn reconcile_role<R: RuleOwner>(server: &ApiServer, expected: R) {
    retried(describe(&expected), || {
        reconcile_role_once(server, &expected)
    })
    .await
}

async fn reconcile_role_once<R: RuleOwner>(
    server: &ApiServer,
    expected: &R,
) -> Result<(), ApiError> {
    let registry = server.registry::<R>();
    let meta = expected.metadata();
    let (ns, name) = (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    );
    let Some(existing) = stored_or_created(server, expected).await? else {
        return Ok(());
    };
    let result = compute_reconciled_role(&existing, expected);
    match (result.protected, result.operation) {
        (_, Operation::None) => {}
        (true, _) => tracing::warn!(
            "skipped reconcile-protected {} with missing permissions: {}",
            describe(expected),
            rule_list(&result.missing_rules)
        ),
        (false, _) => {
            registry
                .update(ns, name, result.role, Part::Main, false)
                .await?;
            tracing::info!(
                "updated {} with additional permissions: {}",
                describe(expected),
                rule_list(&result.missing_rules)
            );
        }
    }
    Ok(())
}

async fn reconcile_binding<B: SubjectOwner>(server: &ApiServer, expected: B) {
    retried(describe(&expected), || {
        reconcile_binding_once(server, &expected)
    })
    .await
}

async fn reconcile_binding_once<B: SubjectOwner>(
    server: &ApiServer,
    expected: &B,
) -> Result<(), ApiError> {
    let registry = server.registry::<B>();
    let meta = expected.metadata();
    let (ns, name) = (
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    );
    let Some(existing) = stored_or_created(server, expected).await? else {
        return Ok(());
    };
    let result = compute_reconciled_binding(&existing, expected);
    match (result.protected, result.operation) {
        (_, Operation::None) => {}
        (true, _) => tracing::warn!(
            "skipped reconcile-protected {} with missing subjects: {}",
            describe(expected),
            subject_list(&result.missing_subjects)
        ),
        (false, Operation::Recreate) => {
            // Only the binding that was read goes: one written meanwhile is decided again.
            let opts = DeleteOpts {
                preconditions: Some(Preconditions {
                    uid: existing.metadata().uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            registry.delete(ns, name, &opts).await?;
            registry.create(ns, result.binding, false).await?;
            tracing::info!("recreated {}", describe(expected));
        }
        (false, _) => {
            registry
                .update(ns, name, result.binding, Part::Main, false)
                .await?;
            tracing::info!(
                "updated {} with additional subjects: {}",
                describe(expected),
                subject_list(&result.missing_subjects)
            );
        }
    }
    Ok(())
}

/// Creates the namespace of a namespaced default if it is missing (upstream's
/// `tryEnsureNamespace`).
async fn ensure_namespace(server: &ApiServer, namespace: Option<&str>) -> Result<(), ApiError> {
    let Some(namespace) = namespace else {
        return Ok(());
    };
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match server.registry::<Namespace>().create(None, ns, false).await {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}
