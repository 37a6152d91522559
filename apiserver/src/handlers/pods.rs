//! Pod subresources beyond the generic ones: `binding`, which the scheduler uses to place a
//! pod, and `eviction` (see [`super::eviction`]); and `bindings`, the older way to bind that
//! upstream still serves, which names the pod in the body instead of the path.

use std::sync::Arc;

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::core::v1::{Binding, Pod, PodCondition};
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, ResourceInfo, Target, meta};

use super::codec::{self, json};
use super::eviction::{self, Budgets};
use super::request::Verb;
use super::resource::{ApiRequest, Endpoint, Extension};
use crate::registry::external::Operation;
use crate::registry::generic::GenericRegistry;

pub struct PodExtension {
    pub budgets: Budgets,
}

#[async_trait]
impl Extension<BuiltIn<Pod>> for PodExtension {
    async fn handle(
        &self,
        reg: &GenericRegistry<BuiltIn<Pod>>,
        req: &ApiRequest,
    ) -> Option<Result<Response, ApiError>> {
        match (&req.target.verb, req.target.subresource.as_deref()) {
            (Verb::Create, Some("binding")) => Some(bind(reg, req).await),
            (Verb::Create, Some("eviction")) => Some(evict(reg, &self.budgets, req).await),
            _ => None,
        }
    }
}

async fn evict(
    reg: &GenericRegistry<BuiltIn<Pod>>,
    budgets: &Budgets,
    req: &ApiRequest,
) -> Result<Response, ApiError> {
    let ns = req.namespace().unwrap_or_default();
    let dry_run = req.dry_run()?;
    eviction::evict(
        reg,
        budgets,
        ns,
        req.name(),
        req.content_type(),
        &req.body,
        dry_run,
    )
    .await?;
    Ok(json(
        StatusCode::CREATED,
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

fn decode_binding(req: &ApiRequest) -> Result<Binding, ApiError> {
    let value = codec::parse_body(req.content_type(), &req.body, "Binding")?;
    codec::decode_object(value, "Binding", "v1", false)
}

/// `pods/NAME/binding`.
async fn bind(reg: &GenericRegistry<BuiltIn<Pod>>, req: &ApiRequest) -> Result<Response, ApiError> {
    let mut binding = decode_binding(req)?;
    let name = req.name();
    if binding.metadata.name.as_deref().is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            binding.metadata.name.clone().unwrap_or_default()
        )));
    }
    let dry_run = req.dry_run()?;
    let kind = ["", "v1", "Binding"];
    reg.admit_subresource(
        Operation::Create,
        req.namespace(),
        name,
        "binding",
        kind,
        &mut binding,
        None,
        dry_run,
    )
    .await?;
    assign(reg, req.namespace(), name, &binding, dry_run).await
}

/// Assigns a pod to a node once, and marks it scheduled.
async fn assign(
    reg: &GenericRegistry<BuiltIn<Pod>>,
    ns: Option<&str>,
    name: &str,
    binding: &Binding,
    dry_run: bool,
) -> Result<Response, ApiError> {
    let binding_target = Target {
        group: "",
        resource: "pods/binding",
        name,
    };
    let node = binding.target.name.clone().unwrap_or_default();
    if node.is_empty() {
        let err = minik8s_api::validation::FieldError::required(
            &minik8s_api::validation::Path::new("target").child("name"),
            "",
        );
        return Err(ApiError::invalid("Binding", "", name, &[err]));
    }
    reg.guaranteed_update(ns, name, None, dry_run, |mut pod| {
        if let Some(uid) = binding.metadata.uid.as_deref()
            && pod.metadata.uid.as_deref() != Some(uid)
        {
            return Err(ApiError::conflict(
                binding_target,
                "the UID in the binding does not match the pod",
            ));
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return Err(ApiError::conflict(
                binding_target,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let spec = pod.spec.get_or_insert_with(Default::default);
        if let Some(existing) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
            return Err(ApiError::conflict(
                binding_target,
                &format!("pod {name} is already assigned to node \"{existing}\""),
            ));
        }
        spec.node_name = Some(node.clone());
        let status = pod.status.get_or_insert_with(Default::default);
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "PodScheduled");
        conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: Some(meta::now()),
            ..Default::default()
        });
        Ok(pod)
    })
    .await?;
    Ok(json(
        StatusCode::CREATED,
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// `POST /api/v1/namespaces/NS/bindings`, binding the pod the body names.
pub struct BindingsEndpoint {
    info: ResourceInfo,
    pods: Arc<GenericRegistry<BuiltIn<Pod>>>,
}

impl BindingsEndpoint {
    pub fn new(pods: Arc<GenericRegistry<BuiltIn<Pod>>>) -> Self {
        let mut info = super::authorization::review_info("", "Binding", "bindings");
        info.namespaced = true;
        BindingsEndpoint { info, pods }
    }

    async fn dispatch(&self, req: &ApiRequest) -> Result<Response, ApiError> {
        let t = &req.target;
        if t.namespace.is_none() || t.subresource.is_some() {
            return Err(ApiError::path_not_found());
        }
        if t.verb != Verb::Create || t.name.is_some() {
            let target = Target {
                group: "",
                resource: "bindings",
                name: t.name.as_deref().unwrap_or_default(),
            };
            return Err(ApiError::method_not_supported(target, t.verb.as_str()));
        }
        let binding = decode_binding(req)?;
        let Some(name) = binding.metadata.name.clone().filter(|n| !n.is_empty()) else {
            let err = minik8s_api::validation::FieldError::required(
                &minik8s_api::validation::Path::new("metadata").child("name"),
                "name or generateName is required",
            );
            return Err(ApiError::invalid("Binding", "", "", &[err]));
        };
        assign(&self.pods, req.namespace(), &name, &binding, req.dry_run()?).await
    }
}

#[async_trait]
impl Endpoint for BindingsEndpoint {
    fn info(&self) -> &ResourceInfo {
        &self.info
    }

    async fn serve(&self, req: ApiRequest) -> Response {
        match self.dispatch(&req).await {
            Ok(resp) => resp,
            Err(e) => super::render::error_response(&req.headers, &e),
        }
    }
}
