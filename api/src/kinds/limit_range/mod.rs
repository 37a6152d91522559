//! LimitRanges: per-namespace bounds and defaults for what pods, containers and claims ask
//! for. The LimitRanger admission plugin applies them to every new pod, so a range whose
//! bounds contradict each other would reject or mis-default every pod in the namespace; that
//! is what validation catches here.

pub(crate) mod enforce;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::resource_quota::{
    compare_quantities, is_overcommit_allowed, parse_quantity, quantity_error,
    validate_container_resource_name, validate_resource_name,
};
use crate::quantity::Quantity as ParsedQuantity;
use crate::strategy::Kind;
use crate::table::canonical_quantity;
use crate::validation::{Errors, FieldError, Path, qualified_name};

pub use enforce::{claim_violations, default_pod, pod_violations};

const POD: &str = "Pod";
const CONTAINER: &str = "Container";
const PERSISTENT_VOLUME_CLAIM: &str = "PersistentVolumeClaim";

/// Upstream's `MaxMilliValue`: past it, milli-units overflow an int64.
const MAX_MILLI_VALUE: i128 = (i64::MAX / 1000) as i128;

impl Kind for LimitRange {
    // Upstream has no printer for LimitRanges: the default `Name`, `Created At` columns.

    fn default_fields(&mut self) {
        for item in self.spec.iter_mut().flat_map(|s| s.limits.iter_mut()) {
            default_item(item);
        }
    }

    fn validate(&self, errs: &mut Errors) {
        let path = Path::new("spec").child("limits");
        let mut types = BTreeSet::new();
        for (i, item) in self.spec.iter().flat_map(|s| s.limits.iter()).enumerate() {
            let p = path.index(i);
            validate_type_name(&item.type_, &p.child("type"), errs);
            if !types.insert(item.type_.as_str()) {
                errs.push(FieldError::duplicate(&p.child("type"), &item.type_));
            }
            validate_item(item, &p, errs);
        }
    }
}

/// SetDefaults_LimitRangeItem: a container's default limit is the max, its default request
/// the default limit, else the min.
fn default_item(item: &mut LimitRangeItem) {
    if item.type_ != CONTAINER {
        return;
    }
    let mut default = item.default.take().unwrap_or_default();
    let mut default_request = item.default_request.take().unwrap_or_default();
    for (k, v) in item.max.iter().flatten() {
        default.entry(k.clone()).or_insert_with(|| v.clone());
    }
    for (k, v) in &default {
        default_request
            .entry(k.clone())
            .or_insert_with(|| v.clone());
    }
    for (k, v) in item.min.iter().flatten() {
        default_request
            .entry(k.clone())
            .or_insert_with(|| v.clone());
    }
    item.default = (!default.is_empty()).then_some(default);
    item.default_request = (!default_request.is_empty()).then_some(default_request);
}

fn validate_type_name(value: &str, path: &Path, errs: &mut Errors) {
    let qualified = qualified_name(value);
    if !qualified.is_empty() {
        for msg in qualified {
            errs.push(FieldError::invalid(path, value, msg));
        }
        return;
    }
    if !value.contains('/') && ![POD, CONTAINER, PERSISTENT_VOLUME_CLAIM].contains(&value) {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be a standard limit type or fully qualified",
        ));
    }
}

/// Pods and containers hold compute resources; other types (claims) may hold storage.
fn validate_resource_name_for(limit_type: &str, name: &str, path: &Path, errs: &mut Errors) {
    if limit_type == POD || limit_type == CONTAINER {
        validate_container_resource_name(name, path, errs);
    } else {
        validate_resource_name(name, path, errs);
    }
}

/// The item's quantities by field, each name checked and each value parsed.
type Bounds<'a> = BTreeMap<&'a str, (&'a Quantity, ParsedQuantity)>;

fn collect<'a>(
    item_type: &str,
    list: Option<&'a BTreeMap<String, Quantity>>,
    path: &Path,
    keys: &mut BTreeSet<&'a str>,
    errs: &mut Errors,
) -> Bounds<'a> {
    let mut out = BTreeMap::new();
    for (k, q) in list.into_iter().flatten() {
        let p = path.key(k);
        validate_resource_name_for(item_type, k, &p, errs);
        keys.insert(k.as_str());
        if let Some(parsed) = parse_quantity(q, &p, errs) {
            out.insert(k.as_str(), (q, parsed));
        }
    }
    out
}

