//! What a ResourceQuota counts (upstream's pkg/quota/v1/evaluator/core): pods and the compute
//! resources they ask for, Services, ConfigMaps, Secrets, claims, ReplicationControllers and
//! quotas, by the names `spec.hard` uses. Terminal pods, and pods stuck terminating past their
//! grace period, hold no compute resources, as upstream, so a lost node does not pin a
//! namespace at its quota.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, Pod, ResourceQuota, ScopedResourceSelectorRequirement, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{
    BEST_EFFORT, CROSS_NAMESPACE_POD_AFFINITY, NOT_BEST_EFFORT, NOT_TERMINATING, PRIORITY_CLASS,
    TERMINATING,
};
use crate::kinds::limit_range::enforce::{add, pod_totals};

type List = BTreeMap<String, Quantity>;

/// One object's share of a namespace's usage.
pub enum Usage<'a> {
    Pod(&'a Pod),
    /// Another kind, by its resource and group (`""` for core): its object count, and for
    /// Services and claims what their spec adds.
    Object {
        resource: &'a str,
        group: &'a str,
        extra: List,
    },
}

impl Usage<'static> {
    /// A Service: its count, and the load balancers and node ports it takes.
    pub fn service(svc: &Service) -> Self {
        let spec = svc.spec.clone().unwrap_or_default();
        let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
        let mut extra = List::new();
        if kind == "LoadBalancer" {
            extra.insert("services.loadbalancers".into(), one());
        }
        if kind == "NodePort" || kind == "LoadBalancer" {
            let ports = spec.ports.iter().flatten().count();
            extra.insert("services.nodeports".into(), Quantity(ports.to_string()));
        }
        Usage::Object {
            resource: "services",
            group: "",
            extra,
        }
    }

    /// A claim: its count and the storage it requests, overall and for its class.
    pub fn claim(claim: &PersistentVolumeClaim) -> Self {
        let spec = claim.spec.clone().unwrap_or_default();
        let storage = spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").cloned());
        let mut extra = List::new();
        if let Some(class) = spec.storage_class_name.filter(|c| !c.is_empty()) {
            let prefix = format!("{class}.storageclass.storage.k8s.io/");
            extra.insert(format!("{prefix}persistentvolumeclaims"), one());
            if let Some(s) = &storage {
                extra.insert(format!("{prefix}requests.storage"), s.clone());
            }
        }
        if let Some(s) = storage {
            extra.insert("requests.storage".into(), s);
        }
        Usage::Object {
            resource: "persistentvolumeclaims",
            group: "",
            extra,
        }
    }
}

impl Usage<'_> {
    fn resources(&self, now: Timestamp) -> List {
        match self {
            Usage::Pod(pod) => pod_usage(pod, now),
            Usage::Object {
                resource,
                group,
                extra,
            } => {
                let mut out = extra.clone();
                out.insert(count_name(resource, group), one());
                // The names from before `count/`, kept for the core kinds that had them.
                if group.is_empty()
                    && [
                        "services",
                        "configmaps",
                        "secrets",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "resourcequotas",
                    ]
                    .contains(resource)
                {
                    out.insert(resource.to_string(), one());
                }
                out
            }
        }
    }

    /// Whether this kind of object ever counts against `resource` (upstream's
    /// `MatchingResources`).
    fn counts(&self, resource: &str) -> bool {
        match self {
            Usage::Pod(_) => {
                resource == "pods"
                    || resource == "count/pods"
                    || ["cpu", "memory", "ephemeral-storage"].contains(&resource)
                    || resource.starts_with("requests.")
                    || resource.starts_with("limits.")
            }
            Usage::Object {
                resource: r,
                group,
                extra,
            } => {
                resource == count_name(r, group)
                    || (group.is_empty() && resource == *r)
                    || extra.contains_key(resource)
                    || (*r == "services" && resource.starts_with("services."))
                    || (*r == "persistentvolumeclaims"
                        && (resource == "requests.storage"
                            || resource.contains(".storageclass.storage.k8s.io/")))
            }
        }
    }

    /// Upstream's scope matching: scoped quotas track pods only.
    fn in_scopes(&self, quota: &ResourceQuota) -> bool {
        let selectors = scope_selectors(quota);
        match self {
            Usage::Pod(pod) => selectors.iter().all(|s| pod_in_scope(pod, s)),
            Usage::Object { .. } => selectors.is_empty(),
        }
    }
}

