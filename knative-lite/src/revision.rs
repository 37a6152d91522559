//! Revisions: each runs as a Deployment of its own (`<revision>-deployment`), as Knative's
//! revision reconciler makes it, and reports from it and its pods whether the containers
//! start: `ResourcesAvailable` False with the pods' waiting reason (an image that cannot be
//! pulled), `ContainerHealthy` False with `ExitCode<N>` when a container exits.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, LifecycleHandler, Pod, PodTemplateSpec, Probe, SleepAction, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use minik8s_controllers::informers::{Cache, Informers};
use minik8s_controllers::util::controller_ref::{controller_ref, is_controlled_by, owners_of};
use minik8s_controllers::util::pods as util_pods;
use minik8s_controllers::util::reconciler::Error;
use minik8s_controllers::util::runtime::Controller;

use crate::conditions::{self, REVISION};
use crate::serving::{Revision, annotations, labels};

/// The port a container listens on when it declares none (`$PORT`).
pub const DEFAULT_USER_PORT: i32 = 8080;
/// How long a stopping revision pod goes on serving before its container is signalled.
const DRAIN_SECONDS: i64 = 1;
/// The name of a revision's container when the template gives none.
pub const USER_CONTAINER: &str = "user-container";
/// Waiting reasons that mean the container will not start without a change.
const FATAL_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

struct Ctx {
    client: kube::Client,
    deployments: Cache<Deployment>,
    pods: Cache<Pod>,
}

pub fn deployment_name(revision: &str) -> String {
    format!("{revision}-deployment")
}

/// The port the revision's container listens on.
pub fn user_port(rev: &Revision) -> i32 {
    rev.spec
        .pod
        .containers
        .first()
        .and_then(|c| c.ports.as_ref()?.first().map(|p| p.container_port))
        .unwrap_or(DEFAULT_USER_PORT)
}

fn annotation_int(rev: &Revision, key: &str) -> Option<i32> {
    rev.annotations().get(key)?.parse().ok()
}

/// Replicas a new revision starts with: `initial-scale` (default 1), at least `min-scale`.
fn initial_replicas(rev: &Revision) -> i32 {
    let initial = annotation_int(rev, annotations::INITIAL_SCALE).unwrap_or(1);
    initial.max(annotation_int(rev, annotations::MIN_SCALE).unwrap_or(0))
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// The Deployment that runs `rev`, with Knative's labels on its pods.
pub fn desired_deployment(rev: &Revision) -> Deployment {
    let name = rev.name_any();
    let uid = rev.uid().unwrap_or_default();
    let mut pod_labels: BTreeMap<String, String> = rev.labels().clone();
    pod_labels.insert(labels::REVISION.into(), name.clone());
    pod_labels.insert(labels::REVISION_UID.into(), uid.clone());
    pod_labels.insert("app".into(), name.clone());
    let mut spec = rev.spec.pod.clone();
    let port = user_port(rev).to_string();
    let label = |k: &str| rev.labels().get(k).cloned().unwrap_or_default();
    for (i, c) in spec.containers.iter_mut().enumerate() {
        if c.name.is_empty() {
            c.name = if i == 0 {
                USER_CONTAINER.into()
            } else {
                format!("{USER_CONTAINER}-{i}")
            };
        }
        if i == 0 {
            // As Knative's queue-proxy does: not Ready until the server accepts connections.
            c.readiness_probe.get_or_insert_with(|| Probe {
                tcp_socket: Some(TCPSocketAction {
                    port: IntOrString::Int(user_port(rev)),
                    ..Default::default()
                }),
                period_seconds: Some(1),
                ..Default::default()
            });
            // Draining: the router stops sending as soon as the pod is deleted; the
            // container gets SIGTERM only after what was already sent has arrived.
            let lifecycle = c.lifecycle.get_or_insert_with(Default::default);
            lifecycle.pre_stop.get_or_insert_with(|| LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: DRAIN_SECONDS,
                }),
                ..Default::default()
            });
            set_env(c, "PORT", &port);
            set_env(c, "K_REVISION", &name);
            set_env(c, "K_CONFIGURATION", &label(labels::CONFIGURATION));
            set_env(c, "K_SERVICE", &label(labels::SERVICE));
        }
    }
    spec.enable_service_links.get_or_insert(false);
    Deployment {
        metadata: ObjectMeta {
            name: Some(deployment_name(&name)),
            namespace: rev.namespace(),
            labels: Some(pod_labels.clone()),
            owner_references: Some(vec![controller_ref(rev)]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(initial_replicas(rev)),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(labels::REVISION_UID.into(), uid)])),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(rev.annotations().clone()).filter(|a| !a.is_empty()),
                    ..Default::default()
                }),
                spec: Some(spec),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// Sets `name` unless the user set it (Knative reserves PORT and the K_ variables; a user
