//! The warm pool of a namespace's Functions: a Deployment of generic Python runtime pods
//! that have loaded no function, so a Function scaled to zero answers its first request
//! after loading its code into one of them (the activator's job) rather than after a pod
//! start, as Fission's pool manager does. Every Function of the namespace is an owner of
//! the pool, so the garbage collector removes it with the last of them. Its size is
//! `pool-size` per node in the `config-functions` ConfigMap of `knative-serving`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, EnvVar, HostPathVolumeSource, PodSpec, PodTemplateSpec,
    Probe, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

use super::{Function, PYTHON_IMAGE, PYTHON3, RUNTIME, labels, packages};
use crate::revision::{DEFAULT_USER_PORT, USER_CONTAINER};

pub const CONFIG_FUNCTIONS: &str = "config-functions";
/// Warm pods per node when `config-functions` says nothing.
pub const DEFAULT_POOL_SIZE: i32 = 2;

pub fn pool_name(runtime: &str) -> String {
    format!("{runtime}-pool")
}

/// Warm pods per node, from `config-functions`.
pub fn pool_size(config: Option<&ConfigMap>) -> i32 {
    config
        .and_then(|c| c.data.as_ref()?.get("pool-size")?.trim().parse().ok())
        .filter(|n: &i32| *n >= 0)
        .unwrap_or(DEFAULT_POOL_SIZE)
}

/// The runtime's container, loading a function from `env` or, with none, waiting in the
/// pool for one.
pub fn runtime_container(env: Vec<EnvVar>) -> Container {
    Container {
        name: USER_CONTAINER.into(),
        image: Some(PYTHON_IMAGE.into()),
        command: Some(vec![
            "python3".into(),
            "-u".into(),
            "-c".into(),
            RUNTIME.into(),
        ]),
        env: Some(env).filter(|e| !e.is_empty()),
        ports: Some(vec![ContainerPort {
            container_port: DEFAULT_USER_PORT,
            name: Some("http1".into()),
            ..Default::default()
        }]),
        volume_mounts: Some(vec![VolumeMount {
            name: PACKAGES_VOLUME.into(),
            mount_path: packages::POD_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

const PACKAGES_VOLUME: &str = "function-packages";

/// The node's installed requirements ([`packages::HOST_DIR`]), for [`runtime_container`].
pub fn packages_volume() -> Volume {
    Volume {
        name: PACKAGES_VOLUME.into(),
        host_path: Some(HostPathVolumeSource {
            path: packages::HOST_DIR.into(),
            type_: Some("DirectoryOrCreate".into()),
        }),
        ..Default::default()
    }
}

fn owner_ref(f: &Function) -> OwnerReference {
    OwnerReference {
        api_version: Function::api_version(&()).to_string(),
        kind: Function::kind(&()).to_string(),
        name: f.name_any(),
        uid: f.uid().unwrap_or_default(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    }
}

/// The pool of `ns` with `replicas` pods, owned by `owners`.
pub fn desired_pool(ns: &str, replicas: i32, owners: Vec<OwnerReference>) -> Deployment {
    let pod_labels = BTreeMap::from([(labels::POOL.to_string(), PYTHON3.to_string())]);
    let mut container = runtime_container(vec![EnvVar {
        name: "PORT".into(),
        value: Some(DEFAULT_USER_PORT.to_string()),
        ..Default::default()
    }]);
    container.readiness_probe = Some(Probe {
        tcp_socket: Some(TCPSocketAction {
            port: IntOrString::Int(DEFAULT_USER_PORT),
            ..Default::default()
        }),
        period_seconds: Some(1),
        ..Default::default()
    });
    Deployment {
        metadata: ObjectMeta {
            name: Some(pool_name(PYTHON3)),
            namespace: Some(ns.to_string()),
            labels: Some(pod_labels.clone()),
            owner_references: Some(owners),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(pod_labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(vec![packages_volume()]),
                    enable_service_links: Some(false),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// Makes the pool of `f`'s namespace exist with `replicas` pods and `f` among its owners.
pub async fn ensure(
    client: &kube::Client,
    current: Option<&Deployment>,
    f: &Function,
    replicas: i32,
) -> Result<(), kube::Error> {
    let ns = f.namespace().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let Some(current) = current.filter(|d| d.metadata.deletion_timestamp.is_none()) else {
        let pool = desired_pool(&ns, replicas, vec![owner_ref(f)]);
        return match api.create(&PostParams::default(), &pool).await {
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            other => other.map(|_| ()),
        };
    };
    let uid = f.uid().unwrap_or_default();
    let owned = current.owner_references().iter().any(|o| o.uid == uid);
    let sized = current.spec.as_ref().and_then(|s| s.replicas) == Some(replicas);
    if owned && sized {
        return Ok(());
    }
    let mut next = current.clone();
    if !owned {
        next.metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(owner_ref(f));
    }
    if let Some(spec) = next.spec.as_mut() {
        spec.replicas = Some(replicas);
    }
    // The resourceVersion read: a concurrent change of the owners is not lost.
    api.replace(&current.name_any(), &PostParams::default(), &next)
        .await
        .map(|_| ())
}
