//! The CSR approving controller, as upstream's pkg/controller/certificates/approver
//! (sarapprove.go): kubelet TLS bootstrap needs no administrator, because a request for a
//! kubelet client certificate (signer `kubernetes.io/kube-apiserver-client-kubelet`, subject
//! `O=system:nodes, CN=system:node:<name>`) is approved when a SubjectAccessReview says its
//! requester may `create` `certificatesigningrequests/selfnodeclient` (a node renewing its
//! own) or `certificatesigningrequests/nodeclient` (a bootstrap token asking for a node's).
//! The bootstrap policy grants those to `system:nodes` and `system:bootstrappers`; a request
//! whose requester lacks them stays pending for `kubectl certificate approve`.
//!
//! A minik8s addition: a node's own request for its kubelet serving certificate (signer
//! `kubernetes.io/kubelet-serving`) is approved too when the requester is the node the subject
//! names and every name and address asked for is one the Node object publishes, so the API
//! server can verify the kubelets it connects to without an administrator approving each
//! node. Upstream leaves these to an external approver.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use futures::{StreamExt, stream};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};

use crate::csrsigning::{self, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING, Request};
use crate::informers::{Cache, Informers};
use crate::util::reconciler::{Backoff, Error};
use crate::util::runtime;

pub const NAME: &str = "certificatesigningrequest-approving-controller";

const NODE_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";
const REASON: &str = "AutoApproved";
pub const SELF_NODE_CLIENT_MESSAGE: &str =
    "Auto approving self kubelet client certificate after SubjectAccessReview.";
pub const NODE_CLIENT_MESSAGE: &str =
    "Auto approving kubelet client certificate after SubjectAccessReview.";
pub const SERVING_MESSAGE: &str = "Auto approving kubelet serving certificate: requested by the node it names, for names and addresses its Node object publishes.";

/// A kind of request the controller recognizes, and the permission that approves it
/// (upstream's `csrRecognizer`).
struct Recognizer {
    recognize: fn(&CertificateSigningRequest, &Request) -> bool,
    subresource: &'static str,
    message: &'static str,
}

/// Upstream's recognizers, in its order: a node renewing its own certificate first.
const RECOGNIZERS: &[Recognizer] = &[
    Recognizer {
        recognize: is_self_node_client,
        subresource: "selfnodeclient",
        message: SELF_NODE_CLIENT_MESSAGE,
    },
    Recognizer {
        recognize: is_node_client,
        subresource: "nodeclient",
        message: NODE_CLIENT_MESSAGE,
    },
];

/// Upstream's `isNodeClientCert`: the kubelet client signer, and a request its rules accept.
fn is_node_client(csr: &CertificateSigningRequest, req: &Request) -> bool {
    csr.spec.signer_name == KUBE_APISERVER_CLIENT_KUBELET
        && csrsigning::check(
            KUBE_APISERVER_CLIENT_KUBELET,
            req,
            csr.spec.usages.as_deref().unwrap_or_default(),
        )
        .is_some_and(|r| r.is_ok())
}

/// Upstream's `isSelfNodeClientCert`: a node client request made by the user it names.
fn is_self_node_client(csr: &CertificateSigningRequest, req: &Request) -> bool {
    csr.spec.username.as_deref() == Some(req.common_name.as_str()) && is_node_client(csr, req)
}

/// What the serving rule makes of a request.
#[derive(Debug, PartialEq, Eq)]
enum Serving {
    /// Not a node's request for its own serving certificate: not this rule's.
    NotRecognized,
    Approve,
    /// The node's, but not approvable until its Node object says more (or never).
    Wait(String),
}

/// The node named by a request made by that node itself for its serving certificate.
fn serving_node<'a>(csr: &CertificateSigningRequest, req: &'a Request) -> Option<&'a str> {
    let spec = &csr.spec;
    if spec.signer_name != KUBELET_SERVING {
        return None;
    }
    let node = req.common_name.strip_prefix(NODE_PREFIX)?;
    let by_that_node = spec.username.as_deref() == Some(req.common_name.as_str())
        && spec.groups.iter().flatten().any(|g| g == NODES_GROUP);
    let valid = csrsigning::check(
        KUBELET_SERVING,
        req,
        spec.usages.as_deref().unwrap_or_default(),
    )
    .is_some_and(|r| r.is_ok());
    (!node.is_empty() && by_that_node && valid).then_some(node)
}

