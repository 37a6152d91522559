//! Built-in kinds found by their Rust type rather than by group and plural strings: a typo in
//! a string lookup fails only when that code path runs, and a registry built ad hoc lacks the
//! hooks (service IP allocation, the namespace cache) and admission the served one has. So
//! each built-in registry is built once, where it is served, and every other caller asks for
//! that one by type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use minik8s_api::ResourceInfo;
use minik8s_api::strategy::{BuiltIn, Kind};

use super::generic::GenericRegistry;

/// The resource-table entry of the built-in kind `K`, by its group, version and plural.
///
/// Panics when the table has no such entry: every built-in type is in it, so a miss is a
/// programming error.
pub fn info<K: k8s_openapi::Resource>() -> ResourceInfo {
    minik8s_api::registry::built_in()
        .into_iter()
        .find(|r| r.group == K::GROUP && r.version == K::VERSION && r.plural == K::URL_PATH_SEGMENT)
        .unwrap_or_else(|| {
            panic!(
                "{} ({}.{}/{}) is missing from the resource table",
                K::KIND,
                K::URL_PATH_SEGMENT,
                K::GROUP,
                K::VERSION
            )
        })
}

/// The served registry of each built-in kind, keyed by the kind's type.
#[derive(Default)]
pub struct Registries {
    by_type: RwLock<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Registries {
    /// Records the registry of `K`; registering a kind twice is a programming error.
    pub fn insert<K: Kind>(&self, registry: Arc<GenericRegistry<BuiltIn<K>>>) {
        let previous = self
            .by_type
            .write()
            .expect("registries lock")
            .insert(TypeId::of::<K>(), registry);
        assert!(previous.is_none(), "{} is registered twice", K::KIND);
    }

    /// The registry of `K`, as served. Panics when `K` is not registered: built-in kinds are
    /// registered before the server is handed out, so a miss is a programming error.
    pub fn get<K: Kind>(&self) -> Arc<GenericRegistry<BuiltIn<K>>> {
        let any = self
            .by_type
            .read()
            .expect("registries lock")
            .get(&TypeId::of::<K>())
            .cloned()
            .unwrap_or_else(|| panic!("no registry of {} is registered", K::KIND));
        any.downcast::<GenericRegistry<BuiltIn<K>>>()
            .unwrap_or_else(|_| panic!("the registry of {} has another type", K::KIND))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use k8s_openapi::api::core::v1::Event;
    use k8s_openapi::api::events::v1::Event as EventV1;

    #[test]
    fn info_is_found_by_type() {
        assert_eq!(info::<Event>().api_version(), "v1");
        assert_eq!(info::<EventV1>().api_version(), "events.k8s.io/v1");
        assert_eq!(
            info::<HorizontalPodAutoscaler>().plural,
            "horizontalpodautoscalers"
        );
        assert_eq!(
            info::<k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler>().api_version(),
            "autoscaling/v1"
        );
    }
}
