//! Protobuf messages ⇄ their JSON form, driven by the schema: field numbers to JSON names,
//! inline (embedded) structs, Go's omitempty for zero scalars, and the types whose JSON form is
//! not an object (times, int-or-string, quantities, raw JSON, …).

use base64::Engine;
use serde_json::{Map, Number, Value as Json};

use super::schema::{Field, MapValue, Message, Scalar, Schema, Special, Type};
use super::wire::{self, Reader, Value, WireError};

type Result<T> = std::result::Result<T, WireError>;

fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(WireError(msg.into()))
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

// ---------------------------------------------------------------------------------------------
// wire → JSON

/// How deeply messages may nest (recursive types such as JSONSchemaProps could otherwise
/// exhaust the stack); serde_json stops at 128 levels of JSON the same way.
const MAX_DEPTH: usize = 100;

/// The JSON form of message `index` encoded in `bytes`, `depth` messages deep.
pub fn to_json(schema: &Schema, index: usize, bytes: &[u8], depth: usize) -> Result<Json> {
    if depth > MAX_DEPTH {
        return err(format!("messages nest more than {MAX_DEPTH} deep"));
    }
    let message = schema.message(index);
    if let Some(special) = message.special {
        return special_to_json(schema, message, special, bytes, depth);
    }
    let mut out = Map::new();
    fields_to_json(schema, message, bytes, &mut out, true, depth)?;
    Ok(Json::Object(out))
}

/// Decodes the fields of `message` into `out`. With `omit_zero`, zero scalars that Go's JSON
/// form would omit (value fields with omitempty) are left out.
fn fields_to_json(
    schema: &Schema,
    message: &Message,
    bytes: &[u8],
    out: &mut Map<String, Json>,
    omit_zero: bool,
    depth: usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return err(format!("messages nest more than {MAX_DEPTH} deep"));
    }
    let mut reader = Reader::new(bytes);
    while let Some((number, value)) = reader.next_field()? {
        // Fields this schema does not know are skipped, as upstream's decoder does.
        let Some(field) = message.field(number) else {
            continue;
        };
        let ctx = |e: WireError| WireError(format!("{}: {}", field.json, e.0));
        match field.ty {
            Type::Scalar(scalar) if field.repeated => {
                let list = array_entry(out, &field.json);
                match (value, scalar) {
                    (Value::Len(packed), s) if !matches!(s, Scalar::String | Scalar::Bytes) => {
                        let mut r = Reader::new(packed);
                        while !r.is_empty() {
                            let v = match s {
                                Scalar::Double => Value::Fixed64(r.fixed64().map_err(ctx)?),
                                Scalar::Float => Value::Fixed32(r.fixed32().map_err(ctx)?),
                                _ => Value::Varint(r.varint().map_err(ctx)?),
                            };
                            list.push(scalar_to_json(s, v).map_err(ctx)?);
                        }
                    }
                    _ => list.push(scalar_to_json(scalar, value).map_err(ctx)?),
                }
            }
            Type::Scalar(scalar) => {
                let v = scalar_to_json(scalar, value).map_err(ctx)?;
                if omit_zero && !field.keep_zero && is_zero(&v) {
                    out.remove(&field.json);
                } else {
                    out.insert(field.json.clone(), v);
                }
            }
            Type::Message(index) => {
                let Value::Len(body) = value else {
                    return Err(ctx(WireError("expected a message".into())));
                };
                if field.inline {
                    fields_to_json(
                        schema,
                        schema.message(index),
                        body,
                        out,
                        omit_zero,
                        depth + 1,
                    )
                    .map_err(ctx)?;
                    continue;
                }
                let v = to_json(schema, index, body, depth + 1).map_err(ctx)?;
                if field.repeated {
                    array_entry(out, &field.json).push(v);
                } else if !v.is_null() {
                    out.insert(field.json.clone(), v);
                }
            }
            Type::Map(map_value) => {
                let Value::Len(entry) = value else {
                    return Err(ctx(WireError("expected a map entry".into())));
                };
                let (key, v) = map_entry_to_json(schema, map_value, entry, depth).map_err(ctx)?;
                let slot = out
                    .entry(field.json.clone())
                    .or_insert_with(|| Json::Object(Map::new()));
                if let Json::Object(m) = slot {
                    m.insert(key, v);
                }
            }
        }
    }
    Ok(())
}

fn array_entry<'m>(out: &'m mut Map<String, Json>, key: &str) -> &'m mut Vec<Json> {
    let slot = out
        .entry(key.to_string())
        .or_insert_with(|| Json::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Json::Array(Vec::new());
    }
    match slot {
        Json::Array(a) => a,
        _ => unreachable!("just made an array"),
    }
}

