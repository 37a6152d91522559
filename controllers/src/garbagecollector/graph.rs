//! The ownership graph (upstream's graph_builder.go): one node per uid, edges from
//! ownerReferences. Owners referenced before they are observed get a *virtual* node, so a
//! dependent of something that never existed is still checked. Applying a change returns the
//! uids the workers must look at; the graph itself never talks to the API.

use std::collections::{BTreeSet, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

pub const ORPHAN: &str = "orphan";
pub const FOREGROUND: &str = "foregroundDeletion";

/// Which watch observed a node: group/version/plural.
pub type ResourceKey = String;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

/// What a metadata watch reports about one object.
#[derive(Clone, Debug)]
pub struct Observed {
    pub identity: Identity,
    pub owners: Vec<OwnerReference>,
    pub being_deleted: bool,
    pub finalizers: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub identity: Identity,
    pub owners: Vec<OwnerReference>,
    pub dependents: BTreeSet<String>,
    pub being_deleted: bool,
    /// Has the `foregroundDeletion` finalizer and a deletionTimestamp.
    pub deleting_dependents: bool,
    orphaning: bool,
    /// Known only from a dependent's ownerReference.
    pub virtual_: bool,
    resource: Option<ResourceKey>,
}

pub enum Change {
    Upsert(ResourceKey, Observed),
    Delete(String),
    /// A (re)list of one resource finished: its nodes not among `seen` are gone.
    Relisted(ResourceKey, HashSet<String>),
}

/// Uids for the workers.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Work {
    pub attempt_to_delete: Vec<String>,
    pub attempt_to_orphan: Vec<String>,
}

#[derive(Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
}

