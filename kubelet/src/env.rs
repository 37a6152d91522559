//! A container's environment as upstream builds it: service links, `env` in order (values
//! with `$(VAR)` expansion, field and resource references, ConfigMap and Secret keys) and
//! `envFrom`. A missing reference is a CreateContainerConfigError with upstream's wording.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use kube::Api;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvError(pub String);

/// Expands `$(VAR)` from `vars`; `$$(VAR)` yields `$(VAR)`; unknown references stay as written.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Docker-link-style variables for a service, as upstream's FromServices.
fn service_env(svc: &Service, out: &mut Vec<(String, String)>) {
    let Some(spec) = &svc.spec else { return };
    let ip = spec.cluster_ip.as_deref().unwrap_or("");
    if ip.is_empty() || ip == "None" {
        return;
    }
    let name = svc
        .metadata
        .name
        .clone()
        .unwrap_or_default()
        .to_uppercase()
        .replace('-', "_");
    let ports = spec.ports.as_deref().unwrap_or_default();
    let Some(first) = ports.first() else { return };
    out.push((format!("{name}_SERVICE_HOST"), ip.to_string()));
    out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
    for p in ports {
        if let Some(pn) = &p.name {
            out.push((
                format!(
                    "{name}_SERVICE_PORT_{}",
                    pn.to_uppercase().replace('-', "_")
                ),
                p.port.to_string(),
            ));
        }
    }
    let proto = first.protocol.as_deref().unwrap_or("TCP");
    out.push((
        format!("{name}_PORT"),
        format!("{}://{ip}:{}", proto.to_lowercase(), first.port),
    ));
    for p in ports {
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        let prefix = format!("{name}_PORT_{}_{}", p.port, proto.to_uppercase());
        out.push((
            prefix.clone(),
            format!("{}://{ip}:{}", proto.to_lowercase(), p.port),
        ));
        out.push((format!("{prefix}_PROTO"), proto.to_lowercase()));
        out.push((format!("{prefix}_PORT"), p.port.to_string()));
        out.push((format!("{prefix}_ADDR"), ip.to_string()));
    }
}

/// What field references read besides the pod itself.
pub struct FieldContext<'a> {
    pub host_ip: &'a str,
    pub pod_ip: &'a str,
    /// Node allocatable cpu (cores) and memory (bytes): limits default to these.
    pub node_cpu: f64,
    pub node_memory: f64,
}

fn field_value(pod: &Pod, path: &str, ctx: &FieldContext<'_>) -> Result<String, EnvError> {
    let meta = &pod.metadata;
    let key_of = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    let v = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.to_string(),
        "status.podIP" | "status.podIPs" => ctx.pod_ip.to_string(),
        p if p.starts_with("metadata.labels['") => {
            let k = key_of("metadata.labels['").unwrap_or_default();
            meta.labels
                .as_ref()
                .and_then(|l| l.get(&k).cloned())
                .unwrap_or_default()
        }
        p if p.starts_with("metadata.annotations['") => {
            let k = key_of("metadata.annotations['").unwrap_or_default();
            meta.annotations
                .as_ref()
                .and_then(|l| l.get(&k).cloned())
                .unwrap_or_default()
        }
        other => return Err(EnvError(format!("unsupported fieldPath: {other}"))),
    };
    Ok(v)
}

