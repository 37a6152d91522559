//! Which Rust type serves which built-in resource. The resource table in `minik8s_api`
//! says what exists; this says how each is typed, for storage and for OpenAPI alike.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use minik8s_api::registry::built_in;
use minik8s_api::strategy::{BuiltIn, Kind};
use schemars::JsonSchema;

use crate::admission::serviceaccount::{self, ServiceAccountAdmission};
use crate::handlers::namespaces::NamespaceExtension;
use crate::handlers::openapi::KindSchema;
use crate::handlers::pods::PodExtension;
use crate::handlers::resource::ResourceEndpoint;
use crate::registry::generic::GenericRegistry;
use crate::server::ApiServer;

fn endpoint<K: Kind>(
    server: &ApiServer,
    group: &str,
    plural: &str,
) -> ResourceEndpoint<BuiltIn<K>> {
    ResourceEndpoint::new(
        Arc::new(registry::<K>(server, group, plural)),
        server.options.clone(),
    )
}

/// Services allocate cluster IPs and node ports as they are written.
fn services(server: &ApiServer) -> ResourceEndpoint<BuiltIn<Service>> {
    let registry = registry::<Service>(server, "", "services").with_hooks(server.services.clone());
    ResourceEndpoint::new(Arc::new(registry), server.options.clone())
}

fn registry<K: Kind>(server: &ApiServer, group: &str, plural: &str) -> GenericRegistry<BuiltIn<K>> {
    let info = built_in()
        .into_iter()
        .find(|r| r.group == group && r.plural == plural)
        .unwrap_or_else(|| panic!("{plural}.{group} is missing from the resource table"));
    crate::admission::namespaced(
        GenericRegistry::new(BuiltIn::<K>::new(info), server.store.clone()),
        &server.options.admission,
        server.options.namespaces.as_ref(),
    )
}

/// The namespaces registry keeps the namespace cache up to date with its own writes.
fn namespaces(server: &ApiServer) -> ResourceEndpoint<BuiltIn<Namespace>> {
    let mut registry = registry::<Namespace>(server, "", "namespaces");
    if let Some(cache) = &server.options.namespaces {
        registry = registry.with_hooks(cache.clone());
    }
    ResourceEndpoint::new(Arc::new(registry), server.options.clone())
}

/// Pods pass the admission plugins that read other objects.
fn pods(server: &ApiServer) -> ResourceEndpoint<BuiltIn<Pod>> {
    let mut pods = registry::<Pod>(server, "", "pods");
    if server
        .options
        .admission
        .enabled(serviceaccount::PLUGIN_NAME)
    {
        let accounts = Arc::new(registry::<ServiceAccount>(server, "", "serviceaccounts"));
        pods = pods.with_admission(Arc::new(ServiceAccountAdmission::new(accounts)));
    }
    ResourceEndpoint::new(Arc::new(pods), server.options.clone())
}

pub fn register(server: &ApiServer) {
    /// Serves `e` and describes its kind in OpenAPI by the type's schemars schema.
    fn add<K: Kind + JsonSchema>(server: &ApiServer, e: ResourceEndpoint<BuiltIn<K>>) {
        server.openapi.register_type::<K>();
        server.register(Arc::new(e.with_schema(KindSchema::of::<K>())));
    }
    add(
        server,
        namespaces(server).with_extension(Arc::new(NamespaceExtension)),
    );
    add(server, pods(server).with_extension(Arc::new(PodExtension)));
    add(server, services(server));
    add(server, endpoint::<Endpoints>(server, "", "endpoints"));
    add(server, endpoint::<ConfigMap>(server, "", "configmaps"));
    add(server, endpoint::<Secret>(server, "", "secrets"));
    add(server, endpoint::<Node>(server, "", "nodes"));
    add(server, endpoint::<Event>(server, "", "events"));
    add(
        server,
        endpoint::<ServiceAccount>(server, "", "serviceaccounts").with_extension(Arc::new(
            crate::handlers::serviceaccounts::ServiceAccountExtension {
                auth: server.auth.clone(),
            },
        )),
    );
    add(
        server,
        endpoint::<PersistentVolume>(server, "", "persistentvolumes"),
    );
    add(
        server,
        endpoint::<PersistentVolumeClaim>(server, "", "persistentvolumeclaims"),
    );
    add(
        server,
        endpoint::<Deployment>(server, "apps", "deployments"),
    );
    add(
        server,
        endpoint::<ReplicaSet>(server, "apps", "replicasets"),
    );
    add(
        server,
        endpoint::<StatefulSet>(server, "apps", "statefulsets"),
    );
    add(server, endpoint::<DaemonSet>(server, "apps", "daemonsets"));
    add(server, endpoint::<Job>(server, "batch", "jobs"));
    add(server, endpoint::<CronJob>(server, "batch", "cronjobs"));
    add(
        server,
        endpoint::<HorizontalPodAutoscaler>(server, "autoscaling", "horizontalpodautoscalers"),
    );
    add(
        server,
        endpoint::<Ingress>(server, "networking.k8s.io", "ingresses"),
    );
    add(
        server,
        endpoint::<IngressClass>(server, "networking.k8s.io", "ingressclasses"),
    );
    add(
        server,
        endpoint::<EndpointSlice>(server, "discovery.k8s.io", "endpointslices"),
    );
    add(
        server,
        endpoint::<Lease>(server, "coordination.k8s.io", "leases"),
    );
    add(
        server,
        endpoint::<StorageClass>(server, "storage.k8s.io", "storageclasses"),
    );
    add(
        server,
        endpoint::<Role>(server, "rbac.authorization.k8s.io", "roles"),
    );
    add(
        server,
        endpoint::<RoleBinding>(server, "rbac.authorization.k8s.io", "rolebindings"),
    );
    add(
        server,
        endpoint::<ClusterRole>(server, "rbac.authorization.k8s.io", "clusterroles"),
    );
    add(
        server,
        endpoint::<ClusterRoleBinding>(server, "rbac.authorization.k8s.io", "clusterrolebindings"),
    );
    add(
        server,
        endpoint::<EventV1>(server, "events.k8s.io", "events"),
    );
    add(
        server,
        endpoint::<CustomResourceDefinition>(
            server,
            "apiextensions.k8s.io",
            "customresourcedefinitions",
        ),
    );
    crate::handlers::authorization::register(server);
    crate::handlers::authentication::register(server);
}
