//! certificates.k8s.io CertificateSigningRequests. A request is immutable once made; what
//! changes is its fate, and each part of that has its own door, as upstream keeps them apart:
//! the `approval` subresource records Approved or Denied ([`apply_approval`]), `status` is
//! where a signer issues the certificate or reports failure, and the main resource may change
//! only metadata.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, human_duration, name, or_empty, string, text};
use crate::validation::{ErrorKind, Errors, FieldError, Path, dns1123_label, dns1123_subdomain};

mod pem;

use self::pem::{certificate_problem, csr_problem};

const APPROVED: &str = "Approved";
const DENIED: &str = "Denied";
const FAILED: &str = "Failed";
const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";

/// Every key usage upstream knows, sorted as its error messages list them.
const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

impl Kind for CertificateSigningRequest {
    const COLUMNS: &'static [Column] = CSR_COLUMNS;
    const FIELDS: &'static [&'static str] = &["spec.signerName"];

    fn default_fields(&mut self) {
        for c in conditions_mut(self) {
            if c.status.is_empty() {
                c.status = "True".into();
            }
        }
    }

    fn prepare_create(&mut self) {
        // Nobody may create a request that is already approved or signed.
        self.status = Some(Default::default());
    }

    fn prepare_update(&mut self, old: &Self) {
        self.spec = old.spec.clone();
        self.status = old.status.clone();
    }

    fn keep_status(&mut self, old: &Self) {
        self.status = old.status.clone();
    }

    /// A status update keeps the spec and the approval decision: Approved and Denied
    /// conditions change only through the `approval` subresource.
    fn keep_spec(&mut self, old: &Self) {
        self.spec = old.spec.clone();
        let old_conditions = conditions(old).to_vec();
        let status = self.status.get_or_insert_with(Default::default);
        let mut new = status.conditions.take().unwrap_or_default();
        for t in [APPROVED, DENIED] {
            let old_of: Vec<&CertificateSigningRequestCondition> =
                old_conditions.iter().filter(|c| c.type_ == t).collect();
            let new_at: Vec<usize> = (0..new.len()).filter(|&i| new[i].type_ == t).collect();
            if old_of.len() == new_at.len() {
                for (i, c) in new_at.into_iter().zip(old_of) {
                    new[i] = c.clone();
                }
            } else {
                new.retain(|c| c.type_ != t);
                new.extend(old_of.into_iter().cloned());
            }
        }
        populate_condition_times(&mut new, &old_conditions);
        status.conditions = (!new.is_empty()).then_some(new);
    }

    fn validate(&self, errs: &mut Errors) {
        validate_csr(self, &Options::default(), errs);
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        let opts = Options::tolerating(self, old);
        validate_csr(self, &opts, errs);
        let conditions_path = Path::new("status").child("conditions");
        for t in [APPROVED, DENIED, FAILED] {
            let count = |csr: &Self| conditions(csr).iter().filter(|c| c.type_ == t).count();
            if count(self) < count(old) {
                errs.push(FieldError::forbidden(
                    &conditions_path,
                    format!("updates may not remove a condition of type {t:?}"),
                ));
            }
        }
        let (new_cert, old_cert) = (certificate(self), certificate(old));
        if new_cert != old_cert && !old_cert.is_empty() {
            errs.push(FieldError::forbidden(
                &Path::new("status").child("certificate"),
                "updates may not modify existing certificate content",
            ));
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "spec.signerName" => Some(self.spec.signer_name.clone()),
            _ => None,
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(csr_cells(self, now))
    }
}

/// Applies an update of the `approval` subresource to `csr`, the stored request: its Approved
/// and Denied conditions become those of `update`; the spec, the certificate and every other
/// condition stay as stored. New conditions get their times (and a missing status, `True`) as
/// upstream's approval strategy gives them.
pub fn apply_approval(csr: &mut CertificateSigningRequest, update: &CertificateSigningRequest) {
    let old = conditions(csr).to_vec();
    let requested = conditions(update);
    let is_decision =
        |c: &CertificateSigningRequestCondition| c.type_ == APPROVED || c.type_ == DENIED;
    let others_of =
        |list: &[CertificateSigningRequestCondition]| -> Vec<CertificateSigningRequestCondition> {
            list.iter().filter(|c| !is_decision(c)).cloned().collect()
        };
    // Take the body's list as it is when it leaves the other conditions alone (what kubectl
    // sends), so the order is the client's; otherwise the stored ones and then its decisions.
    let mut new = if others_of(requested) == others_of(&old) {
        requested.to_vec()
    } else {
        let mut list = others_of(&old);
        list.extend(requested.iter().filter(|c| is_decision(c)).cloned());
        list
    };
    for c in &mut new {
        if c.status.is_empty() {
            c.status = "True".into();
        }
    }
    populate_condition_times(&mut new, &old);
    csr.status.get_or_insert_with(Default::default).conditions = (!new.is_empty()).then_some(new);
}

