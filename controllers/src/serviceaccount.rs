//! The ServiceAccount controller (upstream's pkg/controller/serviceaccount): pods that name no
//! service account run as `default`, so every active namespace must have one; it is created
//! with the namespace and again whenever someone deletes it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use tracing::Instrument;

pub const DEFAULT: &str = "default";

struct Ctx {
    client: Client,
    accounts: Store<ServiceAccount>,
}

/// Runs the ServiceAccount controller until dropped.
pub async fn run(client: Client) {
    let accounts_api: Api<ServiceAccount> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={DEFAULT}"));
    let (accounts, writer) = reflector::store();
    // Only a `default` account going away needs work. The reflector updates the cache before
    // it passes an event on, so the reconciles this triggers see the account gone.
    let gone = reflector(writer, watcher(accounts_api, config))
        .default_backoff()
        .filter_map(|event| async move {
            matches!(event, Ok(Event::Delete(_) | Event::InitDone)).then_some(())
        });
    Controller::new(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
    )
    .reconcile_all_on(gone)
    .run(
        |ns, ctx| {
            let span = tracing::info_span!("serviceaccount", namespace = %ns.name_any());
            reconcile(ns, ctx).instrument(span)
        },
        |_, e, _| {
            tracing::info!(error = %e, "default service account will be retried");
            Action::requeue(Duration::from_secs(1))
        },
        Arc::new(Ctx { client, accounts }),
    )
    .for_each(|_| async {})
    .await
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let name = ns.name_any();
    let active = ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating");
    if !active {
        return Ok(Action::await_change());
    }
    if ctx
        .accounts
        .get(&ObjectRef::new(DEFAULT).within(&name))
        .is_some()
    {
        return Ok(Action::await_change());
    }
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT.into()),
            namespace: Some(name.clone()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &name);
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => tracing::info!("created the default service account"),
        // Not in the cache yet, or the namespace started terminating meanwhile.
        Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_forbidden() => {}
        Err(e) => return Err(e),
    }
    Ok(Action::await_change())
}
