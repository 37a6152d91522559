//! What the server serves, as data: every resource with its group, version, kind, scope,
//! names, verbs and subresources. Discovery, routing and kubectl's short names all read this
//! one table, so they cannot disagree.

use crate::validation::NameRule;

/// The verbs of an ordinary read-write resource.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A subresource served under `<resource>/<name>/<subresource>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subresource {
    pub name: String,
    /// The kind its body has (`Scale`, `Binding`, or the parent kind for `status`).
    pub kind: String,
    pub group: String,
    pub version: String,
    pub verbs: Vec<String>,
}

/// One served resource at one group-version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    /// The plural name used in paths.
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    pub subresources: Vec<Subresource>,
    pub name_rule: NameRule,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn group_version(&self) -> String {
        self.api_version()
    }

    pub fn subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// The storage key prefix, as upstream lays out etcd: `/registry/<group-resource>/`.
    pub fn key_root(&self) -> String {
        match self.group.as_str() {
            ""
            | "apps"
            | "batch"
            | "autoscaling"
            | "networking.k8s.io"
            | "discovery.k8s.io"
            | "coordination.k8s.io"
            | "storage.k8s.io"
            | "rbac.authorization.k8s.io"
            | "events.k8s.io"
            | "admissionregistration.k8s.io" => {
                let dir = match self.plural.as_str() {
                    "services" => "services/specs",
                    p => p,
                };
                format!("/registry/{dir}/")
            }
            "apiextensions.k8s.io" => format!("/registry/apiextensions.k8s.io/{}/", self.plural),
            g => format!("/registry/{g}/{}/", self.plural),
        }
    }
}

struct Def {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [&'static str],
    name_rule: NameRule,
    verbs: &'static [&'static str],
}

const fn def(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
) -> Def {
    Def {
        group,
        version,
        kind,
        plural,
        namespaced,
        short: &[],
        categories: &[],
        subresources: &[],
        name_rule: NameRule::Dns1123Subdomain,
        verbs: ALL_VERBS,
    }
}

impl Def {
    const fn short(mut self, s: &'static [&'static str]) -> Self {
        self.short = s;
        self
    }
    const fn categories(mut self, c: &'static [&'static str]) -> Self {
        self.categories = c;
        self
    }
    const fn sub(mut self, s: &'static [&'static str]) -> Self {
        self.subresources = s;
        self
    }
    const fn verbs(mut self, v: &'static [&'static str]) -> Self {
        self.verbs = v;
        self
    }
    const fn names(mut self, r: NameRule) -> Self {
        self.name_rule = r;
        self
    }
}

const ALL: &[&str] = &["all"];
/// What extends the API server itself: custom resource definitions and admission plugins.
const API_EXTENSIONS: &[&str] = &["api-extensions"];

