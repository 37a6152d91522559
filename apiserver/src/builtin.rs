//! Which Rust type serves which built-in resource. The resource table in `minik8s_api`
//! says what exists; this says how each is typed, for storage and for OpenAPI alike. A kind
//! served at a second version (autoscaling/v1 HorizontalPodAutoscalers) is a `Converted`
//! registry over the same keys as its stored version.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler as HorizontalPodAutoscalerV1;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Binding, ComponentStatus, ConfigMap, Endpoints, Event, LimitRange, Namespace, Node,
    PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, ReplicationController,
    ResourceQuota, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use minik8s_api::conversion::{Converted, Convertible};
use minik8s_api::strategy::{BuiltIn, Kind};
use schemars::JsonSchema;

use crate::admission::default_storage_class::{self, DefaultStorageClass};
use crate::admission::limit_ranger::{self, LimitRanger};
use crate::admission::node_restriction::{self, NodeRestriction};
use crate::admission::pod_security::{self, PodAdmission};
use crate::admission::priority::{self, OneGlobalDefault, PriorityAdmission};
use crate::admission::pvc_resize::{self, ClaimResize};
use crate::admission::resource_quota::{self, Counted, QuotaAdmission};
use crate::admission::runtime_class::{self, RuntimeClassAdmission};
use crate::admission::serviceaccount::{self, ServiceAccountAdmission};
use crate::admission::storage_protection::{self, StorageProtection};
use crate::handlers::certificates::CertificateSigningRequestExtension;
use crate::handlers::namespaces::NamespaceExtension;
use crate::handlers::openapi::KindSchema;
use crate::handlers::pods::{BindingsEndpoint, PodExtension};
use crate::handlers::resource::{Extension, ResourceEndpoint};
use crate::handlers::serviceaccounts::ServiceAccountExtension;
use crate::registry::generic::{
    CreateAdmission, DeleteAdmission, GenericRegistry, Part, Phase, UpdateAdmission,
};
use crate::registry::typed;
use crate::server::ApiServer;

/// Builds `K`'s registry over the server's store, with namespace admission.
fn registry<K: Kind>(server: &ApiServer) -> GenericRegistry<BuiltIn<K>> {
    crate::admission::admitted(
        GenericRegistry::new(BuiltIn::<K>::new(typed::info::<K>()), server.store.clone()),
        &server.options.admission,
        server.options.namespaces.as_ref(),
        server.options.external_admission.as_ref(),
    )
}

/// `registry` charging its objects to quotas, the last admission as upstream orders it;
/// ResourceQuotas must be registered first.
fn counted<K: Kind + Counted>(
    server: &ApiServer,
    registry: GenericRegistry<BuiltIn<K>>,
) -> GenericRegistry<BuiltIn<K>> {
    if !server
        .options
        .admission
        .enabled(resource_quota::PLUGIN_NAME)
    {
        return registry;
    }
    let quotas = server.registry::<ResourceQuota>();
    let plugin = Arc::new(QuotaAdmission::<K>::new(quotas));
    registry
        .with_admission(plugin.clone())
        .with_update_admission(plugin)
}

/// Serves `K`, counted by quotas, with the generic verbs only.
fn plain_counted<K: Kind + Counted + JsonSchema>(server: &ApiServer) {
    serve(server, counted(server, registry::<K>(server)), None);
}

/// Services allocate cluster IPs and node ports as they are written.
fn services(server: &ApiServer) -> GenericRegistry<BuiltIn<Service>> {
    counted(server, registry::<Service>(server)).with_hooks(server.services.clone())
}

/// The namespaces registry keeps the namespace cache up to date with its own writes, and
/// PodSecurity checks the labels written.
fn namespaces(
    server: &ApiServer,
    pod_security: Option<&pod_security::Plugins>,
) -> GenericRegistry<BuiltIn<Namespace>> {
    let mut registry = registry::<Namespace>(server);
    if let Some(p) = pod_security {
        registry = registry
            .with_admission(p.namespaces.clone())
            .with_update_admission(p.namespaces.clone());
    }
    match &server.options.namespaces {
        Some(cache) => registry.with_hooks(cache.clone()),
        None => registry,
    }
}

/// Pods pass the admission plugins that read other objects; ServiceAccounts, LimitRanges and
/// PriorityClasses must be registered first.
fn pods(
    server: &ApiServer,
    pod_security: Option<&Arc<PodAdmission>>,
    restriction: &NodeRestriction,
) -> GenericRegistry<BuiltIn<Pod>> {
    let mut pods = restricted_to_nodes(server, registry::<Pod>(server), restriction);
    let admission = &server.options.admission;
    // In upstream's order: LimitRanger, ServiceAccount, Priority, then RuntimeClass.
    if admission.enabled(limit_ranger::PLUGIN_NAME) {
        for phase in [Phase::Mutate, Phase::Final] {
            let ranges = server.registry::<LimitRange>();
            pods = pods.with_admission(Arc::new(LimitRanger::new(ranges, phase)));
        }
    }
    if admission.enabled(serviceaccount::PLUGIN_NAME) {
        let accounts = server.registry::<ServiceAccount>();
        pods = pods.with_admission(Arc::new(ServiceAccountAdmission::new(accounts)));
    }
    if admission.enabled(priority::PLUGIN_NAME) {
        let classes = server.registry::<PriorityClass>();
        pods = pods.with_admission(Arc::new(PriorityAdmission::new(classes)));
    }
    if admission.enabled(runtime_class::PLUGIN_NAME) {
        // Read through a registry of its own: RuntimeClasses are served after pods.
        let classes = Arc::new(registry::<RuntimeClass>(server));
        for phase in [Phase::Mutate, Phase::Final] {
            pods =
                pods.with_admission(Arc::new(RuntimeClassAdmission::new(classes.clone(), phase)));
        }
    }
    // PodSecurity validates the pod as stored, before ResourceQuota charges it.
    counted(server, pod_security::attach(pods, pod_security))
}

