//! Request bodies in and responses out: media types, the Status body of every error, and the
//! checks upstream's decoder makes (kind and apiVersion against the URL).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use minik8s_api::ApiError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Most bytes a request body may have.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

pub const JSON: &str = "application/json";

/// Media types accepted for object bodies.
const BODY_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];

/// An `ApiError` as an HTTP response with a Status body.
pub struct Failure(pub ApiError);

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        status_response(&self.0)
    }
}

pub fn status_response(e: &ApiError) -> Response {
    let mut status = serde_json::to_value(e.to_status()).unwrap_or_default();
    if let Some(map) = status.as_object_mut() {
        map.insert("kind".into(), "Status".into());
        map.insert("apiVersion".into(), "v1".into());
        map.entry("metadata")
            .or_insert_with(|| serde_json::json!({}));
    }
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_bytes(code, serde_json::to_vec(&status).unwrap_or_default())
}

pub fn json_bytes(code: StatusCode, body: Vec<u8>) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = code;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    resp
}

pub fn json<T: Serialize>(code: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => json_bytes(code, body),
        Err(e) => status_response(&ApiError::internal(format!("encoding response: {e}"))),
    }
}

/// The media type of a request body, without parameters; JSON when absent.
pub fn media_type(content_type: Option<&str>) -> String {
    content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| JSON.to_string())
}

fn summary(body: &[u8]) -> String {
    if body.is_empty() {
        return "<empty>".into();
    }
    let head = &body[..body.len().min(30)];
    let more = if body.len() > 30 { " ..." } else { "" };
    if body.first() == Some(&b'{') {
        format!("{}{more}", String::from_utf8_lossy(head))
    } else {
        let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}{more}")
    }
}

/// Parses a JSON, YAML or protobuf body into a JSON value; `kind` names the expected type in
/// errors.
pub fn parse_body(
    content_type: Option<&str>,
    body: &Bytes,
    kind: &str,
) -> Result<serde_json::Value, ApiError> {
    Ok(parse_body_as(content_type, body, kind, "", false)?.value)
}

/// A parsed request body.
#[derive(Debug)]
pub struct ParsedBody {
    pub value: serde_json::Value,
    /// Fields a JSON body names twice, as upstream's strict decoder names them
    /// (`metadata.name`); only looked for when asked.
    pub duplicates: Vec<String>,
    /// Decoded from protobuf: it has no unknown or duplicate fields to report.
    pub protobuf: bool,
}

fn json_error(kind: &str, body: &[u8], e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: {e} ({})",
        summary(body)
    ))
}

/// [`parse_body`] for a body of `kind` at `api_version` (which a protobuf envelope without type
/// information defaults to), finding duplicate JSON fields when `find_duplicates`.
pub fn parse_body_as(
    content_type: Option<&str>,
    body: &Bytes,
    kind: &str,
    api_version: &str,
    find_duplicates: bool,
) -> Result<ParsedBody, ApiError> {
    let media = media_type(content_type);
    let mut duplicates = Vec::new();
    let value: serde_json::Value = match media.as_str() {
        "application/json" | "*/*" if find_duplicates => {
            let (value, dups) = parse_json_with_duplicates(body).map_err(|e| json_error(kind, body, e))?;
            duplicates = dups;
            value
        }
        "application/json" | "*/*" => {
            serde_json::from_slice(body).map_err(|e| json_error(kind, body, e))?
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; yaml parse error: {e}"
            ))
        })?,
        crate::protobuf::MEDIA_TYPE => {
            let value = crate::protobuf::decode_enveloped(body, api_version, kind).map_err(|e| {
                ApiError::bad_request(format!(
                    "the object provided is unrecognized (must be of type {kind}): {e} ({})",
                    summary(body)
                ))
            })?;
            return Ok(ParsedBody {
                value,
                duplicates,
                protobuf: true,
            });
        }
        _ => return Err(ApiError::unsupported_media_type(&media, BODY_TYPES)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: expected an object ({})",
            summary(body)
        )));
    }
    Ok(ParsedBody {
        value,
        duplicates,
        protobuf: false,
    })
}

