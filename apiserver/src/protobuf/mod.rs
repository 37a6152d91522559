//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), as upstream's API
//! server speaks it, translated to and from the JSON form the rest of the server works in.
//!
//! An object on the wire is `k8s\0` followed by a `runtime.Unknown` message: the object's
//! apiVersion and kind, and the object's own message in `raw`. Watch streams frame each event
//! with a 4-byte big-endian length and carry a bare `meta.v1.WatchEvent` (no prefix, no
//! envelope), whose `object.raw` holds the enveloped object.
//!
//! The mapping between messages and JSON is data (`schema.json`, generated from upstream's
//! generated.proto files and the Go types behind them by `hack/update-protobuf-schema.py`),
//! so every built-in kind is covered without per-type code. Custom resources have no
//! protobuf form, as upstream.

mod convert;
mod schema;
mod wire;

use serde_json::Value as Json;

pub use convert::{format_duration, parse_duration};
use schema::Schema;
pub use wire::WireError;

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// What every protobuf-encoded object starts with.
pub const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NoPrefix,
    #[error("Object 'Kind' is missing in protobuf data")]
    MissingKind,
    #[error("Object 'apiVersion' is missing in protobuf data")]
    MissingVersion,
    #[error("no protobuf encoding is known for {api_version}, Kind={kind}")]
    Unsupported { api_version: String, kind: String },
    #[error("unsupported content encoding {0:?}")]
    ContentEncoding(String),
    #[error("{0}")]
    Malformed(String),
}

impl From<WireError> for ProtoError {
    fn from(e: WireError) -> Self {
        ProtoError::Malformed(e.0)
    }
}

/// Whether objects of this kind have a protobuf form.
pub fn supports(api_version: &str, kind: &str) -> bool {
    Schema::get().for_kind(api_version, kind).is_some()
}

/// The parts of a `runtime.Unknown` envelope.
#[derive(Debug, Default)]
pub struct Envelope<'a> {
    pub api_version: String,
    pub kind: String,
    pub raw: &'a [u8],
    pub content_encoding: String,
    pub content_type: String,
}

/// Reads the `k8s\0` prefix and the `runtime.Unknown` after it.
pub fn parse_envelope(data: &[u8]) -> Result<Envelope<'_>, ProtoError> {
    let body = data.strip_prefix(MAGIC).ok_or(ProtoError::NoPrefix)?;
    let mut env = Envelope::default();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut r = wire::Reader::new(body);
    while let Some((n, v)) = r.next_field()? {
        match (n, v) {
            (1, wire::Value::Len(type_meta)) => {
                let mut t = wire::Reader::new(type_meta);
                while let Some((n, v)) = t.next_field()? {
                    match (n, v) {
                        (1, wire::Value::Len(b)) => env.api_version = text(b),
                        (2, wire::Value::Len(b)) => env.kind = text(b),
                        _ => {}
                    }
                }
            }
            (2, wire::Value::Len(b)) => env.raw = b,
            (3, wire::Value::Len(b)) => env.content_encoding = text(b),
            (4, wire::Value::Len(b)) => env.content_type = text(b),
            _ => {}
        }
    }
    Ok(env)
}

/// Writes `k8s\0` and a `runtime.Unknown` whose raw message `raw` writes.
fn write_envelope(
    api_version: &str,
    kind: &str,
    raw: impl FnOnce(&mut Vec<u8>) -> Result<(), WireError>,
) -> Result<Vec<u8>, ProtoError> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
    wire::put_nested::<WireError>(&mut out, 1, |o| {
        wire::put_bytes(o, 1, api_version.as_bytes());
        wire::put_bytes(o, 2, kind.as_bytes());
        Ok(())
    })?;
    wire::put_nested(&mut out, 2, raw)?;
    // Upstream writes the (empty) content encoding and type too.
    wire::put_bytes(&mut out, 3, b"");
    wire::put_bytes(&mut out, 4, b"");
    Ok(out)
}

