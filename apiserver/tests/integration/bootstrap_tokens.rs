//! Bootstrap tokens (`--enable-bootstrap-token-auth`) with `--authorization-mode=Node,RBAC`:
//! a token its Secret accepts is `system:bootstrap:<id>` in `system:bootstrappers`, a wrong,
//! expired, unmarked or deleted one is a 401, and the bootstrap policy lets the token ask for
//! certificates and little else. The requests it creates record it as their requester.

use std::time::Duration;

use http::{Method, Request, StatusCode};
use minik8s_api::bootstrap_token::BootstrapToken;
use minik8s_apiserver::authz::Mode;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, Reply, eventually};

const WAIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "abcdef.0123456789abcdef";

async fn start(enabled: bool) -> InProcess {
    InProcess::start_with(Backend::Sqlite, |c| {
        c.enable_bootstrap_token_auth = enabled;
        c.serve.authorization_modes = vec![Mode::Node, Mode::Rbac];
        c.serve.anonymous_auth = Some(true);
    })
    .await
    .expect("server")
}

fn token(id: &str, expires_in: i64, extra: &[(&str, &str)]) -> Value {
    let t = BootstrapToken {
        id: id.into(),
        secret: "0123456789abcdef".into(),
        description: String::new(),
        expires: Some(
            jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(expires_in))
                .unwrap(),
        ),
        usages: vec!["authentication".into(), "signing".into()],
        groups: vec!["system:bootstrappers:workers".into()],
    };
    let mut secret = serde_json::to_value(t.to_secret()).unwrap();
    for (k, v) in extra {
        secret["data"][k] = json!(k8s_openapi::ByteString(v.as_bytes().to_vec()));
    }
    secret
}

async fn create_secret(api: &InProcess, secret: Value) {
    let r = api
        .post("/api/v1/namespaces/kube-system/secrets", secret)
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

/// `method path` with `Authorization: Bearer <bearer>` and no other credentials.
async fn with_token(
    api: &InProcess,
    bearer: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::AUTHORIZATION, format!("Bearer {bearer}"));
    if body.is_some() {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(axum::body::Body::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        ))
        .unwrap();
    api.send_as(None, req).await
}

/// Who the server says `bearer` is (`kubectl auth whoami`), or the status it answers.
async fn whoami(api: &InProcess, bearer: &str) -> Result<Value, StatusCode> {
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r = with_token(
        api,
        bearer,
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(review),
    )
    .await;
    match r.status {
        StatusCode::CREATED => Ok(r.json()["status"]["userInfo"].clone()),
        other => Err(other),
    }
}

fn csr_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:n1");
    params.serialize_request(&key).unwrap().pem().unwrap()
}

#[tokio::test]
async fn bootstrap_tokens_authenticate_as_their_bootstrap_user() {
    let api = start(true).await;
    create_secret(&api, token("abcdef", 3600, &[])).await;
    let user = eventually(WAIT, "the token to authenticate", || async {
        whoami(&api, TOKEN).await.ok()
    })
    .await;
    assert_eq!(user["username"], "system:bootstrap:abcdef");
    assert_eq!(
        user["groups"],
        json!([
            "system:bootstrappers",
            "system:bootstrappers:workers",
            "system:authenticated"
        ])
    );

    // A wrong secret, an expired token, one not marked for authentication, one with a group
    // outside system:bootstrappers, and one with no Secret at all.
    assert_eq!(
        whoami(&api, "abcdef.0123456789abcdeX").await,
        Err(StatusCode::UNAUTHORIZED)
    );
    create_secret(&api, token("expire", -60, &[])).await;
    create_secret(
        &api,
        token(
            "unused",
            3600,
            &[("usage-bootstrap-authentication", "false")],
        ),
    )
    .await;
    create_secret(
        &api,
        token("master", 3600, &[("auth-extra-groups", "system:masters")]),
    )
    .await;
    // A token created after them authenticates once the cache holds it: the three before
    // it are in the cache by then too.
    create_secret(&api, token("later1", 3600, &[])).await;
    eventually(WAIT, "the last token to authenticate", || async {
        whoami(&api, "later1.0123456789abcdef").await.ok()
    })
    .await;
    for refused in [
        "expire.0123456789abcdef",
        "unused.0123456789abcdef",
        "master.0123456789abcdef",
        "nosuch.0123456789abcdef",
    ] {
        assert_eq!(
            whoami(&api, refused).await,
            Err(StatusCode::UNAUTHORIZED),
            "{refused}"
        );
    }
    // TokenReview judges them the same way.
    let r = api
        .post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                   "spec": {"token": TOKEN}}),
        )
        .await;
    assert_eq!(
        r.json()["status"]["user"]["username"],
        "system:bootstrap:abcdef"
    );

    // A deleted token stops working.
    let r = api
        .delete("/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef")
        .await;
    assert_eq!(r.status, StatusCode::OK);
    eventually(WAIT, "the deleted token to be refused", || async {
        (whoami(&api, TOKEN).await == Err(StatusCode::UNAUTHORIZED)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_bootstrap_token_may_ask_for_certificates_and_little_else() {
    let api = start(true).await;
    create_secret(&api, token("abcdef", 3600, &[])).await;
    eventually(WAIT, "the token to authenticate", || async {
        whoami(&api, TOKEN).await.ok()
    })
    .await;
    // The body's requester is replaced by the authenticated one.
    let csr = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "node-csr-n1"},
        "spec": {
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
            "username": "system:node:n1", "groups": ["system:masters"],
            "request": k8s_openapi::ByteString(csr_pem().into_bytes()),
        },
    });
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let r = with_token(&api, TOKEN, Method::POST, path, Some(csr)).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let spec = &r.json()["spec"];
    assert_eq!(spec["username"], "system:bootstrap:abcdef");
    assert_eq!(
        spec["groups"],
        json!([
            "system:bootstrappers",
            "system:bootstrappers:workers",
            "system:authenticated"
        ])
    );
    let r = with_token(
        &api,
        TOKEN,
        Method::GET,
        &format!("{path}/node-csr-n1"),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = with_token(
        &api,
        TOKEN,
        Method::GET,
        &format!("{path}?watch=true&timeoutSeconds=1"),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);

    // Not the rest of the cluster, nor deciding its own request.
    let r = with_token(
        &api,
        TOKEN,
        Method::GET,
        "/api/v1/namespaces/default/pods",
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "pods is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    for (method, path) in [
        (Method::GET, "/api/v1/namespaces/kube-system/secrets"),
        (Method::GET, "/api/v1/nodes"),
        (
            Method::PUT,
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/node-csr-n1/approval",
        ),
    ] {
        let r = with_token(&api, TOKEN, method.clone(), path, Some(json!({}))).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{method} {path}");
    }
}

#[tokio::test]
async fn without_the_flag_bootstrap_tokens_are_unknown() {
    let api = start(false).await;
    create_secret(&api, token("abcdef", 3600, &[])).await;
    // The Secret is there and valid; nothing reads it as a credential.
    let r = api
        .get("/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef")
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(whoami(&api, TOKEN).await, Err(StatusCode::UNAUTHORIZED));
}
