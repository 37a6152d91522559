//! The namespace controller (upstream's pkg/controller/namespace): a deleted namespace keeps
//! the `kubernetes` finalizer in `spec.finalizers` until everything in it is gone; this
//! controller deletes that content, reports progress in the namespace's conditions, and then
//! clears the finalizer through the `finalize` subresource so the API server can remove it.
//!
//! Kinds are discovered on every pass (custom resources included), as upstream does, since a
//! namespace can hold anything the API serves.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, PropagationPolicy,
};
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};

use crate::informers::Informers;
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

/// The finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";
/// Upstream's wait for content that still has finalizers (finalizerEstimateSeconds).
const FINALIZER_ESTIMATE_SECONDS: i64 = 15;

struct Ctx {
    client: Client,
}

/// Runs the namespace controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let namespaces = informers.of::<Namespace>();
    Controller::for_shared_stream(namespaces.touched(), namespaces.store().kube_store())
        .run("namespace", reconcile, Arc::new(Ctx { client }))
        .await
}

fn has_finalizer(ns: &Namespace) -> bool {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if ns.metadata.deletion_timestamp.is_none() || !has_finalizer(&ns) {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let mut ns = (*ns).clone();
    // Status writes are updates (with the resourceVersion read), as upstream's controller
    // makes them and its role allows.
    if ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating") {
        ns.status.get_or_insert_with(Default::default).phase = Some("Terminating".into());
        ns = namespaces
            .replace_status(&name, &PostParams::default(), &ns)
            .await?;
    }

    let progress = delete_all_content(&ctx.client, &name).await;
    let conditions = progress.conditions(ns.status.as_ref().and_then(|s| s.conditions.as_ref()));
    if Some(&conditions) != ns.status.as_ref().and_then(|s| s.conditions.as_ref()) {
        ns.status.get_or_insert_with(Default::default).conditions = Some(conditions);
        ns = namespaces
            .replace_status(&name, &PostParams::default(), &ns)
            .await?;
    }
    if let Some(err) = progress.error() {
        return Err(Error::failed(err));
    }
    if progress.estimate > 0 {
        tracing::debug!(
            estimate = progress.estimate,
            "content remains; checking again"
        );
        return Ok(Action::requeue(Duration::from_secs(
            (progress.estimate / 2 + 1) as u64,
        )));
    }

    tracing::info!("namespace is empty; removing the kubernetes finalizer");
    if let Some(f) = ns.spec.as_mut().and_then(|s| s.finalizers.as_mut()) {
        f.retain(|f| f != FINALIZER);
    }
    match namespaces
        .replace_subresource("finalize", &name, &PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// A failing condition's reason and message.
type Failure<'a> = Option<(&'a str, String)>;

/// What one pass over a namespace's content found.
#[derive(Default)]
struct Progress {
    discovery_error: Option<String>,
    delete_errors: Vec<String>,
    /// "pods." (resource.group) → objects left.
    remaining: BTreeMap<String, usize>,
    /// finalizer → objects that still carry it.
    finalizers: BTreeMap<String, usize>,
    /// Seconds until the remaining content should be gone.
    estimate: i64,
    /// Objects left that no finalizer or grace period explains.
    unexpected: Vec<String>,
}

impl Progress {
    fn error(&self) -> Option<String> {
        let mut all: Vec<String> = self.discovery_error.iter().cloned().collect();
        all.extend(self.delete_errors.iter().cloned());
        all.extend(
            self.unexpected
                .iter()
                .map(|r| format!("unexpected items still remain in namespace: {r}")),
        );
        (!all.is_empty()).then(|| all.join(", "))
    }

    /// The namespace's deletion conditions after this pass (upstream's
    /// namespaceConditionUpdater): each is True with a failure reason or False with the
    /// reason that all went well; lastTransitionTime moves only when the status flips.
    fn conditions(&self, old: Option<&Vec<NamespaceCondition>>) -> Vec<NamespaceCondition> {
        let joined = |m: &BTreeMap<String, usize>, f: &dyn Fn(&String, &usize) -> String| {
            m.iter()
                .map(|(k, v)| f(k, v))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let computed: [(&str, Failure, &str, &str); 5] = [
            (
                "NamespaceDeletionDiscoveryFailure",
                self.discovery_error.as_ref().map(|e| {
                    (
                        "DiscoveryFailed",
                        format!("Discovery failed for some groups, 1 failing: {e}"),
                    )
                }),
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
            (
                "NamespaceDeletionGroupVersionParsingFailure",
                None,
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
            (
                "NamespaceDeletionContentFailure",
                (!self.delete_errors.is_empty()).then(|| {
                    (
                        "ContentDeletionFailed",
                        format!(
                            "Failed to delete all resource types, {} remaining: {}",
                            self.delete_errors.len(),
                            self.delete_errors.join(", ")
                        ),
                    )
                }),
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
            (
                "NamespaceContentRemaining",
                (!self.remaining.is_empty()).then(|| {
                    (
                        "SomeResourcesRemain",
                        format!(
                            "Some resources are remaining: {}",
                            joined(&self.remaining, &|r, n| format!(
                                "{r} has {n} resource instances"
                            ))
                        ),
                    )
                }),
                "ContentRemoved",
                "All content successfully removed",
            ),
            (
                "NamespaceFinalizersRemaining",
                (!self.finalizers.is_empty()).then(|| {
                    (
                        "SomeFinalizersRemain",
                        format!(
                            "Some content in the namespace has finalizers remaining: {}",
                            joined(&self.finalizers, &|f, n| format!(
                                "{f} in {n} resource instances"
                            ))
                        ),
                    )
                }),
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            ),
        ];
        let now = Time(jiff::Timestamp::now());
        let old = old.map(Vec::as_slice).unwrap_or_default();
        let mut out: Vec<NamespaceCondition> = old
            .iter()
            .filter(|c| !computed.iter().any(|(t, ..)| *t == c.type_))
            .cloned()
            .collect();
        for (type_, failure, ok_reason, ok_message) in computed {
            let (status, reason, message) = match failure {
                Some((reason, message)) => ("True", reason, message),
                None => ("False", ok_reason, ok_message.to_string()),
            };
            let previous = old.iter().find(|c| c.type_ == type_);
            let last_transition_time = match previous {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => Some(now.clone()),
            };
            out.push(NamespaceCondition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message),
                last_transition_time,
            });
        }
        out
    }
}

async fn discover(client: &Client) -> Result<Discovery, kube::Error> {
    match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => Ok(d),
        Err(_) => Discovery::new(client.clone()).run().await,
    }
}

/// Upstream's deleteAllContent: every namespaced kind that can be deleted, deleted
/// (deletecollection where served, else one by one), then listed again to see what is left.
async fn delete_all_content(client: &Client, namespace: &str) -> Progress {
    let mut progress = Progress::default();
    let discovery = match discover(client).await {
        Ok(d) => d,
        Err(e) => {
            progress.discovery_error = Some(e.to_string());
            return progress;
        }
    };
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::DELETE) {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
            // Pods take their grace period to go; estimated before they are deleted.
            let grace = if ar.group.is_empty() && ar.plural == "pods" {
                estimate_graceful_termination(client, namespace)
                    .await
                    .unwrap_or(0)
            } else {
                0
            };
            if let Err(e) =
                delete_content(&api, caps.supports_operation(verbs::DELETE_COLLECTION)).await
            {
                progress.delete_errors.push(format!("{}: {e}", gvr(&ar)));
            }
            if !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let left = match api.list_metadata(&ListParams::default()).await {
                Ok(l) => l.items,
                Err(e) => {
                    progress.delete_errors.push(format!("{}: {e}", gvr(&ar)));
                    continue;
                }
            };
            if left.is_empty() {
                continue;
            }
            *progress
                .remaining
                .entry(format!("{}.{}", ar.plural, ar.group))
                .or_default() += left.len();
            let mut any_finalizer = false;
            for obj in &left {
                for f in obj.finalizers() {
                    any_finalizer = true;
                    *progress.finalizers.entry(f.clone()).or_default() += 1;
                }
            }
            if grace > 0 {
                progress.estimate = progress.estimate.max(grace);
            } else if any_finalizer {
                progress.estimate = progress.estimate.max(FINALIZER_ESTIMATE_SECONDS);
            } else {
                progress.unexpected.push(gvr(&ar));
            }
        }
    }
    progress
}

fn gvr(ar: &ApiResource) -> String {
    format!("{}/{}", ar.api_version, ar.plural)
}

async fn delete_content(api: &Api<DynamicObject>, collection: bool) -> Result<(), kube::Error> {
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    if collection {
        api.delete_collection(&background, &ListParams::default())
            .await?;
        return Ok(());
    }
    for obj in api.list_metadata(&ListParams::default()).await?.items {
        match api.delete(&obj.name_any(), &background).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The longest termination grace period among the namespace's running pods.
async fn estimate_graceful_termination(
    client: &Client,
    namespace: &str,
) -> Result<i64, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .filter_map(|p| p.spec.as_ref()?.termination_grace_period_seconds)
        .max()
        .unwrap_or(0))
}
