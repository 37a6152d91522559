//! ValidatingAdmissionPolicies and their bindings. A policy says what to check and a binding
//! says where and with which parameters, so the policy keeps its parameter kind and match
//! constraints to itself while the binding holds only what varies per use: which policy, which
//! parameters, what a failure does. The policy's status belongs to the type checker that
//! writes it, so updates of the main resource never touch it.

use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    AuditAnnotation, ParamKind, ParamRef, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, ValidatingAdmissionPolicyStatus, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use serde_json::Value;

use super::{
    FAILURE_POLICIES, default_match_resources, go_slice, validate_match_conditions,
    validate_match_resources,
};
use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, integer, name, num, or_empty, string, text};
use crate::validation::{
    ErrorKind, Errors, FieldError, Path, dns1035_label, dns1123_subdomain, path_segment_name,
    qualified_name, validate_label_selector,
};

/// The Status reasons a failed validation may answer with.
const REASONS: &[&str] = &["Forbidden", "Invalid", "RequestEntityTooLarge"];
/// Sorted, as upstream lists them.
const VALIDATION_ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
/// In upstream's order, not sorted.
const PARAMETER_NOT_FOUND_ACTIONS: &[&str] = &["Deny", "Allow"];
const CONDITION_STATUSES: &[&str] = &["False", "True", "Unknown"];
const MAX_AUDIT_ANNOTATIONS: usize = 20;
/// Less than the 10kB an audit annotation's value may have: concatenating expressions grow.
const MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH: usize = 5 * 1024;
/// CEL's reserved words, which are no variable names.
const CEL_RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];
const CONDITION_REASON_MSG: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')";
const MAX_CONDITION_REASON_LENGTH: usize = 1024;
const MAX_CONDITION_MESSAGE_LENGTH: usize = 32 * 1024;

impl Kind for ValidatingAdmissionPolicy {
    const COLUMNS: &'static [Column] = POLICY_COLUMNS;

    spec_and_status!(generation);

    /// `SetDefaults_ValidatingAdmissionPolicySpec` and `SetDefaults_MatchResources`; upstream's
    /// spec is a value, always there to default.
    fn default_fields(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        spec.failure_policy.get_or_insert_with(|| "Fail".into());
        if let Some(constraints) = &mut spec.match_constraints {
            default_match_resources(constraints);
        }
    }

    fn prepare_create(&mut self) {
        self.status = Some(ValidatingAdmissionPolicyStatus::default());
    }

    fn validate(&self, errs: &mut Errors) {
        let spec = self.spec.clone().unwrap_or_default();
        validate_policy_spec(&self.metadata, &spec, false, &Path::new("spec"), errs);
    }

    /// As on create, but match conditions are checked again only when they, or the parameter
    /// kind they may read, changed; and the status a status update wrote.
    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        let spec = self.spec.clone().unwrap_or_default();
        let old_spec = old.spec.clone().unwrap_or_default();
        let ignore_match_conditions = spec.param_kind == old_spec.param_kind
            && spec.match_conditions == old_spec.match_conditions;
        validate_policy_spec(
            &self.metadata,
            &spec,
            ignore_match_conditions,
            &Path::new("spec"),
            errs,
        );
        if let Some(status) = &self.status {
            validate_policy_status(status, &Path::new("status"), errs);
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(policy_cells(self, now))
    }
}

impl Kind for ValidatingAdmissionPolicyBinding {
    const COLUMNS: &'static [Column] = BINDING_COLUMNS;

    /// Match resources default as a policy's do; the parameter-not-found action has no default
    /// in v1, so that every binding says what a missing parameter does.
    fn default_fields(&mut self) {
        if let Some(mr) = self.spec.as_mut().and_then(|s| s.match_resources.as_mut()) {
            default_match_resources(mr);
        }
    }

