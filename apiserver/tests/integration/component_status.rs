//! `kubectl get componentstatuses`: computed on read, the scheduler and controller manager
//! healthy while their leader Lease is fresh, etcd-0 while the store answers.

use http::StatusCode;
use serde_json::json;
use testkit::{Backend, InProcess};

const PATH: &str = "/api/v1/componentstatuses";

fn healthy(list: &serde_json::Value, name: &str) -> String {
    let item = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"));
    item["conditions"][0]["status"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn health_from_leases_and_the_store() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let r = s.get(PATH).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let list = r.json();
    assert_eq!(list["kind"], "ComponentStatusList");
    assert_eq!(healthy(&list, "etcd-0"), "True");
    // No controller manager or scheduler runs in this test: no lease, not healthy.
    assert_eq!(healthy(&list, "scheduler"), "False");
    let one = s.get(&format!("{PATH}/scheduler")).await.json();
    assert_eq!(
        one["conditions"][0]["error"],
        "no lease kube-system/kube-scheduler: the component has not started"
    );

    // A scheduler holding its lease, renewed just now.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kube-scheduler"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": now}});
    let r = s
        .post(
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            lease,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let list = s.get(PATH).await.json();
    assert_eq!(healthy(&list, "scheduler"), "True");
    assert_eq!(healthy(&list, "controller-manager"), "False");

    // As kubectl asks for it: upstream's columns, and the deprecation warning.
    let r = s
        .get_accepting(PATH, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .await;
    let table = r.json();
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Status", "Message", "Error"]);
    let warning = r
        .headers
        .get("warning")
        .map(|v| v.to_str().unwrap().to_string());
    assert!(
        warning
            .as_deref()
            .is_some_and(|w| w.contains("v1 ComponentStatus is deprecated in v1.19+")),
        "{warning:?}"
    );
    assert_eq!(
        s.get(&format!("{PATH}/nothing")).await.status,
        StatusCode::NOT_FOUND
    );
}
