//! How a workflow's Task calls its Function: through a node's function gateway, the door
//! every other client uses, so a workflow's calls are counted by the autoscaler, wake a
//! function at zero and split traffic exactly as anyone's. A call's answer becomes a Task's
//! result or its error as Step Functions reports a Lambda's: the runtime's `errorType` is the
//! error name (what Retry and Catch match), the whole error payload the cause.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Node;
use minik8s_controllers::informers::Cache;
use serde_json::Value;

use super::asl::{Failure, errors};
use crate::function::GATEWAY_PORT;

/// Calls Functions for Tasks.
pub trait Invoke: Send + Sync {
    /// Calls Function `name` in `namespace` with `input`; its JSON answer, or the error.
    fn call(
        &self,
        namespace: &str,
        name: &str,
        input: &Value,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Value, Failure>>;
}

/// Calls through the gateway of the first node (by InternalIP) that runs containers.
pub struct Gateway {
    nodes: Cache<Node>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Gateway {
    pub fn new(nodes: Cache<Node>) -> Arc<Gateway> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Arc::new(Gateway { nodes, client })
    }

    fn address(&self) -> Option<IpAddr> {
        let nodes = self.nodes.state();
        minik8s_proxy::ingress::node_addresses(nodes.iter().map(|n| &**n))
            .into_iter()
            .next()
    }
}

impl Invoke for Gateway {
    fn call(
        &self,
        namespace: &str,
        name: &str,
        input: &Value,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Value, Failure>> {
        let client = self.client.clone();
        let address = self.address();
        let body = Bytes::from(input.to_string());
        let function = format!("{name}.{namespace}");
        Box::pin(async move {
            let Some(ip) = address else {
                return Err(Failure::new(
                    errors::TASK_FAILED,
                    "no node has an InternalIP: there is no function gateway to call",
                ));
            };
            let host = match ip {
                IpAddr::V4(ip) => format!("{ip}:{GATEWAY_PORT}"),
                IpAddr::V6(ip) => format!("[{ip}]:{GATEWAY_PORT}"),
            };
            let request = http::Request::post(format!("http://{host}/function/{function}"))
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(body))
                .map_err(|e| Failure::new(errors::TASK_FAILED, e.to_string()))?;
            let call = async {
                let response = client.request(request).await.map_err(|e| {
                    Failure::new(errors::TASK_FAILED, format!("calling {function}: {e}"))
                })?;
                let status = response.status();
                let body = response.into_body().collect().await.map_err(|e| {
                    Failure::new(
                        errors::TASK_FAILED,
                        format!("reading {function}'s answer: {e}"),
                    )
                })?;
                Ok::<_, Failure>((status, body.to_bytes()))
            };
            let (status, body) = tokio::time::timeout(timeout, call).await.map_err(|_| {
                Failure::new(
                    errors::TIMEOUT,
                    format!(
                        "{function} did not answer within {}s",
                        timeout.as_secs_f64()
                    ),
                )
            })??;
            answer(&function, status, &body)
        })
    }
}

/// A Task's result from a function's HTTP answer.
pub fn answer(function: &str, status: http::StatusCode, body: &[u8]) -> Result<Value, Failure> {
    let text = String::from_utf8_lossy(body);
    let json = if body.is_empty() {
        Some(Value::Null)
    } else {
        serde_json::from_slice::<Value>(body).ok()
    };
    if status.is_success() {
        return Ok(json.unwrap_or_else(|| Value::String(text.into_owned())));
    }
    // The runtime's error payload (Lambda's shape): its type is the error's name.
    if let Some(error_type) = json
        .as_ref()
        .and_then(|j| j.get("errorType"))
        .and_then(Value::as_str)
    {
        return Err(Failure::new(error_type, text.trim_end()));
    }
    Err(Failure::new(
        errors::TASK_FAILED,
        format!("{function} answered {status}: {}", text.trim_end()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn answers_become_results_or_errors() {
        assert_eq!(
            answer("f.ns", StatusCode::OK, br#"{"a":1}"#),
            Ok(serde_json::json!({"a": 1}))
        );
        assert_eq!(
            answer("f.ns", StatusCode::OK, b"plain"),
            Ok(Value::String("plain".into()))
        );
        assert_eq!(answer("f.ns", StatusCode::OK, b""), Ok(Value::Null));
        let body =
            br#"{"error": "ValueError: no", "errorType": "ValueError", "errorMessage": "no"}"#;
        let err = answer("f.ns", StatusCode::INTERNAL_SERVER_ERROR, body).unwrap_err();
        assert_eq!(err.error, "ValueError");
        assert!(
            err.cause.contains("\"errorMessage\": \"no\""),
            "{}",
            err.cause
        );
        let err = answer("f.ns", StatusCode::SERVICE_UNAVAILABLE, b"no pods").unwrap_err();
        assert_eq!(err.error, errors::TASK_FAILED);
        assert_eq!(err.cause, "f.ns answered 503 Service Unavailable: no pods");
    }
}