    fn validate(&self, errs: &mut Errors) {
        let spec = self.spec.clone().unwrap_or_default();
        validate_binding_spec(&spec, &Path::new("spec"), errs);
    }

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.spec != old.spec)
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(binding_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Validation.

/// `validateValidatingAdmissionPolicySpec`, CEL compilation aside.
fn validate_policy_spec(
    meta: &ObjectMeta,
    spec: &ValidatingAdmissionPolicySpec,
    ignore_match_conditions: bool,
    path: &Path,
    errs: &mut Errors,
) {
    match spec.failure_policy.as_deref() {
        None => errs.push(FieldError::required(&path.child("failurePolicy"), "")),
        Some(p) if !FAILURE_POLICIES.contains(&p) => errs.push(FieldError::not_supported(
            &path.child("failurePolicy"),
            p,
            FAILURE_POLICIES,
        )),
        Some(_) => {}
    }
    if let Some(pk) = &spec.param_kind {
        validate_param_kind(pk, &path.child("paramKind"), errs);
    }
    match &spec.match_constraints {
        None => errs.push(FieldError::required(&path.child("matchConstraints"), "")),
        Some(mc) => {
            let p = path.child("matchConstraints");
            validate_match_resources(mc, &p, errs);
            // The resource rules give the expressions their types.
            if mc.resource_rules.as_ref().is_none_or(Vec::is_empty) {
                errs.push(FieldError::required(&p.child("resourceRules"), ""));
            }
        }
    }
    if !ignore_match_conditions {
        validate_match_conditions(
            spec.match_conditions.as_deref().unwrap_or_default(),
            &path.child("matchConditions"),
            errs,
        );
    }
    for (i, v) in spec.variables.iter().flatten().enumerate() {
        validate_variable(v, &path.child("variables").index(i), errs);
    }
    let validations = spec.validations.as_deref().unwrap_or_default();
    let annotations = spec.audit_annotations.as_deref().unwrap_or_default();
    if validations.is_empty() && annotations.is_empty() {
        for field in ["validations", "auditAnnotations"] {
            errs.push(FieldError::required(
                &path.child(field),
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        return;
    }
    for (i, v) in validations.iter().enumerate() {
        validate_validation(v, &path.child("validations").index(i), errs);
    }
    let p = path.child("auditAnnotations");
    if annotations.len() > MAX_AUDIT_ANNOTATIONS {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            &p,
            Some(go_audit_annotations(annotations)),
            format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    for (i, a) in annotations.iter().enumerate() {
        validate_audit_annotation(meta, a, &p.index(i), errs);
        if annotations[..i].iter().any(|o| o.key == a.key) {
            errs.push(FieldError::duplicate(&p.index(i).child("key"), &a.key));
        }
    }
}

/// `validateParamKind`: an apiVersion with a DNS-subdomain group and a DNS-label version, and
/// a kind that is a DNS label but for its case.
fn validate_param_kind(pk: &ParamKind, path: &Path, errs: &mut Errors) {
    let api_version = pk.api_version.as_deref().unwrap_or("");
    let av = path.child("apiVersion");
    if api_version.is_empty() {
        errs.push(FieldError::required(&av, ""));
    } else {
        match parse_group_version(api_version) {
            Err(e) => errs.push(FieldError::invalid(&av, api_version, e)),
            Ok((group, version)) => {
                if !group.is_empty() {
                    let msgs = dns1123_subdomain(group);
                    if !msgs.is_empty() {
                        errs.push(FieldError::invalid(&av, group, msgs.join(",")));
                    }
                }
                if version.is_empty() {
                    errs.push(FieldError::invalid(
                        &av,
                        api_version,
                        "version must be specified",
                    ));
                } else {
                    let msgs = dns1035_label(version);
                    if !msgs.is_empty() {
                        errs.push(FieldError::invalid(&av, version, msgs.join(",")));
                    }
                }
            }
        }
    }
    let kind = pk.kind.as_deref().unwrap_or("");
    if kind.is_empty() {
        errs.push(FieldError::required(&path.child("kind"), ""));
    } else {
        let msgs = dns1035_label(&kind.to_lowercase());
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("kind"),
                kind,
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    msgs.join(",")
                ),
            ));
        }
    }
}

/// The policy's own `parseGroupVersion`: `group/version`, or a bare version.
fn parse_group_version(gv: &str) -> Result<(&str, &str), String> {
    if gv.is_empty() || gv == "/" {
        return Ok(("", ""));
    }
    match gv.matches('/').count() {
        0 => Ok(("", gv)),
        1 => Ok(gv.split_once('/').unwrap_or(("", gv))),
        _ => Err(format!("unexpected GroupVersion string: {gv}")),
    }
}

fn validate_variable(v: &Variable, path: &Path, errs: &mut Errors) {
    if v.name.trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name is not specified",
        ));
    } else if !is_cel_identifier(&v.name) {
        errs.push(FieldError::invalid(
            &path.child("name"),
            &v.name,
            "name is not a valid CEL identifier",
        ));
    }
    if v.expression.trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("expression"),
            "expression is not specified",
        ));
    }
}

