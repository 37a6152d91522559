//! The API server's `/metrics` under upstream's names and labels: each series exists and
//! moves when what it counts happens (a create, a dry run, a watch and its events, a stored
//! object), and reading it takes `system:monitoring`'s permission under RBAC.

use std::time::Duration;

use futures::StreamExt;
use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, WatchEvent, WatchParams};
use minik8s_apiserver::auth::UserInfo;
use minik8s_apiserver::authz::Mode;
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const WAIT: Duration = Duration::from_secs(20);

async fn scrape(s: &InProcess) -> String {
    let r = s.get("/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    String::from_utf8(r.body.to_vec()).unwrap()
}

/// The value of series `name` whose labels include `labels` (`k="v"` each), summed over
/// the series that match; `None` when none does.
fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (series, v) = match rest.strip_prefix('{') {
            Some(rest) => match rest.split_once("} ") {
                Some((series, v)) => (series, v),
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(v) => ("", v),
                None => continue,
            },
        };
        let present: Vec<&str> = series.split(',').collect();
        if labels.iter().all(|l| present.contains(l)) {
            *found.get_or_insert(0.0) += v.trim().parse::<f64>().unwrap();
        }
    }
    found
}

#[tokio::test]
async fn requests_are_counted_and_timed_with_upstreams_labels() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let create = [
        "verb=\"POST\"",
        "dry_run=\"\"",
        "group=\"\"",
        "version=\"v1\"",
        "resource=\"configmaps\"",
        "subresource=\"\"",
        "scope=\"resource\"",
        "component=\"apiserver\"",
    ];
    let created = [create.as_slice(), &["code=\"201\""]].concat();
    let before = scrape(&s).await;
    let r = s
        .post(
            CMS,
            json!({"metadata": {"name": "counted"}, "data": {"k": "v"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = s
        .post(
            &format!("{CMS}?dryRun=All"),
            json!({"metadata": {"name": "dry"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    s.get(&format!("{CMS}/counted")).await;
    s.get(CMS).await;
    s.get("/apis/apps/v1/deployments").await;
    s.get("/readyz").await;
    let after = scrape(&s).await;
    let total = |text: &str, labels: &[&str]| value(text, "apiserver_request_total", labels);
    assert_eq!(
        total(&after, &created).unwrap() - total(&before, &created).unwrap_or(0.0),
        1.0,
        "{after}"
    );
    let dry = [
        "verb=\"POST\"",
        "dry_run=\"All\"",
        "resource=\"configmaps\"",
        "code=\"201\"",
    ];
    assert_eq!(total(&after, &dry), Some(1.0), "{after}");
    let get = [
        "verb=\"GET\"",
        "scope=\"resource\"",
        "resource=\"configmaps\"",
    ];
    assert!(total(&after, &get).is_some(), "{after}");
    let list = [
        "verb=\"LIST\"",
        "scope=\"namespace\"",
        "resource=\"configmaps\"",
    ];
    assert!(total(&after, &list).is_some(), "{after}");
    let cluster = [
        "verb=\"LIST\"",
        "scope=\"cluster\"",
        "group=\"apps\"",
        "resource=\"deployments\"",
    ];
    assert!(total(&after, &cluster).is_some(), "{after}");
    // The health endpoints, as upstream instruments them.
    let health = [
        "verb=\"GET\"",
        "resource=\"\"",
        "subresource=\"/readyz\"",
        "scope=\"\"",
        "component=\"\"",
        "code=\"200\"",
    ];
    assert!(total(&after, &health).is_some(), "{after}");
    // Timed in upstream's buckets, from 5 ms to 60 s.
    let bucket = |le: &str| {
        value(
            &after,
            "apiserver_request_duration_seconds_bucket",
            &[create.as_slice(), &[le]].concat(),
        )
    };
    assert!(bucket("le=\"0.005\"").is_some(), "{after}");
    assert!(bucket("le=\"60\"").is_some(), "{after}");
    assert_eq!(bucket("le=\"+Inf\""), total(&after, &created), "{after}");
    // The storage call behind the create, under etcd's name for the embedded store too.
    let stored = ["operation=\"create\"", "type=\"configmaps\""];
    let calls = |text: &str| value(text, "etcd_request_duration_seconds_count", &stored);
    assert!(
        calls(&after).unwrap() > calls(&before).unwrap_or(0.0),
        "{after}"
    );
    // The scrape itself is a read in flight.
    assert!(
        value(
            &after,
            "apiserver_current_inflight_requests",
            &["request_kind=\"readOnly\""]
        )
        .unwrap()
            >= 1.0,
        "{after}"
    );
    assert!(
        value(
            &after,
            "apiserver_current_inflight_requests",
            &["request_kind=\"mutating\""]
        )
        .is_some(),
        "{after}"
    );
    // And the process, from the prometheus crate's collector.
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
    ] {
        assert!(value(&after, name, &[]).is_some(), "{name} missing");
    }
}

#[tokio::test]
async fn stored_objects_are_counted_by_resource() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let objects = |text: &str| {
        value(
            text,
            "apiserver_storage_objects",
            &["resource=\"configmaps\""],
        )
    };
    let before = objects(&scrape(&s).await).unwrap();
    for i in 0..3 {
        let r = s
            .post(CMS, json!({"metadata": {"name": format!("cm{i}")}}))
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let after = scrape(&s).await;
    assert_eq!(objects(&after), Some(before + 3.0), "{after}");
    assert!(
        value(
            &after,
            "apiserver_storage_objects",
            &["resource=\"deployments.apps\""]
        )
        .is_some(),
        "{after}"
    );
    // Reviews are not stored.
    assert!(!after.contains("resource=\"tokenreviews.authentication.k8s.io\""));
}

#[tokio::test]
async fn a_watch_is_long_running_and_its_events_are_counted() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let watching = [
        "verb=\"WATCH\"",
        "group=\"\"",
        "version=\"v1\"",
        "resource=\"configmaps\"",
        "subresource=\"\"",
        "scope=\"namespace\"",
        "component=\"apiserver\"",
    ];
    let events = ["group=\"\"", "version=\"v1\"", "kind=\"ConfigMap\""];
    let before = scrape(&s).await;
    let sent_before = value(&before, "apiserver_watch_events_total", &events).unwrap_or(0.0);
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let mut watch = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let open = scrape(&s).await;
    assert_eq!(
        value(&open, "apiserver_longrunning_requests", &watching),
        Some(1.0),
        "{open}"
    );
    s.post(CMS, json!({"metadata": {"name": "seen"}})).await;
    // Bookmarks may come first; they are events sent too.
    tokio::time::timeout(WAIT, async {
        while let Some(event) = watch.next().await {
            if matches!(event, Ok(WatchEvent::Added(_))) {
                return;
            }
        }
        panic!("the watch ended");
    })
    .await
    .unwrap();
    let sent = value(&scrape(&s).await, "apiserver_watch_events_total", &events).unwrap();
    assert!(sent > sent_before, "{sent} events after {sent_before}");
    let text = scrape(&s).await;
    assert!(
        value(&text, "apiserver_watch_events_sizes_count", &events).unwrap() >= 1.0,
        "{text}"
    );
    // A watch is counted in apiserver_request_total when it ends, as upstream's handler
    // returns then.
    let ended = [watching.as_slice(), &["code=\"200\""]].concat();
    assert_eq!(value(&text, "apiserver_request_total", &ended), None);
    drop(watch);
    let text = eventually(WAIT, "the watch to end", || async {
        let text = scrape(&s).await;
        (value(&text, "apiserver_longrunning_requests", &watching) == Some(0.0)).then_some(text)
    })
    .await;
    assert_eq!(
        value(&text, "apiserver_request_total", &ended),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn reading_metrics_takes_system_monitoring() {
    let s = InProcess::start_with(Backend::Sqlite, |c| {
        c.serve.authorization_modes = vec![Mode::Node, Mode::Rbac];
    })
    .await
    .unwrap();
    let user = |name: &str, groups: &[&str]| UserInfo {
        name: name.into(),
        uid: String::new(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    };
    let nobody = user("alice", &["system:authenticated"]);
    let r = s
        .call_as(Some(&nobody), Method::GET, "/metrics", None)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "forbidden: User \"alice\" cannot get path \"/metrics\""
    );
    let monitoring = user("prometheus", &["system:monitoring", "system:authenticated"]);
    eventually(WAIT, "system:monitoring to read /metrics", || async {
        let r = s
            .call_as(Some(&monitoring), Method::GET, "/metrics", None)
            .await;
        (r.status == StatusCode::OK).then_some(())
    })
    .await;
}
