//! ServiceAccount issuer discovery as a relying party outside the cluster uses it: read the
//! OpenID configuration, fetch the key set it names, and verify a TokenRequest's token with
//! the JWK alone. Also the flags behind it: several issuers (the first issues, all are
//! accepted) and the maximum token lifetime, which does not cut the kubelet's extended
//! tokens short.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{Method, StatusCode, header};
use minik8s_apiserver::auth::UserInfo;
use minik8s_apiserver::authz::Mode;
use minik8s_apiserver::serviceaccount::{self, Binding, ISSUER};
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually, jwt_claims};

const NEW_ISSUER: &str = "https://oidc.example.com/clusters/one";
const CONFIG: &str = "/.well-known/openid-configuration";
const JWKS: &str = "/openid/v1/jwks";
const ACCOUNTS: &str = "/api/v1/namespaces/default/serviceaccounts";
const YEAR: i64 = 365 * 24 * 60 * 60;

/// A server that moved to [`NEW_ISSUER`] from the default one, with RBAC on and tokens of
/// at most `max` seconds.
async fn start(max: u64) -> InProcess {
    InProcess::start_with(Backend::Sqlite, |c| {
        c.serve.authorization_modes = vec![Mode::Node, Mode::Rbac];
        c.serve.anonymous_auth = Some(true);
        c.service_accounts.issuers = vec![NEW_ISSUER.into(), ISSUER.into()];
        c.service_accounts.max_token_expiration = Some(Duration::from_secs(max));
    })
    .await
    .expect("server")
}

fn robot() -> UserInfo {
    UserInfo {
        name: "system:serviceaccount:default:robot".into(),
        uid: String::new(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:default".into(),
            "system:authenticated".into(),
        ],
    }
}

