//! Admission plugins that need more than the object being written: they read other
//! objects through the registries (upstream's plugin/pkg/admission). Plugins that only look
//! at the object itself are the kinds' `admit` strategies in `minik8s_api`.

pub mod serviceaccount;

/// Upstream's `--disable-admission-plugins`: which of this server's plugins are off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdmissionOptions {
    pub disabled: Vec<String>,
}

impl AdmissionOptions {
    /// The plugins this server has, as upstream names them.
    pub const PLUGINS: &'static [&'static str] = &[serviceaccount::PLUGIN_NAME];

    pub fn enabled(&self, plugin: &str) -> bool {
        !self.disabled.iter().any(|d| d == plugin)
    }
}
