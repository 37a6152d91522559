//! Validation of custom resources against their structural schema, with the messages
//! upstream's kube-openapi validator produces and the field errors apiextensions-apiserver
//! turns them into (`spec.replicas: Invalid value: "string": spec.replicas in body must be of
//! type integer: "string"`). Updates ratchet: a value equal to the old one at the same place
//! is not validated again, as upstream's CRDValidationRatcheting does.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use regex::Regex;
use serde_json::{Map, Value};

use super::schema::Schema;
use crate::validation::{
    ErrorKind, Errors, FieldError, NameRule, dns1035_label, validate_object_meta,
};

/// Go's `strconv.Quote`: `"` and `\` escaped, control characters as escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)` with `%e`'s two-digit
/// exponent): `10`, `1.5`, `1e+06`, `1e-05`.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Shortest round-trip digits; Go prints them in exponent form when the decimal exponent
    // is below -4 or at least 6 (the precision `%v` uses for this choice).
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

/// Go's `%v` of a JSON number as unstructured content holds it (int64 or float64).
pub fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        go_float(n.as_f64().unwrap_or_default())
    }
}

/// A bad value as `field.Error` prints it: strings quoted, numbers and booleans plain,
/// anything else as JSON.
pub fn bad_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        Value::Null => go_quote("null"),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn err(
    kind: ErrorKind,
    field: &str,
    value: Option<String>,
    detail: impl Into<String>,
) -> FieldError {
    FieldError {
        kind,
        field: field.to_string(),
        value,
        detail: detail.into(),
    }
}

/// The type name kube-openapi gives a value.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

struct Ctx {
    errs: Errors,
}

impl Ctx {
    /// An error kube-openapi reports as `*errors.Validation` with `name` and `message`.
    fn invalid(&mut self, name: &str, value: String, message: String) {
        self.errs
            .push(err(ErrorKind::Invalid, name, Some(value), message));
    }

    fn type_invalid(&mut self, name: &str, value: &str, expected: &str) {
        self.errs.push(err(
            ErrorKind::TypeInvalid,
            name,
            Some(go_quote(value)),
            format!(
                "{name} in body must be of type {expected}: {}",
                go_quote(value)
            ),
        ));
    }

    /// A composite error (anyOf, oneOf, allOf, not): no field, as upstream reports them.
    fn composite(&mut self, message: String) {
        self.errs
            .push(err(ErrorKind::Invalid, "", Some(go_quote("")), message));
    }
}

/// Validates `value` (a whole object as JSON, or a subtree) against `schema`; `old` is the
/// value before an update, for ratcheting.
pub fn validate(value: &Value, schema: &Schema, old: Option<&Value>) -> Errors {
    let mut ctx = Ctx { errs: Vec::new() };
    node(&mut ctx, "", value, schema, old);
    ctx.errs
}

fn expected_types(s: &Schema) -> Option<Vec<&str>> {
    if s.int_or_string {
        return Some(vec!["integer", "string"]);
    }
    s.type_.as_deref().map(|t| vec![t])
}

fn is_integral(v: &Value) -> bool {
    v.as_f64()
        .is_some_and(|f| f.fract() == 0.0 && f.is_finite())
}

fn node(ctx: &mut Ctx, path: &str, x: &Value, s: &Schema, old: Option<&Value>) {
    if old == Some(x) {
        return;
    }
    if x.is_null() {
        if !s.nullable
            && let Some(t) = expected_types(s)
        {
            ctx.type_invalid(path, "null", &t.join(","));
        }
        return;
    }
    if let Some(expected) = expected_types(s) {
        let actual = type_name(x);
        let ok = expected.contains(&actual)
            || (actual == "number" && is_integral(x) && expected.contains(&"integer"))
            || (actual == "integer" && expected.contains(&"number"));
        if !ok {
            ctx.type_invalid(path, actual, &expected.join(","));
            return;
        }
    }
    junctors(ctx, path, x, s);
    match x {
        Value::String(st) => string(ctx, path, st, s),
        Value::Number(n) => number(ctx, path, n, s),
        Value::Array(items) => array(ctx, path, items, s, old),
        _ => {}
    }
    if let Some(values) = &s.enum_
        && !values.iter().any(|v| json_equal(v, x))
    {
        let supported: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => go_quote(s),
                other => go_quote(&serde_json::to_string(other).unwrap_or_default()),
            })
            .collect();
        ctx.errs.push(err(
            ErrorKind::NotSupported,
            path,
            Some(bad_value(x)),
            format!("supported values: {}", supported.join(", ")),
        ));
    }
    if let Value::Object(m) = x {
        object(ctx, path, m, s, old.and_then(Value::as_object));
    }
}

