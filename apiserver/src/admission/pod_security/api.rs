//! The policy a namespace asks for, read from its `pod-security.kubernetes.io/*` labels as
//! upstream's `k8s.io/pod-security-admission/api` reads them. A label that does not parse
//! still yields a policy (an invalid enforce level enforces `restricted`; invalid audit and
//! warn levels fall open to `privileged`), so a namespace someone mislabelled before the
//! plugin existed never lets pods through unchecked; the errors refuse new labels only.

use std::collections::BTreeMap;
use std::fmt;

use minik8s_api::validation::{FieldError, Path};

const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";
pub const ENFORCE_LEVEL_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LEVEL_LABEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LEVEL_LABEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// Audit annotations carry the label prefix (`pod-security.kubernetes.io/enforce-policy`).
pub const AUDIT_ANNOTATION_PREFIX: &str = LABEL_PREFIX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// Upstream's `ParseLevel`: an unknown level is `restricted`, with the error.
    pub fn parse(s: &str) -> Result<Level, (Level, &'static str)> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err((
                Level::Restricted,
                "must be one of privileged, baseline, restricted",
            )),
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy version: `latest`, or `v1.<minor>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    Minor(u64),
    Latest,
}

impl Version {
    /// Upstream's `ParseVersion`: anything but `latest` or `v1.<minor>` is `latest`, with
    /// the error.
    pub fn parse(s: &str) -> Result<Version, (Version, &'static str)> {
        const ERR: &str = r#"must be "latest" or "v1.x""#;
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let minor = s
            .strip_prefix("v1.")
            .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
            .filter(|m| *m == "0" || !m.starts_with('0'))
            .and_then(|m| m.parse::<u64>().ok())
            .filter(|m| *m <= i64::MAX as u64);
        minor.map(Version::Minor).ok_or((Version::Latest, ERR))
    }

    /// Whether `self` is older than `other`; `latest` is newer than every version.
    pub fn older(self, other: Version) -> bool {
        match (self, other) {
            (Version::Latest, _) => false,
            (Version::Minor(_), Version::Latest) => true,
            (Version::Minor(a), Version::Minor(b)) => a < b,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    pub const PRIVILEGED_LATEST: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };

    /// Both privileged (whatever the versions), or the same level and version.
    fn equivalent(&self, other: &LevelVersion) -> bool {
        (self.level == Level::Privileged && other.level == Level::Privileged) || self == other
    }
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}

/// What a namespace enforces, audits and warns about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    /// kube-apiserver's default configuration: everything privileged, at `latest`.
    fn default() -> Self {
        Policy {
            enforce: LevelVersion::PRIVILEGED_LATEST,
            audit: LevelVersion::PRIVILEGED_LATEST,
            warn: LevelVersion::PRIVILEGED_LATEST,
        }
    }
}

impl Policy {
    pub fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|lv| lv.level == Level::Privileged)
    }

    pub fn equivalent(&self, other: &Policy) -> bool {
        self.enforce.equivalent(&other.enforce)
            && self.audit.equivalent(&other.audit)
            && self.warn.equivalent(&other.warn)
    }
}

fn label_error(label: &str, value: &str, detail: &str) -> FieldError {
    FieldError::invalid(&Path::new("metadata.labels").key(label), value, detail)
}

/// Upstream's `PolicyToEvaluate`: the namespace's labels over `defaults`. A valid policy is
/// always returned, with the errors of the labels that did not parse.
pub fn policy_to_evaluate(
    labels: Option<&BTreeMap<String, String>>,
    defaults: Policy,
) -> (Policy, Vec<FieldError>) {
    let mut p = defaults;
    let mut errs = Vec::new();
    let Some(labels) = labels.filter(|l| !l.is_empty()) else {
        return (p, errs);
    };
    let level = |label: &str, fail_open: bool, errs: &mut Vec<FieldError>| {
        labels.get(label).map(|value| match Level::parse(value) {
            Ok(level) => (level, true),
            Err((level, detail)) => {
                errs.push(label_error(label, value, detail));
                (if fail_open { Level::Privileged } else { level }, false)
            }
        })
    };
    let version = |label: &str, errs: &mut Vec<FieldError>| {
        labels.get(label).map(|value| {
            Version::parse(value).unwrap_or_else(|(version, detail)| {
                errs.push(label_error(label, value, detail));
                version
            })
        })
    };
    let mut has_enforce_level = false;
    if let Some((level, ok)) = level(ENFORCE_LEVEL_LABEL, false, &mut errs) {
        p.enforce.level = level;
        has_enforce_level = ok;
    }
    if let Some(v) = version(ENFORCE_VERSION_LABEL, &mut errs) {
        p.enforce.version = v;
    }
    if let Some((level, _)) = level(AUDIT_LEVEL_LABEL, true, &mut errs) {
        p.audit.level = level;
    }
    if let Some(v) = version(AUDIT_VERSION_LABEL, &mut errs) {
        p.audit.version = v;
    }
    let has_warn_level = labels.contains_key(WARN_LEVEL_LABEL);
    if let Some((level, _)) = level(WARN_LEVEL_LABEL, true, &mut errs) {
        p.warn.level = level;
    }
    let has_warn_version = labels.contains_key(WARN_VERSION_LABEL);
    if let Some(v) = version(WARN_VERSION_LABEL, &mut errs) {
        p.warn.version = v;
    }
    // Warn defaults to an enforce level stricter than it, so clients hear why they fail.
    if !has_warn_level && has_enforce_level && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if !has_warn_version {
            p.warn.version = p.enforce.version;
        }
    }
    (p, errs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn lv(level: Level, version: Version) -> LevelVersion {
        LevelVersion { level, version }
    }

    #[test]
    fn versions_parse_as_upstream() {
        assert_eq!(Version::parse("latest"), Ok(Version::Latest));
        assert_eq!(Version::parse("v1.0"), Ok(Version::Minor(0)));
        assert_eq!(Version::parse("v1.25"), Ok(Version::Minor(25)));
        for bad in [
            "v1.025", "v1.", "1.25", "v2.0", "v1.x", "Latest", "v1.-1", "",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Version::Minor(25).to_string(), "v1.25");
        assert!(Version::Minor(3).older(Version::Minor(25)));
        assert!(Version::Minor(99).older(Version::Latest));
        assert!(!Version::Latest.older(Version::Minor(99)));
    }

    #[test]
    fn enforce_alone_sets_warn_too() {
        let l = labels(&[
            (ENFORCE_LEVEL_LABEL, "baseline"),
            (ENFORCE_VERSION_LABEL, "v1.30"),
        ]);
        let (p, errs) = policy_to_evaluate(Some(&l), Policy::default());
        assert!(errs.is_empty());
        assert_eq!(p.enforce, lv(Level::Baseline, Version::Minor(30)));
        assert_eq!(p.warn, lv(Level::Baseline, Version::Minor(30)));
        assert_eq!(p.audit, LevelVersion::PRIVILEGED_LATEST);
        assert_eq!(p.enforce.to_string(), "baseline:v1.30");
    }

    #[test]
    fn explicit_warn_is_kept() {
        let l = labels(&[
            (ENFORCE_LEVEL_LABEL, "restricted"),
            (WARN_LEVEL_LABEL, "baseline"),
        ]);
        let (p, _) = policy_to_evaluate(Some(&l), Policy::default());
        assert_eq!(p.warn, lv(Level::Baseline, Version::Latest));
        let l = labels(&[
            (ENFORCE_LEVEL_LABEL, "restricted"),
            (WARN_VERSION_LABEL, "v1.22"),
        ]);
        let (p, _) = policy_to_evaluate(Some(&l), Policy::default());
        assert_eq!(p.warn, lv(Level::Restricted, Version::Minor(22)));
    }

    #[test]
    fn invalid_labels_fail_closed_for_enforce_and_open_otherwise() {
        let l = labels(&[
            (ENFORCE_LEVEL_LABEL, "bogus"),
            (AUDIT_LEVEL_LABEL, "bogus"),
            (WARN_LEVEL_LABEL, "bogus"),
            (WARN_VERSION_LABEL, "v2"),
        ]);
        let (p, errs) = policy_to_evaluate(Some(&l), Policy::default());
        assert_eq!(p.enforce, lv(Level::Restricted, Version::Latest));
        assert_eq!(p.audit.level, Level::Privileged);
        assert_eq!(p.warn.level, Level::Privileged);
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            text,
            [
                r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: "v2": must be "latest" or "v1.x""#,
            ]
        );
    }
}
