//! Mutating admission as upstream's default plugins do it, seen through the REST API:
//! DefaultTolerationSeconds gives pods five minutes on a not-ready or unreachable node, and
//! what kubectl sends back (replace, apply) round-trips without errors.

use http::{Method, StatusCode};
use serde_json::{Value, json};
use testkit::{Backend, InProcess};

const PODS: &str = "/api/v1/namespaces/default/pods";

fn defaults() -> Value {
    json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    ])
}

#[tokio::test]
async fn default_toleration_seconds_round_trip() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    // As `kubectl create -f` sends it.
    let manifest = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
    let r = s.post(PODS, manifest.clone()).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let created = r.json();
    assert_eq!(created["spec"]["tolerations"], defaults());

    // `kubectl replace` of what was read, and of the manifest without the added tolerations.
    let r = s.put(&format!("{PODS}/p"), created.clone()).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let mut bare = manifest.clone();
    bare["metadata"]["resourceVersion"] = r.json()["metadata"]["resourceVersion"].clone();
    bare["metadata"]["labels"] = json!({"edited": "yes"});
    let r = s.put(&format!("{PODS}/p"), bare).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["spec"]["tolerations"], defaults());

    // `kubectl apply --server-side`, twice.
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: q}\nspec:\n  containers: [{name: c, image: busybox:1.36}]\n";
    for expected in [StatusCode::CREATED, StatusCode::OK] {
        let r = s
            .call(
                Method::PATCH,
                &format!("{PODS}/q?fieldManager=kubectl"),
                Some("application/apply-patch+yaml"),
                yaml.to_string(),
            )
            .await;
        assert_eq!(r.status, expected, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["spec"]["tolerations"], defaults());
    }

    // A pod that tolerates everything, or one of the two itself, is left as it is for that one.
    let mut all = manifest.clone();
    all["metadata"]["name"] = json!("all");
    all["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    let r = s.post(PODS, all).await;
    assert_eq!(
        r.json()["spec"]["tolerations"],
        json!([{"operator": "Exists"}])
    );
    let mut own = manifest;
    own["metadata"]["name"] = json!("own");
    let mine = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 6000});
    own["spec"]["tolerations"] = json!([mine]);
    let r = s.post(PODS, own).await;
    assert_eq!(
        r.json()["spec"]["tolerations"],
        json!([mine, defaults()[0]])
    );
    // Status writes are not admitted: nothing changes there.
    let r = s.get(&format!("{PODS}/own")).await;
    let mut status = r.json();
    status["status"] = json!({"phase": "Pending"});
    let r = s.put(&format!("{PODS}/own/status"), status).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["spec"]["tolerations"].as_array().unwrap().len(), 2);
}
