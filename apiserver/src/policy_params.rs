//! The server reads ValidatingAdmissionPolicy parameters itself: a parameter object may be of
//! any served kind (a ConfigMap, a custom resource), so it is read through the kind's endpoint
//! as a client's GET or LIST would be, as the server's own user.

use std::sync::Arc;

use axum::body::to_bytes;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use serde_json::Value;

use crate::admission::webhook::policy::ParamSource;
use crate::auth::UserInfo;
use crate::handlers::request::{ResourceRequest, Verb};
use crate::handlers::resource::{ApiRequest, Endpoint};
use crate::server::ApiServer;

/// The largest parameter list read (a policy's parameters are small objects).
const LIMIT: usize = 16 << 20;

impl ApiServer {
    fn param_endpoint(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(minik8s_api::ResourceInfo, Arc<dyn Endpoint>), String> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let info = self
            .resources()
            .into_iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
            .ok_or_else(|| format!("no resource of kind {kind} is served at {api_version}"))?;
        let endpoint = self
            .endpoint(&info.group, &info.version, &info.plural)
            .ok_or_else(|| format!("no resource of kind {kind} is served at {api_version}"))?;
        Ok((info, endpoint))
    }
}

#[async_trait::async_trait]
impl ParamSource for ApiServer {
    fn namespaced(&self, api_version: &str, kind: &str) -> Result<bool, String> {
        Ok(self.param_endpoint(api_version, kind)?.0.namespaced)
    }

    async fn fetch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<Vec<Value>, String> {
        let (info, endpoint) = self.param_endpoint(api_version, kind)?;
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let req = ApiRequest {
            target: ResourceRequest {
                group: info.group.clone(),
                version: info.version.clone(),
                namespace: namespace.map(String::from),
                resource: info.plural.clone(),
                name: name.map(String::from),
                subresource: None,
                subpath: None,
                verb: if name.is_some() {
                    Verb::Get
                } else {
                    Verb::List
                },
            },
            query: Vec::new(),
            headers,
            body: Bytes::new(),
            user: UserInfo {
                name: "system:apiserver".into(),
                uid: String::new(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            },
            extra: Default::default(),
        };
        let resp = endpoint.serve(req).await;
        let status = resp.status();
        let body = to_bytes(resp.into_body(), LIMIT)
            .await
            .map_err(|e| format!("reading the params: {e}"))?;
        if status == http::StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        let value: Value =
            serde_json::from_slice(&body).map_err(|e| format!("reading the params: {e}"))?;
        if !status.is_success() {
            return Err(value["message"]
                .as_str()
                .unwrap_or("reading the params failed")
                .to_string());
        }
        Ok(match name {
            Some(_) => vec![value],
            None => match value.get("items") {
                Some(Value::Array(items)) => items.clone(),
                _ => Vec::new(),
            },
        })
    }
}
