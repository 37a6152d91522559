//! Functions: each owns a Knative Service of its own name that runs the Python runtime with
//! the function's source in its environment, so an edit of the source is a new Revision and
//! calls in flight finish on the old one. The source is checked before the Service is
//! touched: a Function that does not parse keeps serving its last good revision and says
//! why in `SourceReady`. The namespace's warm pool is made here too.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, Node, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use minik8s_controllers::informers::{Cache, Informers};
use minik8s_controllers::util::controller_ref::{controller_ref, owners_of};
use minik8s_controllers::util::reconciler::Error;
use minik8s_controllers::util::runtime::Controller;

use super::validate::{self, Validator};
use super::{DEFAULT_HANDLER, Function, PYTHON3, env, labels, packages, pool};
use crate::conditions::{self, FUNCTION, READY};
use crate::route::SYSTEM_NAMESPACE;
use crate::serving::{RevisionSpec, RevisionTemplateSpec, Service, ServiceSpec};

struct Ctx {
    client: kube::Client,
    services: Cache<Service>,
    deployments: Cache<Deployment>,
    config_maps: Cache<ConfigMap>,
    nodes: Cache<Node>,
    validator: Validator,
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The function's source: inline, or the ConfigMap key it names.
fn source(f: &Function, config_maps: &Cache<ConfigMap>) -> Result<String, (String, String)> {
    if let Some(s) = &f.spec.source {
        return Ok(s.clone());
    }
    let Some(from) = &f.spec.source_from else {
        return Err((
            "SourceMissing".into(),
            "spec.source or spec.sourceFrom is required".into(),
        ));
    };
    let r = &from.config_map_key_ref;
    let ns = f.namespace().unwrap_or_default();
    config_maps
        .get(&ObjectRef::new(&r.name).within(&ns))
        .and_then(|cm| cm.data.as_ref()?.get(&r.key).cloned())
        .ok_or_else(|| {
            (
                "SourceMissing".into(),
                format!("key {:?} of ConfigMap {:?} not found", r.key, r.name),
            )
        })
}

/// The Service that serves `f` with `source`.
pub fn desired_service(f: &Function, source: &str) -> Service {
    let name = f.name_any();
    let handler = f.spec.handler.as_deref().unwrap_or(DEFAULT_HANDLER);
    let mut envs = vec![
        var(env::SOURCE, source),
        var(env::HANDLER, handler),
        var(env::NAME, &name),
    ];
    let requirements = f
        .spec
        .requirements
        .as_deref()
        .filter(|r| !r.trim().is_empty());
    if let Some(r) = requirements {
        envs.push(var(env::SITE_PACKAGES, &packages::pod_path(r)));
    }
    let fn_labels = BTreeMap::from([(labels::FUNCTION.to_string(), name.clone())]);
    // The first call takes a warm pool pod: no pod of the revision's own until load needs
    // more than the pods it took.
    let mut annotations = BTreeMap::from([(
        "autoscaling.knative.dev/initial-scale".to_string(),
        "0".to_string(),
    )]);
    // Every node installs what the revision's annotation names (see `packages`).
    if let Some(r) = requirements {
        annotations.insert(packages::ANNOTATION.to_string(), r.to_string());
    }
    if let Some(s) = &f.spec.scaling {
        let a = |k: &str| format!("autoscaling.knative.dev/{k}");
        if let Some(m) = &s.metric {
            annotations.insert(a("metric"), m.clone());
        }
        if let Some(t) = s.target {
            annotations.insert(a("target"), t.to_string());
        }
        if let Some(m) = s.min_scale {
            annotations.insert(a("min-scale"), m.to_string());
        }
        if let Some(m) = s.max_scale {
            annotations.insert(a("max-scale"), m.to_string());
        }
    }
    let mut svc = Service::new(
        &name,
        ServiceSpec {
            template: RevisionTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(fn_labels.clone()),
                    annotations: Some(annotations).filter(|a| !a.is_empty()),
                    ..Default::default()
                }),
                spec: RevisionSpec {
                    pod: PodSpec {
                        containers: vec![pool::runtime_container(envs)],
                        volumes: Some(vec![pool::packages_volume()]),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            },
            traffic: Vec::new(),
        },
    );
    svc.metadata.namespace = f.namespace();
    svc.metadata.labels = Some(fn_labels);
    svc.metadata.owner_references = Some(vec![controller_ref(f)]);
    svc
}

/// Where the function answers on a node's gateway.
pub fn gateway_path(f: &Function) -> String {
    format!(
        "/function/{}.{}",
        f.name_any(),
        f.namespace().unwrap_or_default()
    )
}