/// JSON equality with numbers compared by value (`3` equals `3.0`).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn passes(x: &Value, s: &Schema) -> bool {
    let mut ctx = Ctx { errs: Vec::new() };
    node(&mut ctx, "", x, s, None);
    ctx.errs.is_empty()
}

fn junctors(ctx: &mut Ctx, path: &str, x: &Value, s: &Schema) {
    if !s.all_of.is_empty() {
        let mut valid = 0;
        for sub in &s.all_of {
            let before = ctx.errs.len();
            node(ctx, path, x, sub, None);
            if ctx.errs.len() == before {
                valid += 1;
            }
        }
        if valid != s.all_of.len() {
            let extra = if valid == 0 { ". None validated" } else { "" };
            ctx.composite(format!(
                "{} must validate all the schemas (allOf){extra}",
                go_quote(path)
            ));
        }
    }
    if !s.any_of.is_empty() && !s.any_of.iter().any(|sub| passes(x, sub)) {
        ctx.composite(format!(
            "{} must validate at least one schema (anyOf)",
            go_quote(path)
        ));
    }
    if !s.one_of.is_empty() {
        let valid = s.one_of.iter().filter(|sub| passes(x, sub)).count();
        if valid != 1 {
            let extra = if valid == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {valid} valid alternatives")
            };
            ctx.composite(format!(
                "{} must validate one and only one schema (oneOf). {extra}",
                go_quote(path)
            ));
        }
    }
    if let Some(not) = &s.not
        && passes(x, not)
    {
        ctx.composite(format!(
            "{} must not validate the schema (not)",
            go_quote(path)
        ));
    }
}

fn string(ctx: &mut Ctx, path: &str, st: &str, s: &Schema) {
    let len = st.chars().count() as u64;
    if let Some(max) = s.max_length
        && len > max
    {
        ctx.errs.push(err(
            ErrorKind::TooLong,
            path,
            None,
            format!("may not be more than {max} bytes"),
        ));
    }
    if let Some(min) = s.min_length
        && len < min
    {
        ctx.invalid(
            path,
            go_quote(st),
            format!("{path} in body should be at least {min} chars long"),
        );
    }
    if let Some((text, re)) = &s.pattern
        && !re.is_match(st)
    {
        ctx.invalid(
            path,
            go_quote(st),
            format!("{path} in body should match '{text}'"),
        );
    }
    if let Some(format) = &s.format
        && !format_ok(&format.replace('-', ""), st)
    {
        ctx.type_invalid(path, st, format);
    }
}

fn number(ctx: &mut Ctx, path: &str, n: &serde_json::Number, s: &Schema) {
    let value = n.as_f64().unwrap_or_default();
    let shown = go_number(n);
    if let Some(m) = s.multiple_of
        && m > 0.0
    {
        let q = value / m;
        if (q - q.round()).abs() > 1e-9 * q.abs().max(1.0) {
            ctx.invalid(
                path,
                shown.clone(),
                format!("{path} in body should be a multiple of {}", go_float(m)),
            );
        }
    }
    if let Some(max) = s.maximum {
        let bad = if s.exclusive_maximum {
            value >= max
        } else {
            value > max
        };
        if bad {
            let rel = if s.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            ctx.invalid(
                path,
                shown.clone(),
                format!("{path} in body should be {rel} {}", go_float(max)),
            );
        }
    }
    if let Some(min) = s.minimum {
        let bad = if s.exclusive_minimum {
            value <= min
        } else {
            value < min
        };
        if bad {
            let rel = if s.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            ctx.invalid(
                path,
                shown,
                format!("{path} in body should be {rel} {}", go_float(min)),
            );
        }
    }
}

