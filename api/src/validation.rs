//! Field errors and the name, label and metadata rules every kind shares. Messages follow
//! upstream's `field.Error` wording so that a 422 from minik8s reads like one from Kubernetes.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The kinds of field error upstream knows, with their Status cause reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Required,
    Invalid,
    Duplicate,
    Forbidden,
    NotSupported,
    TooLong,
    TooMany,
    /// A value of the wrong type (custom resources' schema validation).
    TypeInvalid,
    /// A reference to something that does not exist.
    NotFound,
}

impl ErrorKind {
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid => "FieldValueInvalid",
            ErrorKind::Duplicate => "FieldValueDuplicate",
            ErrorKind::Forbidden => "FieldValueForbidden",
            ErrorKind::NotSupported => "FieldValueNotSupported",
            ErrorKind::TooLong => "FieldValueTooLong",
            ErrorKind::TooMany => "FieldValueTooMany",
            ErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            ErrorKind::NotFound => "FieldValueNotFound",
        }
    }

    fn text(self) -> &'static str {
        match self {
            ErrorKind::Required => "Required value",
            ErrorKind::Invalid => "Invalid value",
            ErrorKind::Duplicate => "Duplicate value",
            ErrorKind::Forbidden => "Forbidden",
            ErrorKind::NotSupported => "Unsupported value",
            ErrorKind::TooLong => "Too long",
            ErrorKind::TooMany => "Too many",
            ErrorKind::TypeInvalid => "Invalid value",
            ErrorKind::NotFound => "Not found",
        }
    }
}

/// A path to a field, printed as upstream prints it: `spec.containers[0].image`, `metadata.labels[app]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn new(root: &str) -> Self {
        Path(root.to_string())
    }

    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    pub fn index(&self, i: usize) -> Self {
        Path(format!("{}[{i}]", self.0))
    }

    pub fn key(&self, k: &str) -> Self {
        Path(format!("{}[{k}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub kind: ErrorKind,
    pub field: String,
    /// The offending value, already formatted (strings quoted) as upstream prints it.
    pub value: Option<String>,
    pub detail: String,
}

impl FieldError {
    pub fn new(
        kind: ErrorKind,
        path: &Path,
        value: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: path.to_string(),
            value,
            detail: detail.into(),
        }
    }

    pub fn required(path: &Path, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Required, path, None, detail)
    }

    pub fn invalid(path: &Path, value: impl fmt::Debug, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, path, Some(format!("{value:?}")), detail)
    }

    pub fn forbidden(path: &Path, detail: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, path, None, detail)
    }

    pub fn duplicate(path: &Path, value: impl fmt::Debug) -> Self {
        Self::new(ErrorKind::Duplicate, path, Some(format!("{value:?}")), "")
    }

    pub fn not_supported(path: &Path, value: impl fmt::Debug, supported: &[&str]) -> Self {
        let quoted: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        Self::new(
            ErrorKind::NotSupported,
            path,
            Some(format!("{value:?}")),
            format!("supported values: {}", quoted.join(", ")),
        )
    }

    pub fn too_long(path: &Path, max: usize) -> Self {
        Self::new(
            ErrorKind::TooLong,
            path,
            None,
            format!("must have at most {max} bytes"),
        )
    }

    /// The error without its field, as a Status cause message.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.value) {
            (ErrorKind::Required | ErrorKind::Forbidden | ErrorKind::TooLong, _) | (_, None) => {
                self.kind.text().to_string()
            }
            (_, Some(v)) => format!("{}: {v}", self.kind.text()),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

pub type Errors = Vec<FieldError>;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_label_char(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'
}

fn is_dns1123_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b.iter().all(|&c| is_label_char(c)) && b[0] != b'-' && b[b.len() - 1] != b'-'
}

/// Problems with `s` as an RFC 1123 label (namespaces, container and port names).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_dns1123_label_shape(s) {
        errs.push(DNS1123_LABEL_MSG.to_string());
    }
    errs
}