fn one() -> Quantity {
    Quantity("1".into())
}

/// `count/<resource>` for core kinds, `count/<resource>.<group>` for the others.
fn count_name(resource: &str, group: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// What `quota` has used of what it limits, from every object of its namespace: each
/// resource of `spec.hard`, zero when nothing uses it.
pub fn used<'a>(
    quota: &ResourceQuota,
    objects: impl IntoIterator<Item = Usage<'a>>,
    now: Timestamp,
) -> List {
    let hard = quota
        .spec
        .as_ref()
        .and_then(|s| s.hard.clone())
        .unwrap_or_default();
    let mut total = List::new();
    for o in objects {
        if o.in_scopes(quota) {
            let counted: List = o
                .resources(now)
                .into_iter()
                .filter(|(k, _)| hard.contains_key(k))
                .collect();
            add(&mut total, &counted);
        }
    }
    hard.keys()
        .map(|k| {
            (
                k.clone(),
                total.get(k).cloned().unwrap_or(Quantity("0".into())),
            )
        })
        .collect()
}

/// Upstream's quota admission for one quota and one new object: `Ok(None)` when the quota
/// does not count it, `Ok(Some(used))` with the quota's usage once the object is charged, or
/// `Err` with upstream's reason (the text after `is forbidden: `) when it may not be created.
pub fn charge(
    quota: &ResourceQuota,
    object: &Usage,
    now: Timestamp,
) -> Result<Option<List>, String> {
    if !object.in_scopes(quota) {
        return Ok(None);
    }
    charge_resources(quota, object, object.resources(now))
}

/// What an update asks of `quota` (upstream's quota admission of updates): only what the
/// `new` object uses more of than the `old` one is charged (a claim grown, a Service turned
/// NodePort); `Ok(None)` when it uses no more. What it uses less of is left to the
/// controller's recount.
pub fn charge_update(
    quota: &ResourceQuota,
    new: &Usage,
    old: &Usage,
    now: Timestamp,
) -> Result<Option<List>, String> {
    if !new.in_scopes(quota) {
        return Ok(None);
    }
    let before = if old.in_scopes(quota) {
        old.resources(now)
    } else {
        List::new()
    };
    let increase: List = new
        .resources(now)
        .into_iter()
        .filter_map(|(k, v)| {
            if milli(&v) <= before.get(&k).map_or(0, milli) {
                return None;
            }
            let parse = |q: &Quantity| crate::quantity::Quantity::parse(&q.0);
            let more = match before.get(&k).and_then(parse) {
                Some(old) => parse(&v)?.sub(&old)?.canonical()?,
                None => canonical(&v),
            };
            Some((k, Quantity(more)))
        })
        .collect();
    if increase.is_empty() {
        return Ok(None);
    }
    charge_resources(quota, new, increase)
}