fn conditions(csr: &CertificateSigningRequest) -> &[CertificateSigningRequestCondition] {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
}

fn conditions_mut(
    csr: &mut CertificateSigningRequest,
) -> impl Iterator<Item = &mut CertificateSigningRequestCondition> {
    csr.status
        .iter_mut()
        .flat_map(|s| s.conditions.iter_mut().flatten())
}

fn certificate(csr: &CertificateSigningRequest) -> &[u8] {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map_or(&[], |c| c.0.as_slice())
}

/// Upstream's populateConditionTimestamps: a condition without `lastUpdateTime` is updated
/// now; one without `lastTransitionTime` keeps that of a stored condition of the same type and
/// status, or transitions now.
fn populate_condition_times(
    conditions: &mut [CertificateSigningRequestCondition],
    old: &[CertificateSigningRequestCondition],
) {
    let now = crate::meta::now();
    for c in conditions {
        c.last_update_time.get_or_insert_with(|| now.clone());
        if c.last_transition_time.is_none() {
            let kept = old
                .iter()
                .find(|o| o.type_ == c.type_ && o.status == c.status)
                .and_then(|o| o.last_transition_time.clone());
            c.last_transition_time = Some(kept.unwrap_or_else(|| now.clone()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Validation (upstream's pkg/apis/certificates/validation).

/// What an update tolerates because the stored object already has it (upstream's
/// certificateValidationOptions for compatibility with existing data).
#[derive(Default)]
struct Options {
    both_approved_and_denied: bool,
    legacy_signer: bool,
    duplicate_condition_types: bool,
    empty_condition_type: bool,
    arbitrary_certificate: bool,
    unknown_usages: bool,
    duplicate_usages: bool,
}

impl Options {
    fn tolerating(new: &CertificateSigningRequest, old: &CertificateSigningRequest) -> Options {
        let types: Vec<&str> = conditions(old).iter().map(|c| c.type_.as_str()).collect();
        let usages = old.spec.usages.as_deref().unwrap_or(&[]);
        Options {
            both_approved_and_denied: types.contains(&APPROVED) && types.contains(&DENIED),
            legacy_signer: old.spec.signer_name == LEGACY_UNKNOWN_SIGNER,
            duplicate_condition_types: has_duplicates(&types),
            empty_condition_type: types.contains(&""),
            arbitrary_certificate: certificate(new) == certificate(old)
                || certificate_problem(certificate(old)).is_some(),
            unknown_usages: usages.iter().any(|u| !USAGES.contains(&u.as_str())),
            duplicate_usages: has_duplicates(usages),
        }
    }
}

fn has_duplicates<T: PartialEq>(items: &[T]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, a)| items[..i].contains(a))
}

fn validate_csr(csr: &CertificateSigningRequest, opts: &Options, errs: &mut Errors) {
    let sp = Path::new("spec");
    if let Some(problem) = csr_problem(&csr.spec.request.0) {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            &sp.child("request"),
            Some(go_bytes(&csr.spec.request)),
            problem,
        ));
    }
    let usages = csr.spec.usages.as_deref().unwrap_or(&[]);
    if usages.is_empty() {
        errs.push(FieldError::required(&sp.child("usages"), ""));
    }
    for (i, u) in usages.iter().enumerate() {
        if !opts.unknown_usages && !USAGES.contains(&u.as_str()) {
            errs.push(FieldError::not_supported(
                &sp.child("usages").index(i),
                u,
                USAGES,
            ));
        }
    }
    if !opts.duplicate_usages {
        for (i, u) in usages.iter().enumerate() {
            if usages[..i].contains(u) {
                errs.push(FieldError::duplicate(&sp.child("usages").index(i), u));
            }
        }
    }
    if !opts.legacy_signer && csr.spec.signer_name == LEGACY_UNKNOWN_SIGNER {
        errs.push(FieldError::invalid(
            &sp.child("signerName"),
            &csr.spec.signer_name,
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        validate_signer_name(&csr.spec.signer_name, &sp.child("signerName"), errs);
    }
    if let Some(secs) = csr.spec.expiration_seconds
        && secs < 600
    {
        errs.push(FieldError::invalid(
            &sp.child("expirationSeconds"),
            secs,
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    validate_conditions(conditions(csr), opts, errs);
    if !opts.arbitrary_certificate
        && let Some(problem) = certificate_problem(certificate(csr))
    {
        errs.push(FieldError::invalid(
            &Path::new("status").child("certificate"),
            "<certificate data>",
            problem,
        ));
    }
}

fn validate_conditions(
    conditions: &[CertificateSigningRequestCondition],
    opts: &Options,
    errs: &mut Errors,
) {
    let path = Path::new("status").child("conditions");
    let (mut approved, mut denied) = (false, false);
    for (i, c) in conditions.iter().enumerate() {
        let p = path.index(i);
        if !opts.empty_condition_type && c.type_.is_empty() {
            errs.push(FieldError::required(&p.child("type"), ""));
        }
        let allowed: &[&str] = if [APPROVED, DENIED, FAILED].contains(&c.type_.as_str()) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        if c.status.is_empty() {
            errs.push(FieldError::required(&p.child("status"), ""));
        } else if !allowed.contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                &p.child("status"),
                &c.status,
                allowed,
            ));
        }
        if !opts.both_approved_and_denied {
            let clash = match c.type_.as_str() {
                APPROVED => {
                    approved = true;
                    denied
                }
                DENIED => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                errs.push(FieldError::invalid(
                    &p.child("type"),
                    &c.type_,
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !opts.duplicate_condition_types && conditions[..i].iter().any(|o| o.type_ == c.type_) {
            errs.push(FieldError::duplicate(&p.child("type"), &c.type_));
        }
    }
}

/// Upstream's `ValidateSignerName`: a domain of at least two DNS labels, a slash, and a path
/// of DNS subdomains.
fn validate_signer_name(signer: &str, path: &Path, errs: &mut Errors) {
    if signer.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let segments: Vec<&str> = signer.split('/').collect();
    let &[domain, name] = segments.as_slice() else {
        errs.push(FieldError::invalid(
            path,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return;
    };
    if domain.len() > 253 {
        errs.push(FieldError::too_long(path, 253));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if let Some((label, problems)) = labels
        .iter()
        .map(|l| (l, dns1123_label(l)))
        .find(|(_, p)| !p.is_empty())
    {
        for e in problems {
            errs.push(FieldError::invalid(
                path,
                domain,
                format!("validating label {label:?}: {e}"),
            ));
        }
    }
    if labels.len() < 2 {
        errs.push(FieldError::invalid(
            path,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    if let Some((label, problems)) = name
        .split('.')
        .map(|l| (l, dns1123_subdomain(l)))
        .find(|(_, p)| !p.is_empty())
    {
        for e in problems {
            errs.push(FieldError::invalid(
                path,
                name,
                format!("validating label {label:?}: {e}"),
            ));
        }
    }
    let max = 253 + (253 + 63 + 1) + 1;
    if signer.len() > max {
        errs.push(FieldError::too_long(path, max));
    }
}

/// A Go `[]byte` as `%#v` prints it, the way upstream shows a bad `spec.request`.
fn go_bytes(b: &ByteString) -> String {
    if b.0.is_empty() {
        return "[]byte(nil)".to_string();
    }
    let hex: Vec<String> = b.0.iter().map(|c| format!("{c:#x}")).collect();
    format!("[]byte{{{}}}", hex.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const CSR_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    string("SignerName", doc::CSR_SPEC_SIGNER_NAME),
    // Upstream describes the requestor column with the doc of `request`.
    string("Requestor", doc::CSR_SPEC_REQUEST),
    string("RequestedDuration", doc::CSR_SPEC_EXPIRATION_SECONDS),
    string("Condition", doc::CSR_STATUS_CONDITIONS),
];

fn csr_cells(csr: &CertificateSigningRequest, now: Timestamp) -> Vec<Value> {
    let signer = match csr.spec.signer_name.as_str() {
        "" => "<none>",
        s => s,
    };
    let duration = csr.spec.expiration_seconds.map_or_else(
        || "<none>".to_string(),
        |s| human_duration(SignedDuration::from_secs(s.into())),
    );
    vec![
        name(&csr.metadata),
        age(&csr.metadata, now),
        text(signer),
        text(or_empty(csr.spec.username.as_ref())),
        text(duration),
        text(csr_condition(csr)),
    ]
}

/// Upstream's extractCSRStatus: the decision (Denied over Approved, else Pending), then
/// Failed and Issued when they apply.
fn csr_condition(csr: &CertificateSigningRequest) -> String {
    let has = |t: &str| conditions(csr).iter().any(|c| c.type_ == t);
    let mut status = if has(DENIED) {
        "Denied".to_string()
    } else if has(APPROVED) {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if has(FAILED) {
        status.push_str(",Failed");
    }
    if !certificate(csr).is_empty() {
        status.push_str(",Issued");
    }
    status
}

mod doc {
    pub const CSR_SPEC_SIGNER_NAME: &str = "Requested signer for the request. It is a qualified name in the form: `scope-hostname.io/name`. If empty, it will be defaulted:\n 1. If it's a kubelet client certificate, it is assigned\n    \"kubernetes.io/kube-apiserver-client-kubelet\".\n 2. If it's a kubelet serving certificate, it is assigned\n    \"kubernetes.io/kubelet-serving\".\n 3. Otherwise, it is assigned \"kubernetes.io/legacy-unknown\".\nDistribution of trust for signers happens out of band. You can select on this field using `spec.signerName`.";
    pub const CSR_SPEC_REQUEST: &str = "Base64-encoded PKCS#10 CSR data";
    pub const CSR_SPEC_EXPIRATION_SECONDS: &str = "expirationSeconds is the requested duration of validity of the issued certificate. The certificate signer may issue a certificate with a different validity duration so a client must check the delta between the notBefore and and notAfter fields in the issued certificate to determine the actual duration.\n\nThe v1.22+ in-tree implementations of the well-known Kubernetes signers will honor this field as long as the requested duration is not greater than the maximum duration they will honor per the --cluster-signing-duration CLI flag to the Kubernetes controller manager.\n\nCertificate signers may not honor this field for various reasons:\n\n  1. Old signer that is unaware of the field (such as the in-tree\n     implementations prior to v1.22)\n  2. Signer whose configured maximum is shorter than the requested duration\n  3. Signer whose configured minimum is longer than the requested duration\n\nThe minimum valid value for expirationSeconds is 600, i.e. 10 minutes.";
    pub const CSR_STATUS_CONDITIONS: &str =
        "Conditions applied to the request, such as approval or denial.";
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    /// A PEM CERTIFICATE REQUEST whose DER has the request's outer shape (not a real key).
    fn request_pem() -> String {
        let der = [0x30, 0x06, 0x30, 0x00, 0x30, 0x00, 0x03, 0x00];
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n")
    }

    fn csr(spec: Value, status: Value) -> CertificateSigningRequest {
        let mut spec = spec;
        if spec.get("request").is_none() {
            spec["request"] =
                json!(base64::engine::general_purpose::STANDARD.encode(request_pem()));
        }
        serde_json::from_value(
            json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": "req"}, "spec": spec, "status": status}),
        )
        .unwrap()
    }

    fn valid_spec() -> Value {
        json!({"signerName": "example.com/signer", "usages": ["client auth", "digital signature"]})
    }

    fn errors(c: &CertificateSigningRequest) -> Vec<String> {
        let mut errs = Vec::new();
        c.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn spec_validation() {
        assert_eq!(errors(&csr(valid_spec(), json!({}))), Vec::<String>::new());
        let mut spec = valid_spec();
        spec["request"] = json!(base64::engine::general_purpose::STANDARD.encode("hi"));
        spec["usages"] = json!(["client auth", "flying", "client auth"]);
        spec["expirationSeconds"] = json!(599);
        assert_eq!(
            errors(&csr(spec, json!({}))),
            [
                "spec.request: Invalid value: []byte{0x68, 0x69}: PEM block type must be CERTIFICATE REQUEST",
                format!(
                    "spec.usages[1]: Unsupported value: \"flying\": supported values: {}",
                    USAGES
                        .iter()
                        .map(|u| format!("{u:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
                .as_str(),
                "spec.usages[2]: Duplicate value: \"client auth\"",
                "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)",
            ]
        );
        let signer = |s: &str| {
            let mut spec = valid_spec();
            spec["signerName"] = json!(s);
            errors(&csr(spec, json!({})))
        };
        assert_eq!(signer(""), ["spec.signerName: Required value"]);
        assert_eq!(
            signer("example"),
            [
                "spec.signerName: Invalid value: \"example\": must be a fully qualified domain and path of the form 'example.com/signer-name'"
            ]
        );
        assert_eq!(
            signer("example/x"),
            [
                "spec.signerName: Invalid value: \"example\": should be a domain with at least two segments separated by dots"
            ]
        );
        assert_eq!(
            signer("Example.com/x"),
            [
                "spec.signerName: Invalid value: \"Example.com\": validating label \"Example\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(
            signer("kubernetes.io/legacy-unknown"),
            [
                "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"
            ]
        );
        assert!(signer("kubernetes.io/kube-apiserver-client").is_empty());
    }

    #[test]
    fn condition_validation() {
        let c = csr(
            valid_spec(),
            json!({"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "False"},
                                  {"type": "Approved", "status": "True"}]}),
        );
        assert_eq!(
            errors(&c),
            [
                "status.conditions[1].status: Unsupported value: \"False\": supported values: \"True\"",
                "status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
                "status.conditions[2].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive",
                "status.conditions[2].type: Duplicate value: \"Approved\"",
            ]
        );
    }

    #[test]
    fn certificates_in_status() {
        assert_eq!(certificate_problem(b""), None);
        assert_eq!(
            certificate_problem(request_pem().as_bytes()).unwrap(),
            "only CERTIFICATE PEM blocks are allowed, found \"CERTIFICATE REQUEST\""
        );
        assert_eq!(
            certificate_problem(b"junk").unwrap(),
            "must contain at least one CERTIFICATE PEM block"
        );
        let cert = "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n";
        assert_eq!(certificate_problem(cert.as_bytes()), None);
    }

    #[test]
    fn updates_keep_the_request() {
        let old = csr(
            valid_spec(),
            json!({"conditions": [{"type": "Approved", "status": "True"}]}),
        );
        let mut new = csr(
            json!({"signerName": "other.io/x", "usages": ["any"]}),
            json!({}),
        );
        new.prepare_update(&old);
        assert_eq!(new.spec, old.spec);
        assert_eq!(new.status, old.status);

        // Status updates may issue, never decide.
        let mut status = csr(
            valid_spec(),
            json!({"certificate": base64::engine::general_purpose::STANDARD.encode("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n"),
                   "conditions": [{"type": "Denied", "status": "True"}]}),
        );
        status.keep_spec(&old);
        let types: Vec<&str> = conditions(&status)
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, ["Approved"]);
        let mut errs = Vec::new();
        status.validate_update(&old, &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(csr_condition(&status), "Approved,Issued");

        // An issued certificate stays.
        let mut again = status.clone();
        again.status.as_mut().unwrap().certificate = Some(ByteString(b"x".to_vec()));
        let mut errs = Vec::new();
        again.validate_update(&status, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block",
                "status.certificate: Forbidden: updates may not modify existing certificate content",
            ]
        );
    }

    #[test]
    fn approval_takes_only_decisions() {
        let stored = csr(
            valid_spec(),
            json!({"certificate": "eA==", "conditions": [{"type": "Failed", "status": "True",
                   "lastUpdateTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}),
        );
        let mut body = stored.clone();
        body.spec.signer_name = "evil.io/x".into();
        body.status.as_mut().unwrap().certificate = None;
        body.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(
                serde_json::from_value(json!({"type": "Approved", "reason": "KubectlApprove"}))
                    .unwrap(),
            );
        let mut new = stored.clone();
        apply_approval(&mut new, &body);
        assert_eq!(new.spec, stored.spec);
        assert_eq!(certificate(&new), b"x");
        let c = conditions(&new);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0], conditions(&stored)[0]);
        assert_eq!(
            (c[1].type_.as_str(), c[1].status.as_str()),
            ("Approved", "True")
        );
        assert!(c[1].last_update_time.is_some() && c[1].last_transition_time.is_some());

        // A body that drops the Failed condition cannot remove it.
        let mut body = stored.clone();
        body.status.as_mut().unwrap().conditions = Some(vec![
            serde_json::from_value(json!({"type": "Denied", "status": "True"})).unwrap(),
        ]);
        let mut new = stored.clone();
        apply_approval(&mut new, &body);
        let types: Vec<&str> = conditions(&new).iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Failed", "Denied"]);
        assert_eq!(csr_condition(&new), "Denied,Failed,Issued");
    }

    #[test]
    fn csr_rows() {
        let mut c = serde_json::to_value(csr(
            json!({"signerName": "kubernetes.io/kube-apiserver-client", "username": "alice",
                   "expirationSeconds": 86400, "usages": ["client auth"]}),
            json!({"conditions": [{"type": "Approved", "status": "True"}]}),
        ))
        .unwrap();
        c["metadata"]["creationTimestamp"] = json!(ago(90));
        assert_eq!(
            row_of::<CertificateSigningRequest>(c),
            vec![
                json!("req"),
                json!("90s"),
                json!("kubernetes.io/kube-apiserver-client"),
                json!("alice"),
                json!("24h"),
                json!("Approved")
            ]
        );
        let pending = serde_json::to_value(csr(json!({"signerName": ""}), json!({}))).unwrap();
        let cells = row_of::<CertificateSigningRequest>(pending);
        assert_eq!(
            cells[2..],
            [
                json!("<none>"),
                json!(""),
                json!("<none>"),
                json!("Pending")
            ]
        );
    }
}
