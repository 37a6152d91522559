//! One OpenAPI 3.0 document per group version, laid out as upstream's kube-openapi lays it
//! out: the operations of every resource path (with `x-kubernetes-action` and
//! `x-kubernetes-group-version-kind`) and every schema they reach, under upstream's names.
//!
//! Pure: the served resources and where each kind's schema comes from go in, a JSON value
//! comes out. Built-in kinds bring k8s-openapi's schemars schemas; kinds known only at run time
//! (custom resources) bring a JSON schema of their own.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{Binding, Pod};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIResourceList, DeleteOptions, ListMeta, ObjectMeta, Patch, Status, WatchEvent,
};
use minik8s_api::ResourceInfo;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

/// A group, version and kind; the core group is "".
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// The GVK of a k8s-openapi type.
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Gvk::new(K::GROUP, K::VERSION, K::KIND)
    }

    fn extension(&self) -> Value {
        json!({"group": self.group, "kind": self.kind, "version": self.version})
    }
}

/// Where the schema of a kind comes from.
#[derive(Clone)]
pub enum KindSchema {
    /// A type with a schemars schema (k8s-openapi's built-in kinds): adds its definition and
    /// everything it reaches to the generator and returns a `$ref` to it.
    Typed(fn(&mut SchemaGenerator) -> Schema),
    /// A schema known only at run time, such as a CustomResourceDefinition version's
    /// `openAPIV3Schema`. `apiVersion`, `kind` and `metadata` are filled in as upstream does.
    Json(Arc<Value>),
}

impl std::fmt::Debug for KindSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KindSchema::Typed(_) => f.write_str("Typed"),
            KindSchema::Json(_) => f.write_str("Json"),
        }
    }
}

impl KindSchema {
    pub fn of<T: JsonSchema>() -> Self {
        KindSchema::Typed(SchemaGenerator::subschema_for::<T>)
    }
}

/// The kinds subresources answer with that are not served as resources themselves.
pub fn subresource_kinds() -> Vec<(Gvk, KindSchema)> {
    vec![
        (Gvk::of::<Scale>(), KindSchema::of::<Scale>()),
        (Gvk::of::<Binding>(), KindSchema::of::<Binding>()),
        (Gvk::of::<Eviction>(), KindSchema::of::<Eviction>()),
    ]
}

/// The path of a group version's document under `/openapi/v3/`: `api/v1`, `apis/apps/v1`.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// What `info.version` says: the Kubernetes release the server reports, without build metadata.
fn release() -> String {
    let v = crate::server::version_info().git_version;
    v.split('+').next().unwrap_or_default().to_string()
}

const SCHEMA_PREFIX: &str = "#/components/schemas/";

fn reference(name: &str) -> Value {
    json!({"$ref": format!("{SCHEMA_PREFIX}{name}")})
}

/// The definition name a `$ref` schema points at.
fn ref_name(schema: &Schema) -> Option<String> {
    schema
        .get("$ref")?
        .as_str()?
        .strip_prefix(SCHEMA_PREFIX)
        .map(str::to_string)
}

/// Upstream's name for the schema of a custom kind: the group reversed, then version and
/// kind (`com.example.stable.v1.CronTab`).
fn custom_schema_name(gvk: &Gvk) -> String {
    let mut parts: Vec<&str> = gvk.group.split('.').filter(|s| !s.is_empty()).collect();
    parts.reverse();
    parts.push(&gvk.version);
    parts.push(&gvk.kind);
    parts.join(".")
}

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// Builds one group version's document.
struct Builder<'a> {
    generator: SchemaGenerator,
    schemas: &'a BTreeMap<Gvk, KindSchema>,
    /// Definitions not made by the generator: lists and runtime schemas.
    extra: Map<String, Value>,
    /// The definition of each kind the document names, for its GVK extension.
    kinds: BTreeMap<Gvk, String>,
}

impl<'a> Builder<'a> {
    fn new(schemas: &'a BTreeMap<Gvk, KindSchema>) -> Self {
        let generator = SchemaSettings::openapi3()
            .with(|s| s.meta_schema = None)
            .into_generator();
        Builder {
            generator,
            schemas,
            extra: Map::new(),
            kinds: BTreeMap::new(),
        }
    }

    fn add<T: JsonSchema>(&mut self) -> String {
        let schema = self.generator.subschema_for::<T>();
        ref_name(&schema).unwrap_or_else(|| T::schema_name().into_owned())
    }

