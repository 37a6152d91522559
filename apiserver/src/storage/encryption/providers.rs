//! The value transformers of encryption at rest, byte for byte as kube-apiserver's: a value
//! written by kube-apiserver with the same key reads here and the other way round.
//!
//! Stored form: `k8s:enc:<provider>:v1:<key name>:` then the provider's bytes: `aescbc` a
//! random 16-byte IV then the PKCS#7-padded ciphertext; `aesgcm` a random 12-byte nonce then
//! the ciphertext and tag, with the storage key as additional data; `secretbox` a random
//! 24-byte nonce then NaCl's box (tag first). `identity` stores the value as it is.

use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::NoPadding};
use aes_gcm::aead::{Aead, KeyInit, Payload};
use ring::rand::{SecureRandom, SystemRandom};

/// What every encrypted value starts with; identity refuses to read such a value.
pub const ENCRYPTED_PREFIX: &str = "k8s:enc:";
pub const AESCBC_PREFIX: &str = "k8s:enc:aescbc:v1:";
pub const AESGCM_PREFIX: &str = "k8s:enc:aesgcm:v1:";
pub const SECRETBOX_PREFIX: &str = "k8s:enc:secretbox:v1:";

const AES_BLOCK: usize = 16;
const GCM_NONCE: usize = 12;
const GCM_TAG: usize = 16;
const SECRETBOX_NONCE: usize = 24;
const SECRETBOX_TAG: usize = 16;

/// Why a value could not be transformed; the messages are upstream's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TransformError(pub String);

fn err(msg: impl Into<String>) -> TransformError {
    TransformError(msg.into())
}

fn random(buf: &mut [u8]) -> Result<(), TransformError> {
    SystemRandom::new()
        .fill(buf)
        .map_err(|_| err("unable to read sufficient random bytes"))
}

/// An AES key of 16, 24 or 32 bytes.
#[derive(Clone)]
enum AesKey {
    A128([u8; 16]),
    A192([u8; 24]),
    A256([u8; 32]),
}

impl AesKey {
    fn new(key: &[u8]) -> Option<AesKey> {
        Some(match key.len() {
            16 => AesKey::A128(key.try_into().ok()?),
            24 => AesKey::A192(key.try_into().ok()?),
            32 => AesKey::A256(key.try_into().ok()?),
            _ => return None,
        })
    }
}

/// One named key of a provider.
#[derive(Clone)]
enum Cipher {
    AesCbc(AesKey),
    AesGcm(AesKey),
    Secretbox([u8; 32]),
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.write_str(match self {
            Cipher::AesCbc(_) => "AesCbc(..)",
            Cipher::AesGcm(_) => "AesGcm(..)",
            Cipher::Secretbox(_) => "Secretbox(..)",
        })
    }
}

macro_rules! with_aes {
    ($key:expr, $alg:ident, $k:ident => $body:expr) => {
        match $key {
            AesKey::A128($k) => {
                type $alg = aes::Aes128;
                $body
            }
            AesKey::A192($k) => {
                type $alg = aes::Aes192;
                $body
            }
            AesKey::A256($k) => {
                type $alg = aes::Aes256;
                $body
            }
        }
    };
}

