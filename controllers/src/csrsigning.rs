//! The CSR signing controller, as upstream's pkg/controller/certificates/signer: issues the
//! certificates of approved CertificateSigningRequests for the built-in signers with the
//! cluster CA (`--cluster-signing-cert-file`/`--cluster-signing-key-file`), so `kubectl
//! certificate approve` ends with a certificate a client can use against this API server.
//! A request its signer must not sign (a kubelet certificate for someone who is not a node,
//! usages the signer does not give) gets the `Failed` condition upstream writes instead.
//!
//! Each signer's rules are upstream's (`ValidateKubeletClientCSR`,
//! `ValidateKubeletServingCSR`, `validAPIServerClientUsages`); the certificate keeps the
//! request's subject and names, carries the requested usages, starts five minutes back (clock
//! skew) and lasts `expirationSeconds` or `--cluster-signing-duration`, whichever is shorter,
//! never past the CA itself.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use rcgen::{
    CertificateSigningRequestParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509CertificationRequest};

use crate::informers::Informers;
use crate::util::reconciler::Error;
use crate::util::runtime;

pub const NAME: &str = "certificatesigningrequest-signing-controller";

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// How far back certificates start, as upstream's signer (`backdate`).
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Certificates living at least this long include the backdate in their lifetime
/// (upstream's `Short`: 5 minutes is about 1% of 8 hours).
const SHORT: Duration = Duration::from_secs(8 * 3600);

/// The cluster CA and how long its certificates last (upstream's `--cluster-signing-*`).
#[derive(Clone, Debug)]
pub struct SigningOptions {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub duration: Duration,
}

/// Why a request was not signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The request breaks its signer's rules: it is marked Failed.
    #[error("{0}")]
    Refused(String),
    /// Something to retry or fix outside the request (an unreadable CSR, the CA).
    #[error("{0}")]
    Failed(String),
}

/// What a request parses to: the parts the signers' rules (and the approver) look at.
pub(crate) struct Request {
    pub(crate) organizations: Vec<String>,
    pub(crate) common_name: String,
    pub(crate) dns_names: Vec<String>,
    pub(crate) ip_addresses: Vec<std::net::IpAddr>,
    dns: usize,
    emails: usize,
    ips: usize,
    uris: usize,
    repeated_attributes: bool,
}

pub(crate) fn parse(pem: &[u8]) -> Result<Request, SignError> {
    let unparsable = |e: String| SignError::Failed(format!("unable to parse csr: {e}"));
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|e| unparsable(e.to_string()))?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err(unparsable(format!(
            "PEM block type must be CERTIFICATE REQUEST, not {}",
            block.label
        )));
    }
    let (_, csr) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| unparsable(e.to_string()))?;
    let subject = &csr.certification_request_info.subject;
    let strings = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        it.filter_map(|a| a.as_str().ok().map(String::from))
            .collect::<Vec<_>>()
    };
    let organizations = strings(&mut subject.iter_organization());
    let common_name = strings(&mut subject.iter_common_name())
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut types = BTreeSet::new();
    let repeated_attributes = !subject
        .iter_attributes()
        .all(|a| types.insert(a.attr_type().to_id_string()));
    let mut request = Request {
        organizations,
        common_name,
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        dns: 0,
        emails: 0,
        ips: 0,
        uris: 0,
        repeated_attributes,
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => {
                        request.dns += 1;
                        request.dns_names.push(d.to_string());
                    }
                    GeneralName::RFC822Name(_) => request.emails += 1,
                    GeneralName::IPAddress(b) => {
                        request.ips += 1;
                        if let Ok(v4) = <[u8; 4]>::try_from(*b) {
                            request.ip_addresses.push(v4.into());
                        } else if let Ok(v6) = <[u8; 16]>::try_from(*b) {
                            request.ip_addresses.push(v6.into());
                        }
                    }
                    GeneralName::URI(_) => request.uris += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(request)
}

fn usages_match(
    usages: &BTreeSet<&str>,
    with_rsa: &[&str],
    without_rsa: &[&str],
) -> Result<(), String> {
    fn set<'a>(u: &[&'a str]) -> BTreeSet<&'a str> {
        u.iter().copied().collect()
    }
    if *usages == set(with_rsa) || *usages == set(without_rsa) {
        return Ok(());
    }
    Err(format!(
        "usages did not match [{}]",
        set(with_rsa).into_iter().collect::<Vec<_>>().join(" ")
    ))
}

