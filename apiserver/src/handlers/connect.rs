//! Subresources served by a node's kubelet, as upstream's "connect" REST handlers: `pods/log`
//! (streamed), `pods/exec`, `pods/attach` and `pods/portforward` (upgraded connections
//! proxied byte for byte) and `nodes/proxy` (any path of the kubelet API). The pod's node
//! gives the kubelet's address; the API server calls it with its kubelet-client certificate.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use minik8s_api::validation::{FieldError, Path};
use minik8s_api::{ApiError, Target};

use super::codec::status_response;
use super::request::ResourceRequest;
use crate::kubelet::{KubeletAddress, KubeletClient, is_upgrade, kubelet_address};
use crate::registry::external::Operation;
use crate::server::ApiServer;

/// Whether the request is for a subresource the kubelet serves.
pub fn is_kubelet(r: &ResourceRequest) -> bool {
    r.group.is_empty()
        && r.version == "v1"
        && r.name.is_some()
        && matches!(
            (r.resource.as_str(), r.subresource.as_deref()),
            ("pods", Some("log" | "exec" | "attach" | "portforward")) | ("nodes", Some("proxy"))
        )
}

/// Whether the request is for a connect subresource: one the kubelet serves, or a pod's or
/// Service's proxy; their bodies and upgrades pass through unread.
pub fn is_connect(r: &ResourceRequest) -> bool {
    is_kubelet(r) || super::proxy::is_proxy(r)
}

/// Serves a connect subresource the kubelet serves; `req` is the whole request, body unread.
pub async fn serve(server: &Arc<ApiServer>, r: ResourceRequest, req: Request) -> Response {
    let result = match (r.resource.as_str(), r.subresource.as_deref()) {
        ("pods", Some("log")) => log(server, &r, req).await,
        ("pods", Some(sub @ ("exec" | "attach" | "portforward"))) => {
            stream(server, &r, sub, req).await
        }
        ("nodes", Some("proxy")) => node_proxy(server, &r, req).await,
        _ => Err(ApiError::path_not_found()),
    };
    result.unwrap_or_else(|e| status_response(&e))
}

pub(crate) fn client(server: &ApiServer) -> Result<&KubeletClient, ApiError> {
    server
        .kubelet
        .get()
        .map(|c| c.as_ref())
        .ok_or_else(|| ApiError {
            code: 503,
            reason: "ServiceUnavailable",
            message: "this API server has no kubelet client credentials".into(),
            details: None,
        })
}

async fn node_address(
    server: &ApiServer,
    node: &str,
    port: Option<u16>,
) -> Result<KubeletAddress, ApiError> {
    let node: Node = server.registry::<Node>().get(None, node).await?;
    kubelet_address(&node, port)
}

fn query(req: &Request) -> Vec<(String, String)> {
    req.uri()
        .query()
        .and_then(|q| serde_urlencoded::from_str(q).ok())
        .unwrap_or_default()
}

/// The options object a CONNECT to a pod's `sub` carries for admission (upstream's
/// PodExecOptions, PodAttachOptions, PodPortForwardOptions), from the query.
fn connect_options(sub: &str, q: &[(String, String)]) -> (&'static str, serde_json::Value) {
    let flag = |key: &str| matches!(param(q, key), Some("true" | "1"));
    let all = |key: &str| -> Vec<&str> {
        q.iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let (kind, mut options) = match sub {
        "portforward" => (
            "PodPortForwardOptions",
            serde_json::json!({"ports": all("ports").iter().filter_map(|p| p.parse::<u16>().ok()).collect::<Vec<_>>()}),
        ),
        _ => {
            let kind = if sub == "exec" {
                "PodExecOptions"
            } else {
                "PodAttachOptions"
            };
            let mut o = serde_json::json!({
                "stdin": flag("stdin"), "stdout": flag("stdout"), "stderr": flag("stderr"),
                "tty": flag("tty"), "container": param(q, "container").unwrap_or_default(),
            });
            if sub == "exec" {
                o["command"] = serde_json::json!(all("command"));
            }
            (kind, o)
        }
    };
    options["kind"] = kind.into();
    options["apiVersion"] = "v1".into();
    (kind, options)
}

fn param<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn names(containers: &[k8s_openapi::api::core::v1::Container]) -> String {
    containers
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The container a request names, or the pod's only container (upstream's messages).
pub fn container_of(
    pod: &Pod,
    requested: Option<&str>,
    with_init: bool,
) -> Result<String, ApiError> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.clone().unwrap_or_default();
    match requested.filter(|c| !c.is_empty()) {
        Some(c) => {
            let known = spec.containers.iter().any(|x| x.name == c)
                || inits.iter().any(|x| x.name == c)
                || spec
                    .ephemeral_containers
                    .iter()
                    .flatten()
                    .any(|x| x.name == c);
            if known {
                Ok(c.to_string())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )))
            }
        }
        None => match spec.containers.len() {
            1 => Ok(spec.containers[0].name.clone()),
            0 => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ if with_init => {
                let mut all: Vec<_> = inits.clone();
                all.extend(spec.containers.iter().cloned());
                Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names(&all)
                )))
            }
            _ => {
                let mut msg = format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names(&spec.containers)
                );
                if !inits.is_empty() {
                    msg.push_str(&format!(
                        " or one of the init containers: [{}]",
                        names(&inits)
                    ));
                }
                Err(ApiError::bad_request(msg))
            }
        },
    }
}

