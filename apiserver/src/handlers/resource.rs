//! The REST verbs of one resource over HTTP: query parameters and bodies in, objects, lists,
//! watch streams and Status bodies out. The semantics live in the generic registry.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, StatusCode, header};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ListMeta, ObjectMeta};
use minik8s_api::patch::schema::Schema;
use minik8s_api::patch::{gozero, strategic};
use minik8s_api::selector::{FieldSelector, Selector};
use minik8s_api::strategy::Strategy;
use minik8s_api::validation::{ErrorKind, FieldError, Path};
use minik8s_api::{ApiError, ResourceInfo, status};
use rand::Rng;

use super::codec::{self, FieldValidation, with_warnings};
use super::fieldmanager::{self, KindTypes};
use super::openapi::KindSchema;
use super::render::{self, Renderer};
use super::request::{ResourceRequest, Verb};
use crate::auth::UserInfo;
use crate::registry::generic::{
    DeleteOpts, Deleted, GenericRegistry, ListOutput, ListQuery, Part, WatchEvent, WatchQuery,
};
use crate::registry::watch_cache::Cached;

/// Everything a resource handler needs from one HTTP request.
pub struct ApiRequest {
    pub target: ResourceRequest,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub user: UserInfo,
    /// The user's extra attributes.
    pub extra: crate::auth::Extra,
}

impl ApiRequest {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.param(key), Some("true" | "1" | "True"))
    }

    pub fn content_type(&self) -> Option<&str> {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }

    pub fn namespace(&self) -> Option<&str> {
        self.target.namespace.as_deref()
    }

    pub fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or_default()
    }

    /// What to do about unknown fields in the body (`fieldValidation`, default `Warn`).
    pub fn field_validation(&self) -> Result<FieldValidation, ApiError> {
        FieldValidation::parse(self.param("fieldValidation"))
    }

    /// `dryRun=All` or nothing; anything else is a 422 about the verb's options.
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        let values: Vec<&str> = self
            .query
            .iter()
            .filter(|(k, _)| k == "dryRun")
            .map(|(_, v)| v.as_str())
            .collect();
        dry_run(&values, &self.target.verb)
    }

    /// The object sent to a named subresource (`kind` of `api_version`): its name must be
    /// the URL's, and its resourceVersion, when it has one, is the write's precondition.
    pub fn named_body<T>(
        &self,
        kind: &str,
        api_version: &str,
    ) -> Result<(T, Option<crate::storage::Revision>), ApiError>
    where
        T: serde::de::DeserializeOwned + k8s_openapi::Metadata<Ty = ObjectMeta>,
    {
        let value = codec::parse_body(self.content_type(), &self.body, kind)?;
        let body: T = codec::decode_object(value, kind, api_version, false)?;
        let name = self.name();
        if body.metadata().name.as_deref() != Some(name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                body.metadata().name.clone().unwrap_or_default()
            )));
        }
        let precondition = precondition(body.metadata())?;
        Ok((body, precondition))
    }
}

/// The resourceVersion an object sent whole names, as the precondition of its write.
pub fn precondition(meta: &ObjectMeta) -> Result<Option<crate::storage::Revision>, ApiError> {
    match meta.resource_version.as_deref().filter(|rv| !rv.is_empty()) {
        Some(rv) => rv
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}"))),
        None => Ok(None),
    }
}

/// Upstream's `ValidateDryRun`: only `All`, as a 422 about the verb's options otherwise.
fn dry_run(values: &[&str], verb: &Verb) -> Result<bool, ApiError> {
    if values.iter().all(|v| *v == "All") {
        return Ok(!values.is_empty());
    }
    let options = match verb {
        Verb::Update => "UpdateOptions",
        Verb::Patch => "PatchOptions",
        Verb::Delete | Verb::DeleteCollection => "DeleteOptions",
        _ => "CreateOptions",
    };
    // Go's %#v of a []string.
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    let err = FieldError::new(
        ErrorKind::NotSupported,
        &Path::new("dryRun"),
        Some(format!("[]string{{{}}}", quoted.join(", "))),
        "supported values: \"All\"",
    );
    Err(ApiError::invalid(options, "meta.k8s.io", "", &[err]))
}

