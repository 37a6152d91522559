//! Kubelet TLS bootstrap's server side against the in-process API server with
//! `--authorization-mode=Node,RBAC` and bootstrap tokens on: a node client request made with
//! a bootstrap token is approved by the approving controller (acting as its ServiceAccount)
//! and signed by the signing controller; one from a user without the `nodeclient` permission
//! stays pending; a node's own serving request for its own addresses is approved once its
//! Node publishes them, while another node's or one for an address the Node lacks is not.

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams, PostParams};
use minik8s_api::bootstrap_token::BootstrapToken;
use minik8s_controllers::csrapproving::{
    NODE_CLIENT_MESSAGE, SELF_NODE_CLIENT_MESSAGE, SERVING_MESSAGE,
};
use minik8s_controllers::csrsigning::SigningOptions;
use minik8s_controllers::informers::Informers;
use rcgen::{CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, SanType};
use serde_json::json;
use testkit::{Backend, InProcess, UserInfo, eventually};

use crate::support::WAIT;

const TOKEN: &str = "abcdef.0123456789abcdef";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.into(),
        uid: String::new(),
        groups: groups
            .iter()
            .map(|g| g.to_string())
            .chain(["system:authenticated".to_string()])
            .collect(),
    }
}

fn node_user(name: &str) -> UserInfo {
    user(&format!("system:node:{name}"), &["system:nodes"])
}

pub(crate) fn controller_account(name: &str) -> UserInfo {
    user(
        &format!("system:serviceaccount:kube-system:{name}"),
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
        ],
    )
}

fn ca() -> SigningOptions {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "test-ca");
    let cert = params.self_signed(&key).unwrap();
    SigningOptions {
        ca_cert_pem: cert.pem(),
        ca_key_pem: key.serialize_pem(),
        duration: std::time::Duration::from_secs(24 * 3600),
    }
}

/// A request for `cn` in `system:nodes` with these names, made by `client`.
async fn request(
    client: &kube::Client,
    name: &str,
    signer: &str,
    cn: &str,
    dns: &[&str],
    ips: &[&str],
) -> anyhow::Result<()> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(DnType::CommonName, cn);
    for d in dns {
        params
            .subject_alt_names
            .push(SanType::DnsName((*d).try_into()?));
    }
    for ip in ips {
        params
            .subject_alt_names
            .push(SanType::IpAddress(ip.parse()?));
    }
    let pem = params.serialize_request(&key)?.pem()?;
    let usages = if signer == SERVING_SIGNER {
        json!(["digital signature", "key encipherment", "server auth"])
    } else {
        json!(["digital signature", "client auth"])
    };
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"signerName": signer, "usages": usages, "request": ByteString(pem.into_bytes())},
    }))?;
    Api::<CertificateSigningRequest>::all(client.clone())
        .create(&PostParams::default(), &csr)
        .await?;
    Ok(())
}

fn approval(csr: &CertificateSigningRequest) -> Option<(String, String)> {
    let c = csr
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Approved")?;
    Some((
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// Waits for `name` to be approved and signed; returns the approval's message and the
/// certificate's subject common name.
async fn approved_and_signed(
    csrs: &Api<CertificateSigningRequest>,
    name: &str,
) -> (String, String) {
    let csr = eventually(WAIT, &format!("{name} approved and signed"), || async {
        csrs.get(name).await.ok().filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.certificate.as_ref())
                .is_some_and(|cert| !cert.0.is_empty())
        })
    })
    .await;
    let (reason, message) = approval(&csr).expect("approved");
    assert_eq!(reason, "AutoApproved");
    let pem = &csr.status.as_ref().unwrap().certificate.as_ref().unwrap().0;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).unwrap();
    let cert = block.parse_x509().unwrap();
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    (message, cn)
}

async fn pending(csrs: &Api<CertificateSigningRequest>, name: &str) -> bool {
    let csr = csrs.get(name).await.unwrap();
    approval(&csr).is_none()
        && csr
            .status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .is_none()
}

