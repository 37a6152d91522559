//! The audit log of an in-process server with a policy: which requests are written, at what
//! level, and the stages of each.

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use testkit::{Backend, InProcess};
use tower::ServiceExt;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  resources: [{group: '', resources: [endpoints]}]
- level: Metadata
  resources: [{group: '', resources: [secrets]}]
- level: RequestResponse
  verbs: [create]
  resources: [{group: '', resources: [configmaps]}]
  omitStages: [RequestReceived]
- level: Request
  verbs: [update]
- level: Metadata
  resources: [{group: '', resources: [configmaps]}]
  omitStages: [RequestReceived]
";

struct Audited {
    api: InProcess,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn audited() -> Audited {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let log = dir.path().join("log").join("audit.log");
    let path = log.to_string_lossy().into_owned();
    let api = InProcess::start_with(Backend::Sqlite, move |c| {
        c.audit.policy_file = Some(policy);
        c.audit.log_path = Some(path);
    })
    .await
    .unwrap();
    Audited {
        api,
        log,
        _dir: dir,
    }
}

impl Audited {
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The events of the request with `audit_id`, in order.
    fn of(&self, audit_id: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["auditID"] == audit_id)
            .collect()
    }
}

fn audit_id(headers: &http::HeaderMap) -> String {
    headers["audit-id"].to_str().unwrap().to_string()
}

#[tokio::test]
async fn requests_are_written_at_their_rules_level() {
    let s = audited().await;
    // A create at RequestResponse: the object sent and the object stored.
    let cm = json!({"metadata": {"name": "audited"}, "data": {"k": "v"}});
    let r = s.api.post(CMS, cm).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let events = s.of(&audit_id(&r.headers));
    // RequestReceived is left out by the rule; a short request has no ResponseStarted.
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["kind"], "Event");
    assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(e["level"], "RequestResponse");
    assert_eq!(e["stage"], "ResponseComplete");
    assert_eq!(e["verb"], "create");
    assert_eq!(e["requestURI"], CMS);
    assert_eq!(e["user"]["username"], "minik8s-admin");
    assert_eq!(
        e["objectRef"],
        json!({"resource": "configmaps", "namespace": "default", "name": "audited", "apiVersion": "v1"})
    );
    assert_eq!(e["responseStatus"], json!({"metadata": {}, "code": 201}));
    assert_eq!(e["requestObject"]["data"], json!({"k": "v"}));
    assert_eq!(e["responseObject"]["metadata"]["name"], "audited");
    assert!(e["responseObject"]["metadata"]["uid"].is_string());
    assert!(
        e["requestReceivedTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert!(
        e["stageTimestamp"].as_str().unwrap() >= e["requestReceivedTimestamp"].as_str().unwrap()
    );

    // A get at Metadata: no objects.
    let r = s.api.get(&format!("{CMS}/audited")).await;
    let e = &s.of(&audit_id(&r.headers))[0];
    assert_eq!(e["level"], "Metadata");
    assert_eq!(e["verb"], "get");
    assert_eq!(e["objectRef"]["name"], "audited");
    assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none());

    // A failure keeps its Status.
    let r = s.api.get(&format!("{CMS}/missing")).await;
    let e = &s.of(&audit_id(&r.headers))[0];
    assert_eq!(e["responseStatus"]["code"], 404);
    assert_eq!(e["responseStatus"]["reason"], "NotFound");
    assert_eq!(e["responseStatus"]["status"], "Failure");
    assert_eq!(
        e["responseStatus"]["message"],
        "configmaps \"missing\" not found"
    );

    // A secret at Metadata only: its data is nowhere in the log.
    let secret = json!({"metadata": {"name": "pw"}, "data": {"password": "c2VjcmV0LXZhbHVl"}});
    let r = s
        .api
        .post("/api/v1/namespaces/default/secrets", secret)
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let events = s.of(&audit_id(&r.headers));
    let stages: Vec<&str> = events
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["RequestReceived", "ResponseComplete"]);
    let e = &events[1];
    assert_eq!(e["level"], "Metadata");
    assert_eq!(e["objectRef"]["name"], "pw");
    assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none());
    assert!(
        !std::fs::read_to_string(&s.log)
            .unwrap()
            .contains("c2VjcmV0LXZhbHVl")
    );

    // A None rule writes nothing.
    let r = s.api.get("/api/v1/namespaces/default/endpoints").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(s.of(&audit_id(&r.headers)).is_empty());
    assert!(
        !s.events()
            .iter()
            .any(|e| e["objectRef"]["resource"] == "endpoints")
    );

    // An update at Request: the request's object only.
    let mut current = s.api.get(&format!("{CMS}/audited")).await.json();
    current["data"]["k"] = "w".into();
    let r = s.api.put(&format!("{CMS}/audited"), current).await;
    assert_eq!(r.status, StatusCode::OK);
    let events = s.of(&audit_id(&r.headers));
    let stages: Vec<&str> = events
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["RequestReceived", "ResponseComplete"]);
    assert_eq!(
        events[0]["stageTimestamp"],
        events[0]["requestReceivedTimestamp"]
    );
    assert_eq!(events[1]["requestObject"]["data"]["k"], "w");
    assert!(events[1].get("responseObject").is_none());
}

#[tokio::test]
async fn a_watch_is_written_when_it_starts_and_when_it_ends() {
    let s = audited().await;
    s.api.post(CMS, json!({"metadata": {"name": "w"}})).await;
    let req = Request::get(format!("{CMS}?watch=true"))
        .header("audit-id", "watch-1")
        .body(axum::body::Body::empty())
        .unwrap();
    let mut req = req;
    req.extensions_mut()
        .insert(minik8s_apiserver::auth::ClientCertIdentity(testkit::admin()));
    let resp = s.api.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // The client's audit ID is kept and sent back.
    assert_eq!(audit_id(resp.headers()), "watch-1");
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"ADDED\""));
    let stages = |s: &Audited| -> Vec<String> {
        s.of("watch-1")
            .iter()
            .map(|e| e["stage"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(stages(&s), ["ResponseStarted"]);
    let started = &s.of("watch-1")[0];
    assert_eq!(started["verb"], "watch");
    assert_eq!(started["responseStatus"]["code"], 200);
    // The client goes away: the watch is complete.
    drop(body);
    assert_eq!(stages(&s), ["ResponseStarted", "ResponseComplete"]);
}

#[tokio::test]
async fn every_response_has_an_audit_id_even_without_auditing() {
    let api = InProcess::start(Backend::Sqlite).await.unwrap();
    let a = api.get("/version").await;
    let b = api.get("/version").await;
    let (a, b) = (audit_id(&a.headers), audit_id(&b.headers));
    assert_eq!(a.len(), 36);
    assert_ne!(a, b);
}