/// A served resource, as the router sees it.
#[async_trait]
pub trait Endpoint: Send + Sync + 'static {
    fn info(&self) -> &ResourceInfo;
    async fn serve(&self, req: ApiRequest) -> Response;
}

/// Kind-specific subresources (pods/binding, namespaces/finalize) beside the generic verbs.
#[async_trait]
pub trait Extension<S: Strategy>: Send + Sync + 'static {
    /// `None` when the request is not one this extension serves.
    async fn handle(
        &self,
        registry: &GenericRegistry<S>,
        req: &ApiRequest,
    ) -> Option<Result<Response, ApiError>>;
}

/// Server-wide settings handlers need.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The server's namespace cache, for NamespaceLifecycle admission.
    pub namespaces: Option<Arc<crate::registry::namespaces::NamespaceCache>>,
    pub bookmark_interval: Duration,
    /// Watches without timeoutSeconds end after a random time in [min, 2*min).
    pub min_request_timeout: Duration,
    /// The ranges Services' cluster IPs and node ports come from.
    pub service_ranges: crate::registry::services::ServiceRanges,
    pub admission: crate::admission::AdmissionOptions,
    /// Admission webhooks and policies, set by the server once it serves their kinds.
    pub external_admission: Option<crate::registry::external::ExternalHandle>,
    /// `--authorization-mode`, in order.
    pub authorization_modes: Vec<crate::authz::Mode>,
    /// The chain of [`Self::authorization_modes`], set by the server when it starts.
    pub authorizer: Option<Arc<crate::authz::Authorizer>>,
    /// `--anonymous-auth`: `None` keeps the paths anyone may read open without credentials and
    /// answers 401 elsewhere; `Some(true)` makes every request without credentials
    /// `system:anonymous`'s, for the authorizers to judge; `Some(false)` answers 401 to all.
    pub anonymous_auth: Option<bool>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            namespaces: None,
            bookmark_interval: Duration::from_secs(60),
            min_request_timeout: Duration::from_secs(1800),
            service_ranges: Default::default(),
            admission: Default::default(),
            external_admission: None,
            authorization_modes: vec![crate::authz::Mode::AlwaysAllow],
            authorizer: None,
            anonymous_auth: None,
        }
    }
}

pub struct ResourceEndpoint<S: Strategy> {
    pub registry: Arc<GenericRegistry<S>>,
    extension: Option<Arc<dyn Extension<S>>>,
    options: ServeOptions,
    /// The kind's OpenAPI schema, for strategic merge patch and server-side apply.
    schema: Option<KindSchema>,
    types: Arc<OnceLock<Arc<KindTypes>>>,
}

impl<S: Strategy> ResourceEndpoint<S> {
    pub fn new(registry: Arc<GenericRegistry<S>>, options: ServeOptions) -> Self {
        ResourceEndpoint {
            registry,
            extension: None,
            options,
            schema: None,
            types: Arc::default(),
        }
    }

    /// Reads list and map types (and, for built-in types, patch strategies) from `schema`.
    /// Without one, strategic merge patch answers 415 and apply deduces types from values.
    /// Built-in kinds' objects are also written with the zero values their Go types serialize.
    pub fn with_schema(mut self, schema: KindSchema) -> Self {
        if matches!(schema, KindSchema::Typed(_)) {
            let (types, info, kind_schema) =
                (self.types.clone(), self.info().clone(), schema.clone());
            let _ = self.registry.zero_values.set(Box::new(move |v| {
                let types =
                    types.get_or_init(|| Arc::new(KindTypes::build(&info, Some(&kind_schema))));
                gozero::applies(&types.schema) && gozero::fill_zero_values(&types.schema, v)
            }));
        }
        self.schema = Some(schema);
        self
    }

