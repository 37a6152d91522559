//! The `scale` subresource of the kinds that have one: the Scale view of an object, and
//! writes of its replicas (a Scale sent whole, or patched), which pass external admission as
//! a Scale before the object changes.

use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::autoscaling::v1::{Scale, ScaleSpec, ScaleStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::ApiError;
use minik8s_api::patch::schema::Schema;
use minik8s_api::strategy::Strategy;
use minik8s_api::validation::{FieldError, Path};

use super::codec;
use super::fieldmanager;
use super::request::Verb;
use super::resource::{ApiRequest, PATCH_TYPES, Patch, ResourceEndpoint, write};
use crate::registry::external::Operation;
use crate::registry::generic::Part;

const SCALE_KIND: [&str; 3] = ["autoscaling", "v1", "Scale"];

impl<S: Strategy> ResourceEndpoint<S> {
    fn to_scale(&self, obj: &S::Object) -> Result<Scale, ApiError> {
        let view = self
            .registry
            .strategy
            .scale(obj)
            .ok_or_else(|| ApiError::internal("object has no scale"))?;
        let meta = self.registry.strategy.meta(obj);
        Ok(Scale {
            metadata: ObjectMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
                creation_timestamp: meta.creation_timestamp.clone(),
                ..Default::default()
            },
            spec: Some(ScaleSpec {
                replicas: Some(view.spec_replicas),
            }),
            status: Some(ScaleStatus {
                replicas: view.status_replicas,
                selector: view.selector,
            }),
        })
    }

    pub(super) async fn scale(&self, req: &ApiRequest) -> Result<Response, ApiError> {
        let reg = &self.registry;
        let ns = req.namespace();
        let name = req.name();
        let scale_invalid = |replicas: i32| {
            let err = FieldError::invalid(
                &Path::new("spec").child("replicas"),
                replicas,
                "must be greater than or equal to 0",
            );
            ApiError::invalid("Scale", "autoscaling", name, &[err])
        };
        match req.target.verb {
            Verb::Get => Ok(write(
                req,
                StatusCode::OK,
                &self.to_scale(&reg.get(ns, name).await?)?,
            )),
            Verb::Update | Verb::Patch => self.scale_write(req, scale_invalid).await,
            _ => Err(ApiError::method_not_supported(
                reg.target(name),
                req.target.verb.as_str(),
            )),
        }
    }

    /// The Scale the client asks for, given the current object: the one it `sent`, or the
    /// current Scale with its patch applied.
    fn wanted_scale(
        &self,
        req: &ApiRequest,
        sent: Option<&Scale>,
        patch: Option<&Patch>,
        current: &S::Object,
    ) -> Result<Scale, ApiError> {
        let (Some(patch), None) = (patch, sent) else {
            return sent
                .cloned()
                .ok_or_else(|| ApiError::internal("a scale write without a Scale or a patch"));
        };
        let scale = self.to_scale(current)?;
        let doc = serde_json::to_value(&scale).map_err(ApiError::internal)?;
        let patched: Scale = serde_json::from_value(patch.apply(doc, &Schema::deduced())?)
            .map_err(|e| {
                ApiError::bad_request(format!("the patched object is not a valid Scale: {e}"))
            })?;
        if patched.metadata.resource_version.is_some()
            && patched.metadata.resource_version != scale.metadata.resource_version
        {
            return Err(ApiError::stale(self.registry.target(req.name())));
        }
        Ok(patched)
    }

    async fn scale_write(
        &self,
        req: &ApiRequest,
        scale_invalid: impl Fn(i32) -> ApiError,
    ) -> Result<Response, ApiError> {
        let reg = &self.registry;
        let ns = req.namespace();
        let name = req.name();
        let (options, patch) = if req.target.verb == Verb::Update {
            ("UpdateOptions", None)
        } else {
            let patch = Patch::parse(req)?;
            if matches!(patch, Patch::Apply(_)) {
                return Err(ApiError::unsupported_media_type(
                    PATCH_TYPES[3],
                    &PATCH_TYPES[..3],
                ));
            }
            ("PatchOptions", Some(patch))
        };
        let manager = self.manager(req, options)?;
        let types = self.types();
        let fm = fieldmanager::field_manager(&types, Part::Main, "scale");
        let dry_run = req.dry_run()?;
        let replicas_of = |scale: &Scale| {
            let replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            if replicas < 0 {
                return Err(scale_invalid(replicas));
            }
            Ok(replicas)
        };
        // A Scale sent whole names the version it replaces.
        let mut precondition = None;
        let sent: Option<Scale> = match patch {
            Some(_) => None,
            None => {
                let value = codec::parse_body(req.content_type(), &req.body, "Scale")?;
                Some(codec::decode_object(
                    value,
                    "Scale",
                    "autoscaling/v1",
                    false,
                )?)
            }
        };
        if let Some(scale) = &sent {
            precondition = super::resource::precondition(&scale.metadata)?;
        }
        // With webhooks or policies to meet, the Scale is admitted once, against the object
        // read now, which the write must then still find.
        let mut admitted = None;
        if reg.admits_externally().await {
            let current = reg.get(ns, name).await?;
            let old = self.to_scale(&current)?;
            let mut scale = self.wanted_scale(req, sent.as_ref(), patch.as_ref(), &current)?;
            reg.admit_subresource(
                Operation::Update,
                ns,
                name,
                "scale",
                SCALE_KIND,
                &mut scale,
                Some(&old),
                dry_run,
            )
            .await?;
            admitted = Some(replicas_of(&scale)?);
            if precondition.is_none() {
                precondition = reg
                    .strategy
                    .meta(&current)
                    .resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok());
            }
        }
        let (obj, _) = reg
            .guaranteed_update(ns, name, precondition, dry_run, |current| {
                let current = &current;
                let replicas = match admitted {
                    Some(r) => r,
                    None => replicas_of(&self.wanted_scale(
                        req,
                        sent.as_ref(),
                        patch.as_ref(),
                        current,
                    )?)?,
                };
                let mut new = current.clone();
                reg.strategy.set_replicas(&mut new, replicas);
                reg.before_update(&mut new, current, Part::Main)?;
                fieldmanager::track_update(
                    reg.strategy.as_ref(),
                    &fm,
                    &manager,
                    &mut new,
                    Some(current),
                );
                Ok(new)
            })
            .await?;
        Ok(write(req, StatusCode::OK, &self.to_scale(&obj)?))
    }
}