/// `[_a-zA-Z][_a-zA-Z0-9]*`, less CEL's reserved words.
fn is_cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !CEL_RESERVED.contains(&name)
}

fn validate_validation(v: &Validation, path: &Path, errs: &mut Errors) {
    if v.expression.trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("expression"),
            "expression is not specified",
        ));
    }
    let message_expression = v.message_expression.as_deref().unwrap_or("");
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        errs.push(FieldError::invalid(
            &path.child("messageExpression"),
            message_expression,
            "must be non-empty if specified",
        ));
    }
    let message = v.message.as_deref().unwrap_or("");
    let trimmed = message.trim();
    if !message.is_empty() && trimmed.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("message"),
            message,
            "message must be non-empty if specified",
        ));
    } else if trimmed.contains(['\n', '\r']) {
        errs.push(FieldError::invalid(
            &path.child("message"),
            message,
            "message must not contain line breaks",
        ));
    }
    if let Some(reason) = v.reason.as_deref()
        && !REASONS.contains(&reason)
    {
        errs.push(FieldError::not_supported(
            &path.child("reason"),
            reason,
            REASONS,
        ));
    }
}

/// The key is the name part of an audit annotation `<policy name>/<key>`, so together they must
/// make a qualified name.
fn validate_audit_annotation(
    meta: &ObjectMeta,
    a: &AuditAnnotation,
    path: &Path,
    errs: &mut Errors,
) {
    let key = path.child("key");
    match meta.name.as_deref() {
        Some(name) if !name.is_empty() => {
            let full = format!("{name}/{}", a.key);
            for msg in qualified_name(&full) {
                errs.push(FieldError::invalid(&key, &full, msg));
            }
        }
        _ => errs.push(FieldError::invalid(
            &key,
            &a.key,
            "requires metadata.name be non-empty",
        )),
    }
    let value = path.child("valueExpression");
    let trimmed = a.value_expression.trim();
    if trimmed.is_empty() {
        errs.push(FieldError::required(
            &value,
            "valueExpression is not specified",
        ));
    } else if trimmed.len() > MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH {
        errs.push(FieldError::required(
            &value,
            format!(
                "must not exceed {MAX_AUDIT_ANNOTATION_VALUE_EXPRESSION_LENGTH} bytes in length"
            ),
        ));
    }
}

/// `validateValidatingAdmissionPolicyStatus`: type checking warnings and conditions (the
/// warnings' JSONPath is not parsed).
fn validate_policy_status(
    status: &ValidatingAdmissionPolicyStatus,
    path: &Path,
    errs: &mut Errors,
) {
    let warnings = path.child("typeChecking").child("expressionWarnings");
    let list = status
        .type_checking
        .as_ref()
        .and_then(|t| t.expression_warnings.as_deref())
        .unwrap_or_default();
    for (i, w) in list.iter().enumerate() {
        if w.warning.is_empty() {
            errs.push(FieldError::required(
                &warnings.index(i).child("warning"),
                "",
            ));
        }
        if w.field_ref.trim().is_empty() {
            errs.push(FieldError::required(
                &warnings.index(i).child("fieldRef"),
                "",
            ));
        }
    }
    let conditions = status.conditions.as_deref().unwrap_or_default();
    for (i, c) in conditions.iter().enumerate() {
        let p = path.child("conditions").index(i);
        if conditions[..i].iter().any(|o| o.type_ == c.type_) {
            errs.push(FieldError::duplicate(&p.child("type"), &c.type_));
        }
        validate_condition(c, &p, errs);
    }
}