    /// The kind's types, built on first use.
    pub(super) fn types(&self) -> Arc<KindTypes> {
        self.types
            .get_or_init(|| Arc::new(KindTypes::build(self.info(), self.schema.as_ref())))
            .clone()
    }

    /// The manager a write by `req` is recorded for, after upstream's checks of
    /// `fieldManager` (a 422 about `options`).
    pub(super) fn manager(&self, req: &ApiRequest, options: &str) -> Result<String, ApiError> {
        fieldmanager::validate_field_manager(options, req.param("fieldManager"))?;
        let ua = req
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        Ok(fieldmanager::manager_or_user_agent(
            req.param("fieldManager"),
            ua,
        ))
    }

    pub fn with_extension(mut self, ext: Arc<dyn Extension<S>>) -> Self {
        self.extension = Some(ext);
        self
    }

    fn info(&self) -> &ResourceInfo {
        self.registry.strategy.info()
    }

    /// The body as an object, and the warnings its unknown fields earn under the request's
    /// `fieldValidation`.
    fn decode(&self, req: &ApiRequest) -> Result<(S::Object, Vec<String>), ApiError> {
        let info = self.info();
        if req.body.len() > codec::MAX_BODY_BYTES {
            return Err(ApiError::request_entity_too_large(format!(
                "limit is {}",
                codec::MAX_BODY_BYTES
            )));
        }
        let validation = req.field_validation()?;
        codec::decode_body(
            req.content_type(),
            &req.body,
            &info.kind,
            &info.api_version(),
            false,
            validation,
            |obj| self.registry.strategy.prune(obj),
        )
    }

    /// Applies `patch` to `doc` and checks the result for unknown fields, which decoding the
    /// patched document would drop.
    fn apply_patch(
        &self,
        patch: &Patch,
        doc: serde_json::Value,
        schema: &Schema,
        validation: FieldValidation,
        warnings: &std::sync::Mutex<Vec<String>>,
    ) -> Result<serde_json::Value, ApiError> {
        let patched = patch.apply(doc, schema)?;
        // A document that does not decode is the registry's error to report.
        if let Ok(mut obj) = serde_json::from_value::<S::Object>(patched.clone()) {
            self.registry.strategy.prune(&mut obj);
            let decoded = serde_json::to_value(&obj).map_err(ApiError::internal)?;
            if validation == FieldValidation::Ignore {
                return Ok(decoded);
            }
            let info = self.info();
            let found = validation.check(
                codec::unknown_fields(&patched, &decoded),
                &info.kind,
                &info.api_version(),
            )?;
            *warnings.lock().expect("warnings lock") = found;
            return Ok(decoded);
        }
        Ok(patched)
    }

    fn renderer(&self, req: &ApiRequest) -> Result<Renderer, ApiError> {
        let info = self.info();
        let render = render::negotiate(&req.headers, req.param("includeObject"))?;
        if render == render::Render::Protobuf
            && !crate::protobuf::supports(&info.api_version(), &info.kind)
        {
            // Kinds without a protobuf form (custom resources) answer as upstream does.
            return Err(ApiError::not_acceptable(&[
                "application/json",
                "application/yaml",
            ]));
        }
        Ok(Renderer {
            render,
            kind: info.kind.clone(),
            api_version: info.api_version(),
            list_kind: info.list_kind.clone(),
            printer: self.registry.strategy.clone(),
        })
    }

    fn list_response(
        &self,
        out: ListOutput<Arc<Cached<S::Object>>>,
        renderer: &Renderer,
    ) -> Response {
        let meta = ListMeta {
            resource_version: Some(out.resource_version.to_string()),
            continue_: out.continue_token,
            remaining_item_count: out.remaining,
            self_link: None,
        };
        renderer.list(&out.items, meta)
    }

    fn list_query(&self, req: &ApiRequest) -> Result<ListQuery, ApiError> {
        Ok(ListQuery {
            labels: label_selector(req)?,
            fields: field_selector(req)?,
            limit: match req.param("limit") {
                None | Some("") => None,
                Some(l) => Some(
                    l.parse::<i64>()
                        .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?
                        .max(0) as usize,
                ),
            },
            continue_token: req.param("continue").map(str::to_string),
            resource_version: req.param("resourceVersion").map(str::to_string),
            resource_version_match: req.param("resourceVersionMatch").map(str::to_string),
        })
    }

