//! Routes: the traffic table of a Route resolved to revisions, as Knative's route
//! reconciler does: a `configurationName` target (what a Service's `latestRevision` targets
//! become) follows the Configuration's latest ready Revision, a `revisionName` target names
//! one, and a tag gets its own host. The URL's domain comes from the `config-domain`
//! ConfigMap in `knative-serving`, as in Knative.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use minik8s_controllers::informers::{Cache, Change, Informers};
use minik8s_controllers::util::reconciler::Error;
use minik8s_controllers::util::runtime::Controller;

use crate::conditions::{self, READY, ROUTE};
use crate::serving::{Addressable, Configuration, Revision, Route, TrafficTarget, labels};

/// Knative's system namespace, where its ConfigMaps live.
pub const SYSTEM_NAMESPACE: &str = "knative-serving";
pub const CONFIG_DOMAIN: &str = "config-domain";
/// The domain when `config-domain` names none (Knative's documented example domain).
pub const DEFAULT_DOMAIN: &str = "example.com";

struct Ctx {
    client: kube::Client,
    configs: Cache<Configuration>,
    revisions: Cache<Revision>,
    domain_config: Cache<ConfigMap>,
}

/// The domain of routes: the `config-domain` key whose selector is empty (Knative's
/// default domain), else the first one; `_example` is documentation, not a domain.
pub fn domain(config: Option<&ConfigMap>) -> String {
    let data = config.and_then(|c| c.data.as_ref());
    let all: Vec<(&String, &String)> = data
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with('_'))
        .collect();
    all.iter()
        .find(|(_, v)| v.trim().is_empty())
        .or_else(|| all.first())
        .map(|(k, _)| k.to_string())
        .unwrap_or_else(|| DEFAULT_DOMAIN.to_string())
}

/// `<name>.<namespace>.<domain>`, or `<tag>-<name>...` for a tag's own host.
pub fn host(name: &str, namespace: &str, domain: &str, tag: Option<&str>) -> String {
    match tag {
        Some(t) => format!("{t}-{name}.{namespace}.{domain}"),
        None => format!("{name}.{namespace}.{domain}"),
    }
}

