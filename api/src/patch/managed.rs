//! `metadata.managedFields` and server-side apply, as upstream's field manager
//! (`k8s.io/apimachinery/pkg/util/managedfields`) and structured-merge-diff's `merge.Updater`
//! do them.
//!
//! Every write records who set which fields: an `Update` entry per manager for create, update
//! and patch, an `Apply` entry per manager for server-side apply. Apply merges the applied
//! configuration into the object, fails with conflicts when it would change fields another
//! manager owns (unless forced), and removes the fields this manager applied before and no
//! longer applies, unless someone else owns them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::fieldpath::{Path, PathElement, Set, path_string};
use super::gozero;
use super::schema::Schema;
use super::typed::{Comparison, Typed, join_errors, values_equal};

/// The annotation `kubectl apply` keeps its last applied configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Update managers kept before the oldest are merged into one.
pub const MAX_UPDATE_MANAGERS: usize = 10;
const ANCIENT_CHANGES: &str = "ancient-changes";
const BEFORE_FIRST_APPLY: &str = "before-first-apply";
const CURRENT_OPERATION: &str = "current-operation";
/// Most bytes all annotations of an object may have.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Who an entry belongs to: manager, operation, and for updates the API version; the
/// subresource for writes through one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManagerId {
    pub manager: String,
    pub operation: Operation,
    /// Empty for appliers, whose identity does not depend on the version they applied.
    pub api_version: String,
    pub subresource: String,
}

#[derive(Serialize)]
struct IdentifierJson<'a> {
    manager: &'a str,
    operation: &'a str,
    #[serde(rename = "apiVersion", skip_serializing_if = "str::is_empty")]
    api_version: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    subresource: &'a str,
}

impl ManagerId {
    fn new(manager: &str, operation: Operation, api_version: &str, subresource: &str) -> Self {
        ManagerId {
            manager: if manager.is_empty() {
                "unknown".into()
            } else {
                manager.to_string()
            },
            operation,
            api_version: if operation == Operation::Apply {
                String::new()
            } else {
                api_version.to_string()
            },
            subresource: subresource.to_string(),
        }
    }

    fn current_operation() -> Self {
        ManagerId {
            manager: CURRENT_OPERATION.into(),
            operation: Operation::Update,
            api_version: String::new(),
            subresource: String::new(),
        }
    }

    /// Upstream's identifier: the entry's JSON without fields, time and (appliers) version.
    pub fn identifier(&self) -> String {
        serde_json::to_string(&IdentifierJson {
            manager: &self.manager,
            operation: self.operation.as_str(),
            api_version: &self.api_version,
            subresource: &self.subresource,
        })
        .unwrap_or_default()
    }

    /// How conflicts name a manager: `"kubectl" with subresource "status" using apps/v1`.
    pub fn describe(&self) -> String {
        let mut s = Value::String(self.manager.clone()).to_string();
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The fields one manager owns, at the version it wrote them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionedSet {
    pub set: Set,
    pub api_version: String,
    pub applied: bool,
}

/// Decoded `metadata.managedFields`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Managed {
    pub fields: BTreeMap<ManagerId, VersionedSet>,
    pub times: BTreeMap<ManagerId, Option<String>>,
}

fn time_seconds(t: Option<&String>) -> i64 {
    t.and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second())
        .unwrap_or(0)
}

