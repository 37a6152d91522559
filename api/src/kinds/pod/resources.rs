//! Upstream's `ValidateContainerResourceRequirements`: what a container may request and limit.
//! Devices (extended resources such as `nvidia.com/gpu`) and hugepages cannot be shared or
//! overcommitted, so a container must ask for exactly what it is limited to, in whole units;
//! the scheduler and the kubelet's device manager count on that.

use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::kinds::resource_quota::{
    compare_quantities, is_huge_page, is_overcommit_allowed, parse_quantity,
    validate_container_resource_name, validate_quantity_value,
};
use crate::table::canonical_quantity;
use crate::validation::{Errors, FieldError, Path};

/// The resources whose presence lets a container use hugepages (upstream's
/// `supportedQoSComputeResources`).
const QOS_COMPUTE_RESOURCES: &[&str] = &["cpu", "memory"];

/// Validates a container's `resources` at `path` (`spec.containers[0].resources`).
pub fn validate_resource_requirements(r: &ResourceRequirements, path: &Path, errs: &mut Errors) {
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let limits = r.limits.as_ref();
    let mut hugepages = false;
    let mut cpu_or_memory = false;
    for (name, q) in limits.into_iter().flatten() {
        let p = lim_path.key(name);
        validate_container_resource_name(name, &p, errs);
        validate_quantity_value(name, q, &p, errs);
        hugepages |= is_huge_page(name);
        cpu_or_memory |= QOS_COMPUTE_RESOURCES.contains(&name.as_str());
    }
    for (name, q) in r.requests.iter().flatten() {
        let p = req_path.key(name);
        validate_container_resource_name(name, &p, errs);
        validate_quantity_value(name, q, &p, errs);
        match limits.and_then(|l| l.get(name)) {
            Some(limit) => {
                let mut scratch = Vec::new();
                let (Some(want), Some(cap)) = (
                    parse_quantity(q, &p, &mut scratch),
                    parse_quantity(limit, &p, &mut scratch),
                ) else {
                    continue;
                };
                let order = compare_quantities(&want, &cap);
                let (request, limit) = (canonical_quantity(&q.0), canonical_quantity(&limit.0));
                if order.is_ne() && !is_overcommit_allowed(name) {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &request,
                        format!("must be equal to {name} limit of {limit}"),
                    ));
                } else if order.is_gt() {
                    errs.push(FieldError::invalid(
                        &req_path,
                        &request,
                        format!("must be less than or equal to {name} limit of {limit}"),
                    ));
                }
            }
            None if !is_overcommit_allowed(name) => errs.push(FieldError::required(
                &lim_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
        hugepages |= is_huge_page(name);
        cpu_or_memory |= QOS_COMPUTE_RESOURCES.contains(&name.as_str());
    }
    if hugepages && !cpu_or_memory {
        errs.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errors(resources: serde_json::Value) -> Vec<String> {
        let r: ResourceRequirements = serde_json::from_value(resources).unwrap();
        let mut errs = Vec::new();
        validate_resource_requirements(&r, &Path::new("resources"), &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn extended_resources_need_equal_whole_requests_and_limits() {
        assert!(errors(json!({"limits": {"nvidia.com/gpu": "1"}})).is_empty());
        assert!(
            errors(json!({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}))
                .is_empty()
        );
        assert_eq!(
            errors(json!({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}})),
            [
                "resources.requests: Invalid value: \"1\": must be equal to nvidia.com/gpu limit of 2"
            ]
        );
        assert_eq!(
            errors(json!({"requests": {"example.com/dev": "1"}})),
            [
                "resources.limits: Required value: Limit must be set for non overcommitable resources"
            ]
        );
        assert_eq!(
            errors(json!({"limits": {"example.com/dev": "500m"}})),
            ["resources.limits[example.com/dev]: Invalid value: 500m: must be an integer"]
        );
        assert_eq!(
            errors(json!({"limits": {"example.com/dev": "-1"}})),
            [
                "resources.limits[example.com/dev]: Invalid value: \"-1\": must be greater than or equal to 0"
            ]
        );
    }

    #[test]
    fn names_follow_the_standards() {
        assert_eq!(
            errors(json!({"limits": {"pods": "1"}})),
            [
                "resources.limits[pods]: Invalid value: \"pods\": must be a standard resource for containers"
            ]
        );
        assert_eq!(
            errors(
                json!({"requests": {"requests.example.com/dev": "1"}, "limits": {"requests.example.com/dev": "1"}})
            ),
            [
                "resources.limits[requests.example.com/dev]: Invalid value: \"requests.example.com/dev\": doesn't follow extended resource name standard",
                "resources.requests[requests.example.com/dev]: Invalid value: \"requests.example.com/dev\": doesn't follow extended resource name standard",
            ]
        );
        // kubernetes.io names are native: overcommit allowed, any quantity.
        assert!(errors(json!({"requests": {"kubernetes.io/thing": "500m"}})).is_empty());
    }

    #[test]
    fn cpu_and_memory_may_be_overcommitted_up_to_the_limit() {
        assert!(errors(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}})).is_empty());
        assert!(errors(json!({"requests": {"cpu": "100m", "memory": "1Gi"}})).is_empty());
        assert_eq!(
            errors(json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})),
            [
                "resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"
            ]
        );
        assert_eq!(
            errors(json!({"requests": {"memory": "512Mi"}, "limits": {"memory": "256Mi"}})),
            [
                "resources.requests: Invalid value: \"512Mi\": must be less than or equal to memory limit of 256Mi"
            ]
        );
    }

    #[test]
    fn hugepages_need_cpu_or_memory_and_equal_requests() {
        assert_eq!(
            errors(json!({"limits": {"hugepages-2Mi": "2Mi"}})),
            ["resources: Forbidden: HugePages require cpu or memory"]
        );
        assert!(errors(json!({"limits": {"hugepages-2Mi": "2Mi", "memory": "1Gi"}})).is_empty());
        assert_eq!(
            errors(json!({"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"},
                           "requests": {"hugepages-2Mi": "2Mi"}})),
            [
                "resources.requests: Invalid value: \"2Mi\": must be equal to hugepages-2Mi limit of 4Mi"
            ]
        );
    }
}
