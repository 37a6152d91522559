//! LocalSubjectAccessReviews, the namespaced access review `kubectl auth can-i -n` does not
//! send but namespace admins' tools do: answered like the cluster-wide one (every request is
//! allowed until RBAC is enforced), with upstream's rules on namespaces.

use http::StatusCode;
use serde_json::json;
use testkit::{Backend, InProcess};

const PATH: &str = "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews";

fn review(ns: Option<&str>, attrs_ns: &str) -> serde_json::Value {
    let mut r = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
        "spec": {"user": "alice", "resourceAttributes":
            {"namespace": attrs_ns, "verb": "get", "resource": "pods"}}});
    if let Some(ns) = ns {
        r["metadata"] = json!({"namespace": ns});
    }
    r
}

#[tokio::test]
async fn local_reviews_answer_within_their_namespace() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let r = s.post(PATH, review(None, "default")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let body = r.json();
    assert_eq!(body["status"]["allowed"], true);
    assert_eq!(body["metadata"]["namespace"], "default");

    let r = s.post(PATH, review(None, "other")).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    assert_eq!(
        r.json()["message"],
        "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: \"other\": must match metadata.namespace"
    );
    let r = s.post(PATH, review(Some("other"), "other")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    // Cluster-wide, the path does not exist.
    let r = s
        .post(
            "/apis/authorization.k8s.io/v1/localsubjectaccessreviews",
            review(None, ""),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
}