impl Managed {
    /// Decodes `metadata.managedFields` (a JSON array).
    pub fn decode(entries: Option<&Value>) -> Result<Managed, String> {
        let mut out = Managed::default();
        let entries = match entries {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Array(a)) => a,
            Some(_) => return Err("managedFields must be a list".into()),
        };
        for (i, e) in entries.iter().enumerate() {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default();
            let operation = match s("operation") {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return Err("operation must be `Apply` or `Update`".into()),
            };
            if s("apiVersion").is_empty() {
                return Err("apiVersion must not be empty".into());
            }
            match s("fieldsType") {
                "FieldsV1" => {}
                "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
                other => {
                    return Err(format!(
                        "invalid fieldsType {other:?} in managed fields entry {i}"
                    ));
                }
            }
            let id = ManagerId {
                manager: s("manager").to_string(),
                operation,
                api_version: if operation == Operation::Apply {
                    String::new()
                } else {
                    s("apiVersion").to_string()
                },
                subresource: s("subresource").to_string(),
            };
            let set = match e.get("fieldsV1") {
                None | Some(Value::Null) => Set::new(),
                Some(v) => Set::from_fields_v1(v)
                    .map_err(|err| format!("error decoding versioned set from entry {i}: {err}"))?,
            };
            out.fields.insert(
                id.clone(),
                VersionedSet {
                    set,
                    api_version: s("apiVersion").to_string(),
                    applied: operation == Operation::Apply,
                },
            );
            out.times.insert(
                id,
                e.get("time").and_then(Value::as_str).map(str::to_string),
            );
        }
        Ok(out)
    }

    /// The `metadata.managedFields` array, sorted as upstream sorts it; `None` when empty.
    pub fn encode(&self) -> Option<Value> {
        if self.fields.is_empty() {
            return None;
        }
        let mut entries: Vec<(&ManagerId, &VersionedSet, Option<&String>)> = self
            .fields
            .iter()
            .map(|(id, vs)| (id, vs, self.times.get(id).and_then(Option::as_ref)))
            .collect();
        entries.sort_by(|a, b| {
            let op = |e: &(&ManagerId, &VersionedSet, Option<&String>)| {
                if e.1.applied {
                    Operation::Apply
                } else {
                    e.0.operation
                }
            };
            op(a)
                .cmp(&op(b))
                .then_with(|| time_seconds(a.2).cmp(&time_seconds(b.2)))
                .then_with(|| a.0.manager.cmp(&b.0.manager))
                .then_with(|| a.1.api_version.cmp(&b.1.api_version))
                .then_with(|| a.0.subresource.cmp(&b.0.subresource))
        });
        let out = entries
            .into_iter()
            .map(|(id, vs, time)| {
                let mut e = Map::new();
                e.insert("manager".into(), id.manager.clone().into());
                let op = if vs.applied {
                    Operation::Apply
                } else {
                    id.operation
                };
                e.insert("operation".into(), op.as_str().into());
                e.insert("apiVersion".into(), vs.api_version.clone().into());
                if let Some(t) = time {
                    e.insert("time".into(), t.clone().into());
                }
                e.insert("fieldsType".into(), "FieldsV1".into());
                e.insert("fieldsV1".into(), vs.set.to_fields_v1());
                if !id.subresource.is_empty() {
                    e.insert("subresource".into(), id.subresource.clone().into());
                }
                Value::Object(e)
            })
            .collect();
        Some(Value::Array(out))
    }
}

/// One field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub manager: ManagerId,
    pub path: Path,
}

/// Why an apply failed, by the status upstream answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyError {
    /// 400.
    BadRequest(String),
    /// 409 with one `FieldManagerConflict` cause per field.
    Conflicts(Vec<Conflict>),
    /// Upstream answers 500 with this message.
    Internal(String),
}

/// The message and the `(message, field)` causes of a conflict error, worded as upstream.
pub fn conflict_message(conflicts: &[Conflict]) -> (String, Vec<(String, String)>) {
    let causes = conflicts
        .iter()
        .map(|c| {
            (
                format!("conflict with {}", c.manager.describe()),
                path_string(&c.path),
            )
        })
        .collect();
    if let [c] = conflicts {
        return (
            format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                c.manager.describe(),
                path_string(&c.path)
            ),
            causes,
        );
    }
    let mut by_manager: BTreeMap<String, (&ManagerId, Vec<&Path>)> = BTreeMap::new();
    for c in conflicts {
        by_manager
            .entry(c.manager.identifier())
            .or_insert_with(|| (&c.manager, Vec::new()))
            .1
            .push(&c.path);
    }
    let mut lines = Vec::new();
    for (manager, paths) in by_manager.values() {
        lines.push(format!("conflicts with {}:", manager.describe()));
        for p in paths {
            lines.push(format!("- {}", path_string(p)));
        }
    }
    (
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        ),
        causes,
    )
}

