//! The objects named after a node: its Lease in `kube-node-lease` and its CSINode. A node
//! creates, updates and deletes only its own (upstream's admitLease and admitCSINode).

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::storage::v1::CSINode;
use minik8s_api::{ApiError, Target};

use super::{NodeRestriction, Verdict, for_node, refuse};
use crate::registry::generic::{
    CreateAdmission, DeleteAdmission, Part, Phase, Removal, UpdateAdmission,
};

const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

fn lease_target(name: &str) -> Target<'_> {
    Target {
        group: "coordination.k8s.io",
        resource: "leases",
        name,
    }
}

fn csi_node_target(name: &str) -> Target<'_> {
    Target {
        group: "storage.k8s.io",
        resource: "csinodes",
        name,
    }
}

/// A write of Lease `name` in `namespace`.
pub(super) fn lease(node: &str, namespace: &str, name: &str) -> Verdict {
    if namespace != NODE_LEASE_NAMESPACE {
        return refuse(format!(
            "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
        ));
    }
    if name != node {
        return refuse("can only access node lease with the same name as the requesting node");
    }
    Ok(())
}

/// A write of CSINode `name`.
pub(super) fn csi_node(node: &str, name: &str) -> Verdict {
    if name != node {
        return refuse("can only access CSINode with the same name as the requesting node");
    }
    Ok(())
}

fn name_and_namespace(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (String, String) {
    (
        meta.name.clone().unwrap_or_default(),
        meta.namespace.clone().unwrap_or_default(),
    )
}

#[async_trait]
impl CreateAdmission<Lease> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, l: &mut Lease, _: bool) -> Result<(), ApiError> {
        let (name, ns) = name_and_namespace(&l.metadata);
        for_node(lease_target(&name), |node| lease(node, &ns, &name))
    }
}

#[async_trait]
impl UpdateAdmission<Lease> for NodeRestriction {
    fn admits(&self, part: Part) -> bool {
        part == self.part
    }
    async fn admit_update(&self, _: &mut Lease, old: &Lease, _: bool) -> Result<(), ApiError> {
        let (name, ns) = name_and_namespace(&old.metadata);
        for_node(lease_target(&name), |node| lease(node, &ns, &name))
    }
}

#[async_trait]
impl DeleteAdmission<Lease> for NodeRestriction {
    async fn admit_delete(&self, r: &Removal<'_, Lease>) -> Result<(), ApiError> {
        let ns = r.namespace.unwrap_or_default();
        for_node(lease_target(r.name), |node| lease(node, ns, r.name))
    }
}

#[async_trait]
impl CreateAdmission<CSINode> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, n: &mut CSINode, _: bool) -> Result<(), ApiError> {
        let name = n.metadata.name.clone().unwrap_or_default();
        for_node(csi_node_target(&name), |node| csi_node(node, &name))
    }
}

#[async_trait]
impl UpdateAdmission<CSINode> for NodeRestriction {
    fn admits(&self, part: Part) -> bool {
        part == self.part
    }
    async fn admit_update(&self, _: &mut CSINode, old: &CSINode, _: bool) -> Result<(), ApiError> {
        let name = old.metadata.name.clone().unwrap_or_default();
        for_node(csi_node_target(&name), |node| csi_node(node, &name))
    }
}

#[async_trait]
impl DeleteAdmission<CSINode> for NodeRestriction {
    async fn admit_delete(&self, r: &Removal<'_, CSINode>) -> Result<(), ApiError> {
        for_node(csi_node_target(r.name), |node| csi_node(node, r.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_own_lease_and_csi_node() {
        let lease_cases = [
            ("its own lease", "kube-node-lease", "n1", Ok(())),
            (
                "another node's lease",
                "kube-node-lease",
                "n2",
                refuse("can only access node lease with the same name as the requesting node"),
            ),
            (
                "a lease elsewhere",
                "kube-system",
                "n1",
                refuse("can only access leases in the \"kube-node-lease\" system namespace"),
            ),
        ];
        for (what, ns, name, want) in lease_cases {
            assert_eq!(lease("n1", ns, name), want, "{what}");
        }
        assert_eq!(csi_node("n1", "n1"), Ok(()));
        assert_eq!(
            csi_node("n1", "n2"),
            refuse("can only access CSINode with the same name as the requesting node")
        );
    }
}
