//! Upstream's PodSecurity admission plugin (`k8s.io/pod-security-admission`, as kube-apiserver
//! runs it): each namespace picks, by label, the Pod Security Standard it enforces, audits
//! and warns about. Pods that break the enforced level are refused; pods and the workloads
//! that template them (Deployments, Jobs, ...) earn a warning for the warn level, so a
//! workload that could never start its pods is flagged when it is written rather than when
//! its controller fails. Namespaces are checked too: their labels must parse, and tightening
//! the enforced level warns about the pods already running there that it would refuse.
//!
//! It is a validating plugin: pods are judged as they will be stored, after every default
//! and mutation ([`Phase::Final`]).

pub mod api;
pub mod checks;
pub mod config;
pub mod evaluator;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, OnceLock, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    Namespace, Pod, PodSpec, PodTemplate, PodTemplateSpec, ReplicationController,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::validation::FieldError;
use minik8s_api::{ApiError, Target};

use crate::registry::generic::{
    CreateAdmission, GenericRegistry, ListQuery, Part, Phase, UpdateAdmission,
};
use api::{AUDIT_ANNOTATION_PREFIX, Level, LevelVersion, Policy};
use evaluator::{Evaluator, Verdict};

pub const PLUGIN_NAME: &str = "PodSecurity";

/// How many existing pods a namespace update checks, and for how long (upstream's limits).
const NAMESPACE_MAX_PODS: usize = 3000;
const NAMESPACE_POD_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Who and what is never checked (upstream's `PodSecurityConfiguration.exemptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exemptions {
    pub usernames: Vec<String>,
    pub runtime_classes: Vec<String>,
    pub namespaces: Vec<String>,
}

/// The plugin's configuration: the policy of unlabelled namespaces and the exemptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Configuration {
    pub defaults: Policy,
    pub exemptions: Exemptions,
}

/// What every part of the plugin shares.
pub struct PodSecurity {
    config: Configuration,
    evaluator: Evaluator,
}

impl PodSecurity {
    /// `emulated`: the server's minor version, which `latest` means.
    pub fn new(config: Configuration, emulated: Option<u64>) -> Arc<Self> {
        Arc::new(PodSecurity {
            config,
            evaluator: Evaluator::new(emulated),
        })
    }

    fn exempt_namespace(&self, ns: &str) -> bool {
        !ns.is_empty() && self.config.exemptions.namespaces.iter().any(|n| n == ns)
    }

    fn exempt_user(&self) -> bool {
        let Some(caller) = crate::admission::webhook::current_caller() else {
            return false;
        };
        let name = &caller.user.name;
        !name.is_empty() && self.config.exemptions.usernames.contains(name)
    }

    fn exempt_runtime_class(&self, spec: &PodSpec) -> bool {
        spec.runtime_class_name.as_deref().is_some_and(|rc| {
            !rc.is_empty()
                && self
                    .config
                    .exemptions
                    .runtime_classes
                    .iter()
                    .any(|e| e == rc)
        })
    }

    fn policy(&self, labels: Option<&BTreeMap<String, String>>) -> (Policy, Vec<FieldError>) {
        api::policy_to_evaluate(labels, self.config.defaults)
    }

    fn evaluate(&self, lv: LevelVersion, meta: &ObjectMeta, spec: &PodSpec) -> Verdict {
        self.evaluator.evaluate(lv, meta, spec)
    }

    /// Upstream's `EvaluatePod`: refuses (when `enforce`) a pod that breaks the enforced
    /// level, warns about the warn level, and records what the audit level finds.
    fn evaluate_pod(
        &self,
        policy: &Policy,
        policy_errors: &[FieldError],
        meta: &ObjectMeta,
        spec: &PodSpec,
        enforce: bool,
    ) -> Result<(), String> {
        if self.exempt_runtime_class(spec) {
            audit(&[("exempt", "runtimeClass".into())]);
            return Ok(());
        }
        let mut annotations = Vec::new();
        if !policy_errors.is_empty() {
            annotations.push((
                "error",
                format!("Failed to parse policy: {}", aggregate(policy_errors)),
            ));
        }
        let mut cached: Vec<(LevelVersion, Verdict)> = Vec::new();
        let mut result = Ok(());
        if enforce {
            annotations.push(("enforce-policy", policy.enforce.to_string()));
            let verdict = self.evaluate(policy.enforce, meta, spec);
            if !verdict.allowed() {
                result = Err(format!(
                    "violates PodSecurity {:?}: {}",
                    policy.enforce.to_string(),
                    verdict.details()
                ));
            }
            cached.push((policy.enforce, verdict));
        }
        let mut verdict_of = |lv: LevelVersion| match cached.iter().find(|(l, _)| *l == lv) {
            Some((_, v)) => v.clone(),
            None => {
                let v = self.evaluate(lv, meta, spec);
                cached.push((lv, v.clone()));
                v
            }
        };
        let audited = verdict_of(policy.audit);
        if !audited.allowed() {
            annotations.push((
                "audit-violations",
                format!(
                    "would violate PodSecurity {:?}: {}",
                    policy.audit.to_string(),
                    audited.details()
                ),
            ));
        }
        // A request about to be refused gets no warnings.
        if result.is_ok() {
            let warned = verdict_of(policy.warn);
            if !warned.allowed() {
                crate::admission::webhook::warn(format!(
                    "would violate PodSecurity {:?}: {}",
                    policy.warn.to_string(),
                    warned.details()
                ));
            }
        }
        audit(&annotations);
        result
    }
}

