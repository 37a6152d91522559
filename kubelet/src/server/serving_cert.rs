//! The kubelet's serving certificate as a value that can change while the API listens: a node
//! that joined with a bootstrap token starts on a self-signed certificate and swaps in the one
//! its kubelet-serving CSR brings once it is issued (upstream's certificate manager), without
//! a restart and without dropping open exec or log streams.

use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::ServeError;

/// The certificate and key the kubelet's API presents now.
pub struct ServingCert {
    current: RwLock<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, ServeError> {
    let tls = |e: &dyn std::fmt::Display| ServeError::Tls(e.to_string());
    let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls(&e))?;
    if certs.is_empty() {
        return Err(ServeError::Tls("serving certificate missing".into()));
    }
    let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
        .map_err(|e| tls(&e))?
        .ok_or_else(|| ServeError::Tls("serving key missing".into()))?;
    let provider = rustls::crypto::ring::default_provider();
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| tls(&e))?;
    Ok(Arc::new(CertifiedKey::new(certs, key)))
}

impl ServingCert {
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<ServingCert>, ServeError> {
        Ok(Arc::new(ServingCert {
            current: RwLock::new(certified_key(cert_pem, key_pem)?),
        }))
    }

    /// Presents `cert_pem` from the next handshake on; connections already open keep theirs.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<(), ServeError> {
        let key = certified_key(cert_pem, key_pem)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = key;
        Ok(())
    }

    fn get(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn set_replaces_what_the_next_handshake_gets() {
        let (a_cert, a_key) = self_signed("a");
        let (b_cert, b_key) = self_signed("b");
        let serving = ServingCert::new(&a_cert, &a_key).unwrap();
        let first = serving.get().cert[0].clone();
        serving.set(&b_cert, &b_key).unwrap();
        let second = serving.get().cert[0].clone();
        assert_ne!(first, second);
        let der = rustls_pemfile::certs(&mut b_cert.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(second, der);
    }

    #[test]
    fn bad_material_is_refused_and_keeps_the_current_one() {
        let (a_cert, a_key) = self_signed("a");
        let serving = ServingCert::new(&a_cert, &a_key).unwrap();
        let before = serving.get().cert[0].clone();
        assert!(serving.set("not a certificate", &a_key).is_err());
        assert!(serving.set(&a_cert, "not a key").is_err());
        assert_eq!(serving.get().cert[0], before);
    }
}
