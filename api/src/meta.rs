//! Object metadata the server fills in: timestamps, uids and generated names.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use rand::Rng;

/// Now, at the one-second precision the API serializes.
pub fn now() -> Time {
    let ts = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` plus five random characters, as upstream's SimpleNameGenerator.
pub fn generate_name(base: &str) -> String {
    let base = if base.len() > 58 { &base[..58] } else { base };
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_names() {
        let n = super::generate_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n.starts_with("web-"));
        assert!(super::generate_name(&"x".repeat(70)).len() == 63);
    }
}