/// Errors joined as Go's `ErrorList.ToAggregate()` prints them.
fn aggregate(errs: &[FieldError]) -> String {
    let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    match text.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Adds `pod-security.kubernetes.io/*` annotations to the request's audit event.
fn audit(annotations: &[(&str, String)]) {
    for (key, value) in annotations {
        crate::audit::annotate(&format!("{AUDIT_ANNOTATION_PREFIX}{key}"), value);
    }
}

/// Objects that carry a pod spec: pods themselves and the kinds that template pods.
pub trait PodSpecSource: Send + Sync + 'static {
    const RESOURCE: &'static str;
    const GROUP: &'static str;
    fn meta(&self) -> &ObjectMeta;
    /// The pod's (or the template's) metadata and spec; `None` without a template.
    fn pod(&self) -> Option<(&ObjectMeta, &PodSpec)>;
}

static NO_META: LazyLock<ObjectMeta> = LazyLock::new(ObjectMeta::default);
static NO_SPEC: LazyLock<PodSpec> = LazyLock::new(PodSpec::default);

fn template(t: &PodTemplateSpec) -> (&ObjectMeta, &PodSpec) {
    (
        t.metadata.as_ref().unwrap_or(&NO_META),
        t.spec.as_ref().unwrap_or(&NO_SPEC),
    )
}

impl PodSpecSource for Pod {
    const RESOURCE: &'static str = "pods";
    const GROUP: &'static str = "";
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn pod(&self) -> Option<(&ObjectMeta, &PodSpec)> {
        Some((&self.metadata, self.spec.as_ref().unwrap_or(&NO_SPEC)))
    }
}

macro_rules! templated {
    ($kind:ty, $group:literal, $resource:literal, |$o:ident| $template:expr) => {
        impl PodSpecSource for $kind {
            const RESOURCE: &'static str = $resource;
            const GROUP: &'static str = $group;
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn pod(&self) -> Option<(&ObjectMeta, &PodSpec)> {
                let $o = self;
                $template.map(template)
            }
        }
    };
}

templated!(PodTemplate, "", "podtemplates", |o| o.template.as_ref());
templated!(ReplicationController, "", "replicationcontrollers", |o| o
    .spec
    .as_ref()
    .and_then(|s| s.template.as_ref()));
templated!(ReplicaSet, "apps", "replicasets", |o| o
    .spec
    .as_ref()
    .and_then(|s| s.template.as_ref()));
templated!(Deployment, "apps", "deployments", |o| o
    .spec
    .as_ref()
    .map(|s| &s.template));
templated!(DaemonSet, "apps", "daemonsets", |o| o
    .spec
    .as_ref()
    .map(|s| &s.template));
templated!(StatefulSet, "apps", "statefulsets", |o| o
    .spec
    .as_ref()
    .map(|s| &s.template));
templated!(Job, "batch", "jobs", |o| o
    .spec
    .as_ref()
    .map(|s| &s.template));
templated!(CronJob, "batch", "cronjobs", |o| o
    .spec
    .as_ref()
    .and_then(|s| s.job_template.spec.as_ref())
    .map(|s| &s.template));

/// The plugin for pods (enforced) and pod-templating kinds (warned and audited only).
pub struct PodAdmission {
    core: Arc<PodSecurity>,
    namespaces: Arc<GenericRegistry<BuiltIn<Namespace>>>,
}

impl PodAdmission {
    pub fn new(
        core: Arc<PodSecurity>,
        namespaces: Arc<GenericRegistry<BuiltIn<Namespace>>>,
    ) -> Arc<Self> {
        Arc::new(PodAdmission { core, namespaces })
    }