fn is_zero(v: &Json) -> bool {
    match v {
        Json::String(s) => s.is_empty(),
        Json::Bool(b) => !b,
        Json::Number(n) => n.as_f64() == Some(0.0),
        Json::Null => true,
        _ => false,
    }
}

fn scalar_to_json(scalar: Scalar, value: Value<'_>) -> Result<Json> {
    Ok(match (scalar, value) {
        (Scalar::String, Value::Len(b)) => Json::String(
            std::str::from_utf8(b)
                .map_err(|_| WireError("string is not UTF-8".into()))?
                .to_string(),
        ),
        (Scalar::Bytes, Value::Len(b)) => Json::String(B64.encode(b)),
        (Scalar::Bool, Value::Varint(v)) => Json::Bool(v != 0),
        (Scalar::Int32, Value::Varint(v)) => Json::from(v as i32),
        (Scalar::Int64, Value::Varint(v)) => Json::from(v as i64),
        (Scalar::Uint32, Value::Varint(v)) => Json::from(v as u32),
        (Scalar::Uint64, Value::Varint(v)) => Json::from(v),
        (Scalar::Double, Value::Fixed64(v)) => float_json(f64::from_bits(v)),
        (Scalar::Float, Value::Fixed32(v)) => float_json(f64::from(f32::from_bits(v))),
        (s, v) => return err(format!("wire value {v:?} does not fit a {s:?}")),
    })
}

/// Go writes integral floats without a fraction (`5`, not `5.0`).
fn float_json(f: f64) -> Json {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Json::from(f as i64)
    } else {
        Number::from_f64(f).map(Json::Number).unwrap_or(Json::Null)
    }
}

fn map_entry_to_json(
    schema: &Schema,
    value: MapValue,
    entry: &[u8],
    depth: usize,
) -> Result<(String, Json)> {
    let mut key = String::new();
    let mut out = None;
    let mut reader = Reader::new(entry);
    while let Some((number, v)) = reader.next_field()? {
        match (number, v) {
            (1, Value::Len(b)) => {
                key = std::str::from_utf8(b)
                    .map_err(|_| WireError("map key is not UTF-8".into()))?
                    .to_string();
            }
            (2, v) => {
                out = Some(match (value, v) {
                    (MapValue::Scalar(s), v) => scalar_to_json(s, v)?,
                    (MapValue::Message(index), Value::Len(b)) => {
                        to_json(schema, index, b, depth + 1)?
                    }
                    _ => return err("map value is not a message"),
                });
            }
            _ => {}
        }
    }
    let v = match (out, value) {
        (Some(v), _) => v,
        (None, MapValue::Scalar(Scalar::Bytes | Scalar::String)) => Json::String(String::new()),
        (None, MapValue::Scalar(Scalar::Bool)) => Json::Bool(false),
        (None, MapValue::Scalar(_)) => Json::from(0),
        (None, MapValue::Message(index)) => to_json(schema, index, &[], depth + 1)?,
    };
    Ok((key, v))
}

