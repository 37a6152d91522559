//! Kubelet TLS bootstrap, as upstream's kubelet does it with `--bootstrap-kubeconfig`: a node
//! that holds only a bootstrap token and the cluster's CA certificate asks the API server for
//! its client certificate through a CertificateSigningRequest (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`, approved by the controller-manager for the
//! `system:bootstrappers` group), and then, as the node, for its serving certificate (signer
//! `kubernetes.io/kubelet-serving`). The node never sees the CA key, so it can run on a
//! machine that does not hold the cluster's PKI.
//!
//! The keys never leave the node: it makes them, sends only the request, and keeps key and
//! certificate in `<data-dir>/pki` (`kubelet-client.*`, `kubelet-server.*`), so a restart
//! reuses them while they are valid and the token may expire after the first join.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use minik8s_apiserver::pki::CertPair;
use minik8s_kubelet::server::serving_cert::ServingCert;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// How long a node waits for its request to be approved and signed (upstream's kubelet waits
/// as long for its client certificate).
const WAIT: Duration = Duration::from_secs(15 * 60);
/// A certificate this close to its end is asked for again at start.
const RENEW_BEFORE: Duration = Duration::from_secs(24 * 3600);

/// What the node needs to join: the API server, the CA that signed the server's certificate,
/// and a bootstrap token.
#[derive(Clone, Debug)]
pub struct Join {
    pub server: String,
    pub ca_pem: String,
    pub token: String,
}

/// A certificate request this node makes: the files it lives in and what it asks for.
struct Wanted<'a> {
    file_stem: &'a str,
    signer: &'a str,
    cn: String,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    usages: &'a [&'a str],
}

fn pki_paths(dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    )
}

/// The certificate and key kept under `stem`, if they are there, for the same subject and
/// names, signed by `ca_pem` and last long enough.
fn reusable(dir: &Path, wanted: &Wanted<'_>, ca_pem: &str) -> Option<CertPair> {
    let (cert_path, key_path) = pki_paths(dir, wanted.file_stem);
    let cert_pem = std::fs::read_to_string(cert_path).ok()?;
    let key_pem = std::fs::read_to_string(key_path).ok()?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    let (_, ca) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).ok()?;
    let ca = ca.parse_x509().ok()?;
    if cert.issuer() != ca.subject() || cert.verify_signature(Some(ca.public_key())).is_err() {
        return None;
    }
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    if cn != wanted.cn {
        return None;
    }
    let renew_at = jiff::Timestamp::now().as_second() + RENEW_BEFORE.as_secs() as i64;
    if cert.validity().not_after.timestamp() < renew_at {
        return None;
    }
    let names = cert.subject_alternative_name().ok().flatten();
    let (mut dns, mut ips) = (Vec::new(), Vec::new());
    for name in names.iter().flat_map(|n| n.value.general_names.iter()) {
        match name {
            x509_parser::extensions::GeneralName::DNSName(d) => dns.push(d.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*b).ok()?)),
                16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*b).ok()?)),
                _ => {}
            },
            _ => {}
        }
    }
    let covers =
        wanted.dns.iter().all(|d| dns.contains(d)) && wanted.ips.iter().all(|i| ips.contains(i));
    covers.then_some(CertPair { cert_pem, key_pem })
}

/// A fresh key and the PEM request for it.
fn request(wanted: &Wanted<'_>) -> anyhow::Result<(KeyPair, String)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(DnType::CommonName, wanted.cn.as_str());
    for d in &wanted.dns {
        params
            .subject_alt_names
            .push(SanType::DnsName(d.clone().try_into()?));
    }
    for ip in &wanted.ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    let csr = params.serialize_request(&key)?;
    Ok((key, csr.pem()?))
}

/// Why a request ended without a certificate, from its conditions.
fn refusal(csr: &CertificateSigningRequest) -> Option<String> {
    let conditions = csr.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status != "False")
        .map(|c| {
            format!(
                "{} ({}): {}",
                c.type_,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
        })
}

fn issued(csr: &CertificateSigningRequest) -> Option<String> {
    let cert = csr.status.as_ref()?.certificate.as_ref()?;
    (!cert.0.is_empty()).then(|| String::from_utf8_lossy(&cert.0).into_owned())
}