/// Upstream's rules of each built-in signer; `None` for the signers this one does not serve.
pub(crate) fn check(signer: &str, req: &Request, usages: &[String]) -> Option<Result<(), String>> {
    let usages: BTreeSet<&str> = usages.iter().map(String::as_str).collect();
    let node_subject = || {
        if req.organizations != ["system:nodes"] {
            return Err("subject organization is not system:nodes".to_string());
        }
        Ok(())
    };
    let node_name = || {
        if !req.common_name.starts_with("system:node:") {
            return Err("subject common name does not begin with system:node:".to_string());
        }
        Ok(())
    };
    let result = match signer {
        KUBE_APISERVER_CLIENT_KUBELET => (|| {
            node_subject()?;
            for (count, kind) in [
                (req.dns, "DNS"),
                (req.emails, "Email"),
                (req.ips, "IP"),
                (req.uris, "URI"),
            ] {
                if count > 0 {
                    return Err(format!("{kind} subjectAltNames are not allowed"));
                }
            }
            node_name()?;
            usages_match(
                &usages,
                &["digital signature", "key encipherment", "client auth"],
                &["digital signature", "client auth"],
            )
        })(),
        KUBELET_SERVING => (|| {
            node_subject()?;
            if req.dns == 0 && req.ips == 0 {
                return Err("DNS or IP subjectAltName is required".to_string());
            }
            if req.emails > 0 {
                return Err("Email subjectAltNames are not allowed".to_string());
            }
            if req.uris > 0 {
                return Err("URI subjectAltNames are not allowed".to_string());
            }
            usages_match(
                &usages,
                &["digital signature", "key encipherment", "server auth"],
                &["digital signature", "server auth"],
            )?;
            node_name()
        })(),
        KUBE_APISERVER_CLIENT => (|| {
            let mut client_auth = false;
            for u in &usages {
                match *u {
                    "digital signature" | "key encipherment" => {}
                    "client auth" => client_auth = true,
                    other => return Err(format!("invalid usage for client certificate: {other}")),
                }
            }
            if !client_auth {
                return Err(
                    "missing required usage for client certificate: client auth".to_string()
                );
            }
            Ok(())
        })(),
        LEGACY_UNKNOWN => Ok(()),
        _ => return None,
    };
    Some(result)
}

fn key_usage(usage: &str) -> Option<KeyUsagePurpose> {
    Some(match usage {
        "signing" | "digital signature" => KeyUsagePurpose::DigitalSignature,
        "content commitment" => KeyUsagePurpose::ContentCommitment,
        "key encipherment" => KeyUsagePurpose::KeyEncipherment,
        "key agreement" => KeyUsagePurpose::KeyAgreement,
        "data encipherment" => KeyUsagePurpose::DataEncipherment,
        "cert sign" => KeyUsagePurpose::KeyCertSign,
        "crl sign" => KeyUsagePurpose::CrlSign,
        "encipher only" => KeyUsagePurpose::EncipherOnly,
        "decipher only" => KeyUsagePurpose::DecipherOnly,
        _ => return None,
    })
}

fn extended_key_usage(usage: &str) -> Option<ExtendedKeyUsagePurpose> {
    let other = |oid: &[u64]| ExtendedKeyUsagePurpose::Other(oid.to_vec());
    Some(match usage {
        "any" => ExtendedKeyUsagePurpose::Any,
        "server auth" => ExtendedKeyUsagePurpose::ServerAuth,
        "client auth" => ExtendedKeyUsagePurpose::ClientAuth,
        "code signing" => ExtendedKeyUsagePurpose::CodeSigning,
        "email protection" | "s/mime" => ExtendedKeyUsagePurpose::EmailProtection,
        "ipsec end system" => other(&[1, 3, 6, 1, 5, 5, 7, 3, 5]),
        "ipsec tunnel" => other(&[1, 3, 6, 1, 5, 5, 7, 3, 6]),
        "ipsec user" => other(&[1, 3, 6, 1, 5, 5, 7, 3, 7]),
        "timestamping" => ExtendedKeyUsagePurpose::TimeStamping,
        "ocsp signing" => ExtendedKeyUsagePurpose::OcspSigning,
        "microsoft sgc" => other(&[1, 3, 6, 1, 4, 1, 311, 10, 3, 3]),
        "netscape sgc" => other(&[2, 16, 840, 1, 113730, 4, 1]),
        _ => return None,
    })
}

