//! `authorization.k8s.io/v1` reviews: what `kubectl auth can-i` asks. This server authorizes
//! every authenticated request (there is no RBAC enforcement yet), so it answers as upstream's
//! AlwaysAllow authorizer does: every access review is allowed, and a rules review lists
//! everything. The reviews are not stored; `create` is their only verb. A
//! LocalSubjectAccessReview is the namespaced form a namespace's admin may ask: it answers
//! the same, once its namespaces agree.

use std::sync::Arc;

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, NonResourceRule, ResourceRule, SelfSubjectAccessReview,
    SelfSubjectRulesReview, SubjectAccessReview, SubjectAccessReviewSpec,
    SubjectAccessReviewStatus, SubjectRulesReviewStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::validation::{FieldError, NameRule, Path};
use minik8s_api::{ApiError, ResourceInfo, Target};

use super::codec;
use super::render;
use super::request::Verb;
use super::resource::{ApiRequest, Endpoint};
use crate::server::ApiServer;

const GROUP: &str = "authorization.k8s.io";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Review {
    SelfSubjectAccess,
    SelfSubjectRules,
    SubjectAccess,
    LocalSubjectAccess,
}

pub struct ReviewEndpoint {
    info: ResourceInfo,
    review: Review,
}

fn info(kind: &str, plural: &str) -> ResourceInfo {
    review_info(GROUP, kind, plural)
}

/// A cluster-scoped review kind of `group`/v1 whose only verb is `create`.
pub(crate) fn review_info(group: &str, kind: &str, plural: &str) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced: false,
        short_names: vec![],
        categories: vec![],
        verbs: vec!["create".into()],
        subresources: vec![],
        name_rule: NameRule::Dns1123Subdomain,
    }
}

/// Serves the reviews and describes them in OpenAPI.
pub fn register(server: &ApiServer) {
    server.openapi.register_type::<SelfSubjectAccessReview>();
    server.openapi.register_type::<SelfSubjectRulesReview>();
    server.openapi.register_type::<SubjectAccessReview>();
    server.openapi.register_type::<LocalSubjectAccessReview>();
    let mut local = info("LocalSubjectAccessReview", "localsubjectaccessreviews");
    local.namespaced = true;
    server.register(Arc::new(ReviewEndpoint {
        info: local,
        review: Review::LocalSubjectAccess,
    }));
    for (kind, plural, review) in [
        (
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            Review::SelfSubjectAccess,
        ),
        (
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            Review::SelfSubjectRules,
        ),
        (
            "SubjectAccessReview",
            "subjectaccessreviews",
            Review::SubjectAccess,
        ),
    ] {
        server.register(Arc::new(ReviewEndpoint {
            info: info(kind, plural),
            review,
        }));
    }
}

