//! The token cleaner, as upstream's pkg/controller/bootstrap/tokencleaner.go: bootstrap
//! tokens are meant to be short-lived, and an expired one, though the authenticator already
//! refuses it, should not linger in kube-system as a Secret. Each token Secret is deleted once
//! its `expiration` has passed (or does not parse); until then it is looked at again when it
//! expires.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use minik8s_api::bootstrap_token::{self as token, Expiry};

use crate::informers::Informers;
use crate::util::reconciler::Error;
use crate::util::runtime;

pub const NAME: &str = "token-cleaner-controller";

struct Ctx {
    client: Client,
}

pub async fn run(informers: Arc<Informers>) {
    let selection = format!("type={}", token::SECRET_TYPE);
    let secrets =
        informers.selected::<Secret>(watcher::Config::default().fields(&selection), &selection);
    let queue = futures::StreamExt::map(secrets.touched(), |s| ObjectRef::from_obj(s.as_ref()));
    let ctx = Arc::new(Ctx {
        client: informers.client(),
    });
    runtime::run("token_cleaner", secrets.store(), queue, reconcile, ctx).await
}

/// What to do with a Secret at `now`: `None` to delete it, else when to look again.
fn plan(secret: &Secret, now: Timestamp) -> Option<Action> {
    if secret.type_.as_deref() != Some(token::SECRET_TYPE)
        || secret.namespace().as_deref() != Some(token::NAMESPACE)
    {
        return Some(Action::await_change());
    }
    match token::expiry(secret, now) {
        Expiry::Expired => None,
        Expiry::In(left) => Some(Action::requeue(left)),
        Expiry::Never => Some(Action::await_change()),
    }
}

async fn reconcile(secret: Arc<Secret>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if let Some(action) = plan(&secret, Timestamp::now()) {
        return Ok(action);
    }
    let name = secret.name_any();
    tracing::info!(secret = %format!("{}/{name}", token::NAMESPACE), "deleting expired secret");
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), token::NAMESPACE);
    let params = DeleteParams {
        // Only the Secret seen expired: one recreated under the name is another token.
        preconditions: secret.uid().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {}
        // Already gone, or replaced since: nothing of ours to delete.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn secret(namespace: &str, type_: &str, expiration: Option<&str>) -> Secret {
        let token = token::BootstrapToken {
            id: "abcdef".into(),
            secret: "0123456789abcdef".into(),
            description: String::new(),
            expires: expiration.map(|e| e.parse().unwrap()),
            usages: vec!["authentication".into()],
            groups: Vec::new(),
        };
        let mut s = token.to_secret();
        s.metadata.namespace = Some(namespace.into());
        s.type_ = Some(type_.into());
        s
    }

    #[test]
    fn expired_tokens_go_and_others_wait_for_their_expiry() {
        let now: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        let t = token::SECRET_TYPE;
        assert_eq!(
            plan(&secret("kube-system", t, Some("2024-12-31T23:00:00Z")), now),
            None
        );
        assert_eq!(
            plan(&secret("kube-system", t, Some("2025-01-01T00:00:30Z")), now),
            Some(Action::requeue(Duration::from_secs(30)))
        );
        assert_eq!(
            plan(&secret("kube-system", t, None), now),
            Some(Action::await_change())
        );
        // Not a bootstrap token, or not where tokens live: never touched.
        assert_eq!(
            plan(&secret("default", t, Some("2024-12-31T23:00:00Z")), now),
            Some(Action::await_change())
        );
        assert_eq!(
            plan(
                &secret("kube-system", "Opaque", Some("2024-12-31T23:00:00Z")),
                now
            ),
            Some(Action::await_change())
        );
        // An expiration that does not parse counts as expired, as upstream's.
        let mut bad = secret("kube-system", t, None);
        bad.data.as_mut().unwrap().insert(
            token::EXPIRATION_KEY.into(),
            k8s_openapi::ByteString(b"soon".to_vec()),
        );
        assert_eq!(plan(&bad, now), None);
    }
}
