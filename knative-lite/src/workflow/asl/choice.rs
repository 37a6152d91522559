//! Choice rules: the conditions a Choice state tests. As the spec and Step Functions have
//! it, a comparison whose Variable (or `...Path` operand) is absent from the input is an
//! error, except IsPresent, which exists to test that; a value of the wrong type simply
//! does not match (StringEquals on a number is false), so rules can test a field's type
//! and value in one And.

use std::cmp::Ordering;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::Failure;
use super::path::{self, Path};

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    And(Vec<Rule>),
    Or(Vec<Rule>),
    Not(Box<Rule>),
    Test { variable: Path, test: Test },
}

#[derive(Clone, Debug, PartialEq)]
enum Test {
    Compare {
        kind: Type,
        op: Op,
        against: Against,
    },
    Matches(Vec<Glob>),
    /// IsNull, IsNumeric, ...: whether the value is of `kind`, compared with `expected`.
    Is {
        kind: Type,
        expected: bool,
    },
    IsPresent(bool),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Type {
    String,
    Numeric,
    Boolean,
    Timestamp,
    Null,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Equals,
    LessThan,
    GreaterThan,
    LessThanEquals,
    GreaterThanEquals,
}

#[derive(Clone, Debug, PartialEq)]
enum Against {
    Value(Value),
    Path(Path),
}

#[derive(Clone, Debug, PartialEq)]
enum Glob {
    Char(char),
    Star,
}

const OPS: [(&str, Op); 5] = [
    ("Equals", Op::Equals),
    ("LessThan", Op::LessThan),
    ("GreaterThan", Op::GreaterThan),
    ("LessThanEquals", Op::LessThanEquals),
    ("GreaterThanEquals", Op::GreaterThanEquals),
];

const TYPE_TESTS: [(&str, Type); 5] = [
    ("IsNull", Type::Null),
    ("IsNumeric", Type::Numeric),
    ("IsString", Type::String),
    ("IsBoolean", Type::Boolean),
    ("IsTimestamp", Type::Timestamp),
];

/// RFC 3339 as the spec restricts it: uppercase T and Z, seconds and an offset required.
static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
        .expect("the timestamp pattern is valid")
});

impl Rule {
    pub fn parse(rule: &Value) -> Result<Rule, String> {
        parse_rule(rule, true)
    }

