//! `serviceaccounts/<name>/token`: the TokenRequest API (`kubectl create token`), as
//! upstream's TokenREST. Tokens are not stored; they are signed claims checked on use.

use std::sync::Arc;

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestStatus};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::validation::{FieldError, Path};
use minik8s_api::{ApiError, Target};

use super::codec::{self, with_warnings};
use super::render;
use super::request::Verb;
use super::resource::{ApiRequest, Extension};
use crate::auth::Authenticator;
use crate::registry::external::Operation;
use crate::registry::generic::GenericRegistry;
use crate::serviceaccount::{self, Binding};

/// Upstream's defaults and bounds of `spec.expirationSeconds`.
const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 10 * 60;
const MAX_EXPIRATION: i64 = 1 << 32;

pub struct ServiceAccountExtension {
    pub auth: Arc<Authenticator>,
}

#[async_trait]
impl Extension<BuiltIn<ServiceAccount>> for ServiceAccountExtension {
    async fn handle(
        &self,
        reg: &GenericRegistry<BuiltIn<ServiceAccount>>,
        req: &ApiRequest,
    ) -> Option<Result<Response, ApiError>> {
        match (&req.target.verb, req.target.subresource.as_deref()) {
            (Verb::Create, Some("token")) => Some(self.token(reg, req).await),
            _ => None,
        }
    }
}

