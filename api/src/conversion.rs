//! Kinds served at more than one version. Upstream stores an object once, in one version, and
//! its registry strategy works on the internal form whatever version a request used: a client
//! of autoscaling/v1 and one of autoscaling/v2 see one HorizontalPodAutoscaler, defaulted and
//! validated by one set of rules. Here the stored kind (the hub) is that internal form: a
//! served version converts to the hub and back around each rule, so defaulting, validation,
//! what an update keeps and how the object prints are the hub's and cannot drift apart.
//!
//! What a version cannot express travels in its own form (autoscaling/v1 keeps v2's metrics,
//! behavior and conditions in annotations), so converting to the hub and back loses nothing.

use std::marker::PhantomData;

use jiff::Timestamp;
use k8s_openapi::Metadata;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::ResourceInfo;
use crate::strategy::{GcPolicy, Kind, ScaleView, Strategy};
use crate::table::{self, ColumnDefinition, Row};
use crate::validation::{Errors, FieldError};

/// A version of a kind whose objects are stored, and handled, as another kind: its hub.
pub trait Convertible:
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
    /// The kind objects are stored as, whose rules apply.
    type Hub: Kind;

    /// This version's own defaulting functions, run on the request's form before it converts
    /// (upstream defaults a body in the version it was sent in).
    fn default_fields(&mut self) {}
    /// This version's form of a hub object.
    fn from_hub(hub: &Self::Hub) -> Self;
    /// The hub form; fails on what does not convert (a malformed annotation), which the write
    /// reports as invalid.
    fn to_hub(&self) -> Result<Self::Hub, FieldError>;
}

/// The strategy of a [`Convertible`] version: every rule is the hub's, applied to the hub
/// form of the object. An object that does not convert is left as it is by the rules that
/// change objects; validation then reports why.
pub struct Converted<V> {
    info: ResourceInfo,
    _version: PhantomData<fn() -> V>,
}

impl<V: Convertible> Converted<V> {
    pub fn new(info: ResourceInfo) -> Self {
        Converted {
            info,
            _version: PhantomData,
        }
    }
}

/// Applies `f` to the hub form of `obj` and puts the result back in `obj`'s version.
fn through_hub<V: Convertible>(obj: &mut V, f: impl FnOnce(&mut V::Hub)) {
    if let Ok(mut hub) = obj.to_hub() {
        f(&mut hub);
        *obj = V::from_hub(&hub);
    }
}

/// Applies `f` to the hub forms of `obj` and of the `old` object it replaces.
fn through_hubs<V: Convertible>(obj: &mut V, old: &V, f: impl FnOnce(&mut V::Hub, &V::Hub)) {
    if let (Ok(mut hub), Ok(old)) = (obj.to_hub(), old.to_hub()) {
        f(&mut hub, &old);
        *obj = V::from_hub(&hub);
    }
}

impl<V: Convertible> Strategy for Converted<V> {
    type Object = V;