/// Upstream's ValidatePodLogOptions, on the raw query; the options passed on to the kubelet.
pub fn log_options(name: &str, q: &[(String, String)]) -> Result<Vec<(String, String)>, ApiError> {
    let mut errs = Vec::new();
    let mut out = Vec::new();
    let int = |key: &str| -> Result<Option<i64>, ApiError> {
        match param(q, key).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!("strconv.ParseInt: parsing {v:?}: invalid syntax"))
            }),
        }
    };
    let flag = |key: &str| -> Result<bool, ApiError> {
        match param(q, key) {
            None => Ok(false),
            Some("" | "true" | "1" | "True" | "TRUE" | "t" | "T") => Ok(true),
            Some("false" | "0" | "False" | "FALSE" | "f" | "F") => Ok(false),
            Some(v) => Err(ApiError::bad_request(format!(
                "strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))),
        }
    };
    let tail = int("tailLines")?;
    let limit = int("limitBytes")?;
    let since_seconds = int("sinceSeconds")?;
    let since_time = param(q, "sinceTime").filter(|v| !v.is_empty());
    if let Some(t) = tail
        && t < 0
    {
        errs.push(FieldError::invalid(
            &Path::new("tailLines"),
            t,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(l) = limit
        && l < 1
    {
        errs.push(FieldError::invalid(
            &Path::new("limitBytes"),
            l,
            "must be greater than 0",
        ));
    }
    if since_seconds.is_some() && since_time.is_some() {
        errs.push(FieldError::forbidden(
            &Path::new(""),
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ));
    }
    if let Some(s) = since_seconds
        && s < 1
    {
        errs.push(FieldError::invalid(
            &Path::new("sinceSeconds"),
            s,
            "must be greater than 0",
        ));
    }
    if let Some(t) = since_time
        && t.parse::<jiff::Timestamp>().is_err()
    {
        return Err(ApiError::bad_request(format!(
            "parsing time {t:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"
        )));
    }
    if !errs.is_empty() {
        return Err(ApiError::invalid("PodLogOptions", "", name, &errs));
    }
    for key in ["follow", "previous", "timestamps"] {
        if flag(key)? {
            out.push((key.to_string(), "true".to_string()));
        }
    }
    if let Some(t) = tail {
        out.push(("tailLines".into(), t.to_string()));
    }
    if let Some(l) = limit {
        out.push(("limitBytes".into(), l.to_string()));
    }
    if let Some(s) = since_seconds {
        out.push(("sinceSeconds".into(), s.to_string()));
    }
    if let Some(t) = since_time {
        out.push(("sinceTime".into(), t.to_string()));
    }
    Ok(out)
}

fn encode(pairs: &[(String, String)]) -> String {
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

fn seg(s: &str) -> String {
    // Names are DNS labels/subdomains: nothing in them needs escaping in a path.
    s.to_string()
}

/// A kubelet's non-success answer as a Status (upstream's GenericHttpResponseChecker).
pub(crate) async fn kubelet_failure(resp: http::Response<hyper::body::Incoming>) -> ApiError {
    let code = resp.status().as_u16();
    let body = match tokio::time::timeout(
        std::time::Duration::from_secs(5),
        resp.into_body().collect(),
    )
    .await
    {
        Ok(Ok(b)) => b.to_bytes(),
        _ => Default::default(),
    };
    let text = String::from_utf8_lossy(&body[..body.len().min(16 * 1024)])
        .trim()
        .to_string();
    let (reason, default) = match code {
        400 => (
            "BadRequest",
            "the server rejected our request for an unknown reason",
        ),
        401 => (
            "Unauthorized",
            "the server has asked for the client to provide credentials",
        ),
        403 => (
            "Forbidden",
            "the server does not allow access to the requested resource",
        ),
        404 => (
            "NotFound",
            "the server could not find the requested resource",
        ),
        409 => ("Conflict", "the server reported a conflict"),
        429 => (
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        ),
        500 => (
            "InternalError",
            "an error on the server has prevented the request from succeeding",
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        _ => ("", ""),
    };
    ApiError {
        code,
        reason: if reason.is_empty() { "Unknown" } else { reason },
        message: if !text.is_empty() {
            text
        } else if default.is_empty() {
            format!(
                "the server responded with the status code {code} but did not return more information"
            )
        } else {
            default.to_string()
        },
        details: None,
    }
}

async fn log(server: &ApiServer, r: &ResourceRequest, req: Request) -> Result<Response, ApiError> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Err(ApiError::method_not_supported(
            Target {
                group: "",
                resource: "pods/log",
                name: r.name.as_deref().unwrap_or_default(),
            },
            &req.method().as_str().to_lowercase(),
        ));
    }
    let name = r.name.as_deref().unwrap_or_default();
    let ns = r
        .namespace
        .as_deref()
        .ok_or_else(ApiError::path_not_found)?;
    let q = query(&req);
    let opts = log_options(name, &q)?;
    let pod: Pod = server.registry::<Pod>().get(Some(ns), name).await?;
    let container = container_of(&pod, param(&q, "container"), true)?;
    let Some(node) = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
    else {
        // Not scheduled: no logs yet, as upstream's empty location answers.
        return Ok(text_response(Body::empty()));
    };
    let kubelet = client(server)?;
    let addr = node_address(server, &node, None).await?;
    let mut path = format!(
        "/containerLogs/{}/{}/{}",
        seg(ns),
        seg(name),
        seg(&container)
    );
    if !opts.is_empty() {
        path = format!("{path}?{}", encode(&opts));
    }
    let resp = kubelet
        .send(addr, Method::GET, &path, &Default::default(), Body::empty())
        .await?;
    if !resp.status().is_success() {
        return Err(kubelet_failure(resp).await);
    }
    Ok(text_response(Body::new(resp.into_body())))
}

fn text_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

async fn stream(
    server: &ApiServer,
    r: &ResourceRequest,
    sub: &str,
    req: Request,
) -> Result<Response, ApiError> {
    let name = r.name.as_deref().unwrap_or_default();
    if req.method() != Method::GET && req.method() != Method::POST {
        return Err(ApiError::method_not_supported(
            Target {
                group: "",
                resource: &format!("pods/{sub}"),
                name,
            },
            &req.method().as_str().to_lowercase(),
        ));
    }
    let ns = r
        .namespace
        .as_deref()
        .ok_or_else(ApiError::path_not_found)?;
    let pods = server.registry::<Pod>();
    let pod: Pod = pods.get(Some(ns), name).await?;
    let q = query(&req);
    let (kind, mut options) = connect_options(sub, &q);
    pods.admit_subresource(
        Operation::Connect,
        Some(ns),
        name,
        sub,
        ["", "v1", kind],
        &mut options,
        None,
        false,
    )
    .await?;
    let container = if sub == "portforward" {
        None
    } else {
        Some(container_of(&pod, param(&q, "container"), false)?)
    };
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(format!("pod {name} does not have a host assigned"))
        })?;
    if !is_upgrade(req.headers()) {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let kubelet = client(server)?;
    let addr = node_address(server, &node, None).await?;
    let path = match (sub, &container) {
        ("exec", Some(c)) => format!("/exec/{}/{}/{}", seg(ns), seg(name), seg(c)),
        ("attach", Some(c)) => format!("/attach/{}/{}/{}", seg(ns), seg(name), seg(c)),
        _ => format!("/portForward/{}/{}", seg(ns), seg(name)),
    };
    let path = match req.uri().query().filter(|q| !q.is_empty()) {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    kubelet.upgrade(addr, req, &path).await
}

/// `nodes/<name>[:<port>]/proxy/<path>`: any request, passed to the kubelet's API.
async fn node_proxy(
    server: &ApiServer,
    r: &ResourceRequest,
    req: Request,
) -> Result<Response, ApiError> {
    let raw = r.name.as_deref().unwrap_or_default();
    // `name`, `name:port` or `https:name:port`, as upstream's node proxy accepts.
    let parts: Vec<&str> = raw.split(':').collect();
    let (name, port) = match parts.as_slice() {
        [n] => (*n, None),
        [n, p] => (*n, Some(*p)),
        ["https", n, p] => (*n, Some(*p)),
        [scheme, _, _] => {
            return Err(ApiError::bad_request(format!(
                "unsupported scheme {scheme:?} for the node proxy"
            )));
        }
        _ => return Err(ApiError::bad_request(format!("invalid node name {raw:?}"))),
    };
    let port = match port.filter(|p| !p.is_empty()) {
        Some(p) => Some(
            p.parse::<u16>()
                .map_err(|_| ApiError::bad_request(format!("invalid port {p:?}")))?,
        ),
        None => None,
    };
    let sub = r.subpath.clone().unwrap_or_default();
    let mut options =
        serde_json::json!({"kind": "NodeProxyOptions", "apiVersion": "v1", "path": sub});
    server
        .registry::<Node>()
        .admit_subresource(
            Operation::Connect,
            None,
            name,
            "proxy",
            ["", "v1", "NodeProxyOptions"],
            &mut options,
            None,
            false,
        )
        .await?;
    let kubelet = client(server)?;
    let addr = node_address(server, name, port).await?;
    let mut path = if sub.starts_with('/') {
        sub
    } else {
        format!("/{sub}")
    };
    if let Some(q) = req.uri().query().filter(|q| !q.is_empty()) {
        path = format!("{path}?{q}");
    }
    if is_upgrade(req.headers()) {
        return kubelet.upgrade(addr, req, &path).await;
    }
    let (parts, body) = req.into_parts();
    let resp = kubelet
        .send(addr, parts.method, &path, &parts.headers, body)
        .await?;
    let (rparts, rbody) = resp.into_parts();
    let mut out = Response::new(Body::new(rbody));
    *out.status_mut() = rparts.status;
    for (k, v) in &rparts.headers {
        if !matches!(
            k.as_str(),
            "connection" | "keep-alive" | "transfer-encoding" | "te" | "trailer" | "upgrade"
        ) {
            out.headers_mut().append(k, v.clone());
        }
    }
    if out.status() == StatusCode::SWITCHING_PROTOCOLS {
        // Never pass on a switch the client did not ask for.
        return Err(ApiError::internal("the kubelet switched protocols unasked"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &[&str], inits: &[&str]) -> Pod {
        let c = |n: &&str| serde_json::json!({"name": n, "image": "busybox"});
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": containers.iter().map(c).collect::<Vec<_>>(),
                     "initContainers": inits.iter().map(c).collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    #[test]
    fn containers() {
        assert_eq!(container_of(&pod(&["a"], &[]), None, false).unwrap(), "a");
        assert_eq!(
            container_of(&pod(&["a", "b"], &["i"]), Some("i"), false).unwrap(),
            "i"
        );
        let e = container_of(&pod(&["a"], &[]), Some("x"), false).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "container x is not valid for pod p")
        );
        let e = container_of(&pod(&["a", "b"], &["i"]), None, false).unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        let e = container_of(&pod(&["a", "b"], &["i"]), None, true).unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [i a b]"
        );
    }

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_option_rules() {
        let out = log_options(
            "p",
            &q(&[
                ("follow", "true"),
                ("tailLines", "3"),
                ("container", "c"),
                ("timestamps", "false"),
            ]),
        )
        .unwrap();
        assert_eq!(out, q(&[("follow", "true"), ("tailLines", "3")]));
        let e = log_options("p", &q(&[("tailLines", "-1")])).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.contains("tailLines"), "{}", e.message);
        let e = log_options(
            "p",
            &q(&[("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")]),
        )
        .unwrap_err();
        assert!(e.message.contains("at most one of"), "{}", e.message);
        assert_eq!(
            log_options("p", &q(&[("limitBytes", "0")]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            log_options("p", &q(&[("tailLines", "x")]))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            log_options("p", &q(&[("sinceTime", "yesterday")]))
                .unwrap_err()
                .code,
            400
        );
    }
}
