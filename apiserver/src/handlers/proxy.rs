//! `services/<[scheme:]name[:port]>/proxy/<path>` and `pods/<[scheme:]name[:port]>/proxy/<path>`:
//! any request, passed to a pod, as upstream's service and pod `ResourceLocation` and its
//! upgrade-aware proxy handler do. A Service's port (by name or number) is looked up in its
//! EndpointSlices and a random ready endpoint chosen; only endpoints that are a pod of the
//! namespace with that IP are used (a Service without a selector, whose endpoints name no
//! pod, cannot be proxied: upstream keeps the API server from becoming a proxy to any address
//! a user can write into an EndpointSlice). A pod is reached at its first IP, which must be a
//! global unicast address. The connect is admitted (ServiceProxyOptions, PodProxyOptions) as
//! the other connect subresources are; redirects go back to the client, their `Location`
//! rewritten under the proxy path.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use minik8s_api::ApiError;
use rand::Rng;

use super::codec::status_response;
use super::request::ResourceRequest;
use crate::proxy_transport::{self, Backend, HOP_BY_HOP, is_upgrade};
use crate::registry::external::Operation;
use crate::registry::generic::ListQuery;
use crate::server::ApiServer;

/// Headers of the client that never reach a pod: its credentials are for this server.
const CLIENT_ONLY: &[&str] = &[
    "authorization",
    "impersonate-user",
    "impersonate-group",
    "impersonate-uid",
];

/// Response headers a proxied answer loses, as upstream's CORS-removing transport drops them:
/// the API server's own CORS policy applies, not the pod's.
const CORS: &[&str] = &[
    "access-control-allow-credentials",
    "access-control-allow-headers",
    "access-control-allow-methods",
    "access-control-allow-origin",
];

/// Whether the request is for `services/proxy` or `pods/proxy`.
pub fn is_proxy(r: &ResourceRequest) -> bool {
    r.group.is_empty()
        && r.version == "v1"
        && r.namespace.is_some()
        && r.name.is_some()
        && matches!(r.resource.as_str(), "services" | "pods")
        && r.subresource.as_deref() == Some("proxy")
}

/// Serves `services/proxy` or `pods/proxy`; `req` is the whole request, body unread.
pub async fn serve(server: &Arc<ApiServer>, r: ResourceRequest, req: Request) -> Response {
    proxy(server, &r, req)
        .await
        .unwrap_or_else(|e| status_response(&e))
}

/// Upstream's `SplitSchemeNamePort`: `name`, `name:port` or `scheme:name:port`, the scheme
/// `http`, `https` or empty.
pub fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

/// Go's `IP.IsGlobalUnicast`, an IPv4-mapped address judged as IPv4.
fn is_global_unicast(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    };
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    !(broadcast || ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() || link_local)
}

fn scheme_backend(scheme: &str, ip: IpAddr, port: Option<u16>) -> Backend {
    let https = scheme == "https";
    Backend {
        https,
        addr: SocketAddr::new(ip, port.unwrap_or(if https { 443 } else { 80 })),
    }
}

fn port_number(port: &str) -> Result<u16, ApiError> {
    port.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid port {port:?}")))
}

/// Upstream's pod `ResourceLocation`: the pod's first IP, at the port asked for or the first
/// port its containers declare.
pub fn pod_location(pod: &Pod, scheme: &str, port: &str) -> Result<Backend, ApiError> {
    let declared = || {
        pod.spec.iter().flat_map(|s| &s.containers).find_map(|c| {
            c.ports
                .as_ref()
                .and_then(|p| p.first())
                .map(|p| p.container_port.to_string())
        })
    };
    let port = match port {
        "" => declared().unwrap_or_default(),
        p => p.to_string(),
    };
    let status = pod.status.as_ref();
    let ip = status
        .and_then(|s| s.pod_ips.as_ref())
        .and_then(|ips| ips.first())
        .map(|p| p.ip.clone())
        .or_else(|| status.and_then(|s| s.pod_ip.clone()))
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .filter(|ip| is_global_unicast(*ip))
        .ok_or_else(|| ApiError::bad_request("address not allowed"))?;
    let port = match port.as_str() {
        "" => None,
        p => Some(port_number(p)?),
    };
    Ok(scheme_backend(scheme, ip, port))
}

