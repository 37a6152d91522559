//! Storage admission through the REST API, as upstream's plugins behave: the server's own
//! `local-path` default class, DefaultStorageClass (the newest default for claims that name
//! no class), StorageObjectInUseProtection (the protection finalizers), and
//! PersistentVolumeClaimResize (growth only for bound claims of a class that allows it).

use http::StatusCode;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, Reply};

const CLAIMS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";
const VOLUMES: &str = "/api/v1/persistentvolumes";
const CLASSES: &str = "/apis/storage.k8s.io/v1/storageclasses";

fn ok(r: &Reply, code: StatusCode) -> Value {
    assert_eq!(r.status, code, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn claim(name: &str, class: Option<&str>) -> Value {
    let mut c = json!({"metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    if let Some(class) = class {
        c["spec"]["storageClassName"] = json!(class);
    }
    c
}

fn class(name: &str, default: bool, expand: bool) -> Value {
    let annotations = if default {
        json!({"storageclass.kubernetes.io/is-default-class": "true"})
    } else {
        json!({})
    };
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": "example.com/fast", "allowVolumeExpansion": expand})
}

#[tokio::test]
async fn the_server_brings_a_default_local_path_class() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let sc = ok(
        &s.get(&format!("{CLASSES}/local-path")).await,
        StatusCode::OK,
    );
    assert_eq!(
        sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
        "true"
    );
    assert_eq!(sc["provisioner"], "rancher.io/local-path");
    assert_eq!(sc["reclaimPolicy"], "Delete");
    assert_eq!(sc["volumeBindingMode"], "WaitForFirstConsumer");
    assert_eq!(sc["allowVolumeExpansion"], true);

    let off = InProcess::start_with(Backend::Sqlite, |c| c.local_storage = false)
        .await
        .unwrap();
    let r = off.get(&format!("{CLASSES}/local-path")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn claims_without_a_class_get_the_newest_default() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let c = ok(&s.post(CLAIMS, claim("a", None)).await, StatusCode::CREATED);
    assert_eq!(c["spec"]["storageClassName"], "local-path");
    // A second default: the newer wins, and of two created in the same second, the first by
    // name; "fast" is both.
    ok(
        &s.post(CLASSES, class("fast", true, false)).await,
        StatusCode::CREATED,
    );
    let c = ok(&s.post(CLAIMS, claim("b", None)).await, StatusCode::CREATED);
    assert_eq!(c["spec"]["storageClassName"], "fast");
    // "" asks for no class; a named class or the beta annotation is kept.
    let c = ok(
        &s.post(CLAIMS, claim("c", Some(""))).await,
        StatusCode::CREATED,
    );
    assert_eq!(c["spec"]["storageClassName"], "");
    let c = ok(
        &s.post(CLAIMS, claim("d", Some("other"))).await,
        StatusCode::CREATED,
    );
    assert_eq!(c["spec"]["storageClassName"], "other");
    let mut beta = claim("e", None);
    beta["metadata"]["annotations"] = json!({"volume.beta.kubernetes.io/storage-class": "old"});
    let c = ok(&s.post(CLAIMS, beta).await, StatusCode::CREATED);
    assert!(c["spec"].get("storageClassName").is_none(), "{c}");

    let off = InProcess::start_with(Backend::Sqlite, |c| {
        c.serve
            .admission
            .disabled
            .push("DefaultStorageClass".into())
    })
    .await
    .unwrap();
    let c = ok(
        &off.post(CLAIMS, claim("a", None)).await,
        StatusCode::CREATED,
    );
    assert!(c["spec"].get("storageClassName").is_none(), "{c}");
}

#[tokio::test]
async fn new_claims_and_volumes_carry_the_protection_finalizers() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let c = ok(
        &s.post(CLAIMS, claim("a", Some(""))).await,
        StatusCode::CREATED,
    );
    assert_eq!(
        c["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
    let pv = json!({"metadata": {"name": "pv", "finalizers": ["example.com/mine"]},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "hostPath": {"path": "/tmp/pv"}}});
    let v = ok(&s.post(VOLUMES, pv).await, StatusCode::CREATED);
    assert_eq!(
        v["metadata"]["finalizers"],
        json!(["example.com/mine", "kubernetes.io/pv-protection"])
    );
}

#[tokio::test]
async fn only_bound_claims_of_an_expanding_class_grow() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    ok(
        &s.post(CLASSES, class("fixed", false, false)).await,
        StatusCode::CREATED,
    );
    for (name, class) in [("a", "local-path"), ("b", "fixed")] {
        ok(
            &s.post(CLAIMS, claim(name, Some(class))).await,
            StatusCode::CREATED,
        );
    }
    let grow = |size: &str| json!({"spec": {"resources": {"requests": {"storage": size}}}});
    let patch = |name: &str, body: Value| {
        let (s, path) = (&s, format!("{CLAIMS}/{name}"));
        async move { s.patch(&path, "application/merge-patch+json", body).await }
    };
    let refused = ok(&patch("a", grow("2Gi")).await, StatusCode::FORBIDDEN);
    assert_eq!(
        refused["message"],
        "persistentvolumeclaims \"a\" is forbidden: Only bound persistent volume claims can be expanded"
    );
    // Bound, as the binder would record it.
    for name in ["a", "b"] {
        let mut c = s.get(&format!("{CLAIMS}/{name}")).await.json();
        c["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
        ok(
            &s.put(&format!("{CLAIMS}/{name}/status"), c).await,
            StatusCode::OK,
        );
    }
    let refused = ok(&patch("b", grow("2Gi")).await, StatusCode::FORBIDDEN);
    assert_eq!(
        refused["message"],
        "persistentvolumeclaims \"b\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
    );
    let grown = ok(&patch("a", grow("2Gi")).await, StatusCode::OK);
    assert_eq!(grown["spec"]["resources"]["requests"]["storage"], "2Gi");
    // Other changes pass whatever the class; shrinking is invalid.
    ok(
        &patch("b", json!({"metadata": {"labels": {"x": "y"}}})).await,
        StatusCode::OK,
    );
    let invalid = ok(
        &patch("a", grow("1Gi")).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    assert_eq!(
        invalid["details"]["causes"][0]["field"],
        "spec.resources.requests.storage"
    );
}