/// metav1's `ValidateCondition`; the transition time is always there once decoded.
fn validate_condition(c: &Condition, path: &Path, errs: &mut Errors) {
    for msg in qualified_name(&c.type_) {
        errs.push(FieldError::invalid(&path.child("type"), &c.type_, msg));
    }
    if !CONDITION_STATUSES.contains(&c.status.as_str()) {
        errs.push(FieldError::not_supported(
            &path.child("status"),
            &c.status,
            CONDITION_STATUSES,
        ));
    }
    if let Some(g) = c.observed_generation
        && g < 0
    {
        errs.push(FieldError::invalid(
            &path.child("observedGeneration"),
            g,
            "must be greater than or equal to zero",
        ));
    }
    let reason = path.child("reason");
    if c.reason.is_empty() {
        errs.push(FieldError::required(&reason, "must be set"));
    } else {
        if !is_condition_reason(&c.reason) {
            errs.push(FieldError::invalid(
                &reason,
                &c.reason,
                CONDITION_REASON_MSG,
            ));
        }
        if c.reason.len() > MAX_CONDITION_REASON_LENGTH {
            errs.push(FieldError::too_long(&reason, MAX_CONDITION_REASON_LENGTH));
        }
    }
    if c.message.len() > MAX_CONDITION_MESSAGE_LENGTH {
        errs.push(FieldError::too_long(
            &path.child("message"),
            MAX_CONDITION_MESSAGE_LENGTH,
        ));
    }
}

/// `[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?`
fn is_condition_reason(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':');
    let last = b[b.len() - 1];
    b[0].is_ascii_alphabetic()
        && b.iter().all(inner)
        && (last.is_ascii_alphanumeric() || last == b'_')
}

/// `validateValidatingAdmissionPolicyBindingSpec`.
fn validate_binding_spec(
    spec: &ValidatingAdmissionPolicyBindingSpec,
    path: &Path,
    errs: &mut Errors,
) {
    let policy_name = spec.policy_name.as_deref().unwrap_or("");
    if policy_name.is_empty() {
        errs.push(FieldError::required(&path.child("policyName"), ""));
    } else {
        for msg in dns1123_subdomain(policy_name) {
            errs.push(FieldError::invalid(
                &path.child("policyName"),
                policy_name,
                msg,
            ));
        }
    }
    if let Some(pr) = &spec.param_ref {
        validate_param_ref(pr, &path.child("paramRef"), errs);
    }
    if let Some(mr) = &spec.match_resources {
        // Upstream's field path has this spelling.
        validate_match_resources(mr, &path.child("matchResouces"), errs);
    }
    validate_validation_actions(
        spec.validation_actions.as_deref().unwrap_or_default(),
        &path.child("validationActions"),
        errs,
    );
}

/// One parameter by name, or every one a selector matches, never both; and what a missing one
/// does, always said.
fn validate_param_ref(pr: &ParamRef, path: &Path, errs: &mut Errors) {
    let name = pr.name.as_deref().unwrap_or("");
    const EXCLUSIVE: &str = "name and selector are mutually exclusive";
    if !name.is_empty() {
        for msg in path_segment_name(name) {
            errs.push(FieldError::invalid(&path.child("name"), name, msg));
        }
        if pr.selector.is_some() {
            errs.push(FieldError::forbidden(&path.child("name"), EXCLUSIVE));
        }
    }
    if let Some(selector) = &pr.selector {
        validate_label_selector(selector, &path.child("selector"), errs);
        if !name.is_empty() {
            errs.push(FieldError::forbidden(&path.child("selector"), EXCLUSIVE));
        }
    }
    if name.is_empty() && pr.selector.is_none() {
        errs.push(FieldError::required(
            path,
            "one of name or selector must be specified",
        ));
    }
    let action = path.child("parameterNotFoundAction");
    match pr.parameter_not_found_action.as_deref() {
        None | Some("") => errs.push(FieldError::required(&action, "")),
        Some(a) if !PARAMETER_NOT_FOUND_ACTIONS.contains(&a) => errs.push(
            FieldError::not_supported(&action, a, PARAMETER_NOT_FOUND_ACTIONS),
        ),
        Some(_) => {}
    }
}

/// At least one action, each known and once; Deny and Warn together would report each
/// failure twice over.
fn validate_validation_actions(actions: &[String], path: &Path, errs: &mut Errors) {
    for (i, a) in actions.iter().enumerate() {
        if !VALIDATION_ACTIONS.contains(&a.as_str()) {
            errs.push(FieldError::not_supported(
                &path.index(i),
                a,
                VALIDATION_ACTIONS,
            ));
        }
        if actions[..i].contains(a) {
            errs.push(FieldError::duplicate(&path.index(i), a));
        }
    }
    let has = |a: &str| actions.iter().any(|x| x == a);
    if has("Deny") && has("Warn") {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            Some(go_slice("admissionregistration.ValidationAction", actions)),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if actions.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one validation action is required",
        ));
    }
}

