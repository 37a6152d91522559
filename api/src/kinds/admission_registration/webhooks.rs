//! Mutating and validating webhook configurations. The two kinds differ only in the mutating
//! webhook's reinvocation policy, so both are validated through one view of a webhook
//! ([`Hook`]). An update is held to the rules the stored configuration already met: upstream
//! relaxes a rule for configurations written before it existed, so that they stay editable.

use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde_json::Value;

use super::{
    FAILURE_POLICIES, MATCH_POLICIES, default_rules, go_slice, validate_match_conditions,
    validate_rule_with_operations,
};
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, integer, name, num};
use crate::validation::{
    ErrorKind, Errors, FieldError, Path, dns1035_label, dns1123_subdomain, validate_label_selector,
};

/// The AdmissionReview versions this server can send (`AcceptedAdmissionReviewVersions`).
const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
/// Side effect classes a webhook may declare; v1 allows only the first two on new webhooks.
const NO_SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
const ALL_SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun", "Some", "Unknown"];
const REINVOCATION_POLICIES: &[&str] = &["IfNeeded", "Never"];
const DEFAULT_TIMEOUT_SECONDS: i32 = 10;
const MAX_TIMEOUT_SECONDS: i32 = 30;
const DEFAULT_SERVICE_PORT: i32 = 443;
/// The hint upstream appends to a bad webhook URL.
const URL_FORM: &str = "; desired format: https://host[/path]";

// ---------------------------------------------------------------------------------------------
// Defaults.

/// `SetDefaults_MutatingWebhook`/`SetDefaults_ValidatingWebhook` for what the two share, with
/// `SetDefaults_Rule` and `SetDefaults_ServiceReference` below them. Side effects and review
/// versions have no default in v1: a webhook must say.
macro_rules! default_webhook {
    ($hook:expr) => {{
        let hook = $hook;
        hook.failure_policy.get_or_insert_with(|| "Fail".into());
        hook.match_policy.get_or_insert_with(|| "Equivalent".into());
        hook.namespace_selector.get_or_insert_with(Default::default);
        hook.object_selector.get_or_insert_with(Default::default);
        hook.timeout_seconds.get_or_insert(DEFAULT_TIMEOUT_SECONDS);
        if let Some(service) = &mut hook.client_config.service {
            service.port.get_or_insert(DEFAULT_SERVICE_PORT);
        }
        default_rules(&mut hook.rules);
    }};
}

/// What the two configuration kinds share beyond defaults: validation of their webhooks,
/// generation on any webhook change, and the row.
macro_rules! webhook_configuration_rules {
    () => {
        fn validate(&self, errs: &mut Errors) {
            validate_webhooks(&hooks(self.webhooks.as_deref()), &Options::CREATE, errs);
        }

        fn validate_update(&self, old: &Self, errs: &mut Errors) {
            let old = hooks(old.webhooks.as_deref());
            let new = hooks(self.webhooks.as_deref());
            validate_webhooks(&new, &Options::update(&new, &old), errs);
        }

        fn spec_changed(&self, old: &Self) -> Option<bool> {
            Some(self.webhooks != old.webhooks)
        }

        fn row(&self, now: Timestamp) -> Row {
            webhook_configuration_row(
                &self.metadata,
                self.webhooks.as_ref().map_or(0, Vec::len),
                now,
            )
        }
    };
}

impl Kind for MutatingWebhookConfiguration {
    const COLUMNS: &'static [Column] = WEBHOOK_CONFIGURATION_COLUMNS;

    fn default_fields(&mut self) {
        for hook in self.webhooks.iter_mut().flatten() {
            default_webhook!(&mut *hook);
            hook.reinvocation_policy
                .get_or_insert_with(|| "Never".into());
        }
    }

    webhook_configuration_rules!();
}

impl Kind for ValidatingWebhookConfiguration {
    const COLUMNS: &'static [Column] = WEBHOOK_CONFIGURATION_COLUMNS;