fn offset(t: Timestamp) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(t.as_second())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// The PEM certificate `csr` gets from its signer at `now`; `Ok(None)` for requests that are
/// not this controller's (another signer's).
pub fn sign(
    csr: &CertificateSigningRequest,
    options: &SigningOptions,
    now: Timestamp,
) -> Result<Option<String>, SignError> {
    let spec = &csr.spec;
    let request = parse(&spec.request.0)?;
    let usages = spec.usages.clone().unwrap_or_default();
    match check(&spec.signer_name, &request, &usages) {
        None => return Ok(None),
        Some(Err(why)) => return Err(SignError::Refused(why)),
        Some(Ok(())) => {}
    }
    if request.repeated_attributes {
        return Err(SignError::Refused(
            "subjects that repeat an attribute (several O values) cannot be signed here".into(),
        ));
    }
    let pem = String::from_utf8_lossy(&spec.request.0);
    let mut params = CertificateSigningRequestParams::from_pem(&pem)
        .map_err(|e| SignError::Failed(format!("unable to parse csr: {e}")))?;
    let ca_key = KeyPair::from_pem(&options.ca_key_pem)
        .map_err(|e| SignError::Failed(format!("the signing key: {e}")))?;
    let ca_not_after = x509_parser::pem::parse_x509_pem(options.ca_cert_pem.as_bytes())
        .ok()
        .and_then(|(_, p)| {
            p.parse_x509()
                .ok()
                .map(|c| c.validity().not_after.timestamp())
        });
    let issuer = Issuer::from_ca_cert_pem(&options.ca_cert_pem, ca_key)
        .map_err(|e| SignError::Failed(format!("the signing certificate: {e}")))?;
    let mut lifetime = options.duration;
    if let Some(seconds) = spec.expiration_seconds {
        lifetime = lifetime.min(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)));
    }
    let p = &mut params.params;
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = usages.iter().filter_map(|u| key_usage(u)).collect();
    p.extended_key_usages = usages
        .iter()
        .filter_map(|u| extended_key_usage(u))
        .collect();
    p.not_before = offset(now) - BACKDATE;
    // Upstream's signing policy: a short certificate gets the backdate on top of its
    // lifetime; from SHORT on, the lifetime includes it.
    let mut not_after = if lifetime < SHORT {
        offset(now) + lifetime
    } else {
        offset(now) + lifetime - BACKDATE
    };
    if let Some(ca_end) =
        ca_not_after.and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
    {
        not_after = not_after.min(ca_end);
    }
    p.not_after = not_after;
    let mut serial = [0u8; 16];
    rand::Rng::fill(&mut rand::rng(), &mut serial[..]);
    serial[0] &= 0x7f;
    p.serial_number = Some(SerialNumber::from_slice(&serial));
    let cert = params
        .signed_by(&issuer)
        .map_err(|e| SignError::Failed(format!("signing: {e}")))?;
    Ok(Some(cert.pem()))
}

fn is_true(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

struct Ctx {
    client: Client,
    options: SigningOptions,
}

pub async fn run(informers: Arc<Informers>, options: SigningOptions) {
    let csrs = informers.of::<CertificateSigningRequest>();
    let queue = csrs.touched().map(|c| ObjectRef::from_obj(c.as_ref()));
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        options,
    });
    // Upstream's certificate controllers share one queue name.
    runtime::run("certificate", csrs.store(), queue, reconcile, ctx).await
}

