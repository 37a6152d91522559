//! `--use-service-account-credentials` for a controller-manager over the network: the
//! manager, as `system:kube-controller-manager` (its bootstrap role only), provisions each
//! controller's ServiceAccount and tokens; the controller's client authenticates as that
//! account alone, within its `system:controller:<name>` role, and renews its token.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use minik8s_controllers::clientbuilder::{DynamicClientBuilder, TokenOptions};
use testkit::{Backend, TestServer, eventually, jwt_claims};

const WAIT: Duration = Duration::from_secs(30);

/// The manager's kubeconfig: the test server's, acting as the controller-manager.
async fn manager_config(server: &TestServer) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some("system:kube-controller-manager".into());
    config
}

async fn builder(server: &TestServer, options: TokenOptions) -> Arc<DynamicClientBuilder> {
    let config = manager_config(server).await;
    let manager = kube::Client::try_from(config.clone()).unwrap();
    Arc::new(DynamicClientBuilder::new(manager, &config, "kube-system", options).unwrap())
}

async fn whoami(client: &kube::Client) -> Result<String, kube::Error> {
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

#[tokio::test]
async fn each_controller_acts_as_its_service_account() {
    let server = TestServer::start_with(Backend::Sqlite, testkit::with_rbac)
        .await
        .unwrap();
    let builder = builder(&server, TokenOptions::default()).await;
    let client = (builder.clone().credentials().0)("deployment-controller");
    let user = eventually(WAIT, "the controller's client to authenticate", || async {
        whoami(&client).await.ok()
    })
    .await;
    assert_eq!(
        user,
        "system:serviceaccount:kube-system:deployment-controller"
    );
    // The manager created the account it lacked.
    let admin = server.client().await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin, "kube-system");
    accounts.get("deployment-controller").await.unwrap();
    // Its role's grants, and nothing more.
    let deployments: Api<Deployment> = Api::all(client.clone());
    deployments.list(&ListParams::default()).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let err = secrets.list(&ListParams::default()).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected a Status, got {err:?}");
    };
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "secrets is forbidden: User \"system:serviceaccount:kube-system:deployment-controller\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    // The token is the TokenRequest API's, for the manager's requested lifetime.
    let token = builder
        .tokens("deployment-controller")
        .token()
        .await
        .unwrap();
    let claims = jwt_claims(&token);
    assert_eq!(
        claims["sub"],
        "system:serviceaccount:kube-system:deployment-controller"
    );
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 3600);
}

#[tokio::test]
async fn tokens_are_renewed_and_refused_ones_replaced() {
    let server = TestServer::start_with(Backend::Sqlite, testkit::with_rbac)
        .await
        .unwrap();
    let options = TokenOptions {
        refresh_every: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let builder = builder(&server, options).await;
    let client = builder.client("job-controller");
    let tokens = builder.tokens("job-controller");
    eventually(WAIT, "the controller's client to authenticate", || async {
        whoami(&client).await.ok()
    })
    .await;
    let first = tokens.token().await.unwrap();
    let renewed = eventually(WAIT, "a renewed token", || async {
        let user = whoami(&client).await.ok()?;
        assert_eq!(user, "system:serviceaccount:kube-system:job-controller");
        let now = tokens.token().await.ok()?;
        (now != first).then_some(now)
    })
    .await;
    assert_ne!(jwt_claims(&renewed)["jti"], jwt_claims(&first)["jti"]);

    // A token the server no longer accepts (its account was deleted) is replaced at once,
    // and the account made again.
    let slow = builder_without_renewal(&server).await;
    let client = slow.client("job-controller");
    eventually(WAIT, "the controller's client to authenticate", || async {
        whoami(&client).await.ok()
    })
    .await;
    let admin = server.client().await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin, "kube-system");
    let old_uid = accounts.get("job-controller").await.unwrap().metadata.uid;
    accounts
        .delete("job-controller", &DeleteParams::default())
        .await
        .unwrap();
    let user = eventually(WAIT, "the client to authenticate again", || async {
        whoami(&client).await.ok()
    })
    .await;
    assert_eq!(user, "system:serviceaccount:kube-system:job-controller");
    let new_uid = accounts.get("job-controller").await.unwrap().metadata.uid;
    assert_ne!(new_uid, old_uid);
}

/// A builder that keeps each token for upstream's hour.
async fn builder_without_renewal(server: &TestServer) -> Arc<DynamicClientBuilder> {
    builder(server, TokenOptions::default()).await
}
