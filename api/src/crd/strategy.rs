//! The strategy of a custom resource at one served version: upstream's
//! `customResourceStrategy` and `statusStrategy` over [`CustomObject`].

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::jsonpath::{JsonPath, go_print};
use super::names::{ESTABLISHED, NAMES_ACCEPTED, TERMINATING, is_true};
use super::object::CustomObject;
use super::printer::Columns;
use super::schema::{self, Schema};
use super::validate::{self, bad_value};
use crate::registry::{ResourceInfo, Subresource};
use crate::strategy::{ScaleView, Strategy};
use crate::table::{ColumnDefinition, Row};
use crate::validation::{ErrorKind, Errors, FieldError, NameRule};

/// Upstream's discovery verbs of a custom resource, in upstream's order.
const VERBS: &[&str] = &[
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];
/// The verbs while the CRD is being deleted.
const TERMINATING_VERBS: &[&str] = &["delete", "deletecollection", "get", "list", "watch"];

/// Where the scale subresource reads and writes.
#[derive(Clone, Debug)]
struct ScalePaths {
    spec: String,
    status: String,
    selector: Option<String>,
}

fn path_fields(path: &str) -> Vec<&str> {
    path.trim_start_matches('.').split('.').collect()
}

fn nested<'a>(m: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let fields = path_fields(path);
    let (last, parents) = fields.split_last()?;
    let mut cur = m;
    for f in parents {
        cur = cur.get(*f)?.as_object()?;
    }
    cur.get(*last)
}

