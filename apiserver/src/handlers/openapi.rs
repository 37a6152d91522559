//! OpenAPI v3: the index at `/openapi/v3` and one document per served group version at
//! `/openapi/v3/api/v1` and `/openapi/v3/apis/<group>/<version>`. kubectl reads them for
//! `apply`/`create` (does the server take `fieldValidation`? how are lists merged?) and for
//! `explain`. `/openapi/v2` describes nothing: kubectl 1.27/1.28 only need it to parse.
//!
//! Documents are built from the resource table on first request, all at once (the index names
//! each by a hash of its content), and kept until the served resources change.

mod document;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use minik8s_api::{ApiError, ResourceInfo};
use schemars::JsonSchema;
use serde_json::{Map, Value, json};

pub use self::document::{
    Gvk, KindSchema, PATCH_MEDIA_TYPES, group_version_document, group_version_path,
    kind_definitions,
};
use super::codec::status_response;
use crate::server::ApiServer;

/// One served document and its content hash (upper-case hex SHA-512, as upstream).
#[derive(Clone, Debug)]
pub struct Doc {
    pub body: Bytes,
    pub hash: String,
}

impl Doc {
    fn new(value: &Value) -> Self {
        let body = serde_json::to_vec(value).expect("a JSON value serializes");
        let digest = ring::digest::digest(&ring::digest::SHA512, &body);
        let hash = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
        Doc {
            body: Bytes::from(body),
            hash,
        }
    }
}

/// The index and every group version's document, as of one set of served resources.
#[derive(Debug)]
pub struct Documents {
    generation: u64,
    pub index: Doc,
    /// By path under `/openapi/v3/`: `api/v1`, `apis/apps/v1`.
    pub group_versions: BTreeMap<String, Doc>,
}

/// Builds every document for `resources`.
pub fn build_documents(
    resources: &[ResourceInfo],
    schemas: &BTreeMap<Gvk, KindSchema>,
) -> (Doc, BTreeMap<String, Doc>) {
    let group_versions: BTreeSet<(&str, &str)> = resources
        .iter()
        .map(|r| (r.group.as_str(), r.version.as_str()))
        .collect();
    let mut docs = BTreeMap::new();
    let mut paths = Map::new();
    for (group, version) in group_versions {
        let path = group_version_path(group, version);
        let doc = Doc::new(&group_version_document(group, version, resources, schemas));
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
        );
        docs.insert(path, doc);
    }
    (Doc::new(&json!({"paths": paths})), docs)
}

/// Where kinds' schemas come from, and the documents built from them.
pub struct OpenApi {
    schemas: RwLock<BTreeMap<Gvk, KindSchema>>,
    /// Bumped whenever what the documents describe changes.
    generation: AtomicU64,
    built: tokio::sync::Mutex<Option<Arc<Documents>>>,
}

impl Default for OpenApi {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenApi {
    pub fn new() -> Self {
        OpenApi {
            schemas: RwLock::new(document::subresource_kinds().into_iter().collect()),
            generation: AtomicU64::new(0),
            built: tokio::sync::Mutex::new(None),
        }
    }

    /// Describes the kind of a k8s-openapi type by its schemars schema.
    pub fn register_type<K: k8s_openapi::Resource + JsonSchema>(&self) {
        self.register_schema(Gvk::of::<K>(), KindSchema::of::<K>());
    }

    /// Describes `gvk` by `schema`; a custom resource's schema comes this way.
    pub fn register_schema(&self, gvk: Gvk, schema: KindSchema) {
        self.schemas
            .write()
            .expect("openapi schemas lock")
            .insert(gvk, schema);
        self.invalidate();
    }

    pub fn remove_schema(&self, gvk: &Gvk) {
        self.schemas
            .write()
            .expect("openapi schemas lock")
            .remove(gvk);
        self.invalidate();
    }

    /// Drops the built documents: the served resources changed.
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The documents for the resources `resources` returns, built if missing or stale.
    pub async fn documents(&self, resources: impl FnOnce() -> Vec<ResourceInfo>) -> Arc<Documents> {
        let generation = self.generation.load(Ordering::Acquire);
        let mut built = self.built.lock().await;
        if let Some(docs) = built.as_ref().filter(|d| d.generation == generation) {
            return docs.clone();
        }
        let resources = resources();
        let schemas = self.schemas.read().expect("openapi schemas lock").clone();
        let started = std::time::Instant::now();
        let (index, group_versions) =
            tokio::task::spawn_blocking(move || build_documents(&resources, &schemas))
                .await
                .expect("building OpenAPI documents does not panic");
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            bytes = group_versions.values().map(|d| d.body.len()).sum::<usize>(),
            "built OpenAPI v3 documents"
        );
        let docs = Arc::new(Documents {
            generation,
            index,
            group_versions,
        });
        *built = Some(docs.clone());
        docs
    }
}