/// value of PORT is refused by its webhook, and ours wins here).
fn set_env(c: &mut Container, name: &str, value: &str) {
    let env = c.env.get_or_insert_with(Vec::new);
    env.retain(|e| e.name != name);
    env.push(self::env(name, value));
}

/// Why the revision's pods do not run, from the first pod that says so.
fn pod_failure(pods: &[Arc<Pod>]) -> Option<(&'static str, String, String)> {
    for pod in pods {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref());
        for cs in statuses.into_iter().flatten() {
            let terminated = cs
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| cs.state.as_ref()?.terminated.as_ref());
            if let Some(t) = terminated.filter(|t| t.exit_code != 0) {
                let message = t.message.clone().unwrap_or_default();
                return Some((
                    "ContainerHealthy",
                    format!("ExitCode{}", t.exit_code),
                    format!("Container failed with: {message}"),
                ));
            }
            if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref())
                && let Some(reason) = w.reason.as_deref()
                && FATAL_WAITING.contains(&reason)
            {
                return Some((
                    "ResourcesAvailable",
                    reason.to_string(),
                    w.message.clone().unwrap_or_default(),
                ));
            }
        }
    }
    None
}

async fn reconcile(rev: Arc<Revision>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = rev.namespace().unwrap_or_default();
    let name = rev.name_any();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let key = ObjectRef::new(&deployment_name(&name)).within(&ns);
    let deployment = match ctx.deployments.get(&key) {
        Some(d) if is_controlled_by(d.as_ref(), rev.as_ref()) => {
            update_deployment(&deployments, &rev, &d).await?
        }
        Some(_) => {
            return Err(Error::failed(format!(
                "deployment {} exists and is not owned by revision {name}",
                key.name
            )));
        }
        None => Arc::new(
            deployments
                .create(&PostParams::default(), &desired_deployment(&rev))
                .await?,
        ),
    };

    let mut status = rev.status.clone().unwrap_or_default();
    REVISION.initialize(&mut status.status.conditions);
    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(0);
    // Ready pods of the revision: its Deployment's, and any pool pod it took.
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.labels().get(labels::REVISION) == Some(&name)
        })
        .collect();
    let ready = pods
        .iter()
        .filter(|p| util_pods::is_active(p) && util_pods::is_ready(p))
        .count() as i32;
    status.desired_replicas = Some(desired);
    status.actual_replicas = Some(ready);
    let conditions = &mut status.status.conditions;
    let failure = if ready == 0 { pod_failure(&pods) } else { None };
    match failure {
        Some((ty, reason, message)) => REVISION.mark_false(conditions, ty, &reason, &message),
        // Serving, or scaled to zero with nothing wrong (requests wake it): Ready, as in
        // Knative, where a revision at zero stays Ready.
        None if ready > 0 || desired == 0 => {
            REVISION.mark_true(conditions, "ResourcesAvailable");
            REVISION.mark_true(conditions, "ContainerHealthy");
        }
        None => {
            if !conditions::is_true(conditions, conditions::READY) {
                REVISION.mark_unknown(conditions, "ResourcesAvailable", "Deploying", "");
            }
        }
    }
    status.status.observed_generation = rev.metadata.generation;
    crate::write_status(&ctx.client, &*rev, rev.status.as_ref(), &status).await?;
    Ok(Action::await_change())
}

/// Brings the Deployment's pod template back to the revision's (revisions are immutable, so
/// only someone else's edit changes it); the replica count is the autoscaler's.
async fn update_deployment(
    api: &Api<Deployment>,
    rev: &Revision,
    current: &Arc<Deployment>,
) -> Result<Arc<Deployment>, Error> {
    let want = desired_deployment(rev);
    let want_template = want.spec.as_ref().map(|s| &s.template);
    let have_template = current.spec.as_ref().map(|s| &s.template);
    if want_template.map(|t| &t.spec) == have_template.map(|t| &t.spec) {
        return Ok(current.clone());
    }
    let mut next = (**current).clone();
    if let (Some(spec), Some(want)) = (next.spec.as_mut(), want.spec) {
        spec.template = want.template;
    }
    Ok(Arc::new(
        api.replace(&current.name_any(), &PostParams::default(), &next)
            .await?,
    ))
}