fn set_nested(m: &mut Map<String, Value>, path: &str, value: Value) {
    let fields = path_fields(path);
    let Some((last, parents)) = fields.split_last() else {
        return;
    };
    let mut cur = m;
    for f in parents {
        let entry = cur
            .entry(f.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        cur = entry.as_object_mut().expect("made an object");
    }
    cur.insert(last.to_string(), value);
}

/// An int64 as upstream's `NestedInt64` reads it (integral floats count).
fn as_int(v: &Value) -> Result<i64, String> {
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
        .ok_or_else(|| {
            let ty = match v {
                Value::String(_) => "string",
                Value::Bool(_) => "bool",
                Value::Number(_) => "float64",
                Value::Array(_) => "[]interface {}",
                Value::Object(_) => "map[string]interface {}",
                Value::Null => "<nil>",
            };
            format!("is of the type {ty}, expected int64")
        })
}

/// The behaviour of one custom resource version.
pub struct CustomStrategy {
    info: ResourceInfo,
    api_version: String,
    storage_api_version: String,
    schema: Option<Arc<Schema>>,
    preserve_unknown: bool,
    scale: Option<ScalePaths>,
    columns: Arc<Columns>,
    selectable: Vec<(String, JsonPath)>,
}

impl CustomStrategy {
    /// The strategy of `version` of `crd`, under its accepted names.
    pub fn new(crd: &CustomResourceDefinition, version: &str) -> Result<CustomStrategy, String> {
        let spec = &crd.spec;
        let v = spec
            .versions
            .iter()
            .find(|v| v.name == version)
            .ok_or_else(|| format!("version {version} is not defined"))?;
        let storage = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
            .unwrap_or_else(|| version.to_string());
        let names = crd
            .status
            .as_ref()
            .and_then(|s| s.accepted_names.clone())
            .filter(|n| !n.plural.is_empty() && !n.kind.is_empty())
            .ok_or_else(|| "no accepted names".to_string())?;
        let terminating = crd.metadata.deletion_timestamp.is_some() || is_true(crd, TERMINATING);
        let verbs = if terminating {
            TERMINATING_VERBS
        } else {
            VERBS
        };
        let subresources = v.subresources.clone().unwrap_or_default();
        let parent = |name: &str, kind: &str, group: &str, ver: &str| Subresource {
            name: name.into(),
            kind: kind.into(),
            group: group.into(),
            version: ver.into(),
            verbs: ["get", "patch", "update"].map(String::from).to_vec(),
        };
        let mut subs = Vec::new();
        if subresources.status.is_some() {
            subs.push(parent("status", &names.kind, &spec.group, version));
        }
        if subresources.scale.is_some() {
            subs.push(parent("scale", "Scale", "autoscaling", "v1"));
        }
        let info = ResourceInfo {
            group: spec.group.clone(),
            version: version.to_string(),
            kind: names.kind.clone(),
            list_kind: names
                .list_kind
                .clone()
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| format!("{}List", names.kind)),
            plural: names.plural.clone(),
            singular: names
                .singular
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| names.kind.to_lowercase()),
            namespaced: spec.scope == "Namespaced",
            short_names: names.short_names.clone().unwrap_or_default(),
            categories: names.categories.clone().unwrap_or_default(),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            subresources: subs,
            name_rule: NameRule::Dns1123Subdomain,
        };
        let schema = v
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok())
            .map(|s| Arc::new(Schema::parse(&s)));
        let selectable = v
            .selectable_fields
            .iter()
            .flatten()
            .filter_map(|f| {
                let path = JsonPath::parse(&f.json_path).ok()?;
                Some((f.json_path.trim_start_matches('.').to_string(), path))
            })
            .collect();
        Ok(CustomStrategy {
            api_version: info.api_version(),
            storage_api_version: format!("{}/{storage}", spec.group),
            info,
            schema,
            preserve_unknown: spec.preserve_unknown_fields.unwrap_or(false),
            scale: subresources.scale.map(|s| ScalePaths {
                spec: s.spec_replicas_path,
                status: s.status_replicas_path,
                selector: s.label_selector_path.filter(|p| !p.is_empty()),
            }),
            columns: Arc::new(Columns::new(
                v.additional_printer_columns.as_deref().unwrap_or_default(),
            )),
            selectable,
        })
    }

    /// Whether the status subresource is served.
    pub fn has_status(&self) -> bool {
        self.info.subresource("status").is_some()
    }

    /// The spec replicas path of the scale subresource, and whether `obj` has a value there.
    pub fn spec_replicas(&self, obj: &CustomObject) -> Option<(String, bool)> {
        let scale = self.scale.as_ref()?;
        Some((
            scale.spec.clone(),
            nested(&obj.content, &scale.spec).is_some(),
        ))
    }

    fn prune_and_default(&self, obj: &mut CustomObject) {
        schema::prune_content(
            &mut obj.content,
            self.schema.as_deref(),
            self.preserve_unknown,
        );
        if let Some(s) = &self.schema {
            schema::default_content(&mut obj.content, s);
        }
    }

    fn check(&self, obj: &CustomObject, old: Option<&CustomObject>) -> Errors {
        let mut errs = Vec::new();
        if obj.kind() != Some(self.info.kind.as_str()) {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &crate::validation::Path::new("kind"),
                Some(bad_value(
                    &obj.content.get("kind").cloned().unwrap_or_default(),
                )),
                format!("must be {}", self.info.kind),
            ));
        }
        if obj.api_version() != Some(self.api_version.as_str()) {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &crate::validation::Path::new("apiVersion"),
                Some(bad_value(
                    &obj.content.get("apiVersion").cloned().unwrap_or_default(),
                )),
                format!("must be {}", self.api_version),
            ));
        }
        if !errs.is_empty() {
            return errs;
        }
        if let Some(s) = &self.schema {
            let value = obj.to_value();
            let old_value = old.map(CustomObject::to_value);
            errs.extend(validate::validate(&value, s, old_value.as_ref()));
            errs.extend(super::cel::validate(&value, s, old_value.as_ref()));
            validate::validate_embedded(&value, s, &mut errs);
            let mut list_errs = Vec::new();
            validate::validate_list_types(&value, s, &mut list_errs);
            if !list_errs.is_empty() {
                // Ratcheting: an old object with the same problems keeps being accepted.
                let old_ok = old_value.as_ref().is_none_or(|o| {
                    let mut e = Vec::new();
                    validate::validate_list_types(o, s, &mut e);
                    e.is_empty()
                });
                if old_ok {
                    errs.extend(list_errs);
                }
            }
        }
        if let Some(scale) = &self.scale {
            let mut replicas = |path: &str| {
                let Some(v) = nested(&obj.content, path) else {
                    return;
                };
                let field = crate::validation::Path::new(path);
                match as_int(v) {
                    Err(e) => errs.push(FieldError::new(
                        ErrorKind::Invalid,
                        &field,
                        Some("0".into()),
                        format!(
                            ".{} accessor error: {} {e}",
                            path.trim_start_matches('.'),
                            go_print(v)
                        ),
                    )),
                    Ok(n) if n < 0 => errs.push(FieldError::new(
                        ErrorKind::Invalid,
                        &field,
                        Some(n.to_string()),
                        "should be a non-negative integer",
                    )),
                    Ok(n) if n > i32::MAX as i64 => errs.push(FieldError::new(
                        ErrorKind::Invalid,
                        &field,
                        Some(n.to_string()),
                        format!("should be less than or equal to {}", i32::MAX),
                    )),
                    Ok(_) => {}
                }
            };
            replicas(&scale.spec);
            replicas(&scale.status);
            if let Some(sel) = &scale.selector
                && let Some(v) = nested(&obj.content, sel)
                && !v.is_string()
            {
                errs.push(FieldError::new(
                    ErrorKind::Invalid,
                    &crate::validation::Path::new(sel),
                    Some(go_quote_empty()),
                    format!(
                        ".{} accessor error: {} is of the type {}, expected string",
                        sel.trim_start_matches('.'),
                        go_print(v),
                        match v {
                            Value::Number(n) if n.is_f64() => "float64",
                            Value::Number(_) => "int64",
                            Value::Bool(_) => "bool",
                            Value::Array(_) => "[]interface {}",
                            Value::Object(_) => "map[string]interface {}",
                            _ => "<nil>",
                        }
                    ),
                ));
            }
        }
        errs
    }
}

fn go_quote_empty() -> String {
    "\"\"".into()
}

/// Whether `crd` is served at all: its names are accepted (or it was established before).
pub fn is_served(crd: &CustomResourceDefinition) -> bool {
    is_true(crd, NAMES_ACCEPTED) || is_true(crd, ESTABLISHED)
}

