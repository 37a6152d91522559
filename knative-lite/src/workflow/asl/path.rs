//! JSONPath as the States Language uses it. Step Functions evaluates paths with Jayway
//! JsonPath, so definitions written for it rely on Jayway's rules: a path that can only
//! name one node (a Reference Path) yields that node or fails, while a path with a
//! wildcard, slice, union, filter or recursive descent yields the array of what it
//! matched, possibly empty. Writing (ResultPath) is limited to Reference Paths and never
//! invents arrays, only objects.

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

use super::parser::Parser;
use super::{Failure, errors};

/// A parsed path: `$...` into the state's input, or `$$...` into the context object.
#[derive(Clone, Debug, PartialEq)]
pub struct Path {
    text: String,
    context: bool,
    segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq)]
enum Segment {
    /// `.name`, `[...]`: selects among the node's children.
    Child(Selector),
    /// `..name`, `..[...]`: selects among the node and all its descendants' children.
    Descendant(Selector),
}

#[derive(Clone, Debug, PartialEq)]
enum Selector {
    Name(String),
    Index(i64),
    Wildcard,
    Slice {
        start: Option<i64>,
        end: Option<i64>,
        step: i64,
    },
    Names(Vec<String>),
    Indexes(Vec<i64>),
    Filter(Box<Expr>),
}

/// A filter expression, `[?(...)]`.
#[derive(Clone, Debug, PartialEq)]
enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Exists(Operand),
    Compare(Operand, CmpOp, Operand),
}

#[derive(Clone, Debug, PartialEq)]
enum Operand {
    /// `@...`: relative to the element being filtered.
    Current(Vec<Segment>),
    /// `$...`: relative to the root the whole path is evaluated on.
    Root(Vec<Segment>),
    Literal(Value),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Path {
    pub fn parse(text: &str) -> Result<Path, String> {
        let (path, used) = parse_prefix(text)?;
        if used != text.len() {
            let c = text[used..].chars().next().unwrap_or(' ');
            return Err(invalid(
                text,
                &format!("unexpected '{c}' at position {used}"),
            ));
        }
        Ok(path)
    }

    /// A Reference Path: the spec forbids `@`, `,`, `:` and `?` in them (and a wildcard or
    /// recursive descent could not name a single node either). Context paths qualify too.
    pub fn is_reference(&self) -> bool {
        is_reference(&self.segments)
    }

    pub fn is_context(&self) -> bool {
        self.context
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn select(&self, input: &Value, context: &Value) -> Result<Value, Failure> {
        self.find(input, context).ok_or_else(|| {
            Failure::runtime(format!(
                "Invalid path '{}' : No results for path: {}",
                self.text,
                self.normalized()
            ))
        })
    }

    pub fn find(&self, input: &Value, context: &Value) -> Option<Value> {
        let root = if self.context { context } else { input };
        evaluate(&self.segments, root, root)
    }

    /// Jayway's canonical form of the path, as its "No results" messages show it.
    fn normalized(&self) -> String {
        let mut out = String::from(if self.context { "$$" } else { "$" });
        for segment in &self.segments {
            match segment {
                Segment::Child(Selector::Name(name)) => out.push_str(&format!("['{name}']")),
                Segment::Child(Selector::Index(index)) => out.push_str(&format!("[{index}]")),
                _ => return self.text.clone(),
            }
        }
        out
    }
}

/// ResultPath: `input` with `result` placed at `path`.
pub fn insert(input: Value, path: &Path, result: Value) -> Result<Value, Failure> {
    if path.context {
        return Err(Failure::new(
            errors::RESULT_PATH_MATCH_FAILURE,
            format!(
                "ResultPath '{}' cannot write to the context object",
                path.text
            ),
        ));
    }
    if !path.is_reference() {
        return Err(Failure::new(
            errors::RESULT_PATH_MATCH_FAILURE,
            format!("ResultPath '{}' is not a reference path", path.text),
        ));
    }
    let mut output = input;
    place(&mut output, &path.segments, result)?;
    Ok(output)
}

fn place(target: &mut Value, segments: &[Segment], result: Value) -> Result<(), Failure> {
    let Some((first, rest)) = segments.split_first() else {
        *target = result;
        return Ok(());
    };
    let cannot = |step: String, target: &Value| {
        Failure::new(
            errors::RESULT_PATH_MATCH_FAILURE,
            format!("Unable to apply step \"{step}\" to input {target}"),
        )
    };
    match first {
        Segment::Child(Selector::Name(name)) => {
            let Value::Object(map) = target else {
                return Err(cannot(name.clone(), target));
            };
            if rest.is_empty() {
                map.insert(name.clone(), result);
                return Ok(());
            }
            let child = map
                .entry(name.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            place(child, rest, result)
        }
        Segment::Child(Selector::Index(index)) => {
            let slot = match target {
                Value::Array(items) => resolve_index(*index, items.len()),
                _ => None,
            };
            match (slot, target) {
                (Some(i), Value::Array(items)) => place(&mut items[i], rest, result),
                (_, target) => Err(cannot(index.to_string(), target)),
            }
        }
        _ => Err(cannot(String::from("?"), target)),
    }
}

fn invalid(text: &str, reason: &str) -> String {
    format!("invalid JSONPath '{text}': {reason}")
}

fn is_reference(segments: &[Segment]) -> bool {
    segments.iter().all(|segment| {
        matches!(
            segment,
            Segment::Child(Selector::Name(_)) | Segment::Child(Selector::Index(_))
        )
    })
}

fn resolve_index(index: i64, len: usize) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let index = if index < 0 { len + index } else { index };
    if (0..len).contains(&index) {
        usize::try_from(index).ok()
    } else {
        None
    }
}

/// Orders two JSON numbers, exactly for integers (no rounding through f64).
pub(super) fn compare_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return Some(x.cmp(&y));
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return Some(x.cmp(&y));
    }
    a.as_f64()?.partial_cmp(&b.as_f64()?)
}

