//! Per-kind behaviour the generic REST machinery asks for, as upstream's registry strategies:
//! defaulting, validation, what an update may change, which fields selectors can use, and how
//! the kind prints as a Table.
//!
//! Built-in kinds implement [`Kind`] on their k8s-openapi type; [`BuiltIn`] turns that into a
//! [`Strategy`]. Custom resources bring their own (`crd::CustomStrategy` over `CustomObject`).

use std::marker::PhantomData;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::ResourceInfo;
use crate::table::{self, Column, ColumnDefinition, Row};
use crate::validation::Errors;

/// What the scale subresource reads from an object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaleView {
    pub spec_replicas: i32,
    pub status_replicas: i32,
    /// The label selector in query syntax, as `Scale.status.selector`.
    pub selector: Option<String>,
}

/// Upstream's `rest.GarbageCollectionPolicy`: what a delete that names no propagation policy
/// does to dependents, or that the kind takes no part in garbage collection at all (its
/// deletes never get the `orphan` or `foregroundDeletion` finalizer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPolicy {
    DeleteDependents,
    OrphanDependents,
    Unsupported,
}

/// A built-in kind's behaviour, implemented on its k8s-openapi type.
pub trait Kind:
    k8s_openapi::Resource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + PartialEq
    + Send
    + Sync
    + 'static
{
    /// Fields this kind supports in field selectors besides `metadata.name`/`metadata.namespace`.
    const FIELDS: &'static [&'static str] = &[];
    /// Whether DELETE answers with the object (as pods do) rather than a Status.
    const RETURN_DELETED: bool = false;
    /// Whether PUT on a missing object creates it.
    const CREATE_ON_UPDATE: bool = false;
    /// Whether PUT without a resourceVersion overwrites (last write wins) instead of failing.
    const UNCONDITIONAL_UPDATE: bool = true;
    /// The kind's `DefaultGarbageCollectionPolicy` (batch/v1 Jobs orphan, Events opt out).
    const GC_POLICY: GcPolicy = GcPolicy::DeleteDependents;
    /// Whether a status update may change annotations (Deployments: the controller records
    /// the revision annotation through status, as upstream's status strategy allows).
    const STATUS_WRITES_ANNOTATIONS: bool = false;
    /// The columns of the kind's Table, wide ones included: upstream's printer for the kind,
    /// or its default table convertor (`Name`, `Created At`) for kinds it has none for.
    const COLUMNS: &'static [Column] = table::DEFAULT_COLUMNS;

    /// The object's Table row, one cell per column of `COLUMNS`; `now` is the time ages are
    /// measured to.
    fn row(&self, _now: Timestamp) -> Row {
        table::default_row(self.metadata())
    }

    /// Upstream's defaulting functions; run on create and update.
    fn default_fields(&mut self) {}
    /// The strategy's PrepareForCreate: status reset and the like.
    fn prepare_create(&mut self) {}
    /// The strategy's PrepareForUpdate of the main resource: what an update carries over from
    /// the stored object or drops, before defaulting and validation.
    fn prepare_update(&mut self, _old: &Self) {}
    /// Upstream's mutating admission plugins for this kind (plugin/pkg/admission), run on
    /// create and on updates of the main resource, never on subresources.
    fn admit(&mut self) {}
    /// Kind-specific validation; object metadata is validated by the caller.
    fn validate(&self, _errs: &mut Errors) {}
    fn validate_update(&self, _old: &Self, errs: &mut Errors) {
        self.validate(errs)
    }
    /// An update of the main resource keeps what only the status subresource may change.
    fn keep_status(&mut self, _old: &Self) {}
    /// A status update keeps everything but the status.
    fn keep_spec(&mut self, _old: &Self) {}
    /// A write of the `ephemeralcontainers` subresource (pods) keeps everything but them.
    fn keep_all_but_ephemeral_containers(&mut self, _old: &Self) {}
    /// Validation of a write of the `ephemeralcontainers` subresource.
    fn validate_ephemeral_containers_update(&self, _old: &Self, _errs: &mut Errors) {}
    /// `Some(changed)` for kinds whose `metadata.generation` follows spec changes.
    fn spec_changed(&self, _old: &Self) -> Option<bool> {
        None
    }
    /// The value of a field named in `FIELDS`.
    fn field(&self, _name: &str) -> Option<String> {
        None
    }
    fn scale(&self) -> Option<ScaleView> {
        None
    }
    fn set_replicas(&mut self, _replicas: i32) {}
    /// Grace period a delete uses when the client gives none; `None` deletes at once.
    fn default_grace_period(&self) -> Option<i64> {
        None
    }
    /// Marks the object as being deleted; `true` when it must stay until something finalizes
    /// it (a namespace turns Terminating until its content is gone).
    fn begin_delete(&mut self) -> bool {
        false
    }
    /// Whether a deleted object may leave storage once its metadata finalizers are gone.
    fn finalized(&self) -> bool {
        true
    }
    /// Why this object may never be deleted, if so (the `default` namespace).
    fn deletion_forbidden(&self) -> Option<&'static str> {
        None
    }
    /// Decodes the stored form; kinds stored as another version convert here.
    fn from_storage(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
    /// Encodes the stored form.
    fn to_storage(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(self).map_err(|e| e.to_string())
    }
}

