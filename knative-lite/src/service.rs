//! Services (`ksvc`): each owns a Configuration and a Route of its own name, as Knative's
//! service reconciler makes them, and reports their state as its own: the latest created
//! and ready revisions, the URL and traffic, and `ConfigurationsReady` / `RoutesReady`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use minik8s_controllers::informers::{Cache, Informers};
use minik8s_controllers::util::controller_ref::{controller_ref, is_controlled_by, owners_of};
use minik8s_controllers::util::reconciler::Error;
use minik8s_controllers::util::runtime::Controller;

use crate::conditions::{self, READY, SERVICE};
use crate::serving::{
    Configuration, ConfigurationSpec, Route, RouteSpec, Service, TrafficTarget, labels,
};

struct Ctx {
    client: kube::Client,
    configs: Cache<Configuration>,
    routes: Cache<Route>,
}

fn child_meta(svc: &Service) -> ObjectMeta {
    let mut child_labels: BTreeMap<String, String> = svc.labels().clone();
    child_labels.insert(labels::SERVICE.into(), svc.name_any());
    child_labels.insert(labels::SERVICE_UID.into(), svc.uid().unwrap_or_default());
    ObjectMeta {
        name: Some(svc.name_any()),
        namespace: svc.namespace(),
        labels: Some(child_labels),
        annotations: Some(svc.annotations().clone()).filter(|a| !a.is_empty()),
        owner_references: Some(vec![controller_ref(svc)]),
        ..Default::default()
    }
}

/// The Route's traffic: the Service's, with its "latest revision" targets turned into
/// targets of its Configuration; all traffic to the latest ready revision when it has none.
pub fn route_traffic(svc: &Service) -> Vec<TrafficTarget> {
    let name = svc.name_any();
    if svc.spec.traffic.is_empty() {
        return vec![TrafficTarget {
            configuration_name: Some(name),
            latest_revision: Some(true),
            percent: Some(100),
            ..Default::default()
        }];
    }
    svc.spec
        .traffic
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if t.latest_revision == Some(true) || t.revision_name.is_none() {
                t.revision_name = None;
                t.configuration_name = Some(name.clone());
                t.latest_revision = Some(true);
            }
            t
        })
        .collect()
}

/// Creates the child, or brings the spec of the one `owner` controls up to date.
pub(crate) async fn ensure<K, O>(
    api: &Api<K>,
    owner: &O,
    current: Option<Arc<K>>,
    desired: K,
    same: impl Fn(&K, &K) -> bool,
) -> Result<Option<Arc<K>>, Error>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    O: Resource<DynamicType = ()>,
{
    match current {
        None => match api.create(&PostParams::default(), &desired).await {
            Ok(c) => Ok(Some(Arc::new(c))),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(e.into()),
        },
        Some(c) if !is_controlled_by(c.as_ref(), owner) => Err(Error::failed(format!(
            "{} {:?} exists and is not owned by {} {:?}",
            K::kind(&()),
            c.name_any(),
            O::kind(&()),
            owner.name_any()
        ))),
        Some(c) if same(&c, &desired) => Ok(Some(c)),
        Some(c) => {
            let mut next = desired;
            next.meta_mut().resource_version = c.resource_version();
            Ok(Some(Arc::new(
                api.replace(&c.name_any(), &PostParams::default(), &next)
                    .await?,
            )))
        }
    }
}

