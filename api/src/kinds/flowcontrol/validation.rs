//! The rules upstream's pkg/apis/flowcontrol/validation holds FlowSchemas and
//! PriorityLevelConfigurations to, with its messages: kept apart from the kinds because they
//! are most of the code and change with upstream's validation alone.

use super::*;

pub(super) fn validate_flow_schema_spec(
    fs_name: &str,
    spec: &FlowSchemaSpec,
    sp: &Path,
    errs: &mut Errors,
) {
    let mp = spec.matching_precedence.unwrap_or(0);
    let mp_path = sp.child("matchingPrecedence");
    if mp <= 0 {
        errs.push(FieldError::invalid(
            &mp_path,
            mp,
            "must be a positive value",
        ));
    }
    if mp > MAX_MATCHING_PRECEDENCE {
        errs.push(FieldError::invalid(
            &mp_path,
            mp,
            format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
        ));
    }
    if mp == 1 && fs_name != EXEMPT {
        errs.push(FieldError::invalid(
            &mp_path,
            mp,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        ));
    }
    if let Some(dm) = &spec.distinguisher_method
        && !DISTINGUISHER_METHODS.contains(&dm.type_.as_str())
    {
        let mut e = FieldError::not_supported(
            &sp.child("distinguisherMethod").child("type"),
            "",
            DISTINGUISHER_METHODS,
        );
        // Upstream reports the whole method, as Go prints the struct.
        e.value = Some(format!(
            "flowcontrol.FlowDistinguisherMethod{{Type:{:?}}}",
            dm.type_
        ));
        errs.push(e);
    }
    let pl = &spec.priority_level_configuration.name;
    let pl_path = sp.child("priorityLevelConfiguration").child("name");
    if pl.is_empty() {
        errs.push(FieldError::required(
            &pl_path,
            "must reference a priority level",
        ));
    } else {
        for e in dns1123_subdomain(pl) {
            errs.push(FieldError::invalid(&pl_path, pl, e));
        }
    }
    for (i, rule) in spec.rules.iter().flatten().enumerate() {
        validate_rule(rule, &sp.child("rules").index(i), errs);
    }
}

fn validate_rule(rule: &PolicyRulesWithSubjects, p: &Path, errs: &mut Errors) {
    if rule.subjects.is_empty() {
        errs.push(FieldError::required(
            &p.child("subjects"),
            "subjects must contain at least one value",
        ));
    }
    for (i, s) in rule.subjects.iter().enumerate() {
        validate_subject(s, &p.child("subjects").index(i), errs);
    }
    let resource_rules = rule.resource_rules.as_deref().unwrap_or(&[]);
    let non_resource_rules = rule.non_resource_rules.as_deref().unwrap_or(&[]);
    if resource_rules.is_empty() && non_resource_rules.is_empty() {
        errs.push(FieldError::required(
            p,
            "at least one of resourceRules and nonResourceRules has to be non-empty",
        ));
    }
    for (i, r) in resource_rules.iter().enumerate() {
        validate_resource_rule(r, &p.child("resourceRules").index(i), errs);
    }
    for (i, r) in non_resource_rules.iter().enumerate() {
        validate_non_resource_rule(r, &p.child("nonResourceRules").index(i), errs);
    }
}