/// Problems with `s` as an RFC 1123 subdomain (most object names).
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if s.is_empty() || !s.split('.').all(is_dns1123_label_shape) {
        errs.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    errs
}

/// Problems with `s` as an RFC 1035 label (Service names).
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_dns1123_label_shape(s) || !s.as_bytes()[0].is_ascii_lowercase() {
        errs.push(DNS1035_LABEL_MSG.to_string());
    }
    errs
}

/// Problems with `s` as a path segment name (RBAC objects may hold ':' and upper case).
pub fn path_segment_name(s: &str) -> Vec<String> {
    if s == "." || s == ".." {
        return vec![format!("may not be '{s}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|bad| s.contains(bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

fn qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// Problems with `s` as a label or annotation key (`[prefix/]name`).
pub fn qualified_name(s: &str) -> Vec<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let mut errs = Vec::new();
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".to_string());
        } else {
            errs.extend(
                dns1123_subdomain(p)
                    .into_iter()
                    .map(|e| format!("prefix part {e}")),
            );
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    } else if !qualified_name_part(name) {
        errs.push(QUALIFIED_NAME_MSG.to_string());
    }
    errs
}

pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !s.is_empty() && !qualified_name_part(&s[..s.len().min(63)]) {
        errs.push(LABEL_VALUE_MSG.to_string());
    }
    errs
}

pub fn validate_labels(labels: &BTreeMap<String, String>, path: &Path, errs: &mut Errors) {
    for (k, v) in labels {
        for e in qualified_name(k) {
            errs.push(FieldError::invalid(path, k, e));
        }
        for e in label_value(v) {
            errs.push(FieldError::invalid(&path.key(k), v, e));
        }
    }
}

const TOTAL_ANNOTATION_SIZE: usize = 256 * 1024;

pub fn validate_annotations(
    annotations: &BTreeMap<String, String>,
    path: &Path,
    errs: &mut Errors,
) {
    let mut total = 0;
    for (k, v) in annotations {
        for e in qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k, e));
        }
        total += k.len() + v.len();
    }
    if total > TOTAL_ANNOTATION_SIZE {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE));
    }
}

/// The rule a kind's names follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    PathSegment,
}

impl NameRule {
    pub fn check(self, name: &str) -> Vec<String> {
        match self {
            NameRule::Dns1123Subdomain => dns1123_subdomain(name),
            NameRule::Dns1123Label => dns1123_label(name),
            NameRule::Dns1035Label => dns1035_label(name),
            NameRule::PathSegment => path_segment_name(name),
        }
    }
}

/// Metadata rules shared by every kind (upstream's `ValidateObjectMeta`).
pub fn validate_object_meta(
    meta: &ObjectMeta,
    namespaced: bool,
    rule: NameRule,
    errs: &mut Errors,
) {
    let path = Path::new("metadata");
    match meta.name.as_deref() {
        None | Some("") => {
            errs.push(FieldError::required(
                &path.child("name"),
                "name or generateName is required",
            ));
        }
        Some(name) => {
            for e in rule.check(name) {
                errs.push(FieldError::invalid(&path.child("name"), name, e));
            }
        }
    }
    if namespaced {
        match meta.namespace.as_deref() {
            None | Some("") => errs.push(FieldError::required(&path.child("namespace"), "")),
            Some(ns) => {
                for e in dns1123_label(ns) {
                    errs.push(FieldError::invalid(&path.child("namespace"), ns, e));
                }
            }
        }
    } else if meta.namespace.as_deref().is_some_and(|ns| !ns.is_empty()) {
        errs.push(FieldError::forbidden(
            &path.child("namespace"),
            "not allowed on this type",
        ));
    }
    if let Some(labels) = &meta.labels {
        validate_labels(labels, &path.child("labels"), errs);
    }
    if let Some(annotations) = &meta.annotations {
        validate_annotations(annotations, &path.child("annotations"), errs);
    }
    if let Some(finalizers) = &meta.finalizers {
        for (i, f) in finalizers.iter().enumerate() {
            for e in qualified_name(f) {
                errs.push(FieldError::invalid(
                    &path.child("finalizers").index(i),
                    f,
                    e,
                ));
            }
        }
    }
    if meta.generation.is_some_and(|g| g < 0) {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            meta.generation.unwrap_or_default(),
            "must be greater than or equal to 0",
        ));
    }
}