    /// The definition name of `gvk`'s schema, adding it (and what it reaches) if new.
    fn kind(&mut self, gvk: &Gvk) -> String {
        if let Some(name) = self.kinds.get(gvk) {
            return name.clone();
        }
        let schemas = self.schemas;
        let name = match schemas.get(gvk) {
            Some(KindSchema::Typed(subschema)) => {
                let schema = subschema(&mut self.generator);
                ref_name(&schema).unwrap_or_else(|| custom_schema_name(gvk))
            }
            Some(KindSchema::Json(schema)) => self.custom(gvk, Some(schema.as_ref())),
            // Served without a schema: anything goes below the object's metadata.
            None => self.custom(gvk, None),
        };
        self.kinds.insert(gvk.clone(), name.clone());
        name
    }

    fn custom(&mut self, gvk: &Gvk, schema: Option<&Value>) -> String {
        let name = custom_schema_name(gvk);
        let mut schema = match schema {
            Some(Value::Object(m)) => m.clone(),
            _ => {
                let mut m = Map::new();
                m.insert("type".into(), "object".into());
                m.insert("x-kubernetes-preserve-unknown-fields".into(), true.into());
                m
            }
        };
        schema.entry("type").or_insert_with(|| "object".into());
        let meta = self.add::<ObjectMeta>();
        let props = schema
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(props) = props.as_object_mut() {
            props.insert(
                "apiVersion".into(),
                json!({"description": API_VERSION_DOC, "type": "string"}),
            );
            props.insert(
                "kind".into(),
                json!({"description": KIND_DOC, "type": "string"}),
            );
            props.insert(
                "metadata".into(),
                json!({
                    "allOf": [reference(&meta)],
                    "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
                }),
            );
        }
        self.extra.insert(name.clone(), Value::Object(schema));
        name
    }

    /// The list kind of a resource, built as upstream's `<Kind>List` types are.
    fn list(&mut self, r: &ResourceInfo, item: &str) -> String {
        let gvk = Gvk::new(&r.group, &r.version, &r.list_kind);
        let name = match item.strip_suffix(r.kind.as_str()) {
            Some(prefix) => format!("{prefix}{}", r.list_kind),
            None => format!("{item}List"),
        };
        let list_meta = self.add::<ListMeta>();
        self.extra.insert(
            name.clone(),
            json!({
                "description": format!("{} is a list of {}.", r.list_kind, r.kind),
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
                    "items": {
                        "description": format!("List of {}.", r.plural),
                        "type": "array",
                        "items": reference(item),
                    },
                    "kind": {"description": KIND_DOC, "type": "string"},
                    "metadata": {
                        "allOf": [reference(&list_meta)],
                        "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                    },
                },
            }),
        );
        self.kinds.insert(gvk, name.clone());
        name
    }

    /// Every definition, finished: upstream's extensions added, GVKs marked.
    fn definitions(mut self) -> Map<String, Value> {
        let mut defs = self.generator.take_definitions(true);
        defs.append(&mut self.extra);
        override_upstream_shapes(&mut defs);
        add_upstream_extensions(&mut defs);
        for (gvk, name) in &self.kinds {
            if let Some(Value::Object(def)) = defs.get_mut(name) {
                let list = def
                    .entry("x-kubernetes-group-version-kind")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(list) = list
                    && !list.contains(&gvk.extension())
                {
                    list.push(gvk.extension());
                }
            }
        }
        defs
    }
}

