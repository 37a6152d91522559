//! The CertificateSigningRequest `approval` subresource: how `kubectl certificate approve`
//! and `deny` record a decision. Only the Approved and Denied conditions of the body are
//! taken (upstream's approval strategy); the spec and the rest of the status stay as stored.
//! And who asked: a new request records its creator ([`Requester`]), which approvers trust.

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use minik8s_api::ApiError;
use minik8s_api::kinds::certificates::apply_approval;
use minik8s_api::strategy::{BuiltIn, Kind};

use super::codec::json;
use super::request::Verb;
use super::resource::{ApiRequest, Extension};
use crate::registry::generic::{CreateAdmission, GenericRegistry};

pub struct CertificateSigningRequestExtension;

/// Upstream's CSR strategy `PrepareForCreate`: `spec.username`, `uid`, `groups` and `extra`
/// are the authenticated creator's, whatever the body says, so an approver that reviews the
/// requester's permissions (the CSR approving controller) judges who really asked.
pub struct Requester;

#[async_trait]
impl CreateAdmission<CertificateSigningRequest> for Requester {
    async fn admit(&self, csr: &mut CertificateSigningRequest, _: bool) -> Result<(), ApiError> {
        let spec = &mut csr.spec;
        spec.username = None;
        spec.uid = None;
        spec.groups = None;
        spec.extra = None;
        // The server's own writes have no caller; clients' always do.
        if let Some(caller) = crate::admission::webhook::current_caller() {
            spec.username = Some(caller.user.name.clone()).filter(|u| !u.is_empty());
            spec.uid = Some(caller.user.uid.clone()).filter(|u| !u.is_empty());
            spec.groups = Some(caller.user.groups.clone()).filter(|g| !g.is_empty());
            spec.extra = (!caller.extra.is_empty()).then(|| caller.extra.clone());
        }
        Ok(())
    }
}

#[async_trait]
impl Extension<BuiltIn<CertificateSigningRequest>> for CertificateSigningRequestExtension {
    async fn handle(
        &self,
        reg: &GenericRegistry<BuiltIn<CertificateSigningRequest>>,
        req: &ApiRequest,
    ) -> Option<Result<Response, ApiError>> {
        match (&req.target.verb, req.target.subresource.as_deref()) {
            (Verb::Update, Some("approval")) => Some(approval(reg, req).await),
            (Verb::Get, Some("approval")) => Some(
                reg.get(None, req.name())
                    .await
                    .map(|csr| json(StatusCode::OK, &csr)),
            ),
            (_, Some("approval")) => Some(Err(ApiError::method_not_supported(
                reg.target(req.name()),
                req.target.verb.as_str(),
            ))),
            _ => None,
        }
    }
}

async fn approval(
    reg: &GenericRegistry<BuiltIn<CertificateSigningRequest>>,
    req: &ApiRequest,
) -> Result<Response, ApiError> {
    const KIND: &str = "CertificateSigningRequest";
    let (body, precondition): (CertificateSigningRequest, _) =
        req.named_body(KIND, "certificates.k8s.io/v1")?;
    let name = req.name();
    let (csr, _) = reg
        .guaranteed_update(None, name, precondition, req.dry_run()?, |current| {
            let mut new = current.clone();
            apply_approval(&mut new, &body);
            let mut errs = Vec::new();
            new.validate_update(&current, &mut errs);
            match errs.is_empty() {
                true => Ok(new),
                false => Err(ApiError::invalid(KIND, "certificates.k8s.io", name, &errs)),
            }
        })
        .await?;
    Ok(json(StatusCode::OK, &csr))
}