    pub fn matches(&self, input: &Value, context: &Value) -> Result<bool, Failure> {
        match &self.kind {
            Kind::And(rules) => {
                for rule in rules {
                    if !rule.matches(input, context)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Kind::Or(rules) => {
                for rule in rules {
                    if rule.matches(input, context)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Kind::Not(rule) => Ok(!rule.matches(input, context)?),
            Kind::Test { variable, test } => {
                let value = variable.find(input, context);
                if let Test::IsPresent(expected) = test {
                    return Ok(value.is_some() == *expected);
                }
                let value = value.ok_or_else(|| missing(variable))?;
                match test {
                    Test::Compare { kind, op, against } => {
                        let other = match against {
                            Against::Value(v) => v.clone(),
                            Against::Path(p) => p.find(input, context).ok_or_else(|| missing(p))?,
                        };
                        Ok(compare(*kind, &value, &other).is_some_and(|o| holds(*op, o)))
                    }
                    Test::Matches(pattern) => Ok(value.as_str().is_some_and(|text| {
                        glob_matches(pattern, &text.chars().collect::<Vec<_>>())
                    })),
                    Test::Is { kind, expected } => Ok(is_type(*kind, &value) == *expected),
                    Test::IsPresent(_) => Ok(true),
                }
            }
        }
    }
}

fn missing(path: &Path) -> Failure {
    Failure::runtime(format!(
        "Invalid path '{}': The choice state's condition path references an invalid value.",
        path.text()
    ))
}

fn parse_rule(rule: &Value, top: bool) -> Result<Rule, String> {
    let Value::Object(fields) = rule else {
        return Err(format!("a choice rule must be an object, not {rule}"));
    };
    let mut operator: Option<(&str, &Value)> = None;
    for (key, value) in fields {
        match key.as_str() {
            "Variable" | "Comment" => {}
            "Next" if top => {}
            "Next" => return Err(String::from("a nested rule must not have 'Next'")),
            name if is_operator(name) => {
                if let Some((first, _)) = operator {
                    return Err(format!(
                        "a rule takes exactly one operator, but has both '{first}' and '{name}'"
                    ));
                }
                operator = Some((name, value));
            }
            other => return Err(format!("unknown field '{other}'")),
        }
    }
    let Some((name, value)) = operator else {
        return Err(String::from(
            "a rule needs an operator (e.g. 'StringEquals', 'And')",
        ));
    };
    let variable = fields.get("Variable");
    let kind = match name {
        "And" | "Or" | "Not" => {
            if variable.is_some() {
                return Err(format!("'Variable' is not allowed with '{name}'"));
            }
            logical(name, value)?
        }
        _ => {
            let Some(variable) = variable else {
                return Err(format!("'Variable' is required with '{name}'"));
            };
            let variable = match variable {
                Value::String(text) => Path::parse(text).map_err(|e| format!("Variable: {e}"))?,
                other => return Err(format!("Variable: expected a path, not {other}")),
            };
            let test = comparison(name, value).map_err(|e| format!("{name}: {e}"))?;
            Kind::Test { variable, test }
        }
    };
    Ok(Rule { kind })
}

fn is_operator(name: &str) -> bool {
    matches!(name, "And" | "Or" | "Not" | "StringMatches" | "IsPresent")
        || TYPE_TESTS.iter().any(|(n, _)| *n == name)
        || comparison_name(name).is_some()
}

/// `StringLessThanPath` and kin: the type, the operator and whether it is a `...Path` form.
fn comparison_name(name: &str) -> Option<(Type, Op, bool)> {
    let (name, path) = match name.strip_suffix("Path") {
        Some(name) => (name, true),
        None => (name, false),
    };
    let types = [
        ("String", Type::String),
        ("Numeric", Type::Numeric),
        ("Boolean", Type::Boolean),
        ("Timestamp", Type::Timestamp),
    ];
    let (kind, rest) = types
        .iter()
        .find_map(|(prefix, kind)| Some((*kind, name.strip_prefix(prefix)?)))?;
    let op = OPS.iter().find(|(n, _)| *n == rest).map(|(_, op)| *op)?;
    if kind == Type::Boolean && op != Op::Equals {
        return None;
    }
    Some((kind, op, path))
}

fn logical(name: &str, value: &Value) -> Result<Kind, String> {
    if name == "Not" {
        let inner = parse_rule(value, false).map_err(|e| format!("Not: {e}"))?;
        return Ok(Kind::Not(Box::new(inner)));
    }
    let Value::Array(items) = value else {
        return Err(format!("{name}: expected an array of rules"));
    };
    if items.is_empty() {
        return Err(format!("{name}: expected at least one rule"));
    }
    let rules = items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_rule(item, false).map_err(|e| format!("{name}[{i}]: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(if name == "And" {
        Kind::And(rules)
    } else {
        Kind::Or(rules)
    })
}

fn comparison(name: &str, value: &Value) -> Result<Test, String> {
    if name == "IsPresent" {
        let expected = value.as_bool().ok_or("expected true or false")?;
        return Ok(Test::IsPresent(expected));
    }
    if let Some((_, kind)) = TYPE_TESTS.iter().find(|(n, _)| *n == name) {
        let expected = value.as_bool().ok_or("expected true or false")?;
        return Ok(Test::Is {
            kind: *kind,
            expected,
        });
    }
    if name == "StringMatches" {
        let pattern = value.as_str().ok_or("expected a string")?;
        return Ok(Test::Matches(glob(pattern)));
    }
    let Some((kind, op, is_path)) = comparison_name(name) else {
        return Err(String::from("unknown operator"));
    };
    let against = if is_path {
        let text = value.as_str().ok_or("expected a path")?;
        Against::Path(Path::parse(text)?)
    } else {
        let fits = match kind {
            Type::String => value.is_string(),
            Type::Numeric => value.is_number(),
            Type::Boolean => value.is_boolean(),
            Type::Timestamp => timestamp(value).is_some(),
            Type::Null => false,
        };
        if !fits {
            let wanted = match kind {
                Type::String => "a string",
                Type::Numeric => "a number",
                Type::Boolean => "true or false",
                _ => "an RFC 3339 timestamp such as \"2016-03-14T01:59:00Z\"",
            };
            return Err(format!("expected {wanted}, not {value}"));
        }
        Against::Value(value.clone())
    };
    Ok(Test::Compare { kind, op, against })
}

fn timestamp(value: &Value) -> Option<jiff::Timestamp> {
    let text = value.as_str()?;
    if !TIMESTAMP.is_match(text) {
        return None;
    }
    text.parse().ok()
}

/// How `value` orders against `other` when both are of `kind`; None when either is not.
fn compare(kind: Type, value: &Value, other: &Value) -> Option<Ordering> {
    match kind {
        Type::String => Some(value.as_str()?.cmp(other.as_str()?)),
        Type::Numeric => path::compare_numbers(value.as_number()?, other.as_number()?),
        Type::Boolean => (value.as_bool()? == other.as_bool()?).then_some(Ordering::Equal),
        Type::Timestamp => Some(timestamp(value)?.cmp(&timestamp(other)?)),
        Type::Null => None,
    }
}

fn holds(op: Op, ordering: Ordering) -> bool {
    match op {
        Op::Equals => ordering == Ordering::Equal,
        Op::LessThan => ordering == Ordering::Less,
        Op::GreaterThan => ordering == Ordering::Greater,
        Op::LessThanEquals => ordering != Ordering::Greater,
        Op::GreaterThanEquals => ordering != Ordering::Less,
    }
}

fn is_type(kind: Type, value: &Value) -> bool {
    match kind {
        Type::Null => value.is_null(),
        Type::Numeric => value.is_number(),
        Type::String => value.is_string(),
        Type::Boolean => value.is_boolean(),
        Type::Timestamp => timestamp(value).is_some(),
    }
}

/// A StringMatches pattern: `*` matches any run of characters, `\*` a star and `\\` a
/// backslash.
fn glob(pattern: &str) -> Vec<Glob> {
    let mut out = Vec::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push(Glob::Star),
            '\\' => out.push(Glob::Char(chars.next().unwrap_or('\\'))),
            c => out.push(Glob::Char(c)),
        }
    }
    out
}

fn glob_matches(pattern: &[Glob], text: &[char]) -> bool {
    // Greedy matching that backtracks to the last star: linear in practice.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Glob::Char(c)) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            Some(Glob::Star) => {
                star = Some((p, t));
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|g| *g == Glob::Star)
}

#[cfg(test)]
#[path = "choice_tests.rs"]
mod tests;
