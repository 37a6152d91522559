//! The namespace `finalize` subresource: how the namespace controller says a Terminating
//! namespace's content is gone. The update that empties `spec.finalizers` removes it.

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::core::v1::Namespace;
use minik8s_api::ApiError;
use minik8s_api::strategy::BuiltIn;

use super::codec::json;
use super::request::Verb;
use super::resource::{ApiRequest, Extension};
use crate::registry::generic::GenericRegistry;

pub struct NamespaceExtension;

#[async_trait]
impl Extension<BuiltIn<Namespace>> for NamespaceExtension {
    async fn handle(
        &self,
        reg: &GenericRegistry<BuiltIn<Namespace>>,
        req: &ApiRequest,
    ) -> Option<Result<Response, ApiError>> {
        match (&req.target.verb, req.target.subresource.as_deref()) {
            (Verb::Update, Some("finalize")) => Some(finalize(reg, req).await),
            _ => None,
        }
    }
}

async fn finalize(
    reg: &GenericRegistry<BuiltIn<Namespace>>,
    req: &ApiRequest,
) -> Result<Response, ApiError> {
    let (body, precondition): (Namespace, _) = req.named_body("Namespace", "v1")?;
    let name = req.name();
    let finalizers = body.spec.as_ref().and_then(|s| s.finalizers.clone());
    let (ns, _) = reg
        .guaranteed_update(None, name, precondition, req.dry_run()?, |current| {
            let mut new = current.clone();
            new.spec.get_or_insert_with(Default::default).finalizers = finalizers.clone();
            Ok(new)
        })
        .await?;
    Ok(json(StatusCode::OK, &ns))
}
