//! `authentication.k8s.io/v1` reviews: SelfSubjectReview (`kubectl auth whoami`: who the
//! server takes the caller for, after impersonation) and TokenReview (what a bearer token
//! stands for). Neither is stored; `create` is their only verb.

use std::sync::Arc;

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::authentication::v1::{
    SelfSubjectReview, SelfSubjectReviewStatus, TokenReview, TokenReviewStatus, UserInfo,
};
use minik8s_api::validation::{FieldError, Path};
use minik8s_api::{ApiError, ResourceInfo, meta};

use super::codec;
use super::render;
use super::resource::{ApiRequest, Endpoint};
use crate::auth::{Authenticator, Extra};
use crate::server::ApiServer;

const GROUP: &str = "authentication.k8s.io";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Review {
    SelfSubject,
    Token,
}

pub struct AuthenticationEndpoint {
    info: ResourceInfo,
    review: Review,
    auth: Arc<Authenticator>,
}

/// Serves the reviews and describes them in OpenAPI.
pub fn register(server: &ApiServer) {
    server.openapi.register_type::<SelfSubjectReview>();
    server.openapi.register_type::<TokenReview>();
    for (kind, plural, review) in [
        (
            "SelfSubjectReview",
            "selfsubjectreviews",
            Review::SelfSubject,
        ),
        ("TokenReview", "tokenreviews", Review::Token),
    ] {
        server.register(Arc::new(AuthenticationEndpoint {
            info: super::authorization::review_info(GROUP, kind, plural),
            review,
            auth: server.auth.clone(),
        }));
    }
}

fn user_info(user: &crate::auth::UserInfo, extra: &Extra) -> UserInfo {
    UserInfo {
        username: Some(user.name.clone()),
        uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
        groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
        extra: (!extra.is_empty()).then(|| extra.clone()),
    }
}

impl AuthenticationEndpoint {
    fn decode<T: serde::de::DeserializeOwned + serde::Serialize>(
        &self,
        req: &ApiRequest,
    ) -> Result<(T, Vec<String>), ApiError> {
        super::authorization::decode_review(&self.info, req)
    }

    async fn dispatch(&self, req: &ApiRequest) -> Result<Response, ApiError> {
        super::authorization::check_review_create(&self.info, req)?;
        let (resp, warnings) = match self.review {
            Review::SelfSubject => {
                let (mut review, warnings): (SelfSubjectReview, _) = self.decode(req)?;
                review.metadata.creation_timestamp = Some(meta::now());
                review.status = Some(SelfSubjectReviewStatus {
                    user_info: Some(user_info(&req.user, &req.extra)),
                });
                (
                    render::write_response(&req.headers, StatusCode::CREATED, &review),
                    warnings,
                )
            }
            Review::Token => {
                let (mut review, warnings): (TokenReview, _) = self.decode(req)?;
                let token = review.spec.token.clone().unwrap_or_default();
                if token.is_empty() {
                    let err = FieldError::required(&Path::new("spec").child("token"), "");
                    return Err(ApiError::invalid("TokenReview", GROUP, "", &[err]));
                }
                let status = match self.auth.bearer(&token).await {
                    Some((mut user, extra)) => {
                        if !user.groups.iter().any(|g| g == "system:authenticated") {
                            user.groups.push("system:authenticated".into());
                        }
                        TokenReviewStatus {
                            authenticated: Some(true),
                            user: Some(user_info(&user, &extra)),
                            // Tokens are checked against the server's own audiences.
                            audiences: self
                                .auth
                                .service_accounts()
                                .map(|s| s.signer.audiences.clone()),
                            error: None,
                        }
                    }
                    None => TokenReviewStatus {
                        authenticated: Some(false),
                        user: Some(UserInfo::default()),
                        audiences: None,
                        error: Some("[invalid bearer token]".into()),
                    },
                };
                review.status = Some(status);
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
impl Endpoint for AuthenticationEndpoint {
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