/// The value of a resourceFieldRef, with its divisor, rounded up as upstream does.
pub fn resource_value(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    ctx: &FieldContext<'_>,
) -> Result<String, EnvError> {
    let r = container.resources.as_ref();
    let get = |list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
               name: &str| {
        list.and_then(|l| l.get(name))
            .and_then(|q| minik8s_api::quantity::parse(&q.0))
    };
    let value = match resource {
        "limits.cpu" => get(r.and_then(|r| r.limits.as_ref()), "cpu").unwrap_or(ctx.node_cpu),
        "limits.memory" => {
            get(r.and_then(|r| r.limits.as_ref()), "memory").unwrap_or(ctx.node_memory)
        }
        "requests.cpu" => get(r.and_then(|r| r.requests.as_ref()), "cpu").unwrap_or(0.0),
        "requests.memory" => get(r.and_then(|r| r.requests.as_ref()), "memory").unwrap_or(0.0),
        "limits.ephemeral-storage" | "requests.ephemeral-storage" => {
            let list = if resource.starts_with("limits") {
                r.and_then(|r| r.limits.as_ref())
            } else {
                r.and_then(|r| r.requests.as_ref())
            };
            get(list, "ephemeral-storage").unwrap_or(0.0)
        }
        other => return Err(EnvError(format!("unsupported container resource: {other}"))),
    };
    let divisor = divisor
        .and_then(minik8s_api::quantity::parse)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    Ok(((value / divisor).ceil() as i64).to_string())
}

/// Reads ConfigMaps and Secrets once per container build.
struct Sources {
    configmaps: Api<ConfigMap>,
    secrets: Api<Secret>,
    ns: String,
}

impl Sources {
    async fn configmap(&self, name: &str, optional: bool) -> Result<Option<ConfigMap>, EnvError> {
        match self.configmaps.get_opt(name).await {
            Ok(Some(c)) => Ok(Some(c)),
            Ok(None) if optional => Ok(None),
            Ok(None) => Err(EnvError(format!("configmap \"{name}\" not found"))),
            Err(e) => Err(EnvError(format!(
                "reading configmap {}/{name}: {e}",
                self.ns
            ))),
        }
    }