    async fn dispatch(&self, req: ApiRequest) -> Result<Response, ApiError> {
        let info = self.info().clone();
        let t = &req.target;
        if info.namespaced && t.name.is_some() && t.namespace.is_none() {
            return Err(ApiError::path_not_found());
        }
        if !info.namespaced && t.namespace.is_some() {
            return Err(ApiError::path_not_found());
        }
        if let Some(ext) = &self.extension
            && let Some(result) = ext.handle(&self.registry, &req).await
        {
            return result;
        }
        let reg = &self.registry;
        let ns = req.namespace();
        match (&t.verb, t.subresource.as_deref()) {
            (Verb::Get, None | Some("status" | "ephemeralcontainers")) => {
                if let Some(sub) = t.subresource.as_deref()
                    && info.subresource(sub).is_none()
                {
                    return Err(ApiError::path_not_found());
                }
                // resourceVersion on a get means "not older than".
                if let Some(rv) = req
                    .param("resourceVersion")
                    .filter(|rv| !rv.is_empty() && *rv != "0")
                {
                    reg.wait_for_revision(crate::registry::generic::parse_rv(rv)?)
                        .await?;
                }
                let renderer = self.renderer(&req)?;
                Ok(renderer.object(StatusCode::OK, &reg.get(ns, req.name()).await?))
            }
            (Verb::List, None) => {
                let q = self.list_query(&req)?;
                let renderer = self.renderer(&req)?;
                if let Some(name) = q.fields.required_value("metadata.name")
                    && (ns.is_some() || !info.namespaced)
                    && q.continue_token.is_none()
                {
                    // A single-object list (kubectl wait, rollout status): one key, not a range.
                    return self.single_list(&req, &q, name, &renderer).await;
                }
                Ok(self.list_response(reg.list_shared(ns, &q).await?, &renderer))
            }
            (Verb::Watch, None) => self.watch(&req).await,
            (Verb::Create, None) => {
                if info.namespaced && ns.is_none() {
                    return Err(ApiError::method_not_supported(reg.target(""), "create"));
                }
                let (obj, warnings) = self.decode(&req)?;
                let manager = self.manager(&req, "CreateOptions")?;
                let types = self.types();
                let fm = fieldmanager::field_manager(&types, Part::Main, "");
                let track = |new: &mut S::Object, live: Option<&S::Object>| {
                    fieldmanager::track_update(reg.strategy.as_ref(), &fm, &manager, new, live)
                };
                let created = reg
                    .create_tracked(ns, obj, req.dry_run()?, Some(&track))
                    .await?;
                Ok(with_warnings(
                    write(&req, StatusCode::CREATED, &created),
                    &warnings,
                ))
            }
            (Verb::Update, None | Some("status" | "ephemeralcontainers")) => {
                let part = self.part(t.subresource.as_deref())?;
                let (obj, warnings) = self.decode(&req)?;
                let manager = self.manager(&req, "UpdateOptions")?;
                let types = self.types();
                let sub = t.subresource.as_deref().unwrap_or_default();
                let fm = fieldmanager::field_manager(&types, part, sub);
                let track = |new: &mut S::Object, live: Option<&S::Object>| {
                    fieldmanager::track_update(reg.strategy.as_ref(), &fm, &manager, new, live)
                };
                let (obj, created) = reg
                    .update_tracked(ns, req.name(), obj, part, req.dry_run()?, Some(&track))
                    .await?;
                let code = if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(with_warnings(write(&req, code, &obj), &warnings))
            }
            (Verb::Patch, None | Some("status" | "ephemeralcontainers")) => {
                let part = self.part(t.subresource.as_deref())?;
                let patch = Patch::parse(&req)?;
                let types = self.types();
                let sub = t.subresource.as_deref().unwrap_or_default();
                if let Patch::Apply(config) = &patch {
                    return self
                        .server_side_apply(&req, part, sub, config, &types)
                        .await;
                }
                if matches!(patch, Patch::Strategic(_)) && !types.strategic {
                    return Err(ApiError::unsupported_media_type(
                        "application/strategic-merge-patch+json",
                        &[PATCH_TYPES[0], PATCH_TYPES[1], PATCH_TYPES[3]],
                    ));
                }
                let validation = req.field_validation()?;
                let warnings = std::sync::Mutex::new(Vec::new());
                let manager = self.manager(&req, "PatchOptions")?;
                let fm = fieldmanager::field_manager(&types, part, sub);
                let track = |new: &mut S::Object, live: Option<&S::Object>| {
                    fieldmanager::track_update(reg.strategy.as_ref(), &fm, &manager, new, live)
                };
                let obj = reg
                    .patch_tracked(
                        ns,
                        req.name(),
                        part,
                        req.dry_run()?,
                        |doc| self.apply_patch(&patch, doc, &types.schema, validation, &warnings),
                        Some(&track),
                    )
                    .await?;
                let warnings = warnings.into_inner().expect("warnings lock");
                Ok(with_warnings(write(&req, StatusCode::OK, &obj), &warnings))
            }
            (Verb::Delete, None) => {
                let opts = delete_options(&req)?;
                match reg.delete(ns, req.name(), &opts).await? {
                    Deleted::Pending(obj) => Ok(write(&req, StatusCode::OK, &obj)),
                    Deleted::Gone(obj) if reg.strategy.return_deleted_object() => {
                        Ok(write(&req, StatusCode::OK, &obj))
                    }
                    Deleted::Gone(obj) => {
                        let uid = reg.strategy.meta(&obj).uid.clone();
                        Ok(write(
                            &req,
                            StatusCode::OK,
                            &status_success(status::success(reg.target(req.name()), uid)),
                        ))
                    }
                }
            }
            (Verb::DeleteCollection, None) => {
                if !info.verbs.iter().any(|v| v == "deletecollection") {
                    return Err(ApiError::method_not_supported(
                        reg.target(""),
                        "deletecollection",
                    ));
                }
                let q = self.list_query(&req)?;
                let opts = delete_options(&req)?;
                let renderer = self.renderer(&req)?;
                let out = reg.delete_collection(ns, &q, &opts).await?;
                let out = ListOutput {
                    items: out.items.into_iter().map(Cached::new).collect(),
                    resource_version: out.resource_version,
                    continue_token: out.continue_token,
                    remaining: out.remaining,
                };
                Ok(self.list_response(out, &renderer))
            }
            (Verb::Get | Verb::Update | Verb::Patch, Some("scale"))
                if info.subresource("scale").is_some() =>
            {
                self.scale(&req).await
            }
            (_, Some(sub)) if info.subresource(sub).is_some() => {
                Err(ApiError::method_not_supported(
                    reg.target(req.name()),
                    &format!("{} on {sub}", t.verb.as_str()),
                ))
            }
            (_, Some(_)) | (Verb::Unnamed, None) => Err(ApiError::path_not_found()),
        }
    }