/// `registry` with NodeRestriction: a kubelet writes only its own node, lease, CSINode,
/// pods and claims' status.
fn restricted_to_nodes<K>(
    server: &ApiServer,
    registry: GenericRegistry<BuiltIn<K>>,
    restriction: &NodeRestriction,
) -> GenericRegistry<BuiltIn<K>>
where
    K: Kind,
    NodeRestriction: CreateAdmission<K> + UpdateAdmission<K> + DeleteAdmission<K>,
{
    if !server
        .options
        .admission
        .enabled(node_restriction::PLUGIN_NAME)
    {
        return registry;
    }
    let mut registry = registry
        .with_admission(restriction.updating(Part::Main))
        .with_delete_admission(restriction.updating(Part::Main));
    for part in [Part::Main, Part::Status, Part::EphemeralContainers] {
        registry = registry.with_update_admission(restriction.updating(part));
    }
    registry
}

/// Serves `K`, a kind that templates pods: PodSecurity warns about its template.
fn templating<K>(server: &ApiServer, pod_security: Option<&Arc<PodAdmission>>)
where
    K: Kind + JsonSchema + pod_security::PodSpecSource + pod_security::SignificantUpdate,
{
    serve(
        server,
        pod_security::attach(registry::<K>(server), pod_security),
        None,
    );
}

/// Claims pass the storage admission plugins, in upstream's order: DefaultStorageClass and
/// StorageObjectInUseProtection while mutating, LimitRanger's bounds, then
/// PersistentVolumeClaimResize on updates (ResourceQuota last, as for every kind).
/// LimitRanges and StorageClasses must be registered first.
fn claims(
    server: &ApiServer,
    restriction: &NodeRestriction,
) -> GenericRegistry<BuiltIn<PersistentVolumeClaim>> {
    let mut claims = restricted_to_nodes(
        server,
        registry::<PersistentVolumeClaim>(server),
        restriction,
    );
    let admission = &server.options.admission;
    if admission.enabled(default_storage_class::PLUGIN_NAME) {
        let classes = server.registry::<StorageClass>();
        claims = claims.with_admission(Arc::new(DefaultStorageClass::new(classes)));
    }
    if admission.enabled(storage_protection::PLUGIN_NAME) {
        claims = claims.with_admission(Arc::new(StorageProtection));
    }
    if admission.enabled(limit_ranger::PLUGIN_NAME) {
        let ranges = server.registry::<LimitRange>();
        let plugin = Arc::new(LimitRanger::new(ranges, Phase::Final));
        claims = claims
            .with_admission(plugin.clone())
            .with_update_admission(plugin);
    }
    if admission.enabled(pvc_resize::PLUGIN_NAME) {
        let classes = server.registry::<StorageClass>();
        claims = claims.with_update_admission(Arc::new(ClaimResize::new(classes)));
    }
    counted(server, claims)
}

/// Volumes carry the pv-protection finalizer from their creation.
fn volumes(server: &ApiServer) -> GenericRegistry<BuiltIn<PersistentVolume>> {
    let volumes = registry::<PersistentVolume>(server);
    if !server
        .options
        .admission
        .enabled(storage_protection::PLUGIN_NAME)
    {
        return volumes;
    }
    volumes.with_admission(Arc::new(StorageProtection))
}