/// Whether the client takes JSON (no Accept header counts as yes).
fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    accept.split(',').any(|part| {
        let media = part.split(';').next().unwrap_or_default().trim();
        matches!(media, "" | "application/json" | "application/*" | "*/*")
    })
}

fn etag(hash: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{hash}\"")).expect("a hex hash is a valid header")
}

fn not_modified(headers: &HeaderMap, hash: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/").trim_matches('"') == hash
        })
}

/// `doc` as a response, honouring If-None-Match.
fn serve(headers: &HeaderMap, doc: &Doc, immutable: bool) -> Response {
    if !accepts_json(headers) {
        return status_response(&ApiError::not_acceptable(&["application/json"]));
    }
    let mut resp = if not_modified(headers, &doc.hash) {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Body::from(doc.body.clone()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag(&doc.hash));
    if immutable {
        // The URL names the content by its hash: it never changes.
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, immutable, max-age=31536000"),
        );
    }
    resp
}

/// `GET /openapi/v3`: the group versions and where their documents are.
pub async fn index(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    let docs = server.openapi.documents(|| server.resources()).await;
    serve(req.headers(), &docs.index, false)
}

/// `GET /openapi/v3/<group-version path>`: one group version's document. A `hash` that is
/// not the current one redirects to the current URL, as upstream does.
pub async fn group_version(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    let path = req
        .uri()
        .path()
        .trim_start_matches("/openapi/v3/")
        .trim_end_matches('/');
    let docs = server.openapi.documents(|| server.resources()).await;
    let Some(doc) = docs.group_versions.get(path) else {
        return status_response(&ApiError::path_not_found());
    };
    let hash = req
        .uri()
        .query()
        .and_then(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).ok())
        .and_then(|q| q.into_iter().find(|(k, _)| k == "hash").map(|(_, v)| v));
    match hash {
        Some(h) if h != doc.hash => {
            let location = format!("/openapi/v3/{path}?hash={}", doc.hash);
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::MOVED_PERMANENTLY;
            resp.headers_mut().insert(
                header::LOCATION,
                HeaderValue::from_str(&location).expect("a path is a valid header"),
            );
            resp
        }
        Some(_) => serve(req.headers(), doc, true),
        None => serve(req.headers(), doc, false),
    }
}

/// How clients ask for upstream's protobuf OpenAPI v2 document (gnostic's
/// `openapi.v2.Document`): the old form with `@`, or the one upstream answers with, which Go's
/// media type parser accepts.
const V2_PROTOBUF_ASKED: &[&str] = &[
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    V2_PROTOBUF,
];
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// An OpenAPI v2 document that describes nothing: `swagger`, `info` and empty `paths`,
/// protobuf-encoded. kubectl 1.27 and 1.28 parse `/openapi/v2` before every `create`, `apply`
/// and `explain` and fail without it, although they then use v3 for field validation
/// (`fieldValidation` is listed there) and explain; 1.29+ never ask. Definitions are left out
/// on purpose: a client that reads v2 for schemas finds none rather than stale copies.
fn empty_v2_document() -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        // Tag (wire type 2), varint length, bytes.
        let mut out = vec![(number << 3) | 2];
        let mut len = bytes.len();
        while len >= 0x80 {
            out.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        out.push(len as u8);
        out.extend_from_slice(bytes);
        out
    }
    let release = crate::server::version_info().git_version;
    let release = release.split('+').next().unwrap_or_default();
    let info = [field(1, b"Kubernetes"), field(2, release.as_bytes())].concat();
    [field(1, b"2.0"), field(2, &info), field(8, &[])].concat()
}

/// `GET /openapi/v2`: as protobuf, an empty document (see [`empty_v2_document`]); as anything
/// else, 404. The real documents are v3.
pub async fn v2(req: Request) -> Response {
    let wants_protobuf = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| V2_PROTOBUF_ASKED.iter().any(|t| a.contains(t)));
    if !wants_protobuf {
        return status_response(&ApiError::path_not_found());
    }
    let mut resp = Response::new(Body::from(empty_v2_document()));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(V2_PROTOBUF));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_v2_is_protobuf() {
        let doc = empty_v2_document();
        // swagger = "2.0"
        assert_eq!(&doc[..5], b"\x0a\x032.0");
        // info { title = "Kubernetes", version = "v1.32.4" }
        assert_eq!(doc[5], 0x12);
        assert_eq!(
            &doc[7..7 + doc[6] as usize],
            b"\x0a\x0aKubernetes\x12\x07v1.32.4"
        );
        // paths {}
        assert_eq!(&doc[doc.len() - 2..], b"\x42\x00");
    }

    #[test]
    fn accept_and_etags() {
        let mut h = HeaderMap::new();
        assert!(accepts_json(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/com.github.proto-openapi.spec.v3@v1.0+protobuf"),
        );
        assert!(!accepts_json(&h));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, */*"),
        );
        assert!(accepts_json(&h));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"ABC\""));
        assert!(not_modified(&h, "ABC"));
        assert!(!not_modified(&h, "ABD"));
    }
}
