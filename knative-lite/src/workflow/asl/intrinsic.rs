//! Intrinsic functions (`States.Format(...)` and kin): the small computations Step
//! Functions lets a template do without calling a function. A call is parsed once, with
//! the function's arity checked, so a definition with a typo fails when it is submitted
//! rather than midway through a run; argument types can only be checked when it runs.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Map, Value};
use sha2::Digest as _;

use super::parser::Parser;
use super::path::{self, Path};
use super::{Failure, errors};

/// Step Functions' limit on the size of an intrinsic's string input and generated arrays.
const MAX_STRING: usize = 10_000;
const MAX_RANGE: usize = 1_000;

#[derive(Clone, Debug, PartialEq)]
pub struct Intrinsic {
    function: Function,
    args: Vec<Arg>,
}

#[derive(Clone, Debug, PartialEq)]
enum Arg {
    /// A quoted string: its value, and its text as written (States.Format needs to tell
    /// `{}` from `\{\}`).
    Text {
        value: String,
        raw: String,
    },
    Literal(Value),
    Path(Path),
    Call(Box<Intrinsic>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Function {
    Format,
    StringToJson,
    JsonToString,
    Array,
    ArrayPartition,
    ArrayContains,
    ArrayRange,
    ArrayGetItem,
    ArrayLength,
    ArrayUnique,
    Base64Encode,
    Base64Decode,
    Hash,
    JsonMerge,
    MathRandom,
    MathAdd,
    StringSplit,
    Uuid,
}

/// Each function's name and the least and most arguments it takes.
const FUNCTIONS: [(&str, Function, usize, usize); 18] = [
    ("Format", Function::Format, 1, usize::MAX),
    ("StringToJson", Function::StringToJson, 1, 1),
    ("JsonToString", Function::JsonToString, 1, 1),
    ("Array", Function::Array, 0, usize::MAX),
    ("ArrayPartition", Function::ArrayPartition, 2, 2),
    ("ArrayContains", Function::ArrayContains, 2, 2),
    ("ArrayRange", Function::ArrayRange, 3, 3),
    ("ArrayGetItem", Function::ArrayGetItem, 2, 2),
    ("ArrayLength", Function::ArrayLength, 1, 1),
    ("ArrayUnique", Function::ArrayUnique, 1, 1),
    ("Base64Encode", Function::Base64Encode, 1, 1),
    ("Base64Decode", Function::Base64Decode, 1, 1),
    ("Hash", Function::Hash, 2, 2),
    ("JsonMerge", Function::JsonMerge, 3, 3),
    ("MathRandom", Function::MathRandom, 2, 3),
    ("MathAdd", Function::MathAdd, 2, 2),
    ("StringSplit", Function::StringSplit, 2, 2),
    ("UUID", Function::Uuid, 0, 0),
];

impl Intrinsic {
    pub fn parse(text: &str) -> Result<Intrinsic, String> {
        let mut parser = Parser { text, pos: 0 };
        let call = parser
            .call()
            .and_then(|call| {
                parser.skip_spaces();
                match parser.peek() {
                    None => Ok(call),
                    Some(c) => Err(format!("unexpected '{c}' after the call")),
                }
            })
            .map_err(|reason| format!("invalid intrinsic function '{text}': {reason}"))?;
        Ok(call)
    }

    pub fn is_call(text: &str) -> bool {
        let Some(rest) = text.strip_prefix("States.") else {
            return false;
        };
        let name_end = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        name_end > 0 && rest[name_end..].starts_with('(')
    }

    pub fn eval(&self, input: &Value, context: &Value) -> Result<Value, Failure> {
        let mut values = Vec::with_capacity(self.args.len());
        for arg in &self.args {
            values.push(match arg {
                Arg::Text { value, .. } => Value::String(value.clone()),
                Arg::Literal(value) => value.clone(),
                Arg::Path(path) => path.select(input, context)?,
                Arg::Call(call) => call.eval(input, context)?,
            });
        }
        let call = Call {
            name: self.name(),
            values,
        };
        match self.function {
            Function::Format => {
                let template = match &self.args[0] {
                    Arg::Text { raw, .. } => format_pieces(raw, true),
                    _ => format_pieces(call.string(0)?, false),
                }
                .map_err(|cause| call.fail(cause))?;
                format(&call, &template)
            }
            Function::StringToJson => serde_json::from_str(call.string(0)?)
                .map_err(|e| call.fail(format!("the argument is not valid JSON: {e}"))),
            Function::JsonToString => Ok(Value::String(call.values[0].to_string())),
            Function::Array => Ok(Value::Array(call.values)),
            Function::ArrayPartition => {
                let items = call.array(0)?;
                let size = call.integer(1)?;
                if size <= 0 {
                    return Err(call.fail("the chunk size must be a positive integer"));
                }
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                let chunks = items.chunks(size).map(|c| Value::Array(c.to_vec()));
                Ok(Value::Array(chunks.collect()))
            }
            Function::ArrayContains => {
                let items = call.array(0)?;
                Ok(Value::Bool(items.iter().any(|v| same(v, &call.values[1]))))
            }
            Function::ArrayRange => {
                let (first, last, step) = (call.rounded(0)?, call.rounded(1)?, call.rounded(2)?);
                if step == 0 {
                    return Err(call.fail("the step must not be 0"));
                }
                let mut items = Vec::new();
                let mut next = first;
                while (step > 0 && next <= last) || (step < 0 && next >= last) {
                    if items.len() == MAX_RANGE {
                        return Err(call.fail(format!("the range has more than {MAX_RANGE} items")));
                    }
                    items.push(Value::from(next));
                    next = match next.checked_add(step) {
                        Some(n) => n,
                        None => break,
                    };
                }
                Ok(Value::Array(items))
            }
            Function::ArrayGetItem => {
                let items = call.array(0)?;
                let index = call.integer(1)?;
                usize::try_from(index)
                    .ok()
                    .and_then(|i| items.get(i))
                    .cloned()
                    .ok_or_else(|| {
                        call.fail(format!(
                            "index {index} is out of bounds for an array of {} items",
                            items.len()
                        ))
                    })
            }
            Function::ArrayLength => Ok(Value::from(call.array(0)?.len())),
            Function::ArrayUnique => {
                let mut unique: Vec<Value> = Vec::new();
                for item in call.array(0)? {
                    if !unique.iter().any(|seen| same(seen, item)) {
                        unique.push(item.clone());
                    }
                }
                Ok(Value::Array(unique))
            }
            Function::Base64Encode => {
                let data = call.limited_string(0)?;
                Ok(Value::String(BASE64.encode(data)))
            }
            Function::Base64Decode => {
                let data = call.limited_string(0)?;
                let bytes = BASE64
                    .decode(data)
                    .map_err(|e| call.fail(format!("the argument is not valid base64: {e}")))?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| call.fail("the decoded data is not UTF-8 text"))?;
                Ok(Value::String(text))
            }
            Function::Hash => {
                let data = call.limited_string(0)?.as_bytes();
                let digest = match call.string(1)? {
                    "MD5" => md5(data).to_vec(),
                    "SHA-1" => sha1(data).to_vec(),
                    "SHA-256" => sha2::Sha256::digest(data).to_vec(),
                    "SHA-384" => sha2::Sha384::digest(data).to_vec(),
                    "SHA-512" => sha2::Sha512::digest(data).to_vec(),
                    other => {
                        return Err(call.fail(format!(
                            "unknown algorithm '{other}' (use MD5, SHA-1, SHA-256, SHA-384 or SHA-512)"
                        )));
                    }
                };
                Ok(Value::String(
                    digest.iter().map(|b| format!("{b:02x}")).collect(),
                ))
            }
            Function::JsonMerge => {
                let (Value::Object(left), Value::Object(right)) =
                    (&call.values[0], &call.values[1])
                else {
                    return Err(call.fail("the first two arguments must be JSON objects"));
                };
                match &call.values[2] {
                    Value::Bool(false) => {}
                    Value::Bool(true) => {
                        return Err(call
                            .fail("only shallow merging is supported: isDeepMerge must be false"));
                    }
                    _ => return Err(call.fail("the third argument must be a boolean")),
                }
                let mut merged: Map<String, Value> = left.clone();
                merged.extend(right.iter().map(|(k, v)| (k.clone(), v.clone())));
                Ok(Value::Object(merged))
            }
            Function::MathRandom => {
                let (start, end) = (call.rounded(0)?, call.rounded(1)?);
                if start >= end {
                    return Err(call.fail("the start must be less than the end"));
                }
                let value = if call.values.len() == 3 {
                    let seed = call.rounded(2)?;
                    rand::rngs::StdRng::seed_from_u64(seed as u64).random_range(start..end)
                } else {
                    rand::rng().random_range(start..end)
                };
                Ok(Value::from(value))
            }
            Function::MathAdd => {
                let (a, b) = (call.rounded(0)?, call.rounded(1)?);
                a.checked_add(b)
                    .map(Value::from)
                    .ok_or_else(|| call.fail("the sum overflows"))
            }
            Function::StringSplit => {
                let text = call.limited_string(0)?;
                let delimiters = call.string(1)?;
                let parts = text
                    .split(|c| delimiters.contains(c))
                    .filter(|part| !part.is_empty())
                    .map(|part| Value::String(part.to_string()));
                Ok(Value::Array(parts.collect()))
            }
            Function::Uuid => Ok(Value::String(uuid::Uuid::new_v4().to_string())),
        }
    }

    fn name(&self) -> &'static str {
        FUNCTIONS
            .iter()
            .find(|(_, f, _, _)| *f == self.function)
            .map_or("?", |(name, _, _, _)| name)
    }
}

