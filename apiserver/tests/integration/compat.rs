//! What stock clients rely on beyond CRUD: service-account tokens (TokenRequest, then bearer
//! authentication), SelfSubjectReview, impersonation, dry-run write conflicts, and CRD
//! schema checks and CEL rules, through the router.

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use minik8s_apiserver::auth::ClientCertIdentity;
use serde_json::{Value, json};
use testkit::jwt_claims as claims;
use testkit::{Backend, InProcess};
use tower::ServiceExt;

/// A request with `headers`, as the admin (client certificate) unless `bearer` is given.
async fn call(
    s: &InProcess,
    method: Method,
    path: &str,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    if let Some(t) = bearer {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req
        .body(axum::body::Body::from(if body.is_null() {
            String::new()
        } else {
            body.to_string()
        }))
        .unwrap();
    if bearer.is_none() {
        req.extensions_mut()
            .insert(ClientCertIdentity(testkit::admin()));
    }
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned())),
    )
}

async fn whoami(
    s: &InProcess,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    call(
        s,
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        bearer,
        headers,
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await
}

const TOKEN: &str = "/api/v1/namespaces/default/serviceaccounts/robot/token";

fn token_request(spec: Value) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
}

#[tokio::test]
async fn service_account_tokens() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    // No service account yet.
    let (code, body) = call(&s, Method::POST, TOKEN, None, &[], token_request(json!({}))).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["message"], "serviceaccounts \"robot\" not found");
    let sa = s
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "robot"}}),
        )
        .await;
    assert_eq!(sa.status, StatusCode::CREATED);
    let sa_uid = sa.json()["metadata"]["uid"].as_str().unwrap().to_string();

    let (code, body) = call(
        &s,
        Method::POST,
        TOKEN,
        None,
        &[],
        token_request(json!({"expirationSeconds": 60})),
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["message"],
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );

    // client-go sends the Go zero status, whose timestamp is null (or absent in newer kubectl).
    for status in [
        json!({"token": "", "expirationTimestamp": null}),
        json!({"token": ""}),
    ] {
        let mut req = token_request(json!({}));
        req["status"] = status;
        let (code, tr) = call(&s, Method::POST, TOKEN, None, &[], req).await;
        assert_eq!(code, StatusCode::CREATED, "{tr}");
    }

    let (code, tr) = call(&s, Method::POST, TOKEN, None, &[], token_request(json!({}))).await;
    assert_eq!(code, StatusCode::CREATED, "{tr}");
    assert_eq!(tr["kind"], "TokenRequest");
    assert_eq!(tr["spec"]["expirationSeconds"], 3600);
    assert_eq!(
        tr["spec"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    let c = claims(&token);
    assert_eq!(c["sub"], "system:serviceaccount:default:robot");
    assert_eq!(c["iss"], "https://kubernetes.default.svc.cluster.local");
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        3600
    );
    assert_eq!(c["nbf"], c["iat"]);
    assert_eq!(c["kubernetes.io"]["namespace"], "default");
    assert_eq!(c["kubernetes.io"]["serviceaccount"]["name"], "robot");
    assert_eq!(c["kubernetes.io"]["serviceaccount"]["uid"], sa_uid.as_str());
    let exp = jiff::Timestamp::from_second(c["exp"].as_i64().unwrap()).unwrap();
    assert_eq!(tr["status"]["expirationTimestamp"], exp.to_string());

    // The token is the service account.
    let (code, review) = whoami(&s, Some(&token), &[]).await;
    assert_eq!(code, StatusCode::CREATED, "{review}");
    let info = &review["status"]["userInfo"];
    assert_eq!(info["username"], "system:serviceaccount:default:robot");
    assert_eq!(info["uid"], sa_uid.as_str());
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    assert!(
        info["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .unwrap()
            .starts_with("JTI=")
    );
    // TokenReview says the same.
    let (code, review) = call(
        &s,
        Method::POST,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        None,
        &[],
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{review}");
    assert_eq!(review["status"]["authenticated"], true);
    assert_eq!(
        review["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    // A forged or foreign token is nobody.
    let (code, _) = whoami(&s, Some(&format!("{token}x")), &[]).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, tr) = call(
        &s,
        Method::POST,
        TOKEN,
        None,
        &[],
        token_request(json!({"audiences": ["vault"]})),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);
    let vault = tr["status"]["token"].as_str().unwrap();
    assert_eq!(claims(vault)["aud"], json!(["vault"]));
    let (code, _) = whoami(&s, Some(vault), &[]).await;
    assert_eq!(
        code,
        StatusCode::UNAUTHORIZED,
        "a token for another audience"
    );

    // Bound to a secret: valid while that secret (that uid) lives.
    let secret = s
        .post(
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": "bound"}}),
        )
        .await
        .json();
    let (code, body) = call(
        &s,
        Method::POST,
        TOKEN,
        None,
        &[],
        token_request(json!({"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "bound", "uid": "wrong"}})),
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
    assert_eq!(
        body["message"],
        "Operation cannot be fulfilled on Secret \"bound\": the UID in the bound object reference (wrong) does not match the UID in record. The object might have been deleted and then recreated"
    );
    let (code, tr) = call(
        &s,
        Method::POST,
        TOKEN,
        None,
        &[],
        token_request(json!({"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "bound", "uid": secret["metadata"]["uid"]}})),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{tr}");
    let bound = tr["status"]["token"].as_str().unwrap().to_string();
    assert_eq!(claims(&bound)["kubernetes.io"]["secret"]["name"], "bound");
    assert_eq!(whoami(&s, Some(&bound), &[]).await.0, StatusCode::CREATED);
    assert_eq!(
        s.delete("/api/v1/namespaces/default/secrets/bound")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        whoami(&s, Some(&bound), &[]).await.0,
        StatusCode::UNAUTHORIZED
    );

    // Pods: the pod must run as the service account.
    s.post(
        "/api/v1/namespaces/default/pods",
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let (code, body) = call(
        &s,
        Method::POST,
        TOKEN,
        None,
        &[],
        token_request(json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}})),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["message"],
        "cannot bind token for serviceaccount \"robot\" to pod running with different serviceaccount name."
    );
    let (code, body) = call(
        &s,
        Method::POST,
        TOKEN,
        None,
        &[],
        token_request(
            json!({"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "p"}}),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["message"],
        "cannot bind token to object of type /v1, Kind=ConfigMap"
    );

    // Deleting the service account revokes its tokens; a new one of that name does not
    // bring them back.
    s.delete("/api/v1/namespaces/default/serviceaccounts/robot")
        .await;
    assert_eq!(
        whoami(&s, Some(&token), &[]).await.0,
        StatusCode::UNAUTHORIZED
    );
    s.post(
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "robot"}}),
    )
    .await;
    assert_eq!(
        whoami(&s, Some(&token), &[]).await.0,
        StatusCode::UNAUTHORIZED
    );

    // Discovery lists the subresource with its kind.
    let list = s.get("/api/v1").await.json();
    let token_sub = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned()
        .expect("serviceaccounts/token in discovery");
    assert_eq!(token_sub["kind"], "TokenRequest");
    assert_eq!(token_sub["group"], "authentication.k8s.io");
}

#[tokio::test]
async fn impersonation() {
    // Under RBAC, where impersonating is a verb one must be granted.
    let s = InProcess::start_with(Backend::Sqlite, |c| {
        c.serve.authorization_modes = vec![
            minik8s_apiserver::authz::Mode::Node,
            minik8s_apiserver::authz::Mode::Rbac,
        ];
    })
    .await
    .unwrap();
    let (code, review) = whoami(&s, None, &[]).await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(review["status"]["userInfo"]["username"], "minik8s-admin");
    let (code, review) = whoami(
        &s,
        None,
        &[
            ("Impersonate-User", "jane"),
            ("Impersonate-Group", "dev"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Uid", "u-1"),
        ],
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{review}");
    let info = &review["status"]["userInfo"];
    assert_eq!(info["username"], "jane");
    assert_eq!(info["uid"], "u-1");
    assert_eq!(info["groups"], json!(["dev", "system:authenticated"]));
    assert_eq!(info["extra"], json!({"scopes": ["view"]}));

    // A service account is granted nothing: it may not impersonate.
    s.post(
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "robot"}}),
    )
    .await;
    let (_, tr) = call(&s, Method::POST, TOKEN, None, &[], token_request(json!({}))).await;
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    let (code, body) = whoami(&s, Some(&token), &[("Impersonate-User", "jane")]).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        "users \"jane\" is forbidden: User \"system:serviceaccount:default:robot\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["details"], json!({"name": "jane", "kind": "users"}));
    // Groups without a user.
    let (code, _) = whoami(&s, None, &[("Impersonate-Group", "dev")]).await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn dry_run_writes_fail_as_real_ones() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken"}});
    assert_eq!(
        s.post("/api/v1/namespaces/default/configmaps", cm.clone())
            .await
            .status,
        StatusCode::CREATED
    );
    let r = s
        .post("/api/v1/namespaces/default/configmaps?dryRun=All", cm)
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.json()["reason"], "AlreadyExists");
    assert_eq!(r.json()["message"], "configmaps \"taken\" already exists");
    // A new name passes and is not stored.
    let fresh = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh"}});
    let r = s
        .post(
            "/api/v1/namespaces/default/configmaps?dryRun=All",
            fresh.clone(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        s.get("/api/v1/namespaces/default/configmaps/fresh")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Updates, patches and deletes of a missing object: 404 (configmaps are not created by
    // an update).
    let r = s
        .put(
            "/api/v1/namespaces/default/configmaps/fresh?dryRun=All",
            fresh,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.json());
    let r = s
        .patch(
            "/api/v1/namespaces/default/configmaps/fresh?dryRun=All",
            "application/merge-patch+json",
            json!({"data": {"a": "b"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = s
        .call(
            Method::DELETE,
            "/api/v1/namespaces/default/configmaps/fresh?dryRun=All",
            None,
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // A dry-run delete of an existing object leaves it.
    let r = s
        .call(
            Method::DELETE,
            "/api/v1/namespaces/default/configmaps/taken?dryRun=All",
            None,
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        s.get("/api/v1/namespaces/default/configmaps/taken")
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn crd_schemas_must_be_structural() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let crd = |schema: Value| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": schema}}]
            }
        })
    };
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let r = s
        .post(
            path,
            crd(json!({"type": "object", "properties": {
                "spec": {"properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": false},
            }})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let body = r.json();
    assert_eq!(
        body["message"],
        "CustomResourceDefinition.apiextensions.k8s.io \"gadgets.example.com\" is invalid: [spec.versions[0].schema.openAPIV3Schema.properties[status].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined, spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields]"
    );
    let causes: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        causes,
        vec![
            "spec.versions[0].schema.openAPIV3Schema.properties[status].x-kubernetes-preserve-unknown-fields",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
        ]
    );
    let r = s
        .post(
            path,
            crd(json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"a": {"type": "string"}},
                         "additionalProperties": {"type": "string"}},
            }})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["details"]["causes"][0]["message"],
        "Forbidden: additionalProperties and properties are mutual exclusive"
    );
    // A structural schema is accepted.
    let r = s
        .post(
            path,
            crd(json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
}

#[tokio::test]
async fn crd_cel_rules() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let crd = |rule: &str| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "ranges.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "ranges", "singular": "range", "kind": "Range"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object",
                            "x-kubernetes-validations": [
                                {"rule": rule, "message": "min must not exceed max"},
                                {"rule": "self.max >= oldSelf.max", "message": "max may not shrink"},
                            ],
                            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}}
                    }}}}]
            }
        })
    };
    let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let r = s.post(path, crd("self.min <=")).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let cause = &r.json()["details"]["causes"][0];
    assert_eq!(
        cause["field"],
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    );
    let r = s.post(path, crd("self.min <= self.max")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let ranges = "/apis/example.com/v1/namespaces/default/ranges";
    let obj = |min: i64, max: i64| {
        json!({"apiVersion": "example.com/v1", "kind": "Range",
               "metadata": {"name": "r1"}, "spec": {"min": min, "max": max}})
    };
    let created = testkit::eventually(
        std::time::Duration::from_secs(10),
        "the custom resource is served",
        || async {
            let r = s.post(ranges, obj(5, 1)).await;
            (r.status != StatusCode::NOT_FOUND).then_some(r)
        },
    )
    .await;
    assert_eq!(created.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        created.json()["message"],
        "Range.example.com \"r1\" is invalid: spec: Invalid value: \"object\": min must not exceed max"
    );
    let r = s.post(ranges, obj(1, 5)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    // A transition rule: the update is checked against the old object.
    let r = s
        .patch(
            &format!("{ranges}/r1"),
            "application/merge-patch+json",
            json!({"spec": {"max": 3}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "Range.example.com \"r1\" is invalid: spec: Invalid value: \"object\": max may not shrink"
    );
    let r = s
        .patch(
            &format!("{ranges}/r1"),
            "application/merge-patch+json",
            json!({"spec": {"max": 9}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
}

#[tokio::test]
async fn dry_run_accepts_only_all() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    const CMS: &str = "/api/v1/namespaces/default/configmaps";
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let message = |options: &str, values: &str| {
        format!(
            "{options}.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{{{values}}}: supported values: \"All\""
        )
    };
    let r = s.post(&format!("{CMS}?dryRun=Bogus"), cm.clone()).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let status = r.json();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["message"], message("CreateOptions", "\"Bogus\""));
    assert_eq!(status["details"]["kind"], "CreateOptions");
    assert_eq!(status["details"]["group"], "meta.k8s.io");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldValueNotSupported", "field": "dryRun",
            "message": "Unsupported value: []string{\"Bogus\"}: supported values: \"All\""}])
    );
    // Nothing was written; All twice is All.
    assert_eq!(
        s.get(&format!("{CMS}/c")).await.status,
        StatusCode::NOT_FOUND
    );
    let r = s
        .post(&format!("{CMS}?dryRun=All&dryRun=All"), cm.clone())
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        s.get(&format!("{CMS}/c")).await.status,
        StatusCode::NOT_FOUND
    );

    assert_eq!(s.post(CMS, cm.clone()).await.status, StatusCode::CREATED);
    let r = s
        .put(&format!("{CMS}/c?dryRun=All&dryRun=x"), cm.clone())
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        message("UpdateOptions", "\"All\", \"x\"")
    );
    let r = s
        .patch(
            &format!("{CMS}/c?dryRun=x"),
            "application/merge-patch+json",
            json!({"data": {"a": "b"}}),
        )
        .await;
    assert_eq!(r.json()["message"], message("PatchOptions", "\"x\""));
    let r = s.delete(&format!("{CMS}/c?dryRun=x")).await;
    assert_eq!(r.json()["message"], message("DeleteOptions", "\"x\""));
    // A delete's body wins over its query, as upstream reads them.
    let r = s
        .call(
            Method::DELETE,
            &format!("{CMS}/c?dryRun=x"),
            Some("application/json"),
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]}).to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(s.get(&format!("{CMS}/c")).await.status, StatusCode::OK);
    let r = s
        .call(
            Method::DELETE,
            &format!("{CMS}/c"),
            Some("application/json"),
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["Bogus"]}).to_string(),
        )
        .await;
    assert_eq!(r.json()["message"], message("DeleteOptions", "\"Bogus\""));
}

