//! Admission that lives outside the server's own code: upstream's MutatingAdmissionWebhook,
//! ValidatingAdmissionPolicy and ValidatingAdmissionWebhook plugins, which see every kind the
//! same way, as JSON. The registry calls them at upstream's points of its write paths: the
//! mutating half after the server's own mutating admission, then validation again when it
//! changed anything, then the validating half just before the quota is charged.

use std::sync::Arc;

use minik8s_api::ResourceInfo;
use minik8s_api::strategy::Strategy;
use minik8s_api::validation::{validate_object_meta, validate_object_meta_update};
use minik8s_api::{ApiError, ApiError as E};
use serde_json::Value;

use super::generic::{GenericRegistry, Part};

/// admission.Operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// What a write is, as admission sees it (upstream's admission.Attributes, less the user,
/// which the admission reads from the request it serves).
pub struct Attributes<'a> {
    pub operation: Operation,
    pub info: &'a ResourceInfo,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// `status` for writes of the status subresource.
    pub subresource: Option<&'a str>,
    /// The group, version and kind of the object when it is not the resource's own (a
    /// subresource's Scale, Eviction, Binding, TokenRequest, a CONNECT's options).
    pub kind: Option<[&'a str; 3]>,
    /// The stored object an update or delete replaces.
    pub old: Option<&'a Value>,
    pub dry_run: bool,
}

#[async_trait::async_trait]
pub trait ExternalAdmission: Send + Sync + 'static {
    /// Whether anything is configured that writes of `info` would meet now; when nothing
    /// is, the object is not turned into JSON at all.
    async fn active(&self, _info: &ResourceInfo) -> bool {
        true
    }
    /// Mutating admission: may change `obj`.
    async fn mutate(&self, attrs: &Attributes<'_>, obj: &mut Value) -> Result<(), ApiError>;
    /// Validating admission of the object as it will be stored (`None` for a delete).
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>) -> Result<(), ApiError>;
}

pub type DynExternalAdmission = Arc<dyn ExternalAdmission>;

/// The server's external admission, as settings carry it.
#[derive(Clone)]
pub struct ExternalHandle(pub DynExternalAdmission);

impl std::fmt::Debug for ExternalHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExternalAdmission")
    }
}

fn to_json<T: serde::Serialize>(obj: &T) -> Result<Value, ApiError> {
    serde_json::to_value(obj).map_err(E::internal)
}

impl<S: Strategy> GenericRegistry<S> {
    /// The external admission, when it has anything to do for this resource now.
    async fn active_external(&self) -> Option<DynExternalAdmission> {
        let ext = self.external.clone()?;
        ext.active(self.strategy.info()).await.then_some(ext)
    }