/// The server, the approving and signing controllers running as upstream's
/// `certificate-controller` account, and a bootstrap token that authenticates.
async fn start() -> anyhow::Result<InProcess> {
    let api = InProcess::start_with(Backend::Sqlite, |c| {
        c.enable_bootstrap_token_auth = true;
        testkit::with_rbac(c);
    })
    .await?;
    let admin = api.client();
    let token = BootstrapToken {
        id: "abcdef".into(),
        secret: "0123456789abcdef".into(),
        description: String::new(),
        expires: None,
        usages: vec!["authentication".into()],
        groups: Vec::new(),
    };
    Api::<Secret>::namespaced(admin.clone(), "kube-system")
        .create(&PostParams::default(), &token.to_secret())
        .await?;
    let informers = Informers::new(admin)
        .with_client(api.client_as(controller_account("certificate-controller")));
    tokio::spawn(minik8s_controllers::csrapproving::run(informers.clone()));
    tokio::spawn(minik8s_controllers::csrsigning::run(informers, ca()));
    Ok(api)
}

#[tokio::test]
async fn node_client_requests_are_approved_for_bootstrappers_and_nodes() -> anyhow::Result<()> {
    let api = start().await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(api.client());
    // A user who may create requests but not have node client ones approved.
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-csr"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:node-bootstrapper"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
    }))?;
    Api::<ClusterRoleBinding>::all(api.client())
        .create(&PostParams::default(), &binding)
        .await?;
    let alice = api.client_as(user("alice", &[]));
    eventually(WAIT, "alice may create requests", || async {
        request(
            &alice,
            "from-alice",
            CLIENT_SIGNER,
            "system:node:n9",
            &[],
            &[],
        )
        .await
        .ok()
    })
    .await;

    // The bootstrap token: authenticated once the server's cache holds its Secret.
    let bootstrap = api.client_with_token(TOKEN);
    eventually(WAIT, "the bootstrap token to be accepted", || async {
        request(
            &bootstrap,
            "node-csr-n1",
            CLIENT_SIGNER,
            "system:node:n1",
            &[],
            &[],
        )
        .await
        .ok()
    })
    .await;
    let (message, cn) = approved_and_signed(&csrs, "node-csr-n1").await;
    assert_eq!(message, NODE_CLIENT_MESSAGE);
    assert_eq!(cn, "system:node:n1");

    // The node, with its certificate, renews it.
    let node = api.client_as(node_user("n1"));
    request(&node, "renew-n1", CLIENT_SIGNER, "system:node:n1", &[], &[]).await?;
    let (message, _) = approved_and_signed(&csrs, "renew-n1").await;
    assert_eq!(message, SELF_NODE_CLIENT_MESSAGE);

    // Alice's request came first and is still waiting for an administrator.
    assert!(pending(&csrs, "from-alice").await);
    Ok(())
}

#[tokio::test]
async fn a_nodes_serving_request_for_its_own_addresses_is_approved() -> anyhow::Result<()> {
    let api = start().await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(api.client());
    let n1 = api.client_as(node_user("n1"));
    let n2 = api.client_as(node_user("n2"));
    // Before the Node exists: the request waits for it.
    request(
        &n1,
        "serving-n1",
        SERVING_SIGNER,
        "system:node:n1",
        &["n1"],
        &["10.0.0.5"],
    )
    .await?;
    // An address n1 does not have, and n2 asking for n1's certificate.
    request(
        &n1,
        "wrong-ip",
        SERVING_SIGNER,
        "system:node:n1",
        &["n1"],
        &["10.9.9.9"],
    )
    .await?;
    request(
        &n2,
        "n2-for-n1",
        SERVING_SIGNER,
        "system:node:n1",
        &["n1"],
        &["10.0.0.5"],
    )
    .await?;

    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}}))?;
    let nodes: Api<Node> = Api::all(api.client());
    nodes.create(&PostParams::default(), &node).await?;
    nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.0.0.5"},
                {"type": "Hostname", "address": "n1.example"},
            ]}})),
        )
        .await?;
    let (message, cn) = approved_and_signed(&csrs, "serving-n1").await;
    assert_eq!(message, SERVING_MESSAGE);
    assert_eq!(cn, "system:node:n1");

    // A later request of the node's is approved too; the others, made before, still wait.
    request(
        &n1,
        "serving-n1-again",
        SERVING_SIGNER,
        "system:node:n1",
        &["n1.example"],
        &[],
    )
    .await?;
    approved_and_signed(&csrs, "serving-n1-again").await;
    assert!(pending(&csrs, "wrong-ip").await);
    assert!(pending(&csrs, "n2-for-n1").await);
    Ok(())
}
