//! A stock kube-rs (kube 5) client over TLS with the admin's client certificate: CRUD, list,
//! watch and the runtime's watcher/reflector, on both storage backends.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use testkit::{Backend, TestServer, eventually};

fn cm(name: &str, app: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": app}}, "data": {"k": "v"}}),
    )
    .unwrap()
}

async fn crud_list_watch(backend: Backend) {
    let server = TestServer::start(backend).await.unwrap();
    let client = server.client().await.unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.minor, "32");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"kube-system".to_string()), "{names:?}");

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("one", "web"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    cms.create(&PostParams::default(), &cm("two", "db"))
        .await
        .unwrap();
    let err = cms
        .create(&PostParams::default(), &cm("one", "web"))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        e => panic!("{e}"),
    }
    let web = cms
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(web.items.len(), 1);
    let patched = cms
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "v2"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "v2");
    let mut replaced = cms.get("one").await.unwrap();
    replaced.data = Some([("x".to_string(), "y".to_string())].into());
    let replaced = cms
        .replace("one", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["x"], "y");

    // A raw watch from a resourceVersion.
    let from = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut raw = cms
        .watch(&WatchParams::default().timeout(30), &from)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("three", "web"))
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), raw.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("three")),
        e => panic!("{e:?}"),
    }

    // The runtime's watcher and reflector keep a cache true to the server.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream =
        reflector(writer, watcher(cms.clone(), watcher::Config::default())).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 3);
    cms.delete("two", &DeleteParams::default()).await.unwrap();
    cms.create(&PostParams::default(), &cm("four", "web"))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the reflector to see the delete and the create",
        || {
            let names: Vec<String> = reader
                .state()
                .iter()
                .filter_map(|c| c.metadata.name.clone())
                .collect();
            async move {
                (names.len() == 3
                    && names.contains(&"four".to_string())
                    && !names.contains(&"two".to_string()))
                .then_some(())
            }
        },
    )
    .await;
    task.abort();

    // Streaming lists (sendInitialEvents) as kube-rs does them.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().streaming_lists()),
    )
    .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.state().len(), 3);
    task.abort();

    // Pods: graceful delete comes back as the object.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})).unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(
        deleted.left().is_some(),
        "pods answer a delete with the object"
    );
    let deleted = cms.delete("one", &DeleteParams::default()).await.unwrap();
    assert!(
        deleted.right().is_some(),
        "configmaps answer a delete with a Status"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_over_tls_sqlite() {
    crud_list_watch(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_over_tls_etcd() {
    crud_list_watch(Backend::Etcd).await;
}

/// Without a client certificate or token, only health and version answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_over_tls() {
    let server = TestServer::start(Backend::Sqlite).await.unwrap();
    let mut kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    for u in &mut kubeconfig.auth_infos {
        if let Some(info) = u.auth_info.as_mut() {
            info.client_certificate_data = None;
            info.client_key_data = None;
        }
    }
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    assert_eq!(client.apiserver_version().await.unwrap().major, "1");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    match cms.list(&ListParams::default()).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 401),
        e => panic!("expected 401, got {e}"),
    }
}
