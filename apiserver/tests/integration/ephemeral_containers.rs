//! The `ephemeralcontainers` subresource of pods, as `kubectl debug` uses it: a strategic
//! merge patch that adds a container; nothing else of the pod changes through it, and the
//! main resource cannot add one.

use http::StatusCode;
use serde_json::json;
use testkit::{Backend, InProcess};

const PODS: &str = "/api/v1/namespaces/default/pods";

#[tokio::test]
async fn ephemeral_containers_are_added_through_the_subresource_only() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    });
    let r = s.post(PODS, pod.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let sub = format!("{PODS}/p/ephemeralcontainers");
    let r = s.get(&sub).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["kind"], "Pod");

    let debugger = json!({"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app",
                          "stdin": true, "tty": true});
    let r = s
        .patch(
            &sub,
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"app": "changed"}},
                   "spec": {"ephemeralContainers": [debugger]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    let patched = r.json();
    assert_eq!(
        patched["spec"]["ephemeralContainers"][0]["name"],
        "debugger"
    );
    assert_eq!(
        patched["spec"]["ephemeralContainers"][0]["targetContainerName"],
        "app"
    );
    assert_eq!(
        patched["metadata"]["labels"]["app"], "web",
        "labels are not written through it"
    );

    // Changing or removing one is refused; so is adding one through the pod itself.
    let r = s
        .patch(&sub, "application/json-patch+json", json!([{"op": "replace", "path": "/spec/ephemeralContainers/0/image", "value": "busybox:1.37"}]))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("existing ephemeral containers \"debugger\" may not be changed"),
        "{:?}",
        r.json()
    );
    let r = s
        .patch(
            &format!("{PODS}/p"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"ephemeralContainers": [{"name": "other", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json());
    let mut with = pod;
    with["metadata"]["name"] = json!("q");
    with["spec"]["ephemeralContainers"] = json!([{"name": "d", "image": "busybox"}]);
    let r = s.post(PODS, with).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("spec.ephemeralContainers: Forbidden: cannot be set on create")
    );
    // A target that is not one of the pod's containers.
    let r = s
        .patch(&sub, "application/strategic-merge-patch+json",
               json!({"spec": {"ephemeralContainers": [{"name": "d2", "image": "busybox", "targetContainerName": "nope"}]}}))
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json());
}