/// PriorityClasses: one global default at most (the Priority plugin's half for classes).
fn priority_classes(server: &ApiServer) -> GenericRegistry<BuiltIn<PriorityClass>> {
    let classes = registry::<PriorityClass>(server);
    if !server.options.admission.enabled(priority::PLUGIN_NAME) {
        return classes;
    }
    let store = Arc::new(registry::<PriorityClass>(server));
    classes.with_admission(Arc::new(OneGlobalDefault::new(store)))
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

/// An RBAC kind: writes that would grant what the writer does not hold are refused.
fn rbac<K>(server: &ApiServer)
where
    K: Kind + JsonSchema,
    crate::authz::escalation::Escalation:
        crate::registry::generic::CreateAdmission<K> + crate::registry::generic::UpdateAdmission<K>,
{
    let mut registry = registry::<K>(server);
    if let Some(authorizer) = &server.options.authorizer {
        let check = crate::authz::escalation::Escalation::new(authorizer.clone());
        registry = registry
            .with_admission(check.clone())
            .with_update_admission(check);
    }
    serve(server, registry, None);
}

/// Serves `V`, another version of objects stored as `V::Hub`: the same keys, so one
/// resourceVersion and one watch history, and the hub's rules through conversion. Callers
/// that want the registry by type ask for the hub's.
fn converted<V: Convertible + JsonSchema>(server: &ApiServer) {
    let registry = crate::admission::admitted(
        GenericRegistry::new(
            Converted::<V>::new(typed::info::<V>()),
            server.store.clone(),
        ),
        &server.options.admission,
        server.options.namespaces.as_ref(),
        server.options.external_admission.as_ref(),
    );
    let endpoint = ResourceEndpoint::new(Arc::new(registry), server.options.clone());
    server.openapi.register_type::<V>();
    server.register(Arc::new(endpoint.with_schema(KindSchema::of::<V>())));
}

pub fn register(server: &ApiServer) {
    let pod_security = pod_security::Plugins::new(&server.options.admission);
    let restriction = NodeRestriction::new();
    let accounts = Arc::new(ServiceAccountExtension {
        auth: server.auth.clone(),
    });
    serve(server, registry::<ServiceAccount>(server), Some(accounts));
    serve(server, priority_classes(server), None);
    serve(
        server,
        namespaces(server, pod_security.as_ref()),
        Some(Arc::new(NamespaceExtension)),
    );
    plain::<PodDisruptionBudget>(server);
    plain::<LimitRange>(server);
    plain::<ResourceQuota>(server);
    let secured = pod_security
        .as_ref()
        .map(|p| p.for_pods(server.registry::<Namespace>()));
    let budgets = server.registry::<PodDisruptionBudget>();
    serve(
        server,
        pods(server, secured.as_ref(), &restriction),
        Some(Arc::new(PodExtension { budgets })),
    );
    if let Some(p) = &pod_security {
        p.namespaces.set_pods(&server.registry::<Pod>());
    }
    let bindings = BindingsEndpoint::new(server.registry::<Pod>());
    server.openapi.register_type::<Binding>();
    server.register(Arc::new(bindings));
    serve(server, services(server), None);
    plain::<Endpoints>(server);
    plain_counted::<ConfigMap>(server);
    plain_counted::<Secret>(server);
    serve(
        server,
        restricted_to_nodes(server, registry::<Node>(server), &restriction),
        None,
    );
    restriction.bind_nodes(&server.registry::<Node>());
    plain::<Event>(server);
    serve(server, volumes(server), None);
    plain::<StorageClass>(server);
    serve(server, claims(server, &restriction), None);
    templating::<Deployment>(server, secured.as_ref());
    templating::<ReplicaSet>(server, secured.as_ref());
    templating::<StatefulSet>(server, secured.as_ref());
    templating::<DaemonSet>(server, secured.as_ref());
    templating::<Job>(server, secured.as_ref());
    templating::<CronJob>(server, secured.as_ref());
    plain::<HorizontalPodAutoscaler>(server);
    converted::<HorizontalPodAutoscalerV1>(server);
    plain::<Ingress>(server);
    plain::<IngressClass>(server);
    plain::<EndpointSlice>(server);
    serve(
        server,
        restricted_to_nodes(server, registry::<Lease>(server), &restriction),
        None,
    );
    rbac::<Role>(server);
    rbac::<RoleBinding>(server);
    rbac::<ClusterRole>(server);
    rbac::<ClusterRoleBinding>(server);
    plain::<EventV1>(server);
    plain::<CustomResourceDefinition>(server);
    let controllers =
        pod_security::attach(registry::<ReplicationController>(server), secured.as_ref());
    serve(server, counted(server, controllers), None);
    templating::<PodTemplate>(server, secured.as_ref());
    plain::<ControllerRevision>(server);
    plain::<RuntimeClass>(server);
    plain::<NetworkPolicy>(server);
    serve(
        server,
        registry::<CertificateSigningRequest>(server)
            .with_admission(Arc::new(crate::handlers::certificates::Requester)),
        Some(Arc::new(CertificateSigningRequestExtension)),
    );
    plain::<FlowSchema>(server);
    plain::<PriorityLevelConfiguration>(server);
    plain::<CSIDriver>(server);
    serve(
        server,
        restricted_to_nodes(server, registry::<CSINode>(server), &restriction),
        None,
    );
    plain::<VolumeAttachment>(server);
    plain::<CSIStorageCapacity>(server);
    plain::<MutatingWebhookConfiguration>(server);
    plain::<ValidatingWebhookConfiguration>(server);
    plain::<ValidatingAdmissionPolicy>(server);
    plain::<ValidatingAdmissionPolicyBinding>(server);
    // The aggregator looks again after every write of an APIService.
    serve(
        server,
        registry::<APIService>(server).with_hooks(server.aggregator.hooks()),
        None,
    );
    crate::handlers::authorization::register(server);
    server.openapi.register_type::<ComponentStatus>();
    let statuses = crate::handlers::component_status::ComponentStatusEndpoint::new(server);
    server.register(Arc::new(statuses));
    crate::handlers::authentication::register(server);
}
