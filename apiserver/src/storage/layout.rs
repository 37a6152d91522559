//! Which group-resource a storage key belongs to, read back from the key itself: the stores
//! below the registries see keys only, and both encryption at rest (which resources to
//! encrypt) and the storage metrics (upstream labels them by group-resource) need the
//! resource a key is for.

use std::collections::BTreeMap;

/// The key layout of the built-in kinds (`/registry/<resource>/` for the core and older
/// groups, `/registry/<group>/<resource>/` for the others and custom resources).
#[derive(Debug)]
pub(crate) struct KeyLayout {
    roots: BTreeMap<String, (String, String)>,
}

impl KeyLayout {
    pub(crate) fn built_in() -> KeyLayout {
        let mut roots = BTreeMap::new();
        // The core kinds come first: events.k8s.io's events are stored as core events.
        for info in minik8s_api::registry::built_in() {
            roots
                .entry(info.key_root())
                .or_insert((info.group.clone(), info.plural.clone()));
        }
        KeyLayout { roots }
    }

    pub(crate) fn group_resource<'a>(&'a self, key: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = key.strip_prefix("/registry/")?;
        let mut parts = rest.splitn(3, '/');
        let first = parts.next()?;
        let second = parts.next();
        // `/registry/services/specs/` has two levels.
        for depth in [2, 1] {
            let root = match (depth, second) {
                (2, Some(second)) => format!("/registry/{first}/{second}/"),
                (2, None) => continue,
                _ => format!("/registry/{first}/"),
            };
            if let Some((g, r)) = self.roots.get(&root) {
                return Some((g, r));
            }
        }
        match second {
            Some(resource) if first.contains('.') => Some((first, resource)),
            _ => None,
        }
    }

    /// Upstream's `GroupResource.String()` of the key's resource (`pods`, `deployments.apps`),
    /// as metrics label it; empty for a key outside the layout.
    pub(crate) fn type_label(&self, key: &str) -> String {
        match self.group_resource(key) {
            Some(("", resource)) => resource.to_string(),
            Some((group, resource)) => format!("{resource}.{group}"),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_group_resource() {
        let layout = KeyLayout::built_in();
        let gr = |k| layout.group_resource(k);
        assert_eq!(gr("/registry/secrets/default/s"), Some(("", "secrets")));
        assert_eq!(
            gr("/registry/services/specs/default/s"),
            Some(("", "services"))
        );
        assert_eq!(
            gr("/registry/deployments/ns/d"),
            Some(("apps", "deployments"))
        );
        assert_eq!(gr("/registry/events/ns/e"), Some(("", "events")));
        assert_eq!(
            gr("/registry/stable.example.com/crontabs/ns/c"),
            Some(("stable.example.com", "crontabs"))
        );
        assert_eq!(gr("/other/secrets/x"), None);
        assert_eq!(layout.type_label("/registry/pods/default/p"), "pods");
        assert_eq!(
            layout.type_label("/registry/deployments/default/d"),
            "deployments.apps"
        );
        assert_eq!(
            layout.type_label("/registry/stable.example.com/crontabs/ns/c"),
            "crontabs.stable.example.com"
        );
    }
}