/// Upstream's rule: exactly one of resourceAttributes and nonResourceAttributes.
fn attributes_errors(resource: bool, non_resource: bool) -> Vec<FieldError> {
    let spec = Path::new("spec");
    match (resource, non_resource) {
        (true, true) => vec![FieldError::invalid(
            &spec.child("nonResourceAttributes"),
            "null",
            "cannot be specified in combination with resourceAttributes",
        )],
        (false, false) => vec![FieldError::invalid(
            &spec.child("resourceAttributes"),
            "null",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
        _ => vec![],
    }
}

/// Upstream's `ValidateSubjectAccessReviewSpec`.
fn spec_errors(spec: &SubjectAccessReviewSpec) -> Vec<FieldError> {
    let mut errors = attributes_errors(
        spec.resource_attributes.is_some(),
        spec.non_resource_attributes.is_some(),
    );
    if spec.user.as_deref().unwrap_or_default().is_empty()
        && spec.groups.as_ref().is_none_or(|g| g.is_empty())
    {
        errors.push(FieldError::invalid(
            &Path::new("spec").child("user"),
            "",
            "at least one of user or group must be specified",
        ));
    }
    errors
}

/// Upstream's `ValidateLocalSubjectAccessReview`: only the namespace in the metadata, the
/// same namespace in the attributes, and no non-resource attributes.
fn local_errors(review: &LocalSubjectAccessReview) -> Vec<FieldError> {
    let mut errors = spec_errors(&review.spec);
    let mut rest = review.metadata.clone();
    rest.namespace = None;
    rest.managed_fields = None;
    if rest != ObjectMeta::default() {
        errors.push(FieldError::invalid(
            &Path::new("metadata"),
            serde_json::to_string(&review.metadata).unwrap_or_default(),
            "must be empty except for namespace",
        ));
    }
    let ns = review.metadata.namespace.clone().unwrap_or_default();
    if let Some(attrs) = &review.spec.resource_attributes
        && attrs.namespace.clone().unwrap_or_default() != ns
    {
        errors.push(FieldError::invalid(
            &Path::new("spec")
                .child("resourceAttributes")
                .child("namespace"),
            attrs.namespace.clone().unwrap_or_default(),
            "must match metadata.namespace",
        ));
    }
    if review.spec.non_resource_attributes.is_some() {
        errors.push(FieldError::invalid(
            &Path::new("spec").child("nonResourceAttributes"),
            serde_json::to_string(&review.spec.non_resource_attributes).unwrap_or_default(),
            "disallowed on this kind of request",
        ));
    }
    errors
}

/// Reviews are not objects: their metadata must be empty (managedFields aside).
fn metadata_errors(meta: &ObjectMeta) -> Vec<FieldError> {
    let mut rest = meta.clone();
    rest.managed_fields = None;
    if rest == ObjectMeta::default() {
        vec![]
    } else {
        vec![FieldError::invalid(
            &Path::new("metadata"),
            serde_json::to_string(meta).unwrap_or_default(),
            "must be empty",
        )]
    }
}

fn allowed() -> SubjectAccessReviewStatus {
    SubjectAccessReviewStatus {
        allowed: true,
        ..Default::default()
    }
}

/// A review's body, decoded as `info`'s kind.
pub(crate) fn decode_review<T: serde::de::DeserializeOwned + serde::Serialize>(
    info: &ResourceInfo,
    req: &ApiRequest,
) -> Result<(T, Vec<String>), ApiError> {
    codec::decode_body(
        req.content_type(),
        &req.body,
        &info.kind,
        &info.api_version(),
        false,
        req.field_validation()?,
        |_| {},
    )
}

/// Reviews are only created, at the collection's path (in a namespace for the namespaced
/// kind).
pub(crate) fn check_review_create(info: &ResourceInfo, req: &ApiRequest) -> Result<(), ApiError> {
    let t = &req.target;
    if t.namespace.is_some() != info.namespaced || t.subresource.is_some() {
        return Err(ApiError::path_not_found());
    }
    let target = Target {
        group: &info.group,
        resource: &info.plural,
        name: t.name.as_deref().unwrap_or_default(),
    };
    if t.verb != Verb::Create || t.name.is_some() {
        return Err(ApiError::method_not_supported(target, t.verb.as_str()));
    }
    req.dry_run()?;
    Ok(())
}

impl ReviewEndpoint {
    fn decode<T: serde::de::DeserializeOwned + serde::Serialize>(
        &self,
        req: &ApiRequest,
    ) -> Result<(T, Vec<String>), ApiError> {
        decode_review(&self.info, req)
    }

    async fn dispatch(&self, req: &ApiRequest) -> Result<Response, ApiError> {
        check_review_create(&self.info, req)?;
        let kind = self.info.kind.as_str();
        let invalid = |errors: Vec<FieldError>| ApiError::invalid(kind, GROUP, "", &errors);
        let (resp, warnings) = match self.review {
            Review::SelfSubjectAccess => {
                let (mut review, warnings): (SelfSubjectAccessReview, _) = self.decode(req)?;
                let mut errors = metadata_errors(&review.metadata);
                errors.extend(attributes_errors(
                    review.spec.resource_attributes.is_some(),
                    review.spec.non_resource_attributes.is_some(),
                ));
                if !errors.is_empty() {
                    return Err(invalid(errors));
                }
                review.status = Some(allowed());
                (
                    render::write_response(&req.headers, StatusCode::CREATED, &review),
                    warnings,
                )
            }
            Review::SubjectAccess => {
                let (mut review, warnings): (SubjectAccessReview, _) = self.decode(req)?;
                let mut errors = metadata_errors(&review.metadata);
                errors.extend(spec_errors(&review.spec));
                if !errors.is_empty() {
                    return Err(invalid(errors));
                }
                review.status = Some(allowed());
                (
                    render::write_response(&req.headers, StatusCode::CREATED, &review),
                    warnings,
                )
            }
            Review::LocalSubjectAccess => {
                let (mut review, warnings): (LocalSubjectAccessReview, _) = self.decode(req)?;
                let ns = req.target.namespace.clone().unwrap_or_default();
                // The create handler's rule: the body's namespace is the path's, or agrees.
                match review.metadata.namespace.as_deref() {
                    None | Some("") => review.metadata.namespace = Some(ns.clone()),
                    Some(given) if given != ns => {
                        return Err(ApiError::bad_request(
                            "the namespace of the provided object does not match the namespace sent on the request",
                        ));
                    }
                    Some(_) => {}
                }
                let errors = local_errors(&review);
                if !errors.is_empty() {
                    return Err(invalid(errors));
                }
                review.status = Some(allowed());
                (
                    render::write_response(&req.headers, StatusCode::CREATED, &review),
                    warnings,
                )
            }
            Review::SelfSubjectRules => {
                let (mut review, warnings): (SelfSubjectRulesReview, _) = self.decode(req)?;
                let everything = || vec!["*".to_string()];
                review.status = Some(SubjectRulesReviewStatus {
                    resource_rules: vec![ResourceRule {
                        verbs: everything(),
                        api_groups: Some(everything()),
                        resources: Some(everything()),
                        resource_names: None,
                    }],
                    non_resource_rules: vec![NonResourceRule {
                        verbs: everything(),
                        non_resource_urls: Some(everything()),
                    }],
                    incomplete: false,
                    evaluation_error: None,
                });
                (
                    render::write_response(&req.headers, StatusCode::CREATED, &review),
                    warnings,
                )
            }
        };
        Ok(codec::with_warnings(resp, &warnings))
    }
}

#[async_trait]
impl Endpoint for ReviewEndpoint {
    fn info(&self) -> &ResourceInfo {
        &self.info
    }

    async fn serve(&self, req: ApiRequest) -> Response {
        match self.dispatch(&req).await {
            Ok(resp) => resp,
            Err(e) => render::error_response(&req.headers, &e),
        }
    }
}
