//! The hashes that name what controllers create: Go's `hash/fnv` (32 bits) and
//! `rand.SafeEncodeString`, in one place, so a Deployment's `pod-template-hash`, a DaemonSet's
//! `controller-revision-hash` and a ControllerRevision's name are computed alike.
//!
//! Upstream hashes a template with `DeepHashObject` (Go's printed form of the struct), which
//! no other language reproduces; here the template's JSON is hashed instead, so the values
//! differ from a real cluster's but keep their properties: stable, and changed by any change
//! of the template or of the collision count.

use k8s_openapi::api::core::v1::PodTemplateSpec;

const OFFSET: u32 = 2_166_136_261;
const PRIME: u32 = 16_777_619;

/// FNV-1, 32 bits (Go's `fnv.New32`): multiply, then xor.
pub fn fnv32(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(OFFSET, |h, b| h.wrapping_mul(PRIME) ^ u32::from(*b))
}

/// FNV-1a, 32 bits (Go's `fnv.New32a`): xor, then multiply.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u32::from(*b)).wrapping_mul(PRIME))
}

/// Upstream's `rand.SafeEncodeString`: each byte mapped onto an alphabet without vowels or
/// look-alike characters, so no hash spells a word.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// Upstream's `controller.ComputeHash`: FNV-1a of the template and the collision count (so a
/// collision can be escaped), safe-encoded. Names a Deployment's ReplicaSets and a DaemonSet's
/// revisions.
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(c.to_string().as_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_go() {
        // Values of Go's hash/fnv for "hello".
        assert_eq!(fnv32(b"hello"), 0xb6fa_7167);
        assert_eq!(fnv32a(b"hello"), 0x4f9f_2cab);
        assert_eq!(fnv32(b""), OFFSET);
    }

    #[test]
    fn safe_encoding_maps_each_byte() {
        // '0' is 48: 48 % 27 = 21 -> '4'; '1' -> '5'; '9' -> 57 % 27 = 3 -> 'f'.
        assert_eq!(safe_encode("019"), "45f");
        assert_eq!(safe_encode(&4_294_967_295u32.to_string()).len(), 10);
    }

    #[test]
    fn template_hash_is_stable_and_changes_with_collisions() {
        let t: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        }))
        .unwrap();
        let h = compute_hash(&t, None);
        assert_eq!(h, compute_hash(&t, None));
        assert_ne!(h, compute_hash(&t, Some(1)));
        assert!(h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }
}