/// The key of a `x-kubernetes-list-type: map` item, for correlating it with the old list.
fn map_key(item: &Value, keys: &[String]) -> Option<String> {
    let m = item.as_object()?;
    let k: Vec<Option<&Value>> = keys.iter().map(|k| m.get(k)).collect();
    serde_json::to_string(&k).ok()
}

fn array(ctx: &mut Ctx, path: &str, items: &[Value], s: &Schema, old: Option<&Value>) {
    let size = items.len() as u64;
    if let Some(min) = s.min_items
        && size < min
    {
        ctx.invalid(
            path,
            size.to_string(),
            format!("{path} in body should have at least {min} items"),
        );
    }
    if let Some(max) = s.max_items
        && size > max
    {
        let unit = if max == 1 { "item" } else { "items" };
        ctx.errs.push(err(
            ErrorKind::TooMany,
            path,
            Some(size.to_string()),
            format!("must have at most {max} {unit}"),
        ));
    }
    if s.unique_items {
        let mut seen = BTreeSet::new();
        if items
            .iter()
            .any(|v| !seen.insert(serde_json::to_string(v).unwrap_or_default()))
        {
            ctx.invalid(
                path,
                serde_json::to_string(items).unwrap_or_default(),
                format!("{path} in body shouldn't contain duplicates"),
            );
        }
    }
    let Some(item_schema) = s.items.as_deref() else {
        return;
    };
    // Only items of map lists correlate with the old list, by their keys.
    let old_items: BTreeMap<String, &Value> = match (old.and_then(Value::as_array), &s.list_type) {
        (Some(old), Some(t)) if t == "map" && !s.list_map_keys.is_empty() => old
            .iter()
            .filter_map(|v| map_key(v, &s.list_map_keys).map(|k| (k, v)))
            .collect(),
        _ => BTreeMap::new(),
    };
    for (i, v) in items.iter().enumerate() {
        let old_item = if old_items.is_empty() {
            None
        } else {
            map_key(v, &s.list_map_keys).and_then(|k| old_items.get(&k).copied())
        };
        node(ctx, &format!("{path}[{i}]"), v, item_schema, old_item);
    }
}

