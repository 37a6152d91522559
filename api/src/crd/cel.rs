//! CEL validation rules (`x-kubernetes-validations`), as apiextensions-apiserver evaluates
//! them: each rule of a schema node runs with `self` bound to the value at that node (and
//! `oldSelf` to the value it replaces, on updates), and a rule that is not `true` is a
//! field error with the rule's `message` (or `failed rule: <rule>`). Rules that use
//! `oldSelf` are transition rules and only run when there is an old value; values equal to
//! the old ones are not checked again (ratcheting). Rules are compiled when the CRD is
//! written, so a CRD with a rule that does not parse is refused.
//!
//! The interpreter is `cel-interpreter`: upstream's Kubernetes CEL libraries (`quantity`,
//! `url`, `ip`, `format`, ...) and cost limits are not there.

use std::collections::HashMap;
use std::sync::LazyLock;

use cel_interpreter::{Context, Program, Value as Cel};
use regex::Regex;
use serde_json::Value;

use super::schema::Schema;
use crate::validation::{ErrorKind, Errors, FieldError, Path};

/// One `x-kubernetes-validations` entry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    pub rule: String,
    pub message: Option<String>,
}

impl Rule {
    /// The rules of a schema node as JSON.
    pub fn parse_all(node: &Value) -> Vec<Rule> {
        node.get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| Rule {
                rule: r
                    .get("rule")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                message: r
                    .get("message")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .map(str::to_string),
            })
            .collect()
    }

    fn transition(&self) -> bool {
        static OLD_SELF: LazyLock<Regex> =
            LazyLock::new(|| Regex::new(r"\boldSelf\b").expect("regex"));
        OLD_SELF.is_match(&self.rule)
    }

    fn message(&self) -> String {
        self.message
            .clone()
            .unwrap_or_else(|| format!("failed rule: {}", self.rule))
    }
}

/// Compiles a rule. The parser panics on some malformed input instead of returning an
/// error, so a panic is caught and reported as a compile error: a rule comes from a user.
fn compile(rule: &str) -> Result<Program, String> {
    match std::panic::catch_unwind(|| Program::compile(rule)) {
        Ok(Ok(p)) => Ok(p),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("syntax error".into()),
    }
}

/// A JSON value as CEL sees it: integers are `int`, objects are maps.
fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Cel::from(s.clone()),
        Value::Array(items) => Cel::from(items.iter().map(to_cel).collect::<Vec<_>>()),
        Value::Object(m) => Cel::from(
            m.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<HashMap<String, Cel>>(),
        ),
    }
}

/// Evaluates `expression` with `vars` bound, for admission's CEL (webhooks' matchConditions,
/// ValidatingAdmissionPolicies): `Ok(None)` when the result is not a bool.
pub fn evaluate_bool(expression: &str, vars: &[(&str, &Value)]) -> Result<Option<bool>, String> {
    match evaluate(expression, vars)? {
        Cel::Bool(b) => Ok(Some(b)),
        _ => Ok(None),
    }
}

/// [`evaluate_bool`] for expressions that make a string (a policy's `messageExpression`).
pub fn evaluate_string(
    expression: &str,
    vars: &[(&str, &Value)],
) -> Result<Option<String>, String> {
    match evaluate(expression, vars)? {
        Cel::String(s) => Ok(Some(s.to_string())),
        _ => Ok(None),
    }
}

/// [`evaluate_bool`] for any value, as JSON (a policy's `variables`).
pub fn evaluate_json(expression: &str, vars: &[(&str, &Value)]) -> Result<Value, String> {
    evaluate(expression, vars).map(|v| from_cel(&v))
}

/// A CEL value as JSON; what JSON cannot hold (bytes, durations, functions) is null.
fn from_cel(v: &Cel) -> Value {
    use cel_interpreter::objects::Key;
    match v {
        Cel::Null => Value::Null,
        Cel::Bool(b) => Value::Bool(*b),
        Cel::Int(i) => Value::from(*i),
        Cel::UInt(u) => Value::from(*u),
        Cel::Float(f) => Value::from(*f),
        Cel::String(s) => Value::String(s.to_string()),
        Cel::List(items) => Value::Array(items.iter().map(from_cel).collect()),
        Cel::Map(m) => Value::Object(
            m.map
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Key::String(s) => s.to_string(),
                        Key::Int(i) => i.to_string(),
                        Key::Uint(u) => u.to_string(),
                        Key::Bool(b) => b.to_string(),
                    };
                    (key, from_cel(v))
                })
                .collect(),
        ),
        _ => Value::Null,
    }
}

fn evaluate(expression: &str, vars: &[(&str, &Value)]) -> Result<Cel, String> {
    let program = compile(expression)?;
    let mut ctx = Context::default();
    for (name, value) in vars {
        ctx.add_variable_from_value(*name, to_cel(value));
    }
    program.execute(&ctx).map_err(|e| e.to_string())
}

/// Why `expression` does not compile, if it does not.
pub fn compile_error(expression: &str) -> Option<String> {
    compile(expression).err()
}

/// Errors of rules that do not compile, at `path` (a version's `openAPIV3Schema`), for the
/// CRD's own validation.
pub fn compile_errors(schema: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    compile_node(schema, path, &mut errs);
    errs
}