async fn reconcile(f: Arc<Function>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = f.namespace().unwrap_or_default();
    let name = f.name_any();
    let mut status = f.status.clone().unwrap_or_default();
    let conds = &mut status.status.conditions;
    FUNCTION.initialize(conds);
    let runtime = f.spec.runtime.as_deref().unwrap_or(PYTHON3);
    let handler = f.spec.handler.as_deref().unwrap_or(DEFAULT_HANDLER);
    let checked = if runtime != PYTHON3 {
        Err((
            "UnsupportedRuntime".to_string(),
            format!("runtime {runtime:?} is not supported: use {PYTHON3:?}"),
        ))
    } else {
        match source(&f, &ctx.config_maps) {
            Ok(src) => match ctx.validator.check(&src, handler, &name).await {
                Ok(()) => Ok(src),
                Err(validate::Error::Invalid(msg)) => Err(("InvalidSource".into(), msg)),
                Err(e) => return Err(Error::failed(e.to_string())),
            },
            Err(why) => Err(why),
        }
    };
    let key = ObjectRef::new(&name).within(&ns);
    let mut service = ctx.services.get(&key);
    match checked {
        Ok(src) => {
            FUNCTION.mark_true(conds, "SourceReady");
            let nodes =
                minik8s_proxy::ingress::node_addresses(ctx.nodes.state().iter().map(|n| &**n))
                    .len()
                    .max(1) as i32;
            let functions_config = ctx
                .config_maps
                .get(&ObjectRef::new(pool::CONFIG_FUNCTIONS).within(SYSTEM_NAMESPACE));
            let size = pool::pool_size(functions_config.as_deref()) * nodes;
            let current_pool = ctx
                .deployments
                .get(&ObjectRef::new(&pool::pool_name(PYTHON3)).within(&ns));
            pool::ensure(&ctx.client, current_pool.as_deref(), &f, size).await?;
            let api: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
            service = crate::service::ensure(
                &api,
                f.as_ref(),
                service,
                desired_service(&f, &src),
                |a, b| a.spec == b.spec && a.labels() == b.labels(),
            )
            .await?;
        }
        Err((reason, message)) => FUNCTION.mark_false(conds, "SourceReady", &reason, &message),
    }
    let svc_status = service.as_ref().and_then(|s| {
        let st = s.status.as_ref()?;
        (st.status.observed_generation == s.metadata.generation).then_some(st)
    });
    match svc_status {
        Some(st) => {
            status.url = st.url.clone();
            status.path = st.url.as_ref().map(|_| gateway_path(&f));
            status.latest_created_revision_name = st.latest_created_revision_name.clone();
            status.latest_ready_revision_name = st.latest_ready_revision_name.clone();
            let ready = conditions::get(&st.status.conditions, READY).cloned();
            FUNCTION.propagate(
                &mut status.status.conditions,
                "ServiceReady",
                ready.as_ref(),
            );
        }
        None => FUNCTION.mark_unknown(
            &mut status.status.conditions,
            "ServiceReady",
            "Deploying",
            "",
        ),
    }
    status.status.observed_generation = f.metadata.generation;
    crate::write_status(&ctx.client, &*f, f.status.as_ref(), &status).await?;
    Ok(Action::await_change())
}

/// Runs the function controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let functions = informers.of::<Function>();
    let services = informers.of::<Service>();
    let deployments = informers.of::<Deployment>();
    let config_maps = informers.of::<ConfigMap>();
    let nodes = informers.of::<Node>();
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        services: services.store(),
        deployments: deployments.store(),
        config_maps: config_maps.store(),
        nodes: nodes.store(),
        validator: Validator::default(),
    });
    let owners = functions.store().kube_store();
    let by_source = functions.store();
    Controller::for_shared_stream(functions.touched(), functions.store().kube_store())
        .watches_shared_stream(services.touched(), move |s: Arc<Service>| {
            owners_of(&owners, s.as_ref(), |_: &Function| None)
        })
        .watches_shared_stream(config_maps.touched(), move |cm: Arc<ConfigMap>| {
            let ns = cm.namespace().unwrap_or_default();
            let name = cm.name_any();
            by_source
                .state()
                .into_iter()
                .filter(|f| {
                    f.namespace().as_deref() == Some(ns.as_str())
                        && f.spec
                            .source_from
                            .as_ref()
                            .is_some_and(|s| s.config_map_key_ref.name == name)
                })
                .map(|f| ObjectRef::from_obj(f.as_ref()))
                .collect::<Vec<_>>()
        })
        .run("function", reconcile, ctx)
        .await
}
