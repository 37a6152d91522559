//! The resource quota controller (upstream's `pkg/controller/resourcequota`): keeps each
//! ResourceQuota's `status.hard` equal to its spec and `status.used` equal to what the
//! objects of its namespace take, so `kubectl describe quota` and `kubectl get quota` show
//! the truth after admission charged or an object went away.
//!
//! A quota is recomputed whenever it changes and whenever a pod, Service, ConfigMap, Secret,
//! claim, ReplicationController or quota of its namespace comes, goes or changes, from the
//! shared caches; upstream also resyncs every five minutes, which watching makes needless.
//! `count/<resource>.<group>` for other kinds is left out of `used` for now.

use std::sync::Arc;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota,
    ResourceQuotaStatus, Secret, Service,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use minik8s_api::kinds::resource_quota::{Usage, used};

use crate::informers::{Cache, Informers};
use crate::util::reconciler::Error;
use crate::util::runtime;

/// Upstream's name of the controller in `--controllers`.
pub const NAME: &str = "resourcequota";

struct Ctx {
    client: Client,
    quotas: Cache<ResourceQuota>,
    pods: Cache<Pod>,
    services: Cache<Service>,
    config_maps: Cache<ConfigMap>,
    secrets: Cache<Secret>,
    claims: Cache<PersistentVolumeClaim>,
    rcs: Cache<ReplicationController>,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let quotas = informers.of::<ResourceQuota>();
    let pods = informers.of::<Pod>();
    let services = informers.of::<Service>();
    let config_maps = informers.of::<ConfigMap>();
    let secrets = informers.of::<Secret>();
    let claims = informers.of::<PersistentVolumeClaim>();
    let rcs = informers.of::<ReplicationController>();

    // Every change in a namespace wakes its quotas; the quotas' own changes wake themselves.
    let namespaces = stream::select_all([
        namespaces_of(pods.touched()),
        namespaces_of(services.touched()),
        namespaces_of(config_maps.touched()),
        namespaces_of(secrets.touched()),
        namespaces_of(claims.touched()),
        namespaces_of(rcs.touched()),
        namespaces_of(quotas.touched()),
    ]);
    let store = quotas.store();
    let queue = namespaces.flat_map(move |ns| {
        let refs: Vec<ObjectRef<ResourceQuota>> = store
            .state()
            .iter()
            .filter(|q| q.namespace().as_deref() == Some(ns.as_str()))
            .map(|q| ObjectRef::from_obj(q.as_ref()))
            .collect();
        stream::iter(refs)
    });
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        quotas: quotas.store(),
        pods: pods.store(),
        services: services.store(),
        config_maps: config_maps.store(),
        secrets: secrets.store(),
        claims: claims.store(),
        rcs: rcs.store(),
    });
    runtime::run("resourcequota_primary", quotas.store(), queue, sync, ctx).await
}

fn namespaces_of<K: Resource + Send + Sync + 'static>(
    changes: impl futures::Stream<Item = Arc<K>> + Send + 'static,
) -> futures::stream::BoxStream<'static, String> {
    changes
        .filter_map(|o| async move { o.meta().namespace.clone() })
        .boxed()
}

impl Ctx {
    async fn wait_until_ready(&self) -> Result<(), Error> {
        let closed = |_| Error::failed("informer cache closed");
        self.quotas.wait_until_ready().await.map_err(closed)?;
        self.pods.wait_until_ready().await.map_err(closed)?;
        self.services.wait_until_ready().await.map_err(closed)?;
        self.config_maps.wait_until_ready().await.map_err(closed)?;
        self.secrets.wait_until_ready().await.map_err(closed)?;
        self.claims.wait_until_ready().await.map_err(closed)?;
        self.rcs.wait_until_ready().await.map_err(closed)
    }
}

/// The objects of `ns` in a cache.
fn in_ns<K: Resource<DynamicType = ()> + Clone + 'static>(
    cache: &Cache<K>,
    ns: &str,
) -> Vec<Arc<K>> {
    cache
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns))
        .collect()
}

#[tracing::instrument(skip_all, fields(quota = %quota.name_any(), namespace = ?quota.namespace()))]
async fn sync(quota: Arc<ResourceQuota>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.wait_until_ready().await?;
    let ns = quota.namespace().unwrap_or_default();
    let pods = in_ns(&ctx.pods, &ns);
    let services = in_ns(&ctx.services, &ns);
    let plain = |resource: &'static str, n: usize| {
        (0..n).map(move |_| Usage::Object {
            resource,
            group: "",
            extra: Default::default(),
        })
    };
    let claims = in_ns(&ctx.claims, &ns);
    let objects = pods
        .iter()
        .map(|p| Usage::Pod(p.as_ref()))
        .chain(services.iter().map(|s| Usage::service(s)))
        .chain(claims.iter().map(|c| Usage::claim(c)))
        .chain(plain("configmaps", in_ns(&ctx.config_maps, &ns).len()))
        .chain(plain("secrets", in_ns(&ctx.secrets, &ns).len()))
        .chain(plain("replicationcontrollers", in_ns(&ctx.rcs, &ns).len()))
        .chain(plain("resourcequotas", in_ns(&ctx.quotas, &ns).len()));
    let status = ResourceQuotaStatus {
        hard: quota.spec.as_ref().and_then(|s| s.hard.clone()),
        used: Some(used(&quota, objects, Timestamp::now())),
    };
    if quota.status.as_ref() == Some(&status) {
        return Ok(Action::await_change());
    }
    let mut fresh = (*quota).clone();
    fresh.status = Some(status);
    let api: Api<ResourceQuota> = Api::namespaced(ctx.client.clone(), &ns);
    // The cached resourceVersion guards the write: a quota changed since is synced again.
    match api
        .replace_status(&quota.name_any(), &PostParams::default(), &fresh)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}
