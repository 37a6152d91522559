//! The simple JSONPath CRDs use in `additionalPrinterColumns`, `selectableFields` and the
//! scale subresource: `.spec.replicas`, `.metadata.labels['app.kubernetes.io/name']`,
//! `.status.conditions[0].type`, `.items[*].name` and
//! `.status.conditions[?(@.type=="Ready")].status`.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Str(String),
    Num(f64),
    Bool(bool),
}

#[derive(Clone, Debug, PartialEq)]
enum Segment {
    Field(String),
    Index(i64),
    All,
    Filter {
        path: Vec<Segment>,
        op: String,
        value: Option<Literal>,
    },
}

/// A parsed path.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    text: String,
    segments: Vec<Segment>,
}

fn parse_literal(s: &str) -> Result<Literal, String> {
    let s = s.trim();
    if let Some(inner) = s
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
    {
        return Ok(Literal::Str(inner.to_string()));
    }
    match s {
        "true" => return Ok(Literal::Bool(true)),
        "false" => return Ok(Literal::Bool(false)),
        _ => {}
    }
    s.parse::<f64>()
        .map(Literal::Num)
        .map_err(|_| format!("unrecognized literal {s:?}"))
}

fn parse_segments(mut s: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    while !s.is_empty() {
        if let Some(rest) = s.strip_prefix('.') {
            if rest.starts_with('.') {
                return Err("recursive descent is not supported".into());
            }
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            let name = &rest[..end];
            if name.is_empty() {
                if rest.is_empty() {
                    // A lone "." names the whole object.
                    s = rest;
                    continue;
                }
            } else if name == "*" {
                out.push(Segment::All);
            } else {
                out.push(Segment::Field(name.to_string()));
            }
            s = &rest[end..];
        } else if let Some(rest) = s.strip_prefix('[') {
            if let Some(filter) = rest.strip_prefix("?(") {
                let end = filter
                    .find(")]")
                    .ok_or_else(|| "unterminated filter".to_string())?;
                let expr = filter[..end].trim();
                s = &filter[end + 2..];
                let expr = expr
                    .strip_prefix('@')
                    .ok_or_else(|| format!("unsupported filter {expr:?}"))?;
                let ops = ["==", "!=", "<=", ">=", "<", ">"];
                let found = ops
                    .iter()
                    .filter_map(|op| expr.find(op).map(|i| (i, *op)))
                    .min_by_key(|(i, _)| *i);
                let (path, op, value) = match found {
                    Some((i, op)) => (
                        &expr[..i],
                        op.to_string(),
                        Some(parse_literal(&expr[i + op.len()..])?),
                    ),
                    None => (expr, String::new(), None),
                };
                out.push(Segment::Filter {
                    path: parse_segments(path.trim())?,
                    op,
                    value,
                });
                continue;
            }
            let end = rest.find(']').ok_or_else(|| "unterminated [".to_string())?;
            let inner = rest[..end].trim();
            s = &rest[end + 1..];
            if inner == "*" {
                out.push(Segment::All);
            } else if let Some(q) = inner
                .strip_prefix('\'')
                .and_then(|r| r.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
            {
                // `['serving\.knative\.dev/revision']`, as Knative's printer columns
                // write label keys: an escaped character stands for itself.
                out.push(Segment::Field(unescape(q)));
            } else if let Ok(i) = inner.parse::<i64>() {
                out.push(Segment::Index(i));
            } else {
                return Err(format!("unsupported subscript [{inner}]"));
            }
        } else {
            return Err(format!("unexpected {s:?}"));
        }
    }
    Ok(out)
}

/// `q` with each backslash escape replaced by the character it escapes.
fn unescape(q: &str) -> String {
    let mut out = String::with_capacity(q.len());
    let mut chars = q.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

fn compare(v: &Value, op: &str, lit: &Literal) -> bool {
    use std::cmp::Ordering;
    let ord = match (v, lit) {
        (Value::String(a), Literal::Str(b)) => Some(a.as_str().cmp(b.as_str())),
        (Value::Number(a), Literal::Num(b)) => a.as_f64().and_then(|a| a.partial_cmp(b)),
        (Value::Bool(a), Literal::Bool(b)) => Some(a.cmp(b)),
        _ => None,
    };
    match (op, ord) {
        ("==", Some(o)) => o == Ordering::Equal,
        ("!=", Some(o)) => o != Ordering::Equal,
        ("!=", None) => true,
        ("<", Some(o)) => o == Ordering::Less,
        (">", Some(o)) => o == Ordering::Greater,
        ("<=", Some(o)) => o != Ordering::Greater,
        (">=", Some(o)) => o != Ordering::Less,
        _ => false,
    }
}

fn eval<'a>(segments: &[Segment], roots: Vec<&'a Value>) -> Vec<&'a Value> {
    let mut current = roots;
    for seg in segments {
        let mut next = Vec::new();
        for v in current {
            match seg {
                Segment::Field(name) => {
                    if let Some(x) = v.get(name.as_str()) {
                        next.push(x);
                    }
                }
                Segment::Index(i) => {
                    if let Some(a) = v.as_array() {
                        let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                        if idx >= 0
                            && let Some(x) = a.get(idx as usize)
                        {
                            next.push(x);
                        }
                    }
                }
                Segment::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Segment::Filter { path, op, value } => {
                    let items: Vec<&Value> = match v {
                        Value::Array(a) => a.iter().collect(),
                        Value::Object(m) => m.values().collect(),
                        _ => Vec::new(),
                    };
                    for item in items {
                        let found = eval(path, vec![item]);
                        let keep = match value {
                            None => !found.is_empty(),
                            Some(lit) => found.iter().any(|f| compare(f, op, lit)),
                        };
                        if keep {
                            next.push(item);
                        }
                    }
                }
            }
        }
        current = next;
    }
    current
}