/// The JSON form of an enveloped object, with its `apiVersion` and `kind`. Missing type
/// information is taken from the defaults, as upstream's decoder takes it from the target type.
pub fn decode_enveloped(
    data: &[u8],
    default_api_version: &str,
    default_kind: &str,
) -> Result<Json, ProtoError> {
    decode_at_depth(data, default_api_version, default_kind, 0)
}

fn decode_at_depth(
    data: &[u8],
    default_api_version: &str,
    default_kind: &str,
    depth: usize,
) -> Result<Json, ProtoError> {
    let env = parse_envelope(data)?;
    if !env.content_encoding.is_empty() {
        return Err(ProtoError::ContentEncoding(env.content_encoding));
    }
    let kind = if env.kind.is_empty() {
        default_kind.to_string()
    } else {
        env.kind
    };
    let api_version = if env.api_version.is_empty() {
        default_api_version.to_string()
    } else {
        env.api_version
    };
    if kind.is_empty() {
        return Err(ProtoError::MissingKind);
    }
    if api_version.is_empty() {
        return Err(ProtoError::MissingVersion);
    }
    let schema = Schema::get();
    let index = schema
        .for_kind(&api_version, &kind)
        .ok_or_else(|| ProtoError::Unsupported {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let mut value = convert::to_json(schema, index, env.raw, depth)?;
    if let Json::Object(map) = &mut value {
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.into());
    }
    Ok(value)
}

/// The protobuf form of an object given as JSON with its `apiVersion` and `kind`.
pub fn encode(value: &Json) -> Result<Vec<u8>, ProtoError> {
    let field = |k: &str| value.get(k).and_then(Json::as_str).unwrap_or_default();
    encode_as(value, field("apiVersion"), field("kind"))
}

/// The protobuf form of an object given as JSON, as the kind at `api_version`.
pub fn encode_as(value: &Json, api_version: &str, kind: &str) -> Result<Vec<u8>, ProtoError> {
    let schema = Schema::get();
    let index = schema
        .for_kind(api_version, kind)
        .ok_or_else(|| ProtoError::Unsupported {
            api_version: api_version.into(),
            kind: kind.into(),
        })?;
    write_envelope(api_version, kind, |o| {
        convert::from_json(schema, index, value, o)
    })
}

/// One event of a protobuf watch stream: the length-prefixed `meta.v1.WatchEvent` whose object
/// is the enveloped `object`.
pub fn watch_frame(event_type: &str, object: &Json) -> Result<Vec<u8>, ProtoError> {
    let inner = encode(object)?;
    let mut out = vec![0u8; 4];
    wire::put_bytes(&mut out, 1, event_type.as_bytes());
    wire::put_nested::<WireError>(&mut out, 2, |o| {
        wire::put_bytes(o, 1, &inner);
        Ok(())
    })?;
    let len = u32::try_from(out.len() - 4)
        .map_err(|_| ProtoError::Malformed("watch event too large".into()))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out)
}

/// A watch event: its type and its object as JSON.
pub type Event = (String, Json);

/// Splits a protobuf watch stream into its events. For tests and clients; a trailing partial
/// frame is returned untouched.
pub fn decode_watch_frames(mut data: &[u8]) -> Result<(Vec<Event>, &[u8]), ProtoError> {
    let mut events = Vec::new();
    while data.len() >= 4 {
        let len = u32::from_be_bytes(data[..4].try_into().expect("4 bytes")) as usize;
        if data.len() < 4 + len {
            break;
        }
        let frame = &data[4..4 + len];
        data = &data[4 + len..];
        let (mut ty, mut object) = (String::new(), Json::Null);
        let mut r = wire::Reader::new(frame);
        while let Some((n, v)) = r.next_field()? {
            match (n, v) {
                (1, wire::Value::Len(b)) => ty = String::from_utf8_lossy(b).into_owned(),
                (2, wire::Value::Len(ext)) => {
                    let mut e = wire::Reader::new(ext);
                    while let Some((n, v)) = e.next_field()? {
                        if let (1, wire::Value::Len(raw)) = (n, v) {
                            object = decode_enveloped(raw, "", "")?;
                        }
                    }
                }
                _ => {}
            }
        }
        events.push((ty, object));
    }
    Ok((events, data))
}

#[cfg(test)]
mod tests;
