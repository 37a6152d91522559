//! Admission plugins that need more than the object being written: they read other
//! objects through the registries (upstream's plugin/pkg/admission). Plugins that only look
//! at the object itself are the kinds' `admit` strategies in `minik8s_api`.

pub mod default_storage_class;
pub mod limit_ranger;
pub mod namespace_lifecycle;
pub mod node_restriction;
pub mod pod_security;
pub mod priority;
pub mod pvc_resize;
pub mod resource_quota;
pub mod runtime_class;
pub mod serviceaccount;
pub mod storage_protection;
pub mod webhook;

/// Upstream's `--disable-admission-plugins`: which of this server's plugins are off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdmissionOptions {
    pub disabled: Vec<String>,
    /// The PodSecurity plugin's defaults and exemptions (kube-apiserver reads them from its
    /// admission configuration file).
    pub pod_security: pod_security::Configuration,
}

impl AdmissionOptions {
    /// The plugins this server has, as upstream names them.
    pub const PLUGINS: &'static [&'static str] = &[
        default_storage_class::PLUGIN_NAME,
        limit_ranger::PLUGIN_NAME,
        namespace_lifecycle::PLUGIN_NAME,
        node_restriction::PLUGIN_NAME,
        pod_security::PLUGIN_NAME,
        priority::PLUGIN_NAME,
        pvc_resize::PLUGIN_NAME,
        resource_quota::PLUGIN_NAME,
        runtime_class::PLUGIN_NAME,
        serviceaccount::PLUGIN_NAME,
        storage_protection::PLUGIN_NAME,
    ];

    pub fn enabled(&self, plugin: &str) -> bool {
        !self.disabled.iter().any(|d| d == plugin)
    }
}

/// The name admission errors give a new object: its `generateName` prefix when it has one,
/// as upstream's messages for generated pods (`pods "web-7d9c8f-" is forbidden: ...`).
pub fn name_in_errors(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.generate_name
        .as_deref()
        .filter(|g| !g.is_empty())
        .or(meta.name.as_deref())
        .unwrap_or_default()
}

/// `registry` with the admission every registry runs: external admission (webhooks and
/// policies) and, for a namespaced resource, NamespaceLifecycle, when enabled.
pub fn admitted<S: minik8s_api::strategy::Strategy>(
    mut registry: crate::registry::generic::GenericRegistry<S>,
    options: &AdmissionOptions,
    cache: Option<&std::sync::Arc<crate::registry::namespaces::NamespaceCache>>,
    external: Option<&crate::registry::external::ExternalHandle>,
) -> crate::registry::generic::GenericRegistry<S> {
    if let Some(external) = external {
        registry = registry.with_external_admission(external.0.clone());
    }
    let (Some(cache), true) = (cache, options.enabled(namespace_lifecycle::PLUGIN_NAME)) else {
        return registry;
    };
    if !registry.strategy.info().namespaced {
        return registry;
    }
    let plugin = namespace_lifecycle::NamespaceLifecycle::new(
        registry.strategy.clone(),
        registry.store().clone(),
        cache.clone(),
    );
    registry.with_admission(std::sync::Arc::new(plugin))
}
