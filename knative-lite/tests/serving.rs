//! Knative Serving's API against the in-process API server, the cluster's own scheduler and
//! workload controllers, and hollow nodes that run the pods: a Service from Knative's docs
//! becomes Ready with Knative's status, a template change stamps the next revision and moves
//! the traffic, a split and a tag show in the Route, and deleting the Service removes all
//! that it made.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use knative_lite::conditions::{self, READY};
use knative_lite::serving::{Configuration, Revision, Route, Service, labels};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use minik8s_controllers::hollow::{self, HollowConfig};
use minik8s_controllers::informers::Informers;
use minik8s_controllers::manager::{ControllerManagerOptions, run_controllers};
use minik8s_controllers::scheduler::{self, SchedulerOptions};
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(60);

/// The "Hello World" Service of Knative's getting-started guide.
const HELLO: &str = r#"
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
spec:
  template:
    spec:
      containers:
        - image: ghcr.io/knative/helloworld-go:latest
          ports:
            - containerPort: 8080
          env:
            - name: TARGET
              value: "World"
"#;

fn ready(conds: &[knative_lite::serving::Condition]) -> bool {
    conditions::is_true(conds, READY)
}

async fn start() -> anyhow::Result<(InProcess, Client, Vec<tokio::task::JoinHandle<()>>)> {
    let api = InProcess::start_with(Backend::Sqlite, |c| c.crds = knative_lite::crds()).await?;
    let client = api.client();
    let informers = Informers::new(client.clone());
    let config = HollowConfig {
        count: 2,
        ..Default::default()
    };
    let mut tasks = vec![tokio::spawn({
        let client = client.clone();
        async move {
            hollow::run(client, config).await.expect("hollow nodes");
        }
    })];
    let options = ControllerManagerOptions {
        controllers: ["deployment", "replicaset", "garbagecollector"]
            .map(String::from)
            .to_vec(),
        leader_elect: false,
        ..Default::default()
    };
    tasks.push(tokio::spawn({
        let informers = informers.clone();
        async move { run_controllers(informers, &options).await }
    }));
    tasks.push(tokio::spawn(scheduler::run(
        informers.clone(),
        client.clone(),
        SchedulerOptions {
            leader_elect: false,
            ..Default::default()
        },
        std::future::pending(),
    )));
    tasks.push(tokio::spawn(knative_lite::run(informers)));
    Ok((api, client, tasks))
}

async fn ready_service(services: &Api<Service>, generation: i64) -> Service {
    service_when(services, "the Service Ready", move |s| {
        s.status.as_ref().is_some_and(|st| {
            st.status.observed_generation == Some(generation) && ready(&st.status.conditions)
        })
    })
    .await
}

/// Waits on a watch of the Service until `done` holds for it.
async fn service_when(
    services: &Api<Service>,
    what: &str,
    done: impl Fn(&Service) -> bool,
) -> Service {
    let cond = move |s: Option<&Service>| s.is_some_and(&done);
    let found = tokio::time::timeout(WAIT, await_condition(services.clone(), "hello", cond))
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
        .unwrap_or_else(|e| panic!("watching for {what}: {e}"));
    found.unwrap_or_else(|| panic!("the Service is gone while waiting for {what}"))
}