/// The minik8s rule for kubelet serving certificates: every DNS name is the node's name or
/// a name its Node publishes (Hostname, InternalDNS, ExternalDNS), and every IP address one it
/// publishes.
fn serving_verdict(
    csr: &CertificateSigningRequest,
    req: &Request,
    node: impl FnOnce(&str) -> Option<Arc<Node>>,
) -> Serving {
    let Some(name) = serving_node(csr, req) else {
        return Serving::NotRecognized;
    };
    let Some(node) = node(name) else {
        return Serving::Wait(format!("node {name:?} does not exist yet"));
    };
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut names: BTreeSet<&str> = BTreeSet::from([name]);
    let mut ips: BTreeSet<IpAddr> = BTreeSet::new();
    for a in addresses {
        match a.type_.as_str() {
            "Hostname" | "InternalDNS" | "ExternalDNS" => {
                names.insert(a.address.as_str());
            }
            _ => {
                if let Ok(ip) = a.address.parse() {
                    ips.insert(ip);
                }
            }
        }
    }
    if let Some(d) = req.dns_names.iter().find(|d| !names.contains(d.as_str())) {
        return Serving::Wait(format!(
            "DNS name {d:?} is neither the node's name nor one of its addresses"
        ));
    }
    if let Some(ip) = req.ip_addresses.iter().find(|ip| !ips.contains(ip)) {
        return Serving::Wait(format!(
            "IP address {ip} is not one of node {name:?}'s addresses"
        ));
    }
    Serving::Approve
}

/// Upstream's `GetCertApprovalCondition`: approved or denied, whatever the status says.
fn decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Approved" || c.type_ == "Denied")
        })
}

fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

struct Ctx {
    client: Client,
    nodes: Cache<Node>,
    /// Requests whose requester was not allowed, retried with growing delays as upstream's
    /// rate-limited queue retries them (a binding may be added later).
    refused: Backoff<String>,
}

impl Ctx {
    /// Upstream's `authorize`: a SubjectAccessReview of the requester, as the request
    /// recorded it, for `create` on `certificatesigningrequests/<subresource>`.
    async fn allowed(
        &self,
        csr: &CertificateSigningRequest,
        subresource: &str,
    ) -> Result<bool, Error> {
        let spec = &csr.spec;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: spec.username.clone(),
                uid: spec.uid.clone(),
                groups: spec.groups.clone(),
                extra: spec.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("certificates.k8s.io".into()),
                    resource: Some("certificatesigningrequests".into()),
                    verb: Some("create".into()),
                    subresource: Some(subresource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = api.create(&PostParams::default(), &review).await?;
        Ok(review.status.is_some_and(|s| s.allowed))
    }
}

pub async fn run(informers: Arc<Informers>) {
    let csrs = informers.of::<CertificateSigningRequest>();
    let nodes = informers.of::<Node>();
    let pending = csrs.store();
    // A Node that appears, or whose addresses change, may let its serving request through.
    let node_changed = nodes
        .touched_when(|old, new| {
            old.status.as_ref().map(|s| &s.addresses) != new.status.as_ref().map(|s| &s.addresses)
        })
        .flat_map(move |node| {
            let cn = format!("{NODE_PREFIX}{}", node.name_any());
            let waiting: Vec<ObjectRef<CertificateSigningRequest>> = pending
                .state()
                .into_iter()
                .filter(|c| {
                    c.spec.signer_name == KUBELET_SERVING
                        && c.spec.username.as_deref() == Some(cn.as_str())
                        && !decided(c)
                })
                .map(|c| ObjectRef::from_obj(c.as_ref()))
                .collect();
            stream::iter(waiting)
        });
    let queue = stream::select(
        csrs.touched().map(|c| ObjectRef::from_obj(c.as_ref())),
        node_changed,
    );
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        nodes: nodes.store(),
        refused: Backoff::default(),
    });
    // Upstream's certificate controllers share one queue name.
    runtime::run("certificate", csrs.store(), queue, reconcile, ctx).await
}