fn validate_subject(s: &Subject, p: &Path, errs: &mut Errors) {
    const NOT_USER: &str = "user is forbidden when subject kind is not 'User'";
    const NOT_GROUP: &str = "group is forbidden when subject kind is not 'Group'";
    const NOT_SA: &str = "serviceAccount is forbidden when subject kind is not 'ServiceAccount'";
    let forbid = |present: bool, field: &str, msg: &str, errs: &mut Errors| {
        if present {
            errs.push(FieldError::forbidden(&p.child(field), msg));
        }
    };
    match s.kind.as_str() {
        "ServiceAccount" => {
            let sp = p.child("serviceAccount");
            match &s.service_account {
                None => errs.push(FieldError::required(
                    &sp,
                    "serviceAccount is required when subject kind is 'ServiceAccount'",
                )),
                Some(sa) => {
                    if sa.name.is_empty() {
                        errs.push(FieldError::required(&sp.child("name"), ""));
                    } else if sa.name != "*" {
                        for e in dns1123_subdomain(&sa.name) {
                            errs.push(FieldError::invalid(&sp.child("name"), &sa.name, e));
                        }
                    }
                    if sa.namespace.is_empty() {
                        errs.push(FieldError::required(
                            &sp.child("namespace"),
                            "must specify namespace for service account",
                        ));
                    } else {
                        for e in dns1123_label(&sa.namespace) {
                            errs.push(FieldError::invalid(
                                &sp.child("namespace"),
                                &sa.namespace,
                                e,
                            ));
                        }
                    }
                }
            }
            forbid(s.user.is_some(), "user", NOT_USER, errs);
            forbid(s.group.is_some(), "group", NOT_GROUP, errs);
        }
        "User" => {
            match &s.user {
                None => errs.push(FieldError::required(
                    &p.child("user"),
                    "user is required when subject kind is 'User'",
                )),
                Some(u) if u.name.is_empty() => {
                    errs.push(FieldError::required(&p.child("user").child("name"), ""))
                }
                Some(_) => {}
            }
            forbid(s.service_account.is_some(), "serviceAccount", NOT_SA, errs);
            forbid(s.group.is_some(), "group", NOT_GROUP, errs);
        }
        "Group" => {
            match &s.group {
                None => errs.push(FieldError::required(
                    &p.child("group"),
                    "group is required when subject kind is 'Group'",
                )),
                Some(g) if g.name.is_empty() => {
                    errs.push(FieldError::required(&p.child("group").child("name"), ""))
                }
                Some(_) => {}
            }
            forbid(s.service_account.is_some(), "serviceAccount", NOT_SA, errs);
            forbid(s.user.is_some(), "user", NOT_USER, errs);
        }
        kind => errs.push(FieldError::not_supported(
            &p.child("kind"),
            kind,
            SUBJECT_KINDS,
        )),
    }
}

fn validate_verbs(verbs: &[String], p: &Path, errs: &mut Errors) {
    let vp = p.child("verbs");
    if verbs.is_empty() {
        errs.push(FieldError::required(
            &vp,
            "verbs must contain at least one value",
        ));
    } else if verbs.iter().any(|v| v == "*") {
        if verbs.len() > 1 {
            errs.push(invalid_list(
                &vp,
                verbs,
                "if '*' is present, must not specify other verbs",
            ));
        }
    } else if !verbs.iter().all(|v| VERBS.contains(&v.as_str())) {
        let mut e = FieldError::not_supported(&vp, "", VERBS);
        e.value = Some(go_string_slice(verbs));
        errs.push(e);
    }
}