/// Parses JSON as `serde_json::from_slice` does, and also names every field an object has
/// more than once (the last one wins, as in Go), each once, in the order they are met.
pub fn parse_json_with_duplicates(
    body: &[u8],
) -> Result<(serde_json::Value, Vec<String>), serde_json::Error> {
    use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};
    use std::cell::RefCell;

    /// The path being read (`spec.containers[0]`), grown and cut back as the parser moves,
    /// and the duplicates found.
    #[derive(Default)]
    struct State {
        path: String,
        found: Vec<String>,
    }

    #[derive(Clone, Copy)]
    struct Tracked<'a>(&'a RefCell<State>);

    impl<'de> DeserializeSeed<'de> for Tracked<'_> {
        type Value = Value;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Tracked<'_> {
        type Value = Value;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
            Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_string()))
        }
        fn visit_string<E>(self, v: String) -> Result<Value, E> {
            Ok(Value::String(v))
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_none<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut out = Vec::new();
            loop {
                let len = self.0.borrow().path.len();
                {
                    use std::fmt::Write;
                    let mut state = self.0.borrow_mut();
                    let _ = write!(state.path, "[{}]", out.len());
                }
                let next = seq.next_element_seed(self);
                self.0.borrow_mut().path.truncate(len);
                match next? {
                    Some(v) => out.push(v),
                    None => return Ok(Value::Array(out)),
                }
            }
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut out = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                let len = {
                    let mut state = self.0.borrow_mut();
                    let len = state.path.len();
                    if len > 0 {
                        state.path.push('.');
                    }
                    state.path.push_str(&key);
                    len
                };
                let value = map.next_value_seed(self);
                let mut state = self.0.borrow_mut();
                let value = match value {
                    Ok(v) => v,
                    Err(e) => {
                        state.path.truncate(len);
                        return Err(e);
                    }
                };
                if out.insert(key, value).is_some() && !state.found.contains(&state.path) {
                    let path = state.path.clone();
                    state.found.push(path);
                }
                state.path.truncate(len);
            }
            Ok(Value::Object(out))
        }
    }

    let state = RefCell::new(State::default());
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = Tracked(&state).deserialize(&mut de)?;
    de.end()?;
    Ok((value, state.into_inner().found))
}

/// Checks the body's kind and apiVersion against what the URL serves, filling them in when
/// missing (as upstream does for built-in types), then decodes it.
pub fn decode_object<T: DeserializeOwned>(
    mut value: serde_json::Value,
    kind: &str,
    api_version: &str,
    require_type: bool,
) -> Result<T, ApiError> {
    let map = value.as_object_mut().expect("checked to be an object");
    let body_kind = map
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let body_version = map
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    if require_type && body_kind.is_empty() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): Object 'Kind' is missing in '{}'",
            serde_json::to_string(&value).unwrap_or_default()
        )));
    }
    if !body_kind.is_empty() && body_kind != kind {
        let v = if body_version.is_empty() {
            api_version
        } else {
            &body_version
        };
        return Err(ApiError::bad_request(format!(
            "{body_kind} in version \"{v}\" cannot be handled as a {kind}: converting ({v}.{body_kind}) to ({kind}): unknown conversion"
        )));
    }
    if !body_version.is_empty() && body_version != api_version {
        let same_group = body_version.split_once('/').map(|(g, _)| g)
            == api_version.split_once('/').map(|(g, _)| g);
        return Err(ApiError::bad_request(if same_group {
            format!(
                "the API version in the data ({body_version}) does not match the expected API version ({api_version})"
            )
        } else {
            format!(
                "{kind} in version \"{body_version}\" cannot be handled as a {kind}: no kind \"{kind}\" is registered for version \"{body_version}\""
            )
        }));
    }
    map.insert("kind".into(), kind.into());
    map.insert("apiVersion".into(), api_version.into());
    serde_json::from_value(value).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version \"{api_version}\" cannot be handled as a {kind}: {e}"
        ))
    })
}