// ---- evaluation ----

/// The value `segments` name from `node`: the node itself for a reference path (None when
/// there is none), else the array of all matches.
fn evaluate(segments: &[Segment], node: &Value, root: &Value) -> Option<Value> {
    let nodes = walk(segments, node, root);
    if is_reference(segments) {
        nodes.first().map(|found| (*found).clone())
    } else {
        Some(Value::Array(nodes.into_iter().cloned().collect()))
    }
}

fn walk<'v>(segments: &[Segment], node: &'v Value, root: &'v Value) -> Vec<&'v Value> {
    let mut nodes = vec![node];
    for segment in segments {
        let mut next = Vec::new();
        for node in nodes {
            match segment {
                Segment::Child(selector) => apply(selector, node, root, &mut next),
                Segment::Descendant(selector) => {
                    let mut all = Vec::new();
                    descendants(node, &mut all);
                    for inner in all {
                        apply(selector, inner, root, &mut next);
                    }
                }
            }
        }
        nodes = next;
    }
    nodes
}

/// `node` and everything below it, in document order.
fn descendants<'v>(node: &'v Value, out: &mut Vec<&'v Value>) {
    out.push(node);
    match node {
        Value::Object(map) => map.values().for_each(|child| descendants(child, out)),
        Value::Array(items) => items.iter().for_each(|child| descendants(child, out)),
        _ => {}
    }
}

fn apply<'v>(selector: &Selector, node: &'v Value, root: &'v Value, out: &mut Vec<&'v Value>) {
    match selector {
        Selector::Name(name) => out.extend(node.as_object().and_then(|map| map.get(name))),
        Selector::Names(names) => {
            if let Value::Object(map) = node {
                out.extend(names.iter().filter_map(|name| map.get(name)));
            }
        }
        Selector::Index(index) => {
            if let Value::Array(items) = node {
                out.extend(resolve_index(*index, items.len()).map(|i| &items[i]));
            }
        }
        Selector::Indexes(indexes) => {
            if let Value::Array(items) = node {
                for index in indexes {
                    out.extend(resolve_index(*index, items.len()).map(|i| &items[i]));
                }
            }
        }
        Selector::Wildcard => match node {
            Value::Object(map) => out.extend(map.values()),
            Value::Array(items) => out.extend(items.iter()),
            _ => {}
        },
        Selector::Slice { start, end, step } => {
            if let Value::Array(items) = node {
                let len = items.len() as i64;
                let clamp = |bound: i64| {
                    if bound < 0 {
                        (len + bound).max(0)
                    } else {
                        bound.min(len)
                    }
                };
                let mut i = start.map_or(0, clamp);
                let stop = end.map_or(len, clamp);
                while i < stop {
                    out.extend(usize::try_from(i).ok().and_then(|i| items.get(i)));
                    i = i.saturating_add(*step);
                }
            }
        }
        Selector::Filter(expr) => match node {
            Value::Array(items) => out.extend(items.iter().filter(|item| test(expr, item, root))),
            Value::Object(_) if test(expr, node, root) => out.push(node),
            _ => {}
        },
    }
}

