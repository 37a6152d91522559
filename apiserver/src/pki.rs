//! The cluster's certificates, made on first start and kept in `<data-dir>/pki`: a CA, the
//! serving certificate (re-issued when its names no longer cover the server's addresses) and
//! client certificates such as the admin's (O=system:masters).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("{0}: not a valid PEM certificate or key")]
    Pem(PathBuf),
}

/// A certificate and its key, PEM encoded.
#[derive(Clone, Debug)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

#[derive(Clone, Debug)]
pub struct Pki {
    pub dir: PathBuf,
    pub ca: CertPair,
    pub serving: CertPair,
}

fn read(path: &Path) -> Result<Option<String>, PkiError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PkiError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write(path: &Path, contents: &str, private: bool) -> Result<(), PkiError> {
    let io = |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).map_err(io)?;
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
}

fn validity(params: &mut CertificateParams, years: i16) {
    let today = jiff::Zoned::now().date();
    let start = today.yesterday().unwrap_or(today);
    let end = today.saturating_add(jiff::Span::new().years(years));
    params.not_before =
        rcgen::date_time_ymd(start.year().into(), start.month() as u8, start.day() as u8);
    params.not_after = rcgen::date_time_ymd(end.year().into(), end.month() as u8, end.day() as u8);
}

/// The names the serving certificate must carry.
#[derive(Clone, Debug, Default)]
pub struct ServingNames {
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl ServingNames {
    /// Upstream's list: the hostname, loopback, node addresses, the service IP and the
    /// `kubernetes` service names.
    pub fn standard(hostname: &str, addresses: &[IpAddr], service_ip: Option<IpAddr>) -> Self {
        let mut dns = vec![
            "localhost".to_string(),
            "kubernetes".into(),
            "kubernetes.default".into(),
            "kubernetes.default.svc".into(),
            "kubernetes.default.svc.cluster.local".into(),
        ];
        if !hostname.is_empty() && !dns.iter().any(|d| d == hostname) {
            dns.push(hostname.to_string());
        }
        let mut ips: Vec<IpAddr> = vec!["127.0.0.1".parse().expect("loopback")];
        ips.extend(addresses.iter().copied());
        ips.extend(service_ip);
        ips.sort();
        ips.dedup();
        ServingNames { dns, ips }
    }
}

/// The names a PEM certificate covers, to decide whether to re-issue it.
fn covered_names(cert_pem: &str) -> Option<(Vec<String>, Vec<IpAddr>)> {
    let der = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .next()?
        .ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
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
    }
    Some((dns, ips))
}

/// Whether a PEM certificate is for user `cn` in exactly `groups`.
fn names(cert_pem: &str, cn: &str, groups: &[&str]) -> bool {
    let der = match rustls_pemfile::certs(&mut cert_pem.as_bytes()).next() {
        Some(Ok(der)) => der,
        _ => return false,
    };
    crate::auth::user_from_certificate(&der).is_some_and(|u| {
        u.name == cn
            && u.groups
                .iter()
                .map(String::as_str)
                .eq(groups.iter().copied())
    })
}