async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if issued(&csr) || decided(&csr) {
        return Ok(Action::await_change());
    }
    let name = csr.name_any();
    let req = csrsigning::parse(&csr.spec.request.0)
        .map_err(|e| Error::failed(format!("unable to parse csr {name:?}: {e}")))?;
    let mut tried = Vec::new();
    for r in RECOGNIZERS {
        if !(r.recognize)(&csr, &req) {
            continue;
        }
        tried.push(r.subresource);
        if ctx.allowed(&csr, r.subresource).await? {
            ctx.refused.succeeded(&name);
            return approve(&csr, &ctx, r.message).await;
        }
    }
    match serving_verdict(&csr, &req, |node| ctx.nodes.get(&ObjectRef::new(node))) {
        Serving::Approve => return approve(&csr, &ctx, SERVING_MESSAGE).await,
        // The Node's changes bring the request back.
        Serving::Wait(why) => {
            tracing::info!(csr = %name, %why, "kubelet serving certificate request left pending");
            return Ok(Action::await_change());
        }
        Serving::NotRecognized => {}
    }
    if tried.is_empty() {
        return Ok(Action::await_change());
    }
    tracing::debug!(
        "recognized csr {name:?} as [{}] but subject access review was not approved",
        tried.join(" ")
    );
    Ok(Action::requeue(ctx.refused.failed(&name)))
}

