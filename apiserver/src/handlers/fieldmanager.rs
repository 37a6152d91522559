//! The field manager of the HTTP verbs: the types of a served kind (from its OpenAPI
//! schema), which manager a request writes as, and the hooks that keep
//! `metadata.managedFields` on create, update, patch and apply. The semantics live in
//! `minik8s_api::patch`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
use minik8s_api::patch::fieldpath::{PathElement, Set};
use minik8s_api::patch::managed::{self, ApplyError, FieldManager};
use minik8s_api::patch::schema::Schema;
use minik8s_api::patch::strategic::SmpError;
use minik8s_api::strategy::Strategy;
use minik8s_api::validation::{FieldError, Path};
use minik8s_api::{ApiError, ResourceInfo};
use serde_json::Value;

use super::openapi::{Gvk, KindSchema, kind_definitions};
use crate::registry::generic::Part;

/// Most bytes a field manager name may have.
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// The types of one served kind.
pub struct KindTypes {
    pub schema: Schema,
    /// The group version objects are written at: `apps/v1`, `v1`.
    pub api_version: String,
    pub kind: String,
    /// Whether the kind has a status subresource (whose fields the main resource resets).
    pub has_status: bool,
    /// Whether strategic merge patch is served: built-in kinds only (their Go types carry
    /// patch strategies); custom resources answer 415, as upstream.
    pub strategic: bool,
}

impl KindTypes {
    /// From the kind's OpenAPI schema; without one, every object is deduced.
    pub fn build(info: &ResourceInfo, schema: Option<&KindSchema>) -> KindTypes {
        let (schema, strategic) = match schema {
            None => (Schema::deduced(), false),
            Some(s) => {
                let gvk = Gvk::new(&info.group, &info.version, &info.kind);
                let (root, definitions) = kind_definitions(&gvk, Some(s));
                (
                    Schema::from_definitions(&definitions, &root),
                    matches!(s, KindSchema::Typed(_)),
                )
            }
        };
        KindTypes {
            schema,
            api_version: info.api_version(),
            kind: info.kind.clone(),
            has_status: info.subresource("status").is_some(),
            strategic,
        }
    }
}

/// The manager a write is recorded for: `fieldManager`, else the User-Agent up to its first
/// `/` (printable characters, at most 128 bytes), as upstream's `managerOrUserAgent`.
pub fn manager_or_user_agent(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    let ua = user_agent.unwrap_or_default();
    let prefix = ua.split('/').next().unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// Upstream's `ValidateFieldManager`, as a 422 about `options` (`CreateOptions`, ...).
pub fn validate_field_manager(options: &str, manager: Option<&str>) -> Result<(), ApiError> {
    let Some(manager) = manager else {
        return Ok(());
    };
    let path = Path::new("fieldManager");
    let mut errs = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errs.push(FieldError::too_long(&path, FIELD_MANAGER_MAX_LENGTH));
    }
    for (i, c) in manager.chars().enumerate() {
        if c.is_control() {
            errs.push(FieldError::invalid(
                &path,
                manager,
                format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(options, "meta.k8s.io", "", &errs))
    }
}

/// What a write through `part` may not change, so nobody owns it: the status on the main
/// resource, everything but the status on the status subresource.
pub fn reset_fields(part: Part, has_status: bool) -> Set {
    let f = |p: &[&str]| -> Vec<PathElement> { p.iter().map(|s| PathElement::field(s)).collect() };
    let paths = match part {
        Part::Main if has_status => vec![f(&["status"])],
        Part::Main => Vec::new(),
        Part::EphemeralContainers => vec![f(&["status"])],
        Part::Status => vec![
            f(&["spec"]),
            f(&["metadata", "labels"]),
            f(&["metadata", "annotations"]),
            f(&["metadata", "finalizers"]),
            f(&["metadata", "ownerReferences"]),
        ],
    };
    Set::from_paths(paths.iter().map(Vec::as_slice))
}

fn now() -> String {
    serde_json::to_value(minik8s_api::meta::now())
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The field manager of one request.
pub fn field_manager<'a>(
    types: &'a KindTypes,
    part: Part,
    subresource: &'a str,
) -> FieldManager<'a> {
    FieldManager {
        schema: &types.schema,
        api_version: &types.api_version,
        kind: &types.kind,
        subresource,
        reset: reset_fields(part, types.has_status),
        now: now(),
    }
}

fn set_managed_fields<S: Strategy>(strategy: &S, obj: &mut S::Object, json: &Value) {
    let mf = json
        .pointer("/metadata/managedFields")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok());
    strategy.meta_mut(obj).managed_fields = mf;
}

