//! The layers around `/api` and `/apis` requests, through the router without a socket: the
//! body limit and the request metrics.

use http::{Method, StatusCode};
use serde_json::json;
use testkit::{Backend, InProcess};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const LIMIT: usize = 3 * 1024 * 1024;

/// The value of the `apiserver_request_total` series with these labels (0 when absent).
async fn requests(s: &InProcess, verb: &str, resource: &str, subresource: &str, code: &str) -> u64 {
    let text = String::from_utf8(s.get("/metrics").await.body.to_vec()).unwrap();
    let labels = [
        format!("code=\"{code}\""),
        format!("resource=\"{resource}\""),
        format!("subresource=\"{subresource}\""),
        format!("verb=\"{verb}\""),
    ];
    text.lines()
        .filter_map(|l| l.strip_prefix("apiserver_request_total{"))
        .filter_map(|l| l.split_once("} "))
        .find(|(found, _)| {
            let found: Vec<&str> = found.split(',').collect();
            labels.iter().all(|l| found.contains(&l.as_str()))
        })
        .map_or(0, |(_, value)| value.parse().unwrap())
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_a_status() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let huge = json!({"metadata": {"name": "huge"}, "data": {"k": "x".repeat(LIMIT)}});
    let r = s.post(CMS, huge).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    let status = r.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert_eq!(status["code"], 413);
    assert_eq!(
        status["message"],
        format!("Request entity too large: limit is {LIMIT}")
    );
    assert_eq!(
        s.get(&format!("{CMS}/huge")).await.status,
        StatusCode::NOT_FOUND
    );
    // A body of exactly the limit is read (and then refused for what it holds, not its size).
    let r = s
        .call(
            Method::POST,
            CMS,
            Some("application/json"),
            vec![b' '; LIMIT],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{:?}", r.body);
    // Connect requests stream their body unread: a missing pod, not a too-large body.
    let r = s
        .call(
            Method::POST,
            "/api/v1/namespaces/default/pods/nope/exec?command=true&stdout=true",
            None,
            vec![0u8; LIMIT + 1],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{:?}", r.body);
}

#[tokio::test]
async fn requests_are_counted_by_verb_resource_subresource_and_code() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let before = requests(&s, "LIST", "configmaps", "", "200").await;
    assert_eq!(s.get(CMS).await.status, StatusCode::OK);
    assert_eq!(
        requests(&s, "LIST", "configmaps", "", "200").await,
        before + 1
    );
    assert_eq!(
        s.get(&format!("{CMS}/nope")).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(requests(&s, "GET", "configmaps", "", "404").await, 1);
    let r = s.get("/api/v1/namespaces/default/pods/nope/status").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(requests(&s, "GET", "pods", "status", "404").await, 1);
    // A body over the limit is counted with its 413, as upstream counts it.
    let huge = json!({"metadata": {"name": "huge"}, "data": {"k": "x".repeat(LIMIT)}});
    s.post(CMS, huge).await;
    assert_eq!(requests(&s, "POST", "configmaps", "", "413").await, 1);
    // Paths that name no served resource, and discovery, are not counted.
    assert_eq!(
        s.get("/api/v1/nosuchthings").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(requests(&s, "LIST", "nosuchthings", "", "404").await, 0);
    assert_eq!(s.get("/apis/apps/v1").await.status, StatusCode::OK);
    let text = String::from_utf8(s.get("/metrics").await.body.to_vec()).unwrap();
    assert!(!text.contains("nosuchthings"), "{text}");
    // Each series is timed too.
    assert!(
        text.lines().any(
            |l| l.starts_with("apiserver_request_duration_seconds_count{")
                && l.contains("resource=\"configmaps\"")
                && l.contains("verb=\"LIST\"")
        ),
        "{text}"
    );
}