fn object(
    ctx: &mut Ctx,
    path: &str,
    m: &Map<String, Value>,
    s: &Schema,
    old: Option<&Map<String, Value>>,
) {
    let n = m.len() as u64;
    if let Some(min) = s.min_properties
        && n < min
    {
        ctx.invalid(
            path,
            n.to_string(),
            format!("{path} in body should have at least {min} properties"),
        );
    }
    if let Some(max) = s.max_properties
        && n > max
    {
        let unit = if max == 1 { "item" } else { "items" };
        ctx.errs.push(err(
            ErrorKind::TooMany,
            path,
            Some(n.to_string()),
            format!("must have at most {max} {unit}"),
        ));
    }
    for (k, v) in m {
        let sub = match s.properties.get(k) {
            Some(p) => p,
            None => match &s.additional_properties {
                Some(super::schema::Additional::Schema(a)) => a,
                _ => continue,
            },
        };
        node(ctx, &child(path, k), v, sub, old.and_then(|o| o.get(k)));
    }
    for k in &s.required {
        if !m.contains_key(k) {
            ctx.errs
                .push(err(ErrorKind::Required, &child(path, k), None, ""));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Formats, as kube-openapi's strfmt registry checks them.

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("a valid built-in pattern")
}

static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
    )
});
static UUID: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
static UUID3: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static UUID4: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static UUID5: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static BASE64: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
});
static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    re(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})$")
});
static MAC: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^(?i)(?:[0-9a-f]{2}(?:[:-][0-9a-f]{2}){5}|[0-9a-f]{2}(?:[:-][0-9a-f]{2}){7}|[0-9a-f]{2}(?:[:-][0-9a-f]{2}){19}|[0-9a-f]{4}(?:\.[0-9a-f]{4}){2}|[0-9a-f]{4}(?:\.[0-9a-f]{4}){3}|[0-9a-f]{4}(?:\.[0-9a-f]{4}){9})$",
    )
});
static HEXCOLOR: LazyLock<Regex> = LazyLock::new(|| re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGBCOLOR: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$",
    )
});
static SSN: LazyLock<Regex> = LazyLock::new(|| re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
static EMAIL: LazyLock<Regex> = LazyLock::new(|| re(r#"^(?:[^<>@\s]*<)?[^<>@\s"]+@[^<>@\s]+>?$"#));
static URI_SCHEME: LazyLock<Regex> = LazyLock::new(|| re(r"^[A-Za-z][A-Za-z0-9+.\-]*:"));
static SCALA_DURATION: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(\d+)\s*([A-Za-zµ]+)\s*$"));

fn valid_date(y: &str, m: &str, d: &str) -> bool {
    match (y.parse::<i16>(), m.parse::<i8>(), d.parse::<i8>()) {
        (Ok(y), Ok(m), Ok(d)) => jiff::civil::Date::new(y, m, d).is_ok(),
        _ => false,
    }
}

fn go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let units = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"];
    let mut rest = s;
    while !rest.is_empty() {
        let num = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num == 0 || rest[..num] == *"." {
            return false;
        }
        rest = &rest[num..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        if !units.contains(&&rest[..unit]) {
            return false;
        }
        rest = &rest[unit..];
    }
    true
}

fn isbn10(s: &str) -> bool {
    let d: Vec<char> = s.chars().filter(|c| *c != '-' && *c != ' ').collect();
    if d.len() != 10 {
        return false;
    }
    let mut sum = 0;
    for (i, c) in d.iter().enumerate() {
        let v = match c {
            '0'..='9' => *c as u32 - '0' as u32,
            'X' if i == 9 => 10,
            _ => return false,
        };
        sum += (i as u32 + 1) * v;
    }
    sum % 11 == 0
}

fn isbn13(s: &str) -> bool {
    let d: Vec<u32> = s
        .chars()
        .filter(|c| *c != '-' && *c != ' ')
        .map(|c| c.to_digit(10).unwrap_or(99))
        .collect();
    if d.len() != 13 || d.contains(&99) {
        return false;
    }
    let sum: u32 = d[..12]
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 2 == 0 { *v } else { v * 3 })
        .sum();
    (10 - sum % 10) % 10 == d[12]
}

fn credit_card(s: &str) -> bool {
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    static CC: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01][0-9]|2720)[0-9]{12}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11}|6[27][0-9]{14})$",
        )
    });
    if !CC.is_match(&digits) {
        return false;
    }
    let mut sum = 0;
    for (i, c) in digits.chars().rev().enumerate() {
        let mut v = c.to_digit(10).unwrap_or(0);
        if i % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum % 10 == 0
}