/// Upstream always serializes some zero values (non-pointer structs, fields without
/// omitempty); clients' typed models rely on them being there on every read.
#[tokio::test]
async fn objects_carry_the_zero_values_upstream_serializes() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let template = json!({"metadata": {"labels": {"app": "z"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "z"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "z"}}, "template": template}});
    const RS: &str = "/apis/apps/v1/namespaces/default/replicasets";
    let created = s.post(RS, rs).await.json();
    assert_eq!(created["status"], json!({"replicas": 0}));
    let read = s.get(&format!("{RS}/z")).await.json();
    assert_eq!(read["status"], json!({"replicas": 0}));
    assert_eq!(
        read["spec"]["template"]["spec"]["containers"][0]["resources"],
        json!({})
    );
    let listed = s.get(RS).await.json();
    assert_eq!(listed["items"][0]["status"], json!({"replicas": 0}));

    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "z"},
        "spec": {"selector": {"matchLabels": {"app": "z"}}, "template": template}});
    const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
    let created = s.post(DEPLOYS, d.clone()).await.json();
    assert_eq!(created["status"], json!({}));
    assert_eq!(created["metadata"]["generation"], 1);
    // A PUT of the same spec without the zero values is no change of spec.
    let mut same = d.clone();
    same["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let r = s.put(&format!("{DEPLOYS}/z"), same).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["metadata"]["generation"], 1);

    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "z"},
        "spec": {"ports": [{"port": 80}]}});
    let created = s
        .post("/api/v1/namespaces/default/services", svc)
        .await
        .json();
    assert_eq!(created["status"], json!({"loadBalancer": {}}));

    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "z"},
        "spec": {"selector": {"matchLabels": {"app": "z"}}, "template": template}});
    let created = s
        .post("/apis/apps/v1/namespaces/default/daemonsets", ds)
        .await
        .json();
    assert_eq!(
        created["status"],
        json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 0,
               "numberMisscheduled": 0, "numberReady": 0})
    );
}