impl Graph {
    pub fn node(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    pub fn dependents(&self, uid: &str) -> Vec<Identity> {
        self.nodes
            .get(uid)
            .into_iter()
            .flat_map(|n| &n.dependents)
            .filter_map(|d| self.nodes.get(d))
            .map(|d| d.identity.clone())
            .collect()
    }

    /// Dependents whose reference to `uid` has blockOwnerDeletion=true, with whether each is
    /// already being deleted.
    pub fn blocking_dependents(&self, uid: &str) -> Vec<(String, bool)> {
        self.nodes
            .get(uid)
            .into_iter()
            .flat_map(|n| &n.dependents)
            .filter_map(|d| self.nodes.get(d))
            .filter(|d| {
                d.owners
                    .iter()
                    .any(|o| o.uid == uid && o.block_owner_deletion == Some(true))
            })
            .map(|d| (d.identity.uid.clone(), d.being_deleted))
            .collect()
    }

    pub fn apply(&mut self, change: Change) -> Work {
        let mut work = Work::default();
        match change {
            Change::Upsert(resource, observed) => self.upsert(resource, observed, &mut work),
            Change::Delete(uid) => self.remove(&uid, &mut work),
            Change::Relisted(resource, seen) => {
                let gone: Vec<String> = self
                    .nodes
                    .values()
                    .filter(|n| n.resource.as_ref() == Some(&resource))
                    .filter(|n| !seen.contains(&n.identity.uid))
                    .map(|n| n.identity.uid.clone())
                    .collect();
                for uid in gone {
                    self.remove(&uid, &mut work);
                }
            }
        }
        work
    }

    /// A worker found the object absent (or replaced under the same name): drop it as if
    /// its deletion had been observed.
    pub fn absent(&mut self, uid: &str) -> Work {
        let mut work = Work::default();
        self.remove(uid, &mut work);
        work
    }

    fn upsert(&mut self, resource: ResourceKey, o: Observed, work: &mut Work) {
        let uid = o.identity.uid.clone();
        let (old_owners, was_deleting_dependents, was_orphaning) = match self.nodes.get_mut(&uid) {
            Some(n) => {
                n.identity = o.identity.clone();
                n.virtual_ = false;
                n.resource = Some(resource);
                n.being_deleted = o.being_deleted;
                let old = std::mem::replace(&mut n.owners, o.owners.clone());
                (Some(old), n.deleting_dependents, n.orphaning)
            }
            None => {
                self.nodes.insert(
                    uid.clone(),
                    Node {
                        identity: o.identity.clone(),
                        owners: o.owners.clone(),
                        dependents: BTreeSet::new(),
                        being_deleted: o.being_deleted,
                        deleting_dependents: false,
                        orphaning: false,
                        virtual_: false,
                        resource: Some(resource),
                    },
                );
                (None, false, false)
            }
        };

        let old_owners = old_owners.unwrap_or_default();
        if old_owners != o.owners {
            for old in &old_owners {
                if !o.owners.iter().any(|n| n.uid == old.uid)
                    && let Some(owner) = self.nodes.get_mut(&old.uid)
                {
                    owner.dependents.remove(&uid);
                }
                // The owner may be waiting for exactly this dependent to let go.
                if self
                    .nodes
                    .get(&old.uid)
                    .is_some_and(|owner| owner.deleting_dependents)
                {
                    work.attempt_to_delete.push(old.uid.clone());
                }
            }
            for new in &o.owners {
                self.add_dependent(&o.identity, new, work);
            }
        }

        let has = |f: &str| o.finalizers.iter().any(|x| x == f);
        let orphaning = o.being_deleted && has(ORPHAN);
        let deleting_dependents = o.being_deleted && has(FOREGROUND);
        let node = self.nodes.get_mut(&uid).expect("inserted above");
        node.orphaning = orphaning;
        node.deleting_dependents = deleting_dependents;
        if orphaning && !was_orphaning {
            work.attempt_to_orphan.push(uid.clone());
        }
        if deleting_dependents && !was_deleting_dependents {
            work.attempt_to_delete
                .extend(node.dependents.iter().cloned());
            work.attempt_to_delete.push(uid);
        }
    }

    fn add_dependent(&mut self, dependent: &Identity, owner: &OwnerReference, work: &mut Work) {
        match self.nodes.get_mut(&owner.uid) {
            Some(node) => {
                node.dependents.insert(dependent.uid.clone());
                if node.deleting_dependents {
                    work.attempt_to_delete.push(dependent.uid.clone());
                }
            }
            None => {
                let identity = Identity {
                    api_version: owner.api_version.clone(),
                    kind: owner.kind.clone(),
                    namespace: dependent.namespace.clone(),
                    name: owner.name.clone(),
                    uid: owner.uid.clone(),
                };
                self.nodes.insert(
                    owner.uid.clone(),
                    Node {
                        identity,
                        owners: Vec::new(),
                        dependents: BTreeSet::from([dependent.uid.clone()]),
                        being_deleted: false,
                        deleting_dependents: false,
                        orphaning: false,
                        virtual_: true,
                        resource: None,
                    },
                );
                work.attempt_to_delete.push(owner.uid.clone());
            }
        }
    }

    fn remove(&mut self, uid: &str, work: &mut Work) {
        let Some(node) = self.nodes.remove(uid) else {
            return;
        };
        for owner in &node.owners {
            let Some(o) = self.nodes.get_mut(&owner.uid) else {
                continue;
            };
            o.dependents.remove(uid);
            if o.deleting_dependents {
                work.attempt_to_delete.push(owner.uid.clone());
            }
            if o.virtual_ && o.dependents.is_empty() {
                self.nodes.remove(&owner.uid);
            }
        }
        work.attempt_to_delete.extend(node.dependents);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> Identity {
        Identity {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn owner(name: &str, block: bool) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            block_owner_deletion: Some(block),
            ..Default::default()
        }
    }

    fn seen(name: &str, owners: Vec<OwnerReference>, finalizers: &[&str]) -> Change {
        Change::Upsert(
            "v1/configmaps".into(),
            Observed {
                identity: id(name),
                owners,
                being_deleted: !finalizers.is_empty(),
                finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            },
        )
    }

    #[test]
    fn an_unseen_owner_is_virtual_and_checked() {
        let mut g = Graph::default();
        let work = g.apply(seen("child", vec![owner("parent", false)], &[]));
        assert_eq!(work.attempt_to_delete, ["uid-parent"]);
        assert!(g.node("uid-parent").unwrap().virtual_);
        let work = g.apply(seen("parent", vec![], &[]));
        assert_eq!(work, Work::default());
        assert!(!g.node("uid-parent").unwrap().virtual_);
        assert_eq!(g.dependents("uid-parent")[0].name, "child");
    }

    #[test]
    fn deleting_an_owner_queues_its_dependents() {
        let mut g = Graph::default();
        g.apply(seen("parent", vec![], &[]));
        g.apply(seen("child", vec![owner("parent", true)], &[]));
        let work = g.apply(Change::Delete("uid-parent".into()));
        assert_eq!(work.attempt_to_delete, ["uid-child"]);
    }

    #[test]
    fn foreground_deletion_queues_dependents_then_rechecks_the_owner() {
        let mut g = Graph::default();
        g.apply(seen("parent", vec![], &[]));
        g.apply(seen("child", vec![owner("parent", true)], &[]));
        let work = g.apply(seen("parent", vec![], &[FOREGROUND]));
        assert_eq!(work.attempt_to_delete, ["uid-child", "uid-parent"]);
        assert_eq!(
            g.blocking_dependents("uid-parent"),
            [("uid-child".to_string(), false)]
        );
        // Repeated updates of a parent already deleting its dependents queue nothing new.
        let work = g.apply(seen("parent", vec![], &[FOREGROUND]));
        assert_eq!(work, Work::default());
        let work = g.apply(Change::Delete("uid-child".into()));
        assert_eq!(work.attempt_to_delete, ["uid-parent"]);
        assert!(g.blocking_dependents("uid-parent").is_empty());
    }

    #[test]
    fn orphan_finalizer_queues_the_owner_once() {
        let mut g = Graph::default();
        let work = g.apply(seen("parent", vec![], &[ORPHAN]));
        assert_eq!(work.attempt_to_orphan, ["uid-parent"]);
        let work = g.apply(seen("parent", vec![], &[ORPHAN]));
        assert!(work.attempt_to_orphan.is_empty());
    }

    #[test]
    fn a_relist_removes_what_it_did_not_see() {
        let mut g = Graph::default();
        g.apply(seen("parent", vec![], &[]));
        g.apply(seen("child", vec![owner("parent", false)], &[]));
        let work = g.apply(Change::Relisted(
            "v1/configmaps".into(),
            HashSet::from(["uid-child".to_string()]),
        ));
        assert_eq!(work.attempt_to_delete, ["uid-child"]);
        assert!(g.node("uid-parent").is_none());
    }

    #[test]
    fn releasing_an_owner_removes_the_edge() {
        let mut g = Graph::default();
        g.apply(seen("parent", vec![], &[]));
        g.apply(seen("child", vec![owner("parent", true)], &[]));
        g.apply(seen("child", vec![], &[]));
        assert!(g.dependents("uid-parent").is_empty());
    }
}