impl Cipher {
    fn seal(&self, data: &[u8], ad: &[u8]) -> Result<Vec<u8>, TransformError> {
        match self {
            Cipher::AesCbc(key) => {
                let padding = AES_BLOCK - data.len() % AES_BLOCK;
                let mut out = vec![0u8; AES_BLOCK + data.len() + padding];
                random(&mut out[..AES_BLOCK])?;
                out[AES_BLOCK..AES_BLOCK + data.len()].copy_from_slice(data);
                out[AES_BLOCK + data.len()..].fill(padding as u8);
                let (iv, body) = out.split_at_mut(AES_BLOCK);
                let len = body.len();
                with_aes!(key, Alg, k => {
                    cbc::Encryptor::<Alg>::new(k.into(), (&*iv).into())
                        .encrypt_padded_mut::<NoPadding>(body, len)
                        .map_err(|_| err("the data is not a multiple of the block size"))?;
                });
                Ok(out)
            }
            Cipher::AesGcm(key) => {
                let mut nonce = [0u8; GCM_NONCE];
                random(&mut nonce)?;
                let payload = Payload { msg: data, aad: ad };
                let sealed = with_aes!(key, Alg, k => {
                    aes_gcm::AesGcm::<Alg, aes_gcm::aead::consts::U12>::new(k.into())
                        .encrypt((&nonce).into(), payload)
                })
                .map_err(|_| err("failed to encrypt with AES-GCM"))?;
                let mut out = Vec::with_capacity(GCM_NONCE + sealed.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
            Cipher::Secretbox(key) => {
                let mut nonce = [0u8; SECRETBOX_NONCE];
                random(&mut nonce)?;
                let sealed = crypto_secretbox::XSalsa20Poly1305::new(key.into())
                    .encrypt((&nonce).into(), data)
                    .map_err(|_| err("failed to encrypt with secretbox"))?;
                let mut out = Vec::with_capacity(SECRETBOX_NONCE + sealed.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out)
            }
        }
    }

    fn open(&self, data: &[u8], ad: &[u8]) -> Result<Vec<u8>, TransformError> {
        let short = || err("the stored data was shorter than the required size");
        match self {
            Cipher::AesCbc(key) => {
                if data.len() < AES_BLOCK {
                    return Err(short());
                }
                let (iv, body) = data.split_at(AES_BLOCK);
                if body.len() % AES_BLOCK != 0 {
                    return Err(err("the stored data is not a multiple of the block size"));
                }
                let mut out = body.to_vec();
                with_aes!(key, Alg, k => {
                    cbc::Decryptor::<Alg>::new(k.into(), iv.into())
                        .decrypt_padded_mut::<NoPadding>(&mut out)
                        .map_err(|_| err("the stored data is not a multiple of the block size"))?;
                });
                let padding = out.last().copied().unwrap_or(0) as usize;
                if padding == 0 || padding > out.len() {
                    return Err(err("invalid PKCS7 data (empty or not padded)"));
                }
                let size = out.len() - padding;
                if out[size..].iter().any(|b| *b as usize != padding) {
                    return Err(err("invalid padding on input"));
                }
                out.truncate(size);
                Ok(out)
            }
            Cipher::AesGcm(key) => {
                if data.len() < GCM_NONCE {
                    return Err(short());
                }
                let (nonce, sealed) = data.split_at(GCM_NONCE);
                let payload = Payload {
                    msg: sealed,
                    aad: ad,
                };
                if sealed.len() < GCM_TAG {
                    return Err(err("cipher: message authentication failed"));
                }
                with_aes!(key, Alg, k => {
                    aes_gcm::AesGcm::<Alg, aes_gcm::aead::consts::U12>::new(k.into())
                        .decrypt(nonce.into(), payload)
                })
                .map_err(|_| err("cipher: message authentication failed"))
            }
            Cipher::Secretbox(key) => {
                if data.len() < SECRETBOX_NONCE + SECRETBOX_TAG {
                    return Err(short());
                }
                let (nonce, sealed) = data.split_at(SECRETBOX_NONCE);
                crypto_secretbox::XSalsa20Poly1305::new(key.into())
                    .decrypt(nonce.into(), sealed)
                    .map_err(|_| err("output array was not large enough for encryption"))
            }
        }
    }
}

/// Go's error aggregate reduced: one error as itself, several as `[a, b]` (duplicates once).
fn reduce(errors: Vec<TransformError>) -> Option<TransformError> {
    let mut messages: Vec<String> = Vec::new();
    for e in errors {
        if !messages.contains(&e.0) {
            messages.push(e.0);
        }
    }
    match messages.len() {
        0 => None,
        1 => messages.pop().map(TransformError),
        _ => Some(TransformError(format!("[{}]", messages.join(", ")))),
    }
}

/// One entry of a resource's `providers` list.
#[derive(Clone, Debug)]
pub struct Provider(Inner);

#[derive(Clone, Debug)]
enum Inner {
    Identity,
    Keyed {
        /// `k8s:enc:<provider>:v1:`
        prefix: &'static str,
        /// Named as upstream's error for a value whose key is not configured.
        kind: &'static str,
        keys: Vec<(String, Cipher)>,
    },
}

/// What a named key of a provider holds, already checked for its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    AesCbc,
    AesGcm,
    Secretbox,
}

impl Provider {
    /// A provider of `kind` with its keys in order (the first encrypts); `None` when a key
    /// has a size the provider cannot use.
    pub fn keyed(kind: ProviderKind, keys: Vec<(String, Vec<u8>)>) -> Option<Provider> {
        let mut ciphers = Vec::with_capacity(keys.len());
        for (name, secret) in keys {
            let cipher = match kind {
                ProviderKind::AesCbc => Cipher::AesCbc(AesKey::new(&secret)?),
                ProviderKind::AesGcm => Cipher::AesGcm(AesKey::new(&secret)?),
                ProviderKind::Secretbox => Cipher::Secretbox(secret.as_slice().try_into().ok()?),
            };
            ciphers.push((name, cipher));
        }
        let (prefix, label) = match kind {
            ProviderKind::AesCbc => (AESCBC_PREFIX, "AES"),
            ProviderKind::AesGcm => (AESGCM_PREFIX, "AES"),
            ProviderKind::Secretbox => (SECRETBOX_PREFIX, "Secretbox"),
        };
        Some(Provider(Inner::Keyed {
            prefix,
            kind: label,
            keys: ciphers,
        }))
    }

