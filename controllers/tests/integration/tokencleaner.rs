//! The token cleaner against the in-process API server, acting as upstream's `token-cleaner`
//! account (a Role in kube-system): expired bootstrap token Secrets are deleted, one that
//! expires later when it does, and other Secrets and tokens without an expiry are left.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use minik8s_api::bootstrap_token::BootstrapToken;
use minik8s_controllers::informers::Informers;
use testkit::{Backend, InProcess, eventually};

use crate::csrapproving::controller_account;
use crate::support::WAIT;

#[tokio::test]
async fn the_token_cleaner_deletes_expired_tokens() -> anyhow::Result<()> {
    let api = InProcess::start_with(Backend::Sqlite, testkit::with_rbac).await?;
    let secrets: Api<Secret> = Api::namespaced(api.client(), "kube-system");
    let now = jiff::Timestamp::now();
    let token = |id: &str, expires: Option<jiff::Timestamp>| BootstrapToken {
        id: id.into(),
        secret: "0123456789abcdef".into(),
        description: String::new(),
        expires,
        usages: vec!["authentication".into()],
        groups: Vec::new(),
    };
    let create = |s: Secret| {
        let secrets = secrets.clone();
        async move { secrets.create(&PostParams::default(), &s).await }
    };
    create(token("forevr", None).to_secret()).await?;
    create(token("expird", Some(now - jiff::SignedDuration::from_secs(60))).to_secret()).await?;
    create(token("expsso", Some(now + jiff::SignedDuration::from_secs(2))).to_secret()).await?;
    // Not a token, though it looks like one.
    let mut opaque = token("opaque", Some(now - jiff::SignedDuration::from_secs(60))).to_secret();
    opaque.type_ = Some("Opaque".into());
    create(opaque).await?;

    let informers = Informers::new(api.client())
        .with_client(api.client_as(controller_account("token-cleaner")));
    tokio::spawn(minik8s_controllers::tokencleaner::run(Arc::clone(
        &informers,
    )));
    eventually(WAIT, "the expired token deleted", || async {
        secrets
            .get_opt("bootstrap-token-expird")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // The one that expires a moment later goes when it does.
    eventually(WAIT, "the token deleted at its expiry", || async {
        secrets
            .get_opt("bootstrap-token-expsso")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // Not before: the Secret holds its expiry to the second.
    let expiry =
        jiff::Timestamp::from_second((now + jiff::SignedDuration::from_secs(2)).as_second())?;
    assert!(jiff::Timestamp::now() >= expiry);
    assert!(secrets.get_opt("bootstrap-token-forevr").await?.is_some());
    assert!(secrets.get_opt("bootstrap-token-opaque").await?.is_some());
    Ok(())
}
