//! The one error type of the API: every failure a client sees is a `metav1.Status` with
//! upstream's code, reason and message wording, because clients branch on those (kubectl
//! prints the message, client-go and kube-rs match on reason and code).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

use crate::validation::FieldError;

/// A failed API request, as upstream's `StatusError`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Box<StatusDetails>>,
}

/// What a Status says about the object: its name and `resource[.group]`.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub name: &'a str,
}

impl Target<'_> {
    /// `resource.group` as upstream's `GroupResource.String()`; just `resource` for core.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self) -> StatusDetails {
        StatusDetails {
            name: (!self.name.is_empty()).then(|| self.name.to_string()),
            group: (!self.group.is_empty()).then(|| self.group.to_string()),
            kind: (!self.resource.is_empty()).then(|| self.resource.to_string()),
            ..Default::default()
        }
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: StatusDetails) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn not_found(t: Target<'_>) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{}\" not found", t.qualified(), t.name),
        )
        .with_details(t.details())
    }

    pub fn already_exists(t: Target<'_>) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", t.qualified(), t.name),
        )
        .with_details(t.details())
    }

    /// An update that lost a race: the resourceVersion sent is not the stored one.
    pub fn conflict(t: Target<'_>, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {why}",
                t.qualified(),
                t.name
            ),
        )
        .with_details(t.details())
    }

    pub fn stale(t: Target<'_>) -> Self {
        Self::conflict(
            t,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one cause per field, worded as upstream's `NewInvalid`.
    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        // Upstream's message lists each error once (`ErrorList.ToAggregate`); causes list all.
        let mut list: Vec<String> = Vec::new();
        for e in errors.iter().map(|e| e.to_string()) {
            if !list.contains(&e) {
                list.push(e);
            }
        }
        let message = match list.len() {
            0 => format!("{qualified_kind} \"{name}\" is invalid"),
            1 => format!("{qualified_kind} \"{name}\" is invalid: {}", list[0]),
            _ => format!(
                "{qualified_kind} \"{name}\" is invalid: [{}]",
                list.join(", ")
            ),
        };
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: Some(e.kind.reason().to_string()),
                message: Some(e.body()),
                field: Some(e.field.clone()),
            })
            .collect();
        Self::new(422, "Invalid", message).with_details(StatusDetails {
            name: Some(name.to_string()),
            group: (!group.is_empty()).then(|| group.to_string()),
            kind: Some(kind.to_string()),
            causes: Some(causes),
            ..Default::default()
        })
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(t: Target<'_>, why: &str) -> Self {
        let subject = if t.name.is_empty() {
            t.qualified()
        } else {
            format!("{} \"{}\"", t.qualified(), t.name)
        };
        Self::new(403, "Forbidden", format!("{subject} is forbidden: {why}"))
            .with_details(t.details())
    }

    /// The path names nothing this server serves.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(StatusDetails::default())
    }

    pub fn method_not_supported(t: Target<'_>, action: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind \"{}\"",
                t.qualified()
            ),
        )
        .with_details(t.details())
    }

    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: {}",
                accepted.join(", ")
            ),
        )
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {content_type:?})",
                accepted.join(", ")
            ),
        )
    }

    pub fn request_entity_too_large(message: impl Into<String>) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: {}", message.into()),
        )
    }

    /// A resourceVersion or continue token older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Gone", message)
    }

    /// A resourceVersion newer than the store has reached.
    pub fn too_large_resource_version(requested: i64, current: i64) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
        )
        .with_details(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some("ResourceVersionTooLarge".into()),
                message: Some("Too large resource version".into()),
                field: None,
            }]),
            retry_after_seconds: Some(1),
            ..Default::default()
        })
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(StatusDetails {
            causes: Some(vec![StatusCause {
                message: Some(message.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        })
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// The `metav1.Status` body a client receives.
    pub fn to_status(&self) -> Status {
        Status {
            status: Some("Failure".into()),
            message: Some(self.message.clone()),
            reason: Some(self.reason.to_string()),
            details: self.details.as_deref().cloned(),
            code: Some(self.code as i32),
            metadata: ListMeta::default(),
        }
    }
}

/// The Status of a successful delete that does not return the object.
pub fn success(t: Target<'_>, uid: Option<String>) -> Status {
    Status {
        status: Some("Success".into()),
        details: Some(StatusDetails { uid, ..t.details() }),
        metadata: ListMeta::default(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::{FieldError, Path};

    #[test]
    fn messages_match_upstream_wording() {
        let t = Target {
            group: "apps",
            resource: "deployments",
            name: "web",
        };
        assert_eq!(
            ApiError::not_found(t).message,
            "deployments.apps \"web\" not found"
        );
        let core = Target {
            group: "",
            resource: "pods",
            name: "p",
        };
        assert_eq!(
            ApiError::already_exists(core).message,
            "pods \"p\" already exists"
        );
        assert_eq!(
            ApiError::stale(core).message,
            "Operation cannot be fulfilled on pods \"p\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let errs = vec![
            FieldError::required(&Path::new("spec").child("containers"), ""),
            FieldError::invalid(&Path::new("metadata").child("name"), "A", "bad"),
        ];
        let e = ApiError::invalid("Pod", "", "p", &errs);
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: [spec.containers: Required value, metadata.name: Invalid value: \"A\": bad]"
        );
        let causes = e.details.unwrap().causes.unwrap();
        assert_eq!(causes[0].reason.as_deref(), Some("FieldValueRequired"));
        assert_eq!(causes[1].field.as_deref(), Some("metadata.name"));
    }
}