    async fn admit<K: PodSpecSource>(&self, obj: &K) -> Result<(), ApiError> {
        let ns = obj.meta().namespace.as_deref().unwrap_or_default();
        if self.core.exempt_namespace(ns) {
            audit(&[("exempt", "namespace".into())]);
            return Ok(());
        }
        if self.core.exempt_user() {
            audit(&[("exempt", "user".into())]);
            return Ok(());
        }
        let is_pod = K::RESOURCE == "pods";
        let namespace = match self.namespaces.get(None, ns).await {
            Ok(namespace) => namespace,
            // Templates are only warned about: a missing namespace does not refuse them.
            Err(e) if !is_pod => {
                tracing::debug!(namespace = ns, error = %e.message, "pod security: namespace lookup");
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(namespace = ns, error = %e.message, "pod security: namespace lookup");
                return Err(ApiError::internal(format!(
                    "failed to lookup namespace {ns:?}"
                )));
            }
        };
        let (policy, errs) = self.core.policy(namespace.metadata.labels.as_ref());
        let quiet = if is_pod {
            policy.fully_privileged()
        } else {
            policy.warn.level == Level::Privileged && policy.audit.level == Level::Privileged
        };
        if errs.is_empty() && quiet {
            if is_pod {
                audit(&[(
                    "enforce-policy",
                    LevelVersion::PRIVILEGED_LATEST.to_string(),
                )]);
            }
            return Ok(());
        }
        let Some((meta, spec)) = obj.pod() else {
            return Ok(());
        };
        self.core
            .evaluate_pod(&policy, &errs, meta, spec, is_pod)
            .map_err(|why| {
                ApiError::forbidden(
                    Target {
                        group: K::GROUP,
                        resource: K::RESOURCE,
                        name: super::name_in_errors(obj.meta()),
                    },
                    &why,
                )
            })
    }
}

#[async_trait]
impl<K: PodSpecSource> CreateAdmission<K> for PodAdmission {
    fn phase(&self) -> Phase {
        Phase::Final
    }

    async fn admit(&self, obj: &mut K, _dry_run: bool) -> Result<(), ApiError> {
        PodAdmission::admit(self, obj).await
    }
}

#[async_trait]
impl<K: PodSpecSource + 'static> UpdateAdmission<K> for PodAdmission
where
    K: SignificantUpdate,
{
    /// Pods are checked when their ephemeral containers change, too.
    fn admits(&self, part: Part) -> bool {
        part == Part::Main || (K::RESOURCE == "pods" && part == Part::EphemeralContainers)
    }

    async fn admit_update(&self, new: &mut K, old: &K, _dry_run: bool) -> Result<(), ApiError> {
        if !new.significant(old) {
            return Ok(());
        }
        PodAdmission::admit(self, new).await
    }
}

/// Which updates are evaluated again: any of a template's, but of a pod's only those that
/// change what the checks could see (upstream's `isSignificantPodUpdate`: the other fields
/// of a running pod's spec cannot change).
pub trait SignificantUpdate {
    fn significant(&self, _old: &Self) -> bool {
        true
    }
}

impl SignificantUpdate for PodTemplate {}
impl SignificantUpdate for ReplicationController {}
impl SignificantUpdate for ReplicaSet {}
impl SignificantUpdate for Deployment {}
impl SignificantUpdate for DaemonSet {}
impl SignificantUpdate for StatefulSet {}
impl SignificantUpdate for Job {}
impl SignificantUpdate for CronJob {}

impl SignificantUpdate for Pod {
    fn significant(&self, old: &Pod) -> bool {
        let (Some(new), Some(old)) = (self.spec.as_ref(), old.spec.as_ref()) else {
            return true;
        };
        let images = |cs: &[k8s_openapi::api::core::v1::Container]| {
            cs.iter().map(|c| c.image.clone()).collect::<Vec<_>>()
        };
        let init = |s: &PodSpec| images(s.init_containers.as_deref().unwrap_or_default());
        if images(&new.containers) != images(&old.containers) || init(new) != init(old) {
            return true;
        }
        let old_ephemeral = old.ephemeral_containers.as_deref().unwrap_or_default();
        new.ephemeral_containers.iter().flatten().any(|c| {
            old_ephemeral
                .iter()
                .find(|o| o.name == c.name)
                .is_none_or(|o| o.image != c.image)
        })
    }
}