fn special_to_json(
    schema: &Schema,
    message: &Message,
    special: Special,
    bytes: &[u8],
    depth: usize,
) -> Result<Json> {
    match special {
        Special::Time | Special::MicroTime => {
            if bytes.is_empty() {
                return Ok(Json::Null);
            }
            let (mut seconds, mut nanos) = (0i64, 0i32);
            let mut r = Reader::new(bytes);
            while let Some((n, v)) = r.next_field()? {
                match (n, v) {
                    (1, Value::Varint(v)) => seconds = v as i64,
                    (2, Value::Varint(v)) => nanos = v as i32,
                    _ => {}
                }
            }
            Ok(Json::String(format_time(
                seconds,
                nanos,
                special == Special::MicroTime,
            )?))
        }
        Special::Duration => {
            let mut nanos = 0i64;
            let mut r = Reader::new(bytes);
            while let Some((n, v)) = r.next_field()? {
                if let (1, Value::Varint(v)) = (n, v) {
                    nanos = v as i64;
                }
            }
            Ok(Json::String(format_duration(nanos)))
        }
        Special::IntOrString => {
            let (mut ty, mut int, mut string) = (0u64, 0i32, String::new());
            let mut r = Reader::new(bytes);
            while let Some((n, v)) = r.next_field()? {
                match (n, v) {
                    (1, Value::Varint(v)) => ty = v,
                    (2, Value::Varint(v)) => int = v as i32,
                    (3, Value::Len(b)) => string = String::from_utf8_lossy(b).into_owned(),
                    _ => {}
                }
            }
            Ok(if ty == 1 {
                Json::String(string)
            } else {
                Json::from(int)
            })
        }
        Special::Quantity => {
            let mut s = String::new();
            let mut r = Reader::new(bytes);
            while let Some((n, v)) = r.next_field()? {
                if let (1, Value::Len(b)) = (n, v) {
                    s = String::from_utf8_lossy(b).into_owned();
                }
            }
            if s.is_empty() {
                s = "0".into();
            }
            Ok(Json::String(s))
        }
        Special::RawJson => {
            let mut raw: &[u8] = &[];
            let mut r = Reader::new(bytes);
            while let Some((n, v)) = r.next_field()? {
                if let (1, Value::Len(b)) = (n, v) {
                    raw = b;
                }
            }
            raw_to_json(raw, depth)
        }
        Special::Items => {
            let mut items = Vec::new();
            let mut r = Reader::new(bytes);
            while let Some((n, v)) = r.next_field()? {
                if let (1, Value::Len(b)) = (n, v) {
                    items.push(Json::String(String::from_utf8_lossy(b).into_owned()));
                }
            }
            Ok(Json::Array(items))
        }
        Special::SchemaOrArray | Special::SchemaOrBool | Special::SchemaOrStringArray => {
            let mut fields = Map::new();
            fields_to_json(schema, message, bytes, &mut fields, false, depth)?;
            let by = |n: u32| message.field(n).and_then(|f| fields.get(&f.json)).cloned();
            let non_empty = |v: &Option<Json>| {
                v.as_ref()
                    .is_some_and(|a| a.as_array().is_some_and(|a| !a.is_empty()))
            };
            Ok(match special {
                Special::SchemaOrBool => match by(2) {
                    Some(schema) => schema,
                    None => by(1).unwrap_or(Json::Bool(false)),
                },
                _ => {
                    let list = by(2);
                    if non_empty(&list) {
                        list.unwrap_or(Json::Null)
                    } else {
                        by(1).unwrap_or(Json::Null)
                    }
                }
            })
        }
    }
}

/// An embedded object's bytes: JSON, or a protobuf-enveloped object.
fn raw_to_json(raw: &[u8], depth: usize) -> Result<Json> {
    if raw.is_empty() {
        return Ok(Json::Null);
    }
    if raw.starts_with(super::MAGIC) {
        return super::decode_at_depth(raw, "", "", depth + 1)
            .map_err(|e| WireError(e.to_string()));
    }
    serde_json::from_slice(raw).map_err(|e| WireError(format!("embedded JSON: {e}")))
}

fn format_time(seconds: i64, nanos: i32, micro: bool) -> Result<String> {
    let ts = jiff::Timestamp::new(seconds, if micro { nanos } else { 0 })
        .map_err(|e| WireError(format!("time: {e}")))?;
    Ok(if micro {
        ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
    } else {
        ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    })
}

fn parse_time(s: &str, micro: bool) -> Result<(i64, i32)> {
    let ts: jiff::Timestamp = s
        .parse()
        .map_err(|e| WireError(format!("time {s:?}: {e}")))?;
    let nanos = if micro {
        ts.subsec_nanosecond() / 1000 * 1000
    } else {
        ts.subsec_nanosecond()
    };
    Ok((ts.as_second(), nanos))
}

/// Go's `time.Duration.String()`.
pub fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let neg = nanos < 0;
    let n = nanos.unsigned_abs();
    let sign = if neg { "-" } else { "" };
    let frac = |value: u64, unit: u64| -> String {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            return whole.to_string();
        }
        let digits = unit.ilog10() as usize;
        let f = format!("{rest:0digits$}");
        format!("{whole}.{}", f.trim_end_matches('0'))
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", frac(n, 1_000));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", frac(n, 1_000_000));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = (n / 60_000_000_000) % 60;
    let secs = frac(n % 60_000_000_000, 1_000_000_000);
    let mut out = sign.to_string();
    if hours > 0 {
        out += &format!("{hours}h");
    }
    if hours > 0 || minutes > 0 {
        out += &format!("{minutes}m");
    }
    out + &format!("{secs}s")
}

/// Go's `time.ParseDuration`.
pub fn parse_duration(s: &str) -> Result<i64> {
    let bad = || WireError(format!("invalid duration {s:?}"));
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..end].parse().map_err(|_| bad())?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += number * unit;
        rest = &rest[unit_end..];
    }
    let total = total.round() as i64;
    Ok(if neg { -total } else { total })
}