/// Upstream's v3 shapes of the two int-or-string types, which k8s-openapi writes as a bare
/// `x-kubernetes-int-or-string` (the form CRD schemas use).
fn override_upstream_shapes(defs: &mut Map<String, Value>) {
    let shapes = [
        (
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
            json!({"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]}),
        ),
        (
            "io.k8s.apimachinery.pkg.api.resource.Quantity",
            json!({"oneOf": [{"type": "string"}, {"type": "number"}]}),
        ),
    ];
    for (name, shape) in shapes {
        if let Some(Value::Object(def)) = defs.get_mut(name) {
            def.remove("x-kubernetes-int-or-string");
            if let Value::Object(shape) = shape {
                def.extend(shape);
            }
        }
    }
}

/// Upstream's `x-kubernetes-*` extensions of schemas and their properties (patch strategy
/// and merge key, list type and map keys, map type, unions), which k8s-openapi's schemars
/// output does not carry. kubectl computes strategic merge patches from them. The table is
/// data taken from upstream's documents by `hack/update-openapi-extensions.sh`.
fn add_upstream_extensions(defs: &mut Map<String, Value>) {
    let table: Map<String, Value> =
        serde_json::from_str(include_str!("upstream-extensions.json")).unwrap_or_default();
    for (name, fields) in table {
        let (Some(Value::Object(def)), Value::Object(fields)) = (defs.get_mut(&name), fields)
        else {
            continue;
        };
        for (field, ext) in fields {
            let Value::Object(ext) = ext else { continue };
            let target = if field.is_empty() {
                Some(&mut *def)
            } else {
                def.get_mut("properties")
                    .and_then(|p| p.get_mut(&field))
                    .and_then(Value::as_object_mut)
            };
            if let Some(target) = target {
                // A bare `$ref` takes no siblings in OpenAPI 3.0: wrap it as upstream does.
                if target.len() == 1
                    && let Some(r) = target.remove("$ref")
                {
                    target.insert("allOf".into(), json!([{"$ref": r}]));
                }
                target.extend(ext);
            }
        }
    }
}

fn param(name: &str, location: &str, ty: &str, description: &str) -> Value {
    let mut p = json!({
        "name": name,
        "in": location,
        "description": description,
        "schema": {"type": ty, "uniqueItems": true},
    });
    if location == "path" {
        p["required"] = true.into();
    }
    p
}

fn query(name: &str) -> Value {
    let (ty, doc) = match name {
        "allowWatchBookmarks" => (
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. If this is not a watch, this field is ignored.",
        ),
        "continue" => (
            "string",
            "The continue option should be set when retrieving more results from the server. Clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue).",
        ),
        "dryRun" => (
            "string",
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
        ),
        "fieldManager" => (
            "string",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters.",
        ),
        "fieldSelector" => (
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        "fieldValidation" => (
            "string",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown fields. Valid values are: - Ignore: unknown fields are silently dropped from the object. - Warn: a warning is sent via the standard warning response header for each unknown field that is dropped from the object; this is the default. - Strict: the request fails with a BadRequest error if any unknown fields would be dropped from the object.",
        ),
        "force" => (
            "boolean",
            "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
        ),
        "gracePeriodSeconds" => (
            "integer",
            "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used.",
        ),
        "labelSelector" => (
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        "limit" => (
            "integer",
            "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results.",
        ),
        "orphanDependents" => (
            "boolean",
            "Deprecated: please use the PropagationPolicy. Should the dependent objects be orphaned.",
        ),
        "pretty" => ("string", "If 'true', then the output is pretty printed."),
        "propagationPolicy" => (
            "string",
            "Whether and how garbage collection will be performed. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
        ),
        "resourceVersion" => (
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        "resourceVersionMatch" => (
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        "sendInitialEvents" => (
            "boolean",
            "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection, followed by a synthetic \"Bookmark\" event annotated \"k8s.io/initial-events-end\".",
        ),
        "timeoutSeconds" => (
            "integer",
            "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
        ),
        "watch" => (
            "boolean",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
        ),
        _ => ("string", ""),
    };
    param(name, "query", ty, doc)
}

fn queries(names: &[&str]) -> Vec<Value> {
    names.iter().map(|n| query(n)).collect()
}

const LIST_QUERY: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];
const WRITE_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH_QUERY: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
const DELETE_QUERY: &[&str] = &[
    "dryRun",
    "gracePeriodSeconds",
    "orphanDependents",
    "propagationPolicy",
];
const DELETE_COLLECTION_QUERY: &[&str] = &[
    "continue",
    "dryRun",
    "fieldSelector",
    "gracePeriodSeconds",
    "labelSelector",
    "limit",
    "orphanDependents",
    "propagationPolicy",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
];

/// The patch media types a PATCH operation lists. kubectl computes strategic merge patches
/// from this document only when the strategic type is listed.
pub const PATCH_MEDIA_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];

/// The patch media types of custom resources, which upstream serves without strategic merge
/// patch (kubectl then sends JSON merge patches).
pub const CUSTOM_PATCH_MEDIA_TYPES: &[&str] = &[
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
];

fn content(types: &[&str], schema: &str) -> Value {
    let mut m = Map::new();
    for t in types {
        m.insert(t.to_string(), json!({"schema": reference(schema)}));
    }
    Value::Object(m)
}

fn responses(codes: &[(&str, &str)], types: &[&str], schema: &str) -> Value {
    let mut m = Map::new();
    for (code, description) in codes {
        m.insert(
            code.to_string(),
            json!({"description": description, "content": content(types, schema)}),
        );
    }
    m.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(m)
}

const JSON: &[&str] = &["application/json"];
const LIST_TYPES: &[&str] = &["application/json", "application/json;stream=watch"];
const WATCH_TYPES: &[&str] = &["application/json", "application/json;stream=watch"];

/// Names the operations of one group version as upstream does (`listAppsV1NamespacedDeployment`).
struct Naming {
    /// `AppsV1`, `CoreV1`, `RbacAuthorizationV1`.
    gv: String,
    /// `apps_v1`, `core_v1`, `rbacAuthorization_v1`.
    tag: String,
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl Naming {
    fn new(group: &str, version: &str) -> Self {
        let group = match group {
            "" => "core".to_string(),
            g => {
                let g = g.strip_suffix(".k8s.io").unwrap_or(g);
                let mut parts = g.split('.');
                let first = parts.next().unwrap_or_default().to_string();
                parts.fold(first, |acc, p| acc + &capitalize(p))
            }
        };
        Naming {
            gv: format!("{}{}", capitalize(&group), capitalize(version)),
            tag: format!("{group}_{version}"),
        }
    }
}

/// What an operation takes or answers with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Payload {
    Nothing,
    /// The kind the path serves (the subresource's kind on a subresource path).
    Object,
    List,
    Status,
    DeleteOptions,
    Patch,
}

/// One verb of the resource table as an operation, upstream's way.
struct Operation {
    verb: &'static str,
    method: &'static str,
    action: &'static str,
    /// `operationId` is `<id><GroupVersion><id_infix><Namespaced><Kind><Subresource>`.
    id: &'static str,
    id_infix: &'static str,
    /// On `.../{name}` rather than on the collection.
    on_item: bool,
    query: &'static [&'static str],
    body: Payload,
    codes: &'static [(&'static str, &'static str)],
    answer: Payload,
    /// `<describe> <Kind>`, or `<describe_sub> <subresource> of the specified <Kind>`.
    describe: &'static str,
    describe_sub: &'static str,
}

const OK: &[(&str, &str)] = &[("200", "OK")];
const OK_CREATED: &[(&str, &str)] = &[("200", "OK"), ("201", "Created")];
const OK_CREATED_ACCEPTED: &[(&str, &str)] =
    &[("200", "OK"), ("201", "Created"), ("202", "Accepted")];
const OK_ACCEPTED: &[(&str, &str)] = &[("200", "OK"), ("202", "Accepted")];

const OPERATIONS: &[Operation] = &[
    Operation {
        verb: "list",
        method: "get",
        action: "list",
        id: "list",
        id_infix: "",
        on_item: false,
        query: LIST_QUERY,
        body: Payload::Nothing,
        codes: OK,
        answer: Payload::List,
        describe: "list or watch objects of kind",
        describe_sub: "list",
    },
    Operation {
        verb: "create",
        method: "post",
        action: "post",
        id: "create",
        id_infix: "",
        on_item: false,
        query: WRITE_QUERY,
        body: Payload::Object,
        codes: OK_CREATED_ACCEPTED,
        answer: Payload::Object,
        describe: "create a",
        describe_sub: "create",
    },
    Operation {
        verb: "deletecollection",
        method: "delete",
        action: "deletecollection",
        id: "delete",
        id_infix: "Collection",
        on_item: false,
        query: DELETE_COLLECTION_QUERY,
        body: Payload::DeleteOptions,
        codes: OK,
        answer: Payload::Status,
        describe: "delete collection of",
        describe_sub: "delete",
    },
    Operation {
        verb: "get",
        method: "get",
        action: "get",
        id: "read",
        id_infix: "",
        on_item: true,
        query: &[],
        body: Payload::Nothing,
        codes: OK,
        answer: Payload::Object,
        describe: "read the specified",
        describe_sub: "read",
    },
    Operation {
        verb: "update",
        method: "put",
        action: "put",
        id: "replace",
        id_infix: "",
        on_item: true,
        query: WRITE_QUERY,
        body: Payload::Object,
        codes: OK_CREATED,
        answer: Payload::Object,
        describe: "replace the specified",
        describe_sub: "replace",
    },
    Operation {
        verb: "patch",
        method: "patch",
        action: "patch",
        id: "patch",
        id_infix: "",
        on_item: true,
        query: PATCH_QUERY,
        body: Payload::Patch,
        codes: OK_CREATED,
        answer: Payload::Object,
        describe: "partially update the specified",
        describe_sub: "partially update",
    },
    Operation {
        verb: "delete",
        method: "delete",
        action: "delete",
        id: "delete",
        id_infix: "",
        on_item: true,
        query: DELETE_QUERY,
        body: Payload::DeleteOptions,
        codes: OK_ACCEPTED,
        answer: Payload::Status,
        describe: "delete a",
        describe_sub: "delete",
    },
];

#[derive(Default)]
struct Paths(Map<String, Value>);

impl Paths {
    /// Adds `op` as `method` of `path`; a new path item gets `params` (path parameters and
    /// `pretty`), as upstream puts them on the path.
    fn op(&mut self, path: &str, params: &[Value], method: &str, op: Value) {
        let item = self
            .0
            .entry(path.to_string())
            .or_insert_with(|| json!({"parameters": params}));
        if let Value::Object(item) = item {
            item.insert(method.to_string(), op);
        }
    }
}

/// Definition names of what the operations of one document refer to.
struct Common {
    status: String,
    delete_options: String,
    patch: String,
    watch_event: String,
}

/// One operation of a path.
struct Op<'a> {
    id: String,
    description: String,
    action: &'a str,
    gvk: &'a Gvk,
    query: &'a [&'a str],
    body: Option<Value>,
    responses: Value,
}

impl Op<'_> {
    fn build(self, naming: &Naming) -> Value {
        let mut op = json!({
            "description": self.description,
            "operationId": self.id,
            "tags": [naming.tag],
            "responses": self.responses,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk.extension(),
        });
        if !self.query.is_empty() {
            op["parameters"] = Value::Array(queries(self.query));
        }
        if let Some(body) = self.body {
            op["requestBody"] = body;
        }
        op
    }
}