/// The per-resource behaviour the generic registry needs.
pub trait Strategy: Send + Sync + 'static {
    type Object: Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync + 'static;

    fn info(&self) -> &ResourceInfo;
    fn meta<'a>(&self, obj: &'a Self::Object) -> &'a ObjectMeta;
    fn meta_mut<'a>(&self, obj: &'a mut Self::Object) -> &'a mut ObjectMeta;
    fn default_fields(&self, obj: &mut Self::Object);
    fn prepare_create(&self, obj: &mut Self::Object);
    fn prepare_update(&self, _obj: &mut Self::Object, _old: &Self::Object) {}
    /// Mutating admission of the main resource on create and update.
    fn admit(&self, _obj: &mut Self::Object) {}
    fn validate(&self, obj: &Self::Object) -> Errors;
    fn validate_update(&self, obj: &Self::Object, old: &Self::Object) -> Errors;
    fn keep_status(&self, obj: &mut Self::Object, old: &Self::Object);
    fn keep_spec(&self, obj: &mut Self::Object, old: &Self::Object);
    /// See [`Kind::keep_all_but_ephemeral_containers`].
    fn keep_all_but_ephemeral_containers(&self, _obj: &mut Self::Object, _old: &Self::Object) {}
    /// See [`Kind::validate_ephemeral_containers_update`].
    fn validate_ephemeral_containers_update(
        &self,
        _obj: &Self::Object,
        _old: &Self::Object,
    ) -> Errors {
        Vec::new()
    }
    fn spec_changed(&self, obj: &Self::Object, old: &Self::Object) -> Option<bool>;
    fn supports_field(&self, field: &str) -> bool;
    /// Every field `supports_field` accepts.
    fn selectable_fields(&self) -> Vec<String>;
    fn field(&self, obj: &Self::Object, field: &str) -> Option<String>;
    fn scale(&self, obj: &Self::Object) -> Option<ScaleView>;
    fn set_replicas(&self, obj: &mut Self::Object, replicas: i32);
    fn return_deleted_object(&self) -> bool;
    fn allow_create_on_update(&self) -> bool;
    fn default_grace_period(&self, obj: &Self::Object) -> Option<i64>;
    fn allow_unconditional_update(&self) -> bool;
    fn gc_policy(&self) -> GcPolicy;
    fn status_writes_annotations(&self) -> bool {
        false
    }
    fn begin_delete(&self, obj: &mut Self::Object) -> bool;
    fn finalized(&self, obj: &Self::Object) -> bool;
    fn deletion_forbidden(&self, obj: &Self::Object) -> Option<&'static str>;
    fn decode_stored(&self, bytes: &[u8]) -> Result<Self::Object, String>;
    fn encode_stored(&self, obj: &Self::Object) -> Result<Vec<u8>, String>;
    /// Drops from a decoded body what the kind does not know (custom resources' pruning by
    /// their schema); built-in kinds lose unknown fields in decoding already.
    fn prune(&self, _obj: &mut Self::Object) {}
    /// The columns of the resource's Table (`kubectl get`), wide ones included.
    fn table_columns(&self) -> Vec<ColumnDefinition>;
    /// One object's Table row, in the order of `table_columns`. Fails only when the object
    /// does not decode as the resource's kind.
    fn table_row(&self, object: &Value, now: Timestamp) -> Result<Row, serde_json::Error>;
    /// The storage key prefix of the resource.
    fn key_root(&self) -> String {
        self.info().key_root()
    }
}

/// The strategy of a built-in kind.
pub struct BuiltIn<K> {
    info: ResourceInfo,
    _kind: PhantomData<fn() -> K>,
}

