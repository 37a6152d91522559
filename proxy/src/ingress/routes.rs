//! Which backend serves a request, without I/O: the Ingresses of our class flattened into one
//! table, matched as the Ingress specification says (exact hosts before wildcards before
//! rules without host; the longest matching path, Exact before Prefix on a tie; the
//! defaultBackend when nothing matches).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};

use crate::endpoints::{port_endpoints, slices_of};

/// The controller name our IngressClass names.
pub const CONTROLLER: &str = "minik8s.io/ingress";
/// Marks the class used by Ingresses that name none.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The class annotation that predates `spec.ingressClassName`.
pub const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathType {
    Exact,
    Prefix,
}

/// Where matching requests go: a Service port and its ready endpoints, taken in turn.
#[derive(Debug)]
pub struct Backend {
    /// `ns/name:port`, for logs and errors.
    pub service: String,
    pub endpoints: Vec<SocketAddr>,
    next: AtomicUsize,
}

impl Backend {
    /// The next endpoint, round-robin; `None` when the service has no ready endpoint.
    pub fn pick(&self) -> Option<SocketAddr> {
        if self.endpoints.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        Some(self.endpoints[i % self.endpoints.len()])
    }
}

#[derive(Debug)]
struct Route {
    path: String,
    path_type: PathType,
    backend: usize,
}

/// The flattened routing table.
#[derive(Debug, Default)]
pub struct Routes {
    /// Exact hosts (lowercase) → routes.
    hosts: BTreeMap<String, Vec<Route>>,
    /// `*.foo.com` is stored as `foo.com`.
    wildcards: BTreeMap<String, Vec<Route>>,
    any_host: Vec<Route>,
    default_backend: Option<usize>,
    backends: Vec<Backend>,
}

/// The outcome of routing one request.
#[derive(Debug)]
pub enum Routed<'a> {
    /// No rule and no default backend: 404.
    NoMatch,
    Backend(&'a Backend),
}

/// Whether `ingress` belongs to us, given the IngressClasses.
pub fn is_ours(ingress: &Ingress, classes: &[IngressClass]) -> bool {
    let ours = |name: &str| {
        classes.iter().any(|c| {
            c.metadata.name.as_deref() == Some(name)
                && c.spec.as_ref().and_then(|s| s.controller.as_deref()) == Some(CONTROLLER)
        })
    };
    let named = ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.clone())
        .or_else(|| {
            ingress
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LEGACY_CLASS_ANNOTATION).cloned())
        });
    match named {
        Some(name) => ours(&name),
        None => classes.iter().any(|c| {
            c.spec.as_ref().and_then(|s| s.controller.as_deref()) == Some(CONTROLLER)
                && c.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                    .is_some_and(|v| v == "true")
        }),
    }
}

/// Whether the request path matches a rule's path.
pub fn path_matches(rule: &str, path_type: PathType, request: &str) -> bool {
    match path_type {
        PathType::Exact => rule == request,
        PathType::Prefix => {
            // Element-wise: `/foo` matches `/foo`, `/foo/` and `/foo/bar`, not `/foobar`.
            let rule: Vec<&str> = rule.split('/').filter(|s| !s.is_empty()).collect();
            let req: Vec<&str> = request.split('/').filter(|s| !s.is_empty()).collect();
            req.len() >= rule.len() && rule.iter().zip(&req).all(|(a, b)| a == b)
        }
    }
}

fn best<'r>(routes: &'r [Route], path: &str) -> Option<&'r Route> {
    routes
        .iter()
        .filter(|r| path_matches(&r.path, r.path_type, path))
        .max_by_key(|r| {
            (
                r.path.trim_end_matches('/').len(),
                r.path_type == PathType::Exact,
            )
        })
}