// ---------------------------------------------------------------------------------------------
// JSON → wire

/// Writes the fields of message `index` from its JSON form `value`.
pub fn from_json(schema: &Schema, index: usize, value: &Json, out: &mut Vec<u8>) -> Result<()> {
    let message = schema.message(index);
    if let Some(special) = message.special {
        return special_from_json(schema, message, special, value, out);
    }
    let Json::Object(map) = value else {
        return err(format!("expected an object for {}", short(&message.name)));
    };
    fields_from_json(schema, message, map, out)
}

fn short(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

fn fields_from_json(
    schema: &Schema,
    message: &Message,
    map: &Map<String, Json>,
    out: &mut Vec<u8>,
) -> Result<()> {
    for field in &message.fields {
        if field.inline {
            if let Type::Message(index) = field.ty {
                let inner = schema.message(index);
                // An embedded struct is always written, as gogo-protobuf writes value fields.
                wire::put_nested(out, field.number, |o| {
                    fields_from_json(schema, inner, map, o)
                })?;
            }
            continue;
        }
        let Some(value) = map.get(&field.json) else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        field_from_json(schema, field, value, out)
            .map_err(|e| WireError(format!("{}: {}", field.json, e.0)))?;
    }
    Ok(())
}

fn field_from_json(schema: &Schema, field: &Field, value: &Json, out: &mut Vec<u8>) -> Result<()> {
    let n = field.number;
    match field.ty {
        Type::Scalar(s) if field.repeated => {
            for v in as_array(value)? {
                put_scalar(out, n, s, v)?;
            }
        }
        Type::Scalar(s) => put_scalar(out, n, s, value)?,
        Type::Message(index) if field.repeated => {
            for v in as_array(value)? {
                wire::put_nested(out, n, |o| from_json(schema, index, v, o))?;
            }
        }
        Type::Message(index) => wire::put_nested(out, n, |o| from_json(schema, index, value, o))?,
        Type::Map(map_value) => {
            let Json::Object(entries) = value else {
                return err("expected an object");
            };
            for (k, v) in entries {
                if v.is_null() {
                    continue;
                }
                wire::put_nested(out, n, |o| {
                    wire::put_bytes(o, 1, k.as_bytes());
                    match map_value {
                        MapValue::Scalar(s) => put_scalar(o, 2, s, v),
                        MapValue::Message(index) => {
                            wire::put_nested(o, 2, |o| from_json(schema, index, v, o))
                        }
                    }
                })?;
            }
        }
    }
    Ok(())
}

fn as_array(value: &Json) -> Result<&Vec<Json>> {
    value
        .as_array()
        .ok_or_else(|| WireError("expected an array".into()))
}

fn put_scalar(out: &mut Vec<u8>, n: u32, scalar: Scalar, value: &Json) -> Result<()> {
    let int = |v: &Json| -> Result<i64> {
        v.as_i64()
            .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| WireError(format!("expected an integer, got {v}")))
    };
    match scalar {
        Scalar::String => match value {
            Json::String(s) => wire::put_bytes(out, n, s.as_bytes()),
            other => return err(format!("expected a string, got {other}")),
        },
        Scalar::Bytes => match value {
            Json::String(s) => {
                let b = B64
                    .decode(s)
                    .map_err(|e| WireError(format!("bytes are not base64: {e}")))?;
                wire::put_bytes(out, n, &b);
            }
            other => return err(format!("expected a base64 string, got {other}")),
        },
        Scalar::Bool => match value {
            Json::Bool(b) => {
                wire::put_key(out, n, wire::VARINT);
                wire::put_varint(out, u64::from(*b));
            }
            other => return err(format!("expected a bool, got {other}")),
        },
        Scalar::Int32 | Scalar::Int64 => {
            let v = int(value)?;
            let v = if scalar == Scalar::Int32 {
                i64::from(i32::try_from(v).map_err(|_| WireError(format!("{v} overflows int32")))?)
            } else {
                v
            };
            wire::put_key(out, n, wire::VARINT);
            wire::put_varint(out, v as u64);
        }
        Scalar::Uint32 | Scalar::Uint64 => {
            let v = value
                .as_u64()
                .ok_or_else(|| WireError(format!("expected an unsigned integer, got {value}")))?;
            wire::put_key(out, n, wire::VARINT);
            wire::put_varint(out, v);
        }
        Scalar::Double | Scalar::Float => {
            let f = value
                .as_f64()
                .ok_or_else(|| WireError(format!("expected a number, got {value}")))?;
            if scalar == Scalar::Double {
                wire::put_key(out, n, wire::FIXED64);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            } else {
                wire::put_key(out, n, wire::FIXED32);
                out.extend_from_slice(&(f as f32).to_bits().to_le_bytes());
            }
        }
    }
    Ok(())
}