    /// `identity`: values stored as they are; reads anything not encrypted.
    pub fn identity() -> Provider {
        Provider(Inner::Identity)
    }

    fn prefix(&self) -> &str {
        match &self.0 {
            Inner::Identity => "",
            Inner::Keyed { prefix, .. } => prefix,
        }
    }
}

/// A resource's providers in order: the first writes, each is tried to read (upstream's
/// prefix transformers, one level per provider and one per key).
#[derive(Clone, Debug)]
pub struct Transformer {
    providers: Vec<Provider>,
}

impl Transformer {
    pub fn new(providers: Vec<Provider>) -> Transformer {
        Transformer { providers }
    }

    /// The stored form of `data` kept at storage key `ad`.
    pub fn to_storage(&self, data: &[u8], ad: &[u8]) -> Result<Vec<u8>, TransformError> {
        match self.providers.first().map(|p| &p.0) {
            None | Some(Inner::Identity) => Ok(data.to_vec()),
            Some(Inner::Keyed { prefix, keys, .. }) => {
                let (name, cipher) = keys
                    .first()
                    .ok_or_else(|| err("aes provider has no valid keys"))?;
                let sealed = cipher.seal(data, ad)?;
                let mut out = Vec::with_capacity(prefix.len() + name.len() + 1 + sealed.len());
                out.extend_from_slice(prefix.as_bytes());
                out.extend_from_slice(name.as_bytes());
                out.push(b':');
                out.extend_from_slice(&sealed);
                Ok(out)
            }
        }
    }