    async fn secret(&self, name: &str, optional: bool) -> Result<Option<Secret>, EnvError> {
        match self.secrets.get_opt(name).await {
            Ok(Some(s)) => Ok(Some(s)),
            Ok(None) if optional => Ok(None),
            Ok(None) => Err(EnvError(format!("secret \"{name}\" not found"))),
            Err(e) => Err(EnvError(format!("reading secret {}/{name}: {e}", self.ns))),
        }
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// The environment of `container`, in upstream's order, as (name, value) pairs.
pub async fn build(
    client: &kube::Client,
    pod: &Pod,
    container: &Container,
    ctx: &FieldContext<'_>,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let sources = Sources {
        configmaps: Api::namespaced(client.clone(), &ns),
        secrets: Api::namespaced(client.clone(), &ns),
        ns: ns.clone(),
    };
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let set =
        |vars: &mut BTreeMap<String, String>, order: &mut Vec<String>, k: String, v: String| {
            if !vars.contains_key(&k) {
                order.push(k.clone());
            }
            vars.insert(k, v);
        };
    // Service links: the master service always, the namespace's services when enabled.
    // Both reads go out at once: they are on the path of every container start.
    let mut links = Vec::new();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let in_ns: Api<Service> = Api::namespaced(client.clone(), &ns);
    let enabled = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let (master, listed) = futures::join!(services.get_opt("kubernetes"), async {
        if enabled {
            Some(in_ns.list(&Default::default()).await)
        } else {
            None
        }
    });
    if let Ok(Some(k)) = master {
        service_env(&k, &mut links);
    }
    if let Some(Ok(list)) = listed {
        for s in &list.items {
            if !(ns == "default" && s.metadata.name.as_deref() == Some("kubernetes")) {
                service_env(s, &mut links);
            }
        }
    }
    for (k, v) in links {
        set(&mut vars, &mut order, k, v);
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref
            && let Some(cm) = sources
                .configmap(&r.name, r.optional.unwrap_or(false))
                .await?
        {
            for (k, v) in cm.data.unwrap_or_default() {
                let key = format!("{prefix}{k}");
                if valid_env_name(&key) {
                    set(&mut vars, &mut order, key, v);
                }
            }
        }
        if let Some(r) = &from.secret_ref
            && let Some(s) = sources.secret(&r.name, r.optional.unwrap_or(false)).await?
        {
            {
                for (k, v) in s.data.unwrap_or_default() {
                    let key = format!("{prefix}{k}");
                    if valid_env_name(&key) {
                        set(
                            &mut vars,
                            &mut order,
                            key,
                            String::from_utf8_lossy(&v.0).into_owned(),
                        );
                    }
                }
            }
        }
    }
    for e in container.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field_value(pod, &f.field_path, ctx)?
            } else if let Some(r) = &from.resource_field_ref {
                let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
                    Some(n) => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.iter().find(|c| c.name == n))
                        .unwrap_or(container),
                    None => container,
                };
                resource_value(
                    target,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    ctx,
                )?
            } else if let Some(k) = &from.config_map_key_ref {
                let optional = k.optional.unwrap_or(false);
                match sources.configmap(&k.name, optional).await? {
                    None => continue,
                    Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&k.key)) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => {
                            return Err(EnvError(format!(
                                "couldn't find key {} in ConfigMap {ns}/{}",
                                k.key, k.name
                            )));
                        }
                    },
                }
            } else if let Some(k) = &from.secret_key_ref {
                let optional = k.optional.unwrap_or(false);
                match sources.secret(&k.name, optional).await? {
                    None => continue,
                    Some(s) => match s.data.as_ref().and_then(|d| d.get(&k.key)) {
                        Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                        None if optional => continue,
                        None => {
                            return Err(EnvError(format!(
                                "couldn't find key {} in Secret {ns}/{}",
                                k.key, k.name
                            )));
                        }
                    },
                }
            } else {
                String::new()
            }
        } else {
            expand(e.value.as_deref().unwrap_or(""), &vars)
        };
        set(&mut vars, &mut order, e.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = vars.get(&k).cloned().unwrap_or_default();
            (k, v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        let vars: BTreeMap<String, String> = [
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "x y".to_string()),
        ]
        .into();
        assert_eq!(expand("$(A)-$(B)", &vars), "1-x y");
        assert_eq!(expand("$$(A) $(C) $(", &vars), "$(A) $(C) $(");
        assert_eq!(expand("héllo $(A)", &vars), "héllo 1");
    }

    #[test]
    fn resources_with_divisors() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}, "requests": {"cpu": "100m"}}
        }))
        .unwrap();
        let ctx = FieldContext {
            host_ip: "1.2.3.4",
            pod_ip: "10.0.0.1",
            node_cpu: 2.0,
            node_memory: 8e9,
        };
        assert_eq!(resource_value(&c, "limits.cpu", None, &ctx).unwrap(), "1");
        assert_eq!(
            resource_value(&c, "limits.cpu", Some("1m"), &ctx).unwrap(),
            "250"
        );
        assert_eq!(
            resource_value(&c, "limits.memory", Some("1Mi"), &ctx).unwrap(),
            "64"
        );
        assert_eq!(
            resource_value(&c, "requests.memory", None, &ctx).unwrap(),
            "0"
        );
        let bare: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        assert_eq!(
            resource_value(&bare, "limits.cpu", None, &ctx).unwrap(),
            "2"
        );
    }

    #[test]
    fn service_links() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "redis-primary"},
            "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "redis", "port": 6379, "protocol": "TCP"}]}
        }))
        .unwrap();
        let mut out = Vec::new();
        service_env(&svc, &mut out);
        let m: BTreeMap<_, _> = out.into_iter().collect();
        assert_eq!(m["REDIS_PRIMARY_SERVICE_HOST"], "10.96.0.20");
        assert_eq!(m["REDIS_PRIMARY_SERVICE_PORT_REDIS"], "6379");
        assert_eq!(m["REDIS_PRIMARY_PORT_6379_TCP_ADDR"], "10.96.0.20");
        assert_eq!(m["REDIS_PRIMARY_PORT"], "tcp://10.96.0.20:6379");
    }
}