    fn default_fields(&mut self) {
        for hook in self.webhooks.iter_mut().flatten() {
            default_webhook!(&mut *hook);
        }
    }

    webhook_configuration_rules!();
}

// ---------------------------------------------------------------------------------------------
// Validation.

/// What a webhook of either kind has, for validation.
struct Hook<'a> {
    name: &'a str,
    client_config: &'a WebhookClientConfig,
    rules: &'a [RuleWithOperations],
    failure_policy: Option<&'a str>,
    match_policy: Option<&'a str>,
    side_effects: &'a str,
    timeout_seconds: Option<i32>,
    namespace_selector: Option<&'a LabelSelector>,
    object_selector: Option<&'a LabelSelector>,
    /// Mutating webhooks only.
    reinvocation_policy: Option<&'a str>,
    match_conditions: &'a [MatchCondition],
    admission_review_versions: &'a [String],
}

impl<'a> From<&'a MutatingWebhook> for Hook<'a> {
    fn from(h: &'a MutatingWebhook) -> Self {
        Hook {
            name: &h.name,
            client_config: &h.client_config,
            rules: h.rules.as_deref().unwrap_or_default(),
            failure_policy: h.failure_policy.as_deref(),
            match_policy: h.match_policy.as_deref(),
            side_effects: &h.side_effects,
            timeout_seconds: h.timeout_seconds,
            namespace_selector: h.namespace_selector.as_ref(),
            object_selector: h.object_selector.as_ref(),
            reinvocation_policy: h.reinvocation_policy.as_deref(),
            match_conditions: h.match_conditions.as_deref().unwrap_or_default(),
            admission_review_versions: &h.admission_review_versions,
        }
    }
}

impl<'a> From<&'a ValidatingWebhook> for Hook<'a> {
    fn from(h: &'a ValidatingWebhook) -> Self {
        Hook {
            name: &h.name,
            client_config: &h.client_config,
            rules: h.rules.as_deref().unwrap_or_default(),
            failure_policy: h.failure_policy.as_deref(),
            match_policy: h.match_policy.as_deref(),
            side_effects: &h.side_effects,
            timeout_seconds: h.timeout_seconds,
            namespace_selector: h.namespace_selector.as_ref(),
            object_selector: h.object_selector.as_ref(),
            reinvocation_policy: None,
            match_conditions: h.match_conditions.as_deref().unwrap_or_default(),
            admission_review_versions: &h.admission_review_versions,
        }
    }
}

fn hooks<'a, T>(webhooks: Option<&'a [T]>) -> Vec<Hook<'a>>
where
    &'a T: Into<Hook<'a>>,
{
    webhooks
        .unwrap_or_default()
        .iter()
        .map(Into::into)
        .collect()
}

/// Upstream's `validationOptions` for webhooks: on create every rule holds; on update a rule
/// the stored configuration breaks is waived.
struct Options {
    /// Match conditions are unchanged, so not checked again.
    ignore_match_conditions: bool,
    require_no_side_effects: bool,
    require_recognized_review_version: bool,
    require_unique_names: bool,
}

impl Options {
    const CREATE: Options = Options {
        ignore_match_conditions: false,
        require_no_side_effects: true,
        require_recognized_review_version: true,
        require_unique_names: true,
    };

    fn update(new: &[Hook], old: &[Hook]) -> Options {
        Options {
            ignore_match_conditions: new.len() == old.len()
                && new
                    .iter()
                    .zip(old)
                    .all(|(n, o)| n.match_conditions == o.match_conditions),
            require_no_side_effects: old
                .iter()
                .all(|h| NO_SIDE_EFFECTS.contains(&h.side_effects)),
            require_recognized_review_version: old.iter().all(|h| {
                h.admission_review_versions.is_empty()
                    || h.admission_review_versions
                        .iter()
                        .any(|v| REVIEW_VERSIONS.contains(&v.as_str()))
            }),
            require_unique_names: old
                .iter()
                .enumerate()
                .all(|(i, h)| !old[..i].iter().any(|o| o.name == h.name)),
        }
    }
}

