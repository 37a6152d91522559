//! Upstream's ResourceQuota admission plugin (plugin/pkg/admission/resourcequota): a new
//! object is charged to every quota of its namespace that counts it, in the quota's
//! `status.used`, before it is stored; one that would take a quota past `status.hard` is
//! refused. Charging at admission (the controller only recounts afterwards) is what keeps
//! a burst of creates from all passing the same stale count: each charge is a
//! resourceVersion-guarded write of the quota, retried when another write got there first.
//!
//! As upstream, a quota the controller has not yet processed (no `status.hard`) is not
//! enforced, and an object whose store write then fails stays charged until the controller
//! recounts. An update is charged what it adds (a claim grown, a Service turned NodePort).

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::kinds::resource_quota::{Usage, charge, charge_update};
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Target};

use crate::registry::generic::{
    CreateAdmission, GenericRegistry, ListQuery, Phase, UpdateAdmission,
};

pub const PLUGIN_NAME: &str = "ResourceQuota";

/// A kind quotas count, and what one object of it uses.
pub trait Counted: Send + Sync + 'static {
    const RESOURCE: &'static str;
    fn meta(&self) -> &ObjectMeta;
    fn usage(&self) -> Usage<'_>;
}

macro_rules! counted_by_number {
    ($($kind:ty => $resource:literal),* $(,)?) => {$(
        impl Counted for $kind {
            const RESOURCE: &'static str = $resource;
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn usage(&self) -> Usage<'_> {
                Usage::Object {
                    resource: $resource,
                    group: "",
                    extra: Default::default(),
                }
            }
        }
    )*};
}

counted_by_number!(
    ConfigMap => "configmaps",
    Secret => "secrets",
    ReplicationController => "replicationcontrollers",
);

impl Counted for Pod {
    const RESOURCE: &'static str = "pods";
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn usage(&self) -> Usage<'_> {
        Usage::Pod(self)
    }
}

impl Counted for Service {
    const RESOURCE: &'static str = "services";
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn usage(&self) -> Usage<'_> {
        Usage::service(self)
    }
}

impl Counted for PersistentVolumeClaim {
    const RESOURCE: &'static str = "persistentvolumeclaims";
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn usage(&self) -> Usage<'_> {
        Usage::claim(self)
    }
}

pub struct QuotaAdmission<K> {
    quotas: Arc<GenericRegistry<BuiltIn<ResourceQuota>>>,
    _kind: PhantomData<fn(K)>,
}

impl<K> QuotaAdmission<K> {
    pub fn new(quotas: Arc<GenericRegistry<BuiltIn<ResourceQuota>>>) -> Self {
        QuotaAdmission {
            quotas,
            _kind: PhantomData,
        }
    }
}

fn forbidden<K: Counted>(obj: &K, why: &str) -> ApiError {
    ApiError::forbidden(
        Target {
            group: "",
            resource: K::RESOURCE,
            name: super::name_in_errors(obj.meta()),
        },
        why,
    )
}

#[async_trait]
impl<K: Counted> CreateAdmission<K> for QuotaAdmission<K> {
    fn phase(&self) -> Phase {
        Phase::Final
    }

    async fn admit(&self, obj: &mut K, dry_run: bool) -> Result<(), ApiError> {
        let usage = obj.usage();
        self.charge_all(&*obj, |q, now| charge(q, &usage, now), dry_run)
            .await
    }
}

#[async_trait]
impl<K: Counted> UpdateAdmission<K> for QuotaAdmission<K> {
    async fn admit_update(&self, new: &mut K, old: &K, dry_run: bool) -> Result<(), ApiError> {
        let (usage, before) = (new.usage(), old.usage());
        self.charge_all(
            &*new,
            |q, now| charge_update(q, &usage, &before, now),
            dry_run,
        )
        .await
    }
}

impl<K: Counted> QuotaAdmission<K> {
    /// Charges `obj` to every quota of its namespace `charge` says it uses: every quota is
    /// checked before any is charged, so a refusal charges none.
    async fn charge_all(
        &self,
        obj: &K,
        charge: impl Fn(&ResourceQuota, Timestamp) -> Result<Option<BTreeMap<String, Quantity>>, String>
        + Send
        + Sync,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let ns = obj.meta().namespace.clone().unwrap_or_default();
        let quotas = self
            .quotas
            .list(Some(&ns), &ListQuery::default())
            .await?
            .items;
        let now = Timestamp::now();
        let mut charged = Vec::new();
        for q in &quotas {
            if charge(q, now)
                .map_err(|why| forbidden(obj, &why))?
                .is_some()
            {
                charged.push(q.metadata.name.clone().unwrap_or_default());
            }
        }
        for name in charged {
            let write = self
                .quotas
                .guaranteed_update(Some(&ns), &name, None, dry_run, |mut current| {
                    // Charged against the quota as stored now, which may have moved on.
                    if let Some(used) = charge(&current, now).map_err(|why| forbidden(obj, &why))? {
                        current.status.get_or_insert_with(Default::default).used = Some(used);
                    }
                    Ok(current)
                })
                .await;
            match write {
                Ok(_) => {}
                // Deleted meanwhile: nothing left to charge.
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