impl Strategy for CustomStrategy {
    type Object = CustomObject;

    fn info(&self) -> &ResourceInfo {
        &self.info
    }
    fn meta<'a>(&self, obj: &'a CustomObject) -> &'a ObjectMeta {
        &obj.metadata
    }
    fn meta_mut<'a>(&self, obj: &'a mut CustomObject) -> &'a mut ObjectMeta {
        &mut obj.metadata
    }
    fn default_fields(&self, obj: &mut CustomObject) {
        self.prune_and_default(obj);
    }
    fn prune(&self, obj: &mut CustomObject) {
        schema::prune_content(
            &mut obj.content,
            self.schema.as_deref(),
            self.preserve_unknown,
        );
    }
    fn prepare_create(&self, obj: &mut CustomObject) {
        if self.has_status() {
            obj.content.remove("status");
        }
    }
    fn validate(&self, obj: &CustomObject) -> Errors {
        self.check(obj, None)
    }
    fn validate_update(&self, obj: &CustomObject, old: &CustomObject) -> Errors {
        self.check(obj, Some(old))
    }
    fn keep_status(&self, obj: &mut CustomObject, old: &CustomObject) {
        match old.content.get("status") {
            Some(s) => {
                obj.content.insert("status".into(), s.clone());
            }
            None => {
                obj.content.remove("status");
            }
        }
    }
    fn keep_spec(&self, obj: &mut CustomObject, old: &CustomObject) {
        let status = obj.content.remove("status");
        obj.content = old.content.clone();
        match status {
            Some(s) => {
                obj.content.insert("status".into(), s);
            }
            None => {
                obj.content.remove("status");
            }
        }
    }
    fn spec_changed(&self, obj: &CustomObject, old: &CustomObject) -> Option<bool> {
        // Any change outside metadata counts, as upstream's copyNonMetadata comparison.
        Some(obj.content != old.content)
    }
    fn supports_field(&self, field: &str) -> bool {
        self.selectable.iter().any(|(name, _)| name == field)
    }
    fn selectable_fields(&self) -> Vec<String> {
        self.selectable
            .iter()
            .map(|(name, _)| name.clone())
            .collect()
    }
    fn field(&self, obj: &CustomObject, field: &str) -> Option<String> {
        let (_, path) = self.selectable.iter().find(|(name, _)| name == field)?;
        let value = obj.to_value();
        Some(
            path.first(&value)
                .filter(|v| !v.is_null())
                .map(go_print)
                .unwrap_or_default(),
        )
    }
    fn scale(&self, obj: &CustomObject) -> Option<ScaleView> {
        let scale = self.scale.as_ref()?;
        let int = |path: &str| {
            nested(&obj.content, path)
                .and_then(|v| as_int(v).ok())
                .unwrap_or(0) as i32
        };
        Some(ScaleView {
            spec_replicas: int(&scale.spec),
            status_replicas: int(&scale.status),
            // Scale.status.selector is omitted when empty, as Go's omitempty does.
            selector: scale
                .selector
                .as_ref()
                .and_then(|p| nested(&obj.content, p))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        })
    }
    fn set_replicas(&self, obj: &mut CustomObject, replicas: i32) {
        if let Some(scale) = &self.scale {
            set_nested(&mut obj.content, &scale.spec, Value::from(replicas as i64));
        }
    }
    fn return_deleted_object(&self) -> bool {
        false
    }
    fn allow_create_on_update(&self) -> bool {
        false
    }
    fn default_grace_period(&self, _obj: &CustomObject) -> Option<i64> {
        None
    }
    fn allow_unconditional_update(&self) -> bool {
        false
    }
    fn gc_policy(&self) -> crate::strategy::GcPolicy {
        crate::strategy::GcPolicy::DeleteDependents
    }
    fn begin_delete(&self, _obj: &mut CustomObject) -> bool {
        false
    }
    fn finalized(&self, _obj: &CustomObject) -> bool {
        true
    }
    fn deletion_forbidden(&self, _obj: &CustomObject) -> Option<&'static str> {
        None
    }
    fn decode_stored(&self, bytes: &[u8]) -> Result<CustomObject, String> {
        let mut obj: CustomObject = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        // Conversion "None": reading through another version only rewrites apiVersion.
        obj.set_api_version(&self.api_version);
        self.prune_and_default(&mut obj);
        Ok(obj)
    }
    fn encode_stored(&self, obj: &CustomObject) -> Result<Vec<u8>, String> {
        let mut stored = obj.clone();
        stored.set_api_version(&self.storage_api_version);
        serde_json::to_vec(&stored).map_err(|e| e.to_string())
    }
    fn table_columns(&self) -> Vec<ColumnDefinition> {
        self.columns.definitions()
    }
    fn table_row(&self, object: &Value, now: Timestamp) -> Result<Row, serde_json::Error> {
        Ok(self.columns.row(object, now))
    }
    fn key_root(&self) -> String {
        format!("/registry/{}/{}/", self.info.group, self.info.plural)
    }
}