/// Whether `s` is a valid value of the (normalized) format.
pub fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => {
            !s.is_empty()
                && !s.chars().any(|c| c.is_control() || c == ' ')
                && (s.starts_with('/') || URI_SCHEME.is_match(s))
        }
        "email" => EMAIL.is_match(s),
        "hostname" => HOSTNAME.is_match(s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63),
        "ipv4" => s.contains('.') && s.parse::<IpAddr>().is_ok(),
        "ipv6" => s.contains(':') && s.parse::<IpAddr>().is_ok(),
        "cidr" => match s.split_once('/') {
            Some((ip, bits)) => match (ip.parse::<IpAddr>(), bits.parse::<u8>()) {
                (Ok(IpAddr::V4(_)), Ok(b)) => b <= 32 && !bits.starts_with('+'),
                (Ok(IpAddr::V6(_)), Ok(b)) => b <= 128 && !bits.starts_with('+'),
                _ => false,
            },
            None => false,
        },
        "mac" => MAC.is_match(s),
        "uuid" => UUID.is_match(s),
        "uuid3" => UUID3.is_match(s),
        "uuid4" => UUID4.is_match(s),
        "uuid5" => UUID5.is_match(s),
        "isbn" => isbn10(s) || isbn13(s),
        "isbn10" => isbn10(s),
        "isbn13" => isbn13(s),
        "creditcard" => credit_card(s),
        "ssn" => SSN.is_match(s),
        "hexcolor" => HEXCOLOR.is_match(s),
        "rgbcolor" => RGBCOLOR.is_match(s),
        "byte" => BASE64.is_match(s),
        "date" => {
            let b = s.as_bytes();
            s.len() == 10 && b[4] == b'-' && b[7] == b'-' && valid_date(&s[..4], &s[5..7], &s[8..])
        }
        "datetime" => DATE_TIME.captures(s).is_some_and(|c| {
            valid_date(&c[1], &c[2], &c[3])
                && c[4].parse::<u8>().is_ok_and(|h| h < 24)
                && c[5].parse::<u8>().is_ok_and(|m| m < 60)
                && c[6].parse::<u8>().is_ok_and(|s| s < 61)
        }),
        "duration" => {
            go_duration(s)
                || SCALA_DURATION.captures(s).is_some_and(|c| {
                    matches!(
                        &c[2],
                        "ns" | "us"
                            | "µs"
                            | "ms"
                            | "s"
                            | "m"
                            | "h"
                            | "d"
                            | "w"
                            | "nanosecond"
                            | "nanoseconds"
                            | "microsecond"
                            | "microseconds"
                            | "millisecond"
                            | "milliseconds"
                            | "second"
                            | "seconds"
                            | "sec"
                            | "secs"
                            | "minute"
                            | "minutes"
                            | "min"
                            | "mins"
                            | "hour"
                            | "hours"
                            | "day"
                            | "days"
                            | "week"
                            | "weeks"
                    )
                })
        }
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// Embedded resources and list types.

/// Upstream's `objectmeta.Validate`: `apiVersion`, `kind` and `metadata` of every object marked
/// `x-kubernetes-embedded-resource` (the resource root is checked by the registry).
pub fn validate_embedded(x: &Value, s: &Schema, errs: &mut Errors) {
    embedded(x, Some(s), "", true, errs)
}

fn field_child(path: &str, key: &str) -> String {
    child(path, key)
}

fn embedded(x: &Value, s: Option<&Schema>, path: &str, root: bool, errs: &mut Errors) {
    let Some(s) = s else { return };
    match x {
        Value::Object(m) => {
            if s.embedded_resource && !root {
                embedded_resource(path, m, errs);
            }
            for (k, v) in m {
                if root && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                    continue;
                }
                if let Some(p) = s.properties.get(k) {
                    embedded(v, Some(p), &field_child(path, k), false, errs);
                } else if let Some(super::schema::Additional::Schema(a)) = &s.additional_properties
                {
                    embedded(v, Some(a), &format!("{path}[{k}]"), false, errs);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                embedded(v, s.items.as_deref(), &format!("{path}[{i}]"), false, errs);
            }
        }
        _ => {}
    }
}

