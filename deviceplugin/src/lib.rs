//! The device plugin framework's shared half: upstream's gRPC APIs (device plugin `v1beta1`,
//! PodResources `v1`) generated from their `.proto` files, the unix-socket plumbing both
//! sides use, and the plugin side (`plugin`: serve a plugin and keep it registered with the
//! kubelet; `fake`: a plugin whose devices are files). The kubelet side lives in the kubelet
//! crate (`devicemanager`); the two meet only through these APIs, as upstream's do, so any
//! upstream plugin works with the kubelet and these plugins work with an upstream kubelet.

pub mod dirwatch;
pub mod fake;
pub mod nvidia;
pub mod plugin;
pub mod uds;

/// The generated APIs. Names follow upstream's `.proto` files.
pub mod api {
    /// The device plugin API (`k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1`).
    #[allow(clippy::all, clippy::pedantic)]
    pub mod v1beta1 {
        tonic::include_proto!("v1beta1");
    }
    /// The PodResources API (`k8s.io/kubelet/pkg/apis/podresources/v1`).
    #[allow(clippy::all, clippy::pedantic)]
    pub mod podresources {
        tonic::include_proto!("v1");
    }
}

/// The device plugin API version this side speaks (upstream's `Version`).
pub const VERSION: &str = "v1beta1";
/// A device's health as ListAndWatch reports it.
pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";
/// The kubelet's Registration socket, in the device-plugins directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// Upstream's device-plugins directory (`<kubelet root>/device-plugins`, root /var/lib/kubelet).
pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins";
/// The device-plugins directory under a kubelet root.
pub const DEVICE_PLUGINS_DIR: &str = "device-plugins";
/// The PodResources socket's directory under a kubelet root; the socket is `kubelet.sock`.
pub const POD_RESOURCES_DIR: &str = "pod-resources";

/// Whether `name` is an extended resource a device plugin may advertise: `<domain>/<name>`
/// outside the `kubernetes.io` domains, as upstream's `IsExtendedResourceName` (less the
/// quota `requests.` prefix, which a plugin can never name).
pub fn is_extended_resource_name(name: &str) -> bool {
    let Some((domain, rest)) = name.split_once('/') else {
        return false;
    };
    let native = domain == "kubernetes.io" || domain.ends_with(".kubernetes.io");
    !native
        && !domain.is_empty()
        && !rest.is_empty()
        && !rest.contains('/')
        && !name.starts_with("requests.")
        && domain
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resource_names() {
        assert!(is_extended_resource_name("nvidia.com/gpu"));
        assert!(is_extended_resource_name("example.com/dev"));
        assert!(!is_extended_resource_name("cpu"));
        assert!(!is_extended_resource_name("kubernetes.io/foo"));
        assert!(!is_extended_resource_name("node.kubernetes.io/foo"));
        assert!(!is_extended_resource_name("example.com/"));
        assert!(!is_extended_resource_name("a/b/c"));
    }
}
