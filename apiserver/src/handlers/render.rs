//! Response negotiation for reads: the object itself (JSON, YAML or protobuf), a
//! `meta.k8s.io/v1` Table as `kubectl get` asks for, or PartialObjectMetadata as metadata-only
//! clients ask for. Protobuf is answered only to clients that take nothing else this server
//! produces: JSON is its native form, and every client that offers both reads it.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use std::sync::Arc;

use minik8s_api::table::{ColumnDefinition, Row};
use minik8s_api::{ApiError, Strategy};
use serde::Serialize;
use serde_json::{Value, json};

use super::codec::{json_bytes, status_response};
use crate::protobuf;
use crate::registry::generic::WatchEvent;
use crate::registry::watch_cache::Encoded;

/// What a row's `object` holds in a Table (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    Json,
    Yaml,
    Table(Include),
    Metadata,
    Protobuf,
}

const ACCEPTABLE: &[&str] = &[
    "application/json",
    "application/yaml",
    protobuf::MEDIA_TYPE,
    "application/json;as=Table;v=v1;g=meta.k8s.io",
    "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
];

/// Picks the first media range in `Accept` this server can produce, protobuf only when no
/// other range can be served.
pub fn negotiate(headers: &HeaderMap, include_object: Option<&str>) -> Result<Render, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("*/*");
    let mut protobuf_ok = false;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut as_ = None;
        let mut group = None;
        let mut version = None;
        for p in parts {
            match p.split_once('=') {
                Some(("as", v)) => as_ = Some(v.to_string()),
                Some(("g", v)) => group = Some(v.to_string()),
                Some(("v", v)) => version = Some(v.to_string()),
                _ => {}
            }
        }
        let meta_group = group.as_deref() == Some("meta.k8s.io")
            && matches!(version.as_deref(), Some("v1" | "v1beta1"));
        match (media.as_str(), as_.as_deref()) {
            ("application/json", Some("Table")) if meta_group => {
                let include = match include_object {
                    Some("None") => Include::None,
                    Some("Object") => Include::Object,
                    _ => Include::Metadata,
                };
                return Ok(Render::Table(include));
            }
            ("application/json", Some("PartialObjectMetadata" | "PartialObjectMetadataList"))
                if meta_group =>
            {
                return Ok(Render::Metadata);
            }
            ("application/json" | "application/*" | "*/*" | "", None) => return Ok(Render::Json),
            ("application/yaml", None) => return Ok(Render::Yaml),
            (protobuf::MEDIA_TYPE, None) => protobuf_ok = true,
            _ => {}
        }
    }
    if protobuf_ok {
        return Ok(Render::Protobuf);
    }
    Err(ApiError::not_acceptable(ACCEPTABLE))
}

/// Whether a client takes only protobuf of what this server produces (writes and errors are
/// answered in JSON otherwise, whatever else `Accept` says).
pub fn wants_protobuf(headers: &HeaderMap) -> bool {
    matches!(negotiate(headers, None), Ok(Render::Protobuf))
}

/// `value` (with its apiVersion and kind, or these) as a protobuf response.
pub fn protobuf_response(
    code: StatusCode,
    value: &Value,
    api_version: &str,
    kind: &str,
) -> Result<Response, ApiError> {
    let field = |k: &str, default: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(default)
            .to_string()
    };
    let body = protobuf::encode_as(
        value,
        &field("apiVersion", api_version),
        &field("kind", kind),
    )
    .map_err(|e| match e {
        protobuf::ProtoError::Unsupported { .. } => ApiError::not_acceptable(&ACCEPTABLE[..2]),
        e => ApiError::internal(format!("encoding protobuf: {e}")),
    })?;
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(protobuf::MEDIA_TYPE),
    );
    Ok(resp)
}

/// The response to a write (or any single object outside `get`): protobuf for clients that
/// take only protobuf, JSON for everyone else.
pub fn write_response<T: Serialize>(headers: &HeaderMap, code: StatusCode, obj: &T) -> Response {
    if !wants_protobuf(headers) {
        return super::codec::json(code, obj);
    }
    serde_json::to_value(obj)
        .map_err(ApiError::internal)
        .and_then(|v| protobuf_response(code, &v, "", ""))
        .unwrap_or_else(|e| status_response(&e))
}