/// Sends the request as `client` and waits for its certificate; keeps key and certificate in
/// `dir` (key first, private) and returns them.
async fn obtain(client: kube::Client, dir: &Path, wanted: &Wanted<'_>) -> anyhow::Result<CertPair> {
    let (key, request_pem) = request(wanted)?;
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("csr-".into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.into_bytes()),
            signer_name: wanted.signer.to_string(),
            usages: Some(wanted.usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    // A token made a moment ago may not have reached the server's cache yet (401), and a
    // server just started may not answer yet: retried for a minute.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut backoff = Duration::from_millis(200);
    let created = loop {
        match csrs.create(&PostParams::default(), &csr).await {
            Ok(created) => break created,
            Err(e) if tokio::time::Instant::now() + backoff < deadline && retriable(&e) => {
                tracing::info!(error = %e, "creating the CertificateSigningRequest again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("creating a CertificateSigningRequest for {}", wanted.signer)
                });
            }
        }
    };
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(csr = %name, signer = wanted.signer, "waiting for the certificate (`kubectl certificate approve {name}` if it is not approved automatically)");
    let done = kube::runtime::wait::await_condition(
        csrs.clone(),
        &name,
        |c: Option<&CertificateSigningRequest>| {
            c.is_none_or(|c| issued(c).is_some() || refusal(c).is_some())
        },
    );
    let csr = tokio::time::timeout(WAIT, done)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "CertificateSigningRequest {name} was not approved and signed within {WAIT:?}"
            )
        })?
        .with_context(|| format!("watching CertificateSigningRequest {name}"))?
        .ok_or_else(|| {
            anyhow::anyhow!("CertificateSigningRequest {name} was deleted before it was signed")
        })?;
    if let Some(why) = refusal(&csr) {
        anyhow::bail!("CertificateSigningRequest {name}: {why}");
    }
    let cert_pem = issued(&csr).unwrap_or_default();
    let pair = CertPair {
        cert_pem,
        key_pem: key.serialize_pem(),
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (cert_path, key_path) = pki_paths(dir, wanted.file_stem);
    write(&key_path, &pair.key_pem, true)?;
    write(&cert_path, &pair.cert_pem, false)?;
    tracing::info!(csr = %name, path = %cert_path.display(), "certificate issued");
    Ok(pair)
}

/// Whether creating the request may work a moment later: not authenticated yet, the server
/// unreachable or overloaded.
fn retriable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 401 | 429 | 500 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn write(path: &Path, contents: &str, private: bool) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// A client of `join.server` trusting `join.ca_pem` and presenting the bootstrap token.
fn token_client(join: &Join) -> anyhow::Result<kube::Client> {
    let url = join
        .server
        .parse()
        .with_context(|| format!("--server {}: not a URL", join.server))?;
    let mut config = kube::Config::new(url);
    let ca = rustls_pemfile_ders(&join.ca_pem)?;
    config.root_cert = Some(ca);
    config.auth_info.token = Some(join.token.clone().into());
    Ok(kube::Client::try_from(config)?)
}

fn rustls_pemfile_ders(pem: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    let ders: Vec<Vec<u8>> = x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .filter_map(Result::ok)
        .filter(|p| p.label == "CERTIFICATE")
        .map(|p| p.contents)
        .collect();
    anyhow::ensure!(
        !ders.is_empty(),
        "--certificate-authority holds no PEM certificate"
    );
    Ok(ders)
}

/// The node's client certificate (`system:node:<name>` in `system:nodes`): the one kept in
/// `dir` while it lasts, else a new one asked for with the bootstrap token.
pub async fn client_certificate(join: &Join, node: &str, dir: &Path) -> anyhow::Result<CertPair> {
    let wanted = Wanted {
        file_stem: "kubelet-client",
        signer: CLIENT_SIGNER,
        cn: format!("system:node:{node}"),
        dns: Vec::new(),
        ips: Vec::new(),
        usages: &["digital signature", "client auth"],
    };
    if let Some(pair) = reusable(dir, &wanted, &join.ca_pem) {
        tracing::info!(node, "using the client certificate from an earlier join");
        return Ok(pair);
    }
    anyhow::ensure!(
        !join.token.is_empty(),
        "no valid client certificate in {} and no bootstrap token to ask for one",
        dir.display()
    );
    let client = token_client(join)?;
    obtain(client, dir, &wanted)
        .await
        .context("kubelet TLS bootstrap (client certificate)")
}