    fn attributes<'a>(
        &'a self,
        operation: Operation,
        obj: &'a S::Object,
        part: Part,
        old: Option<&'a Value>,
        dry_run: bool,
    ) -> Attributes<'a> {
        let meta = self.strategy.meta(obj);
        Attributes {
            operation,
            info: self.strategy.info(),
            namespace: meta.namespace.as_deref(),
            name: meta.name.as_deref().unwrap_or_default(),
            subresource: part.subresource(),
            kind: None,
            old,
            dry_run,
        }
    }

    /// Whether external admission has anything to do for this resource now.
    pub async fn admits_externally(&self) -> bool {
        self.active_external().await.is_some()
    }

    /// External admission of a request to a subresource whose object is not the resource's
    /// own (`kind`: a Scale, an Eviction, a Binding, a TokenRequest, a CONNECT's options):
    /// mutating, then validating, `object` as the client sent it; `old` is what an update
    /// replaces.
    #[allow(clippy::too_many_arguments)]
    pub async fn admit_subresource<T>(
        &self,
        operation: Operation,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        kind: [&str; 3],
        object: &mut T,
        old: Option<&T>,
        dry_run: bool,
    ) -> Result<(), ApiError>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let Some(ext) = self.active_external().await else {
            return Ok(());
        };
        let old = old.map(to_json).transpose()?;
        let attrs = Attributes {
            operation,
            info: self.strategy.info(),
            namespace,
            name,
            subresource: Some(subresource),
            kind: Some(kind),
            old: old.as_ref(),
            dry_run,
        };
        let before = to_json(object)?;
        let mut json = before.clone();
        ext.mutate(&attrs, &mut json).await?;
        if json != before {
            *object = serde_json::from_value(json.clone()).map_err(|e| {
                E::internal(format!(
                    "the object mutated by admission webhooks is not a valid {}: {e}",
                    kind[2]
                ))
            })?;
        }
        ext.validate(&attrs, Some(&json)).await
    }

    /// Runs external mutating admission on `obj` (`old` on updates); `Ok(true)` when it
    /// changed the object. What identifies the object (name, namespace, uid) stays.
    async fn external_mutate(
        &self,
        ext: &DynExternalAdmission,
        operation: Operation,
        obj: &mut S::Object,
        old: Option<&Value>,
        part: Part,
        dry_run: bool,
    ) -> Result<bool, ApiError> {
        let before = to_json(obj)?;
        let mut json = before.clone();
        ext.mutate(
            &self.attributes(operation, obj, part, old, dry_run),
            &mut json,
        )
        .await?;
        if json == before {
            return Ok(false);
        }
        let mut mutated: S::Object = serde_json::from_value(json).map_err(|e| {
            E::internal(format!(
                "the object mutated by admission webhooks is not a valid {}: {e}",
                self.strategy.info().kind
            ))
        })?;
        let (name, namespace, uid) = {
            let meta = self.strategy.meta(obj);
            (meta.name.clone(), meta.namespace.clone(), meta.uid.clone())
        };
        let meta = self.strategy.meta_mut(&mut mutated);
        meta.name = name;
        meta.namespace = namespace;
        meta.uid = uid;
        *obj = mutated;
        Ok(true)
    }

    /// External admission of a create, after the server's own mutating admission.
    pub(super) async fn admit_create_external(
        &self,
        obj: &mut S::Object,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let Some(ext) = self.active_external().await else {
            return Ok(());
        };
        if self
            .external_mutate(&ext, Operation::Create, obj, None, Part::Main, dry_run)
            .await?
        {
            let mut errs = self.strategy.validate(obj);
            let info = self.strategy.info();
            validate_object_meta(
                self.strategy.meta(obj),
                info.namespaced,
                info.name_rule,
                &mut errs,
            );
            if !errs.is_empty() {
                return Err(self.invalid(&self.name_of(obj), &errs));
            }
        }
        let json = to_json(obj)?;
        ext.validate(
            &self.attributes(Operation::Create, obj, Part::Main, None, dry_run),
            Some(&json),
        )
        .await
    }

    /// External admission of an update of `part`, once the update's own rules passed.
    pub(super) async fn admit_update_external(
        &self,
        new: &mut S::Object,
        old: &S::Object,
        part: Part,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let Some(ext) = self.active_external().await else {
            return Ok(());
        };
        let old_json = to_json(old)?;
        if self
            .external_mutate(&ext, Operation::Update, new, Some(&old_json), part, dry_run)
            .await?
        {
            let info = self.strategy.info();
            let mut errs = Vec::new();
            validate_object_meta(
                self.strategy.meta(new),
                info.namespaced,
                info.name_rule,
                &mut errs,
            );
            validate_object_meta_update(
                self.strategy.meta(new),
                self.strategy.meta(old),
                &mut errs,
            );
            errs.extend(self.strategy.validate_update(new, old));
            if !errs.is_empty() {
                return Err(self.invalid(&self.name_of(old), &errs));
            }
        }
        let json = to_json(new)?;
        ext.validate(
            &self.attributes(Operation::Update, new, part, Some(&old_json), dry_run),
            Some(&json),
        )
        .await
    }

    /// External (validating) admission of the delete of `current`.
    pub(super) async fn admit_delete_external(
        &self,
        current: &S::Object,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let Some(ext) = self.active_external().await else {
            return Ok(());
        };
        let old_json = to_json(current)?;
        ext.validate(
            &self.attributes(
                Operation::Delete,
                current,
                Part::Main,
                Some(&old_json),
                dry_run,
            ),
            None,
        )
        .await
    }
}
