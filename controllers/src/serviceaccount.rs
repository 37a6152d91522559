//! The ServiceAccount controller (upstream's pkg/controller/serviceaccount): pods that name no
//! service account run as `default`, so every active namespace must have one; it is created
//! with the namespace and again whenever someone deletes it.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::informers::Cache;
use crate::informers::{Change, Informers};
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

pub const DEFAULT: &str = "default";

struct Ctx {
    client: Client,
    accounts: Cache<ServiceAccount>,
}

/// Runs the ServiceAccount controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let selection = format!("metadata.name={DEFAULT}");
    let account_informer = informers
        .selected::<ServiceAccount>(watcher::Config::default().fields(&selection), &selection);
    let accounts = account_informer.store();
    // Only a `default` account going away needs work. The cache has lost it before the
    // change goes out, so the reconciles this triggers see the account gone.
    let gone = account_informer.changes().filter_map(|change| async move {
        matches!(change, Change::Deleted(_) | Change::Synced).then_some(())
    });
    let namespaces = informers.of::<Namespace>();
    Controller::for_shared_stream(namespaces.touched(), namespaces.store().kube_store())
        .reconcile_all_on(gone)
        .run(
            "serviceaccount",
            reconcile,
            Arc::new(Ctx { client, accounts }),
        )
        .await
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, Error> {
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
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}