/// The kubelet's serving certificate: the one kept in `dir` if it still covers the node's
/// names, else a self-signed stand-in now and, in the background, the CA-signed one asked for
/// as the node (`client`) and swapped into `serving` once issued.
pub fn serving_certificate(
    client: kube::Client,
    node: &str,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    ca_pem: &str,
    dir: &Path,
) -> anyhow::Result<Arc<ServingCert>> {
    let wanted: Wanted<'static> = Wanted {
        file_stem: "kubelet-server",
        signer: SERVING_SIGNER,
        cn: format!("system:node:{node}"),
        dns,
        ips,
        usages: &["digital signature", "server auth"],
    };
    if let Some(pair) = reusable(dir, &wanted, ca_pem) {
        return Ok(ServingCert::new(&pair.cert_pem, &pair.key_pem)?);
    }
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(wanted.dns.clone())?;
    params
        .subject_alt_names
        .extend(wanted.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    let stand_in = params.self_signed(&key)?;
    let serving = ServingCert::new(&stand_in.pem(), &key.serialize_pem())?;
    let target = serving.clone();
    let dir = dir.to_path_buf();
    tokio::spawn(async move {
        let mut backoff = Duration::from_secs(1);
        loop {
            match obtain(client.clone(), &dir, &wanted).await {
                Ok(pair) => match target.set(&pair.cert_pem, &pair.key_pem) {
                    Ok(()) => return tracing::info!("kubelet serving certificate in use"),
                    Err(e) => {
                        tracing::error!(error = %e, "the issued serving certificate is unusable")
                    }
                },
                Err(e) => tracing::warn!(error = format!("{e:#}"), "kubelet serving certificate"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(300));
        }
    });
    Ok(serving)
}

#[cfg(test)]
mod tests {
    use super::*;
    use minik8s_apiserver::pki::{Pki, ServingNames};

    fn wanted(cn: &str, ips: Vec<IpAddr>) -> Wanted<'static> {
        Wanted {
            file_stem: "kubelet-server",
            signer: SERVING_SIGNER,
            cn: cn.to_string(),
            dns: vec!["n1".into()],
            ips,
            usages: &["digital signature", "server auth"],
        }
    }

    fn keep(dir: &Path, pair: &CertPair) {
        let (cert, key) = pki_paths(dir, "kubelet-server");
        write(&key, &pair.key_pem, true).unwrap();
        write(&cert, &pair.cert_pem, false).unwrap();
    }

    #[test]
    fn a_kept_certificate_is_reused_only_while_it_fits() {
        let ca_dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(ca_dir.path(), &ServingNames::default()).unwrap();
        let node_dir = tempfile::tempdir().unwrap();
        let ip: IpAddr = "172.30.0.2".parse().unwrap();
        let names = ServingNames {
            dns: vec!["n1".into()],
            ips: vec![ip],
        };
        let pair = pki
            .issue("system:node:n1", &["system:nodes"], &names, true)
            .unwrap();
        // Nothing kept yet.
        assert!(
            reusable(
                node_dir.path(),
                &wanted("system:node:n1", vec![ip]),
                &pki.ca.cert_pem
            )
            .is_none()
        );
        keep(node_dir.path(), &pair);
        let reused = reusable(
            node_dir.path(),
            &wanted("system:node:n1", vec![ip]),
            &pki.ca.cert_pem,
        )
        .expect("the kept certificate fits");
        assert_eq!(reused.cert_pem, pair.cert_pem);
        // Another node's name, an address it does not cover, another cluster's CA: asked anew.
        assert!(
            reusable(
                node_dir.path(),
                &wanted("system:node:n2", vec![ip]),
                &pki.ca.cert_pem
            )
            .is_none()
        );
        let other_ip: IpAddr = "172.30.0.3".parse().unwrap();
        assert!(
            reusable(
                node_dir.path(),
                &wanted("system:node:n1", vec![other_ip]),
                &pki.ca.cert_pem
            )
            .is_none()
        );
        let other_dir = tempfile::tempdir().unwrap();
        let other = Pki::ensure(other_dir.path(), &ServingNames::default()).unwrap();
        assert!(
            reusable(
                node_dir.path(),
                &wanted("system:node:n1", vec![ip]),
                &other.ca.cert_pem
            )
            .is_none()
        );
    }

    #[test]
    fn the_request_names_the_node_in_system_nodes() {
        let ip: IpAddr = "172.30.0.2".parse().unwrap();
        let (_, pem) = request(&wanted("system:node:n1", vec![ip])).unwrap();
        let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        assert_eq!(der.label, "CERTIFICATE REQUEST");
        let (_, csr) = <x509_parser::certification_request::X509CertificationRequest as x509_parser::prelude::FromDer<'_, _>>::from_der(&der.contents).unwrap();
        let subject = &csr.certification_request_info.subject;
        assert_eq!(
            subject.iter_common_name().next().unwrap().as_str().unwrap(),
            "system:node:n1"
        );
        assert_eq!(
            subject
                .iter_organization()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "system:nodes"
        );
    }

    #[test]
    fn a_denied_request_says_why() {
        let csr: CertificateSigningRequest = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "csr-x"},
            "spec": {"request": "", "signerName": CLIENT_SIGNER},
            "status": {"conditions": [{"type": "Denied", "status": "True", "reason": "NotAllowed", "message": "no"}]},
        }))
        .unwrap();
        assert_eq!(refusal(&csr).unwrap(), "Denied (NotAllowed): no");
        assert!(issued(&csr).is_none());
    }
}