/// Records the approval through the `approval` subresource, as `kubectl certificate approve`
/// does; the cached resourceVersion makes a concurrent decision a conflict, retried.
async fn approve(
    csr: &CertificateSigningRequest,
    ctx: &Ctx,
    message: &str,
) -> Result<Action, Error> {
    let mut updated = csr.clone();
    updated
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some(REASON.into()),
            message: Some(message.into()),
            ..Default::default()
        });
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    api.replace_subresource(
        "approval",
        &csr.name_any(),
        &PostParams::default(),
        &updated,
    )
    .await?;
    tracing::info!(csr = %csr.name_any(), signer = %csr.spec.signer_name, message, "approved");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
    use serde_json::json;

    fn pem(cn: &str, orgs: &[&str], dns: &[&str], ips: &[&str]) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.distinguished_name.push(DnType::CommonName, cn);
        for d in dns {
            params
                .subject_alt_names
                .push(SanType::DnsName((*d).try_into().unwrap()));
        }
        for ip in ips {
            params
                .subject_alt_names
                .push(SanType::IpAddress(ip.parse().unwrap()));
        }
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn csr(
        signer: &str,
        pem: &str,
        usages: &[&str],
        user: &str,
        groups: &[&str],
    ) -> (CertificateSigningRequest, Request) {
        let csr: CertificateSigningRequest = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"signerName": signer, "usages": usages, "username": user, "groups": groups,
                     "request": k8s_openapi::ByteString(pem.as_bytes().to_vec())},
        }))
        .unwrap();
        let req = csrsigning::parse(pem.as_bytes()).unwrap_or_else(|_| panic!("parses"));
        (csr, req)
    }

    const CLIENT: &[&str] = &["digital signature", "client auth"];
    const SERVING: &[&str] = &["digital signature", "key encipherment", "server auth"];

    #[test]
    fn node_client_requests_as_upstream_recognizes_them() {
        let good = pem("system:node:n1", &["system:nodes"], &[], &[]);
        let bootstrap = ["system:bootstrappers", "system:authenticated"];
        let (c, r) = csr(
            KUBE_APISERVER_CLIENT_KUBELET,
            &good,
            CLIENT,
            "system:bootstrap:abcdef",
            &bootstrap,
        );
        assert!(is_node_client(&c, &r));
        assert!(!is_self_node_client(&c, &r));
        let (c, r) = csr(
            KUBE_APISERVER_CLIENT_KUBELET,
            &good,
            CLIENT,
            "system:node:n1",
            &["system:nodes"],
        );
        assert!(is_self_node_client(&c, &r));
        // Another signer, the wrong organization, SANs, other usages: not a node client.
        let (c, r) = csr(KUBELET_SERVING, &good, CLIENT, "u", &[]);
        assert!(!is_node_client(&c, &r));
        let wrong_org = pem("system:node:n1", &["system:masters"], &[], &[]);
        let (c, r) = csr(KUBE_APISERVER_CLIENT_KUBELET, &wrong_org, CLIENT, "u", &[]);
        assert!(!is_node_client(&c, &r));
        let two_orgs = pem("system:node:n1", &["system:nodes", "x"], &[], &[]);
        let (c, r) = csr(KUBE_APISERVER_CLIENT_KUBELET, &two_orgs, CLIENT, "u", &[]);
        assert!(!is_node_client(&c, &r));
        let with_san = pem("system:node:n1", &["system:nodes"], &["n1"], &[]);
        let (c, r) = csr(KUBE_APISERVER_CLIENT_KUBELET, &with_san, CLIENT, "u", &[]);
        assert!(!is_node_client(&c, &r));
        let not_node = pem("alice", &["system:nodes"], &[], &[]);
        let (c, r) = csr(KUBE_APISERVER_CLIENT_KUBELET, &not_node, CLIENT, "u", &[]);
        assert!(!is_node_client(&c, &r));
        let (c, r) = csr(
            KUBE_APISERVER_CLIENT_KUBELET,
            &good,
            &["client auth", "server auth"],
            "u",
            &[],
        );
        assert!(!is_node_client(&c, &r));
    }

    fn node(name: &str, addresses: &[(&str, &str)]) -> Arc<Node> {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.status = Some(NodeStatus {
            addresses: Some(
                addresses
                    .iter()
                    .map(|(t, a)| NodeAddress {
                        type_: t.to_string(),
                        address: a.to_string(),
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        Arc::new(n)
    }

    #[test]
    fn serving_requests_of_a_node_for_its_own_addresses() {
        let n1 = node(
            "n1",
            &[
                ("InternalIP", "10.0.0.5"),
                ("Hostname", "n1.local"),
                ("ExternalIP", "2001:db8::5"),
            ],
        );
        let lookup = |want: &str| {
            let n1 = n1.clone();
            let want = want.to_string();
            move |name: &str| (name == want).then(|| n1.clone())
        };
        let nodes = ["system:nodes", "system:authenticated"];
        let verdict = |pem: &str, user: &str, groups: &[&str]| {
            let (c, r) = csr(KUBELET_SERVING, pem, SERVING, user, groups);
            serving_verdict(&c, &r, lookup("n1"))
        };
        let own = pem(
            "system:node:n1",
            &["system:nodes"],
            &["n1", "n1.local"],
            &["10.0.0.5", "2001:db8::5"],
        );
        assert_eq!(verdict(&own, "system:node:n1", &nodes), Serving::Approve);
        // Another node asking for n1's certificate, or a user who is not a node.
        assert_eq!(
            verdict(&own, "system:node:n2", &nodes),
            Serving::NotRecognized
        );
        assert_eq!(
            verdict(&own, "system:node:n1", &["system:authenticated"]),
            Serving::NotRecognized
        );
        // Names and addresses the Node does not publish.
        let other_ip = pem("system:node:n1", &["system:nodes"], &["n1"], &["10.0.0.6"]);
        assert!(matches!(
            verdict(&other_ip, "system:node:n1", &nodes),
            Serving::Wait(why) if why.contains("10.0.0.6")
        ));
        let other_name = pem("system:node:n1", &["system:nodes"], &["kubernetes"], &[]);
        assert!(matches!(
            verdict(&other_name, "system:node:n1", &nodes),
            Serving::Wait(why) if why.contains("kubernetes")
        ));
        // The Node not there yet.
        let (c, r) = csr(KUBELET_SERVING, &own, SERVING, "system:node:n1", &nodes);
        assert!(matches!(
            serving_verdict(&c, &r, |_| None),
            Serving::Wait(why) if why.contains("does not exist")
        ));
        // The signer's own rules: organization and usages.
        let wrong_org = pem("system:node:n1", &["system:masters"], &["n1"], &[]);
        assert_eq!(
            verdict(&wrong_org, "system:node:n1", &nodes),
            Serving::NotRecognized
        );
        let (c, r) = csr(KUBELET_SERVING, &own, CLIENT, "system:node:n1", &nodes);
        assert_eq!(
            serving_verdict(&c, &r, lookup("n1")),
            Serving::NotRecognized
        );
        // Client requests are not this rule's.
        let client = pem("system:node:n1", &["system:nodes"], &[], &[]);
        let (c, r) = csr(
            KUBE_APISERVER_CLIENT_KUBELET,
            &client,
            CLIENT,
            "system:node:n1",
            &nodes,
        );
        assert_eq!(
            serving_verdict(&c, &r, lookup("n1")),
            Serving::NotRecognized
        );
    }
}