fn test(expr: &Expr, current: &Value, root: &Value) -> bool {
    match expr {
        Expr::Or(a, b) => test(a, current, root) || test(b, current, root),
        Expr::And(a, b) => test(a, current, root) && test(b, current, root),
        Expr::Not(inner) => !test(inner, current, root),
        Expr::Exists(operand) => operand_value(operand, current, root).is_some(),
        Expr::Compare(left, op, right) => {
            let (Some(a), Some(b)) = (
                operand_value(left, current, root),
                operand_value(right, current, root),
            ) else {
                return false;
            };
            compare(&a, *op, &b)
        }
    }
}

fn operand_value(operand: &Operand, current: &Value, root: &Value) -> Option<Value> {
    match operand {
        Operand::Current(segments) => evaluate(segments, current, root),
        Operand::Root(segments) => evaluate(segments, root, root),
        Operand::Literal(value) => Some(value.clone()),
    }
}

fn compare(a: &Value, op: CmpOp, b: &Value) -> bool {
    let ordering = match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => {
            return match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                _ => false,
            };
        }
    };
    let Some(ordering) = ordering else {
        return false;
    };
    match op {
        CmpOp::Eq => ordering == Ordering::Equal,
        CmpOp::Ne => ordering != Ordering::Equal,
        CmpOp::Lt => ordering == Ordering::Less,
        CmpOp::Le => ordering != Ordering::Greater,
        CmpOp::Gt => ordering == Ordering::Greater,
        CmpOp::Ge => ordering != Ordering::Less,
    }
}

// ---- parsing ----

/// Parses the path at the start of `text`, stopping where a path cannot continue (so an
/// intrinsic's argument list can go on after it); gives the path and the bytes it used.
pub(super) fn parse_prefix(text: &str) -> Result<(Path, usize), String> {
    let mut parser = Parser { text, pos: 0 };
    let context = if text.starts_with("$$") {
        parser.pos = 2;
        true
    } else if text.starts_with('$') {
        parser.pos = 1;
        false
    } else {
        return Err(invalid(text, "a path must start with '$'"));
    };
    let segments = parser.segments().map_err(|reason| invalid(text, &reason))?;
    let used = parser.pos;
    let path = Path {
        text: text[..used].to_string(),
        context,
        segments,
    };
    Ok((path, used))
}

/// Characters that end a name written after a dot.
fn ends_name(c: char) -> bool {
    c.is_whitespace() || ".[]()'\",=!<>&|".contains(c)
}

