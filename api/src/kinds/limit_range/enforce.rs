//! What upstream's LimitRanger admission plugin does with a namespace's ranges: containers
//! that state no request or limit get the range's defaults (and the pod an annotation that
//! says so), then every container, pod and claim must sit within the bounds. The messages
//! are upstream's word for word, since users and charts match on them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, LimitRange, PersistentVolumeClaim, Pod, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{CONTAINER, PERSISTENT_VOLUME_CLAIM, POD};
use crate::quantity::Quantity as Parsed;

/// Where LimitRanger says what it set on a pod.
const ANNOTATION: &str = "kubernetes.io/limit-ranger";

type List = BTreeMap<String, Quantity>;

/// Upstream's `PodMutateLimitFunc`: the range's container defaults for what containers and
/// init containers leave unset.
pub fn default_pod(range: &LimitRange, pod: &mut Pod) {
    let mut defaults = ResourceRequirements::default();
    for item in range.spec.iter().flat_map(|s| &s.limits) {
        if item.type_ == CONTAINER {
            let requests = defaults.requests.get_or_insert_with(Default::default);
            requests.extend(item.default_request.clone().unwrap_or_default());
            let limits = defaults.limits.get_or_insert_with(Default::default);
            limits.extend(item.default.clone().unwrap_or_default());
        }
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let mut said = Vec::new();
    for c in &mut spec.containers {
        merge(c, &defaults, "container", &mut said);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        merge(c, &defaults, "init container", &mut said);
    }
    if !said.is_empty() {
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                ANNOTATION.to_string(),
                format!("LimitRanger plugin set: {}", said.join("; ")),
            );
    }
}

fn merge(c: &mut Container, defaults: &ResourceRequirements, what: &str, said: &mut Vec<String>) {
    let resources = c.resources.get_or_insert_with(Default::default);
    let fill = |have: &mut Option<List>, from: &Option<List>| {
        let have = have.get_or_insert_with(Default::default);
        let mut set: Vec<String> = Vec::new();
        for (k, v) in from.iter().flatten() {
            if !have.contains_key(k) {
                have.insert(k.clone(), v.clone());
                set.push(k.clone());
            }
        }
        set
    };
    let requests = fill(&mut resources.requests, &defaults.requests);
    let limits = fill(&mut resources.limits, &defaults.limits);
    if !requests.is_empty() {
        said.push(format!(
            "{} request for {what} {}",
            requests.join(", "),
            c.name
        ));
    }
    if !limits.is_empty() {
        said.push(format!("{} limit for {what} {}", limits.join(", "), c.name));
    }
}

/// Upstream's `PodValidateLimitFunc`: every bound of the range a pod breaks, each in upstream's
/// words; empty when it fits.
pub fn pod_violations(range: &LimitRange, pod: &Pod) -> Vec<String> {
    let mut errs = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return errs;
    };
    for item in range.spec.iter().flat_map(|s| &s.limits) {
        let mut check = |kind: &str, requests: &List, limits: &List| {
            for (k, v) in item.min.iter().flatten() {
                errs.extend(min_constraint(kind, k, v, requests, Some(limits)));
            }
            for (k, v) in item.max.iter().flatten() {
                errs.extend(max_constraint(kind, k, v, requests, limits));
            }
            for (k, v) in item.max_limit_request_ratio.iter().flatten() {
                errs.extend(ratio_constraint(kind, k, v, requests, limits));
            }
        };
        if item.type_ == CONTAINER {
            let all = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten());
            for c in all {
                let r = c.resources.as_ref();
                let requests = r.and_then(|r| r.requests.clone()).unwrap_or_default();
                let limits = r.and_then(|r| r.limits.clone()).unwrap_or_default();
                check(CONTAINER, &requests, &limits);
            }
        }
        if item.type_ == POD {
            let (requests, limits) = pod_totals(pod);
            check(POD, &requests, &limits);
        }
    }
    errs
}