/// The metadata fields nobody owns.
static STRIP_SET: std::sync::LazyLock<Set> = std::sync::LazyLock::new(strip_set);

fn strip_set() -> Set {
    let m = |p: &[&str]| -> Vec<PathElement> { p.iter().map(|s| PathElement::field(s)).collect() };
    let paths = [
        m(&["apiVersion"]),
        m(&["kind"]),
        m(&["metadata"]),
        m(&["metadata", "name"]),
        m(&["metadata", "namespace"]),
        m(&["metadata", "creationTimestamp"]),
        m(&["metadata", "selfLink"]),
        m(&["metadata", "uid"]),
        m(&["metadata", "clusterName"]),
        m(&["metadata", "generation"]),
        m(&["metadata", "managedFields"]),
        m(&["metadata", "resourceVersion"]),
    ];
    Set::from_paths(paths.iter().map(Vec::as_slice))
}

type Managers = BTreeMap<ManagerId, VersionedSet>;

/// The field manager of one kind (and subresource) for one request.
pub struct FieldManager<'a> {
    pub schema: &'a Schema,
    /// The group version objects are written at: `apps/v1`, `v1`.
    pub api_version: &'a str,
    pub kind: &'a str,
    /// `""`, `status` or `scale`.
    pub subresource: &'a str,
    /// Fields this operation may not change (the strategy resets them): nobody gets them.
    pub reset: Set,
    /// The time written to changed entries (RFC 3339).
    pub now: String,
}

fn metadata(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata").and_then(Value::as_object)
}

fn take_managed_fields(v: &mut Value) -> Option<Value> {
    v.get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("managedFields"))
}

fn set_managed_fields(v: &mut Value, managed: &Managed) {
    let Some(obj) = v.as_object_mut() else { return };
    match managed.encode() {
        Some(mf) => {
            let meta = obj
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert("managedFields".into(), mf);
            }
        }
        None => {
            if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
        }
    }
}

/// An explicit `managedFields: []` (or one empty entry) asks to clear them.
fn is_reset(mf: Option<&Value>) -> bool {
    match mf {
        Some(Value::Array(a)) if a.is_empty() => true,
        Some(Value::Array(a)) if a.len() == 1 => a[0].as_object().is_some_and(|e| {
            e.values().all(|v| {
                v.is_null() || v.as_str() == Some("") || v.as_object().is_some_and(Map::is_empty)
            })
        }),
        _ => false,
    }
}

fn group_version_kind(api_version: &str, kind: &str) -> String {
    match api_version.split_once('/') {
        Some((g, v)) => format!("{g}/{v}, Kind={kind}"),
        None => format!("/{api_version}, Kind={kind}"),
    }
}

fn str_at<'v>(v: &'v Value, path: &[&str]) -> &'v str {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or_default()
}