    /// The value stored as `data` at key `ad`, and whether it is stale: written by a provider
    /// or key other than the one that writes now, so that a write must rewrite it even when
    /// the object did not change.
    pub fn from_storage(&self, data: &[u8], ad: &[u8]) -> Result<(Vec<u8>, bool), TransformError> {
        let mut errors = Vec::new();
        for (i, provider) in self.providers.iter().enumerate() {
            let Some(rest) = data.strip_prefix(provider.prefix().as_bytes()) else {
                continue;
            };
            match &provider.0 {
                Inner::Identity => {
                    // Encrypted data under an identity listed first (migrating away from
                    // encryption) is left for the providers after it.
                    if rest.starts_with(ENCRYPTED_PREFIX.as_bytes()) {
                        continue;
                    }
                    return Ok((rest.to_vec(), i != 0));
                }
                Inner::Keyed { keys, kind, .. } => {
                    match open_with_keys(keys, kind, rest, ad) {
                        Ok((out, stale)) => return Ok((out, stale || i != 0)),
                        // Several providers of one kind share a prefix (a new key
                        // being rotated in): a failure here leaves the next one to try.
                        Err(e) => errors.push(e),
                    }
                }
            }
        }
        Err(reduce(errors).unwrap_or_else(|| err("no matching prefix found")))
    }
}

fn open_with_keys(
    keys: &[(String, Cipher)],
    kind: &str,
    data: &[u8],
    ad: &[u8],
) -> Result<(Vec<u8>, bool), TransformError> {
    let mut errors = Vec::new();
    for (j, (name, cipher)) in keys.iter().enumerate() {
        let Some(rest) = data
            .strip_prefix(name.as_bytes())
            .and_then(|r| r.strip_prefix(b":"))
        else {
            continue;
        };
        match cipher.open(rest, ad) {
            Ok(out) => return Ok((out, j != 0)),
            Err(e) => errors.push(e),
        }
    }
    Err(reduce(errors).unwrap_or_else(|| {
        err(format!(
            "no matching key was found for the provided {kind} transformer"
        ))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const AD: &[u8] = b"/registry/secrets/default/s1";

    fn keyed(kind: ProviderKind, keys: &[(&str, &[u8])]) -> Provider {
        Provider::keyed(
            kind,
            keys.iter()
                .map(|(n, k)| (n.to_string(), k.to_vec()))
                .collect(),
        )
        .expect("valid keys")
    }

    #[test]
    fn each_provider_round_trips_with_its_prefix() {
        for (kind, prefix, key) in [
            (ProviderKind::AesCbc, AESCBC_PREFIX, &[1u8; 32][..]),
            (ProviderKind::AesCbc, AESCBC_PREFIX, &[1u8; 16][..]),
            (ProviderKind::AesGcm, AESGCM_PREFIX, &[2u8; 24][..]),
            (ProviderKind::AesGcm, AESGCM_PREFIX, &[2u8; 32][..]),
            (ProviderKind::Secretbox, SECRETBOX_PREFIX, &[3u8; 32][..]),
        ] {
            let t = Transformer::new(vec![keyed(kind, &[("key1", key)])]);
            for plain in [&b""[..], b"{\"a\":1}", &[7u8; 16], &[9u8; 1000]] {
                let stored = t.to_storage(plain, AD).unwrap();
                let expected = format!("{prefix}key1:");
                assert!(stored.starts_with(expected.as_bytes()), "{kind:?}");
                assert_eq!(
                    t.from_storage(&stored, AD).unwrap(),
                    (plain.to_vec(), false)
                );
            }
        }
    }

    #[test]
    fn aescbc_is_iv_then_pkcs7_padded_ciphertext() {
        let t = Transformer::new(vec![keyed(ProviderKind::AesCbc, &[("k", &[5; 16])])]);
        let stored = t.to_storage(&[0u8; 16], AD).unwrap();
        // A whole block of padding follows a whole block of data.
        assert_eq!(stored.len(), "k8s:enc:aescbc:v1:k:".len() + 16 + 32);
        // The same value twice differs (a random IV each time).
        assert_ne!(stored, t.to_storage(&[0u8; 16], AD).unwrap());
    }

    #[test]
    fn aescbc_reads_a_value_sealed_elsewhere() {
        // AES-128-CBC of "secret data" with PKCS#7 padding (key 00..0f, IV 10..1f, from
        // Python's `cryptography`), as kube-apiserver stores it: prefix, IV, ciphertext.
        let key: Vec<u8> = (0u8..16).collect();
        let iv: Vec<u8> = (16u8..32).collect();
        let ciphertext = hex("3365cebd889b2d1998136f8f5fdbb9a8");
        let mut stored = b"k8s:enc:aescbc:v1:key1:".to_vec();
        stored.extend_from_slice(&iv);
        stored.extend_from_slice(&ciphertext);
        let t = Transformer::new(vec![keyed(ProviderKind::AesCbc, &[("key1", &key)])]);
        assert_eq!(t.from_storage(&stored, AD).unwrap().0, b"secret data");
    }

    #[test]
    fn aesgcm_reads_a_value_sealed_elsewhere() {
        // AES-256-GCM of "secret data" (key 00..1f, nonce 00..0b) with the storage key as
        // additional data, from Python's `cryptography`: nonce, then ciphertext and tag.
        let key: Vec<u8> = (0u8..32).collect();
        let mut stored = b"k8s:enc:aesgcm:v1:key1:".to_vec();
        stored.extend((0u8..12).collect::<Vec<_>>());
        stored.extend(hex(
            "3467b569a091e27fec35f6e8130afa06d78c52c02182ba860f6f82",
        ));
        let t = Transformer::new(vec![keyed(ProviderKind::AesGcm, &[("key1", &key)])]);
        assert_eq!(t.from_storage(&stored, AD).unwrap().0, b"secret data");
    }

    #[test]
    fn aesgcm_binds_the_value_to_its_key() {
        let t = Transformer::new(vec![keyed(ProviderKind::AesGcm, &[("k", &[5; 32])])]);
        let stored = t.to_storage(b"data", AD).unwrap();
        assert_eq!(stored.len(), "k8s:enc:aesgcm:v1:k:".len() + 12 + 4 + 16);
        let moved = t.from_storage(&stored, b"/registry/secrets/other/s1");
        assert_eq!(
            moved.unwrap_err().0,
            "cipher: message authentication failed"
        );
    }

    #[test]
    fn secretbox_is_nacl_compatible() {
        // NaCl's tests/secretbox.c vector: the box is the tag, then the ciphertext.
        let key = hex("1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389");
        let nonce = hex("69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37");
        let plain = hex(concat!(
            "be075fc53c81f2d5cf141316ebeb0c7b5228c52a4c62cbd44b66849b64244ffce5ecbaaf33bd751a",
            "1ac728d45e6c61296cdc3c01233561f41db66cce314adb310e3be8250c46f06dceea3a7fa1348057",
            "e2f6556ad6b1318a024a838f21af1fde048977eb48f59ffd4924ca1c60902e52f0a089bc76897040",
            "e082f937763848645e0705"
        ));
        let boxed = hex(concat!(
            "f3ffc7703f9400e52a7dfb4b3d3305d98e993b9f48681273c29650ba32fc76ce48332ea7164d96a4",
            "476fb8c531a1186ac0dfc17c98dce87b4da7f011ec48c97271d2c20f9b928fe2270d6fb863d51738",
            "b48eeee314a7cc8ab932164548e526ae90224368517acfeabd6bb3732bc0e9da99832b61ca01b6de",
            "56244a9e88d5f9b37973f622a43d14a6599b1f654cb45a74e355a5"
        ));
        let mut stored = b"k8s:enc:secretbox:v1:key1:".to_vec();
        stored.extend_from_slice(&nonce);
        stored.extend_from_slice(&boxed);
        let t = Transformer::new(vec![keyed(ProviderKind::Secretbox, &[("key1", &key)])]);
        assert_eq!(t.from_storage(&stored, AD).unwrap(), (plain, false));
    }

    #[test]
    fn reads_are_stale_unless_by_the_first_key_of_the_first_provider() {
        let old = keyed(ProviderKind::AesCbc, &[("old", &[1; 32])]);
        let new = keyed(ProviderKind::AesCbc, &[("new", &[2; 32])]);
        let by_old = Transformer::new(vec![old.clone()])
            .to_storage(b"x", AD)
            .unwrap();
        // The new key listed second: old values read fresh.
        let t = Transformer::new(vec![old.clone(), new.clone()]);
        assert_eq!(t.from_storage(&by_old, AD).unwrap(), (b"x".to_vec(), false));
        // The new key first: old values read stale; new writes use the new key.
        let t = Transformer::new(vec![new.clone(), old.clone()]);
        assert_eq!(t.from_storage(&by_old, AD).unwrap(), (b"x".to_vec(), true));
        let written = t.to_storage(b"x", AD).unwrap();
        assert!(written.starts_with(b"k8s:enc:aescbc:v1:new:"));
        // Two keys in one provider: the same rule.
        let both = keyed(
            ProviderKind::AesCbc,
            &[("new", &[2; 32]), ("old", &[1; 32])],
        );
        let t = Transformer::new(vec![both]);
        assert_eq!(t.from_storage(&by_old, AD).unwrap(), (b"x".to_vec(), true));
    }

    #[test]
    fn plaintext_reads_only_where_identity_is_listed() {
        let aes = keyed(ProviderKind::AesGcm, &[("k", &[1; 16])]);
        let plain = b"{\"kind\":\"Secret\"}";
        let t = Transformer::new(vec![aes.clone(), Provider::identity()]);
        assert_eq!(t.from_storage(plain, AD).unwrap(), (plain.to_vec(), true));
        let t = Transformer::new(vec![aes.clone()]);
        assert_eq!(
            t.from_storage(plain, AD).unwrap_err().0,
            "no matching prefix found"
        );
        // Identity first (decrypting everything): encrypted values still read, stale.
        let sealed = Transformer::new(vec![aes.clone()])
            .to_storage(plain, AD)
            .unwrap();
        let t = Transformer::new(vec![Provider::identity(), aes]);
        assert_eq!(t.from_storage(&sealed, AD).unwrap(), (plain.to_vec(), true));
        assert_eq!(t.to_storage(plain, AD).unwrap(), plain.to_vec());
    }

    #[test]
    fn unknown_keys_and_wrong_keys_fail_as_upstream() {
        let a = Transformer::new(vec![keyed(ProviderKind::AesCbc, &[("a", &[1; 32])])]);
        let sealed = a.to_storage(b"x", AD).unwrap();
        let b = Transformer::new(vec![keyed(ProviderKind::AesCbc, &[("b", &[1; 32])])]);
        assert_eq!(
            b.from_storage(&sealed, AD).unwrap_err().0,
            "no matching key was found for the provided AES transformer"
        );
        let wrong = Transformer::new(vec![keyed(ProviderKind::AesCbc, &[("a", &[2; 32])])]);
        let e = wrong.from_storage(&sealed, AD).unwrap_err().0;
        assert!(e.starts_with("invalid P"), "{e}");
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