/// JSON equality with numbers compared by value (1 and 1.0 are the same).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            path::compare_numbers(x, y) == Some(std::cmp::Ordering::Equal)
        }
        _ => a == b,
    }
}

/// One evaluation's arguments, with the checks each function makes of them.
struct Call {
    name: &'static str,
    values: Vec<Value>,
}

impl Call {
    fn fail(&self, cause: impl std::fmt::Display) -> Failure {
        Failure::new(
            errors::INTRINSIC_FAILURE,
            format!("States.{}: {cause}", self.name),
        )
    }

    fn wrong(&self, index: usize, wanted: &str) -> Failure {
        self.fail(format!(
            "argument {} must be {wanted}, not {}",
            index + 1,
            self.values[index]
        ))
    }

    fn string(&self, index: usize) -> Result<&str, Failure> {
        self.values[index]
            .as_str()
            .ok_or_else(|| self.wrong(index, "a string"))
    }

    fn limited_string(&self, index: usize) -> Result<&str, Failure> {
        let text = self.string(index)?;
        if text.chars().count() > MAX_STRING {
            return Err(self.fail(format!(
                "argument {} is longer than {MAX_STRING} characters",
                index + 1
            )));
        }
        Ok(text)
    }

    fn array(&self, index: usize) -> Result<&Vec<Value>, Failure> {
        self.values[index]
            .as_array()
            .ok_or_else(|| self.wrong(index, "an array"))
    }