    /// `application/apply-patch+yaml`: server-side apply of `config` by `fieldManager`,
    /// creating the object when it does not exist.
    async fn server_side_apply(
        &self,
        req: &ApiRequest,
        part: Part,
        subresource: &str,
        config: &serde_json::Value,
        types: &KindTypes,
    ) -> Result<Response, ApiError> {
        let reg = &self.registry;
        let manager = req.param("fieldManager").unwrap_or_default();
        let force = req.flag("force");
        let fm = fieldmanager::field_manager(types, part, subresource);
        let apply = |live: Option<serde_json::Value>| {
            fm.apply(live.as_ref(), config, manager, force)
                .map_err(fieldmanager::apply_error)
        };
        let track = |new: &mut S::Object, live: Option<&S::Object>| {
            fieldmanager::track_apply(reg.strategy.as_ref(), new, live)
        };
        let (obj, created) = reg
            .apply(
                req.namespace(),
                req.name(),
                part,
                req.dry_run()?,
                apply,
                Some(&track),
            )
            .await?;
        let code = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok(write(req, code, &obj))
    }

    fn part(&self, sub: Option<&str>) -> Result<Part, ApiError> {
        match sub {
            None => Ok(Part::Main),
            Some("status") if self.info().subresource("status").is_some() => Ok(Part::Status),
            Some("ephemeralcontainers")
                if self.info().subresource("ephemeralcontainers").is_some() =>
            {
                Ok(Part::EphemeralContainers)
            }
            Some(_) => Err(ApiError::path_not_found()),
        }
    }