/// The plugin for namespaces: valid labels, and warnings about existing pods when the
/// enforced level tightens. Pods are registered after namespaces, so they are set later.
pub struct NamespaceAdmission {
    core: Arc<PodSecurity>,
    pods: OnceLock<Weak<GenericRegistry<BuiltIn<Pod>>>>,
}

impl NamespaceAdmission {
    pub fn new(core: Arc<PodSecurity>) -> Arc<Self> {
        Arc::new(NamespaceAdmission {
            core,
            pods: OnceLock::new(),
        })
    }

    /// Where existing pods are read from, once pods are served.
    pub fn set_pods(&self, pods: &Arc<GenericRegistry<BuiltIn<Pod>>>) {
        let _ = self.pods.set(Arc::downgrade(pods));
    }

    /// Upstream's warning for an exempt namespace that labels a policy it will not get.
    fn exempt_warning(&self, ns: &Namespace, policy: &Policy) -> Option<String> {
        if policy.fully_privileged() || policy.equivalent(&self.core.config.defaults) {
            return None;
        }
        let labels = ns.metadata.labels.as_ref();
        let has = |a: &str, b: &str| labels.is_some_and(|l| l.contains_key(a) || l.contains_key(b));
        let modes = [
            (
                "enforce",
                policy.enforce,
                has(api::ENFORCE_LEVEL_LABEL, api::ENFORCE_VERSION_LABEL),
            ),
            (
                "audit",
                policy.audit,
                has(api::AUDIT_LEVEL_LABEL, api::AUDIT_VERSION_LABEL),
            ),
            (
                "warn",
                policy.warn,
                has(api::WARN_LEVEL_LABEL, api::WARN_VERSION_LABEL),
            ),
        ];
        let set: Vec<String> = modes
            .iter()
            .filter(|(_, lv, labelled)| lv.level != Level::Privileged && *labelled)
            .map(|(mode, lv, _)| format!("{mode}={lv}"))
            .collect();
        Some(format!(
            "namespace {:?} is exempt from Pod Security, and the policy ({}) will be ignored",
            ns.metadata.name.as_deref().unwrap_or_default(),
            set.join(", ")
        ))
    }

    fn invalid(ns: &Namespace, errs: &[FieldError]) -> ApiError {
        ApiError::invalid(
            "Namespace",
            "",
            ns.metadata.name.as_deref().unwrap_or_default(),
            errs,
        )
    }

    /// Upstream's `EvaluatePodsInNamespace`: one warning per distinct set of reasons,
    /// naming the first pod (by name) and how many others share it.
    async fn existing_pods(&self, ns: &str, enforce: LevelVersion) -> Vec<String> {
        let Some(pods) = self.pods.get().and_then(Weak::upgrade) else {
            return Vec::new();
        };
        let deadline = Instant::now() + NAMESPACE_POD_CHECK_TIMEOUT;
        let pods = match pods.list(Some(ns), &ListQuery::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(namespace = ns, error = %e.message, "pod security: listing pods");
                return vec![
                    "failed to list pods while checking new PodSecurity enforce level".to_string(),
                ];
            }
        };
        let mut pods = self.prioritize(pods);
        let total = pods.len();
        pods.truncate(NAMESPACE_MAX_PODS);
        let mut checked = pods.len();
        // Reasons in the order first seen → (first pod name, pod count).
        let mut seen: Vec<(String, String, usize)> = Vec::new();
        for (i, pod) in pods.iter().enumerate() {
            let spec = pod.spec.as_ref().unwrap_or(&NO_SPEC);
            let verdict = self.core.evaluate(enforce, &pod.metadata, spec);
            if !verdict.allowed() {
                let reasons = verdict.reasons();
                let name = pod.metadata.name.clone().unwrap_or_default();
                match seen.iter_mut().find(|(r, _, _)| *r == reasons) {
                    Some((_, first, count)) => {
                        if name < *first {
                            *first = name;
                        }
                        *count += 1;
                    }
                    None => seen.push((reasons, name, 1)),
                }
            }
            if Instant::now() > deadline {
                checked = i + 1;
                break;
            }
        }
        let mut warnings = Vec::new();
        if checked < total {
            warnings.push(format!(
                "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
            ));
        }
        if !seen.is_empty() {
            warnings.push(format!(
                "existing pods in namespace {ns:?} violate the new PodSecurity enforce level {:?}",
                enforce.to_string()
            ));
        }
        let mut decorated: Vec<String> = seen
            .into_iter()
            .map(|(reasons, first, count)| match count {
                1 => format!("{first}: {reasons}"),
                2 => format!("{first} (and 1 other pod): {reasons}"),
                n => format!("{first} (and {} other pods): {reasons}", n - 1),
            })
            .collect();
        decorated.sort();
        warnings.extend(decorated);
        warnings
    }

    /// Pods of exempt runtime classes left out; one pod per controller first, the other
    /// replicas after, so a time-limited check sees as many distinct pods as it can.
    fn prioritize(&self, pods: Vec<Pod>) -> Vec<Pod> {
        let mut first = Vec::new();
        let mut replicas = Vec::new();
        let mut controllers = HashSet::new();
        for pod in pods {
            if pod
                .spec
                .as_ref()
                .is_some_and(|s| self.core.exempt_runtime_class(s))
            {
                continue;
            }
            let controller = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.controller == Some(true))
                .map(|r| r.uid.clone());
            match controller {
                Some(uid) if controllers.contains(&uid) => replicas.push(pod),
                Some(uid) => {
                    controllers.insert(uid);
                    first.push(pod);
                }
                None => first.push(pod),
            }
        }
        first.extend(replicas);
        first
    }
}