/// The document of `group`/`version`: `resources` are those served there (others are
/// skipped), `schemas` says where each kind's schema comes from. A kind without a schema is
/// described as an object that keeps unknown fields.
pub fn group_version_document(
    group: &str,
    version: &str,
    resources: &[ResourceInfo],
    schemas: &BTreeMap<Gvk, KindSchema>,
) -> Value {
    let mut resources: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    resources.sort_by(|a, b| a.plural.cmp(&b.plural));
    let naming = Naming::new(group, version);
    let prefix = format!("/{}", group_version_path(group, version));
    let mut b = Builder::new(schemas);
    let common = Common {
        status: b.add::<Status>(),
        delete_options: b.add::<DeleteOptions>(),
        patch: b.add::<Patch>(),
        watch_event: b.add::<WatchEvent<Pod>>(),
    };
    let resource_list = b.add::<APIResourceList>();
    let mut paths = Paths::default();
    paths.op(
        &format!("{prefix}/"),
        &[],
        "get",
        json!({
            "description": "get available resources",
            "operationId": format!("get{}APIResources", naming.gv),
            "tags": [naming.tag],
            "responses": responses(OK, JSON, &resource_list),
        }),
    );
    for r in resources {
        resource_paths(&mut b, &mut paths, &naming, &prefix, &common, r);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": release()},
        "paths": Value::Object(paths.0),
        "components": {"schemas": Value::Object(b.definitions())},
    })
}