    async fn single_list(
        &self,
        req: &ApiRequest,
        q: &ListQuery,
        name: &str,
        renderer: &Renderer,
    ) -> Result<Response, ApiError> {
        let reg = &self.registry;
        let revision = reg
            .store()
            .current_revision()
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let items = match reg.get(req.namespace(), name).await {
            Ok(obj) => {
                let meta = reg.strategy.meta(&obj);
                let fields_ok = q.fields.matches(|f| reg.field_value(&obj, f));
                if q.labels.matches(meta.labels.as_ref()) && fields_ok {
                    vec![Cached::new(obj)]
                } else {
                    vec![]
                }
            }
            Err(e) if e.code == 404 => vec![],
            Err(e) => return Err(e),
        };
        Ok(self.list_response(
            ListOutput {
                items,
                resource_version: revision,
                continue_token: None,
                remaining: None,
            },
            renderer,
        ))
    }

    async fn watch(&self, req: &ApiRequest) -> Result<Response, ApiError> {
        let mut fields = field_selector(req)?;
        if let Some(name) = req.target.name.as_deref() {
            // A named watch is a watch with metadata.name pinned.
            if fields
                .required_value("metadata.name")
                .is_some_and(|n| n != name)
            {
                return Err(ApiError::bad_request(
                    "fieldSelector metadata.name doesn't match requested name",
                ));
            }
            fields.terms.push(minik8s_api::selector::FieldTerm {
                field: "metadata.name".into(),
                value: name.into(),
                equal: true,
            });
        }
        let send_initial_events = match req.param("sendInitialEvents") {
            None | Some("") => None,
            Some(v) => Some(matches!(v, "true" | "1" | "True")),
        };
        let q = WatchQuery {
            labels: label_selector(req)?,
            fields,
            resource_version: req.param("resourceVersion").map(str::to_string),
            resource_version_match: req.param("resourceVersionMatch").map(str::to_string),
            send_initial_events,
            allow_bookmarks: req.flag("allowWatchBookmarks"),
            bookmark_interval: self.options.bookmark_interval,
        };
        let timeout = match req
            .param("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
        {
            Some(secs) => Duration::from_secs(secs),
            None => {
                let min = self.options.min_request_timeout.as_secs_f64();
                Duration::from_secs_f64(min * (1.0 + rand::rng().random::<f64>()))
            }
        };
        let renderer = Arc::new(self.renderer(req)?);
        let content_type = renderer.watch_content_type();
        let events = self.registry.watch(req.namespace(), q).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        let stream = futures::stream::unfold(
            (events, false, true),
            move |(mut events, done, mut first)| {
                let renderer = renderer.clone();
                async move {
                    if done {
                        return None;
                    }
                    let event = tokio::select! {
                        e = events.next() => e?,
                        _ = tokio::time::sleep_until(deadline) => return None,
                    };
                    let is_error = matches!(event, WatchEvent::Error(_));
                    let line = renderer.watch_line(event, &mut first);
                    Some((
                        Ok::<_, std::convert::Infallible>(Bytes::from(line)),
                        (events, is_error, first),
                    ))
                }
            },
        )
        .boxed();
        let mut resp = Response::new(Body::from_stream(stream));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        );
        Ok(resp)
    }
}

#[async_trait]
impl<S: Strategy> Endpoint for ResourceEndpoint<S> {
    fn info(&self) -> &ResourceInfo {
        self.registry.strategy.info()
    }