#[tokio::test]
async fn service_from_knatives_docs() -> anyhow::Result<()> {
    let (_api, client, tasks) = start().await?;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_yaml::from_str(HELLO)?;
    services.create(&PostParams::default(), &svc).await?;

    let svc = ready_service(&services, 1).await;
    let status = svc.status.unwrap();
    assert_eq!(
        status.url.as_deref(),
        Some("http://hello.default.example.com")
    );
    assert_eq!(
        status.latest_created_revision_name.as_deref(),
        Some("hello-00001")
    );
    assert_eq!(
        status.latest_ready_revision_name.as_deref(),
        Some("hello-00001")
    );
    assert_eq!(status.traffic.len(), 1);
    assert_eq!(
        status.traffic[0].revision_name.as_deref(),
        Some("hello-00001")
    );
    assert_eq!(status.traffic[0].percent, Some(100));
    assert_eq!(status.traffic[0].latest_revision, Some(true));
    for ty in ["ConfigurationsReady", "RoutesReady"] {
        assert!(conditions::is_true(&status.status.conditions, ty), "{ty}");
    }

    // The revision runs as a Deployment whose pods carry Knative's labels and $PORT.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let selected = pods
        .list(&ListParams::default().labels(&format!("{}=hello", labels::SERVICE)))
        .await?;
    assert_eq!(selected.items.len(), 1);
    let pod = &selected.items[0];
    assert_eq!(pod.labels()[labels::REVISION], "hello-00001");
    assert_eq!(pod.labels()[labels::CONFIGURATION], "hello");
    let env = pod.spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "PORT" && e.value.as_deref() == Some("8080"))
    );
    assert!(
        env.iter()
            .any(|e| e.name == "TARGET" && e.value.as_deref() == Some("World"))
    );
    let revisions: Api<Revision> = Api::namespaced(client.clone(), "default");
    let rev = revisions.get("hello-00001").await?;
    let rs = rev.status.unwrap();
    assert_eq!(
        (rs.actual_replicas, rs.desired_replicas),
        (Some(1), Some(1))
    );

    // A new template stamps the next revision, and all traffic follows it once Ready.
    let patch = serde_json::json!({"spec": {"template": {"spec": {"containers": [{
        "image": "ghcr.io/knative/helloworld-go:latest",
        "env": [{"name": "TARGET", "value": "Knative"}],
    }]}}}});
    services
        .patch("hello", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let svc = ready_service(&services, 2).await;
    let status = svc.status.unwrap();
    assert_eq!(
        status.latest_ready_revision_name.as_deref(),
        Some("hello-00002")
    );
    assert_eq!(
        status.traffic[0].revision_name.as_deref(),
        Some("hello-00002")
    );
    assert!(
        revisions.get("hello-00001").await.is_ok(),
        "old revisions stay"
    );

    // A split between the two, the latest under a tag of its own.
    let patch = serde_json::json!({"spec": {"traffic": [
        {"revisionName": "hello-00001", "percent": 80},
        {"latestRevision": true, "percent": 20, "tag": "latest"},
    ]}});
    services
        .patch("hello", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let svc = ready_service(&services, 3).await;
    let traffic = svc.status.unwrap().traffic;
    assert_eq!(traffic.len(), 2);
    assert_eq!(
        (traffic[0].revision_name.as_deref(), traffic[0].percent),
        (Some("hello-00001"), Some(80))
    );
    assert_eq!(
        (traffic[1].revision_name.as_deref(), traffic[1].percent),
        (Some("hello-00002"), Some(20))
    );
    assert_eq!(
        traffic[1].url.as_deref(),
        Some("http://latest-hello.default.example.com")
    );
    assert!(
        services
            .get("hello")
            .await?
            .spec
            .template
            .spec
            .pod
            .containers
            .len()
            == 1
    );

    // A revision that does not exist: the Route and the Service say so.
    let patch = serde_json::json!({"spec": {"traffic": [
        {"revisionName": "hello-00009", "percent": 100},
    ]}});
    services
        .patch("hello", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let svc = service_when(&services, "RevisionMissing", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.status.observed_generation == Some(4)
                && conditions::status(&st.status.conditions, READY) == "False"
        })
    })
    .await;
    let status = svc.status.unwrap_or_default();
    let reason = conditions::get(&status.status.conditions, READY)
        .and_then(|c| c.reason.clone())
        .unwrap_or_default();
    assert_eq!(reason, "RevisionMissing");

    // Deleting the Service removes what it made, down to the pods.
    services
        .delete("hello", &DeleteParams::foreground())
        .await?;
    let configs: Api<Configuration> = Api::namespaced(client.clone(), "default");
    let routes: Api<Route> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    eventually(WAIT, "everything gone", || async {
        let none = configs
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            && routes
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
            && revisions
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
            && deployments
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty();
        none.then_some(())
    })
    .await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}