const BUILT_IN: &[Def] = &[
    def("", "v1", "Namespace", "namespaces", false)
        .short(&["ns"])
        .sub(&["status", "finalize"])
        .names(NameRule::Dns1123Label)
        .verbs(&[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]),
    def("", "v1", "Pod", "pods", true)
        .short(&["po"])
        .categories(ALL)
        .sub(&[
            "attach",
            "binding",
            "ephemeralcontainers",
            "eviction",
            "exec",
            "log",
            "portforward",
            "status",
        ]),
    def("", "v1", "Service", "services", true)
        .short(&["svc"])
        .categories(ALL)
        .sub(&["status"])
        .names(NameRule::Dns1035Label),
    def("", "v1", "Endpoints", "endpoints", true).short(&["ep"]),
    def("", "v1", "ConfigMap", "configmaps", true).short(&["cm"]),
    def("", "v1", "Secret", "secrets", true),
    def("", "v1", "Node", "nodes", false)
        .short(&["no"])
        .sub(&["proxy", "status"]),
    def("", "v1", "Event", "events", true).short(&["ev"]),
    def(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        true,
    )
    .short(&["rc"])
    .categories(ALL)
    .sub(&["status", "scale"]),
    def("", "v1", "PodTemplate", "podtemplates", true),
    def("", "v1", "ComponentStatus", "componentstatuses", false)
        .short(&["cs"])
        .verbs(&["get", "list"]),
    def("", "v1", "LimitRange", "limitranges", true).short(&["limits"]),
    def("", "v1", "ResourceQuota", "resourcequotas", true)
        .short(&["quota"])
        .sub(&["status"]),
    def("", "v1", "ServiceAccount", "serviceaccounts", true)
        .short(&["sa"])
        .sub(&["token"]),
    def("", "v1", "PersistentVolume", "persistentvolumes", false)
        .short(&["pv"])
        .sub(&["status"]),
    def(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true,
    )
    .short(&["pvc"])
    .sub(&["status"]),
    def("apps", "v1", "Deployment", "deployments", true)
        .short(&["deploy"])
        .categories(ALL)
        .sub(&["status", "scale"]),
    def("apps", "v1", "ReplicaSet", "replicasets", true)
        .short(&["rs"])
        .categories(ALL)
        .sub(&["status", "scale"]),
    def("apps", "v1", "StatefulSet", "statefulsets", true)
        .short(&["sts"])
        .categories(ALL)
        .sub(&["status", "scale"]),
    def("apps", "v1", "DaemonSet", "daemonsets", true)
        .short(&["ds"])
        .categories(ALL)
        .sub(&["status"]),
    def("batch", "v1", "Job", "jobs", true)
        .categories(ALL)
        .sub(&["status"]),
    def("batch", "v1", "CronJob", "cronjobs", true)
        .short(&["cj"])
        .categories(ALL)
        .sub(&["status"]),
    def(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
    )
    .short(&["hpa"])
    .categories(ALL)
    .sub(&["status"]),
    // The same objects as autoscaling/v2 (see `kinds::hpa::v1`).
    def(
        "autoscaling",
        "v1",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
    )
    .short(&["hpa"])
    .categories(ALL)
    .sub(&["status"]),
    def("networking.k8s.io", "v1", "Ingress", "ingresses", true)
        .short(&["ing"])
        .sub(&["status"]),
    def(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false,
    ),
    def(
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true,
    ),
    def("coordination.k8s.io", "v1", "Lease", "leases", true),
    def(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
    )
    .short(&["sc"]),
    def("rbac.authorization.k8s.io", "v1", "Role", "roles", true).names(NameRule::PathSegment),
    def(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    )
    .names(NameRule::PathSegment),
    def(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    )
    .names(NameRule::PathSegment),
    def(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    )
    .names(NameRule::PathSegment),
    def("events.k8s.io", "v1", "Event", "events", true).short(&["ev"]),
    def(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true,
    ),
    def(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    )
    .short(&["pdb"])
    .sub(&["status"]),
    def(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false,
    )
    .short(&["pc"]),
    def("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", false),
    def(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true,
    )
    .short(&["netpol"]),
    def(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
    )
    .short(&["csr"])
    .sub(&["approval", "status"]),
    def(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        "flowschemas",
        false,
    )
    .sub(&["status"]),
    def(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        false,
    )
    .sub(&["status"]),
    def("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false),
    def("storage.k8s.io", "v1", "CSINode", "csinodes", false),
    def(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false,
    )
    .sub(&["status"]),
    def(
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        true,
    ),
    def(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    )
    .short(&["crd", "crds"])
    .categories(API_EXTENSIONS)
    .sub(&["status"]),
    def(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false,
    )
    .categories(API_EXTENSIONS),
    def(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
    )
    .categories(API_EXTENSIONS),
    def(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        false,
    )
    .categories(API_EXTENSIONS)
    .sub(&["status"]),
    def(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        false,
    )
    .categories(API_EXTENSIONS),
    // Upstream's name rule is a path segment that must also be `<version>.<group>` (see
    // `kinds::api_service`).
    def(
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        false,
    )
    .categories(API_EXTENSIONS)
    .sub(&["status"])
    .names(NameRule::PathSegment),
];

fn subresource(parent: &Def, name: &str) -> Subresource {
    let verbs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (kind, group, version, verbs) = match name {
        "scale" => (
            "Scale",
            "autoscaling",
            "v1",
            verbs(&["get", "patch", "update"]),
        ),
        "binding" => ("Binding", "", "v1", verbs(&["create"])),
        "eviction" => ("Eviction", "policy", "v1", verbs(&["create"])),
        "token" => (
            "TokenRequest",
            "authentication.k8s.io",
            "v1",
            verbs(&["create"]),
        ),
        // Served by the node's kubelet, through the API server.
        "log" => (parent.kind, "", "v1", verbs(&["get"])),
        "exec" => ("PodExecOptions", "", "v1", verbs(&["create", "get"])),
        "attach" => ("PodAttachOptions", "", "v1", verbs(&["create", "get"])),
        "portforward" => ("PodPortForwardOptions", "", "v1", verbs(&["create", "get"])),
        "proxy" if parent.kind == "Node" => (
            "NodeProxyOptions",
            "",
            "v1",
            verbs(&["create", "delete", "get", "patch", "update"]),
        ),
        "finalize" => (
            parent.kind,
            parent.group,
            parent.version,
            verbs(&["update"]),
        ),
        _ => (
            parent.kind,
            parent.group,
            parent.version,
            verbs(&["get", "patch", "update"]),
        ),
    };
    Subresource {
        name: name.to_string(),
        kind: kind.to_string(),
        group: group.to_string(),
        version: version.to_string(),
        verbs,
    }
}

/// Every built-in resource, in the order discovery lists them.
pub fn built_in() -> Vec<ResourceInfo> {
    BUILT_IN
        .iter()
        .map(|d| ResourceInfo {
            group: d.group.to_string(),
            version: d.version.to_string(),
            kind: d.kind.to_string(),
            list_kind: format!("{}List", d.kind),
            plural: d.plural.to_string(),
            singular: d.kind.to_lowercase(),
            namespaced: d.namespaced,
            short_names: d.short.iter().map(|s| s.to_string()).collect(),
            categories: d.categories.iter().map(|s| s.to_string()).collect(),
            verbs: d.verbs.iter().map(|s| s.to_string()).collect(),
            subresources: d.subresources.iter().map(|s| subresource(d, s)).collect(),
            name_rule: d.name_rule,
        })
        .collect()
}

/// The group versions served, in discovery's preferred order; the core group is "".
pub fn group_order() -> Vec<&'static str> {
    vec![
        "",
        // kube-aggregator lists its own group first, before every APIService's.
        "apiregistration.k8s.io",
        "apps",
        "events.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "networking.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        // Upstream gives it apiextensions.k8s.io's priority; the tie goes by APIService name,
        // `v1.admissionregistration.k8s.io` first.
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "node.k8s.io",
        "discovery.k8s.io",
        "flowcontrol.apiserver.k8s.io",
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let all = built_in();
        assert_eq!(all.len(), BUILT_IN.len());
        let deploy = all.iter().find(|r| r.plural == "deployments").unwrap();
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.subresource("scale").unwrap().kind, "Scale");
        assert_eq!(deploy.key_root(), "/registry/deployments/");
        let apiservices = all.iter().find(|r| r.plural == "apiservices").unwrap();
        assert_eq!(
            apiservices.key_root(),
            "/registry/apiregistration.k8s.io/apiservices/"
        );
        let pods = all.iter().find(|r| r.plural == "pods").unwrap();
        assert_eq!(pods.subresource("exec").unwrap().kind, "PodExecOptions");
        assert_eq!(pods.subresource("log").unwrap().verbs, vec!["get"]);
        let nodes = all.iter().find(|r| r.plural == "nodes").unwrap();
        assert_eq!(
            nodes.subresource("proxy").unwrap().verbs,
            vec!["create", "delete", "get", "patch", "update"]
        );
        for r in &all {
            assert!(
                group_order().contains(&r.group.as_str()),
                "{} has an unordered group",
                r.plural
            );
        }
    }
}