fn embedded_resource(path: &str, m: &Map<String, Value>, errs: &mut Errors) {
    for f in ["apiVersion", "kind"] {
        if !m.contains_key(f) {
            errs.push(err(
                ErrorKind::Required,
                &field_child(path, f),
                None,
                "must not be empty",
            ));
        }
    }
    for (k, v) in m {
        let p = field_child(path, k);
        match k.as_str() {
            "apiVersion" => match v.as_str() {
                None => errs.push(err(
                    ErrorKind::Invalid,
                    &p,
                    Some(bad_value(v)),
                    "must be a string",
                )),
                Some("") => errs.push(err(
                    ErrorKind::Invalid,
                    &p,
                    Some(go_quote("")),
                    "must not be empty",
                )),
                Some(av) if av.matches('/').count() > 1 => errs.push(err(
                    ErrorKind::Invalid,
                    &p,
                    Some(go_quote(av)),
                    format!("unexpected GroupVersion string: {av}"),
                )),
                Some(_) => {}
            },
            "kind" => match v.as_str() {
                None => errs.push(err(
                    ErrorKind::Invalid,
                    &p,
                    Some(bad_value(v)),
                    "must be a string",
                )),
                Some("") => errs.push(err(
                    ErrorKind::Invalid,
                    &p,
                    Some(go_quote("")),
                    "must not be empty",
                )),
                Some(kind) => {
                    let problems = dns1035_label(&kind.to_lowercase());
                    if !problems.is_empty() {
                        errs.push(err(
                            ErrorKind::Invalid,
                            &p,
                            Some(go_quote(kind)),
                            format!(
                                "may have mixed case, but should otherwise match: {}",
                                problems.join(",")
                            ),
                        ));
                    }
                }
            },
            "metadata" => match serde_json::from_value::<ObjectMeta>(v.clone()) {
                Err(e) => errs.push(err(
                    ErrorKind::Invalid,
                    &p,
                    Some(bad_value(v)),
                    e.to_string(),
                )),
                Ok(mut meta) => {
                    if meta.name.as_deref().is_none_or(str::is_empty) {
                        meta.name = Some("fakename".into());
                    }
                    let namespaced = meta.namespace.as_deref().is_some_and(|n| !n.is_empty());
                    let mut meta_errs = Vec::new();
                    validate_object_meta(&meta, namespaced, NameRule::PathSegment, &mut meta_errs);
                    for mut e in meta_errs {
                        e.field = field_child(path, &e.field);
                        errs.push(e);
                    }
                }
            },
            _ => {}
        }
    }
}

/// Upstream's `ValidateListSetsAndMaps`: duplicates in `x-kubernetes-list-type: set` lists
/// and duplicate keys in `map` lists.
pub fn validate_list_types(x: &Value, s: &Schema, errs: &mut Errors) {
    if let Value::Object(m) = x {
        list_types_object("", m, s, errs);
    }
}

fn list_types_object(path: &str, m: &Map<String, Value>, s: &Schema, errs: &mut Errors) {
    if let Some(super::schema::Additional::Schema(a)) = &s.additional_properties {
        for (k, v) in m {
            list_types(&format!("{path}[{k}]"), v, a, errs);
        }
    }
    for (k, v) in m {
        if let Some(p) = s.properties.get(k) {
            list_types(&field_child(path, k), v, p, errs);
        }
    }
}

fn list_types(path: &str, x: &Value, s: &Schema, errs: &mut Errors) {
    match x {
        Value::Object(m) => list_types_object(path, m, s, errs),
        Value::Array(items) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in duplicates(items.iter().map(|v| Some(v.clone()))) {
                        errs.push(err(
                            ErrorKind::Duplicate,
                            &format!("{path}[{i}]"),
                            Some(bad_value(&items[i])),
                            "",
                        ));
                    }
                }
                Some("map") => {
                    if let Some(i) = items.iter().position(|v| !v.is_null() && !v.is_object()) {
                        errs.push(err(
                            ErrorKind::Invalid,
                            &format!("{path}[{i}]"),
                            Some(bad_value(&items[i])),
                            "must be an object for an array of list-type map",
                        ));
                    } else {
                        let keys: Vec<Map<String, Value>> = items
                            .iter()
                            .map(|v| {
                                s.list_map_keys
                                    .iter()
                                    .filter_map(|k| v.get(k).map(|x| (k.clone(), x.clone())))
                                    .collect()
                            })
                            .collect();
                        for i in duplicates(keys.iter().map(|k| Some(Value::Object(k.clone())))) {
                            errs.push(err(
                                ErrorKind::Duplicate,
                                &format!("{path}[{i}]"),
                                Some(serde_json::to_string(&keys[i]).unwrap_or_default()),
                                "",
                            ));
                        }
                    }
                }
                _ => {}
            }
            if let Some(item) = s.items.as_deref() {
                for (i, v) in items.iter().enumerate() {
                    list_types(&format!("{path}[{i}]"), v, item, errs);
                }
            }
        }
        _ => {}
    }
}