async fn reconcile(svc: Arc<Service>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();

    let mut desired_config = Configuration::new(
        &name,
        ConfigurationSpec {
            template: svc.spec.template.clone(),
        },
    );
    desired_config.metadata = child_meta(&svc);
    let config = ensure(
        &Api::namespaced(ctx.client.clone(), &ns),
        svc.as_ref(),
        ctx.configs.get(&ObjectRef::new(&name).within(&ns)),
        desired_config,
        |a, b| a.spec == b.spec && a.labels() == b.labels(),
    )
    .await?;
    let mut desired_route = Route::new(
        &name,
        RouteSpec {
            traffic: route_traffic(&svc),
        },
    );
    desired_route.metadata = child_meta(&svc);
    let route = ensure(
        &Api::namespaced(ctx.client.clone(), &ns),
        svc.as_ref(),
        ctx.routes.get(&ObjectRef::new(&name).within(&ns)),
        desired_route,
        |a, b| a.spec == b.spec && a.labels() == b.labels(),
    )
    .await?;

    let mut status = svc.status.clone().unwrap_or_default();
    let conds = &mut status.status.conditions;
    SERVICE.initialize(conds);
    let config_status = config.as_ref().and_then(|c| c.status.clone());
    let up_to_date = |generation: Option<i64>, observed: Option<i64>| {
        generation.is_some() && generation == observed
    };
    match (&config, &config_status) {
        (Some(c), Some(s)) if up_to_date(c.metadata.generation, s.status.observed_generation) => {
            status.latest_created_revision_name = s.latest_created_revision_name.clone();
            status.latest_ready_revision_name = s.latest_ready_revision_name.clone();
            SERVICE.propagate(
                conds,
                "ConfigurationsReady",
                conditions::get(&s.status.conditions, READY),
            );
        }
        _ => SERVICE.mark_unknown(
            conds,
            "ConfigurationsReady",
            "OutOfDate",
            "The Configuration is still working to reflect the latest desired specification.",
        ),
    }
    let route_status = route.as_ref().and_then(|r| r.status.clone());
    match (&route, &route_status) {
        // Its "latest revision" targets must point at the revision the Configuration calls
        // latest ready: until then the Route has not caught up.
        (Some(r), Some(s))
            if up_to_date(r.metadata.generation, s.status.observed_generation)
                && s.traffic
                    .iter()
                    .filter(|t| t.latest_revision == Some(true))
                    .all(|t| t.revision_name == status.latest_ready_revision_name) =>
        {
            status.url = s.url.clone();
            status.address = s.address.clone();
            status.traffic = s.traffic.clone();
            SERVICE.propagate(
                conds,
                "RoutesReady",
                conditions::get(&s.status.conditions, READY),
            );
        }
        _ => SERVICE.mark_unknown(
            conds,
            "RoutesReady",
            "OutOfDate",
            "The Route is still working to reflect the latest desired specification.",
        ),
    }
    status.status.observed_generation = svc.metadata.generation;
    crate::write_status(&ctx.client, &*svc, svc.status.as_ref(), &status).await?;
    Ok(Action::await_change())
}

/// Runs the service controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let services = informers.of::<Service>();
    let configs = informers.of::<Configuration>();
    let routes = informers.of::<Route>();
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        configs: configs.store(),
        routes: routes.store(),
    });
    let (for_configs, for_routes) = (services.store().kube_store(), services.store().kube_store());
    Controller::for_shared_stream(services.touched(), services.store().kube_store())
        .watches_shared_stream(configs.touched(), move |c: Arc<Configuration>| {
            owners_of(&for_configs, c.as_ref(), |_: &Service| None)
        })
        .watches_shared_stream(routes.touched(), move |r: Arc<Route>| {
            owners_of(&for_routes, r.as_ref(), |_: &Service| None)
        })
        .run("knative-service", reconcile, ctx)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::ServiceSpec;

    #[test]
    fn latest_revision_targets_follow_the_configuration() {
        let mut svc = Service::new("hello", ServiceSpec::default());
        let all = route_traffic(&svc);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].configuration_name.as_deref(), Some("hello"));
        assert_eq!(all[0].percent, Some(100));
        svc.spec.traffic = vec![
            TrafficTarget {
                revision_name: Some("hello-00001".into()),
                percent: Some(80),
                ..Default::default()
            },
            TrafficTarget {
                latest_revision: Some(true),
                percent: Some(20),
                tag: Some("latest".into()),
                ..Default::default()
            },
        ];
        let t = route_traffic(&svc);
        assert_eq!(t[0].revision_name.as_deref(), Some("hello-00001"));
        assert_eq!(t[1].configuration_name.as_deref(), Some("hello"));
        assert_eq!(t[1].tag.as_deref(), Some("latest"));
    }
}
