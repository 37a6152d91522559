//! The ClusterRole aggregation controller (upstream's pkg/controller/clusterroleaggregation):
//! a ClusterRole with an `aggregationRule` holds the rules of the ClusterRoles its selectors
//! match, so a CRD's installer can extend `admin`, `edit` and `view` by labelling a role of its
//! own. The rules are computed by [`minik8s_api::rbac::aggregate`], which the bootstrap
//! policy's tests use too.
//!
//! Which roles feed which is not known until the labels are read, and ClusterRoles are few, so
//! any change of any ClusterRole queues every aggregated one, as upstream does. The new rules
//! are written with the resourceVersion that was read: a role changed meanwhile is computed
//! again from the newer cache.

use std::sync::Arc;

use futures::{StreamExt, stream};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use minik8s_api::rbac::{aggregate, same_rules};

use crate::informers::{Cache, Informers};
use crate::util::reconciler::Error;
use crate::util::runtime;

/// The controller's name in `--controllers`.
pub const NAME: &str = "clusterrole-aggregation";
/// The field manager of its writes, as upstream's.
pub const FIELD_MANAGER: &str = "clusterrole-aggregation-controller";

struct Ctx {
    client: Client,
    roles: Cache<ClusterRole>,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let informer = informers.of::<ClusterRole>();
    let roles = informer.store();
    let cached = roles.clone();
    let queue = informer.changes().flat_map(move |_| {
        let aggregated: Vec<ObjectRef<ClusterRole>> = cached
            .state()
            .iter()
            .filter(|r| r.aggregation_rule.is_some())
            .map(|r| ObjectRef::from_obj(r.as_ref()))
            .collect();
        stream::iter(aggregated)
    });
    let ctx = Arc::new(Ctx {
        client,
        roles: roles.clone(),
    });
    runtime::run("ClusterRoleAggregator", roles, queue, reconcile, ctx).await
}

async fn reconcile(role: Arc<ClusterRole>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let all = ctx.roles.state();
    let Some(rules) = aggregate(&role, &all)? else {
        return Ok(Action::await_change());
    };
    if same_rules(&rules, role.rules.as_deref().unwrap_or_default()) {
        return Ok(Action::await_change());
    }
    let mut next = role.as_ref().clone();
    next.rules = Some(rules);
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let api: Api<ClusterRole> = Api::all(ctx.client.clone());
    match api.replace(&role.name_any(), &params, &next).await {
        Ok(_) => {
            tracing::info!(clusterrole = %role.name_any(), "aggregated rules updated");
            Ok(Action::await_change())
        }
        // Deleted meanwhile: its deletion is a change that queues the rest again.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}