/// How a write treats fields its kind does not have: upstream's `fieldValidation` query
/// parameter. kubectl sends `Strict` once the OpenAPI document lists the parameter, and then
/// leaves the unknown-field check to the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Unknown fields are dropped silently.
    Ignore,
    /// Unknown fields are dropped, each with a `Warning` header.
    #[default]
    Warn,
    /// A request with unknown fields fails with 400.
    Strict,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("" | "Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }

    /// What to do about `unknown` fields of a `kind` body: the warnings to send, or the error.
    pub fn check(
        self,
        unknown: Vec<String>,
        kind: &str,
        api_version: &str,
    ) -> Result<Vec<String>, ApiError> {
        self.check_fields(unknown, Vec::new(), kind, api_version)
    }

    /// What to do about `unknown` and `duplicate` fields of a `kind` body: the warnings to
    /// send (one per field), or the error naming them all.
    pub fn check_fields(
        self,
        unknown: Vec<String>,
        duplicate: Vec<String>,
        kind: &str,
        api_version: &str,
    ) -> Result<Vec<String>, ApiError> {
        if (unknown.is_empty() && duplicate.is_empty()) || self == FieldValidation::Ignore {
            return Ok(Vec::new());
        }
        let fields: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .chain(duplicate.iter().map(|f| format!("duplicate field {f:?}")))
            .collect();
        match self {
            FieldValidation::Strict => Err(ApiError::bad_request(format!(
                "{kind} in version {api_version:?} cannot be handled as a {kind}: strict decoding error: {}",
                fields.join(", ")
            ))),
            _ => Ok(fields),
        }
    }
}

