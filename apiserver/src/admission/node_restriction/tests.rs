//! The plugin as the registries call it: who is a node, and the errors its refusals become.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::admission::webhook::{Caller, serve_as};
use crate::auth::UserInfo;
use crate::registry::generic::{DeleteAdmission, Removal, UpdateAdmission};

fn caller(name: &str, groups: &[&str]) -> Caller {
    Caller {
        user: UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        },
        extra: Default::default(),
        warnings: Arc::new(Mutex::new(Vec::new())),
    }
}

fn pod_on(node: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": node, "containers": []}}))
    .unwrap()
}

async fn delete_as(
    who: Caller,
    current: Option<&Pod>,
    subresource: Option<&str>,
) -> Result<(), ApiError> {
    let plugin = NodeRestriction::new();
    let removal = Removal {
        namespace: Some("default"),
        name: "p",
        current,
        subresource,
    };
    serve_as(who, async { plugin.admit_delete(&removal).await }).await
}

#[tokio::test]
async fn only_kubelets_are_restricted() {
    let other = pod_on("n2");
    let cases = [
        ("a user", caller("jane", &["system:authenticated"]), true),
        (
            "a node name outside system:nodes",
            caller("system:node:n1", &[]),
            true,
        ),
        (
            "a kubelet",
            caller("system:node:n1", &["system:nodes"]),
            false,
        ),
    ];
    for (what, who, allowed) in cases {
        let r = delete_as(who, Some(&other), None).await;
        assert_eq!(r.is_ok(), allowed, "{what}: {r:?}");
    }
    // Writes the server makes itself have no caller.
    let plugin = NodeRestriction::new();
    let removal = Removal {
        namespace: Some("default"),
        name: "p",
        current: Some(&other),
        subresource: None,
    };
    assert!(plugin.admit_delete(&removal).await.is_ok());
}

#[tokio::test]
async fn refusals_read_as_upstreams() {
    let n1 = || caller("system:node:n1", &["system:nodes"]);
    let err = delete_as(n1(), Some(&pod_on("n2")), None)
        .await
        .unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(
        err.message,
        "pods \"p\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
    );
    let err = delete_as(n1(), None, Some("eviction")).await.unwrap_err();
    assert_eq!((err.code, err.reason), (404, "NotFound"));
    assert_eq!(err.message, "pod \"p\" not found");
    let err = delete_as(
        caller("system:node:", &["system:nodes"]),
        Some(&pod_on("n1")),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.message,
        "pods \"p\" is forbidden: could not determine node from user \"system:node:\""
    );
}

#[tokio::test]
async fn each_part_has_its_instance() {
    let plugin = NodeRestriction::new();
    let status = plugin.updating(Part::Status);
    assert!(UpdateAdmission::<Pod>::admits(&*status, Part::Status));
    assert!(!UpdateAdmission::<Pod>::admits(&*status, Part::Main));
    let n1 = caller("system:node:n1", &["system:nodes"]);
    let (mut new, old) = (pod_on("n1"), pod_on("n1"));
    let r = serve_as(n1.clone(), async {
        status.admit_update(&mut new, &old, false).await
    })
    .await;
    assert!(r.is_ok(), "{r:?}");
    let r = serve_as(n1, async {
        plugin.admit_update(&mut new, &old, false).await
    })
    .await;
    assert_eq!(
        r.unwrap_err().message,
        "pods \"p\" is forbidden: unexpected operation \"UPDATE\", node \"n1\" can only create and delete mirror pods"
    );
}
