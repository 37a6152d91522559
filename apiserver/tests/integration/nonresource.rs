//! Paths beside the resource API as upstream serves them: discovery and `/version` with a
//! trailing slash (clients such as kr8s and the Python client ask for `/api/`), and the
//! health endpoints' checks.

use http::StatusCode;
use serde_json::json;
use testkit::{Backend, InProcess};

fn text(r: &testkit::Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[tokio::test]
async fn discovery_answers_with_and_without_a_trailing_slash() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    for (with, without) in [
        ("/api/", "/api"),
        ("/version/", "/version"),
        ("/api/v1/", "/api/v1"),
        ("/apis/apps/", "/apis/apps"),
        ("/apis/apps/v1/", "/apis/apps/v1"),
    ] {
        let (a, b) = (s.get(with).await, s.get(without).await);
        assert_eq!(a.status, StatusCode::OK, "{with}");
        assert_eq!(a.json(), b.json(), "{with}");
    }
    let groups = s.get("/apis/").await;
    assert_eq!(groups.status, StatusCode::OK);
    assert_eq!(groups.json()["kind"], "APIGroupList");
    // `/apis/` is upstream's plain handler: it never answers aggregated discovery.
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let r = s.get_accepting("/apis", aggregated).await;
    assert_eq!(r.json()["kind"], "APIGroupDiscoveryList");
    let r = s.get_accepting("/apis/", aggregated).await;
    assert_eq!(r.json()["kind"], "APIGroupList");
}

#[tokio::test]
async fn health_checks_list_exclude_and_answer_one_by_one() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    for path in ["/healthz", "/livez", "/readyz"] {
        let r = s.get(path).await;
        assert_eq!(
            (r.status, text(&r).as_str()),
            (StatusCode::OK, "ok"),
            "{path}"
        );
        assert_eq!(r.headers["content-type"], "text/plain; charset=utf-8");
        assert_eq!(r.headers["x-content-type-options"], "nosniff");
    }
    let r = s.get("/readyz?verbose").await;
    let body = text(&r);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "[+]ping ok",
            "[+]log ok",
            "[+]etcd ok",
            "[+]etcd-readiness ok",
            "[+]informer-sync ok"
        ]
    );
    assert!(
        lines.contains(&"[+]poststarthook/bootstrap-controller ok"),
        "{body}"
    );
    assert_eq!(
        lines[lines.len() - 2..],
        ["[+]shutdown ok", "readyz check passed"]
    );
    let body = text(&s.get("/livez?verbose").await);
    assert!(
        body.ends_with("[+]poststarthook/bootstrap-controller ok\nlivez check passed\n"),
        "{body}"
    );
    assert!(!body.contains("shutdown"), "{body}");
    let body = text(&s.get("/healthz?verbose=1").await);
    assert!(
        body.starts_with("[+]ping ok\n[+]log ok\n[+]etcd ok\n"),
        "{body}"
    );
    assert!(body.ends_with("healthz check passed\n"), "{body}");

    let body = text(
        &s.get("/readyz?verbose&exclude=etcd&exclude=nope&exclude=ping")
            .await,
    );
    assert!(
        body.starts_with("[+]ping excluded: ok\n[+]log ok\n[+]etcd excluded: ok\n"),
        "{body}"
    );
    assert!(
        body.contains("warn: some health checks cannot be excluded: no matches for \"nope\"\n"),
        "{body}"
    );

    for (path, code, want) in [
        ("/readyz/etcd", StatusCode::OK, "ok"),
        ("/livez/ping", StatusCode::OK, "ok"),
        (
            "/healthz/poststarthook/bootstrap-controller",
            StatusCode::OK,
            "ok",
        ),
        (
            "/readyz/nope",
            StatusCode::NOT_FOUND,
            "404 page not found\n",
        ),
        (
            "/livez/shutdown",
            StatusCode::NOT_FOUND,
            "404 page not found\n",
        ),
    ] {
        let r = s.get(path).await;
        assert_eq!((r.status, text(&r).as_str()), (code, want), "{path}");
    }

    // Once the process shuts down, readyz fails (listing why without saying more) while
    // livez still passes.
    s.server.begin_shutdown();
    let r = s.get("/readyz").await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    let body = text(&r);
    assert!(body.contains("[+]etcd ok\n"), "{body}");
    assert!(
        body.ends_with("[-]shutdown failed: reason withheld\nreadyz check failed\n"),
        "{body}"
    );
    let r = s.get("/readyz/shutdown").await;
    assert_eq!(
        (r.status, text(&r).as_str()),
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal server error: process is shutting down\n"
        )
    );
    assert_eq!(s.get("/livez").await.status, StatusCode::OK);
    // Still JSON where it should be.
    assert_eq!(s.get("/version").await.json()["major"], json!("1"));
}