/// The fields of `input` that decoding dropped: present there (and not null) but absent from
/// `decoded`, the decoded object encoded again. Those are the fields the kind does not have,
/// named as upstream's strict decoder names them (`spec.containers[0].imagee`).
pub fn unknown_fields(input: &serde_json::Value, decoded: &serde_json::Value) -> Vec<String> {
    fn walk(
        input: &serde_json::Value,
        decoded: &serde_json::Value,
        path: &str,
        out: &mut Vec<String>,
    ) {
        use serde_json::Value;
        match (input, decoded) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in a {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    match b.get(k) {
                        Some(d) => walk(v, d, &p, out),
                        None if v.is_null() => {}
                        None => out.push(p),
                    }
                }
            }
            (Value::Array(a), Value::Array(b)) => {
                for (i, (v, d)) in a.iter().zip(b).enumerate() {
                    walk(v, d, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(input, decoded, "", &mut out);
    out.sort();
    out
}

/// [`decode_object`], then the unknown-field check `validation` asks for: the object and the
/// warnings to send with the response.
pub fn decode_validated<T: DeserializeOwned + Serialize>(
    value: serde_json::Value,
    kind: &str,
    api_version: &str,
    require_type: bool,
    validation: FieldValidation,
) -> Result<(T, Vec<String>), ApiError> {
    if validation == FieldValidation::Ignore {
        return Ok((
            decode_object(value, kind, api_version, require_type)?,
            Vec::new(),
        ));
    }
    let input = value.clone();
    let obj: T = decode_object(value, kind, api_version, require_type)?;
    let decoded = serde_json::to_value(&obj).map_err(ApiError::internal)?;
    let warnings = validation.check(unknown_fields(&input, &decoded), kind, api_version)?;
    Ok((obj, warnings))
}

/// A request body decoded as `kind` at `api_version`, with the checks `validation` asks for
/// (unknown and duplicate fields; protobuf bodies have neither, as upstream): the object and
/// the warnings to send with the response.
pub fn decode_body<T: DeserializeOwned + Serialize>(
    content_type: Option<&str>,
    body: &Bytes,
    kind: &str,
    api_version: &str,
    require_type: bool,
    validation: FieldValidation,
) -> Result<(T, Vec<String>), ApiError> {
    let parsed = parse_body_as(
        content_type,
        body,
        kind,
        api_version,
        validation != FieldValidation::Ignore,
    )?;
    if parsed.protobuf || validation == FieldValidation::Ignore {
        return Ok((
            decode_object(parsed.value, kind, api_version, require_type)?,
            Vec::new(),
        ));
    }
    let input = parsed.value.clone();
    let obj: T = decode_object(parsed.value, kind, api_version, require_type)?;
    let decoded = serde_json::to_value(&obj).map_err(ApiError::internal)?;
    let warnings = validation.check_fields(
        unknown_fields(&input, &decoded),
        parsed.duplicates,
        kind,
        api_version,
    )?;
    Ok((obj, warnings))
}

/// Adds one `Warning` header per message, as upstream sends them (`299 - "<text>"`).
pub fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{quoted}\"")) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn kind_and_version_checks() {
        let v =
            serde_json::json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "a"}});
        let e = decode_object::<ConfigMap>(v, "ConfigMap", "v1", false).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message
                .starts_with("Secret in version \"v1\" cannot be handled as a ConfigMap"),
            "{}",
            e.message
        );
        let v = serde_json::json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let cm = decode_object::<ConfigMap>(v, "ConfigMap", "v1", false).unwrap();
        assert_eq!(cm.data.unwrap()["k"], "v");
        let v = serde_json::json!({"metadata": {"name": "a"}, "data": 5});
        assert_eq!(
            decode_object::<ConfigMap>(v, "ConfigMap", "v1", false)
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn malformed_bodies() {
        let e = parse_body(None, &Bytes::from_static(b"{nope"), "Pod").unwrap_err();
        assert!(e.message.contains("json parse error"), "{}", e.message);
        let e = parse_body(Some("text/plain"), &Bytes::from_static(b"x"), "Pod").unwrap_err();
        assert_eq!(e.code, 415);
        let v = parse_body(
            Some("application/yaml"),
            &Bytes::from_static(b"kind: Pod\nmetadata:\n  name: a\n"),
            "Pod",
        )
        .unwrap();
        assert_eq!(v["metadata"]["name"], "a");
    }

    #[test]
    fn duplicate_fields_are_found() {
        let body = br#"{"a":1,"b":{"c":[{"d":1,"d":2},{"e":[],"e":{}}],"c":[]},"a":2,"a":3}"#;
        let (value, dups) = parse_json_with_duplicates(body).unwrap();
        assert_eq!(
            value,
            serde_json::from_slice::<serde_json::Value>(body).unwrap()
        );
        assert_eq!(dups, ["b.c[0].d", "b.c[1].e", "b.c", "a"]);
        let (_, dups) =
            parse_json_with_duplicates(br#"{"x": [1, 2.5, -3, null, true, "s"]}"#).unwrap();
        assert!(dups.is_empty());
        assert!(parse_json_with_duplicates(b"{\"a\":1} x").is_err());
        assert!(parse_json_with_duplicates(b"{\"a\":").is_err());
    }

    #[test]
    fn unknown_fields_are_found() {
        use k8s_openapi::api::core::v1::Pod;
        let v = serde_json::json!({
            "metadata": {"name": "a", "labels": {"x": "y"}, "creationTimestamp": null, "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d", "imagee": "i"}]},
            "extra": {},
        });
        let (pod, warnings) =
            decode_validated::<Pod>(v.clone(), "Pod", "v1", false, FieldValidation::Warn).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("a"));
        assert_eq!(
            warnings,
            vec![
                "unknown field \"extra\"",
                "unknown field \"metadata.bogus\"",
                "unknown field \"spec.containers[1].imagee\"",
            ]
        );
        let e = decode_validated::<Pod>(v.clone(), "Pod", "v1", false, FieldValidation::Strict)
            .unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"extra\", unknown field \"metadata.bogus\", unknown field \"spec.containers[1].imagee\""
        );
        let (_, warnings) =
            decode_validated::<Pod>(v, "Pod", "v1", false, FieldValidation::Ignore).unwrap();
        assert!(warnings.is_empty());
        let ok = serde_json::json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "resources": {}, "ports": [{"containerPort": 80}]}]}});
        let (_, warnings) =
            decode_validated::<Pod>(ok, "Pod", "v1", false, FieldValidation::Strict).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(FieldValidation::parse(None).unwrap(), FieldValidation::Warn);
        assert_eq!(FieldValidation::parse(Some("bogus")).unwrap_err().code, 400);
        let resp = with_warnings(
            json_bytes(StatusCode::OK, vec![]),
            &["unknown field \"a\"".into()],
        );
        assert_eq!(
            resp.headers()[header::WARNING],
            "299 - \"unknown field \\\"a\\\"\""
        );
    }
}