fn validate_resource_rule(rule: &ResourcePolicyRule, p: &Path, errs: &mut Errors) {
    validate_verbs(&rule.verbs, p, errs);
    let wildcard = |l: &[String]| l.iter().any(|v| v == "*");
    let gp = p.child("apiGroups");
    if rule.api_groups.is_empty() {
        errs.push(FieldError::required(
            &gp,
            "resource rules must supply at least one api group",
        ));
    } else if rule.api_groups.len() > 1 && wildcard(&rule.api_groups) {
        errs.push(invalid_list(
            &gp,
            &rule.api_groups,
            "if '*' is present, must not specify other api groups",
        ));
    }
    let rp = p.child("resources");
    if rule.resources.is_empty() {
        errs.push(FieldError::required(
            &rp,
            "resource rules must supply at least one resource",
        ));
    } else if rule.resources.len() > 1 && wildcard(&rule.resources) {
        errs.push(invalid_list(
            &rp,
            &rule.resources,
            "if '*' is present, must not specify other resources",
        ));
    }
    let namespaces = rule.namespaces.as_deref().unwrap_or(&[]);
    let np = p.child("namespaces");
    if namespaces.is_empty() && !rule.cluster_scope.unwrap_or(false) {
        errs.push(FieldError::required(
            &np,
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    } else if wildcard(namespaces) {
        if namespaces.len() > 1 {
            errs.push(invalid_list(
                &np,
                namespaces,
                "if '*' is present, must not specify other namespaces",
            ));
        }
    } else {
        for (i, ns) in namespaces.iter().enumerate() {
            for e in dns1123_label(ns) {
                errs.push(FieldError::invalid(
                    &np.index(i),
                    ns,
                    format!("each member of this list must be '*' or a DNS-1123 label; {e}"),
                ));
            }
        }
    }
}

fn validate_non_resource_rule(rule: &NonResourcePolicyRule, p: &Path, errs: &mut Errors) {
    validate_verbs(&rule.verbs, p, errs);
    let up = p.child("nonResourceURLs");
    let urls = &rule.non_resource_urls;
    if urls.is_empty() {
        errs.push(FieldError::required(
            &up,
            "nonResourceURLs must contain at least one value",
        ));
    } else if urls.iter().any(|u| u == "*") {
        if urls.len() > 1 {
            errs.push(invalid_list(
                &up,
                urls,
                "if '*' is present, must not specify other non-resource URLs",
            ));
        }
    } else {
        for (i, url) in urls.iter().enumerate() {
            if let Some(msg) = non_resource_url_problem(url) {
                errs.push(FieldError::invalid(&up.index(i), url, msg));
            }
        }
    }
}

/// Upstream's ValidateNonResourceURLPath: absolute, no spaces or `//`, `*` only as a final
/// `/*`.
fn non_resource_url_problem(url: &str) -> Option<&'static str> {
    if url.is_empty() {
        return Some("must not be empty");
    }
    if url == "/" {
        return None;
    }
    if !url.starts_with('/') {
        return Some("must start with slash");
    }
    if url.contains(' ') {
        return Some("must not contain white-space");
    }
    if url.contains("//") {
        return Some("must not contain double slash");
    }
    let stars = url.matches('*').count();
    if stars > 1 || (stars == 1 && !url.ends_with("/*")) {
        return Some("wildcard can only do suffix matching");
    }
    None
}

pub(super) fn validate_priority_level_spec(
    pl_name: &str,
    spec: &PriorityLevelConfigurationSpec,
    sp: &Path,
    errs: &mut Errors,
) {
    if (pl_name == EXEMPT) != (spec.type_ == "Exempt") {
        errs.push(FieldError::invalid(
            &sp.child("type"),
            &spec.type_,
            "type must be 'Exempt' if and only if name is 'exempt'",
        ));
    }
    match spec.type_.as_str() {
        "Exempt" => {
            if spec.limited.is_some() {
                errs.push(FieldError::forbidden(
                    &sp.child("limited"),
                    "must be nil if the type is not Limited",
                ));
            }
            if let Some(exempt) = &spec.exempt {
                validate_exempt(exempt, &sp.child("exempt"), errs);
            }
        }
        "Limited" => {
            if spec.exempt.is_some() {
                errs.push(FieldError::forbidden(
                    &sp.child("exempt"),
                    "must be nil if the type is Limited",
                ));
            }
            match &spec.limited {
                None => errs.push(FieldError::required(
                    &sp.child("limited"),
                    "must not be empty when type is Limited",
                )),
                Some(limited) => validate_limited(limited, &sp.child("limited"), errs),
            }
        }
        t => errs.push(FieldError::not_supported(
            &sp.child("type"),
            t,
            PRIORITY_LEVEL_TYPES,
        )),
    }
}

fn validate_exempt(exempt: &ExemptPriorityLevelConfiguration, p: &Path, errs: &mut Errors) {
    if let Some(n) = exempt.nominal_concurrency_shares
        && n < 0
    {
        errs.push(FieldError::invalid(
            &p.child("nominalConcurrencyShares"),
            n,
            "must be a non-negative integer",
        ));
    }
    validate_lendable_percent(exempt.lendable_percent, p, errs);
}

fn validate_lendable_percent(lendable: Option<i32>, p: &Path, errs: &mut Errors) {
    if let Some(l) = lendable
        && !(0..=100).contains(&l)
    {
        errs.push(FieldError::invalid(
            &p.child("lendablePercent"),
            l,
            "must be between 0 and 100, inclusive",
        ));
    }
}

fn validate_limited(limited: &LimitedPriorityLevelConfiguration, p: &Path, errs: &mut Errors) {
    let ncs = limited.nominal_concurrency_shares.unwrap_or(0);
    if ncs < 0 {
        errs.push(FieldError::invalid(
            &p.child("nominalConcurrencyShares"),
            ncs,
            "must be a non-negative integer",
        ));
    }
    let response = limited.limit_response.clone().unwrap_or_default();
    let rp = p.child("limitResponse");
    match response.type_.as_str() {
        "Reject" => {
            if response.queuing.is_some() {
                errs.push(FieldError::forbidden(
                    &rp.child("queuing"),
                    "must be nil if limited.limitResponse.type is not Limited",
                ));
            }
        }
        "Queue" => match &response.queuing {
            None => errs.push(FieldError::required(
                &rp.child("queuing"),
                "must not be empty if limited.limitResponse.type is Limited",
            )),
            Some(q) => validate_queuing(q, &rp.child("queuing"), errs),
        },
        t => errs.push(FieldError::not_supported(
            &rp.child("type"),
            t,
            LIMIT_RESPONSE_TYPES,
        )),
    }
    validate_lendable_percent(limited.lendable_percent, p, errs);
    if let Some(b) = limited.borrowing_limit_percent
        && b < 0
    {
        errs.push(FieldError::invalid(
            &p.child("borrowingLimitPercent"),
            b,
            "if specified, must be a non-negative integer",
        ));
    }
}

fn validate_queuing(q: &QueuingConfiguration, p: &Path, errs: &mut Errors) {
    let queue_length_limit = q.queue_length_limit.unwrap_or(0);
    if queue_length_limit <= 0 {
        errs.push(FieldError::invalid(
            &p.child("queueLengthLimit"),
            queue_length_limit,
            "must be positive",
        ));
    }
    let queues = q.queues.unwrap_or(0);
    if queues <= 0 {
        errs.push(FieldError::invalid(
            &p.child("queues"),
            queues,
            "must be positive",
        ));
    } else if queues > MAX_QUEUES {
        errs.push(FieldError::invalid(
            &p.child("queues"),
            queues,
            format!("must not be greater than {MAX_QUEUES}"),
        ));
    }
    let hand_size = q.hand_size.unwrap_or(0);
    let hp = p.child("handSize");
    if hand_size <= 0 {
        errs.push(FieldError::invalid(&hp, hand_size, "must be positive"));
    } else if hand_size > queues {
        errs.push(FieldError::invalid(
            &hp,
            hand_size,
            format!("should not be greater than queues ({queues})"),
        ));
    } else if required_entropy_bits(queues, hand_size) > MAX_HASH_BITS {
        errs.push(FieldError::invalid(
            &hp,
            hand_size,
            format!(
                "required entropy bits of deckSize {queues} and handSize {hand_size} should not be greater than {MAX_HASH_BITS}"
            ),
        ));
    }
}

/// The bits shuffle sharding needs to deal `hand_size` of `deck_size` queues.
fn required_entropy_bits(deck_size: i32, hand_size: i32) -> i32 {
    (f64::from(deck_size).log2() * f64::from(hand_size)).ceil() as i32
}

pub(super) fn validate_condition_types<'a>(
    types: impl Iterator<Item = Option<&'a str>>,
    errs: &mut Errors,
) {
    let path = Path::new("status").child("conditions");
    let mut seen: Vec<&str> = Vec::new();
    for (i, t) in types.enumerate() {
        let t = t.unwrap_or("");
        let p = path.index(i);
        if seen.contains(&t) {
            errs.push(FieldError::duplicate(&p.child("type"), t));
        }
        seen.push(t);
        if t.is_empty() {
            errs.push(FieldError::required(&p.child("type"), "must not be empty"));
        }
    }
}

/// The error for a mandatory object whose spec strays from the fixed one. Upstream prints the
/// whole Go struct as the value; minik8s leaves it out.
pub(super) fn whole_spec_invalid(detail: String) -> FieldError {
    FieldError::new(ErrorKind::Invalid, &Path::new("spec"), None, detail)
}

fn invalid_list(path: &Path, items: &[String], detail: &str) -> FieldError {
    FieldError::new(
        ErrorKind::Invalid,
        path,
        Some(go_string_slice(items)),
        detail,
    )
}

/// A Go `[]string` as `%#v` prints it in a field error.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}