async fn reconcile(csr: Arc<CertificateSigningRequest>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if issued || !is_true(&csr, "Approved") || is_true(&csr, "Failed") {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let mut updated = (*csr).clone();
    let status = updated.status.get_or_insert_with(Default::default);
    match sign(&csr, &ctx.options, now) {
        Ok(None) => return Ok(Action::await_change()),
        Ok(Some(pem)) => {
            tracing::info!(csr = %csr.name_any(), signer = %csr.spec.signer_name, "issued a certificate");
            status.certificate = Some(ByteString(pem.into_bytes()));
        }
        Err(SignError::Refused(why)) => {
            tracing::info!(csr = %csr.name_any(), %why, "refused to sign");
            status.conditions.get_or_insert_with(Vec::new).push(
                CertificateSigningRequestCondition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: Some("SignerValidationFailure".into()),
                    message: Some(why),
                    last_update_time: Some(Time(now)),
                    last_transition_time: Some(Time(now)),
                },
            );
        }
        Err(SignError::Failed(why)) => {
            tracing::warn!(csr = %csr.name_any(), %why, "cannot sign");
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
    }
    // The status carries the resourceVersion read: a concurrent change is a 409, retried.
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    api.replace_status(&csr.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, SanType};
    use serde_json::json;

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
            duration: Duration::from_secs(365 * 24 * 3600),
        }
    }

    fn request(cn: &str, org: Option<&str>, dns: &[&str]) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        for d in dns {
            params
                .subject_alt_names
                .push(SanType::DnsName((*d).try_into().unwrap()));
        }
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn csr(
        signer: &str,
        pem: &str,
        usages: &[&str],
        expiration: Option<i32>,
    ) -> CertificateSigningRequest {
        serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"signerName": signer, "usages": usages, "expirationSeconds": expiration,
                     "request": k8s_openapi::ByteString(pem.as_bytes().to_vec())},
        }))
        .unwrap()
    }

    fn refused(r: Result<Option<String>, SignError>) -> String {
        match r {
            Err(SignError::Refused(why)) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn client_certificates_keep_the_subject_and_get_the_usages_and_lifetime() {
        let ca = ca();
        let now = Timestamp::now();
        let pem = request("alice", Some("dev"), &[]);
        let req = csr(
            KUBE_APISERVER_CLIENT,
            &pem,
            &["digital signature", "client auth"],
            Some(3600),
        );
        let cert = sign(&req, &ca, now).unwrap().unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
        let cert = block.parse_x509().unwrap();
        let subject = cert.subject();
        assert_eq!(
            subject.iter_common_name().next().unwrap().as_str().unwrap(),
            "alice"
        );
        assert_eq!(
            subject
                .iter_organization()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "dev"
        );
        assert_eq!(
            cert.issuer()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "test-ca"
        );
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let validity = cert.validity();
        assert_eq!(
            validity.not_after.timestamp() - validity.not_before.timestamp(),
            3600 + 300
        );
        assert!(!cert.is_ca());
    }

    #[test]
    fn each_signer_keeps_its_rules() {
        let ca = ca();
        let now = Timestamp::now();
        let client = ["digital signature", "key encipherment", "client auth"];
        assert_eq!(
            refused(sign(
                &csr(
                    KUBE_APISERVER_CLIENT,
                    &request("a", None, &[]),
                    &["server auth"],
                    None
                ),
                &ca,
                now
            )),
            "invalid usage for client certificate: server auth"
        );
        assert_eq!(
            refused(sign(
                &csr(
                    KUBE_APISERVER_CLIENT,
                    &request("a", None, &[]),
                    &["digital signature"],
                    None
                ),
                &ca,
                now
            )),
            "missing required usage for client certificate: client auth"
        );
        let kubelet = |cn: &str, org: Option<&str>, dns: &[&str], usages: &[&str]| {
            csr(
                KUBE_APISERVER_CLIENT_KUBELET,
                &request(cn, org, dns),
                usages,
                None,
            )
        };
        assert!(
            sign(
                &kubelet("system:node:n1", Some("system:nodes"), &[], &client),
                &ca,
                now
            )
            .unwrap()
            .is_some()
        );
        assert_eq!(
            refused(sign(
                &kubelet("system:node:n1", Some("dev"), &[], &client),
                &ca,
                now
            )),
            "subject organization is not system:nodes"
        );
        assert_eq!(
            refused(sign(
                &kubelet("bob", Some("system:nodes"), &[], &client),
                &ca,
                now
            )),
            "subject common name does not begin with system:node:"
        );
        assert_eq!(
            refused(sign(
                &kubelet("system:node:n1", Some("system:nodes"), &["n1"], &client),
                &ca,
                now
            )),
            "DNS subjectAltNames are not allowed"
        );
        assert_eq!(
            refused(sign(
                &kubelet(
                    "system:node:n1",
                    Some("system:nodes"),
                    &[],
                    &["client auth"]
                ),
                &ca,
                now
            )),
            "usages did not match [client auth digital signature key encipherment]"
        );
        let serving = |dns: &[&str]| {
            csr(
                KUBELET_SERVING,
                &request("system:node:n1", Some("system:nodes"), dns),
                &["digital signature", "server auth"],
                None,
            )
        };
        assert!(sign(&serving(&["n1.example"]), &ca, now).unwrap().is_some());
        assert_eq!(
            refused(sign(&serving(&[]), &ca, now)),
            "DNS or IP subjectAltName is required"
        );
        // Other signers are someone else's.
        let other = csr(
            "example.com/signer",
            &request("a", None, &[]),
            &client,
            None,
        );
        assert!(sign(&other, &ca, now).unwrap().is_none());
    }
}
