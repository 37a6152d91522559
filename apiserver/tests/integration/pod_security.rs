//! The PodSecurity admission plugin through the REST API: a namespace's labels choose what
//! is refused and what is warned about, with upstream's messages.

use http::StatusCode;
use serde_json::{Value, json};
use testkit::{Backend, InProcess};

const NAMESPACES: &str = "/api/v1/namespaces";

fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn privileged_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "securityContext": {"privileged": true}}]}})
}

fn restricted_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "busybox",
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}}}]}})
}

/// The `Warning` headers of a reply.
fn warnings(r: &testkit::Reply) -> Vec<String> {
    r.headers
        .get_all(http::header::WARNING)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

fn body(r: &testkit::Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[tokio::test]
async fn restricted_namespace_refuses_privileged_pods_and_admits_compliant_ones() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let labels = json!({"pod-security.kubernetes.io/enforce": "restricted"});
    let r = s.post(NAMESPACES, namespace("locked", labels)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    let pods = "/api/v1/namespaces/locked/pods";

    let r = s.post(pods, privileged_pod("priv")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", body(&r));
    let status = r.json();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        concat!(
            r#"pods "priv" is forbidden: violates PodSecurity "restricted:latest": "#,
            r#"privileged (container "c" must not set securityContext.privileged=true), "#,
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), "#,
            r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), "#,
            r#"runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), "#,
            r#"seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        )
    );
    assert!(warnings(&r).is_empty(), "{:?}", warnings(&r));

    let r = s.post(pods, restricted_pod("fine")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    assert!(warnings(&r).is_empty(), "{:?}", warnings(&r));

    // An update that changes an image is judged again; one that does not, is not.
    let mut stored = r.json();
    stored["metadata"]["labels"] = json!({"touched": "yes"});
    let r = s.put(&format!("{pods}/fine"), stored.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", body(&r));

    // A pod in an unlabelled namespace is admitted without a word.
    let r = s
        .post(
            "/api/v1/namespaces/default/pods",
            privileged_pod("anywhere"),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    assert!(warnings(&r).is_empty());
}

#[tokio::test]
async fn warn_level_warns_about_workload_templates() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let labels = json!({"pod-security.kubernetes.io/warn": "baseline"});
    let r = s.post(NAMESPACES, namespace("watched", labels)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));

    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "nginx",
                    "securityContext": {"privileged": true}}]}},
        },
    });
    let r = s
        .post("/apis/apps/v1/namespaces/watched/deployments", deployment)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    assert_eq!(
        warnings(&r),
        [concat!(
            r#"299 - "would violate PodSecurity \"baseline:latest\": "#,
            r#"host namespaces (hostNetwork=true), "#,
            r#"privileged (container \"c\" must not set securityContext.privileged=true)""#
        )]
    );

    // Pods are only warned about too: warn is not enforce.
    let r = s
        .post("/api/v1/namespaces/watched/pods", privileged_pod("p"))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    assert_eq!(
        warnings(&r),
        [
            r#"299 - "would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)""#
        ]
    );
}

#[tokio::test]
async fn namespace_labels_are_validated_and_tightening_warns_about_existing_pods() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let r = s
        .post(
            NAMESPACES,
            namespace(
                "bad",
                json!({"pod-security.kubernetes.io/enforce": "strict"}),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", body(&r));
    assert_eq!(
        r.json()["message"],
        r#"Namespace "bad" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#
    );

    let r = s.post(NAMESPACES, namespace("team", json!({}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    let pods = "/api/v1/namespaces/team/pods";
    for name in ["b-priv", "a-priv"] {
        let r = s.post(pods, privileged_pod(name)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    }
    let r = s.post(pods, restricted_pod("ok")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));

    let r = s
        .patch(
            &format!("{NAMESPACES}/team"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", body(&r));
    assert_eq!(
        warnings(&r),
        [
            r#"299 - "existing pods in namespace \"team\" violate the new PodSecurity enforce level \"baseline:latest\"""#,
            r#"299 - "a-priv (and 1 other pod): privileged""#,
        ]
    );

    // Relaxing it again warns about nothing.
    let r = s
        .patch(
            &format!("{NAMESPACES}/team"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", body(&r));
    assert!(warnings(&r).is_empty(), "{:?}", warnings(&r));
}

#[tokio::test]
async fn exempt_namespaces_and_runtime_classes_are_not_checked() {
    let s = InProcess::start_with(Backend::Sqlite, |c| {
        let exemptions = &mut c.serve.admission.pod_security.exemptions;
        exemptions.namespaces = vec!["free".into()];
        exemptions.runtime_classes = vec!["sandboxed".into()];
    })
    .await
    .unwrap();
    let labels = json!({"pod-security.kubernetes.io/enforce": "restricted"});
    let r = s.post(NAMESPACES, namespace("free", labels.clone())).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    assert_eq!(
        warnings(&r),
        [
            r#"299 - "namespace \"free\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored""#
        ]
    );
    let r = s
        .post("/api/v1/namespaces/free/pods", privileged_pod("p"))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));

    let r = s.post(NAMESPACES, namespace("locked", labels)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    let r = s
        .post(
            "/apis/node.k8s.io/v1/runtimeclasses",
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": "sandboxed"}, "handler": "runsc"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    let mut sandboxed = privileged_pod("sandboxed");
    sandboxed["spec"]["runtimeClassName"] = json!("sandboxed");
    let r = s.post("/api/v1/namespaces/locked/pods", sandboxed).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    let r = s
        .post("/api/v1/namespaces/locked/pods", privileged_pod("plain"))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", body(&r));
}

#[tokio::test]
async fn audit_events_carry_the_policy_and_its_violations() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources: [{group: '', resources: [pods]}]\n  omitStages: [RequestReceived]\n").unwrap();
    let log = dir.path().join("audit.log");
    let path = log.to_string_lossy().into_owned();
    let s = InProcess::start_with(Backend::Sqlite, move |c| {
        c.audit.policy_file = Some(policy);
        c.audit.log_path = Some(path);
    })
    .await
    .unwrap();
    let labels = json!({"pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/audit": "restricted"});
    let r = s.post(NAMESPACES, namespace("audited", labels)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    let mut pod = restricted_pod("half");
    pod["spec"]["securityContext"] = json!({"runAsNonRoot": true});
    let r = s.post("/api/v1/namespaces/audited/pods", pod).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", body(&r));
    let id = r.headers["audit-id"].to_str().unwrap().to_string();
    let events: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["auditID"] == id.as_str())
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0]["annotations"]["pod-security.kubernetes.io/enforce-policy"],
        "baseline:latest"
    );
    assert_eq!(
        events[0]["annotations"]["pod-security.kubernetes.io/audit-violations"],
        r#"would violate PodSecurity "restricted:latest": seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
    );
}
