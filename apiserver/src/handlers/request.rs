//! Turns an API path into what it names, as upstream's RequestInfoFactory does: group,
//! version, namespace, resource, name, subresource and verb.

use http::Method;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// A method with no verb of its own (OPTIONS, served only by the proxy subresources):
    /// upstream names it `""`, which only a `*` rule allows.
    Unnamed,
}

impl Verb {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Unnamed => "",
        }
    }
}

/// A parsed request under `/api` or `/apis`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `/api/v1` or `/apis/<group>/<version>`: the resource list of a group version.
    GroupVersion {
        group: String,
        version: String,
    },
    /// `/apis/<group>`: the group's versions.
    Group {
        group: String,
    },
    Resource(ResourceRequest),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRequest {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// What follows `/proxy` in a `<resource>/<name>/proxy/...` path (nodes/proxy).
    pub subpath: Option<String>,
    pub verb: Verb,
}

/// Namespace subresources that are not resources inside the namespace.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True" | "watch"))
    })
}

/// Parses `path` (with `query`) for `method`; `None` when the path names nothing here.
pub fn parse(method: &Method, path: &str, query: Option<&str>) -> Option<Target> {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), "v1".to_string(), rest),
        ["apis", group] => {
            return Some(Target::Group {
                group: group.to_string(),
            });
        }
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    if rest.is_empty() {
        return Some(Target::GroupVersion { group, version });
    }
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        r => (false, r),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty() && !NAMESPACE_SUBRESOURCES.contains(&tail[0]) =>
        {
            (Some(ns.to_string()), tail)
        }
        r => (None, r),
    };
    let mut subpath = None;
    let (resource, name, subresource) = match rest {
        [resource] => (resource.to_string(), None, None),
        [resource, name] => (resource.to_string(), Some(name.to_string()), None),
        [resource, name, sub] => {
            if *sub == "proxy" {
                subpath = Some(if path.ends_with('/') { "/" } else { "" }.to_string());
            }
            (
                resource.to_string(),
                Some(name.to_string()),
                Some(sub.to_string()),
            )
        }
        [resource, name, "proxy", ..] => {
            // Everything after `/<name>/proxy`, as it came (trailing slash included).
            let marker = format!("/{name}/proxy/");
            let tail = path
                .find(&marker)
                .map(|at| &path[at + marker.len() - 1..])
                .unwrap_or("/");
            subpath = Some(tail.to_string());
            (
                resource.to_string(),
                Some(name.to_string()),
                Some("proxy".to_string()),
            )
        }
        _ => return None,
    };
    let verb = match *method {
        Method::GET | Method::HEAD => {
            if legacy_watch || is_watch(query) {
                Verb::Watch
            } else if name.is_some() {
                Verb::Get
            } else {
                Verb::List
            }
        }
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE => {
            if name.is_some() {
                Verb::Delete
            } else {
                Verb::DeleteCollection
            }
        }
        Method::OPTIONS if subpath.is_some() => Verb::Unnamed,
        _ => return None,
    };
    Some(Target::Resource(ResourceRequest {
        group,
        version,
        namespace,
        resource,
        name,
        subresource,
        subpath,
        verb,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(method: Method, path: &str, query: Option<&str>) -> ResourceRequest {
        match parse(&method, path, query) {
            Some(Target::Resource(r)) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        let r = res(Method::GET, "/api/v1/namespaces/default/pods/web", None);
        assert_eq!(
            (
                r.namespace.as_deref(),
                r.resource.as_str(),
                r.name.as_deref(),
                r.verb
            ),
            (Some("default"), "pods", Some("web"), Verb::Get)
        );
        let r = res(Method::GET, "/api/v1/namespaces/kube-system", None);
        assert_eq!(
            (r.namespace, r.resource.as_str(), r.name.as_deref()),
            (None, "namespaces", Some("kube-system"))
        );
        let r = res(Method::PUT, "/api/v1/namespaces/x/finalize", None);
        assert_eq!(
            (
                r.resource.as_str(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            ("namespaces", Some("x"), Some("finalize"))
        );
        let r = res(
            Method::GET,
            "/apis/apps/v1/deployments",
            Some("watch=1&resourceVersion=5"),
        );
        assert_eq!((r.group.as_str(), r.verb), ("apps", Verb::Watch));
        let r = res(Method::GET, "/api/v1/watch/namespaces/a/pods", None);
        assert_eq!((r.namespace.as_deref(), r.verb), (Some("a"), Verb::Watch));
        let r = res(Method::DELETE, "/api/v1/namespaces/a/configmaps", None);
        assert_eq!(r.verb, Verb::DeleteCollection);
        let r = res(
            Method::PUT,
            "/apis/apps/v1/namespaces/a/deployments/d/scale",
            None,
        );
        assert_eq!(r.subresource.as_deref(), Some("scale"));
        assert_eq!(
            parse(&Method::GET, "/apis/apps", None),
            Some(Target::Group {
                group: "apps".into()
            })
        );
        assert_eq!(
            parse(&Method::GET, "/api/v1", None),
            Some(Target::GroupVersion {
                group: String::new(),
                version: "v1".into()
            })
        );
        assert!(parse(&Method::GET, "/api/v1/a/b/c/d", None).is_none());
        let r = res(Method::GET, "/api/v1/nodes/n1/proxy/stats/summary", None);
        assert_eq!(
            (
                r.name.as_deref(),
                r.subresource.as_deref(),
                r.subpath.as_deref()
            ),
            (Some("n1"), Some("proxy"), Some("/stats/summary"))
        );
        let r = res(Method::GET, "/api/v1/nodes/n1/proxy/", None);
        assert_eq!(r.subpath.as_deref(), Some("/"));
        let r = res(Method::GET, "/api/v1/nodes/n1/proxy", None);
        assert_eq!(r.subpath.as_deref(), Some(""));
        assert!(parse(&Method::GET, "/api/v2/pods", None).is_none());
        let r = res(
            Method::OPTIONS,
            "/api/v1/namespaces/m/services/http:prometheus:9090/proxy/api/v1/query",
            None,
        );
        assert_eq!(
            (r.name.as_deref(), r.subpath.as_deref(), r.verb.as_str()),
            (Some("http:prometheus:9090"), Some("/api/v1/query"), "")
        );
        assert!(parse(&Method::OPTIONS, "/api/v1/namespaces/m/pods/p", None).is_none());
    }
}
