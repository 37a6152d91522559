//! Which Rust type serves which built-in resource. The resource table in `minik8s_api`
//! says what exists; this says how each is typed, for storage and for OpenAPI alike. A kind
//! served at a second version (autoscaling/v1 HorizontalPodAutoscalers) is a `Converted`
//! registry over the same keys as its stored version.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler as HorizontalPodAutoscalerV1;
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
use minik8s_api::conversion::{Converted, Convertible};
use minik8s_api::strategy::{BuiltIn, Kind};
use schemars::JsonSchema;

use crate::admission::serviceaccount::{self, ServiceAccountAdmission};
use crate::handlers::namespaces::NamespaceExtension;
use crate::handlers::openapi::KindSchema;
use crate::handlers::pods::PodExtension;
use crate::handlers::resource::{Extension, ResourceEndpoint};
use crate::handlers::serviceaccounts::ServiceAccountExtension;
use crate::registry::generic::GenericRegistry;
use crate::registry::typed;
use crate::server::ApiServer;

/// Builds `K`'s registry over the server's store, with namespace admission.
fn registry<K: Kind>(server: &ApiServer) -> GenericRegistry<BuiltIn<K>> {
    crate::admission::namespaced(
        GenericRegistry::new(BuiltIn::<K>::new(typed::info::<K>()), server.store.clone()),
        &server.options.admission,
        server.options.namespaces.as_ref(),
    )
}

/// Services allocate cluster IPs and node ports as they are written.
fn services(server: &ApiServer) -> GenericRegistry<BuiltIn<Service>> {
    registry::<Service>(server).with_hooks(server.services.clone())
}

/// The namespaces registry keeps the namespace cache up to date with its own writes.
fn namespaces(server: &ApiServer) -> GenericRegistry<BuiltIn<Namespace>> {
    let registry = registry::<Namespace>(server);
    match &server.options.namespaces {
        Some(cache) => registry.with_hooks(cache.clone()),
        None => registry,
    }
}

/// Pods pass the admission plugins that read other objects; ServiceAccounts must be
/// registered first.
fn pods(server: &ApiServer) -> GenericRegistry<BuiltIn<Pod>> {
    let pods = registry::<Pod>(server);
    if !server
        .options
        .admission
        .enabled(serviceaccount::PLUGIN_NAME)
    {
        return pods;
    }
    let accounts = server.registry::<ServiceAccount>();
    pods.with_admission(Arc::new(ServiceAccountAdmission::new(accounts)))
}

/// Records `registry` as the one `server.registry::<K>()` hands out and serves it, its kind
/// described in OpenAPI by the type's schemars schema.
fn serve<K: Kind + JsonSchema>(
    server: &ApiServer,
    registry: GenericRegistry<BuiltIn<K>>,
    extension: Option<Arc<dyn Extension<BuiltIn<K>>>>,
) {
    let registry = Arc::new(registry);
    server.registries.insert(registry.clone());
    let mut endpoint = ResourceEndpoint::new(registry, server.options.clone());
    if let Some(extension) = extension {
        endpoint = endpoint.with_extension(extension);
    }
    server.openapi.register_type::<K>();
    server.register(Arc::new(endpoint.with_schema(KindSchema::of::<K>())));
}

/// Serves `K` with the generic verbs only.
fn plain<K: Kind + JsonSchema>(server: &ApiServer) {
    serve(server, registry::<K>(server), None);
}

/// Serves `V`, another version of objects stored as `V::Hub`: the same keys, so one
/// resourceVersion and one watch history, and the hub's rules through conversion. Callers
/// that want the registry by type ask for the hub's.
fn converted<V: Convertible + JsonSchema>(server: &ApiServer) {
    let registry = crate::admission::namespaced(
        GenericRegistry::new(
            Converted::<V>::new(typed::info::<V>()),
            server.store.clone(),
        ),
        &server.options.admission,
        server.options.namespaces.as_ref(),
    );
    let endpoint = ResourceEndpoint::new(Arc::new(registry), server.options.clone());
    server.openapi.register_type::<V>();
    server.register(Arc::new(endpoint.with_schema(KindSchema::of::<V>())));
}

pub fn register(server: &ApiServer) {
    let accounts = Arc::new(ServiceAccountExtension {
        auth: server.auth.clone(),
    });
    serve(server, registry::<ServiceAccount>(server), Some(accounts));
    serve(
        server,
        namespaces(server),
        Some(Arc::new(NamespaceExtension)),
    );
    serve(server, pods(server), Some(Arc::new(PodExtension)));
    serve(server, services(server), None);
    plain::<Endpoints>(server);
    plain::<ConfigMap>(server);
    plain::<Secret>(server);
    plain::<Node>(server);
    plain::<Event>(server);
    plain::<PersistentVolume>(server);
    plain::<PersistentVolumeClaim>(server);
    plain::<Deployment>(server);
    plain::<ReplicaSet>(server);
    plain::<StatefulSet>(server);
    plain::<DaemonSet>(server);
    plain::<Job>(server);
    plain::<CronJob>(server);
    plain::<HorizontalPodAutoscaler>(server);
    converted::<HorizontalPodAutoscalerV1>(server);
    plain::<Ingress>(server);
    plain::<IngressClass>(server);
    plain::<EndpointSlice>(server);
    plain::<Lease>(server);
    plain::<StorageClass>(server);
    plain::<Role>(server);
    plain::<RoleBinding>(server);
    plain::<ClusterRole>(server);
    plain::<ClusterRoleBinding>(server);
    plain::<EventV1>(server);
    plain::<CustomResourceDefinition>(server);
    crate::handlers::authorization::register(server);
    crate::handlers::authentication::register(server);
}