#[async_trait]
impl CreateAdmission<Namespace> for NamespaceAdmission {
    fn phase(&self) -> Phase {
        Phase::Final
    }

    async fn admit(&self, ns: &mut Namespace, _dry_run: bool) -> Result<(), ApiError> {
        let (policy, errs) = self.core.policy(ns.metadata.labels.as_ref());
        if !errs.is_empty() {
            return Err(Self::invalid(ns, &errs));
        }
        let name = ns.metadata.name.as_deref().unwrap_or_default();
        if self.core.exempt_namespace(name)
            && let Some(w) = self.exempt_warning(ns, &policy)
        {
            crate::admission::webhook::warn(w);
        }
        Ok(())
    }
}

#[async_trait]
impl UpdateAdmission<Namespace> for NamespaceAdmission {
    async fn admit_update(
        &self,
        ns: &mut Namespace,
        old: &Namespace,
        _dry_run: bool,
    ) -> Result<(), ApiError> {
        let (policy, errs) = self.core.policy(ns.metadata.labels.as_ref());
        let (old_policy, old_errs) = self.core.policy(old.metadata.labels.as_ref());
        // Labels that were already invalid do not block other changes to the namespace.
        if !errs.is_empty() && errs != old_errs {
            return Err(Self::invalid(ns, &errs));
        }
        let (new, was) = (policy.enforce, old_policy.enforce);
        if new == was
            || new.level == Level::Privileged
            || (new.version == was.version && new.level <= was.level)
        {
            return Ok(());
        }
        let name = ns.metadata.name.clone().unwrap_or_default();
        if self.core.exempt_namespace(&name) {
            if let Some(w) = self.exempt_warning(ns, &policy) {
                crate::admission::webhook::warn(w);
            }
            return Ok(());
        }
        for w in self.existing_pods(&name, new).await {
            crate::admission::webhook::warn(w);
        }
        Ok(())
    }
}

/// The plugin's halves as a server wires them: namespaces are served before pods, so the
/// namespace half is built first and the pod half once namespaces can be read.
pub struct Plugins {
    core: Arc<PodSecurity>,
    pub namespaces: Arc<NamespaceAdmission>,
}

impl Plugins {
    /// `None` when the plugin is disabled.
    pub fn new(options: &super::AdmissionOptions) -> Option<Self> {
        if !options.enabled(PLUGIN_NAME) {
            return None;
        }
        let emulated = crate::server::version_info().minor.parse().ok();
        let core = PodSecurity::new(options.pod_security.clone(), emulated);
        Some(Plugins {
            namespaces: NamespaceAdmission::new(core.clone()),
            core,
        })
    }

    pub fn for_pods(
        &self,
        namespaces: Arc<GenericRegistry<BuiltIn<Namespace>>>,
    ) -> Arc<PodAdmission> {
        PodAdmission::new(self.core.clone(), namespaces)
    }
}

/// `registry` (pods, or a kind that templates pods) judged by `plugin`.
pub fn attach<K>(
    registry: GenericRegistry<BuiltIn<K>>,
    plugin: Option<&Arc<PodAdmission>>,
) -> GenericRegistry<BuiltIn<K>>
where
    K: minik8s_api::strategy::Kind + PodSpecSource + SignificantUpdate,
{
    match plugin {
        Some(p) => registry
            .with_admission(p.clone())
            .with_update_admission(p.clone()),
        None => registry,
    }
}

#[cfg(test)]
mod tests;