fn validate_item(item: &LimitRangeItem, p: &Path, errs: &mut Errors) {
    let t = item.type_.as_str();
    let mut keys = BTreeSet::new();
    let max = collect(t, item.max.as_ref(), &p.child("max"), &mut keys, errs);
    let min = collect(t, item.min.as_ref(), &p.child("min"), &mut keys, errs);
    let (default, default_request) = if t == POD {
        if item.default.as_ref().is_some_and(|d| !d.is_empty()) {
            errs.push(FieldError::forbidden(
                &p.child("default"),
                "may not be specified when `type` is 'Pod'",
            ));
        }
        if item.default_request.as_ref().is_some_and(|d| !d.is_empty()) {
            errs.push(FieldError::forbidden(
                &p.child("defaultRequest"),
                "may not be specified when `type` is 'Pod'",
            ));
        }
        (Bounds::new(), Bounds::new())
    } else {
        (
            collect(
                t,
                item.default.as_ref(),
                &p.child("default"),
                &mut keys,
                errs,
            ),
            collect(
                t,
                item.default_request.as_ref(),
                &p.child("defaultRequest"),
                &mut keys,
                errs,
            ),
        )
    };
    if t == PERSISTENT_VOLUME_CLAIM
        && !item.min.as_ref().is_some_and(|m| m.contains_key("storage"))
        && !item.max.as_ref().is_some_and(|m| m.contains_key("storage"))
    {
        errs.push(FieldError::required(
            &p.child("limits"),
            "either minimum or maximum storage value is required, but neither was provided",
        ));
    }
    let ratios = collect(
        t,
        item.max_limit_request_ratio.as_ref(),
        &p.child("maxLimitRequestRatio"),
        &mut keys,
        errs,
    );

    let s = |q: &Quantity| canonical_quantity(&q.0);
    let greater = |a: &ParsedQuantity, b: &ParsedQuantity| compare_quantities(a, b).is_gt();
    for k in keys {
        let min = min.get(k);
        let max = max.get(k);
        let default = default.get(k);
        let default_request = default_request.get(k);
        let ratio = ratios.get(k);
        if let (Some((mn, pmn)), Some((mx, pmx))) = (min, max)
            && greater(pmn, pmx)
        {
            errs.push(quantity_error(
                &p.child("min").key(k),
                mn,
                format!("min value {} is greater than max value {}", s(mn), s(mx)),
            ));
        }
        if let (Some((dr, pdr)), Some((mn, pmn))) = (default_request, min)
            && greater(pmn, pdr)
        {
            errs.push(quantity_error(
                &p.child("defaultRequest").key(k),
                dr,
                format!(
                    "min value {} is greater than default request value {}",
                    s(mn),
                    s(dr)
                ),
            ));
        }
        if let (Some((dr, pdr)), Some((mx, pmx))) = (default_request, max)
            && greater(pdr, pmx)
        {
            errs.push(quantity_error(
                &p.child("defaultRequest").key(k),
                dr,
                format!(
                    "default request value {} is greater than max value {}",
                    s(dr),
                    s(mx)
                ),
            ));
        }
        if let (Some((dr, pdr)), Some((d, pd))) = (default_request, default)
            && greater(pdr, pd)
        {
            errs.push(quantity_error(
                &p.child("defaultRequest").key(k),
                dr,
                format!(
                    "default request value {} is greater than default limit value {}",
                    s(dr),
                    s(d)
                ),
            ));
        }
        // Upstream shows the min (and below, the max) as the value of these two.
        if let (Some((d, pd)), Some((mn, pmn))) = (default, min)
            && greater(pmn, pd)
        {
            errs.push(quantity_error(
                &p.child("default").key(k),
                mn,
                format!("min value {} is greater than default value {}", s(mn), s(d)),
            ));
        }
        if let (Some((d, pd)), Some((mx, pmx))) = (default, max)
            && greater(pd, pmx)
        {
            errs.push(quantity_error(
                &p.child("default").key(k),
                mx,
                format!("default value {} is greater than max value {}", s(d), s(mx)),
            ));
        }
        if let Some((r, pr)) = ratio
            && pr.milli_value() < 1000
        {
            errs.push(quantity_error(
                &p.child("maxLimitRequestRatio").key(k),
                r,
                format!("ratio {} is less than 1", s(r)),
            ));
        }
        if let (Some((r, pr)), Some((_, pmn)), Some((_, pmx))) = (ratio, min, max) {
            let exact = pr.value() < MAX_MILLI_VALUE
                && pmn.value() < MAX_MILLI_VALUE
                && pmx.value() < MAX_MILLI_VALUE;
            let (ratio_value, min_value, max_value) = if exact {
                (
                    pr.milli_value() as f64 / 1000.0,
                    pmn.milli_value(),
                    pmx.milli_value(),
                )
            } else {
                (pr.value() as f64, pmn.value(), pmx.value())
            };
            let limit = max_value as f64 / min_value as f64;
            if ratio_value > limit {
                errs.push(quantity_error(
                    &p.child("maxLimitRequestRatio").key(k),
                    r,
                    format!("ratio {} is greater than max/min = {limit:.6}", s(r)),
                ));
            }
        }
        if let (Some((d, pd)), Some((dr, pdr))) = (default, default_request)
            && !is_overcommit_allowed(k)
            && compare_quantities(pd, pdr).is_ne()
        {
            errs.push(quantity_error(
                &p.child("defaultRequest").key(k),
                dr,
                format!(
                    "default value {} must equal to defaultRequest value {} in {k}",
                    s(d),
                    s(dr)
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn limit_range(limits: Value) -> LimitRange {
        let mut lr: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "limits", "namespace": "default"},
            "spec": {"limits": limits}
        }))
        .unwrap();
        lr.default_fields();
        lr
    }

    fn errors(lr: &LimitRange) -> Vec<String> {
        let mut errs = Vec::new();
        lr.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn container_defaults() {
        let lr = limit_range(json!([{"type": "Container",
            "max": {"cpu": "2", "memory": "1Gi"}, "min": {"ephemeral-storage": "1Gi"},
            "default": {"memory": "512Mi"}}]));
        let item = &lr.spec.as_ref().unwrap().limits[0];
        assert_eq!(
            serde_json::to_value(item).unwrap(),
            json!({"type": "Container",
                "max": {"cpu": "2", "memory": "1Gi"}, "min": {"ephemeral-storage": "1Gi"},
                "default": {"cpu": "2", "memory": "512Mi"},
                "defaultRequest": {"cpu": "2", "memory": "512Mi", "ephemeral-storage": "1Gi"}})
        );
        assert_eq!(errors(&lr), Vec::<String>::new());
        // Only containers are defaulted.
        let pod = limit_range(json!([{"type": "Pod", "max": {"cpu": "2"}}]));
        assert_eq!(pod.spec.unwrap().limits[0].default, None);
    }

    #[test]
    fn bounds() {
        assert_eq!(
            errors(&limit_range(json!([{"type": "Container",
                "min": {"cpu": "2"}, "max": {"cpu": "1"}, "default": {"cpu": "1500m"},
                "defaultRequest": {"cpu": "3"}, "maxLimitRequestRatio": {"cpu": "500m"}}]))),
            vec![
                "spec.limits[0].min[cpu]: Invalid value: 2: min value 2 is greater than max value 1",
                "spec.limits[0].defaultRequest[cpu]: Invalid value: 3: default request value 3 is greater than max value 1",
                "spec.limits[0].defaultRequest[cpu]: Invalid value: 3: default request value 3 is greater than default limit value 1500m",
                "spec.limits[0].default[cpu]: Invalid value: 2: min value 2 is greater than default value 1500m",
                "spec.limits[0].default[cpu]: Invalid value: 1: default value 1500m is greater than max value 1",
                "spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: 500m: ratio 500m is less than 1",
            ]
        );
        assert_eq!(
            errors(&limit_range(json!([{"type": "Container",
                "min": {"memory": "1Gi"}, "max": {"memory": "2Gi"}, "maxLimitRequestRatio": {"memory": "3"}}]))),
            vec![
                "spec.limits[0].maxLimitRequestRatio[memory]: Invalid value: 3: ratio 3 is greater than max/min = 2.000000"
            ]
        );
    }

    #[test]
    fn types_and_names() {
        assert_eq!(
            errors(&limit_range(json!([
                {"type": "Pod", "max": {"cpu": "2", "storage": "1Gi"}, "default": {"cpu": "1"}},
                {"type": "PersistentVolumeClaim", "max": {"cpu": "1"}},
                {"type": "Node"},
                {"type": "Pod"},
                {"type": "Container", "default": {"example.com/gpu": "1"}, "defaultRequest": {"example.com/gpu": "0"}}
            ]))),
            vec![
                "spec.limits[0].max[storage]: Invalid value: \"storage\": must be a standard resource for containers",
                "spec.limits[0].default: Forbidden: may not be specified when `type` is 'Pod'",
                "spec.limits[1].limits: Required value: either minimum or maximum storage value is required, but neither was provided",
                "spec.limits[2].type: Invalid value: \"Node\": must be a standard limit type or fully qualified",
                "spec.limits[3].type: Duplicate value: \"Pod\"",
                "spec.limits[4].defaultRequest[example.com/gpu]: Invalid value: 0: default value 1 must equal to defaultRequest value 0 in example.com/gpu",
            ]
        );
    }

    #[test]
    fn default_columns() {
        let lr = json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "limits", "creationTimestamp": "2024-03-05T07:08:09Z"}});
        assert_eq!(
            row_of::<LimitRange>(lr),
            vec![json!("limits"), json!("2024-03-05T07:08:09Z")]
        );
    }
}