fn service_unavailable(message: String) -> ApiError {
    ApiError {
        code: 503,
        reason: "ServiceUnavailable",
        message,
        details: None,
    }
}

/// Upstream's service `ResourceLocation`, over the Service's EndpointSlices.
async fn service_location(server: &ApiServer, ns: &str, id: &str) -> Result<Backend, ApiError> {
    let (scheme, name, port) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid service request {id:?}")))?;
    let svc: Service = server.registry::<Service>().get(Some(ns), name).await?;
    let port_name = match port.parse::<i64>() {
        Ok(number) => svc
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .find(|p| i64::from(p.port) == number)
            .map(|p| p.name.clone().unwrap_or_default())
            .ok_or_else(|| {
                service_unavailable(format!(
                    "no service port {number} found for service {name:?}"
                ))
            })?,
        Err(_) => port.to_string(),
    };
    let query = ListQuery {
        labels: minik8s_api::selector::Selector::parse(&format!(
            "kubernetes.io/service-name={name}"
        ))
        .map_err(|e| ApiError::bad_request(e.to_string()))?,
        ..Default::default()
    };
    let slices: Vec<EndpointSlice> = server
        .registry::<EndpointSlice>()
        .list(Some(ns), &query)
        .await?
        .items
        .into_iter()
        .filter(|s| matches!(s.address_type.as_str(), "IPv4" | "IPv6"))
        .collect();
    if slices.iter().all(|s| s.endpoints.is_empty()) {
        return Err(service_unavailable(format!(
            "no endpoints available for service {name:?}"
        )));
    }
    let start = rand::rng().random_range(0..slices.len());
    for i in 0..slices.len() {
        let slice = &slices[(start + i) % slices.len()];
        let Some(target_port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
        else {
            continue;
        };
        // Ready endpoints (an unknown state counts as ready); one without a pod to check
        // its address against is never used.
        let ready: Vec<(IpAddr, &ObjectReference)> = slice
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .filter_map(|e| {
                let ip = e.addresses.first()?.parse::<IpAddr>().ok()?;
                Some((ip, e.target_ref.as_ref()?))
            })
            .collect();
        if ready.is_empty() {
            continue;
        }
        let first = rand::rng().random_range(0..ready.len());
        for j in 0..ready.len() {
            let (ip, target) = ready[(first + j) % ready.len()];
            if let Err(why) = valid_address(server, ns, ip, target).await {
                tracing::debug!(%ip, why, "endpoint address skipped");
                continue;
            }
            let port = u16::try_from(target_port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| ApiError::internal(format!("invalid port {target_port}")))?;
            return Ok(scheme_backend(scheme, ip, Some(port)));
        }
    }
    Err(service_unavailable(format!(
        "no endpoints available for service {id:?}"
    )))
}

/// Upstream's `isValidAddress`: the endpoint is a pod of the namespace that has its IP.
async fn valid_address(
    server: &ApiServer,
    ns: &str,
    ip: IpAddr,
    target: &ObjectReference,
) -> Result<(), String> {
    if target.kind.as_deref() != Some("Pod") {
        return Err("the address is not a pod's".into());
    }
    if target.namespace.as_deref().unwrap_or_default() != ns {
        return Err("Address namespace doesn't match context namespace".into());
    }
    let name = target.name.as_deref().unwrap_or_default();
    let pod: Pod = server
        .registry::<Pod>()
        .get(Some(ns), name)
        .await
        .map_err(|e| e.message)?;
    let status = pod.status.unwrap_or_default();
    let has = status
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.as_str())
        .chain(status.pod_ip.as_deref())
        .any(|a| a.parse::<IpAddr>().ok() == Some(ip));
    if has {
        Ok(())
    } else {
        Err(format!("pod ip(s) doesn't match endpoint ip {ip}"))
    }
}

/// The proxied path: upstream joins the location's path with the `path` option
/// (`path.Join`, which cleans it), keeping a trailing slash.
pub fn backend_path(sub: &str) -> String {
    if sub.is_empty() {
        return String::new();
    }
    let mut out: Vec<&str> = Vec::new();
    for seg in sub.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut path = format!("/{}", out.join("/"));
    if sub.ends_with('/') && !path.ends_with('/') {
        path.push('/');
    }
    path
}