    /// An integer argument: a number with no fractional part.
    fn integer(&self, index: usize) -> Result<i64, Failure> {
        let number = self.values[index].as_f64();
        match (self.values[index].as_i64(), number) {
            (Some(n), _) => Ok(n),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < i64::MAX as f64 => Ok(f as i64),
            _ => Err(self.wrong(index, "an integer")),
        }
    }

    /// A number rounded to the nearest integer, as Step Functions does for the math and
    /// range functions' arguments.
    fn rounded(&self, index: usize) -> Result<i64, Failure> {
        match (self.values[index].as_i64(), self.values[index].as_f64()) {
            (Some(n), _) => Ok(n),
            (None, Some(f)) if f.abs() < i64::MAX as f64 => Ok(f.round() as i64),
            _ => Err(self.wrong(index, "a number")),
        }
    }
}

enum Piece {
    Text(String),
    Placeholder,
}

/// Splits a States.Format template into text and `{}` placeholders. In a quoted literal
/// a backslash escapes the next character (so `\{\}` is text); a template read from the
/// input has no escapes.
fn format_pieces(template: &str, escaped: bool) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if escaped => text.extend(chars.next()),
            '{' if chars.peek() == Some(&'}') => {
                chars.next();
                pieces.push(Piece::Text(std::mem::take(&mut text)));
                pieces.push(Piece::Placeholder);
            }
            '{' | '}' if escaped => {
                return Err(format!("unescaped '{c}' in the template (write '\\{c}')"));
            }
            c => text.push(c),
        }
    }
    pieces.push(Piece::Text(text));
    Ok(pieces)
}

fn format(call: &Call, template: &[Piece]) -> Result<Value, Failure> {
    let holes = template
        .iter()
        .filter(|p| matches!(p, Piece::Placeholder))
        .count();
    let args = &call.values[1..];
    if holes != args.len() {
        return Err(call.fail(format!(
            "the template has {holes} placeholders but {} arguments follow it",
            args.len()
        )));
    }
    let mut out = String::new();
    let mut args = args.iter().enumerate();
    for piece in template {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Placeholder => {
                let Some((i, arg)) = args.next() else { break };
                match arg {
                    Value::String(s) => out.push_str(s),
                    Value::Array(_) | Value::Object(_) => {
                        return Err(call.wrong(i + 1, "a string, number, boolean or null"));
                    }
                    other => out.push_str(&other.to_string()),
                }
            }
        }
    }
    Ok(Value::String(out))
}

// ---- parsing ----