impl<K: Kind> BuiltIn<K> {
    pub fn new(info: ResourceInfo) -> Self {
        BuiltIn {
            info,
            _kind: PhantomData,
        }
    }
}

impl<K: Kind> Strategy for BuiltIn<K> {
    type Object = K;

    fn info(&self) -> &ResourceInfo {
        &self.info
    }
    fn meta<'a>(&self, obj: &'a K) -> &'a ObjectMeta {
        obj.metadata()
    }
    fn meta_mut<'a>(&self, obj: &'a mut K) -> &'a mut ObjectMeta {
        obj.metadata_mut()
    }
    fn default_fields(&self, obj: &mut K) {
        obj.default_fields()
    }
    fn prepare_create(&self, obj: &mut K) {
        obj.prepare_create()
    }
    fn prepare_update(&self, obj: &mut K, old: &K) {
        obj.prepare_update(old)
    }
    fn admit(&self, obj: &mut K) {
        obj.admit()
    }
    fn validate(&self, obj: &K) -> Errors {
        let mut errs = Vec::new();
        obj.validate(&mut errs);
        errs
    }
    fn validate_update(&self, obj: &K, old: &K) -> Errors {
        let mut errs = Vec::new();
        obj.validate_update(old, &mut errs);
        errs
    }
    fn keep_status(&self, obj: &mut K, old: &K) {
        obj.keep_status(old)
    }
    fn keep_spec(&self, obj: &mut K, old: &K) {
        obj.keep_spec(old)
    }
    fn keep_all_but_ephemeral_containers(&self, obj: &mut K, old: &K) {
        obj.keep_all_but_ephemeral_containers(old)
    }
    fn validate_ephemeral_containers_update(&self, obj: &K, old: &K) -> Errors {
        let mut errs = Vec::new();
        obj.validate_ephemeral_containers_update(old, &mut errs);
        errs
    }
    fn spec_changed(&self, obj: &K, old: &K) -> Option<bool> {
        obj.spec_changed(old)
    }
    fn supports_field(&self, field: &str) -> bool {
        K::FIELDS.contains(&field)
    }
    fn selectable_fields(&self) -> Vec<String> {
        K::FIELDS.iter().map(|f| f.to_string()).collect()
    }
    fn field(&self, obj: &K, field: &str) -> Option<String> {
        obj.field(field)
    }
    fn scale(&self, obj: &K) -> Option<ScaleView> {
        obj.scale()
    }
    fn set_replicas(&self, obj: &mut K, replicas: i32) {
        obj.set_replicas(replicas)
    }
    fn return_deleted_object(&self) -> bool {
        K::RETURN_DELETED
    }
    fn allow_create_on_update(&self) -> bool {
        K::CREATE_ON_UPDATE
    }
    fn default_grace_period(&self, obj: &K) -> Option<i64> {
        obj.default_grace_period()
    }
    fn allow_unconditional_update(&self) -> bool {
        K::UNCONDITIONAL_UPDATE
    }
    fn gc_policy(&self) -> GcPolicy {
        K::GC_POLICY
    }
    fn status_writes_annotations(&self) -> bool {
        K::STATUS_WRITES_ANNOTATIONS
    }
    fn begin_delete(&self, obj: &mut K) -> bool {
        obj.begin_delete()
    }
    fn finalized(&self, obj: &K) -> bool {
        obj.finalized()
    }
    fn deletion_forbidden(&self, obj: &K) -> Option<&'static str> {
        obj.deletion_forbidden()
    }
    fn decode_stored(&self, bytes: &[u8]) -> Result<K, String> {
        K::from_storage(bytes)
    }
    fn encode_stored(&self, obj: &K) -> Result<Vec<u8>, String> {
        obj.to_storage()
    }
    fn table_columns(&self) -> Vec<ColumnDefinition> {
        table::columns::<K>()
    }
    fn table_row(&self, object: &Value, now: Timestamp) -> Result<Row, serde_json::Error> {
        table::row::<K>(object, now)
    }
}

/// Implements `keep_status`, `keep_spec` and generation tracking for a kind with `spec` and `status`.
#[macro_export]
macro_rules! spec_and_status {
    (generation) => {
        $crate::spec_and_status!();
        fn spec_changed(&self, old: &Self) -> Option<bool> {
            Some(self.spec != old.spec)
        }
    };
    () => {
        fn keep_status(&mut self, old: &Self) {
            self.status = old.status.clone();
        }
        fn keep_spec(&mut self, old: &Self) {
            self.spec = old.spec.clone();
        }
    };
}