fn compile_node(node: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(m) = node.as_object() else { return };
    for (i, rule) in Rule::parse_all(node).iter().enumerate() {
        if rule.rule.is_empty() {
            continue;
        }
        if let Err(e) = compile(&rule.rule) {
            errs.push(FieldError::invalid(
                &path
                    .child("x-kubernetes-validations")
                    .index(i)
                    .child("rule"),
                &rule.rule,
                format!("compilation failed: {e}"),
            ));
        }
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            compile_node(v, &path.child("properties").key(k), errs);
        }
    }
    if let Some(items) = m.get("items") {
        compile_node(items, &path.child("items"), errs);
    }
    if let Some(additional) = m.get("additionalProperties") {
        compile_node(additional, &path.child("additionalProperties"), errs);
    }
}

/// Runs every rule of `schema` over `value`; `old` is the object before an update.
pub fn validate(value: &Value, schema: &Schema, old: Option<&Value>) -> Errors {
    let mut errs = Vec::new();
    node(&Path::default(), value, schema, old, &mut errs);
    errs
}

fn node(path: &Path, x: &Value, s: &Schema, old: Option<&Value>, errs: &mut Errors) {
    if x.is_null() || old == Some(x) {
        return;
    }
    let type_name = s.type_.clone().unwrap_or_default();
    for rule in &s.validations {
        if rule.transition() && old.is_none() {
            continue;
        }
        let Ok(program) = compile(&rule.rule) else {
            continue;
        };
        let mut ctx = Context::default();
        ctx.add_variable_from_value("self", to_cel(x));
        if let Some(o) = old {
            ctx.add_variable_from_value("oldSelf", to_cel(o));
        }
        let detail = match program.execute(&ctx) {
            Ok(Cel::Bool(true)) => continue,
            Ok(Cel::Bool(false)) => rule.message(),
            Ok(other) => format!("rule did not evaluate to a bool: {other:?}"),
            Err(e) => format!("rule evaluation error: {e}"),
        };
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            Some(format!("{type_name:?}")),
            detail,
        ));
    }
    match x {
        Value::Object(m) => {
            let old = old.and_then(Value::as_object);
            for (k, v) in m {
                let child = s.field(k);
                if let Some(cs) = child {
                    node(&path.child(k), v, cs, old.and_then(|o| o.get(k)), errs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = &s.items {
                for (i, v) in items.iter().enumerate() {
                    node(&path.index(i), v, is, None, errs);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(&json!({
            "type": "object",
            "properties": {"spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                    {"rule": "self.max <= oldSelf.max + 10"},
                ],
                "properties": {
                    "min": {"type": "integer"},
                    "max": {"type": "integer"},
                    "name": {"type": "string",
                             "x-kubernetes-validations": [{"rule": "self.startsWith('w-')"}]},
                    "tags": {"type": "array", "items": {"type": "string",
                             "x-kubernetes-validations": [{"rule": "size(self) < 4", "message": "too long"}]}},
                },
            }},
        }))
    }

    fn msgs(v: Value, old: Option<Value>) -> Vec<String> {
        validate(&v, &schema(), old.as_ref())
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn rules() {
        assert!(
            msgs(
                json!({"spec": {"min": 1, "max": 2, "name": "w-1", "tags": ["a"]}}),
                None
            )
            .is_empty()
        );
        assert_eq!(
            msgs(
                json!({"spec": {"min": 3, "max": 2, "name": "x", "tags": ["a", "abcd"]}}),
                None
            ),
            vec![
                "spec: Invalid value: \"object\": min must not exceed max",
                "spec.name: Invalid value: \"string\": failed rule: self.startsWith('w-')",
                "spec.tags[1]: Invalid value: \"string\": too long",
            ]
        );
        // Transition rules run on updates only.
        let old = json!({"spec": {"min": 1, "max": 2}});
        assert_eq!(
            msgs(json!({"spec": {"min": 1, "max": 20}}), Some(old.clone())),
            vec!["spec: Invalid value: \"object\": failed rule: self.max <= oldSelf.max + 10"]
        );
        assert!(msgs(json!({"spec": {"min": 1, "max": 12}}), Some(old.clone())).is_empty());
        // An unchanged value is not checked again.
        let bad = json!({"spec": {"min": 3, "max": 2}});
        assert!(msgs(bad.clone(), Some(bad)).is_empty());
    }

    #[test]
    fn evaluates_with_variables() {
        let obj = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 3}});
        let vars = [("object", &obj)];
        assert_eq!(
            evaluate_bool("object.spec.replicas <= 5", &vars),
            Ok(Some(true))
        );
        assert_eq!(
            evaluate_bool("object.metadata.labels.app == 'db'", &vars),
            Ok(Some(false))
        );
        assert_eq!(evaluate_bool("object.spec.replicas", &vars), Ok(None));
        assert_eq!(
            evaluate_string("'replicas: ' + string(object.spec.replicas)", &vars),
            Ok(Some("replicas: 3".into()))
        );
        assert!(evaluate_bool("object.spec.missing > 1", &vars).is_err());
        assert!(compile_error("object.(").is_some());
        assert_eq!(
            evaluate_json("{'n': object.spec.replicas * 2, 'l': [1, 'a']}", &vars),
            Ok(json!({"n": 6, "l": [1, "a"]}))
        );
    }

    #[test]
    fn compile() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.a <"}, {"rule": "self.a > 1"}]}}});
        let errs = compile_errors(&schema, &Path::new("s"));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(
            errs[0].field,
            "s.properties[spec].x-kubernetes-validations[0].rule"
        );
        assert!(errs[0].detail.starts_with("compilation failed: "));
    }
}
