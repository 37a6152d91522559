//! Label and field selectors in the query-string syntax clients send
//! (`app=web,tier!=db,env in (a,b),!canary`), parsed once and matched against objects.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::GreaterThan(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub requirements: Vec<Requirement>,
    /// A selector that matches nothing (a nil `LabelSelector` in some APIs).
    pub nothing: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

impl Selector {
    pub fn everything() -> Self {
        Selector::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty() && !self.nothing
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        if self.nothing {
            return false;
        }
        let empty = BTreeMap::new();
        let labels = labels.unwrap_or(&empty);
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Parses the `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut p = Parser {
            chars: s.chars().collect(),
            pos: 0,
        };
        let mut requirements = Vec::new();
        p.skip_ws();
        if p.at_end() {
            return Ok(Selector::default());
        }
        loop {
            requirements.push(p.requirement()?);
            p.skip_ws();
            if p.at_end() {
                break;
            }
            if !p.eat(',') {
                return Err(SelectorError(format!(
                    "expected ',' at position {} in {s:?}",
                    p.pos
                )));
            }
            p.skip_ws();
        }
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    /// Converts a `metav1.LabelSelector`; `None` (nil) selects nothing, `{}` everything.
    pub fn from_label_selector(ls: Option<&LabelSelector>) -> Result<Self, SelectorError> {
        let Some(ls) = ls else {
            return Ok(Selector {
                requirements: vec![],
                nothing: true,
            });
        };
        let mut requirements = Vec::new();
        for (k, v) in ls.match_labels.iter().flatten() {
            requirements.push(Requirement::Equals(k.clone(), v.clone()));
        }
        for e in ls.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let r = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SelectorError(format!(
                        "for '{}' operator, values set can't be empty",
                        e.operator
                    )));
                }
                "In" => Requirement::In(e.key.clone(), values),
                "NotIn" => Requirement::NotIn(e.key.clone(), values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError(format!(
                        "values set must be empty for {}",
                        e.operator
                    )));
                }
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                op => {
                    return Err(SelectorError(format!(
                        "{op:?} is not a valid label selector operator"
                    )));
                }
            };
            requirements.push(r);
        }
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
                Requirement::GreaterThan(k, n) => format!("{k}>{n}"),
                Requirement::LessThan(k, n) => format!("{k}<{n}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_str(&mut self, s: &str) -> bool {
        let n = s.chars().count();
        if self.chars[self.pos..].iter().take(n).copied().eq(s.chars()) {
            self.pos += n;
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn word(&mut self) -> String {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_whitespace() || matches!(c, ',' | '=' | '!' | '(' | ')' | '<' | '>') {
                break;
            }
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        let k = self.word();
        if k.is_empty() {
            return Err(SelectorError(format!(
                "expected a key at position {}",
                self.pos
            )));
        }
        let errs = crate::validation::qualified_name(&k);
        if let Some(e) = errs.first() {
            return Err(SelectorError(format!("invalid label key {k:?}: {e}")));
        }
        Ok(k)
    }

    fn value(&mut self) -> Result<String, SelectorError> {
        self.skip_ws();
        let v = self.word();
        if let Some(e) = crate::validation::label_value(&v).first() {
            return Err(SelectorError(format!("invalid label value: {v:?}: {e}")));
        }
        Ok(v)
    }

    fn set(&mut self) -> Result<Vec<String>, SelectorError> {
        self.skip_ws();
        if !self.eat('(') {
            return Err(SelectorError(format!(
                "expected '(' at position {}",
                self.pos
            )));
        }
        let mut values = Vec::new();
        loop {
            let v = self.value()?;
            values.push(v);
            self.skip_ws();
            if self.eat(')') {
                break;
            }
            if !self.eat(',') {
                return Err(SelectorError(format!(
                    "expected ',' or ')' at position {}",
                    self.pos
                )));
            }
        }
        Ok(values)
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.eat('!') {
            self.skip_ws();
            return Ok(Requirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        self.skip_ws();
        if self.at_end() || self.peek() == Some(',') {
            return Ok(Requirement::Exists(key));
        }
        if self.eat_str("==") || self.eat('=') {
            return Ok(Requirement::Equals(key, self.value()?));
        }
        if self.eat_str("!=") {
            return Ok(Requirement::NotEquals(key, self.value()?));
        }
        if self.eat('>') || self.eat('<') {
            let greater = self.chars[self.pos - 1] == '>';
            let v = self.value()?;
            let n = v
                .parse::<i64>()
                .map_err(|_| SelectorError(format!("invalid integer value {v:?}")))?;
            return Ok(if greater {
                Requirement::GreaterThan(key, n)
            } else {
                Requirement::LessThan(key, n)
            });
        }
        if self.eat_str("notin") {
            return Ok(Requirement::NotIn(key, self.set()?));
        }
        if self.eat_str("in") {
            return Ok(Requirement::In(key, self.set()?));
        }
        Err(SelectorError(format!(
            "found unexpected token at position {} after key {key:?}",
            self.pos
        )))
    }
}

/// One `field=value` or `field!=value` term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldTerm {
    pub field: String,
    pub value: String,
    pub equal: bool,
}

/// A parsed field selector: every term must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query syntax (`a=b,c!=d`, `\` escapes `,` `=` `\`).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for part in split_unescaped(s, ',') {
            if part.is_empty() {
                continue;
            }
            let (field, value, equal) = if let Some(i) = find_unescaped(&part, "!=") {
                (&part[..i], &part[i + 2..], false)
            } else if let Some(i) = find_unescaped(&part, "==") {
                (&part[..i], &part[i + 2..], true)
            } else if let Some(i) = find_unescaped(&part, "=") {
                (&part[..i], &part[i + 1..], true)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            terms.push(FieldTerm {
                field: field.trim().to_string(),
                value: unescape(value),
                equal,
            });
        }
        Ok(FieldSelector { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Matches with `lookup` giving the value of a field, or `None` when the object lacks it.
    pub fn matches(&self, lookup: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let v = lookup(&t.field).unwrap_or_default();
            (v == t.value) == t.equal
        })
    }

    /// The value the selector requires for `field`, if it pins one (`metadata.name=x`).
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.field == field)
            .map(|t| t.value.as_str())
    }
}

/// Whether an object with `object_labels`, and fields as `field` gives them, is selected by
/// `labels` and `fields`: the one test the store's lists and the watch cache both apply.
pub fn selects(
    labels: &Selector,
    fields: &FieldSelector,
    object_labels: Option<&BTreeMap<String, String>>,
    field: impl Fn(&str) -> Option<String>,
) -> bool {
    labels.matches(object_labels) && (fields.is_empty() || fields.matches(field))
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            parts.last_mut().expect("one part").push('\\');
            parts.last_mut().expect("one part").push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else {
            parts.last_mut().expect("one part").push(c);
        }
    }
    parts
}

fn find_unescaped(s: &str, pat: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if s[i..].starts_with(pat) {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            out.push(c);
        }
    }
    out
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

    #[test]
    fn parses_every_operator() {
        let s = Selector::parse(
            "app=web, tier!=db,env in (prod, staging),zone notin (a),canary,!legacy,x==y",
        )
        .unwrap();
        assert_eq!(s.requirements.len(), 7);
        let l = labels(&[
            ("app", "web"),
            ("tier", "fe"),
            ("env", "prod"),
            ("zone", "b"),
            ("canary", ""),
            ("x", "y"),
        ]);
        assert!(s.matches(Some(&l)));
        let mut l2 = l.clone();
        l2.insert("legacy".into(), "1".into());
        assert!(!s.matches(Some(&l2)));
        assert!(!s.matches(None));
        assert!(Selector::parse("").unwrap().matches(None));
        assert!(
            Selector::parse("gen>3")
                .unwrap()
                .matches(Some(&labels(&[("gen", "4")])))
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(Selector::parse("app=").is_ok(), "empty value is allowed");
        assert!(Selector::parse("a b").is_err());
        assert!(Selector::parse("env in prod").is_err());
        assert!(Selector::parse("=x").is_err());
        assert!(Selector::parse("a=b c").is_err());
    }

    #[test]
    fn label_selector_struct() {
        let ls: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]
        }))
        .unwrap();
        let s = Selector::from_label_selector(Some(&ls)).unwrap();
        assert!(s.matches(Some(&labels(&[("app", "web"), ("env", "prod")]))));
        assert!(!s.matches(Some(&labels(&[("app", "web"), ("env", "dev")]))));
        assert!(
            !Selector::from_label_selector(None)
                .unwrap()
                .matches(Some(&labels(&[])))
        );
    }

    #[test]
    fn field_selectors() {
        let f = FieldSelector::parse("metadata.name=a\\,b,status.phase!=Running").unwrap();
        assert_eq!(f.terms[0].value, "a,b");
        assert_eq!(f.required_value("metadata.name"), Some("a,b"));
        assert!(f.matches(|k| match k {
            "metadata.name" => Some("a,b".into()),
            _ => Some("Pending".into()),
        }));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