/// Indices of the second occurrence of each repeated value.
fn duplicates(values: impl Iterator<Item = Option<Value>>) -> Vec<usize> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, v) in values.enumerate() {
        let key = serde_json::to_string(&v).unwrap_or_default();
        let n = seen.entry(key).or_insert(0);
        *n += 1;
        if *n == 2 {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(errs: &Errors) -> Vec<String> {
        errs.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn go_formatting() {
        assert_eq!(go_float(10.0), "10");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
    }

    #[test]
    fn upstream_messages() {
        let s = Schema::parse(&json!({
            "type": "object",
            "required": ["spec"],
            "properties": {"spec": {"type": "object", "required": ["image"], "properties": {
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                "image": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5, "minLength": 2},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "port": {"x-kubernetes-int-or-string": true},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
                "ratio": {"type": "number", "multipleOf": 0.5},
            }}},
        }));
        let v = json!({"spec": {"replicas": "three", "mode": "c", "port": true, "when": "nope",
                                "tags": ["a", "b", "c"], "ratio": 0.7}});
        assert_eq!(
            msgs(&validate(&v, &s, None)),
            vec![
                "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                "spec.ratio: Invalid value: 0.7: spec.ratio in body should be a multiple of 0.5",
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.when: Invalid value: \"nope\": spec.when in body must be of type date-time: \"nope\"",
                "spec.image: Required value",
            ]
        );
        let v = json!({"spec": {"replicas": 11, "image": "ABCDEFG", "tags": [], "when": "2024-01-02T03:04:05Z"}});
        assert_eq!(
            msgs(&validate(&v, &s, None)),
            vec![
                "spec.image: Too long: may not be more than 5 bytes",
                "spec.image: Invalid value: \"ABCDEFG\": spec.image in body should match '^[a-z]+$'",
                "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
                "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
            ]
        );
        assert_eq!(
            msgs(&validate(&json!({}), &s, None)),
            vec!["spec: Required value"]
        );
        // Ratcheting: an unchanged invalid value passes an update.
        let old = json!({"spec": {"replicas": 11, "image": "abc"}});
        let new = json!({"spec": {"replicas": 11, "image": "abd"}});
        assert!(validate(&new, &s, Some(&old)).is_empty());
        assert_eq!(validate(&new, &s, None).len(), 1);
        let float_int = json!({"spec": {"replicas": 3.0, "image": "abc"}});
        assert!(validate(&float_int, &s, None).is_empty());
    }

    #[test]
    fn formats() {
        for (f, ok, bad) in [
            (
                "datetime",
                "2024-02-29T10:00:00.5+01:00",
                "2023-02-29T10:00:00Z",
            ),
            ("date", "2024-01-31", "2024-1-31"),
            ("uri", "https://example.com/x", "example.com"),
            ("email", "a@b.c", "nope"),
            ("hostname", "a.example.com", "-a"),
            ("ipv4", "10.0.0.1", "10.0.0"),
            ("ipv6", "fe80::1", "10.0.0.1"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", "x"),
            ("byte", "aGVsbG8=", "hello!"),
            ("duration", "1h30m", "1x"),
            ("mac", "00:11:22:33:44:55", "00:11"),
        ] {
            assert!(format_ok(f, ok), "{f} {ok}");
            assert!(!format_ok(f, bad), "{f} {bad}");
        }
    }

    #[test]
    fn embedded_and_lists() {
        let s = Schema::parse(&json!({"type": "object", "properties": {
            "tmpl": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        }}));
        let v = json!({"tmpl": {"kind": "Pod", "metadata": {"name": "A_b"}},
                       "set": ["a", "b", "a", "a"], "map": [{"name": "x"}, {"name": "x"}]});
        let mut errs = Vec::new();
        validate_embedded(&v, &s, &mut errs);
        validate_list_types(&v, &s, &mut errs);
        assert_eq!(
            msgs(&errs),
            vec![
                "tmpl.apiVersion: Required value: must not be empty",
                "map[1]: Duplicate value: {\"name\":\"x\"}",
                "set[2]: Duplicate value: \"a\"",
            ]
        );
    }
}