impl Parser<'_> {
    fn expect(&mut self, wanted: char) -> Result<(), String> {
        self.skip_spaces();
        match self.bump() {
            Some(c) if c == wanted => Ok(()),
            Some(c) => Err(format!("expected '{wanted}' but found '{c}'")),
            None => Err(format!("expected '{wanted}' but the path ended")),
        }
    }

    fn segments(&mut self) -> Result<Vec<Segment>, String> {
        let mut segments = Vec::new();
        loop {
            if self.rest().starts_with("..") {
                self.pos += 2;
                let selector = match self.peek() {
                    Some('[') => self.bracket()?,
                    _ => self.dotted()?,
                };
                segments.push(Segment::Descendant(selector));
            } else if self.rest().starts_with('.') {
                self.pos += 1;
                segments.push(Segment::Child(self.dotted()?));
            } else if self.rest().starts_with('[') {
                segments.push(Segment::Child(self.bracket()?));
            } else {
                return Ok(segments);
            }
        }
    }

    /// The name or `*` after a dot.
    fn dotted(&mut self) -> Result<Selector, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| !ends_name(c)) {
            self.bump();
        }
        match &self.text[start..self.pos] {
            "" => Err(String::from("expected a name after '.'")),
            "*" => Ok(Selector::Wildcard),
            name => Ok(Selector::Name(name.to_string())),
        }
    }

    fn bracket(&mut self) -> Result<Selector, String> {
        self.expect('[')?;
        self.skip_spaces();
        let selector = match self.peek() {
            Some('?') => {
                self.bump();
                self.expect('(')?;
                let expr = self.or()?;
                self.expect(')')?;
                Selector::Filter(Box::new(expr))
            }
            Some('*') => {
                self.bump();
                Selector::Wildcard
            }
            Some('\'' | '"') => {
                let mut names = vec![self.quoted()?];
                while self.next_is(',') {
                    self.skip_spaces();
                    names.push(self.quoted()?);
                }
                match names.len() {
                    1 => Selector::Name(names.remove(0)),
                    _ => Selector::Names(names),
                }
            }
            None => return Err(String::from("unterminated '['")),
            _ => self.numeric()?,
        };
        self.expect(']')?;
        Ok(selector)
    }

    /// Whether the next non-space character is `c` (consumed if so).
    fn next_is(&mut self, c: char) -> bool {
        self.skip_spaces();
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    /// An index, a union of indexes or a slice.
    fn numeric(&mut self) -> Result<Selector, String> {
        let first = self.integer()?;
        if self.next_is(':') {
            let end = self.integer()?;
            let step = if self.next_is(':') {
                self.integer()?.unwrap_or(1)
            } else {
                1
            };
            if step <= 0 {
                return Err(String::from("a slice's step must be positive"));
            }
            return Ok(Selector::Slice {
                start: first,
                end,
                step,
            });
        }
        let first =
            first.ok_or_else(|| String::from("expected an index, a name or '*' in '[]'"))?;
        let mut indexes = vec![first];
        while self.next_is(',') {
            let next = self.integer()?;
            indexes.push(next.ok_or_else(|| String::from("expected an index after ','"))?);
        }
        match indexes.len() {
            1 => Ok(Selector::Index(first)),
            _ => Ok(Selector::Indexes(indexes)),
        }
    }

    /// An optional integer.
    fn integer(&mut self) -> Result<Option<i64>, String> {
        self.skip_spaces();
        let start = self.pos;
        if self.peek() == Some('-') {
            self.bump();
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        let digits = &self.text[start..self.pos];
        if digits.is_empty() {
            return Ok(None);
        }
        digits
            .parse()
            .map(Some)
            .map_err(|_| format!("invalid index '{digits}'"))
    }

    /// A string in single or double quotes, with backslash escapes.
    fn quoted(&mut self) -> Result<String, String> {
        let quote = self.bump().ok_or("expected a quoted name")?;
        if quote != '\'' && quote != '"' {
            return Err(format!("expected a quoted name but found '{quote}'"));
        }
        let mut out = String::new();
        loop {
            match self.bump() {
                None => return Err(String::from("unterminated quoted name")),
                Some('\\') => match self.bump() {
                    Some(c) => out.push(c),
                    None => return Err(String::from("unterminated quoted name")),
                },
                Some(c) if c == quote => return Ok(out),
                Some(c) => out.push(c),
            }
        }
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        loop {
            self.skip_spaces();
            if !self.rest().starts_with("||") {
                return Ok(left);
            }
            self.pos += 2;
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        loop {
            self.skip_spaces();
            if !self.rest().starts_with("&&") {
                return Ok(left);
            }
            self.pos += 2;
            left = Expr::And(Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.skip_spaces();
        if self.rest().starts_with('!') && !self.rest().starts_with("!=") {
            self.bump();
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.next_is('(') {
            let inner = self.or()?;
            self.expect(')')?;
            return Ok(inner);
        }
        let left = self.operand()?;
        self.skip_spaces();
        let op = [
            ("==", CmpOp::Eq),
            ("!=", CmpOp::Ne),
            ("<=", CmpOp::Le),
            (">=", CmpOp::Ge),
            ("<", CmpOp::Lt),
            (">", CmpOp::Gt),
        ]
        .into_iter()
        .find(|(token, _)| self.rest().starts_with(token));
        match (op, left) {
            (Some((token, op)), left) => {
                self.pos += token.len();
                let right = self.operand()?;
                Ok(Expr::Compare(left, op, right))
            }
            (None, Operand::Literal(value)) => Err(format!(
                "a filter needs a comparison or a path, not the value {value}"
            )),
            (None, path) => Ok(Expr::Exists(path)),
        }
    }

    fn operand(&mut self) -> Result<Operand, String> {
        self.skip_spaces();
        match self.peek() {
            Some('@') => {
                self.bump();
                Ok(Operand::Current(self.segments()?))
            }
            Some('$') => {
                self.bump();
                Ok(Operand::Root(self.segments()?))
            }
            Some('\'' | '"') => Ok(Operand::Literal(Value::String(self.quoted()?))),
            Some(c) if c == '-' || c.is_ascii_digit() => {
                let number = self
                    .number()
                    .map_err(|token| format!("invalid number '{token}' in filter"))?;
                Ok(Operand::Literal(Value::Number(number)))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
                    self.bump();
                }
                match &self.text[start..self.pos] {
                    "true" => Ok(Operand::Literal(Value::Bool(true))),
                    "false" => Ok(Operand::Literal(Value::Bool(false))),
                    "null" => Ok(Operand::Literal(Value::Null)),
                    word => Err(format!("unexpected '{word}' in filter")),
                }
            }
            Some(c) => Err(format!("unexpected '{c}' in filter")),
            None => Err(String::from("unterminated filter")),
        }
    }
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