/// Records an update by `manager` on the object about to be stored.
pub fn track_update<S: Strategy>(
    strategy: &S,
    fm: &FieldManager<'_>,
    manager: &str,
    new: &mut S::Object,
    live: Option<&S::Object>,
) {
    let Ok(mut new_json) = serde_json::to_value(&*new) else {
        return;
    };
    let live_json = live.and_then(|l| serde_json::to_value(l).ok());
    fm.update(live_json.as_ref(), &mut new_json, manager);
    if let Some(live) = &live_json {
        managed::keep_unchanged_timestamps(live, &mut new_json);
    }
    set_managed_fields(strategy, new, &new_json);
}

/// After an apply: entries whose times alone changed keep their old times.
pub fn track_apply<S: Strategy>(strategy: &S, new: &mut S::Object, live: Option<&S::Object>) {
    let (Some(live), Ok(mut new_json)) = (live, serde_json::to_value(&*new)) else {
        return;
    };
    let Ok(live_json) = serde_json::to_value(live) else {
        return;
    };
    managed::keep_unchanged_timestamps(&live_json, &mut new_json);
    set_managed_fields(strategy, new, &new_json);
}

/// An apply failure as the Status upstream answers with.
pub fn apply_error(e: ApplyError) -> ApiError {
    match e {
        ApplyError::BadRequest(m) => ApiError::bad_request(m),
        ApplyError::Internal(m) => unknown_error(m),
        ApplyError::Conflicts(conflicts) => {
            let (message, causes) = managed::conflict_message(&conflicts);
            ApiError {
                code: 409,
                reason: "Conflict",
                message,
                details: Some(Box::new(StatusDetails {
                    causes: Some(
                        causes
                            .into_iter()
                            .map(|(message, field)| StatusCause {
                                reason: Some("FieldManagerConflict".into()),
                                message: Some(message),
                                field: Some(field),
                            })
                            .collect(),
                    ),
                    ..Default::default()
                })),
            }
        }
    }
}

/// A strategic merge patch failure as the Status upstream answers with.
pub fn smp_error(e: SmpError) -> ApiError {
    match e {
        SmpError::BadRequest(m) => ApiError::bad_request(m),
        SmpError::Invalid(m) => ApiError {
            code: 422,
            reason: "Invalid",
            message: m,
            details: None,
        },
        SmpError::Other(m) => unknown_error(m),
    }
}

/// An error upstream does not classify: 500 with no reason and the bare message.
fn unknown_error(message: String) -> ApiError {
    ApiError {
        code: 500,
        reason: "",
        message,
        details: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managers() {
        assert_eq!(manager_or_user_agent(Some("x"), Some("kubectl/v1.32")), "x");
        assert_eq!(
            manager_or_user_agent(None, Some("kubectl/v1.32.4 (linux/amd64) kubernetes/abc")),
            "kubectl"
        );
        assert_eq!(
            manager_or_user_agent(Some(""), Some("kube-controller-manager/v1.32.0")),
            "kube-controller-manager"
        );
        assert_eq!(manager_or_user_agent(None, None), "");
        assert!(validate_field_manager("PatchOptions", Some(&"x".repeat(129))).is_err());
        assert!(validate_field_manager("PatchOptions", Some("a\u{7}b")).is_err());
        assert!(validate_field_manager("PatchOptions", Some("kubectl")).is_ok());
    }
}