/// Upstream's `PersistentVolumeClaimValidateLimitFunc`: a claim's request within the range's
/// storage bounds (a claim's limits are not the user's word, so only requests count).
pub fn claim_violations(range: &LimitRange, claim: &PersistentVolumeClaim) -> Vec<String> {
    let requests = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    let mut errs = Vec::new();
    for item in range.spec.iter().flat_map(|s| &s.limits) {
        if item.type_ != PERSISTENT_VOLUME_CLAIM {
            continue;
        }
        for (k, v) in item.min.iter().flatten() {
            errs.extend(min_constraint(
                PERSISTENT_VOLUME_CLAIM,
                k,
                v,
                &requests,
                None,
            ));
        }
        for (k, v) in item.max.iter().flatten() {
            let kind = PERSISTENT_VOLUME_CLAIM;
            errs.extend(match requests.get(k) {
                None => Some(format!(
                    "maximum {k} usage per {kind} is {}.  No request is specified",
                    show(v)
                )),
                Some(req) if milli(req) > milli(v) => Some(format!(
                    "maximum {k} usage per {kind} is {}, but request is {}",
                    show(v),
                    show(req)
                )),
                Some(_) => None,
            });
        }
    }
    errs
}

/// What a pod asks for as a whole: its containers and sidecars summed, each other init
/// container counting when it asks for more than that, and the runtime's overhead added.
pub(crate) fn pod_totals(pod: &Pod) -> (List, List) {
    let Some(spec) = pod.spec.as_ref() else {
        return Default::default();
    };
    let (mut requests, mut limits) = (List::new(), List::new());
    let of = |c: &Container| {
        let r = c.resources.clone().unwrap_or_default();
        (r.requests.unwrap_or_default(), r.limits.unwrap_or_default())
    };
    let inits = spec.init_containers.iter().flatten();
    let (sidecars, plain): (Vec<_>, Vec<_>) =
        inits.partition(|c| c.restart_policy.as_deref() == Some("Always"));
    for c in spec.containers.iter().chain(sidecars) {
        let (r, l) = of(c);
        add(&mut requests, &r);
        add(&mut limits, &l);
    }
    for c in plain {
        let (r, l) = of(c);
        at_least(&mut requests, &r);
        at_least(&mut limits, &l);
    }
    if let Some(overhead) = &spec.overhead {
        add(&mut requests, overhead);
        // Overhead raises only the limits that are set.
        let set: List = overhead
            .iter()
            .filter(|(k, _)| limits.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        add(&mut limits, &set);
    }
    (requests, limits)
}

pub(crate) fn add(total: &mut List, more: &List) {
    for (k, v) in more {
        let sum = match (
            total.get(k).and_then(|t| Parsed::parse(&t.0)),
            Parsed::parse(&v.0),
        ) {
            (Some(t), Some(v)) => t.add(&v).and_then(|s| s.canonical()),
            (None, Some(_)) => Some(v.0.clone()),
            _ => None,
        };
        if let Some(sum) = sum {
            total.insert(k.clone(), Quantity(sum));
        }
    }
}

fn at_least(total: &mut List, other: &List) {
    for (k, v) in other {
        if total.get(k).is_none_or(|t| milli(v) > milli(t)) {
            total.insert(k.clone(), v.clone());
        }
    }
}

fn milli(q: &Quantity) -> i128 {
    Parsed::parse(&q.0).map_or(0, |p| p.milli_value())
}

/// Upstream's `Quantity.String()`.
fn show(q: &Quantity) -> String {
    Parsed::parse(&q.0)
        .and_then(|p| p.canonical())
        .unwrap_or_else(|| q.0.clone())
}

/// `limits` is `None` for claims, whose limits are not checked.
fn min_constraint(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &List,
    limits: Option<&List>,
) -> Option<String> {
    let min = show(enforced);
    let Some(req) = requests.get(name) else {
        return Some(format!(
            "minimum {name} usage per {kind} is {min}.  No request is specified"
        ));
    };
    if milli(req) < milli(enforced) {
        return Some(format!(
            "minimum {name} usage per {kind} is {min}, but request is {}",
            show(req)
        ));
    }
    match limits.and_then(|l| l.get(name)) {
        Some(lim) if milli(lim) < milli(enforced) => Some(format!(
            "minimum {name} usage per {kind} is {min}, but limit is {}",
            show(lim)
        )),
        _ => None,
    }
}

fn max_constraint(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &List,
    limits: &List,
) -> Option<String> {
    let max = show(enforced);
    let Some(lim) = limits.get(name) else {
        return Some(format!(
            "maximum {name} usage per {kind} is {max}.  No limit is specified"
        ));
    };
    if milli(lim) > milli(enforced) {
        return Some(format!(
            "maximum {name} usage per {kind} is {max}, but limit is {}",
            show(lim)
        ));
    }
    match requests.get(name) {
        Some(req) if milli(req) > milli(enforced) => Some(format!(
            "maximum {name} usage per {kind} is {max}, but request is {}",
            show(req)
        )),
        _ => None,
    }
}

fn ratio_constraint(
    kind: &str,
    name: &str,
    enforced: &Quantity,
    requests: &List,
    limits: &List,
) -> Option<String> {
    let max = show(enforced);
    let req = requests.get(name).map_or(0, milli);
    if req == 0 {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {max}, but no request is specified or request is 0"
        ));
    }
    let lim = limits.get(name).map_or(0, milli);
    if lim == 0 {
        return Some(format!(
            "{name} max limit to request ratio per {kind} is {max}, but no limit is specified or limit is 0"
        ));
    }
    let ratio = lim as f64 / req as f64;
    (ratio * 1000.0 > milli(enforced) as f64).then(|| {
        format!(
            "{name} max limit to request ratio per {kind} is {max}, but provided ratio is {ratio:.6}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn range(limits: serde_json::Value) -> LimitRange {
        serde_json::from_value(json!({"metadata": {"name": "r"}, "spec": {"limits": limits}}))
            .unwrap()
    }

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": containers}}))
        .unwrap()
    }

    #[test]
    fn defaults_fill_what_containers_leave_unset() {
        let r = range(json!([{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]));
        let mut p = pod(json!([
            {"name": "a", "image": "x"},
            {"name": "b", "image": "x", "resources": {"limits": {"cpu": "1"},
                "requests": {"cpu": "1"}}},
        ]));
        default_pod(&r, &mut p);
        let spec = p.spec.as_ref().unwrap();
        let res = |i: usize| spec.containers[i].resources.clone().unwrap();
        assert_eq!(res(0).limits.unwrap()["cpu"].0, "500m");
        assert_eq!(res(0).requests.unwrap()["memory"].0, "128Mi");
        assert_eq!(res(1).limits.unwrap()["cpu"].0, "1");
        assert_eq!(res(1).limits.unwrap()["memory"].0, "256Mi");
        assert_eq!(
            p.metadata.annotations.unwrap()[ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; cpu, memory limit for \
             container a; memory request for container b; memory limit for container b"
        );
    }

    #[test]
    fn bounds_in_upstream_words() {
        let r = range(json!([
            {"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1"},
             "maxLimitRequestRatio": {"cpu": "2"}},
            {"type": "Pod", "max": {"memory": "1Gi"}},
        ]));
        let p = pod(json!([{"name": "a", "image": "x", "resources": {
            "requests": {"cpu": "50m", "memory": "512Mi"},
            "limits": {"cpu": "2", "memory": "768Mi"}}},
            {"name": "b", "image": "x", "resources": {
            "requests": {"cpu": "200m", "memory": "512Mi"},
            "limits": {"cpu": "300m", "memory": "512Mi"}}}]));
        assert_eq!(
            pod_violations(&r, &p),
            [
                "minimum cpu usage per Container is 100m, but request is 50m",
                "maximum cpu usage per Container is 1, but limit is 2",
                "cpu max limit to request ratio per Container is 2, but provided ratio is 40.000000",
                "maximum memory usage per Pod is 1Gi, but limit is 1280Mi",
            ]
        );
        let fits = pod(json!([{"name": "a", "image": "x", "resources": {
            "requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]));
        assert!(pod_violations(&r, &fits).is_empty());
        let unset = pod(json!([{"name": "a", "image": "x"}]));
        assert_eq!(
            pod_violations(&r, &unset)[0],
            "minimum cpu usage per Container is 100m.  No request is specified"
        );
    }

    #[test]
    fn claims_are_held_to_storage_bounds() {
        let r = range(json!([{"type": "PersistentVolumeClaim",
            "min": {"storage": "1Gi"}, "max": {"storage": "2Gi"}}]));
        let claim = |size: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "c"},
                "spec": {"resources": {"requests": {"storage": size}}}}))
            .unwrap()
        };
        assert!(claim_violations(&r, &claim("1Gi")).is_empty());
        assert_eq!(
            claim_violations(&r, &claim("3Gi")),
            ["maximum storage usage per PersistentVolumeClaim is 2Gi, but request is 3Gi"]
        );
    }
}
