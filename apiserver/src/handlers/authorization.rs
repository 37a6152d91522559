//! `authorization.k8s.io/v1` reviews: what `kubectl auth can-i` asks, answered by the same
//! authorizer chain that judges requests (so a review and the request it describes agree),
//! and a rules review lists the rules the chain would apply. The reviews are not stored;
//! `create` is their only verb. A LocalSubjectAccessReview is the namespaced form a
//! namespace's admin may ask: it answers the same, once its namespaces agree.

use std::sync::Arc;

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, NonResourceAttributes, NonResourceRule, ResourceAttributes,
    ResourceRule, SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
    SubjectAccessReviewSpec, SubjectAccessReviewStatus, SubjectRulesReviewStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::rbac::Attributes;
use minik8s_api::validation::{FieldError, NameRule, Path};
use minik8s_api::{ApiError, ResourceInfo, Target};

use super::codec;
use super::render;
use super::request::Verb;
use super::resource::{ApiRequest, Endpoint};
use crate::authz::Decision;
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
    authorizer: Arc<crate::authz::Authorizer>,
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
    let authorizer = server
        .options
        .authorizer
        .clone()
        .unwrap_or_else(crate::authz::default_authorizer);
    let mut local = info("LocalSubjectAccessReview", "localsubjectaccessreviews");
    local.namespaced = true;
    server.register(Arc::new(ReviewEndpoint {
        info: local,
        review: Review::LocalSubjectAccess,
        authorizer: authorizer.clone(),
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
            authorizer: authorizer.clone(),
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

/// The attributes a review asks about, for `user` in `groups`.
fn review_attributes(
    user: &str,
    groups: &[String],
    resource: Option<&ResourceAttributes>,
    non_resource: Option<&NonResourceAttributes>,
) -> Attributes {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut a = Attributes {
        user: user.into(),
        groups: groups.to_vec(),
        ..Default::default()
    };
    if let Some(r) = resource {
        a.resource_request = true;
        a.verb = s(&r.verb);
        a.namespace = s(&r.namespace);
        a.api_group = s(&r.group);
        a.resource = s(&r.resource);
        a.subresource = s(&r.subresource);
        a.name = s(&r.name);
    } else if let Some(n) = non_resource {
        a.verb = s(&n.verb);
        a.path = s(&n.path);
    }
    a
}

/// The chain's answer as a review's status.
fn decide(authorizer: &crate::authz::Authorizer, a: &Attributes) -> SubjectAccessReviewStatus {
    match authorizer.authorize(a) {
        Decision::Allow => SubjectAccessReviewStatus {
            allowed: true,
            ..Default::default()
        },
        Decision::Deny(why) => SubjectAccessReviewStatus {
            allowed: false,
            denied: Some(true),
            reason: Some(why).filter(|r| !r.is_empty()),
            ..Default::default()
        },
        Decision::NoOpinion(why) => SubjectAccessReviewStatus {
            allowed: false,
            reason: Some(why).filter(|r| !r.is_empty()),
            ..Default::default()
        },
    }
}

/// The rules the chain applies to a user in a namespace, as a rules review lists them.
fn rules_status(
    authorizer: &crate::authz::Authorizer,
    user: &str,
    groups: &[String],
    namespace: &str,
) -> SubjectRulesReviewStatus {
    let (rules, complete) = authorizer.rules_for(user, groups, namespace);
    let mut status = SubjectRulesReviewStatus {
        incomplete: !complete,
        ..Default::default()
    };
    for r in rules {
        if r.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty()) {
            status.non_resource_rules.push(NonResourceRule {
                verbs: r.verbs,
                non_resource_urls: r.non_resource_urls,
            });
        } else {
            status.resource_rules.push(ResourceRule {
                verbs: r.verbs,
                api_groups: r.api_groups,
                resources: r.resources,
                resource_names: r.resource_names,
            });
        }
    }
    status
}

/// What a (Local)SubjectAccessReview's spec asks about.
fn spec_attributes(spec: &SubjectAccessReviewSpec) -> Attributes {
    review_attributes(
        spec.user.as_deref().unwrap_or_default(),
        spec.groups.as_deref().unwrap_or_default(),
        spec.resource_attributes.as_ref(),
        spec.non_resource_attributes.as_ref(),
    )
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
                let a = review_attributes(
                    &req.user.name,
                    &req.user.groups,
                    review.spec.resource_attributes.as_ref(),
                    review.spec.non_resource_attributes.as_ref(),
                );
                review.status = Some(decide(&self.authorizer, &a));
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
                review.status = Some(decide(&self.authorizer, &spec_attributes(&review.spec)));
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
                review.status = Some(decide(&self.authorizer, &spec_attributes(&review.spec)));
                (
                    render::write_response(&req.headers, StatusCode::CREATED, &review),
                    warnings,
                )
            }
            Review::SelfSubjectRules => {
                let (mut review, warnings): (SelfSubjectRulesReview, _) = self.decode(req)?;
                let namespace = review.spec.namespace.clone().unwrap_or_default();
                review.status = Some(rules_status(
                    &self.authorizer,
                    &req.user.name,
                    &req.user.groups,
                    &namespace,
                ));
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