/// Metadata rules for an update: identity fields cannot change.
pub fn validate_object_meta_update(new: &ObjectMeta, old: &ObjectMeta, errs: &mut Errors) {
    let path = Path::new("metadata");
    let immutable = "field is immutable";
    if new.name != old.name {
        errs.push(FieldError::invalid(
            &path.child("name"),
            new.name.clone().unwrap_or_default(),
            immutable,
        ));
    }
    if new.namespace != old.namespace {
        errs.push(FieldError::invalid(
            &path.child("namespace"),
            new.namespace.clone().unwrap_or_default(),
            immutable,
        ));
    }
    if new.uid != old.uid {
        errs.push(FieldError::invalid(
            &path.child("uid"),
            new.uid.clone().unwrap_or_default(),
            immutable,
        ));
    }
    if new.creation_timestamp != old.creation_timestamp {
        errs.push(FieldError::invalid(
            &path.child("creationTimestamp"),
            new.creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            immutable,
        ));
    }
}

/// Checks a value that may not change after creation.
pub fn immutable<T: PartialEq + fmt::Debug>(new: &T, old: &T, path: &Path, errs: &mut Errors) {
    if new != old {
        errs.push(FieldError::invalid(path, new, "field is immutable"));
    }
}

/// Upstream's `ValidateLabelSelector`: label keys and values, and each expression's operator
/// with the values it needs.
pub fn validate_label_selector(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    path: &Path,
    errs: &mut Errors,
) {
    if let Some(labels) = &selector.match_labels {
        validate_labels(labels, &path.child("matchLabels"), errs);
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let p = path.child("matchExpressions").index(i);
        let values = req.values.as_deref().unwrap_or(&[]);
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                &p.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                &p.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.push(FieldError::invalid(
                &p.child("operator"),
                op,
                "not a valid selector operator",
            )),
        }
        for e in qualified_name(&req.key) {
            errs.push(FieldError::invalid(&p.child("key"), &req.key, e));
        }
        for (j, v) in values.iter().enumerate() {
            for e in label_value(v) {
                errs.push(FieldError::invalid(&p.child("values").index(j), v, e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(dns1123_subdomain("web-1.example").is_empty());
        assert!(!dns1123_subdomain("Web").is_empty());
        assert!(!dns1123_subdomain("-a").is_empty());
        assert!(!dns1123_subdomain("a..b").is_empty());
        assert!(dns1123_label("kube-system").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert!(dns1035_label("svc").is_empty());
        assert!(!dns1035_label("1svc").is_empty());
        assert!(path_segment_name("system:controller:x").is_empty());
        assert!(!path_segment_name("a/b").is_empty());
    }

    #[test]
    fn labels() {
        assert!(qualified_name("app.kubernetes.io/name").is_empty());
        assert!(qualified_name("app").is_empty());
        assert!(!qualified_name("/app").is_empty());
        assert!(!qualified_name("a b").is_empty());
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_x").is_empty());
        assert!(!label_value("-x").is_empty());
    }

    #[test]
    fn error_text() {
        let p = Path::new("spec")
            .child("containers")
            .index(0)
            .child("image");
        assert_eq!(
            FieldError::required(&p, "").to_string(),
            "spec.containers[0].image: Required value"
        );
        let e = FieldError::not_supported(
            &Path::new("spec").child("restartPolicy"),
            "Sometimes",
            &["Always", "Never"],
        );
        assert_eq!(
            e.to_string(),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\""
        );
        assert_eq!(
            Path::new("metadata").child("labels").key("app").to_string(),
            "metadata.labels[app]"
        );
    }
}