impl FieldManager<'_> {
    fn typed(&self) -> Typed<'_> {
        Typed::new(self.schema)
    }

    /// `v` as upstream compares it: with the fields Go-typed objects always have.
    fn go(&self, v: &Value) -> Value {
        if gozero::applies(self.schema) {
            gozero::filled(self.schema, v)
        } else {
            v.clone()
        }
    }

    /// Records an update (create, update or patch) by `manager`: `new` gets its
    /// `metadata.managedFields`. `live` is the stored object, `None` on create.
    pub fn update(&self, live: Option<&Value>, new: &mut Value, manager: &str) {
        let empty = Value::Object(Map::new());
        let live_v = live.unwrap_or(&empty);
        let live_managed = || {
            Managed::decode(metadata(live_v).and_then(|m| m.get("managedFields")))
                .unwrap_or_default()
        };
        let managed = if !self.subresource.is_empty() {
            live_managed()
        } else {
            let new_mf = metadata(new).and_then(|m| m.get("managedFields"));
            if is_reset(new_mf) {
                Managed::default()
            } else {
                match Managed::decode(new_mf) {
                    Ok(m) if !m.fields.is_empty() => m,
                    _ => live_managed(),
                }
            }
        };
        take_managed_fields(new);
        let creating = live.is_none() || str_at(live_v, &["metadata", "uid"]).is_empty();
        if managed.fields.is_empty() && !creating {
            // Objects nobody tracked stay untracked until someone applies.
            return;
        }
        let id = ManagerId::new(
            manager,
            Operation::Update,
            self.api_version,
            self.subresource,
        );
        let mut managed = self.record_update(&self.go(live_v), &self.go(new), managed, &id);
        self.cap_update_managers(&mut managed);
        set_managed_fields(new, &managed);
    }

    /// Upstream's managedFieldsUpdater over the update: the changed fields go to `id`, whose
    /// time moves only if it took any. `live` and `new` are as [`FieldManager::go`] gives them.
    fn record_update(
        &self,
        live: &Value,
        new: &Value,
        managed: Managed,
        id: &ManagerId,
    ) -> Managed {
        let Managed {
            fields: managers,
            mut times,
        } = managed;
        let current = ManagerId::current_operation();
        let mut managers = self.updater_update(live, new, managers, &current);
        strip(&mut managers, &current);
        if let Some(vs) = managers.remove(&current) {
            let set = match managers.get(id) {
                Some(prev) => vs.set.union(&prev.set),
                None => vs.set,
            };
            managers.insert(
                id.clone(),
                VersionedSet {
                    set,
                    api_version: vs.api_version,
                    applied: false,
                },
            );
            times.insert(id.clone(), Some(self.now.clone()));
        }
        times.retain(|k, _| managers.contains_key(k));
        Managed {
            fields: managers,
            times,
        }
    }

    fn updater_update(
        &self,
        live: &Value,
        new: &Value,
        managers: Managers,
        workflow: &ManagerId,
    ) -> Managers {
        let (mut managers, compare) =
            match self.update_managers(live, new, managers, workflow, true) {
                Ok(r) => r,
                Err(_) => unreachable!("forced updates have no conflicts"),
            };
        let set = managers
            .get(workflow)
            .map(|vs| vs.set.clone())
            .unwrap_or_default()
            .difference(&compare.removed)
            .union(&compare.modified)
            .union(&compare.added)
            .recursive_difference(&self.reset);
        if set.is_empty() {
            managers.remove(workflow);
        } else {
            managers.insert(
                workflow.clone(),
                VersionedSet {
                    set,
                    api_version: self.api_version.to_string(),
                    applied: false,
                },
            );
        }
        managers
    }

    /// Takes fields changed from `old` to `new` (both as [`FieldManager::go`] gives them)
    /// away from every manager but `workflow`; without `force`, fields other managers own
    /// and that change are conflicts.
    fn update_managers(
        &self,
        old: &Value,
        new: &Value,
        mut managers: Managers,
        workflow: &ManagerId,
        force: bool,
    ) -> Result<(Managers, Comparison), Vec<Conflict>> {
        let mut compare = self.typed().compare(Some(old), Some(new));
        compare.exclude(&self.reset);
        let changed = compare.modified.union(&compare.added);
        let mut conflicts: Vec<(ManagerId, Set)> = Vec::new();
        for (id, vs) in &managers {
            if id == workflow {
                continue;
            }
            let c = vs.set.intersection(&changed);
            if !c.is_empty() {
                conflicts.push((id.clone(), c));
            }
        }
        if !force && !conflicts.is_empty() {
            conflicts.sort_by_key(|(id, _)| id.identifier());
            return Err(conflicts
                .into_iter()
                .flat_map(|(id, set)| {
                    set.paths().into_iter().map(move |path| Conflict {
                        manager: id.clone(),
                        path,
                    })
                })
                .collect());
        }
        for (id, c) in conflicts {
            if let Some(vs) = managers.get_mut(&id) {
                vs.set = vs.set.difference(&c);
            }
        }
        if !compare.removed.is_empty() {
            for (id, vs) in managers.iter_mut() {
                if id != workflow {
                    vs.set = vs.set.difference(&compare.removed);
                }
            }
        }
        managers.retain(|_, vs| !vs.set.is_empty());
        Ok((managers, compare))
    }

    /// More than [`MAX_UPDATE_MANAGERS`] update entries: the oldest merge into one
    /// `ancient-changes` entry per version.
    fn cap_update_managers(&self, managed: &mut Managed) {
        let mut updaters: Vec<ManagerId> = managed
            .fields
            .iter()
            .filter(|(_, vs)| !vs.applied)
            .map(|(id, _)| id.clone())
            .collect();
        if updaters.len() <= MAX_UPDATE_MANAGERS {
            return;
        }
        let secs = |id: &ManagerId| time_seconds(managed.times.get(id).and_then(Option::as_ref));
        updaters.sort_by(|a, b| {
            secs(a)
                .cmp(&secs(b))
                .then_with(|| a.identifier().cmp(&b.identifier()))
        });
        let mut length = updaters.len();
        let mut first_by_version: BTreeMap<String, ManagerId> = BTreeMap::new();
        for id in updaters {
            if length <= MAX_UPDATE_MANAGERS {
                break;
            }
            let Some(vs) = managed.fields.get(&id).cloned() else {
                continue;
            };
            let time = managed.times.get(&id).cloned().flatten();
            let bucket = ManagerId::new(ANCIENT_CHANGES, Operation::Update, &vs.api_version, "");
            match first_by_version.get(&vs.api_version) {
                Some(first) => {
                    if !managed.fields.contains_key(&bucket)
                        && let Some(s) = managed.fields.remove(first)
                    {
                        managed.times.remove(first);
                        managed.fields.insert(bucket.clone(), s);
                    }
                    let merged = managed
                        .fields
                        .get(&bucket)
                        .map(|b| b.set.union(&vs.set))
                        .unwrap_or_else(|| vs.set.clone());
                    managed.fields.insert(
                        bucket.clone(),
                        VersionedSet {
                            set: merged,
                            api_version: vs.api_version.clone(),
                            applied: false,
                        },
                    );
                    managed.fields.remove(&id);
                    managed.times.remove(&id);
                    managed.times.insert(bucket, time);
                    length -= 1;
                }
                None => {
                    first_by_version.insert(vs.api_version.clone(), id);
                }
            }
        }
    }

    /// Server-side apply of `config` by `manager`: the new object, with its
    /// `metadata.managedFields`. `live` is the stored object, `None` when it does not exist.
    pub fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, ApplyError> {
        let empty = Value::Object(Map::new());
        let live_v = live.unwrap_or(&empty);
        let managed = Managed::decode(metadata(live_v).and_then(|m| m.get("managedFields")))
            .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?;
        let config_gv = str_at(config, &["apiVersion"]);
        let config_kind = str_at(config, &["kind"]);
        if config_gv != self.api_version || config_kind != self.kind {
            return Err(ApplyError::BadRequest(format!(
                "invalid object type: {}",
                group_version_kind(config_gv, config_kind)
            )));
        }
        let result = match self.apply_once(live_v, config, manager, force, managed.clone()) {
            Err(ApplyError::Conflicts(conflicts)) if manager == "kubectl" => {
                // Moving from client-side apply: fields the last-applied annotation claims
                // and that still hold its values are not conflicts.
                match self.allowed_from_last_applied(live_v) {
                    Some(allowed) => {
                        let rest: Vec<Conflict> = conflicts
                            .iter()
                            .filter(|c| !allowed.has(&c.path))
                            .cloned()
                            .collect();
                        if rest.is_empty() {
                            self.apply_once(live_v, config, manager, true, managed)
                        } else {
                            Err(ApplyError::Conflicts(rest))
                        }
                    }
                    None => Err(ApplyError::Conflicts(conflicts)),
                }
            }
            other => other,
        };
        let (mut object, managed) = result?;
        if manager == "kubectl" && has_last_applied(&object) {
            set_last_applied(&mut object, &build_last_applied(config));
        }
        set_managed_fields(&mut object, &managed);
        Ok(object)
    }

    fn apply_once(
        &self,
        live: &Value,
        config: &Value,
        manager: &str,
        force: bool,
        mut managed: Managed,
    ) -> Result<(Value, Managed), ApplyError> {
        if managed.fields.is_empty() {
            // Someone's fields before the first apply: owned by `before-first-apply`.
            let id = ManagerId::new(
                BEFORE_FIRST_APPLY,
                Operation::Update,
                self.api_version,
                self.subresource,
            );
            let empty = self.go(&Value::Object(Map::new()));
            managed = self.record_update(&empty, &self.go(live), managed, &id);
        }
        let id = ManagerId::new(
            manager,
            Operation::Apply,
            self.api_version,
            self.subresource,
        );
        let config_gv = str_at(config, &["apiVersion"]);
        if config_gv != self.api_version {
            return Err(ApplyError::BadRequest(format!(
                "Incorrect version specified in apply patch. Specified patch version: {config_gv}, expected: {}",
                self.api_version
            )));
        }
        if metadata(config)
            .and_then(|m| m.get("managedFields"))
            .is_some_and(|v| !v.is_null())
        {
            return Err(ApplyError::BadRequest(
                "metadata.managedFields must be nil".into(),
            ));
        }
        let errs = self.typed().validate(config, false);
        if !errs.is_empty() {
            return Err(ApplyError::Internal(format!(
                "failed to create typed patch object ({}/{}; {}): {}",
                str_at(config, &["metadata", "namespace"]),
                str_at(config, &["metadata", "name"]),
                group_version_kind(config_gv, str_at(config, &["kind"])),
                join_errors(&errs)
            )));
        }
        let Managed {
            fields: managers,
            mut times,
        } = managed;
        let (new, mut managers) = self
            .updater_apply(live, config, managers, &id, force)
            .map_err(ApplyError::Conflicts)?;
        strip(&mut managers, &id);
        let object = match new {
            Some(new) => {
                times.insert(id.clone(), Some(self.now.clone()));
                new
            }
            None => {
                let mut o = live.clone();
                take_managed_fields(&mut o);
                o
            }
        };
        times.retain(|k, _| managers.contains_key(k));
        Ok((
            object,
            Managed {
                fields: managers,
                times,
            },
        ))
    }

    /// structured-merge-diff's `Updater.Apply`: the merged object (`None` when nothing
    /// changes) and the new owners.
    fn updater_apply(
        &self,
        live: &Value,
        config: &Value,
        mut managers: Managers,
        id: &ManagerId,
        force: bool,
    ) -> Result<(Option<Value>, Managers), Vec<Conflict>> {
        let typed = self.typed();
        let merged = typed.merge(live, config);
        let last = managers.get(id).map(|vs| vs.set.clone());
        let set = typed.to_field_set(config).recursive_difference(&self.reset);
        managers.insert(
            id.clone(),
            VersionedSet {
                set,
                api_version: self.api_version.to_string(),
                applied: true,
            },
        );
        let new = match last {
            Some(last) if !last.is_empty() => self.prune(&merged, &managers, &last),
            _ => merged,
        };
        let (managers, _) =
            self.update_managers(&self.go(live), &self.go(&new), managers, id, force)?;
        if values_equal(live, &new) {
            return Ok((None, managers));
        }
        Ok((Some(new), managers))
    }

    /// Removes what the applier applied last time and no longer applies, unless another
    /// manager (or the new configuration) owns it.
    fn prune(&self, merged: &Value, managers: &Managers, last: &Set) -> Value {
        let typed = self.typed();
        let last = typed.with_named_fields(last);
        let pruned = typed.remove_items(merged, &last);
        // Add back what anyone owns.
        let managed_all = managers
            .values()
            .fold(Set::new(), |acc, vs| acc.union(&vs.set));
        let merged_set = typed.with_named_fields(&typed.to_field_set(merged));
        let pruned_set = typed.with_named_fields(&typed.to_field_set(&pruned));
        let keep = pruned_set.union(&typed.with_named_fields(&managed_all));
        let pruned = typed.remove_items(merged, &merged_set.difference(&keep));
        // Remove only what this applier owned.
        let pruned_set = typed.with_named_fields(&typed.to_field_set(&pruned));
        typed.remove_items(
            merged,
            &merged_set.difference(&pruned_set).intersection(&last),
        )
    }

    /// Fields the last-applied annotation claims with the values the object still has.
    fn allowed_from_last_applied(&self, live: &Value) -> Option<Set> {
        let text = metadata(live)?
            .get("annotations")?
            .get(LAST_APPLIED)?
            .as_str()
            .filter(|s| !s.is_empty())?;
        let last: Value = serde_json::from_str(text).ok()?;
        if str_at(&last, &["apiVersion"]) != self.api_version {
            return None;
        }
        let typed = self.typed();
        if !typed.validate(&last, false).is_empty() {
            return None;
        }
        let set = typed.to_field_set(&last);
        let c = typed.compare(Some(&last), Some(&self.go(live)));
        Some(
            set.difference(&c.modified)
                .difference(&c.added)
                .difference(&c.removed),
        )
    }
}

