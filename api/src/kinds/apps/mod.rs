//! apps/v1 workloads, one module each; here the rules they share about selectors, pod
//! templates and rollout parameters.

pub mod controller_revision;
pub mod daemon_set;
pub mod deployment;
pub mod replica_set;
pub mod stateful_set;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::kinds::pod::validation::validate_template;
use crate::selector::Selector;
use crate::strategy::ScaleView;
use crate::validation::{Errors, FieldError, Path, validate_labels};

/// Rules every apps/v1 workload has: a non-empty selector that matches the template, a
/// template that restarts Always, non-negative counts.
fn validate_workload(
    what: &str,
    selector: Option<&LabelSelector>,
    template: &PodTemplateSpec,
    replicas: Option<i32>,
    full_template: bool,
    errs: &mut Errors,
) {
    let spec = Path::new("spec");
    if let Some(r) = replicas
        && r < 0
    {
        errs.push(FieldError::invalid(
            &spec.child("replicas"),
            r,
            "must be greater than or equal to 0",
        ));
    }
    match selector {
        None => errs.push(FieldError::required(&spec.child("selector"), "")),
        Some(sel) => {
            let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && sel.match_expressions.as_ref().is_none_or(|m| m.is_empty());
            if empty {
                errs.push(FieldError::invalid(
                    &spec.child("selector"),
                    "",
                    format!("empty selector is invalid for {what}"),
                ));
            }
            if let Some(m) = &sel.match_labels {
                validate_labels(m, &spec.child("selector").child("matchLabels"), errs);
            }
            match Selector::from_label_selector(Some(sel)) {
                Err(e) => errs.push(FieldError::invalid(&spec.child("selector"), "", e.0)),
                Ok(s) if !empty => {
                    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
                    if !s.matches(labels) {
                        errs.push(FieldError::invalid(
                            &spec.child("template").child("metadata").child("labels"),
                            format!("{:?}", labels.cloned().unwrap_or_default()),
                            "`selector` does not match template `labels`",
                        ));
                    }
                }
                Ok(_) => {}
            }
        }
    }
    let tpath = spec.child("template");
    if full_template {
        validate_template(template, &tpath, errs);
    }
    if let Some(ps) = &template.spec {
        if let Some(rp) = &ps.restart_policy
            && rp != "Always"
        {
            errs.push(FieldError::not_supported(
                &tpath.child("spec").child("restartPolicy"),
                rp,
                &["Always"],
            ));
        }
        if ps.active_deadline_seconds.is_some() {
            errs.push(FieldError::forbidden(
                &tpath.child("spec").child("activeDeadlineSeconds"),
                format!(
                    "activeDeadlineSeconds in {} is not Supported",
                    if what == "daemonset" {
                        "DaemonSet"
                    } else if what == "statefulset" {
                        "StatefulSet"
                    } else {
                        "ReplicaSet"
                    }
                ),
            ));
        }
    }
}

/// The scale subresource's view of a workload: its spec's replicas (1 when unset), the
/// replicas its status counts, and its selector in query syntax.
fn scale_view(
    replicas: Option<i32>,
    status_replicas: Option<i32>,
    selector: &LabelSelector,
) -> ScaleView {
    ScaleView {
        spec_replicas: replicas.unwrap_or(1),
        status_replicas: status_replicas.unwrap_or(0),
        selector: Selector::from_label_selector(Some(selector))
            .ok()
            .map(|s| s.to_string()),
    }
}

fn validate_int_or_percent(v: &IntOrString, path: &Path, errs: &mut Errors) {
    match v {
        IntOrString::Int(n) if *n < 0 => errs.push(FieldError::invalid(
            path,
            n,
            "must be greater than or equal to 0",
        )),
        IntOrString::String(s) => {
            let ok = s.ends_with('%')
                && s.len() > 1
                && s[..s.len() - 1].bytes().all(|c| c.is_ascii_digit());
            if !ok {
                errs.push(FieldError::invalid(
                    path,
                    s,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ));
            }
        }
        _ => {}
    }
}

fn is_zero(v: Option<&IntOrString>) -> bool {
    match v {
        None => true,
        Some(IntOrString::Int(n)) => *n == 0,
        Some(IntOrString::String(s)) => s.trim_end_matches('%') == "0",
    }
}