impl Pki {
    /// Loads the PKI from `dir`, creating what is missing.
    pub fn ensure(dir: &Path, names: &ServingNames) -> Result<Pki, PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let ca_cert_path = dir.join("ca.crt");
        let ca_key_path = dir.join("ca.key");
        let ca = match (read(&ca_cert_path)?, read(&ca_key_path)?) {
            (Some(cert_pem), Some(key_pem)) => CertPair { cert_pem, key_pem },
            _ => {
                let key = KeyPair::generate()?;
                let mut params = CertificateParams::default();
                params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                params.distinguished_name = DistinguishedName::new();
                params
                    .distinguished_name
                    .push(DnType::CommonName, "minik8s-ca");
                params.key_usages = vec![
                    KeyUsagePurpose::KeyCertSign,
                    KeyUsagePurpose::CrlSign,
                    KeyUsagePurpose::DigitalSignature,
                ];
                validity(&mut params, 10);
                let cert = params.self_signed(&key)?;
                let pair = CertPair {
                    cert_pem: cert.pem(),
                    key_pem: key.serialize_pem(),
                };
                write(&ca_key_path, &pair.key_pem, true)?;
                write(&ca_cert_path, &pair.cert_pem, false)?;
                pair
            }
        };
        let mut pki = Pki {
            dir: dir.to_path_buf(),
            serving: CertPair {
                cert_pem: String::new(),
                key_pem: String::new(),
            },
            ca,
        };
        let serving_cert_path = dir.join("serving.crt");
        let serving_key_path = dir.join("serving.key");
        let existing = match (read(&serving_cert_path)?, read(&serving_key_path)?) {
            (Some(cert_pem), Some(key_pem)) => {
                let covers = covered_names(&cert_pem).is_some_and(|(dns, ips)| {
                    names.dns.iter().all(|d| dns.contains(d))
                        && names.ips.iter().all(|i| ips.contains(i))
                });
                covers.then_some(CertPair { cert_pem, key_pem })
            }
            _ => None,
        };
        pki.serving = match existing {
            Some(pair) => pair,
            None => {
                let pair = pki.issue("kube-apiserver", &[], names, true)?;
                write(&serving_key_path, &pair.key_pem, true)?;
                write(&serving_cert_path, &pair.cert_pem, false)?;
                pair
            }
        };
        Ok(pki)
    }

    /// Issues a certificate signed by the CA: a server certificate for `names`, or a client
    /// certificate for user `cn` in `groups`.
    pub fn issue(
        &self,
        cn: &str,
        groups: &[&str],
        names: &ServingNames,
        server: bool,
    ) -> Result<CertPair, PkiError> {
        let ca_key = KeyPair::from_pem(&self.ca.key_pem)
            .map_err(|_| PkiError::Pem(self.dir.join("ca.key")))?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca.cert_pem, ca_key)
            .map_err(|_| PkiError::Pem(self.dir.join("ca.crt")))?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        for d in &names.dns {
            params
                .subject_alt_names
                .push(SanType::DnsName(d.clone().try_into()?));
        }
        for ip in &names.ips {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        validity(&mut params, 1);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate kept in `dir` under `file_stem` (`admin` → admin.crt, admin.key).
    /// One kept for another user or other groups (a data directory from a version that
    /// issued it differently) is issued again: the identity is what the file is for.
    pub fn client(&self, file_stem: &str, cn: &str, groups: &[&str]) -> Result<CertPair, PkiError> {
        let cert_path = self.dir.join(format!("{file_stem}.crt"));
        let key_path = self.dir.join(format!("{file_stem}.key"));
        if let (Some(cert_pem), Some(key_pem)) = (read(&cert_path)?, read(&key_path)?) {
            if names(&cert_pem, cn, groups) {
                return Ok(CertPair { cert_pem, key_pem });
            }
            tracing::info!(file = %cert_path.display(), user = cn, ?groups, "issuing the client certificate again for its new subject");
        }
        let pair = self.issue(cn, groups, &ServingNames::default(), false)?;
        write(&key_path, &pair.key_pem, true)?;
        write(&cert_path, &pair.cert_pem, false)?;
        Ok(pair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_and_reissues() {
        let dir = tempfile::tempdir().unwrap();
        let names = ServingNames::standard(
            "node-a",
            &["10.0.0.5".parse().unwrap()],
            Some("10.96.0.1".parse().unwrap()),
        );
        let pki = Pki::ensure(dir.path(), &names).unwrap();
        let (dns, ips) = covered_names(&pki.serving.cert_pem).unwrap();
        assert!(dns.contains(&"kubernetes.default.svc".to_string()));
        assert!(ips.contains(&"10.96.0.1".parse().unwrap()));
        // Same names: the certificate is kept.
        let again = Pki::ensure(dir.path(), &names).unwrap();
        assert_eq!(again.serving.cert_pem, pki.serving.cert_pem);
        assert_eq!(again.ca.cert_pem, pki.ca.cert_pem);
        // A new address: re-issued by the same CA.
        let more = ServingNames::standard("node-a", &["10.0.0.6".parse().unwrap()], None);
        let third = Pki::ensure(dir.path(), &more).unwrap();
        assert_ne!(third.serving.cert_pem, pki.serving.cert_pem);
        let admin = pki
            .client("admin", "minik8s-admin", &["system:masters"])
            .unwrap();
        let der = rustls_pemfile::certs(&mut admin.cert_pem.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let user = crate::auth::user_from_certificate(&der).unwrap();
        assert_eq!(user.name, "minik8s-admin");
        assert_eq!(user.groups, vec!["system:masters"]);
    }

    #[test]
    fn client_certificates_follow_their_subject() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path(), &ServingNames::default()).unwrap();
        let user = "kube-apiserver-kubelet-client";
        let old = pki
            .client("apiserver-kubelet-client", user, &["system:masters"])
            .unwrap();
        // Kept while the subject is the same.
        let same = pki
            .client("apiserver-kubelet-client", user, &["system:masters"])
            .unwrap();
        assert_eq!(same.cert_pem, old.cert_pem);
        // A data directory from before the groups changed: issued again, then kept.
        let new = pki.client("apiserver-kubelet-client", user, &[]).unwrap();
        assert_ne!(new.cert_pem, old.cert_pem);
        assert!(names(&new.cert_pem, user, &[]));
        assert!(!names(&new.cert_pem, user, &["system:masters"]));
        let again = pki.client("apiserver-kubelet-client", user, &[]).unwrap();
        assert_eq!(again.cert_pem, new.cert_pem);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("apiserver-kubelet-client.crt")).unwrap(),
            new.cert_pem
        );
    }
}