/// Audit annotations as Go's `%#v` prints them in a field error.
fn go_audit_annotations(annotations: &[AuditAnnotation]) -> String {
    let items: Vec<String> = annotations
        .iter()
        .map(|a| {
            format!(
                "admissionregistration.AuditAnnotation{{Key:{:?}, ValueExpression:{:?}}}",
                a.key, a.value_expression
            )
        })
        .collect();
    format!(
        "[]admissionregistration.AuditAnnotation{{{}}}",
        items.join(", ")
    )
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const POLICY_COLUMNS: &[Column] = &[
    NAME,
    integer(
        "Validations",
        "Validations indicates the number of validation rules defined in this configuration",
    ),
    string(
        "ParamKind",
        "ParamKind specifies the kind of resources used to parameterize this policy",
    ),
    AGE,
];

fn policy_cells(p: &ValidatingAdmissionPolicy, now: Timestamp) -> Vec<Value> {
    let spec = p.spec.as_ref();
    let validations = spec
        .and_then(|s| s.validations.as_ref())
        .map_or(0, Vec::len);
    let param_kind = spec.and_then(|s| s.param_kind.as_ref()).map_or_else(
        || "<unset>".to_string(),
        |pk| {
            format!(
                "{}/{}",
                or_empty(pk.api_version.as_ref()),
                or_empty(pk.kind.as_ref())
            )
        },
    );
    vec![
        name(&p.metadata),
        num(i64::try_from(validations).unwrap_or(i64::MAX)),
        text(param_kind),
        age(&p.metadata, now),
    ]
}

const BINDING_COLUMNS: &[Column] = &[
    NAME,
    string(
        "PolicyName",
        "PolicyName indicates the policy definition which the policy binding binded to",
    ),
    string(
        "ParamRef",
        "ParamRef indicates the param resource which sets the configration param",
    ),
    AGE,
];

fn binding_cells(b: &ValidatingAdmissionPolicyBinding, now: Timestamp) -> Vec<Value> {
    let spec = b.spec.as_ref();
    let param = spec
        .and_then(|s| s.param_ref.as_ref())
        .and_then(|pr| {
            let name = or_empty(pr.name.as_ref());
            if !name.is_empty() {
                // Without a namespace the parameter may be cluster-scoped or in the request's
                // namespace: upstream cannot tell here, and prints `*`.
                let ns = match or_empty(pr.namespace.as_ref()) {
                    "" => "*",
                    ns => ns,
                };
                Some(format!("{ns}/{name}"))
            } else {
                pr.selector.as_ref().map(go_label_selector)
            }
        })
        .unwrap_or_else(|| "<unset>".to_string());
    vec![
        name(&b.metadata),
        text(or_empty(spec.and_then(|s| s.policy_name.as_ref()))),
        text(param),
        age(&b.metadata, now),
    ]
}

/// A label selector as its generated Go `String()` prints it, which is what upstream's printer
/// shows for a binding's parameter selector.
fn go_label_selector(s: &LabelSelector) -> String {
    let labels: String = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}: {v},"))
        .collect();
    let expressions: String = s
        .match_expressions
        .iter()
        .flatten()
        .map(|r| {
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                r.key,
                r.operator,
                r.values.as_deref().unwrap_or_default().join(" ")
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn policy(spec: Value) -> ValidatingAdmissionPolicy {
        let mut p: ValidatingAdmissionPolicy =
            serde_json::from_value(json!({"metadata": {"name": "replicas"}, "spec": spec}))
                .unwrap();
        p.default_fields();
        p
    }

    fn binding(spec: Value) -> ValidatingAdmissionPolicyBinding {
        let mut b: ValidatingAdmissionPolicyBinding =
            serde_json::from_value(json!({"metadata": {"name": "replicas-prod"}, "spec": spec}))
                .unwrap();
        b.default_fields();
        b
    }

    fn errors<K: Kind>(k: &K) -> Vec<String> {
        let mut errs = Vec::new();
        k.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn constraints() -> Value {
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
    }

    #[test]
    fn policy_defaults() {
        let p = policy(json!({"matchConstraints": constraints(),
            "validations": [{"expression": "object.spec.replicas <= 5"}]}));
        let spec = serde_json::to_value(p.spec.as_ref().unwrap()).unwrap();
        assert_eq!(spec["failurePolicy"], "Fail");
        let mc = &spec["matchConstraints"];
        assert_eq!(mc["matchPolicy"], "Equivalent");
        assert_eq!(mc["namespaceSelector"], json!({}));
        assert_eq!(mc["objectSelector"], json!({}));
        assert_eq!(mc["resourceRules"][0]["scope"], "*");
        assert_eq!(errors(&p), Vec::<String>::new());

        let mut created = p.clone();
        created.status = Some(ValidatingAdmissionPolicyStatus {
            observed_generation: Some(3),
            ..Default::default()
        });
        created.prepare_create();
        assert_eq!(created.status, Some(Default::default()));

        // A spec-less policy still gets its failure policy, as upstream's value spec does.
        let mut bare: ValidatingAdmissionPolicy =
            serde_json::from_value(json!({"metadata": {"name": "bare"}})).unwrap();
        bare.default_fields();
        assert_eq!(bare.spec.unwrap().failure_policy.as_deref(), Some("Fail"));
    }

    #[test]
    fn policy_validation() {
        assert_eq!(
            errors(&policy(json!({"failurePolicy": "Sometimes"}))),
            vec![
                "spec.failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
                "spec.matchConstraints: Required value",
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
                "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
            ]
        );
        assert_eq!(
            errors(&policy(json!({
                "paramKind": {"apiVersion": "a/b/c", "kind": "Bad_Kind"},
                "matchConstraints": {"matchPolicy": "Fuzzy"},
                "variables": [{"name": "in", "expression": "1"}, {"name": "x", "expression": " "}],
                "validations": [{"expression": "", "message": "two\nlines", "reason": "Unauthorized"},
                                {"expression": "true", "messageExpression": " "}],
                "auditAnnotations": [{"key": "k", "valueExpression": "'v'"}, {"key": "k", "valueExpression": ""}],
            }))),
            vec![
                "spec.paramKind.apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c",
                "spec.paramKind.kind: Invalid value: \"Bad_Kind\": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                "spec.matchConstraints.matchPolicy: Unsupported value: \"Fuzzy\": supported values: \"Equivalent\", \"Exact\"",
                "spec.matchConstraints.resourceRules: Required value",
                "spec.variables[0].name: Invalid value: \"in\": name is not a valid CEL identifier",
                "spec.variables[1].expression: Required value: expression is not specified",
                "spec.validations[0].expression: Required value: expression is not specified",
                "spec.validations[0].message: Invalid value: \"two\\nlines\": message must not contain line breaks",
                "spec.validations[0].reason: Unsupported value: \"Unauthorized\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\"",
                "spec.validations[1].messageExpression: Invalid value: \" \": must be non-empty if specified",
                "spec.auditAnnotations[1].valueExpression: Required value: valueExpression is not specified",
                "spec.auditAnnotations[1].key: Duplicate value: \"k\"",
            ]
        );
        assert_eq!(
            errors(&policy(json!({"paramKind": {"apiVersion": "Example.com/"},
                "matchConstraints": constraints(), "auditAnnotations": [{"key": "bad key", "valueExpression": "1"}]}))),
            vec![
                "spec.paramKind.apiVersion: Invalid value: \"Example.com\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.paramKind.apiVersion: Invalid value: \"Example.com/\": version must be specified",
                "spec.paramKind.kind: Required value",
                "spec.auditAnnotations[0].key: Invalid value: \"replicas/bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ]
        );
    }

    #[test]
    fn policy_updates() {
        let old = policy(json!({"matchConstraints": constraints(),
            "matchConditions": [{"name": "", "expression": "true"}],
            "validations": [{"expression": "true"}]}));
        // Stored match conditions are not checked again while unchanged.
        let mut new = old.clone();
        new.status = Some(
            serde_json::from_value(json!({
            "typeChecking": {"expressionWarnings": [{"fieldRef": " ", "warning": ""}]},
            "conditions": [{"type": "Ready", "status": "Maybe", "reason": "1x", "message": "",
                            "lastTransitionTime": "2025-01-01T00:00:00Z"}]}))
            .unwrap(),
        );
        let mut errs = Vec::new();
        new.validate_update(&old, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "status.typeChecking.expressionWarnings[0].warning: Required value".to_string(),
                "status.typeChecking.expressionWarnings[0].fieldRef: Required value".to_string(),
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"False\", \"True\", \"Unknown\"".to_string(),
                format!("status.conditions[0].reason: Invalid value: \"1x\": {CONDITION_REASON_MSG}"),
            ]
        );
        assert_eq!(
            errors(&old),
            vec!["spec.matchConditions[0].name: Required value"]
        );
        assert_eq!(new.spec_changed(&old), Some(false));
    }

    #[test]
    fn binding_validation() {
        let ok = binding(
            json!({"policyName": "replicas", "validationActions": ["Deny", "Audit"],
            "paramRef": {"name": "prod", "namespace": "default", "parameterNotFoundAction": "Deny"},
            "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}),
        );
        assert_eq!(errors(&ok), Vec::<String>::new());
        let mr = serde_json::to_value(&ok.spec.as_ref().unwrap().match_resources).unwrap();
        assert_eq!(mr["matchPolicy"], "Equivalent");
        assert_eq!(mr["objectSelector"], json!({}));
        assert_eq!(
            ok.spec
                .as_ref()
                .unwrap()
                .param_ref
                .as_ref()
                .unwrap()
                .parameter_not_found_action
                .as_deref(),
            Some("Deny")
        );

        assert_eq!(
            errors(&binding(json!({}))),
            vec![
                "spec.policyName: Required value",
                "spec.validationActions: Required value: at least one validation action is required",
            ]
        );
        assert_eq!(
            errors(&binding(
                json!({"policyName": "Replicas", "validationActions": ["Deny", "Warn", "Deny", "Log"],
                "paramRef": {"name": "a/b", "selector": {}},
                "matchResources": {"matchPolicy": "Fuzzy"}})
            )),
            vec![
                "spec.policyName: Invalid value: \"Replicas\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.paramRef.name: Invalid value: \"a/b\": may not contain '/'",
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.parameterNotFoundAction: Required value",
                "spec.matchResouces.matchPolicy: Unsupported value: \"Fuzzy\": supported values: \"Equivalent\", \"Exact\"",
                "spec.validationActions[2]: Duplicate value: \"Deny\"",
                "spec.validationActions[3]: Unsupported value: \"Log\": supported values: \"Audit\", \"Deny\", \"Warn\"",
                "spec.validationActions: Invalid value: []admissionregistration.ValidationAction{\"Deny\", \"Warn\", \"Deny\", \"Log\"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ]
        );
        assert_eq!(
            errors(&binding(
                json!({"policyName": "p", "validationActions": ["Warn"],
                "paramRef": {"parameterNotFoundAction": "Ignore"}})
            )),
            vec![
                "spec.paramRef: Required value: one of name or selector must be specified",
                "spec.paramRef.parameterNotFoundAction: Unsupported value: \"Ignore\": supported values: \"Deny\", \"Allow\"",
            ]
        );
    }

    #[test]
    fn rows() {
        let p = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "replicas", "creationTimestamp": ago(30)},
            "spec": {"paramKind": {"apiVersion": "rules.example.com/v1", "kind": "ReplicaLimit"},
                     "validations": [{"expression": "true"}, {"expression": "false"}]}});
        assert_eq!(
            row_of::<ValidatingAdmissionPolicy>(p),
            vec![
                json!("replicas"),
                json!(2),
                json!("rules.example.com/v1/ReplicaLimit"),
                json!("30s")
            ]
        );
        let p = json!({"metadata": {"name": "bare", "creationTimestamp": ago(30)}});
        assert_eq!(
            row_of::<ValidatingAdmissionPolicy>(p),
            vec![json!("bare"), json!(0), json!("<unset>"), json!("30s")]
        );

        let b = |param_ref: Value| {
            row_of::<ValidatingAdmissionPolicyBinding>(json!({
                "metadata": {"name": "b", "creationTimestamp": ago(7200)},
                "spec": {"policyName": "replicas", "paramRef": param_ref}}))
        };
        assert_eq!(
            b(json!({"name": "limits", "namespace": "prod"})),
            vec![
                json!("b"),
                json!("replicas"),
                json!("prod/limits"),
                json!("120m")
            ]
        );
        assert_eq!(b(json!({"name": "limits"}))[2], json!("*/limits"));
        assert_eq!(b(Value::Null)[2], json!("<unset>"));
        assert_eq!(
            b(
                json!({"selector": {"matchLabels": {"tier": "web", "app": "x"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["a", "b"]}]}})
            )[2],
            json!(
                "&LabelSelector{MatchLabels:map[string]string{app: x,tier: web,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:env,Operator:In,Values:[a b],},},}"
            )
        );
    }
}