/// `validate{Mutating,Validating}WebhookConfiguration` without the metadata: each webhook, its
/// review versions, and names unique within the configuration.
fn validate_webhooks(hooks: &[Hook], opts: &Options, errs: &mut Errors) {
    for (i, hook) in hooks.iter().enumerate() {
        let path = Path::new("webhooks").index(i);
        validate_webhook(hook, opts, &path, errs);
        validate_review_versions(
            hook.admission_review_versions,
            opts.require_recognized_review_version,
            &path.child("admissionReviewVersions"),
            errs,
        );
        if opts.require_unique_names
            && !hook.name.is_empty()
            && hooks[..i].iter().any(|h| h.name == hook.name)
        {
            errs.push(FieldError::duplicate(&path.child("name"), hook.name));
        }
    }
}

fn validate_webhook(hook: &Hook, opts: &Options, path: &Path, errs: &mut Errors) {
    fully_qualified_name(hook.name, &path.child("name"), errs);
    for (i, rule) in hook.rules.iter().enumerate() {
        validate_rule_with_operations(&rule.into(), &path.child("rules").index(i), errs);
    }
    if let Some(p) = hook.failure_policy
        && !FAILURE_POLICIES.contains(&p)
    {
        errs.push(FieldError::not_supported(
            &path.child("failurePolicy"),
            p,
            FAILURE_POLICIES,
        ));
    }
    if let Some(p) = hook.match_policy
        && !MATCH_POLICIES.contains(&p)
    {
        errs.push(FieldError::not_supported(
            &path.child("matchPolicy"),
            p,
            MATCH_POLICIES,
        ));
    }
    let allowed = if opts.require_no_side_effects {
        NO_SIDE_EFFECTS
    } else {
        ALL_SIDE_EFFECTS
    };
    if hook.side_effects.is_empty() {
        errs.push(FieldError::required(
            &path.child("sideEffects"),
            format!("must specify one of {}", allowed.join(", ")),
        ));
    } else if !allowed.contains(&hook.side_effects) {
        errs.push(FieldError::not_supported(
            &path.child("sideEffects"),
            hook.side_effects,
            allowed,
        ));
    }
    if let Some(t) = hook.timeout_seconds
        && !(1..=MAX_TIMEOUT_SECONDS).contains(&t)
    {
        errs.push(FieldError::invalid(
            &path.child("timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    if let Some(s) = hook.namespace_selector {
        validate_label_selector(s, &path.child("namespaceSelector"), errs);
    }
    if let Some(s) = hook.object_selector {
        validate_label_selector(s, &path.child("objectSelector"), errs);
    }
    if let Some(p) = hook.reinvocation_policy
        && !REINVOCATION_POLICIES.contains(&p)
    {
        errs.push(FieldError::not_supported(
            &path.child("reinvocationPolicy"),
            p,
            REINVOCATION_POLICIES,
        ));
    }
    validate_client_config(hook.client_config, &path.child("clientConfig"), errs);
    if !opts.ignore_match_conditions {
        validate_match_conditions(hook.match_conditions, &path.child("matchConditions"), errs);
    }
}

/// `IsFullyQualifiedName`: a DNS subdomain of three labels or more, so that webhooks of
/// different owners cannot collide by name.
fn fully_qualified_name(name: &str, path: &Path, errs: &mut Errors) {
    if name.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let msgs = dns1123_subdomain(name);
    if !msgs.is_empty() {
        errs.push(FieldError::invalid(path, name, msgs.join(",")));
    } else if name.split('.').count() < 3 {
        errs.push(FieldError::invalid(
            path,
            name,
            "should be a domain with at least three segments separated by dots",
        ));
    }
}

/// `validateAdmissionReviewVersions`: each a DNS-1035 label, once, and one the server speaks.
fn validate_review_versions(
    versions: &[String],
    require_known: bool,
    path: &Path,
    errs: &mut Errors,
) {
    if versions.is_empty() {
        errs.push(FieldError::required(
            path,
            format!("must specify one of {}", REVIEW_VERSIONS.join(", ")),
        ));
        return;
    }
    for (i, v) in versions.iter().enumerate() {
        if versions[..i].contains(v) {
            errs.push(FieldError::invalid(&path.index(i), v, "duplicate version"));
            continue;
        }
        for msg in dns1035_label(v) {
            errs.push(FieldError::invalid(&path.index(i), v, msg));
        }
    }
    if require_known
        && !versions
            .iter()
            .any(|v| REVIEW_VERSIONS.contains(&v.as_str()))
    {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            Some(go_slice("string", versions)),
            format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
}

fn validate_client_config(cc: &WebhookClientConfig, path: &Path, errs: &mut Errors) {
    match (&cc.url, &cc.service) {
        (Some(url), None) => validate_webhook_url(url, &path.child("url"), errs),
        (None, Some(s)) => validate_webhook_service(
            &path.child("service"),
            // Upstream passes the name and namespace in the other order than its function
            // takes them, so a missing namespace is reported as a missing name, and the other
            // way round; kept, so that the errors read as upstream's.
            &s.name,
            &s.namespace,
            s.path.as_deref(),
            s.port.unwrap_or(DEFAULT_SERVICE_PORT),
            errs,
        ),
        _ => errs.push(FieldError::required(
            path,
            "exactly one of url or service is required",
        )),
    }
}

/// `webhook.ValidateWebhookURL` with https forced.
fn validate_webhook_url(url: &str, path: &Path, errs: &mut Errors) {
    let u = match GoUrl::parse(url) {
        Ok(u) => u,
        Err(e) => {
            errs.push(FieldError::required(
                path,
                format!("url must be a valid URL: {e}{URL_FORM}"),
            ));
            return;
        }
    };
    if u.scheme != "https" {
        errs.push(FieldError::invalid(
            path,
            &u.scheme,
            format!("'https' is the only allowed URL scheme{URL_FORM}"),
        ));
    }
    if u.host.is_empty() {
        errs.push(FieldError::invalid(
            path,
            &u.host,
            format!("host must be provided{URL_FORM}"),
        ));
    }
    if let Some(user) = &u.user {
        errs.push(FieldError::invalid(
            path,
            user,
            "user information is not permitted in the URL",
        ));
    }
    if !u.fragment.is_empty() {
        errs.push(FieldError::invalid(
            path,
            &u.fragment,
            "fragments are not permitted in the URL",
        ));
    }
    if !u.raw_query.is_empty() {
        errs.push(FieldError::invalid(
            path,
            &u.raw_query,
            "query parameters are not permitted in the URL",
        ));
    }
}

/// `webhook.ValidateWebhookService(fldPath, namespace, name, path, port)`.
fn validate_webhook_service(
    path: &Path,
    namespace: &str,
    name: &str,
    url_path: Option<&str>,
    port: i32,
    errs: &mut Errors,
) {
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "service name is required",
        ));
    }
    if namespace.is_empty() {
        errs.push(FieldError::required(
            &path.child("namespace"),
            "service namespace is required",
        ));
    }
    if !(1..=65535).contains(&port) {
        errs.push(FieldError::invalid(
            &path.child("port"),
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(url_path) = url_path else {
        return;
    };
    let p = path.child("path");
    if url_path.is_empty() || url_path == "/" {
        return;
    }
    if url_path == "//" {
        errs.push(FieldError::invalid(
            &p,
            url_path,
            "segment[0] may not be empty",
        ));
        return;
    }
    if !url_path.starts_with('/') {
        errs.push(FieldError::invalid(&p, url_path, "must start with a '/'"));
    }
    // As upstream, the first character goes whether it is a '/' or not.
    let mut rest = url_path.get(1..).unwrap_or_default();
    rest = rest.strip_suffix('/').unwrap_or(rest);
    for (i, step) in rest.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(
                &p,
                url_path,
                format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for msg in dns1123_subdomain(step) {
            errs.push(FieldError::invalid(
                &p,
                url_path,
                format!("segment[{i}]: {msg}"),
            ));
        }
    }
}

/// The parts of a URL that webhook validation looks at, split as Go's `url.Parse` splits them.
#[derive(Debug, Default, PartialEq)]
struct GoUrl {
    scheme: String,
    host: String,
    user: Option<String>,
    fragment: String,
    raw_query: String,
}

impl GoUrl {
    /// Go's `url.Parse`; the error reads as Go's `*url.Error`.
    fn parse(raw: &str) -> Result<GoUrl, String> {
        let fail = |e: &str| format!("parse {raw:?}: {e}");
        let (rest, fragment) = raw.split_once('#').unwrap_or((raw, ""));
        if rest.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(fail("net/url: invalid control character in URL"));
        }
        let mut u = GoUrl {
            fragment: unescape(fragment).map_err(|e| fail(&e))?,
            ..GoUrl::default()
        };
        // The scheme: letters, then letters, digits, '+', '-' or '.', up to a ':'.
        let mut rest = rest;
        for (i, c) in rest.char_indices() {
            match c {
                'a'..='z' | 'A'..='Z' => {}
                '0'..='9' | '+' | '-' | '.' if i > 0 => {}
                ':' if i == 0 => return Err(fail("missing protocol scheme")),
                ':' => {
                    u.scheme = rest[..i].to_ascii_lowercase();
                    rest = &rest[i + 1..];
                    break;
                }
                _ => break,
            }
        }
        if rest.ends_with('?') && rest.matches('?').count() == 1 {
            rest = &rest[..rest.len() - 1];
        } else if let Some((r, q)) = rest.split_once('?') {
            u.raw_query = q.to_string();
            rest = r;
        }
        if !rest.starts_with('/') {
            if !u.scheme.is_empty() {
                // Opaque: `https:host` has no host.
                return Ok(u);
            }
            if rest.split('/').next().unwrap_or_default().contains(':') {
                return Err(fail("first path segment in URL cannot contain colon"));
            }
        }
        if (!u.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
            let authority = rest[2..].split('/').next().unwrap_or_default();
            let host = match authority.rfind('@') {
                None => authority,
                Some(i) => {
                    let user = &authority[..i];
                    if !user.chars().all(valid_userinfo) {
                        return Err(fail("net/url: invalid userinfo"));
                    }
                    u.user = Some(user.to_string());
                    &authority[i + 1..]
                }
            };
            u.host = parse_host(host).map_err(|e| fail(&e))?;
        }
        Ok(u)
    }
}

/// Go's `validUserinfo`.
fn valid_userinfo(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c)
}

/// What a host may hold besides letters and digits, '%' escapes included.
const HOST_PUNCT: &str = "-_.~!$&'()*+,;=:[]<>\"%";

/// Go's `parseHost`: a valid port after the last colon (or after `]`), and only characters a
/// host may hold.
fn parse_host(host: &str) -> Result<String, String> {
    let port = if host.starts_with('[') {
        let Some(i) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        &host[i + 1..]
    } else {
        host.rfind(':').map_or("", |i| &host[i..])
    };
    let digits = port.strip_prefix(':').unwrap_or("x");
    if !port.is_empty() && !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid port {port:?} after host"));
    }
    let allowed = |c: char| !c.is_ascii() || c.is_ascii_alphanumeric() || HOST_PUNCT.contains(c);
    if let Some(c) = host.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "invalid character {:?} in host name",
            c.to_string()
        ));
    }
    unescape(host)
}