/// A Status error, in protobuf for clients that take only protobuf.
pub fn error_response(headers: &HeaderMap, e: &ApiError) -> Response {
    if wants_protobuf(headers) {
        protobuf_status(e)
    } else {
        status_response(e)
    }
}

/// A Status error in protobuf.
pub fn protobuf_status(e: &ApiError) -> Response {
    let mut status = serde_json::to_value(e.to_status()).unwrap_or_default();
    status["kind"] = "Status".into();
    status["apiVersion"] = "v1".into();
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    protobuf_response(code, &status, "v1", "Status").unwrap_or_else(|_| status_response(e))
}

/// How one resource prints as a Table: its strategy, whatever its object type.
pub trait Printer: Send + Sync {
    fn columns(&self) -> Vec<ColumnDefinition>;
    fn row(&self, object: &Value, now: jiff::Timestamp) -> Result<Row, serde_json::Error>;
}

impl<S: Strategy> Printer for S {
    fn columns(&self) -> Vec<ColumnDefinition> {
        self.table_columns()
    }
    fn row(&self, object: &Value, now: jiff::Timestamp) -> Result<Row, serde_json::Error> {
        self.table_row(object, now)
    }
}

/// Renders reads of one resource kind.
pub struct Renderer {
    pub render: Render,
    pub kind: String,
    pub api_version: String,
    pub list_kind: String,
    /// Prints the kind's Table: upstream's printer of a built-in kind, a custom resource's
    /// `additionalPrinterColumns`.
    pub printer: Arc<dyn Printer>,
}

fn partial(mut value: Value) -> Value {
    let metadata = value
        .get_mut("metadata")
        .map(Value::take)
        .unwrap_or_else(|| json!({}));
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
}