/// Runs the revision controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let revisions = informers.of::<Revision>();
    let deployments = informers.of::<Deployment>();
    let pods = informers.of::<Pod>();
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        deployments: deployments.store(),
        pods: pods.store(),
    });
    let owners = revisions.store().kube_store();
    Controller::for_shared_stream(revisions.touched(), revisions.store().kube_store())
        .watches_shared_stream(deployments.touched(), move |d: Arc<Deployment>| {
            owners_of(&owners, d.as_ref(), |_: &Revision| None)
        })
        .watches_shared_stream(pods.touched(), |p: Arc<Pod>| {
            let ns = p.namespace().unwrap_or_default();
            p.labels()
                .get(labels::REVISION)
                .map(|r| ObjectRef::new(r).within(&ns))
        })
        .run("knative-revision", reconcile, ctx)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::RevisionSpec;

    fn revision() -> Revision {
        let mut rev = Revision::new("hello-00001", RevisionSpec::default());
        rev.metadata.namespace = Some("default".into());
        rev.metadata.uid = Some("u1".into());
        rev.metadata.labels = Some(BTreeMap::from([
            (labels::CONFIGURATION.into(), "hello".into()),
            (labels::SERVICE.into(), "hello".into()),
        ]));
        rev.spec.pod.containers = vec![Container {
            image: Some("hello:1".into()),
            ..Default::default()
        }];
        rev
    }

    #[test]
    fn deployment_carries_knatives_labels_and_port() {
        let d = desired_deployment(&revision());
        assert_eq!(d.metadata.name.as_deref(), Some("hello-00001-deployment"));
        let template = &d.spec.as_ref().unwrap().template;
        let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels[labels::REVISION], "hello-00001");
        assert_eq!(labels[labels::CONFIGURATION], "hello");
        assert_eq!(labels[labels::SERVICE], "hello");
        let c = &template.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.name, USER_CONTAINER);
        let port = c.env.iter().flatten().find(|e| e.name == "PORT").unwrap();
        assert_eq!(port.value.as_deref(), Some("8080"));
        assert_eq!(d.spec.unwrap().replicas, Some(1));
    }

    #[test]
    fn scale_annotations_set_the_first_replicas() {
        let mut rev = revision();
        rev.metadata.annotations = Some(BTreeMap::from([(
            annotations::MIN_SCALE.to_string(),
            "3".to_string(),
        )]));
        assert_eq!(initial_replicas(&rev), 3);
        rev.metadata.annotations = Some(BTreeMap::from([(
            annotations::INITIAL_SCALE.to_string(),
            "0".to_string(),
        )]));
        assert_eq!(initial_replicas(&rev), 0);
    }

    fn pod_with(status: serde_json::Value) -> Arc<Pod> {
        Arc::new(serde_json::from_value(serde_json::json!({"status": status})).unwrap())
    }

    #[test]
    fn failures_as_knative_reports_them() {
        let pulling = pod_with(serde_json::json!({"containerStatuses": [{
            "name": "user-container", "image": "x", "imageID": "", "ready": false,
            "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": "image x not found"}},
        }]}));
        let (ty, reason, message) = pod_failure(&[pulling]).unwrap();
        assert_eq!(
            (ty, reason.as_str()),
            ("ResourcesAvailable", "ErrImagePull")
        );
        assert_eq!(message, "image x not found");
        let crashed = pod_with(serde_json::json!({"containerStatuses": [{
            "name": "user-container", "image": "x", "imageID": "", "ready": false,
            "restartCount": 1,
            "lastState": {"terminated": {"exitCode": 3, "message": "boom"}},
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        }]}));
        let (ty, reason, message) = pod_failure(&[crashed]).unwrap();
        assert_eq!((ty, reason.as_str()), ("ContainerHealthy", "ExitCode3"));
        assert_eq!(message, "Container failed with: boom");
        let starting = pod_with(serde_json::json!({"containerStatuses": [{
            "name": "user-container", "image": "x", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}},
        }]}));
        assert!(pod_failure(&[starting]).is_none());
    }
}