fn header(r: &testkit::Reply, name: header::HeaderName) -> &str {
    r.headers
        .get(&name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

async fn created(api: &InProcess, path: &str, body: Value) -> testkit::Reply {
    let r = api.post(path, body).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r
}

/// Checks `token`'s ES256 signature with nothing but `jwk`, as a relying party would, and
/// returns its claims.
fn verify_with_jwk(token: &str, jwk: &Value) -> Value {
    let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).expect("base64url");
    let (signed, signature) = token.rsplit_once('.').expect("a JWT");
    let header: Value = serde_json::from_slice(&decode(signed.split('.').next().unwrap())).unwrap();
    assert_eq!(header["alg"], jwk["alg"]);
    assert_eq!(header["kid"], jwk["kid"], "the token names the key");
    assert_eq!(
        (jwk["kty"].as_str(), jwk["crv"].as_str()),
        (Some("EC"), Some("P-256"))
    );
    let mut point = vec![0x04];
    point.extend(decode(jwk["x"].as_str().unwrap()));
    point.extend(decode(jwk["y"].as_str().unwrap()));
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
        .verify(signed.as_bytes(), &decode(signature))
        .expect("the JWK verifies the token's signature");
    jwt_claims(token)
}

#[tokio::test]
async fn a_relying_party_verifies_tokens_with_the_discovered_key() {
    let api = start(2 * 60 * 60).await;

    // Service accounts may read both documents (system:service-account-issuer-discovery);
    // anonymous users may not.
    let r = eventually(
        Duration::from_secs(20),
        "the discovery role is in force",
        || {
            let api = &api;
            async move {
                let r = api.call_as(Some(&robot()), Method::GET, CONFIG, None).await;
                (r.status == StatusCode::OK).then_some(r)
            }
        },
    )
    .await;
    assert_eq!(header(&r, header::CONTENT_TYPE), "application/json");
    assert_eq!(header(&r, header::CACHE_CONTROL), "public, max-age=3600");
    let jwks_uri = format!("https://{}/openid/v1/jwks", api.server.address);
    assert_eq!(
        r.json(),
        json!({
            "issuer": NEW_ISSUER,
            "jwks_uri": jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    );
    let r = api.call_as(None, Method::GET, CONFIG, None).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/.well-known/openid-configuration\""
    );

    let r = api.call_as(Some(&robot()), Method::GET, JWKS, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(header(&r, header::CONTENT_TYPE), "application/jwk-set+json");
    assert_eq!(header(&r, header::CACHE_CONTROL), "public, max-age=3600");
    let keys = r.json();
    let keys = keys["keys"].as_array().expect("a key set");
    assert_eq!(keys.len(), 1);
    let jwk = &keys[0];
    assert_eq!(jwk["use"], "sig");
    assert_eq!(jwk["alg"], "ES256");

    // A TokenRequest asking for a day gets the two hours the server allows, and says so.
    created(&api, ACCOUNTS, json!({"metadata": {"name": "robot"}})).await;
    let r = created(
        &api,
        &format!("{ACCOUNTS}/robot/token"),
        json!({"spec": {"expirationSeconds": 86400}}),
    )
    .await;
    assert_eq!(
        header(&r, header::WARNING),
        "299 - \"requested expiration of 86400 seconds shortened to 7200 seconds\""
    );
    let tr = r.json();
    assert_eq!(tr["spec"]["expirationSeconds"], 7200);
    assert_eq!(tr["spec"]["audiences"], json!([NEW_ISSUER, ISSUER]));
    let token = tr["status"]["token"].as_str().unwrap();
    let claims = verify_with_jwk(token, jwk);
    assert_eq!(claims["iss"], NEW_ISSUER, "the first issuer issues");
    assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, 7200);
    let expires: jiff::Timestamp = tr["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(expires.as_second(), iat + 7200);

    // Tokens of the earlier issuer still authenticate; another issuer's do not.
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(api.get(&format!("{ACCOUNTS}/robot")).await.json()).unwrap();
    let signer = &api.server.auth.service_accounts().unwrap().signer;
    let now = jiff::Timestamp::now().as_second();
    let sign = |iss: &str| {
        let c = serviceaccount::claims(iss, &sa, &Binding::default(), 600, &[ISSUER.into()], now);
        signer.sign(&c).unwrap()
    };
    for (token, authenticated) in [
        (token.to_string(), true),
        (sign(ISSUER), true),
        (sign("https://elsewhere.example"), false),
    ] {
        let r = created(
            &api,
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json!({"spec": {"token": token}}),
        )
        .await;
        let status = &r.json()["status"];
        assert_eq!(status["authenticated"], authenticated, "{status}");
        if authenticated {
            assert_eq!(
                status["user"]["username"],
                "system:serviceaccount:default:robot"
            );
        }
    }
}

#[tokio::test]
async fn the_kubelets_extended_tokens_outlive_the_maximum() {
    let pod = |name: &str| {
        json!({"metadata": {"name": name}, "spec": {"serviceAccountName": "robot",
            "containers": [{"name": "c", "image": "busybox:1.36"}]}})
    };
    let bound = |name: &str, uid: &Value| {
        json!({"spec": {"expirationSeconds": 3607,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}}})
    };
    // A maximum of two hours leaves the projection's 3607 s alone, and it is extended to a
    // year with a warning at the hour.
    let api = start(2 * 60 * 60).await;
    created(&api, ACCOUNTS, json!({"metadata": {"name": "robot"}})).await;
    let p = created(&api, "/api/v1/namespaces/default/pods", pod("web"))
        .await
        .json();
    let r = created(
        &api,
        &format!("{ACCOUNTS}/robot/token"),
        bound("web", &p["metadata"]["uid"]),
    )
    .await;
    assert!(r.headers.get(header::WARNING).is_none());
    let tr = r.json();
    assert_eq!(tr["spec"]["expirationSeconds"], 3607);
    let claims = jwt_claims(tr["status"]["token"].as_str().unwrap());
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, YEAR);
    assert_eq!(
        claims["kubernetes.io"]["warnafter"].as_i64().unwrap() - iat,
        3607
    );

    // A maximum of an hour shortens the request first: nothing is extended.
    let api = start(60 * 60).await;
    created(&api, ACCOUNTS, json!({"metadata": {"name": "robot"}})).await;
    let p = created(&api, "/api/v1/namespaces/default/pods", pod("web"))
        .await
        .json();
    let r = created(
        &api,
        &format!("{ACCOUNTS}/robot/token"),
        bound("web", &p["metadata"]["uid"]),
    )
    .await;
    assert_eq!(
        header(&r, header::WARNING),
        "299 - \"requested expiration of 3607 seconds shortened to 3600 seconds\""
    );
    let claims = jwt_claims(r.json()["status"]["token"].as_str().unwrap());
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3600
    );
    assert!(claims["kubernetes.io"].get("warnafter").is_none());
}

#[tokio::test]
async fn an_issuer_that_is_not_an_https_url_has_no_discovery() {
    let api = InProcess::start_with(Backend::Sqlite, |c| {
        c.service_accounts.issuers = vec!["kubernetes.default.svc".into()];
    })
    .await
    .expect("server");
    for path in [CONFIG, JWKS] {
        assert_eq!(api.get(path).await.status, StatusCode::NOT_FOUND, "{path}");
    }
    // Tokens are issued all the same.
    created(&api, ACCOUNTS, json!({"metadata": {"name": "robot"}})).await;
    let r = created(
        &api,
        &format!("{ACCOUNTS}/robot/token"),
        json!({"spec": {}}),
    )
    .await;
    let claims = jwt_claims(r.json()["status"]["token"].as_str().unwrap());
    assert_eq!(claims["iss"], "kubernetes.default.svc");

    // Flags upstream refuses stop the server from starting, with upstream's message.
    let err = InProcess::start_with(Backend::Sqlite, |c| {
        c.service_accounts.max_token_expiration = Some(Duration::from_secs(60));
    })
    .await
    .err()
    .expect("refused");
    assert!(
        format!("{err:#}").contains(
            "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"
        ),
        "{err:#}"
    );
}