/// The paths of one resource: collection, item, all namespaces, legacy watch, subresources.
fn resource_paths(
    b: &mut Builder<'_>,
    paths: &mut Paths,
    naming: &Naming,
    prefix: &str,
    common: &Common,
    r: &ResourceInfo,
) {
    let gvk = Gvk::new(&r.group, &r.version, &r.kind);
    let patch_types = match b.schemas.get(&gvk) {
        Some(KindSchema::Json(_)) => CUSTOM_PATCH_MEDIA_TYPES,
        _ => PATCH_MEDIA_TYPES,
    };
    let kind = b.kind(&gvk);
    let list = b.list(r, &kind);
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let ns_segment = if r.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let pretty = query("pretty");
    let mut collection_params = Vec::new();
    if r.namespaced {
        collection_params.push(param(
            "namespace",
            "path",
            "string",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    collection_params.push(pretty.clone());
    let mut item_params = vec![param(
        "name",
        "path",
        "string",
        &format!("name of the {}", r.kind),
    )];
    item_params.extend(collection_params.iter().cloned());
    let collection = format!("{prefix}{ns_segment}/{}", r.plural);
    let item = format!("{collection}/{{name}}");

    // What a payload is on a path whose object is `object`.
    let schema = |payload: Payload, object: &str| -> String {
        match payload {
            Payload::Object => object.to_string(),
            Payload::List => list.clone(),
            Payload::Status => common.status.clone(),
            Payload::DeleteOptions => common.delete_options.clone(),
            Payload::Patch => common.patch.clone(),
            Payload::Nothing => String::new(),
        }
    };
    let request = |payload: Payload, object: &str| match payload {
        Payload::Nothing => None,
        Payload::Patch => Some(json!({
            "content": content(patch_types, &schema(payload, object)),
            "required": true,
        })),
        Payload::DeleteOptions => Some(json!({
            "content": content(&["*/*"], &schema(payload, object)),
        })),
        _ => Some(json!({
            "content": content(&["*/*"], &schema(payload, object)),
            "required": true,
        })),
    };

    for o in OPERATIONS.iter().filter(|o| r.has_verb(o.verb)) {
        let (path, params) = if o.on_item {
            (&item, &item_params)
        } else {
            (&collection, &collection_params)
        };
        let types = if o.answer == Payload::List {
            LIST_TYPES
        } else {
            JSON
        };
        let op = Op {
            id: format!("{}{}{}{scope}{}", o.id, naming.gv, o.id_infix, r.kind),
            description: format!("{} {}", o.describe, r.kind),
            action: o.action,
            gvk: &gvk,
            query: o.query,
            body: request(o.body, &kind),
            responses: responses(o.codes, types, &schema(o.answer, &kind)),
        }
        .build(naming);
        paths.op(path, params, o.method, op);
    }

    if r.namespaced && r.has_verb("list") {
        let op = Op {
            id: format!("list{}{}ForAllNamespaces", naming.gv, r.kind),
            description: format!("list or watch objects of kind {}", r.kind),
            action: "list",
            gvk: &gvk,
            query: LIST_QUERY,
            body: None,
            responses: responses(OK, LIST_TYPES, &list),
        }
        .build(naming);
        let path = format!("{prefix}/{}", r.plural);
        paths.op(&path, std::slice::from_ref(&pretty), "get", op);
    }

    // The legacy `/watch/` paths, which the server still serves.
    if r.has_verb("watch") {
        let watch = |action: &'static str, id: String, what: &str| {
            let description = format!(
                "watch {what} {}. deprecated: use the 'watch' parameter with a list operation instead.",
                r.kind
            );
            Op {
                id,
                description,
                action,
                gvk: &gvk,
                query: LIST_QUERY,
                body: None,
                responses: responses(OK, WATCH_TYPES, &common.watch_event),
            }
            .build(naming)
        };
        let watch_collection = format!("{prefix}/watch{ns_segment}/{}", r.plural);
        let op = watch(
            "watchlist",
            format!("watch{}{scope}{}List", naming.gv, r.kind),
            "individual changes to a list of",
        );
        paths.op(&watch_collection, &collection_params, "get", op);
        let op = watch(
            "watch",
            format!("watch{}{scope}{}", naming.gv, r.kind),
            "changes to an object of kind",
        );
        paths.op(
            &format!("{watch_collection}/{{name}}"),
            &item_params,
            "get",
            op,
        );
        if r.namespaced {
            let op = watch(
                "watchlist",
                format!("watch{}{}ListForAllNamespaces", naming.gv, r.kind),
                "individual changes to a list of",
            );
            let path = format!("{prefix}/watch/{}", r.plural);
            paths.op(&path, std::slice::from_ref(&pretty), "get", op);
        }
    }

    for sub in &r.subresources {
        if connect_subresource(paths, naming, r, sub, &item_params, &gvk) {
            continue;
        }
        let sub_gvk = Gvk::new(&sub.group, &sub.version, &sub.kind);
        let sub_kind = b.kind(&sub_gvk);
        let path = format!("{item}/{}", sub.name);
        let verbs = OPERATIONS
            .iter()
            .filter(|o| o.on_item || o.verb == "create")
            .filter(|o| sub.verbs.iter().any(|v| v == o.verb));
        for o in verbs {
            let op = Op {
                id: format!(
                    "{}{}{scope}{}{}",
                    o.id,
                    naming.gv,
                    r.kind,
                    capitalize(&sub.name)
                ),
                description: format!(
                    "{} {} of the specified {}",
                    o.describe_sub, sub.name, r.kind
                ),
                action: o.action,
                gvk: &sub_gvk,
                query: o.query,
                body: request(o.body, &sub_kind),
                responses: responses(o.codes, JSON, &schema(o.answer, &sub_kind)),
            }
            .build(naming);
            paths.op(&path, &item_params, o.method, op);
        }
    }
}

/// Query parameters of the subresources a kubelet serves, with upstream's descriptions.
fn connect_query(name: &str) -> Value {
    let (ty, doc) = match name {
        "command" => (
            "string",
            "Command is the remote command to execute. argv array. Not executed within a shell.",
        ),
        "container" => (
            "string",
            "The container in which to execute the command. Defaults to only container if there is only one container in the pod.",
        ),
        "stderr" => (
            "boolean",
            "Redirect the standard error stream of the pod for this call.",
        ),
        "stdin" => (
            "boolean",
            "Redirect the standard input stream of the pod for this call. Defaults to false.",
        ),
        "stdout" => (
            "boolean",
            "Redirect the standard output stream of the pod for this call.",
        ),
        "tty" => (
            "boolean",
            "TTY if true indicates that a tty will be allocated for the exec call. Defaults to false.",
        ),
        "ports" => (
            "integer",
            "List of ports to forward Required when using WebSockets",
        ),
        "path" => (
            "string",
            "Path is the URL path to use for the current proxy request to node.",
        ),
        "follow" => (
            "boolean",
            "Follow the log stream of the pod. Defaults to false.",
        ),
        "insecureSkipTLSVerifyBackend" => (
            "boolean",
            "insecureSkipTLSVerifyBackend indicates that the apiserver should not confirm the validity of the serving certificate of the backend it is connecting to.  This will make the HTTPS connection between the apiserver and the backend insecure. This means the apiserver cannot verify the log data it is receiving came from the real kubelet.  If the kubelet is configured to verify the apiserver's TLS credentials, it does not mean the connection to the real kubelet is vulnerable to a man in the middle attack (e.g. an attacker could not intercept the actual log data coming from the real kubelet).",
        ),
        "limitBytes" => (
            "integer",
            "If set, the number of bytes to read from the server before terminating the log output. This may not display a complete final line of logging, and may return slightly more or slightly less than the specified limit.",
        ),
        "previous" => (
            "boolean",
            "Return previous terminated container logs. Defaults to false.",
        ),
        "sinceSeconds" => (
            "integer",
            "A relative time in seconds before the current time from which to show logs. If this value precedes the time a pod was started, only logs since the pod start will be returned. If this value is in the future, no logs will be returned. Only one of sinceSeconds or sinceTime may be specified.",
        ),
        "stream" => (
            "string",
            "Specify which container log stream to return to the client. Acceptable values are \"All\", \"Stdout\" and \"Stderr\". If not specified, \"All\" is used, and both stdout and stderr are returned interleaved. Note that when \"TailLines\" is specified, \"Stream\" can only be set to nil or \"All\".",
        ),
        "tailLines" => (
            "integer",
            "If set, the number of lines from the end of the logs to show. If not specified, logs are shown from the creation of the container or sinceSeconds or sinceTime. Note that when \"TailLines\" is specified, \"Stream\" can only be set to nil or \"All\".",
        ),
        "timestamps" => (
            "boolean",
            "If true, add an RFC3339 or RFC3339Nano timestamp at the beginning of every line of log output. Defaults to false.",
        ),
        other => return query(other),
    };
    param(name, "query", ty, doc)
}

/// The HTTP methods of a connect subresource's verbs, upstream's order.
fn connect_methods(verbs: &[String]) -> Vec<&'static str> {
    let has = |v: &str| verbs.iter().any(|x| x == v);
    let mut out = Vec::new();
    if has("delete") {
        out.push("delete");
    }
    if has("get") {
        out.push("get");
    }
    if has("get") && has("update") {
        out.extend(["head", "options"]);
    }
    if has("patch") {
        out.push("patch");
    }
    if has("create") {
        out.push("post");
    }
    if has("update") {
        out.push("put");
    }
    out
}

/// Paths of the subresources a kubelet serves (`log`, and the "connect" ones: `exec`,
/// `attach`, `portforward`, `proxy`), shaped as upstream's: string answers, query parameters
/// on the path item. Returns false for other subresources.
fn connect_subresource(
    paths: &mut Paths,
    naming: &Naming,
    r: &ResourceInfo,
    sub: &minik8s_api::registry::Subresource,
    item_params: &[Value],
    gvk: &Gvk,
) -> bool {
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let ns_segment = if r.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let prefix = format!("/{}", group_version_path(&r.group, &r.version));
    let item = format!("{prefix}{ns_segment}/{}/{{name}}", r.plural);
    let path_params = || -> Vec<Value> {
        item_params
            .iter()
            .filter(|p| p["in"] == "path")
            .cloned()
            .collect()
    };
    let string_answer = |types: &[&str]| {
        let mut content = Map::new();
        for t in types {
            content.insert(t.to_string(), json!({"schema": {"type": "string"}}));
        }
        json!({"200": {"description": "OK", "content": content}, "401": {"description": "Unauthorized"}})
    };
    if sub.name == "log" && sub.kind == r.kind {
        let mut params = path_params();
        for q in [
            "container",
            "follow",
            "insecureSkipTLSVerifyBackend",
            "limitBytes",
            "pretty",
            "previous",
            "sinceSeconds",
            "stream",
            "tailLines",
            "timestamps",
        ] {
            params.push(connect_query(q));
        }
        let op = json!({
            "description": format!("read log of the specified {}", r.kind),
            "operationId": format!("read{}{scope}{}Log", naming.gv, r.kind),
            "tags": [naming.tag],
            "responses": string_answer(&[
                "application/json",
                "application/vnd.kubernetes.protobuf",
                "application/yaml",
                "text/plain",
            ]),
            "x-kubernetes-action": "get",
            "x-kubernetes-group-version-kind": gvk.extension(),
        });
        paths.op(&format!("{item}/log"), &params, "get", op);
        return true;
    }
    let query_names: &[&str] = match sub.kind.as_str() {
        "PodExecOptions" => &["command", "container", "stderr", "stdin", "stdout", "tty"],
        "PodAttachOptions" => &["container", "stderr", "stdin", "stdout", "tty"],
        "PodPortForwardOptions" => &["ports"],
        "NodeProxyOptions" | "PodProxyOptions" | "ServiceProxyOptions" => &["path"],
        _ => return false,
    };
    let sub_gvk = Gvk::new(&sub.group, &sub.version, &sub.kind);
    let title = capitalize(&sub.name);
    let methods = connect_methods(&sub.verbs);
    let op = |method: &str, with_path: bool| {
        json!({
            "description": format!(
                "connect {} requests to {} of {}",
                method.to_uppercase(),
                sub.name,
                r.kind
            ),
            "operationId": format!(
                "connect{}{}{scope}{}{title}{}",
                naming.gv,
                capitalize(method),
                r.kind,
                if with_path { "WithPath" } else { "" }
            ),
            "tags": [naming.tag],
            "responses": string_answer(&["*/*"]),
            "x-kubernetes-action": "connect",
            "x-kubernetes-group-version-kind": sub_gvk.extension(),
        })
    };
    let mut params = path_params();
    for q in query_names {
        params.push(connect_query(q));
    }
    let path = format!("{item}/{}", sub.name);
    for m in &methods {
        paths.op(&path, &params, m, op(m, false));
    }
    if query_names == ["path"] {
        // `.../proxy/{path}`: the path is a path parameter there.
        let mut params = path_params();
        params.push(param("path", "path", "string", "path to the resource"));
        let with_path = format!("{path}/{{path}}");
        for m in &methods {
            paths.op(&with_path, &params, m, op(m, true));
        }
    }
    true
}

/// The definitions `gvk`'s schema reaches, finished as served documents finish them (upstream
/// extensions added), and the name of the kind's own definition. Strategic merge patch and
/// server-side apply read list and map types from them.
pub fn kind_definitions(gvk: &Gvk, schema: Option<&KindSchema>) -> (String, Map<String, Value>) {
    let mut schemas = BTreeMap::new();
    if let Some(s) = schema {
        schemas.insert(gvk.clone(), s.clone());
    }
    let mut b = Builder::new(&schemas);
    let name = b.kind(gvk);
    (name, b.definitions())
}