/// Upstream's `ValidateTokenRequest`.
fn validate(spec_expiration: i64) -> Vec<FieldError> {
    let path = Path::new("spec").child("expirationSeconds");
    let mut errs = Vec::new();
    if spec_expiration < MIN_EXPIRATION {
        errs.push(FieldError::invalid(
            &path,
            spec_expiration,
            "may not specify a duration less than 10 minutes",
        ));
    }
    if spec_expiration > MAX_EXPIRATION {
        errs.push(FieldError::invalid(
            &path,
            spec_expiration,
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    errs
}

impl ServiceAccountExtension {
    async fn token(
        &self,
        reg: &GenericRegistry<BuiltIn<ServiceAccount>>,
        req: &ApiRequest,
    ) -> Result<Response, ApiError> {
        let Some(tokens) = self.auth.service_accounts() else {
            return Err(ApiError::internal("service account tokens are not set up"));
        };
        req.dry_run()?;
        // client-go sends the Go zero status (`token: ""`, `expirationTimestamp: null` or, in
        // protobuf, no timestamp at all); status is output only and upstream ignores it.
        let mut parsed = codec::parse_body_as(
            req.content_type(),
            &req.body,
            "TokenRequest",
            "authentication.k8s.io/v1",
            false,
        )?;
        if let Some(map) = parsed.value.as_object_mut() {
            map.remove("status");
        }
        let validation = if parsed.protobuf {
            codec::FieldValidation::Ignore
        } else {
            req.field_validation()?
        };
        let (mut tr, mut warnings): (TokenRequest, _) = codec::decode_validated(
            parsed.value,
            "TokenRequest",
            "authentication.k8s.io/v1",
            false,
            validation,
        )?;
        let mut expiration = *tr.spec.expiration_seconds.get_or_insert(DEFAULT_EXPIRATION);
        let errs = validate(expiration);
        if !errs.is_empty() {
            return Err(ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                "",
                &errs,
            ));
        }
        let name = req.name();
        let ns = req.namespace();
        let sa = reg.get(ns, name).await?;
        let kind = ["authentication.k8s.io", "v1", "TokenRequest"];
        reg.admit_subresource(
            Operation::Create,
            ns,
            name,
            "token",
            kind,
            &mut tr,
            None,
            false,
        )
        .await?;
        let mut bound = Binding::default();
        if let Some(r) = &tr.spec.bound_object_ref {
            let kind = r.kind.as_deref().unwrap_or_default();
            let api_version = r.api_version.as_deref().unwrap_or_default();
            let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            let ref_name = r.name.as_deref().unwrap_or_default();
            let uid = match (group, kind) {
                ("", "Pod") => {
                    let pod = tokens.pods.get(ns, ref_name).await?;
                    let pod_sa = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.service_account_name.as_deref())
                        .unwrap_or_default();
                    if pod_sa != name {
                        return Err(ApiError::bad_request(format!(
                            "cannot bind token for serviceaccount \"{name}\" to pod running with different serviceaccount name."
                        )));
                    }
                    // The pod's node goes into the token too (ServiceAccountTokenPodNodeInfo).
                    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        && !node.is_empty()
                    {
                        bound.node = tokens.nodes.get(None, node).await.ok();
                    }
                    let uid = pod.metadata.uid.clone();
                    bound.pod = Some(pod);
                    uid
                }
                ("", "Secret") => {
                    let secret = tokens.secrets.get(ns, ref_name).await?;
                    let uid = secret.metadata.uid.clone();
                    bound.secret = Some(secret);
                    uid
                }
                ("", "Node") => {
                    let node = tokens.nodes.get(None, ref_name).await?;
                    let uid = node.metadata.uid.clone();
                    bound.node = Some(node);
                    uid
                }
                _ => {
                    let gvk = if group.is_empty() {
                        format!("/{api_version}, Kind={kind}")
                    } else {
                        format!(
                            "{group}/{}, Kind={kind}",
                            api_version.rsplit_once('/').map(|(_, v)| v).unwrap_or("")
                        )
                    };
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token to object of type {gvk}"
                    )));
                }
            };
            if let Some(want) = r.uid.as_deref().filter(|u| !u.is_empty())
                && uid.as_deref() != Some(want)
            {
                return Err(ApiError::conflict(
                    Target {
                        group,
                        resource: kind,
                        name: ref_name,
                    },
                    &format!(
                        "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                    ),
                ));
            }
        }
        if tr.spec.audiences.is_empty() {
            tr.spec.audiences = tokens.signer.audiences.clone();
        }
        // `--service-account-max-token-expiration`: the request is shortened, not refused,
        // and the response says the lifetime granted.
        if let Some(max) = tokens.max_expiration
            && expiration > max
        {
            warnings.push(format!(
                "requested expiration of {expiration} seconds shortened to {max} seconds"
            ));
            expiration = max;
            tr.spec.expiration_seconds = Some(max);
        }
        let now = jiff::Timestamp::now().as_second();
        // The projection ServiceAccount admission adds asks for 3607 s: such pod-bound tokens
        // for this server live a year, with `warnafter` at the hour (upstream's safe rollout
        // of bound tokens), whatever the maximum (a maximum under 3607 s shortens the request
        // above, and then nothing is extended). The response still says the hour.
        let extend = tokens.extend_expiration
            && bound.pod.is_some()
            && expiration == serviceaccount::WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS
            && tr
                .spec
                .audiences
                .iter()
                .all(|a| tokens.signer.audiences.contains(a));
        let lifetime = if extend {
            serviceaccount::EXPIRATION_EXTENSION_SECONDS
        } else {
            expiration
        };
        let mut claims = serviceaccount::claims(
            &tokens.signer.issuer,
            &sa,
            &bound,
            lifetime,
            &tr.spec.audiences,
            now,
        );
        if extend {
            claims.kubernetes.warnafter = Some(now + expiration);
        }
        let token = tokens
            .signer
            .sign(&claims)
            .map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?;
        tr.metadata.name = Some(name.to_string());
        tr.metadata.namespace = ns.map(str::to_string);
        tr.status = Some(TokenRequestStatus {
            token,
            expiration_timestamp: Time(
                jiff::Timestamp::from_second(now + expiration)
                    .map_err(|e| ApiError::internal(e.to_string()))?,
            ),
        });
        Ok(with_warnings(
            render::write_response(&req.headers, StatusCode::CREATED, &tr),
            &warnings,
        ))
    }
}