    fn info(&self) -> &ResourceInfo {
        &self.info
    }
    fn meta<'a>(&self, obj: &'a V) -> &'a ObjectMeta {
        obj.metadata()
    }
    fn meta_mut<'a>(&self, obj: &'a mut V) -> &'a mut ObjectMeta {
        obj.metadata_mut()
    }
    fn default_fields(&self, obj: &mut V) {
        obj.default_fields();
        through_hub(obj, |hub| hub.default_fields());
    }
    fn prepare_create(&self, obj: &mut V) {
        through_hub(obj, |hub| hub.prepare_create());
    }
    fn prepare_update(&self, obj: &mut V, old: &V) {
        through_hubs(obj, old, |hub, old| hub.prepare_update(old));
    }
    fn admit(&self, obj: &mut V) {
        through_hub(obj, |hub| hub.admit());
    }
    fn validate(&self, obj: &V) -> Errors {
        let mut errs = Vec::new();
        match obj.to_hub() {
            Ok(hub) => hub.validate(&mut errs),
            Err(e) => errs.push(e),
        }
        errs
    }
    fn validate_update(&self, obj: &V, old: &V) -> Errors {
        let mut errs = Vec::new();
        match (obj.to_hub(), old.to_hub()) {
            (Ok(hub), Ok(old)) => hub.validate_update(&old, &mut errs),
            (Ok(hub), Err(_)) => hub.validate(&mut errs),
            (Err(e), _) => errs.push(e),
        }
        errs
    }
    fn keep_status(&self, obj: &mut V, old: &V) {
        through_hubs(obj, old, |hub, old| hub.keep_status(old));
    }
    /// A status write keeps the hub's annotations here, not in the registry: the version's
    /// form may carry status in annotations (autoscaling/v1's conditions), which must come
    /// from the new status while every other annotation stays as it was.
    fn keep_spec(&self, obj: &mut V, old: &V) {
        through_hubs(obj, old, |hub, old| {
            hub.keep_spec(old);
            if !V::Hub::STATUS_WRITES_ANNOTATIONS {
                hub.metadata_mut().annotations = old.metadata().annotations.clone();
            }
        });
    }
    fn spec_changed(&self, obj: &V, old: &V) -> Option<bool> {
        let (hub, old) = (obj.to_hub().ok()?, old.to_hub().ok()?);
        hub.spec_changed(&old)
    }
    fn supports_field(&self, field: &str) -> bool {
        V::Hub::FIELDS.contains(&field)
    }
    fn selectable_fields(&self) -> Vec<String> {
        V::Hub::FIELDS.iter().map(|f| f.to_string()).collect()
    }
    fn field(&self, obj: &V, field: &str) -> Option<String> {
        obj.to_hub().ok()?.field(field)
    }
    fn scale(&self, obj: &V) -> Option<ScaleView> {
        obj.to_hub().ok()?.scale()
    }
    fn set_replicas(&self, obj: &mut V, replicas: i32) {
        through_hub(obj, |hub| hub.set_replicas(replicas));
    }
    fn return_deleted_object(&self) -> bool {
        V::Hub::RETURN_DELETED
    }
    fn allow_create_on_update(&self) -> bool {
        V::Hub::CREATE_ON_UPDATE
    }
    fn default_grace_period(&self, obj: &V) -> Option<i64> {
        obj.to_hub().ok()?.default_grace_period()
    }
    fn allow_unconditional_update(&self) -> bool {
        V::Hub::UNCONDITIONAL_UPDATE
    }
    fn gc_policy(&self) -> GcPolicy {
        V::Hub::GC_POLICY
    }
    /// See [`Converted::keep_spec`]: it decides which annotations a status write keeps.
    fn status_writes_annotations(&self) -> bool {
        true
    }
    fn begin_delete(&self, obj: &mut V) -> bool {
        let mut pending = false;
        through_hub(obj, |hub| pending = hub.begin_delete());
        pending
    }
    fn finalized(&self, obj: &V) -> bool {
        obj.to_hub().map_or(true, |hub| hub.finalized())
    }
    fn deletion_forbidden(&self, obj: &V) -> Option<&'static str> {
        obj.to_hub().ok()?.deletion_forbidden()
    }
    fn decode_stored(&self, bytes: &[u8]) -> Result<V, String> {
        V::Hub::from_storage(bytes).map(|hub| V::from_hub(&hub))
    }
    fn encode_stored(&self, obj: &V) -> Result<Vec<u8>, String> {
        obj.to_hub().map_err(|e| e.to_string())?.to_storage()
    }
    fn table_columns(&self) -> Vec<ColumnDefinition> {
        table::columns::<V::Hub>()
    }
    fn table_row(&self, object: &Value, now: Timestamp) -> Result<Row, serde_json::Error> {
        let hub = V::deserialize(object)?
            .to_hub()
            .map_err(serde::de::Error::custom)?;
        Ok(hub.row(now))
    }
}