    async fn serve(&self, req: ApiRequest) -> Response {
        let protobuf_only = render::wants_protobuf(&req.headers);
        match self.dispatch(req).await {
            Ok(resp) => resp,
            Err(e) if protobuf_only => render::protobuf_status(&e),
            Err(e) => codec::status_response(&e),
        }
    }
}

/// A write's response: protobuf for clients that take only protobuf, else JSON.
pub(super) fn write<T: serde::Serialize>(req: &ApiRequest, code: StatusCode, obj: &T) -> Response {
    render::write_response(&req.headers, code, obj)
}

fn status_success(
    mut s: k8s_openapi::apimachinery::pkg::apis::meta::v1::Status,
) -> serde_json::Value {
    s.code = None;
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("kind".into(), "Status".into());
        m.insert("apiVersion".into(), "v1".into());
        m.entry("metadata").or_insert_with(|| serde_json::json!({}));
    }
    v
}

pub fn label_selector(req: &ApiRequest) -> Result<Selector, ApiError> {
    match req.param("labelSelector") {
        None | Some("") => Ok(Selector::everything()),
        Some(s) => Selector::parse(s).map_err(|e| ApiError::bad_request(e.to_string())),
    }
}

pub fn field_selector(req: &ApiRequest) -> Result<FieldSelector, ApiError> {
    match req.param("fieldSelector") {
        None | Some("") => Ok(FieldSelector::default()),
        Some(s) => FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.0)),
    }
}

fn delete_options(req: &ApiRequest) -> Result<DeleteOpts, ApiError> {
    let mut opts = DeleteOpts::default();
    // As upstream: options come from a body when there is one, else from the query.
    let body_opts: Option<DeleteOptions> = if req.body.iter().all(u8::is_ascii_whitespace) {
        opts.dry_run = req.dry_run()?;
        None
    } else {
        let mut value = codec::parse_body(req.content_type(), &req.body, "DeleteOptions")?;
        if let Some(m) = value.as_object_mut() {
            // Any group's DeleteOptions is accepted; decode it as the meta/v1 type.
            m.remove("kind");
            m.remove("apiVersion");
        }
        Some(
            serde_json::from_value(value)
                .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?,
        )
    };
    let (grace, policy, orphan) = match &body_opts {
        Some(o) => {
            let values: Vec<&str> = o.dry_run.iter().flatten().map(String::as_str).collect();
            opts.dry_run = dry_run(&values, &req.target.verb)?;
            opts.preconditions = o.preconditions.clone();
            (
                o.grace_period_seconds,
                o.propagation_policy.clone(),
                o.orphan_dependents,
            )
        }
        None => (
            match req.param("gracePeriodSeconds") {
                None | Some("") => None,
                Some(g) => Some(g.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}"))
                })?),
            },
            req.param("propagationPolicy").map(str::to_string),
            req.param("orphanDependents").map(|v| v == "true"),
        ),
    };
    if orphan.is_some() && policy.is_some() {
        let err = FieldError::invalid(
            &Path::new("propagationPolicy"),
            policy.clone().unwrap_or_default(),
            "orphanDependents and deletionPropagation cannot be both set",
        );
        return Err(ApiError::invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &[err],
        ));
    }
    opts.grace_period_seconds = grace;
    opts.propagation_policy = policy.or_else(|| {
        orphan.map(|o| {
            if o {
                "Orphan".into()
            } else {
                "Background".into()
            }
        })
    });
    Ok(opts)
}

/// RFC 6902 as upstream's json-patch library applies it: a `test` of `null` passes when the
/// path is absent (kube-rs's finalizer helper relies on this). All or nothing.
fn apply_json_patch(
    doc: &mut serde_json::Value,
    patch: &json_patch::Patch,
) -> Result<(), ApiError> {
    let invalid = |e: &dyn std::fmt::Display| ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("the server rejected our request due to an error in our request: {e}"),
        details: None,
    };
    let mut work = doc.clone();
    for op in &patch.0 {
        if let json_patch::PatchOperation::Test(t) = op
            && t.value.is_null()
            && work.pointer(t.path.as_str()).is_none()
        {
            continue;
        }
        json_patch::patch(&mut work, std::slice::from_ref(op)).map_err(|e| invalid(&e))?;
    }
    *doc = work;
    Ok(())
}