/// A Host header without its port, lowercase.
pub fn bare_host(host: &str) -> String {
    let host = host.rsplit_once(':').map_or(host, |(h, p)| {
        if p.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    host.to_lowercase()
}

impl Routes {
    /// Builds the table from the Ingresses we serve (in creation order, so the oldest
    /// Ingress's defaultBackend wins) and resolves backends to endpoints.
    pub fn build(
        ingresses: &[Ingress],
        classes: &[IngressClass],
        services: &[Service],
        slices: &[EndpointSlice],
    ) -> Routes {
        let mut ours: Vec<&Ingress> = ingresses.iter().filter(|i| is_ours(i, classes)).collect();
        ours.sort_by_key(|i| {
            (
                i.metadata.creation_timestamp.clone().map(|t| t.0),
                i.metadata.namespace.clone(),
                i.metadata.name.clone(),
            )
        });
        let mut routes = Routes::default();
        for ing in ours {
            let ns = ing.metadata.namespace.clone().unwrap_or_default();
            let Some(spec) = &ing.spec else { continue };
            if let (None, Some(b)) = (routes.default_backend, &spec.default_backend) {
                routes.default_backend = Some(routes.backend(&ns, b, services, slices));
            }
            for rule in spec.rules.iter().flatten() {
                let Some(http) = &rule.http else { continue };
                for p in &http.paths {
                    let path_type = match p.path_type.as_str() {
                        "Exact" => PathType::Exact,
                        _ => PathType::Prefix,
                    };
                    let backend = routes.backend(&ns, &p.backend, services, slices);
                    let route = Route {
                        path: p.path.clone().unwrap_or_else(|| "/".into()),
                        path_type,
                        backend,
                    };
                    let host = rule.host.as_deref().unwrap_or("").to_lowercase();
                    if host.is_empty() {
                        routes.any_host.push(route);
                    } else if let Some(parent) = host.strip_prefix("*.") {
                        routes
                            .wildcards
                            .entry(parent.to_string())
                            .or_default()
                            .push(route);
                    } else {
                        routes.hosts.entry(host).or_default().push(route);
                    }
                }
            }
        }
        routes
    }

    fn backend(
        &mut self,
        ns: &str,
        b: &IngressBackend,
        services: &[Service],
        slices: &[EndpointSlice],
    ) -> usize {
        let mut backend = Backend {
            service: format!("{ns}/<resource backend>"),
            endpoints: Vec::new(),
            next: AtomicUsize::new(0),
        };
        if let Some(sb) = &b.service {
            let port = sb.port.as_ref();
            let wanted = port
                .and_then(|p| p.name.clone())
                .or_else(|| port.and_then(|p| p.number).map(|n| n.to_string()))
                .unwrap_or_default();
            backend.service = format!("{ns}/{}:{wanted}", sb.name);
            let svc = services.iter().find(|s| {
                s.metadata.namespace.as_deref() == Some(ns)
                    && s.metadata.name.as_deref() == Some(sb.name.as_str())
            });
            let svc_port = svc
                .and_then(|s| s.spec.as_ref())
                .and_then(|s| s.ports.as_ref())
                .and_then(|ports| {
                    ports.iter().find(|p| match port {
                        Some(want) if want.name.is_some() => p.name == want.name,
                        Some(want) => Some(p.port) == want.number,
                        None => false,
                    })
                });
            if let Some(sp) = svc_port {
                let own = slices_of(slices, ns, &sb.name);
                let protocol = sp.protocol.as_deref().unwrap_or("TCP");
                backend.endpoints =
                    port_endpoints(&own, sp.name.as_deref().unwrap_or(""), protocol)
                        .into_iter()
                        .filter_map(|e| e.addr().parse().ok())
                        .collect();
            }
        }
        self.backends.push(backend);
        self.backends.len() - 1
    }

    /// Routes a request for `host` (a Host header: the port is ignored) and `path`.
    pub fn route(&self, host: &str, path: &str) -> Routed<'_> {
        let host = bare_host(host);
        let exact = self.hosts.get(&host);
        let wildcard = host
            .split_once('.')
            .and_then(|(_, parent)| self.wildcards.get(parent));
        let group = exact
            .or(wildcard)
            .map(Vec::as_slice)
            .unwrap_or(&self.any_host);
        let chosen = best(group, path)
            .map(|r| r.backend)
            .or(self.default_backend);
        match chosen {
            Some(i) => Routed::Backend(&self.backends[i]),
            None => Routed::NoMatch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn classes() -> Vec<IngressClass> {
        vec![
            serde_json::from_value(json!({
                "metadata": {"name": "minik8s", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
                "spec": {"controller": CONTROLLER}
            }))
            .unwrap(),
            serde_json::from_value(json!({
                "metadata": {"name": "nginx"},
                "spec": {"controller": "k8s.io/ingress-nginx"}
            }))
            .unwrap(),
        ]
    }

    fn services() -> Vec<Service> {
        ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|n| {
                serde_json::from_value(json!({
                    "metadata": {"namespace": "default", "name": n},
                    "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
                }))
                .unwrap()
            })
            .collect()
    }

    fn slices() -> Vec<EndpointSlice> {
        ["a", "b", "c", "d", "e"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                serde_json::from_value(json!({
                    "metadata": {"namespace": "default", "name": format!("{n}-1"), "labels": {"kubernetes.io/service-name": n}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080 + i}],
                    "endpoints": [{"addresses": ["127.0.0.1"]}, {"addresses": ["127.0.0.2"]}]
                }))
                .unwrap()
            })
            .collect()
    }

    fn backend(svc: &str) -> serde_json::Value {
        json!({"service": {"name": svc, "port": {"number": 80}}})
    }

    fn routes() -> Routes {
        let ing: Vec<Ingress> = vec![
            serde_json::from_value(json!({
                "metadata": {"namespace": "default", "name": "main"},
                "spec": {
                    "defaultBackend": {"service": {"name": "e", "port": {"name": "http"}}},
                    "rules": [
                        {"host": "foo.com", "http": {"paths": [
                            {"path": "/", "pathType": "Prefix", "backend": backend("a")},
                            {"path": "/api", "pathType": "Prefix", "backend": backend("b")},
                            {"path": "/api/v1", "pathType": "Exact", "backend": backend("c")},
                        ]}},
                        {"host": "*.bar.com", "http": {"paths": [
                            {"path": "/", "pathType": "ImplementationSpecific", "backend": backend("d")},
                        ]}},
                        {"http": {"paths": [
                            {"path": "/any", "pathType": "Prefix", "backend": backend("c")},
                            {"path": "/none", "pathType": "Prefix", "backend": backend("f")},
                        ]}},
                    ]
                }
            }))
            .unwrap(),
            serde_json::from_value(json!({
                "metadata": {"namespace": "default", "name": "other-class"},
                "spec": {"ingressClassName": "nginx", "rules": [{"host": "nginx.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend("a")}]}}]}
            }))
            .unwrap(),
        ];
        Routes::build(&ing, &classes(), &services(), &slices())
    }

    fn target(r: &Routes, host: &str, path: &str) -> String {
        match r.route(host, path) {
            Routed::Backend(b) => b.service.clone(),
            Routed::NoMatch => "404".into(),
        }
    }

    #[test]
    fn prefix_paths_match_element_wise() {
        assert!(path_matches("/foo", PathType::Prefix, "/foo"));
        assert!(path_matches("/foo", PathType::Prefix, "/foo/"));
        assert!(path_matches("/foo/", PathType::Prefix, "/foo/bar"));
        assert!(!path_matches("/foo", PathType::Prefix, "/foobar"));
        assert!(path_matches("/", PathType::Prefix, "/anything"));
        assert!(path_matches("/foo", PathType::Exact, "/foo"));
        assert!(!path_matches("/foo", PathType::Exact, "/foo/"));
    }

    #[test]
    fn hosts_and_longest_paths_win() {
        let r = routes();
        assert_eq!(target(&r, "foo.com", "/"), "default/a:80");
        assert_eq!(target(&r, "FOO.com:8080", "/api/x"), "default/b:80");
        assert_eq!(target(&r, "foo.com", "/api/v1"), "default/c:80");
        assert_eq!(target(&r, "foo.com", "/api/v1/x"), "default/b:80");
        assert_eq!(target(&r, "foo.com", "/apix"), "default/a:80");
        // One label under the wildcard only.
        assert_eq!(target(&r, "x.bar.com", "/q"), "default/d:80");
        assert_eq!(target(&r, "y.x.bar.com", "/q"), "default/e:http");
        assert_eq!(target(&r, "bar.com", "/any"), "default/c:80");
        // Nothing matches: the default backend.
        assert_eq!(target(&r, "other.com", "/zzz"), "default/e:http");
        // Another class's Ingress is ignored.
        assert_eq!(target(&r, "nginx.com", "/"), "default/e:http");
    }

    #[test]
    fn backends_are_ready_endpoints_in_turn() {
        let r = routes();
        let Routed::Backend(b) = r.route("foo.com", "/api") else {
            panic!("no backend")
        };
        let picks: Vec<String> = (0..4).map(|_| b.pick().unwrap().to_string()).collect();
        assert_eq!(
            picks,
            [
                "127.0.0.1:8081",
                "127.0.0.2:8081",
                "127.0.0.1:8081",
                "127.0.0.2:8081"
            ]
        );
        let Routed::Backend(none) = r.route("", "/none") else {
            panic!("no backend")
        };
        assert_eq!(none.pick(), None, "a service without endpoints");
    }

    #[test]
    fn without_a_default_backend_nothing_matches() {
        let r = Routes::build(&[], &classes(), &[], &[]);
        assert!(matches!(r.route("foo.com", "/"), Routed::NoMatch));
        // No class at all and no default class: not ours.
        let ing: Ingress = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "x"},
            "spec": {"defaultBackend": backend("a")}
        }))
        .unwrap();
        assert!(is_ours(&ing, &classes()));
        assert!(!is_ours(&ing, &classes()[1..]));
    }
}