/// Go's percent-decoding, failing on a bad escape as `url.EscapeError` does.
fn unescape(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
            let Some(hex) = hex else {
                let bad: String = s[i..].chars().take(3).collect();
                return Err(format!("invalid URL escape {bad:?}"));
            };
            let hex = std::str::from_utf8(hex).unwrap_or("00");
            out.push(u8::from_str_radix(hex, 16).unwrap_or(0));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const WEBHOOK_CONFIGURATION_COLUMNS: &[Column] = &[
    NAME,
    integer(
        "Webhooks",
        "Webhooks indicates the number of webhooks registered in this configuration",
    ),
    AGE,
];

fn webhook_configuration_row(meta: &ObjectMeta, webhooks: usize, now: Timestamp) -> Row {
    let cells: Vec<Value> = vec![
        name(meta),
        num(i64::try_from(webhooks).unwrap_or(i64::MAX)),
        age(meta, now),
    ];
    Row::new(cells)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn hook(extra: Value) -> Value {
        let mut base = json!({
            "name": "pods.policy.example.com",
            "clientConfig": {"service": {"name": "policy", "namespace": "system"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    fn mutating(hooks: Vec<Value>) -> MutatingWebhookConfiguration {
        let mut c: MutatingWebhookConfiguration =
            serde_json::from_value(json!({"metadata": {"name": "policy"}, "webhooks": hooks}))
                .unwrap();
        c.default_fields();
        c
    }

    fn validating(hooks: Vec<Value>) -> ValidatingWebhookConfiguration {
        let mut c: ValidatingWebhookConfiguration =
            serde_json::from_value(json!({"metadata": {"name": "policy"}, "webhooks": hooks}))
                .unwrap();
        c.default_fields();
        c
    }

    fn errors<K: Kind>(k: &K) -> Vec<String> {
        let mut errs = Vec::new();
        k.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn defaults() {
        let c = mutating(vec![hook(json!({}))]);
        let v = serde_json::to_value(&c.webhooks.as_ref().unwrap()[0]).unwrap();
        assert_eq!(v["failurePolicy"], "Fail");
        assert_eq!(v["matchPolicy"], "Equivalent");
        assert_eq!(v["namespaceSelector"], json!({}));
        assert_eq!(v["objectSelector"], json!({}));
        assert_eq!(v["timeoutSeconds"], 10);
        assert_eq!(v["reinvocationPolicy"], "Never");
        assert_eq!(v["clientConfig"]["service"]["port"], 443);
        assert_eq!(v["rules"][0]["scope"], "*");
        assert_eq!(v["sideEffects"], "None");
        assert_eq!(errors(&c), Vec::<String>::new());

        let c = validating(vec![hook(
            json!({"clientConfig": {"url": "https://hook.example.com:8443/v"},
            "failurePolicy": "Ignore", "timeoutSeconds": 5}),
        )]);
        let v = serde_json::to_value(&c.webhooks.as_ref().unwrap()[0]).unwrap();
        assert_eq!(v["failurePolicy"], "Ignore");
        assert_eq!(v["timeoutSeconds"], 5);
        assert_eq!(v.get("reinvocationPolicy"), None);
        assert_eq!(errors(&c), Vec::<String>::new());
    }

    #[test]
    fn webhook_errors() {
        let c = validating(vec![
            hook(
                json!({"name": "short.example", "sideEffects": "Some", "timeoutSeconds": 31,
                "failurePolicy": "Maybe", "admissionReviewVersions": ["v2"],
                "clientConfig": {"url": "http://user@hook.example.com/x?y=1#z"}}),
            ),
            hook(
                json!({"name": "Bad_Name", "sideEffects": "", "admissionReviewVersions": [],
                "clientConfig": {}}),
            ),
            hook(
                json!({"clientConfig": {"service": {"name": "", "namespace": "system", "port": 0, "path": "x//"}}}),
            ),
            hook(json!({})),
        ]);
        assert_eq!(
            errors(&c),
            vec![
                "webhooks[0].name: Invalid value: \"short.example\": should be a domain with at least three segments separated by dots",
                "webhooks[0].failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\"",
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
                "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "webhooks[0].clientConfig.url: Invalid value: \"user\": user information is not permitted in the URL",
                "webhooks[0].clientConfig.url: Invalid value: \"z\": fragments are not permitted in the URL",
                "webhooks[0].clientConfig.url: Invalid value: \"y=1\": query parameters are not permitted in the URL",
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1",
                "webhooks[1].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "webhooks[1].sideEffects: Required value: must specify one of None, NoneOnDryRun",
                "webhooks[1].clientConfig: Required value: exactly one of url or service is required",
                "webhooks[1].admissionReviewVersions: Required value: must specify one of v1, v1beta1",
                "webhooks[2].clientConfig.service.namespace: Required value: service namespace is required",
                "webhooks[2].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                "webhooks[2].clientConfig.service.path: Invalid value: \"x//\": must start with a '/'",
                "webhooks[2].clientConfig.service.path: Invalid value: \"x//\": segment[0] may not be empty",
                "webhooks[2].clientConfig.service.path: Invalid value: \"x//\": segment[1] may not be empty",
                "webhooks[3].name: Duplicate value: \"pods.policy.example.com\"",
            ]
        );
    }

    #[test]
    fn urls() {
        let u = GoUrl::parse("https://a:b@host.example.com:443/p?q#f").unwrap();
        assert_eq!(
            u,
            GoUrl {
                scheme: "https".into(),
                host: "host.example.com:443".into(),
                user: Some("a:b".into()),
                fragment: "f".into(),
                raw_query: "q".into(),
            }
        );
        assert_eq!(GoUrl::parse("https:opaque").unwrap().host, "");
        assert_eq!(GoUrl::parse("/path").unwrap().scheme, "");
        assert_eq!(
            GoUrl::parse("://x").unwrap_err(),
            "parse \"://x\": missing protocol scheme"
        );
        assert_eq!(
            GoUrl::parse("https://host:port/").unwrap_err(),
            "parse \"https://host:port/\": invalid port \":port\" after host"
        );
        let mut errs = Vec::new();
        validate_webhook_url("hook.example.com/x", &Path::new("url"), &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "url: Invalid value: \"\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "url: Invalid value: \"\": host must be provided; desired format: https://host[/path]",
            ]
        );
    }

    #[test]
    fn updates_keep_what_the_stored_configuration_had() {
        // Written before v1 required no side effects and unique names: still editable.
        let old = validating(vec![
            hook(json!({"sideEffects": "Unknown"})),
            hook(json!({"sideEffects": "Unknown"})),
        ]);
        let new = validating(vec![
            hook(json!({"sideEffects": "Some", "timeoutSeconds": 3})),
            hook(json!({"sideEffects": "Unknown"})),
        ]);
        let mut errs = Vec::new();
        new.validate_update(&old, &mut errs);
        assert_eq!(errs, Vec::new());
        assert_eq!(errors(&new).len(), 3);
        assert_eq!(new.spec_changed(&old), Some(true));
    }

    #[test]
    fn rows() {
        let c = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "istio-sidecar-injector", "creationTimestamp": ago(90)},
            "webhooks": [hook(json!({})), hook(json!({"name": "b.example.com"}))]});
        assert_eq!(
            row_of::<MutatingWebhookConfiguration>(c),
            vec![json!("istio-sidecar-injector"), json!(2), json!("90s")]
        );
        let c = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "empty", "creationTimestamp": ago(3600)}});
        assert_eq!(
            row_of::<ValidatingWebhookConfiguration>(c),
            vec![json!("empty"), json!(0), json!("60m")]
        );
    }
}