/// A parsed patch body.
pub enum Patch {
    Json(json_patch::Patch),
    Merge(serde_json::Value),
    Strategic(serde_json::Value),
    /// A server-side apply configuration (YAML or JSON).
    Apply(serde_json::Value),
}

pub(super) const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

impl Patch {
    /// The body by its media type, after upstream's checks of the patch options.
    pub fn parse(req: &ApiRequest) -> Result<Patch, ApiError> {
        if req.body.len() > codec::MAX_BODY_BYTES {
            return Err(ApiError::request_entity_too_large(format!(
                "limit is {}",
                codec::MAX_BODY_BYTES
            )));
        }
        let media = codec::media_type(req.content_type());
        if !PATCH_TYPES.contains(&media.as_str()) {
            return Err(ApiError::unsupported_media_type(&media, PATCH_TYPES));
        }
        let apply = media == "application/apply-patch+yaml";
        let mut errs = Vec::new();
        if apply && req.param("fieldManager").is_none_or(str::is_empty) {
            errs.push(FieldError::required(
                &Path::new("fieldManager"),
                "is required for apply patch",
            ));
        }
        if !apply && req.param("force").is_some() {
            errs.push(FieldError::forbidden(
                &Path::new("force"),
                "may not be specified for non-apply patch",
            ));
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid("PatchOptions", "meta.k8s.io", "", &errs));
        }
        fieldmanager::validate_field_manager("PatchOptions", req.param("fieldManager"))?;
        let json_value = || -> Result<serde_json::Value, ApiError> {
            serde_json::from_slice(&req.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
        };
        match media.as_str() {
            "application/json-patch+json" => {
                let p: json_patch::Patch = serde_json::from_slice(&req.body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                if p.0.len() > 10000 {
                    return Err(ApiError::request_entity_too_large(format!(
                        "The allowed maximum operations in a JSON patch is 10000, got {}",
                        p.0.len()
                    )));
                }
                Ok(Patch::Json(p))
            }
            "application/merge-patch+json" => Ok(Patch::Merge(json_value()?)),
            "application/strategic-merge-patch+json" => {
                let v = json_value()?;
                if !v.is_object() {
                    return Err(ApiError::bad_request(
                        "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
                    ));
                }
                Ok(Patch::Strategic(v))
            }
            _ => {
                let v: serde_json::Value = if req.body.iter().all(u8::is_ascii_whitespace) {
                    serde_json::Value::Object(Default::default())
                } else {
                    serde_yaml::from_slice(&req.body)
                        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
                };
                let v = match v {
                    serde_json::Value::Null => serde_json::Value::Object(Default::default()),
                    v @ serde_json::Value::Object(_) => v,
                    _ => {
                        return Err(ApiError::bad_request(
                            "error decoding patch: json: cannot unmarshal non-object into Go value of type map[string]interface {}",
                        ));
                    }
                };
                Ok(Patch::Apply(v))
            }
        }
    }

    /// Applies the patch to `doc`, an object of `schema`'s kind. Not for apply patches.
    pub fn apply(
        &self,
        mut doc: serde_json::Value,
        schema: &Schema,
    ) -> Result<serde_json::Value, ApiError> {
        match self {
            Patch::Json(p) => apply_json_patch(&mut doc, p)?,
            Patch::Merge(p) => json_patch::merge(&mut doc, p),
            Patch::Strategic(p) => {
                doc = strategic::apply(schema, doc, p.clone()).map_err(fieldmanager::smp_error)?;
            }
            Patch::Apply(_) => {
                return Err(ApiError::internal(
                    "apply patches go through the field manager",
                ));
            }
        }
        Ok(doc)
    }
}