fn with_type(mut resp: Response, content_type: &'static str) -> Response {
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

const TABLE_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const PARTIAL_TYPE: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
const PARTIAL_LIST_TYPE: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";

impl Renderer {
    fn row(&self, value: Value, now: jiff::Timestamp, include: Include) -> Result<Value, ApiError> {
        let row = self
            .printer
            .row(&value, now)
            .map_err(|e| ApiError::internal(format!("printing a table row: {e}")))?;
        let mut out = json!({"cells": row.cells});
        if !row.conditions.is_empty() {
            out["conditions"] = serde_json::to_value(&row.conditions).unwrap_or_default();
        }
        match include {
            Include::None => {}
            Include::Metadata => out["object"] = partial(value),
            Include::Object => out["object"] = value,
        }
        Ok(out)
    }

    fn table(
        &self,
        items: Vec<Value>,
        meta: ListMeta,
        include: Include,
        headers: bool,
    ) -> Result<Value, ApiError> {
        let now = jiff::Timestamp::now();
        let rows = items
            .into_iter()
            .map(|v| self.row(v, now, include))
            .collect::<Result<Vec<_>, _>>()?;
        let columns = if headers {
            serde_json::to_value(self.printer.columns()).unwrap_or_default()
        } else {
            json!([])
        };
        Ok(json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": serde_json::to_value(meta).unwrap_or_default(),
            "columnDefinitions": columns,
            "rows": rows,
        }))
    }

    pub fn object<T: Serialize>(&self, code: StatusCode, obj: &T) -> Response {
        let result = (|| -> Result<Response, ApiError> {
            Ok(match self.render {
                Render::Json => {
                    json_bytes(code, serde_json::to_vec(obj).map_err(ApiError::internal)?)
                }
                Render::Yaml => yaml(code, obj)?,
                Render::Protobuf => protobuf_response(
                    code,
                    &serde_json::to_value(obj).map_err(ApiError::internal)?,
                    &self.api_version,
                    &self.kind,
                )?,
                Render::Table(include) => {
                    let value = serde_json::to_value(obj).map_err(ApiError::internal)?;
                    let rv = value["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                    let meta = ListMeta {
                        resource_version: rv,
                        ..Default::default()
                    };
                    with_type(
                        json_bytes(
                            code,
                            serde_json::to_vec(&self.table(vec![value], meta, include, true)?)
                                .map_err(ApiError::internal)?,
                        ),
                        TABLE_TYPE,
                    )
                }
                Render::Metadata => {
                    let value = partial(serde_json::to_value(obj).map_err(ApiError::internal)?);
                    with_type(
                        json_bytes(
                            code,
                            serde_json::to_vec(&value).map_err(ApiError::internal)?,
                        ),
                        PARTIAL_TYPE,
                    )
                }
            })
        })();
        result.unwrap_or_else(|e| status_response(&e))
    }

    pub fn list<T: Encoded>(&self, items: &[T], meta: ListMeta) -> Response {
        let result = (|| -> Result<Response, ApiError> {
            Ok(match self.render {
                // Each item's JSON as the watch cache (or the read) encoded it once.
                Render::Json => {
                    // Sized exactly: a list of 30,000 pods is ~100 MiB, and growing the
                    // buffer by doubling copies it several times over and can hold twice that.
                    let jsons: Vec<Bytes> = items.iter().map(Encoded::json).collect();
                    let size = jsons.iter().map(|j| j.len() + 1).sum::<usize>() + 512;
                    let mut body = Vec::with_capacity(size);
                    body.extend_from_slice(b"{\"kind\":");
                    serde_json::to_writer(&mut body, &self.list_kind)
                        .map_err(ApiError::internal)?;
                    body.extend_from_slice(b",\"apiVersion\":");
                    serde_json::to_writer(&mut body, &self.api_version)
                        .map_err(ApiError::internal)?;
                    body.extend_from_slice(b",\"metadata\":");
                    serde_json::to_writer(&mut body, &meta).map_err(ApiError::internal)?;
                    body.extend_from_slice(b",\"items\":[");
                    for (i, json) in jsons.iter().enumerate() {
                        if i > 0 {
                            body.push(b',');
                        }
                        body.extend_from_slice(json);
                    }
                    body.extend_from_slice(b"]}");
                    json_bytes(StatusCode::OK, body)
                }
                Render::Yaml | Render::Protobuf => {
                    #[derive(Serialize)]
                    #[serde(rename_all = "camelCase")]
                    struct List<'a, T> {
                        kind: &'a str,
                        api_version: &'a str,
                        metadata: ListMeta,
                        items: &'a [T],
                    }
                    let list = List {
                        kind: &self.list_kind,
                        api_version: &self.api_version,
                        metadata: meta,
                        items,
                    };
                    if self.render == Render::Yaml {
                        yaml(StatusCode::OK, &list)?
                    } else if self.render == Render::Protobuf {
                        protobuf_response(
                            StatusCode::OK,
                            &serde_json::to_value(&list).map_err(ApiError::internal)?,
                            &self.api_version,
                            &self.list_kind,
                        )?
                    } else {
                        json_bytes(
                            StatusCode::OK,
                            serde_json::to_vec(&list).map_err(ApiError::internal)?,
                        )
                    }
                }
                Render::Table(include) => {
                    let values = items
                        .iter()
                        .map(Encoded::value)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(ApiError::internal)?;
                    with_type(
                        json_bytes(
                            StatusCode::OK,
                            serde_json::to_vec(&self.table(values, meta, include, true)?)
                                .map_err(ApiError::internal)?,
                        ),
                        TABLE_TYPE,
                    )
                }
                Render::Metadata => {
                    let values = items
                        .iter()
                        .map(|i| i.metadata_value().map(partial))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(ApiError::internal)?;
                    let list = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": values});
                    with_type(
                        json_bytes(
                            StatusCode::OK,
                            serde_json::to_vec(&list).map_err(ApiError::internal)?,
                        ),
                        PARTIAL_LIST_TYPE,
                    )
                }
            })
        })();
        result.unwrap_or_else(|e| status_response(&e))
    }

    /// The content type of a watch stream.
    pub fn watch_content_type(&self) -> &'static str {
        match self.render {
            Render::Table(_) => TABLE_TYPE,
            Render::Metadata => PARTIAL_TYPE,
            Render::Protobuf => protobuf::WATCH_MEDIA_TYPE,
            Render::Yaml | Render::Json => "application/json",
        }
    }

    /// One event of a watch stream: a line of JSON, or a length-prefixed protobuf frame.
    /// Tables carry column definitions in the first event only.
    pub fn watch_line<T: Encoded>(&self, event: WatchEvent<T>, first: &mut bool) -> Vec<u8> {
        // The common case without a round trip through a JSON value: the object's JSON as
        // encoded once for every watcher.
        if self.render == Render::Json {
            let object = match &event {
                WatchEvent::Added(o) => Some(("ADDED", o)),
                WatchEvent::Modified(o) => Some(("MODIFIED", o)),
                WatchEvent::Deleted(o) => Some(("DELETED", o)),
                _ => None,
            };
            if let Some((ty, o)) = object {
                let json = o.json();
                let mut line = Vec::with_capacity(json.len() + 32);
                line.extend_from_slice(b"{\"type\":\"");
                line.extend_from_slice(ty.as_bytes());
                line.extend_from_slice(b"\",\"object\":");
                line.extend_from_slice(&json);
                line.extend_from_slice(b"}\n");
                return line;
            }
        }
        let encoded = |o: &T| {
            match self.render {
                Render::Metadata => o.metadata_value(),
                _ => o.value(),
            }
            .map_err(ApiError::internal)
        };
        let object = |value: Value| -> Result<Value, ApiError> {
            match self.render {
                Render::Json | Render::Yaml | Render::Protobuf => Ok(value),
                Render::Metadata => Ok(partial(value)),
                Render::Table(include) => {
                    let rv = value["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string);
                    let headers = std::mem::replace(first, false);
                    self.table(
                        vec![value],
                        ListMeta {
                            resource_version: rv,
                            ..Default::default()
                        },
                        include,
                        headers,
                    )
                }
            }
        };
        let (ty, obj) = match event {
            WatchEvent::Added(o) => ("ADDED", encoded(&o).and_then(object)),
            WatchEvent::Modified(o) => ("MODIFIED", encoded(&o).and_then(object)),
            WatchEvent::Deleted(o) => ("DELETED", encoded(&o).and_then(object)),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                let mut metadata = json!({"resourceVersion": resource_version.to_string()});
                if initial_events_end {
                    metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                let obj = match self.render {
                    Render::Table(_) => {
                        json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": [], "rows": []})
                    }
                    Render::Metadata => {
                        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
                    }
                    _ => {
                        json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": metadata})
                    }
                };
                ("BOOKMARK", Ok(obj))
            }
            WatchEvent::Error(e) => ("ERROR", Err(e)),
        };
        let (ty, obj) = match obj {
            Ok(o) => (ty, o),
            Err(e) => {
                let mut s = serde_json::to_value(e.to_status()).unwrap_or_default();
                s["kind"] = "Status".into();
                s["apiVersion"] = "v1".into();
                ("ERROR", s)
            }
        };
        if self.render == Render::Protobuf {
            return protobuf::watch_frame(ty, &obj).unwrap_or_else(|e| {
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "code": 500, "reason": "InternalError",
                    "message": format!("encoding a watch event: {e}")});
                protobuf::watch_frame("ERROR", &status).unwrap_or_default()
            });
        }
        let mut line = serde_json::to_vec(&json!({"type": ty, "object": obj})).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