fn strip(managers: &mut Managers, id: &ManagerId) {
    if let Some(vs) = managers.get_mut(id) {
        vs.set = vs.set.difference(&STRIP_SET);
        if vs.set.is_empty() {
            managers.remove(id);
        }
    }
}

fn has_last_applied(v: &Value) -> bool {
    metadata(v)
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// The applied configuration as kubectl's annotation holds it: JSON without the annotation.
fn build_last_applied(config: &Value) -> String {
    let mut c = config.clone();
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        let now_empty = meta
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            .map(|a| {
                a.remove(LAST_APPLIED);
                a.is_empty()
            })
            .unwrap_or(false);
        if now_empty {
            meta.remove("annotations");
        }
    }
    format!("{c}\n")
}

fn set_last_applied(v: &mut Value, value: &str) {
    let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    let Some(a) = annotations.as_object_mut() else {
        return;
    };
    a.insert(LAST_APPLIED.into(), value.into());
    let size: usize = a
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        a.remove(LAST_APPLIED);
    }
}

/// Upstream's `IgnoreManagedFieldsTimestampsTransformer`: when `new` differs from `old` only
/// in the times of its managedFields entries, it takes the old times (the write is a no-op).
pub fn keep_unchanged_timestamps(old: &Value, new: &mut Value) {
    let (Some(old_mf), Some(new_mf)) = (
        metadata(old)
            .and_then(|m| m.get("managedFields"))
            .and_then(Value::as_array),
        metadata(new)
            .and_then(|m| m.get("managedFields"))
            .and_then(Value::as_array),
    ) else {
        return;
    };
    if old_mf.len() != new_mf.len() || new_mf.is_empty() {
        return;
    }
    let times_equal = old_mf
        .iter()
        .zip(new_mf)
        .all(|(a, b)| a.get("time") == b.get("time"));
    if times_equal {
        return;
    }
    let without_time = |e: &Value| {
        let mut e = e.clone();
        if let Some(m) = e.as_object_mut() {
            m.remove("time");
        }
        e
    };
    if !old_mf
        .iter()
        .zip(new_mf)
        .all(|(a, b)| without_time(a) == without_time(b))
    {
        return;
    }
    let old_times: Vec<Option<Value>> = old_mf.iter().map(|e| e.get("time").cloned()).collect();
    let without_version = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        v
    };
    let mut candidate = without_version(new);
    if let Some(mf) = candidate
        .get_mut("metadata")
        .and_then(|m| m.get_mut("managedFields"))
        .and_then(Value::as_array_mut)
    {
        for (e, t) in mf.iter_mut().zip(&old_times) {
            if let Some(e) = e.as_object_mut() {
                match t {
                    Some(t) => e.insert("time".into(), t.clone()),
                    None => e.remove("time"),
                };
            }
        }
    }
    if candidate == without_version(old)
        && let Some(mf) = new
            .get_mut("metadata")
            .and_then(|m| m.get_mut("managedFields"))
    {
        *mf = candidate["metadata"]["managedFields"].take();
    }
}

#[cfg(test)]
mod tests;