/// Why a target resolves to no revision: Knative's reason and message, and whether that
/// is final (False) or still in progress (Unknown).
#[derive(Debug, PartialEq)]
pub struct Unresolved {
    pub failed: bool,
    pub reason: &'static str,
    pub message: String,
    /// The object the cache does not hold: (kind, name).
    pub missing: Option<(&'static str, String)>,
}

fn unresolved(failed: bool, reason: &'static str, message: String) -> Unresolved {
    Unresolved {
        failed,
        reason,
        message,
        missing: None,
    }
}

fn not_found(kind: &'static str, name: &str) -> Unresolved {
    let reason = if kind == "Revision" {
        "RevisionMissing"
    } else {
        "ConfigurationMissing"
    };
    Unresolved {
        failed: true,
        reason,
        message: format!("{kind} {name:?} referenced in traffic not found."),
        missing: Some((kind, name.to_string())),
    }
}

/// The Ready status of a revision or configuration's conditions.
fn ready_status(conditions: &[crate::serving::Condition]) -> &str {
    conditions::status(conditions, READY)
}

/// Each target of `route` with the revision it sends to, or why the first that resolves to
/// none does not (as Knative's traffic builder says it).
fn resolve(route: &Route, ctx: &Ctx, domain: &str) -> Result<Vec<TrafficTarget>, Unresolved> {
    let ns = route.namespace().unwrap_or_default();
    let name = route.name_any();
    let mut out = Vec::new();
    for target in &route.spec.traffic {
        let mut resolved = TrafficTarget {
            tag: target.tag.clone(),
            percent: target.percent,
            ..Default::default()
        };
        match (&target.revision_name, &target.configuration_name) {
            (Some(rev), _) => {
                let Some(r) = ctx.revisions.get(&ObjectRef::new(rev).within(&ns)) else {
                    return Err(not_found("Revision", rev));
                };
                let conds = r.status.as_ref().map(|s| s.status.conditions.as_slice());
                match ready_status(conds.unwrap_or_default()) {
                    "True" => {}
                    "False" => {
                        return Err(unresolved(
                            true,
                            "RevisionMissing",
                            format!("Revision {rev:?} failed to become ready."),
                        ));
                    }
                    _ => {
                        return Err(unresolved(
                            false,
                            "RevisionMissing",
                            format!("Revision {rev:?} is not yet ready."),
                        ));
                    }
                }
                resolved.revision_name = Some(rev.clone());
                resolved.latest_revision = Some(false);
            }
            (None, Some(config)) => {
                let Some(c) = ctx.configs.get(&ObjectRef::new(config).within(&ns)) else {
                    return Err(not_found("Configuration", config));
                };
                let status = c.status.as_ref();
                let Some(latest) = status.and_then(|s| s.latest_ready_revision_name.clone()) else {
                    let conds = status.map(|s| s.status.conditions.as_slice());
                    return Err(if ready_status(conds.unwrap_or_default()) == "False" {
                        unresolved(
                            true,
                            "RevisionMissing",
                            format!("Configuration {config:?} does not have any ready Revision."),
                        )
                    } else {
                        unresolved(
                            false,
                            "RevisionMissing",
                            format!(
                                "Configuration {config:?} is waiting for a Revision to become ready."
                            ),
                        )
                    });
                };
                resolved.revision_name = Some(latest);
                resolved.latest_revision = Some(true);
            }
            (None, None) => {
                return Err(unresolved(
                    true,
                    "RevisionMissing",
                    "a traffic target names neither a revision nor a configuration".into(),
                ));
            }
        }
        if let Some(tag) = &target.tag {
            resolved.url = Some(format!("http://{}", host(&name, &ns, domain, Some(tag))));
        }
        out.push(resolved);
    }
    Ok(out)
}

async fn reconcile(route: Arc<Route>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = route.namespace().unwrap_or_default();
    let name = route.name_any();
    let domain = domain(
        ctx.domain_config
            .get(&ObjectRef::new(CONFIG_DOMAIN).within(SYSTEM_NAMESPACE))
            .as_deref(),
    );
    let mut status = route.status.clone().unwrap_or_default();
    status.url = Some(format!("http://{}", host(&name, &ns, &domain, None)));
    status.address = Some(Addressable {
        url: Some(format!("http://{name}.{ns}.svc.cluster.local")),
    });
    let conds = &mut status.status.conditions;
    ROUTE.initialize(conds);
    match resolve(&route, &ctx, &domain) {
        Ok(traffic) => {
            status.traffic = traffic;
            ROUTE.mark_true(conds, "AllTrafficAssigned");
            // Our router reads Routes themselves: the table is in effect once resolved.
            ROUTE.mark_true(conds, "IngressReady");
            ROUTE.mark_true(conds, "CertificateProvisioned");
            if let Some(c) = conds
                .iter_mut()
                .find(|c| c.type_ == "CertificateProvisioned")
            {
                c.reason = Some("TLSNotEnabled".into());
                c.message = Some("External TLS is not enabled".into());
            }
        }
        // Made a moment ago (a Service makes its Configuration just before its Route), and
        // not in this process's cache yet: in progress, not missing.
        Err(why) if exists(&ctx, &ns, why.missing.as_ref()).await? => ROUTE.mark_unknown(
            conds,
            "AllTrafficAssigned",
            why.reason,
            "Waiting for the traffic targets to be observed.",
        ),
        Err(why) if why.failed => {
            ROUTE.mark_false(conds, "AllTrafficAssigned", why.reason, &why.message);
        }
        Err(why) => ROUTE.mark_unknown(conds, "AllTrafficAssigned", why.reason, &why.message),
    }
    status.status.observed_generation = route.metadata.generation;
    crate::write_status(&ctx.client, &*route, route.status.as_ref(), &status).await?;
    Ok(Action::await_change())
}

/// Whether `missing` (a kind and name the cache lacks) exists in the API after all.
async fn exists(
    ctx: &Ctx,
    ns: &str,
    missing: Option<&(&'static str, String)>,
) -> Result<bool, kube::Error> {
    let Some((kind, name)) = missing else {
        return Ok(false);
    };
    if *kind == "Revision" {
        let api: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
        Ok(api.get_opt(name).await?.is_some())
    } else {
        let api: Api<Configuration> = Api::namespaced(ctx.client.clone(), ns);
        Ok(api.get_opt(name).await?.is_some())
    }
}

/// The routes of `ns` whose traffic names `config` or `revision`.
fn routes_naming(
    routes: &Cache<Route>,
    ns: &str,
    config: Option<&str>,
    revision: Option<&str>,
) -> Vec<ObjectRef<Route>> {
    routes
        .state()
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(ns))
        .filter(|r| {
            r.spec.traffic.iter().any(|t| {
                (config.is_some() && t.configuration_name.as_deref() == config)
                    || (revision.is_some() && t.revision_name.as_deref() == revision)
            })
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Runs the route controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let routes = informers.of::<Route>();
    let configs = informers.of::<Configuration>();
    let revisions = informers.of::<Revision>();
    let selection = format!("metadata.namespace={SYSTEM_NAMESPACE},metadata.name={CONFIG_DOMAIN}");
    let domain =
        informers.selected::<ConfigMap>(watcher::Config::default().fields(&selection), &selection);
    let domain_changed = domain
        .changes()
        .filter_map(|c| async move { (!matches!(c, Change::Synced)).then_some(()) });
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        configs: configs.store(),
        revisions: revisions.store(),
        domain_config: domain.store(),
    });
    let (by_config, by_revision) = (routes.store(), routes.store());
    Controller::for_shared_stream(routes.touched(), routes.store().kube_store())
        .watches_shared_stream(configs.touched(), move |c: Arc<Configuration>| {
            let ns = c.namespace().unwrap_or_default();
            routes_naming(&by_config, &ns, Some(&c.name_any()), None)
        })
        .watches_shared_stream(revisions.touched(), move |r: Arc<Revision>| {
            let ns = r.namespace().unwrap_or_default();
            let config = r.labels().get(labels::CONFIGURATION).cloned();
            routes_naming(&by_revision, &ns, config.as_deref(), Some(&r.name_any()))
        })
        .reconcile_all_on(domain_changed)
        .run("knative-route", reconcile, ctx)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn domain_from_config_domain_as_knative() {
        assert_eq!(domain(None), DEFAULT_DOMAIN);
        let cm = ConfigMap {
            data: Some(BTreeMap::from([
                ("_example".to_string(), "docs".to_string()),
                (
                    "internal.dev".to_string(),
                    "selector:\n  app: x\n".to_string(),
                ),
                ("minik8s.test".to_string(), String::new()),
            ])),
            ..Default::default()
        };
        assert_eq!(domain(Some(&cm)), "minik8s.test");
        assert_eq!(
            host("hello", "default", "minik8s.test", Some("blue")),
            "blue-hello.default.minik8s.test"
        );
    }
}