impl JsonPath {
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let t = text.trim();
        let inner = t
            .strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .unwrap_or(t)
            .trim();
        if !inner.starts_with('.') && !inner.starts_with('[') {
            return Err(format!("unrecognized column definition {text:?}"));
        }
        Ok(JsonPath {
            text: text.to_string(),
            segments: parse_segments(inner)?,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every value the path names in `root`, missing keys skipped.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        eval(&self.segments, vec![root])
    }

    /// The first value the path names.
    pub fn first<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        self.find(root).into_iter().next()
    }

    /// The field names of a simple `.a.b.c` path (the scale subresource's paths), if it is one.
    pub fn simple_fields(&self) -> Option<Vec<&str>> {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Field(f) => Some(f.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Go's `fmt.Print` of a JSON value as unstructured content holds it: what `kubectl get`
/// columns of type `string` show.
pub fn go_print(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => super::validate::go_number(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_print).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", go_print(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths() {
        let v = json!({"spec": {"replicas": 3, "tags": ["a", "b"]},
                       "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]}});
        let get = |p: &str| JsonPath::parse(p).unwrap().first(&v).cloned();
        assert_eq!(get(".spec.replicas"), Some(json!(3)));
        assert_eq!(get("{.spec.tags[1]}"), Some(json!("b")));
        assert_eq!(get(".spec.tags[-1]"), Some(json!("b")));
        assert_eq!(
            get(".metadata.labels['app.kubernetes.io/name']"),
            Some(json!("web"))
        );
        assert_eq!(
            get(r".metadata.labels['app\.kubernetes\.io/name']"),
            Some(json!("web"))
        );
        assert_eq!(
            get(".status.conditions[?(@.type==\"Synced\")].status"),
            Some(json!("False"))
        );
        assert_eq!(
            get(".status.conditions[?(@.type=='Ready')].status"),
            Some(json!("True"))
        );
        assert_eq!(get(".spec.missing.deeper"), None);
        assert_eq!(JsonPath::parse(".spec.tags[*]").unwrap().find(&v).len(), 2);
        assert_eq!(
            JsonPath::parse(".spec.replicas").unwrap().simple_fields(),
            Some(vec!["spec", "replicas"])
        );
        assert!(JsonPath::parse("spec").is_err());
        assert_eq!(
            go_print(&json!({"b": [1, "x"], "a": 1.5})),
            "map[a:1.5 b:[1 x]]"
        );
    }
}