/// Upstream's proxy transport `rewriteURL` for a redirect's `Location`: a path on the backend
/// (relative to its root, or absolute to its host) is put under `prefix`, the proxy path.
pub fn rewrite_location(location: &str, backend_host: &str, prefix: &str) -> String {
    let (origin, rest) = match location.split_once("://") {
        Some((scheme, after)) if !scheme.contains('/') => {
            let end = after.find(['/', '?', '#']).unwrap_or(after.len());
            (Some((scheme, &after[..end])), &after[end..])
        }
        _ => (None, location),
    };
    if let Some((_, host)) = origin
        && !host.is_empty()
        && host != backend_host
    {
        return location.to_string();
    }
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, tail) = rest.split_at(end);
    if !path.starts_with('/') {
        return location.to_string();
    }
    let origin = origin
        .map(|(scheme, host)| format!("{scheme}://{host}"))
        .unwrap_or_default();
    if path.starts_with(prefix) {
        return format!("{origin}{path}{tail}");
    }
    let mut joined = backend_path(&format!("{prefix}{path}"));
    if path.ends_with('/') && !joined.ends_with('/') {
        joined.push('/');
    }
    format!("{origin}{joined}{tail}")
}

async fn proxy(
    server: &Arc<ApiServer>,
    r: &ResourceRequest,
    req: Request,
) -> Result<Response, ApiError> {
    let ns = r.namespace.as_deref().unwrap_or_default();
    let id = r.name.as_deref().unwrap_or_default();
    let sub = r.subpath.clone().unwrap_or_default();
    let service = r.resource == "services";
    let kind = if service {
        "ServiceProxyOptions"
    } else {
        "PodProxyOptions"
    };
    let mut options = serde_json::json!({"kind": kind, "apiVersion": "v1", "path": sub});
    let args = (Operation::Connect, Some(ns), id, "proxy", ["", "v1", kind]);
    let backend = if service {
        server
            .registry::<Service>()
            .admit_subresource(
                args.0,
                args.1,
                args.2,
                args.3,
                args.4,
                &mut options,
                None,
                false,
            )
            .await?;
        service_location(server, ns, id).await?
    } else {
        server
            .registry::<Pod>()
            .admit_subresource(
                args.0,
                args.1,
                args.2,
                args.3,
                args.4,
                &mut options,
                None,
                false,
            )
            .await?;
        let (scheme, name, port) = split_scheme_name_port(id)
            .ok_or_else(|| ApiError::bad_request(format!("invalid pod request {id:?}")))?;
        let pod: Pod = server.registry::<Pod>().get(Some(ns), name).await?;
        pod_location(&pod, scheme, port)?
    };
    let path = backend_path(&sub);
    let query = req
        .uri()
        .query()
        .filter(|q| !q.is_empty())
        .map(str::to_string);
    let with_query = |p: &str| match &query {
        Some(q) => format!("{p}?{q}"),
        None => p.to_string(),
    };
    let dialer = server.cluster_dialer.get();
    if is_upgrade(req.headers()) {
        let sender = proxy_transport::connect(dialer, backend).await?;
        let target = with_query(if path.is_empty() { "/" } else { &path });
        let out = proxy_transport::outgoing(
            req.method().clone(),
            &target,
            req.headers(),
            CLIENT_ONLY,
            true,
            &backend.host(),
            Body::empty(),
        )?;
        return proxy_transport::splice(sender, req, out, proxy_transport::unreachable).await;
    }
    if path.is_empty() {
        // Upstream redirects the bare proxy path to the one with a trailing slash.
        let location = with_query(&format!("{}/", req.uri().path()));
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
        resp.headers_mut().insert(
            header::LOCATION,
            HeaderValue::try_from(location).map_err(|e| ApiError::bad_request(e.to_string()))?,
        );
        return Ok(resp);
    }
    let prefix = req
        .uri()
        .path()
        .strip_suffix(sub.as_str())
        .unwrap_or(req.uri().path())
        .to_string();
    let (parts, body) = req.into_parts();
    let mut out = proxy_transport::outgoing(
        parts.method,
        &with_query(&path),
        &parts.headers,
        CLIENT_ONLY,
        false,
        &backend.host(),
        body,
    )?;
    let forwarded_uri = format!("{prefix}{path}");
    if let Ok(v) = HeaderValue::try_from(forwarded_uri) {
        out.headers_mut().insert("x-forwarded-uri", v);
    }
    let mut sender = proxy_transport::connect(dialer, backend).await?;
    let resp = sender
        .send_request(out)
        .await
        .map_err(proxy_transport::unreachable)?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        // Never pass on a switch the client did not ask for.
        return Err(ApiError::internal("the backend switched protocols unasked"));
    }
    let (rparts, rbody) = resp.into_parts();
    let mut answer = Response::new(Body::new(rbody));
    *answer.status_mut() = rparts.status;
    for (k, v) in &rparts.headers {
        let name = k.as_str();
        if HOP_BY_HOP.contains(&name) || CORS.contains(&name) {
            continue;
        }
        if k == header::LOCATION
            && let Ok(location) = v.to_str()
        {
            let rewritten = rewrite_location(location, &backend.host(), &prefix);
            if let Ok(v) = HeaderValue::try_from(rewritten) {
                answer.headers_mut().append(k, v);
                continue;
            }
        }
        answer.headers_mut().append(k, v.clone());
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
        assert_eq!(split_scheme_name_port("web:80"), Some(("", "web", "80")));
        assert_eq!(
            split_scheme_name_port("https:web:metrics"),
            Some(("https", "web", "metrics"))
        );
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
    }

    #[test]
    fn global_unicast() {
        for ok in ["10.244.0.5", "192.0.2.1", "2001:db8::1"] {
            assert!(is_global_unicast(ok.parse().unwrap()), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "169.254.169.254",
            "fe80::1",
            "224.0.0.1",
            "255.255.255.255",
        ] {
            assert!(!is_global_unicast(bad.parse().unwrap()), "{bad}");
        }
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn pod_locations() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "a", "image": "x"},
                {"name": "b", "image": "x", "ports": [{"containerPort": 8080}, {"containerPort": 9}]}
            ]},
            "status": {"podIP": "10.1.0.2", "podIPs": [{"ip": "10.1.0.2"}]}
        }));
        let b = pod_location(&p, "", "").unwrap();
        assert_eq!(
            (b.https, b.addr.to_string()),
            (false, "10.1.0.2:8080".into())
        );
        let b = pod_location(&p, "https", "9443").unwrap();
        assert_eq!(
            (b.https, b.addr.to_string()),
            (true, "10.1.0.2:9443".into())
        );
        let bare = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "x"}]},
            "status": {"podIPs": [{"ip": "10.1.0.2"}]}
        }));
        assert_eq!(pod_location(&bare, "https", "").unwrap().addr.port(), 443);
        let none = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}}));
        let e = pod_location(&none, "", "80").unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (400, "address not allowed"));
        let lo = pod(serde_json::json!({
            "metadata": {"name": "p"}, "spec": {"containers": []},
            "status": {"podIP": "127.0.0.1"}
        }));
        assert_eq!(pod_location(&lo, "", "80").unwrap_err().code, 400);
    }

    #[test]
    fn paths() {
        assert_eq!(backend_path(""), "");
        assert_eq!(backend_path("/"), "/");
        assert_eq!(backend_path("/a//b/./c/../d/"), "/a/b/d/");
        assert_eq!(backend_path("/../../etc"), "/etc");
    }

    #[test]
    fn locations() {
        let prefix = "/api/v1/namespaces/m/services/web/proxy";
        assert_eq!(
            rewrite_location("/graph?g0=1", "10.1.0.2:80", prefix),
            format!("{prefix}/graph?g0=1")
        );
        assert_eq!(
            rewrite_location("http://10.1.0.2:80/x/", "10.1.0.2:80", prefix),
            format!("http://10.1.0.2:80{prefix}/x/")
        );
        assert_eq!(
            rewrite_location("https://example.com/x", "10.1.0.2:80", prefix),
            "https://example.com/x"
        );
        assert_eq!(rewrite_location("graph", "10.1.0.2:80", prefix), "graph");
        assert_eq!(
            rewrite_location(&format!("{prefix}/y"), "10.1.0.2:80", prefix),
            format!("{prefix}/y")
        );
    }
}