impl Parser<'_> {
    fn call(&mut self) -> Result<Intrinsic, String> {
        self.skip_spaces();
        if !self.rest().starts_with("States.") {
            return Err(String::from("expected 'States.' and a function name"));
        }
        self.pos += "States.".len();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric()) {
            self.bump();
        }
        let name = &self.text[start..self.pos];
        let Some(&(_, function, least, most)) = FUNCTIONS.iter().find(|(n, ..)| *n == name) else {
            return Err(format!("unknown function 'States.{name}'"));
        };
        self.skip_spaces();
        if self.bump() != Some('(') {
            return Err(format!("expected '(' after 'States.{name}'"));
        }
        let mut args = Vec::new();
        self.skip_spaces();
        if self.peek() == Some(')') {
            self.bump();
        } else {
            loop {
                args.push(self.arg()?);
                self.skip_spaces();
                match self.bump() {
                    Some(',') => continue,
                    Some(')') => break,
                    Some(c) => return Err(format!("expected ',' or ')' but found '{c}'")),
                    None => return Err(format!("unterminated call of 'States.{name}'")),
                }
            }
        }
        if args.len() < least || args.len() > most {
            let wanted = match (least, most) {
                (l, m) if l == m => format!("{l}"),
                (l, usize::MAX) => format!("at least {l}"),
                (l, m) => format!("{l} to {m}"),
            };
            return Err(format!(
                "States.{name} takes {wanted} arguments, not {}",
                args.len()
            ));
        }
        if let (Function::Format, Some(Arg::Text { raw, .. })) = (function, args.first()) {
            let holes = format_pieces(raw, true)?
                .iter()
                .filter(|p| matches!(p, Piece::Placeholder))
                .count();
            if holes != args.len() - 1 {
                return Err(format!(
                    "the States.Format template has {holes} placeholders but {} arguments follow it",
                    args.len() - 1
                ));
            }
        }
        Ok(Intrinsic { function, args })
    }

    fn arg(&mut self) -> Result<Arg, String> {
        self.skip_spaces();
        match self.peek() {
            Some('\'') => self.text_literal(),
            Some('$') => {
                let (path, used) = path::parse_prefix(self.rest())?;
                self.pos += used;
                Ok(Arg::Path(path))
            }
            Some('S') if Intrinsic::is_call(self.rest()) => Ok(Arg::Call(Box::new(self.call()?))),
            Some(c) if c == '-' || c.is_ascii_digit() => {
                let number = self
                    .number()
                    .map_err(|token| format!("invalid number '{token}'"))?;
                Ok(Arg::Literal(Value::Number(number)))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '.')
                {
                    self.bump();
                }
                match &self.text[start..self.pos] {
                    "true" => Ok(Arg::Literal(Value::Bool(true))),
                    "false" => Ok(Arg::Literal(Value::Bool(false))),
                    "null" => Ok(Arg::Literal(Value::Null)),
                    word => Err(format!("unexpected '{word}' as an argument")),
                }
            }
            Some(c) => Err(format!("unexpected '{c}' as an argument")),
            None => Err(String::from("expected an argument but the text ended")),
        }
    }

    /// A single-quoted string; `\'`, `\{`, `\}` and `\\` are its escapes.
    fn text_literal(&mut self) -> Result<Arg, String> {
        let start = self.pos;
        self.bump();
        let mut value = String::new();
        loop {
            match self.bump() {
                None => return Err(String::from("unterminated string")),
                Some('\'') => break,
                Some('\\') => match self.bump() {
                    Some(c @ ('\'' | '{' | '}' | '\\')) => value.push(c),
                    Some(c) => return Err(format!("invalid escape '\\{c}' in a string")),
                    None => return Err(String::from("unterminated string")),
                },
                Some(c) => value.push(c),
            }
        }
        let raw = self.text[start + 1..self.pos - 1].to_string();
        Ok(Arg::Text { value, raw })
    }
}

// ---- digests Step Functions offers that sha2 does not ----

fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    for block in padded(data, true).chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, word) in out.chunks_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

fn md5(data: &[u8]) -> [u8; 16] {
    const S: [u32; 16] = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21];
    let k: Vec<u32> = (0..64)
        .map(|i: i32| ((f64::from(i + 1)).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut h: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    for block in padded(data, false).chunks(64) {
        let m: Vec<u32> = block
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let [mut a, mut b, mut c, mut d] = h;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let rotated = a
                .wrapping_add(f)
                .wrapping_add(k[i])
                .wrapping_add(m[g])
                .rotate_left(S[(i / 16) * 4 + i % 4]);
            (a, d, c) = (d, c, b);
            b = b.wrapping_add(rotated);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 16];
    for (chunk, word) in out.chunks_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// Merkle–Damgård padding to 64-byte blocks, the bit length big- or little-endian.
fn padded(data: &[u8], big_endian: bool) -> Vec<u8> {
    let bits = (data.len() as u64).wrapping_mul(8);
    let mut out = data.to_vec();
    out.push(0x80);
    while out.len() % 64 != 56 {
        out.push(0);
    }
    out.extend(if big_endian {
        bits.to_be_bytes()
    } else {
        bits.to_le_bytes()
    });
    out
}

#[cfg(test)]
#[path = "intrinsic_tests.rs"]
mod tests;