/// `quota`'s usage once `delta` (what `object` adds) is charged, or upstream's refusal.
fn charge_resources(
    quota: &ResourceQuota,
    object: &Usage,
    delta: List,
) -> Result<Option<List>, String> {
    let name = quota.metadata.name.as_deref().unwrap_or_default();
    let status = quota.status.clone().unwrap_or_default();
    let hard = status.hard.unwrap_or_default();
    let used = status.used.unwrap_or_default();
    let limited: Vec<&String> = hard.keys().filter(|k| object.counts(k)).collect();
    if let Usage::Pod(pod) = object
        && let Some(missing) = unspecified(pod, &limited)
    {
        return Err(format!("failed quota: {name}: must specify {missing}"));
    }
    let unknown: Vec<&str> = limited
        .iter()
        .filter(|k| !used.contains_key(k.as_str()))
        .map(|k| k.as_str())
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "status unknown for quota: {name}, resources: {}",
            unknown.join(",")
        ));
    }
    let requested: List = delta
        .into_iter()
        .filter(|(k, v)| hard.contains_key(k) && milli(v) != 0)
        .collect();
    if requested.is_empty() {
        return Ok(None);
    }
    let mut new_used = used.clone();
    add(&mut new_used, &requested);
    let exceeded: Vec<&String> = requested
        .keys()
        .filter(|k| milli(&new_used[k.as_str()]) > milli(&hard[k.as_str()]))
        .collect();
    if !exceeded.is_empty() {
        let show = |list: &List| {
            exceeded
                .iter()
                .map(|k| {
                    let v = list.get(k.as_str()).map_or("0".to_string(), canonical);
                    format!("{k}={v}")
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        return Err(format!(
            "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
            show(&requested),
            show(&used),
            show(&hard)
        ));
    }
    Ok(Some(new_used))
}

fn milli(q: &Quantity) -> i128 {
    crate::quantity::Quantity::parse(&q.0).map_or(0, |p| p.milli_value())
}

fn canonical(q: &Quantity) -> String {
    crate::quantity::Quantity::parse(&q.0)
        .and_then(|p| p.canonical())
        .unwrap_or_else(|| q.0.clone())
}

/// Upstream's pod `Constraints`: a quota on cpu or memory needs every container to state the
/// matching request or limit (`limits.cpu for: a,b; requests.memory for: a`).
fn unspecified(pod: &Pod, limited: &[&String]) -> Option<String> {
    const CHECKED: &[&str] = &[
        "cpu",
        "memory",
        "requests.cpu",
        "requests.memory",
        "limits.cpu",
        "limits.memory",
    ];
    let spec = pod.spec.as_ref()?;
    let mut missing: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let r = c.resources.clone().unwrap_or_default();
        let (requests, limits) = (r.requests.unwrap_or_default(), r.limits.unwrap_or_default());
        for k in limited
            .iter()
            .map(|k| k.as_str())
            .filter(|k| CHECKED.contains(k))
        {
            let stated = match k.strip_prefix("limits.") {
                Some(l) => limits.contains_key(l),
                None => requests.contains_key(k.strip_prefix("requests.").unwrap_or(k)),
            };
            if !stated {
                let names = missing.entry(k).or_default();
                if !names.contains(&c.name.as_str()) {
                    names.push(&c.name);
                }
            }
        }
    }
    (!missing.is_empty()).then(|| {
        missing
            .iter()
            .map(|(k, names)| {
                let mut names = names.clone();
                names.sort();
                format!("{k} for: {}", names.join(","))
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// Upstream's `QuotaV1Pod`: a pod holds compute resources until it ends, or until it has
/// been terminating for longer than its grace period.
fn pod_holds_resources(pod: &Pod, now: Timestamp) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    if let (Some(at), Some(grace)) = (
        pod.metadata.deletion_timestamp.as_ref(),
        pod.metadata.deletion_grace_period_seconds,
    ) && let Ok(end) = at.0.checked_add(jiff::SignedDuration::from_secs(grace))
        && now > end
    {
        return false;
    }
    true
}

/// Upstream's `PodUsageFunc`.
fn pod_usage(pod: &Pod, now: Timestamp) -> List {
    let mut out = List::from([("count/pods".to_string(), one())]);
    if !pod_holds_resources(pod, now) {
        return out;
    }
    out.insert("pods".into(), one());
    let (requests, limits) = pod_totals(pod);
    for (k, v) in &requests {
        if ["cpu", "memory", "ephemeral-storage"].contains(&k.as_str()) {
            out.insert(k.clone(), v.clone());
        }
        out.insert(format!("requests.{k}"), v.clone());
    }
    for (k, v) in &limits {
        if ["cpu", "memory", "ephemeral-storage"].contains(&k.as_str()) {
            out.insert(format!("limits.{k}"), v.clone());
        }
    }
    out
}

/// A quota's scopes as selector requirements (`scopes` entries are `Exists`).
fn scope_selectors(quota: &ResourceQuota) -> Vec<ScopedResourceSelectorRequirement> {
    let spec = quota.spec.clone().unwrap_or_default();
    let mut out: Vec<_> = spec
        .scopes
        .unwrap_or_default()
        .into_iter()
        .map(|scope| ScopedResourceSelectorRequirement {
            scope_name: scope,
            operator: "Exists".into(),
            values: None,
        })
        .collect();
    out.extend(
        spec.scope_selector
            .and_then(|s| s.match_expressions)
            .unwrap_or_default(),
    );
    out
}

fn is_best_effort(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .all(|c| {
            let r = c.resources.clone().unwrap_or_default();
            r.requests.unwrap_or_default().is_empty() && r.limits.unwrap_or_default().is_empty()
        })
}

/// Upstream's `podMatchesScopeFunc`.
fn pod_in_scope(pod: &Pod, s: &ScopedResourceSelectorRequirement) -> bool {
    let spec = pod.spec.clone().unwrap_or_default();
    let terminating = spec.active_deadline_seconds.is_some_and(|d| d >= 0);
    match s.scope_name.as_str() {
        TERMINATING => terminating,
        NOT_TERMINATING => !terminating,
        BEST_EFFORT => is_best_effort(pod),
        NOT_BEST_EFFORT => !is_best_effort(pod),
        PRIORITY_CLASS => {
            let class = spec.priority_class_name.unwrap_or_default();
            let values = s.values.clone().unwrap_or_default();
            match s.operator.as_str() {
                "In" => values.contains(&class),
                "NotIn" => !values.contains(&class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            }
        }
        CROSS_NAMESPACE_POD_AFFINITY => {
            let terms = spec.affinity.map(|a| {
                let pod_terms = a
                    .pod_affinity
                    .and_then(|p| p.required_during_scheduling_ignored_during_execution);
                let anti_terms = a
                    .pod_anti_affinity
                    .and_then(|p| p.required_during_scheduling_ignored_during_execution);
                pod_terms
                    .into_iter()
                    .flatten()
                    .chain(anti_terms.into_iter().flatten())
                    .any(|t| {
                        t.namespaces.is_some_and(|n| !n.is_empty())
                            || t.namespace_selector.is_some()
                    })
            });
            terms.unwrap_or(false)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quota(spec: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": spec})).unwrap()
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn updates_are_charged_what_they_add() {
        let mut q =
            quota(json!({"hard": {"requests.storage": "10Gi", "persistentvolumeclaims": "5"}}));
        q.status = Some(
            serde_json::from_value(json!({
            "hard": {"requests.storage": "10Gi", "persistentvolumeclaims": "5"},
            "used": {"requests.storage": "8Gi", "persistentvolumeclaims": "2"}}))
            .unwrap(),
        );
        let claim = |size: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "c"},
                "spec": {"resources": {"requests": {"storage": size}}}}))
            .unwrap()
        };
        let (small, grown, huge) = (claim("1Gi"), claim("2Gi"), claim("4Gi"));
        let now = Timestamp::now();
        let used = charge_update(&q, &Usage::claim(&grown), &Usage::claim(&small), now)
            .unwrap()
            .unwrap();
        // One more Gi; the claim itself was counted already.
        assert_eq!(used["requests.storage"].0, "9Gi");
        assert_eq!(used["persistentvolumeclaims"].0, "2");
        let refused = charge_update(&q, &Usage::claim(&huge), &Usage::claim(&small), now);
        assert_eq!(
            refused.unwrap_err(),
            "exceeded quota: q, requested: requests.storage=3Gi, used: requests.storage=8Gi, limited: requests.storage=10Gi"
        );
        // Using no more (or less) is not charged, even past a lowered hard limit.
        assert_eq!(
            charge_update(&q, &Usage::claim(&small), &Usage::claim(&grown), now),
            Ok(None)
        );
    }

    #[test]
    fn pods_and_objects_are_counted_by_the_names_quotas_use() {
        let q = quota(
            json!({"hard": {"pods": "3", "requests.cpu": "1", "limits.memory": "1Gi",
            "configmaps": "5", "count/secrets": "2"}}),
        );
        let a = pod(json!({"metadata": {"name": "a"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "256Mi"}}},
            {"name": "d", "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "256Mi"}}}]}}));
        let done = pod(
            json!({"metadata": {"name": "done"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Succeeded"}}),
        );
        let object = |resource| Usage::Object {
            resource,
            group: "",
            extra: List::new(),
        };
        let got = used(
            &q,
            [
                Usage::Pod(&a),
                Usage::Pod(&done),
                object("configmaps"),
                object("secrets"),
            ],
            Timestamp::now(),
        );
        let got: Vec<(String, String)> = got.into_iter().map(|(k, v)| (k, v.0)).collect();
        let want = [
            ("configmaps", "1"),
            ("count/secrets", "1"),
            ("limits.memory", "512Mi"),
            ("pods", "1"),
            ("requests.cpu", "350m"),
        ];
        assert_eq!(
            got,
            want.map(|(k, v)| (k.to_string(), v.to_string())).to_vec()
        );
    }

    #[test]
    fn charges_are_refused_in_upstream_words() {
        let mut q = quota(json!({"hard": {"pods": "2", "requests.cpu": "1"}}));
        let sized = |cpu: &str| {
            pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}))
        };
        let p = sized("600m");
        // Not yet seen by the controller: nothing is enforced, as upstream.
        assert_eq!(charge(&q, &Usage::Pod(&p), Timestamp::now()), Ok(None));
        q.status = serde_json::from_value(json!({"hard": {"pods": "2", "requests.cpu": "1"},
            "used": {"pods": "1"}}))
        .unwrap();
        let unknown = charge(&q, &Usage::Pod(&p), Timestamp::now()).unwrap_err();
        assert_eq!(
            unknown,
            "status unknown for quota: q, resources: requests.cpu"
        );
        q.status = serde_json::from_value(json!({"hard": {"pods": "2", "requests.cpu": "1"},
            "used": {"pods": "1", "requests.cpu": "500m"}}))
        .unwrap();
        assert_eq!(
            charge(&q, &Usage::Pod(&p), Timestamp::now()).unwrap_err(),
            "exceeded quota: q, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1"
        );
        let fits = sized("500m");
        let used = charge(&q, &Usage::Pod(&fits), Timestamp::now())
            .unwrap()
            .unwrap();
        assert_eq!(
            (used["pods"].0.as_str(), used["requests.cpu"].0.as_str()),
            ("2", "1")
        );
        let bare = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}));
        assert_eq!(
            charge(&q, &Usage::Pod(&bare), Timestamp::now()).unwrap_err(),
            "failed quota: q: must specify requests.cpu for: c"
        );
        let cm = Usage::Object {
            resource: "configmaps",
            group: "",
            extra: List::new(),
        };
        assert_eq!(charge(&q, &cm, Timestamp::now()), Ok(None));
    }

    #[test]
    fn scoped_quotas_track_matching_pods_only() {
        let q = quota(json!({"hard": {"pods": "3"}, "scopes": ["BestEffort"]}));
        let plain =
            pod(json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}));
        let sized = pod(json!({"metadata": {"name": "b"}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}));
        let svc = Usage::Object {
            resource: "services",
            group: "",
            extra: List::new(),
        };
        let got = used(
            &q,
            [Usage::Pod(&plain), Usage::Pod(&sized), svc],
            Timestamp::now(),
        );
        assert_eq!(got["pods"].0, "1");
        let q = quota(
            json!({"hard": {"pods": "3"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
        );
        let high = pod(
            json!({"metadata": {"name": "h"}, "spec": {"priorityClassName": "high",
            "containers": [{"name": "c"}]}}),
        );
        let got = used(
            &q,
            [Usage::Pod(&plain), Usage::Pod(&high)],
            Timestamp::now(),
        );
        assert_eq!(got["pods"].0, "1");
    }
}