fn yaml<T: Serialize>(code: StatusCode, value: &T) -> Result<Response, ApiError> {
    let text = serde_yaml::to_string(value).map_err(ApiError::internal)?;
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn negotiation() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            negotiate(&accept(kubectl), None).unwrap(),
            Render::Table(Include::Metadata)
        );
        assert_eq!(
            negotiate(&accept(kubectl), Some("Object")).unwrap(),
            Render::Table(Include::Object)
        );
        assert_eq!(negotiate(&HeaderMap::new(), None).unwrap(), Render::Json);
        assert_eq!(
            negotiate(&accept("application/vnd.kubernetes.protobuf, */*"), None).unwrap(),
            Render::Json
        );
        assert_eq!(
            negotiate(&accept("application/yaml"), None).unwrap(),
            Render::Yaml
        );
        let meta =
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(negotiate(&accept(meta), None).unwrap(), Render::Metadata);
        assert_eq!(
            negotiate(&accept("application/vnd.kubernetes.protobuf"), None).unwrap(),
            Render::Protobuf
        );
        assert_eq!(
            negotiate(
                &accept("application/vnd.kubernetes.protobuf, application/json"),
                None
            )
            .unwrap(),
            Render::Json
        );
        assert_eq!(
            negotiate(
                &accept("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"),
                None
            )
            .unwrap_err()
            .code,
            406
        );
        assert_eq!(negotiate(&accept("text/html"), None).unwrap_err().code, 406);
    }
}
