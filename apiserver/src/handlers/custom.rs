//! Serving custom resources: one endpoint per served version of a CRD, the generic REST
//! machinery over [`CustomStrategy`], plus what upstream's CRD handler adds in front of it
//! (no protobuf, no strategic merge patch, no creates while the CRD terminates, `kind`
//! required in bodies) and watches that end when the CRD's serving is torn down.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use http::StatusCode;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use minik8s_api::crd::{CustomObject, CustomStrategy};
use minik8s_api::strategy::Strategy;
use minik8s_api::{ApiError, ResourceInfo, Target};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::codec::{self, status_response};
use super::openapi::{Gvk, KindSchema};
use super::request::Verb;
use super::resource::{ApiRequest, Endpoint, ResourceEndpoint, ServeOptions};
use crate::registry::generic::GenericRegistry;
use crate::storage::DynStore;

/// Patch types upstream accepts for custom resources, in its order.
const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];
/// Body types upstream accepts for custom resources.
const BODY_TYPES: &[&str] = &["application/json", "application/yaml"];

/// Upstream's 415 for a body or patch type a custom resource does not take.
fn unsupported(accepted: &[&str]) -> ApiError {
    ApiError {
        code: 415,
        reason: "UnsupportedMediaType",
        message: format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
        details: None,
    }
}

/// One served version of a custom resource.
pub struct CustomEndpoint {
    inner: ResourceEndpoint<CustomStrategy>,
    terminating: bool,
    /// Turns true when this serving is torn down; open watches end then.
    teardown: watch::Receiver<bool>,
}

impl CustomEndpoint {
    pub fn new(
        strategy: CustomStrategy,
        store: DynStore,
        options: ServeOptions,
        terminating: bool,
        teardown: watch::Receiver<bool>,
        schema: KindSchema,
    ) -> Self {
        let registry = Arc::new(crate::admission::admitted(
            GenericRegistry::new(strategy, store),
            &options.admission,
            options.namespaces.as_ref(),
            options.external_admission.as_ref(),
        ));
        CustomEndpoint {
            // The version's schema types server-side apply (list and map types).
            inner: ResourceEndpoint::new(registry, options).with_schema(schema),
            terminating,
            teardown,
        }
    }

    fn registry(&self) -> &GenericRegistry<CustomStrategy> {
        &self.inner.registry
    }

    fn target<'a>(&'a self, name: &'a str) -> Target<'a> {
        self.registry().target(name)
    }

    /// What upstream's CRD handler refuses before the generic handlers run.
    fn precheck(&self, req: &ApiRequest) -> Result<(), ApiError> {
        let verb = &req.target.verb;
        if matches!(verb, Verb::Patch) {
            let media = codec::media_type(req.content_type());
            if !PATCH_TYPES.contains(&media.as_str()) {
                return Err(unsupported(PATCH_TYPES));
            }
            return Ok(());
        }
        if !matches!(verb, Verb::Create | Verb::Update) {
            return Ok(());
        }
        let media = codec::media_type(req.content_type());
        if !matches!(
            media.as_str(),
            "application/json" | "application/yaml" | "application/x-yaml" | "text/yaml" | "*/*"
        ) {
            return Err(unsupported(BODY_TYPES));
        }
        if req.target.subresource.as_deref() == Some("scale") {
            return Ok(());
        }
        let info = self.registry().strategy.info();
        let value = codec::parse_body(req.content_type(), &req.body, &info.kind)?;
        if value
            .get("kind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            // The decoder of unstructured objects needs the kind.
            codec::decode_object::<CustomObject>(value, &info.kind, &info.api_version(), true)?;
        } else if *verb == Verb::Create && self.terminating {
            let name = value["metadata"]["name"].as_str().unwrap_or_default();
            return Err(ApiError::forbidden(
                self.target(name),
                "create not allowed while custom resource definition is terminating",
            ));
        }
        Ok(())
    }

