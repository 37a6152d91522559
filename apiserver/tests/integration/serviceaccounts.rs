//! ServiceAccount admission and the pod-bound tokens it leads to, as upstream's plugin and
//! TokenRequest do them: every pod runs as an account that exists and gets the projected
//! `kube-api-access-*` volume in every container.

use http::StatusCode;
use serde_json::{Value, json};
use testkit::jwt_claims as claims;
use testkit::{Backend, InProcess};

const PODS: &str = "/api/v1/namespaces/default/pods";
const ACCOUNTS: &str = "/api/v1/namespaces/default/serviceaccounts";
const MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A server with ServiceAccount admission on (test servers run without it by default).
async fn server() -> InProcess {
    InProcess::start_with(Backend::Sqlite, |c| c.serve.admission.disabled.clear())
        .await
        .unwrap()
}

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "busybox:1.36"}]);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn pods_run_as_an_existing_account_with_its_token_mounted() {
    let s = server().await;
    // Nothing creates the `default` account here: the create waits for it a moment, then
    // fails as upstream's does.
    let r = s.post(PODS, pod("early", json!({}))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "pods \"early\" is forbidden: error looking up service account default/default: serviceaccount \"default\" not found"
    );
    // A pod created while the account appears is admitted, in either order.
    let (created, account) = tokio::join!(
        s.post(PODS, pod("racing", json!({}))),
        s.post(ACCOUNTS, json!({"metadata": {"name": "default"}}))
    );
    assert_eq!(account.status, StatusCode::CREATED);
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json());

    let r = s
        .post(
            PODS,
            pod(
                "web",
                json!({"initContainers": [{"name": "init", "image": "busybox:1.36"}],
                    "containers": [{"name": "a", "image": "busybox:1.36"},
                        {"name": "b", "image": "busybox:1.36",
                         "volumeMounts": [{"name": "own", "mountPath": MOUNT}]}],
                    "volumes": [{"name": "own", "emptyDir": {}}]}),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let p = r.json();
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    let volumes = p["spec"]["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 2);
    let name = volumes[1]["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == "kube-api-access-".len() + 5,
        "{name}"
    );
    assert_eq!(
        volumes[1]["projected"],
        json!({"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]})
    );
    let token_mount = json!({"name": name, "readOnly": true, "mountPath": MOUNT});
    assert_eq!(
        p["spec"]["initContainers"][0]["volumeMounts"],
        json!([token_mount])
    );
    assert_eq!(
        p["spec"]["containers"][0]["volumeMounts"],
        json!([token_mount])
    );
    // A container with its own mount there keeps it.
    assert_eq!(
        p["spec"]["containers"][1]["volumeMounts"],
        json!([{"name": "own", "mountPath": MOUNT}])
    );

    // A named account must exist; only `default` is waited for.
    let started = std::time::Instant::now();
    let r = s
        .post(
            PODS,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "job-"},
                "spec": {"serviceAccountName": "builder",
                         "containers": [{"name": "c", "image": "busybox:1.36"}]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "pods \"job-\" is forbidden: error looking up service account default/builder: serviceaccount \"builder\" not found"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(1));

    // automountServiceAccountToken: the pod's choice, then the account's.
    let r = s
        .post(
            ACCOUNTS,
            json!({"metadata": {"name": "builder"}, "automountServiceAccountToken": false,
                "imagePullSecrets": [{"name": "regcred"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = s
        .post(PODS, pod("quiet", json!({"serviceAccountName": "builder"})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let p = r.json();
    assert!(p["spec"].get("volumes").is_none(), "{p}");
    assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "regcred"}]));
    let r = s
        .post(
            PODS,
            pod(
                "loud",
                json!({"serviceAccountName": "builder", "automountServiceAccountToken": true}),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.json()["spec"]["volumes"].as_array().unwrap().len(), 1);
    let r = s
        .post(
            PODS,
            pod("opted-out", json!({"automountServiceAccountToken": false})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert!(r.json()["spec"].get("volumes").is_none());

    // Updates are not admitted again: the pod keeps what it got.
    let mut web = s.get(&format!("{PODS}/web")).await.json();
    web["metadata"]["labels"] = json!({"x": "y"});
    let r = s.put(&format!("{PODS}/web"), web).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["spec"]["volumes"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn the_projections_tokens_live_a_year_with_a_warning_at_the_hour() {
    let s = server().await;
    s.post(ACCOUNTS, json!({"metadata": {"name": "default"}}))
        .await;
    let p = s.post(PODS, pod("p", json!({}))).await.json();
    let request = |seconds: i64| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p",
                    "uid": p["metadata"]["uid"]}}})
    };
    let token = |tr: &Value| tr["status"]["token"].as_str().unwrap().to_string();
    let now = jiff::Timestamp::now().as_second();

    let r = s
        .post(&format!("{ACCOUNTS}/default/token"), request(3607))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());
    let tr = r.json();
    let c = claims(&token(&tr));
    let (iat, exp) = (c["iat"].as_i64().unwrap(), c["exp"].as_i64().unwrap());
    assert!(iat >= now);
    assert_eq!(exp - iat, 365 * 24 * 3600, "a year");
    assert_eq!(c["kubernetes.io"]["warnafter"].as_i64(), Some(iat + 3607));
    assert_eq!(c["kubernetes.io"]["pod"]["name"], "p");
    // The response says the hour asked for.
    let said: jiff::Timestamp = tr["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(said.as_second(), iat + 3607);

    // Any other lifetime is taken as asked.
    let r = s
        .post(&format!("{ACCOUNTS}/default/token"), request(3600))
        .await;
    let c = claims(&token(&r.json()));
    assert_eq!(
        c["exp"].as_i64().unwrap() - c["iat"].as_i64().unwrap(),
        3600
    );
    assert!(c["kubernetes.io"].get("warnafter").is_none());
}