fn special_from_json(
    schema: &Schema,
    message: &Message,
    special: Special,
    value: &Json,
    out: &mut Vec<u8>,
) -> Result<()> {
    let sub = |n: u32| match message.field(n).map(|f| f.ty) {
        Some(Type::Message(index)) => Ok(index),
        _ => err(format!("{} has no message field {n}", message.name)),
    };
    match special {
        Special::Time | Special::MicroTime => {
            let Json::String(s) = value else {
                return err(format!("expected a time string, got {value}"));
            };
            let (seconds, nanos) = parse_time(s, special == Special::MicroTime)?;
            wire::put_key(out, 1, wire::VARINT);
            wire::put_varint(out, seconds as u64);
            wire::put_key(out, 2, wire::VARINT);
            wire::put_varint(out, i64::from(nanos) as u64);
        }
        Special::Duration => {
            let Json::String(s) = value else {
                return err(format!("expected a duration string, got {value}"));
            };
            wire::put_key(out, 1, wire::VARINT);
            wire::put_varint(out, parse_duration(s)? as u64);
        }
        Special::IntOrString => {
            let (ty, int, string) = match value {
                Json::Number(_) => {
                    let i = value
                        .as_i64()
                        .and_then(|i| i32::try_from(i).ok())
                        .ok_or_else(|| WireError(format!("{value} is not an int32")))?;
                    (0u64, i, "")
                }
                Json::String(s) => (1, 0, s.as_str()),
                other => return err(format!("expected an int or a string, got {other}")),
            };
            wire::put_key(out, 1, wire::VARINT);
            wire::put_varint(out, ty);
            wire::put_key(out, 2, wire::VARINT);
            wire::put_varint(out, i64::from(int) as u64);
            wire::put_bytes(out, 3, string.as_bytes());
        }
        Special::Quantity => {
            let s = match value {
                Json::String(s) => s.clone(),
                Json::Number(n) => n.to_string(),
                other => return err(format!("expected a quantity, got {other}")),
            };
            wire::put_bytes(out, 1, s.as_bytes());
        }
        Special::RawJson => {
            let raw = serde_json::to_vec(value).map_err(|e| WireError(e.to_string()))?;
            wire::put_bytes(out, 1, &raw);
        }
        Special::Items => {
            for v in as_array(value)? {
                put_scalar(out, 1, Scalar::String, v)?;
            }
        }
        Special::SchemaOrArray => match value {
            Json::Array(items) => {
                let index = sub(2)?;
                for v in items {
                    wire::put_nested(out, 2, |o| from_json(schema, index, v, o))?;
                }
            }
            v => {
                let index = sub(1)?;
                wire::put_nested(out, 1, |o| from_json(schema, index, v, o))?;
            }
        },
        Special::SchemaOrBool => match value {
            Json::Bool(b) => {
                wire::put_key(out, 1, wire::VARINT);
                wire::put_varint(out, u64::from(*b));
            }
            v => {
                wire::put_key(out, 1, wire::VARINT);
                wire::put_varint(out, 1);
                let index = sub(2)?;
                wire::put_nested(out, 2, |o| from_json(schema, index, v, o))?;
            }
        },
        Special::SchemaOrStringArray => match value {
            Json::Array(items) => {
                for v in items {
                    put_scalar(out, 2, Scalar::String, v)?;
                }
            }
            v => {
                let index = sub(1)?;
                wire::put_nested(out, 1, |o| from_json(schema, index, v, o))?;
            }
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_go_writes_them() {
        for (nanos, text) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_500_000, "1.5ms"),
            (1_000_000_000, "1s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (-2_000_000_000, "-2s"),
        ] {
            assert_eq!(format_duration(nanos), text);
            assert_eq!(parse_duration(text).unwrap(), nanos, "{text}");
        }
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn times() {
        assert_eq!(
            format_time(1_700_000_000, 123_456_789, false).unwrap(),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            format_time(1_700_000_000, 123_456_789, true).unwrap(),
            "2023-11-14T22:13:20.123456Z"
        );
        assert_eq!(
            parse_time("2023-11-14T22:13:20.123456Z", true).unwrap(),
            (1_700_000_000, 123_456_000)
        );
    }
}