    /// GET of the scale subresource fails, as upstream's, when the spec has no replicas.
    async fn check_scale(&self, req: &ApiRequest) -> Result<(), ApiError> {
        if req.target.verb != Verb::Get || req.target.subresource.as_deref() != Some("scale") {
            return Ok(());
        }
        let obj = self.registry().get(req.namespace(), req.name()).await?;
        match self.registry().strategy.spec_replicas(&obj) {
            Some((path, false)) => Err(ApiError::internal(format!(
                "the spec replicas field {path:?} does not exist"
            ))),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Endpoint for CustomEndpoint {
    fn info(&self) -> &ResourceInfo {
        self.registry().strategy.info()
    }

    async fn serve(&self, req: ApiRequest) -> Response {
        if let Err(e) = self.precheck(&req) {
            return status_response(&e);
        }
        if let Err(e) = self.check_scale(&req).await {
            return status_response(&e);
        }
        let watch = req.target.verb == Verb::Watch;
        let resp = self.inner.serve(req).await;
        if !watch || resp.status() != StatusCode::OK {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let stream = until_torn_down(body.into_data_stream(), self.teardown.clone());
        Response::from_parts(parts, Body::from_stream(stream))
    }
}

/// Writes whole-number bounds as integers (`10`, not `10.0`), as Go encodes the float64 fields
/// of a JSONSchemaProps. Defaults, enums and examples keep the form they were given in.
fn integral_bounds(schema: &mut Value) {
    match schema {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                match k.as_str() {
                    "maximum" | "minimum" | "multipleOf" => {
                        if let Some(f) = v.as_f64()
                            && f.fract() == 0.0
                            && f.abs() < 9_007_199_254_740_992.0
                        {
                            *v = Value::from(f as i64);
                        }
                    }
                    "default" | "enum" | "example" => {}
                    _ => integral_bounds(v),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(integral_bounds),
        _ => {}
    }
}

/// How long a watch goes on delivering events after its serving was torn down, so that what
/// happened just before (the deletes of a CRD's cleanup) still reaches the client.
const TEARDOWN_GRACE: Duration = Duration::from_millis(200);

/// `stream` until the teardown signal: what is ready then, and what follows within
/// [`TEARDOWN_GRACE`], is still delivered.
fn until_torn_down<S, T>(
    stream: S,
    teardown: watch::Receiver<bool>,
) -> impl futures::Stream<Item = T> + Send
where
    S: futures::Stream<Item = T> + Send + Unpin + 'static,
    T: Send + 'static,
{
    futures::stream::unfold(
        (stream, teardown, false),
        |(mut stream, mut teardown, closing)| async move {
            if !closing {
                let next = tokio::select! {
                    biased;
                    item = stream.next() => Some(item),
                    _ = teardown.wait_for(|done| *done) => None,
                };
                if let Some(item) = next {
                    return item.map(|i| (i, (stream, teardown, false)));
                }
            }
            match tokio::time::timeout(TEARDOWN_GRACE, stream.next()).await {
                Ok(Some(item)) => Some((item, (stream, teardown, true))),
                _ => None,
            }
        },
    )
}

/// What serving one CRD version takes: its endpoint and the schema OpenAPI publishes.
pub struct ServedVersion {
    pub endpoint: Arc<CustomEndpoint>,
    pub gvk: Gvk,
    pub schema: KindSchema,
}

/// The endpoints of every served version of `crd`, under its accepted names.
pub fn served_versions(
    crd: &CustomResourceDefinition,
    store: &DynStore,
    options: &ServeOptions,
    terminating: bool,
    teardown: &watch::Receiver<bool>,
) -> Vec<ServedVersion> {
    let mut out = Vec::new();
    for v in crd.spec.versions.iter().filter(|v| v.served) {
        let strategy = match CustomStrategy::new(crd, &v.name) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(crd = crd.metadata.name.as_deref().unwrap_or(""), version = %v.name, error = %e, "not serving");
                continue;
            }
        };
        let info = strategy.info().clone();
        let schema = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok())
            .map(|mut s| {
                integral_bounds(&mut s);
                s
            })
            .unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
        let schema = KindSchema::Json(Arc::new(schema));
        out.push(ServedVersion {
            endpoint: Arc::new(CustomEndpoint::new(
                strategy,
                store.clone(),
                options.clone(),
                terminating,
                teardown.clone(),
                schema.clone(),
            )),
            gvk: Gvk::new(&info.group, &info.version, &info.kind),
            schema,
        });
    }
    out
}
