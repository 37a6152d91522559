//! Admission webhooks and ValidatingAdmissionPolicies, called by the server for real: a small
//! HTTPS webhook on loopback (a certificate from its own CA, passed as the caBundle) that
//! refuses pods labelled `deny=yes` and labels the others; failurePolicy when it is down;
//! dry run and sideEffects; a CEL policy bounding Deployments' replicas.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use http::StatusCode;
use minik8s_apiserver::pki::ServingNames;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually};

use crate::https_server::{self, HttpsServer};

/// What the webhook saw: (path, AdmissionReview request).
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// The webhook's answer to `review` on `path`.
fn answer(path: &str, review: &Value) -> Value {
    let req = &review["request"];
    let uid = req["uid"].clone();
    let labels = &req["object"]["metadata"]["labels"];
    let response = match path {
        "/validate" if labels["deny"] == "yes" => json!({
            "uid": uid, "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": "pods labelled deny are refused"},
        }),
        "/mutate" => {
            let patch = if labels.is_object() {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "true"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "true"}}])
            };
            let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
        }
        "/validate-sub"
            if req["object"]["kind"] == "Scale"
                && req["object"]["spec"]["replicas"].as_i64() > Some(5) =>
        {
            json!({
                "uid": uid, "allowed": false,
                "status": {"code": 403, "reason": "Forbidden", "message": "at most 5 replicas"},
            })
        }
        "/validate" if labels["warn"] == "yes" => json!({
            "uid": uid, "allowed": true, "warnings": ["pods labelled warn are frowned upon"],
        }),
        _ => json!({"uid": uid, "allowed": true}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Serves the webhook over TLS on a loopback port; returns its address and the CA to trust.
async fn start_webhook(seen: Seen) -> (SocketAddr, String, HttpsServer) {
    let names = ServingNames {
        dns: vec![],
        ips: vec!["127.0.0.1".parse().unwrap()],
    };
    let server = https_server::serve(names, move |req| {
        let review: Value = serde_json::from_slice(req.body).unwrap_or_default();
        seen.lock()
            .unwrap()
            .push((req.path.to_string(), review["request"].clone()));
        (200, answer(req.path, &review))
    })
    .await;
    (server.addr, server.ca_pem.clone(), server)
}

fn webhook(name: &str, url: &str, ca: &str, failure_policy: &str, side_effects: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {
            "url": url,
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
        },
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "failurePolicy": failure_policy,
        "sideEffects": side_effects,
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    })
}

fn pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })
}

/// A pod named by the server, for writes retried until a configuration takes effect.
fn generated_pod(prefix: &str, labels: Value) -> Value {
    let mut p = pod("", labels);
    p["metadata"] = json!({"generateName": prefix, "labels": p["metadata"]["labels"]});
    p
}

const PODS: &str = "/api/v1/namespaces/default/pods";
const VWC: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MWC: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";

#[tokio::test]
async fn webhooks_refuse_and_patch_pods() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    let seen: Seen = Default::default();
    let (addr, ca, _server) = start_webhook(seen.clone()).await;
    let validate = format!("https://{addr}/validate");
    let mutate = format!("https://{addr}/mutate");
    let r = server
        .post(
            VWC,
            json!({
                "metadata": {"name": "deny-labelled"},
                "webhooks": [webhook("deny.example.com", &validate, &ca, "Fail", "None")],
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let created = r.json();
    assert_eq!(created["webhooks"][0]["matchPolicy"], "Equivalent");
    assert_eq!(created["webhooks"][0]["namespaceSelector"], json!({}));
    let r = server
        .post(
            MWC,
            json!({
                "metadata": {"name": "label-pods"},
                "webhooks": [webhook("label.example.com", &mutate, &ca, "Fail", "None")],
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(r.json()["webhooks"][0]["reinvocationPolicy"], "Never");

    // Refused by the validating webhook, with its code, reason and message.
    let refused = eventually(Duration::from_secs(10), "the webhook refusing", || async {
        let r = server
            .post(PODS, generated_pod("denied-", json!({"deny": "yes"})))
            .await;
        (r.status == StatusCode::FORBIDDEN).then(|| r.json())
    })
    .await;
    assert_eq!(refused["reason"], "Forbidden");
    assert_eq!(
        refused["message"],
        "admission webhook \"deny.example.com\" denied the request: pods labelled deny are refused"
    );

    // Admitted with the webhook's warning, as a Warning header.
    let r = server
        .post(PODS, generated_pod("warned-", json!({"warn": "yes"})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(
        warnings(&r),
        ["299 - \"pods labelled warn are frowned upon\""]
    );

    // Admitted and patched by the mutating webhook.
    let r = server
        .post(PODS, pod("allowed", json!({"app": "web"})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(r.json()["metadata"]["labels"]["mutated"], "true");
    let stored = server.get(&format!("{PODS}/allowed")).await.json();
    assert_eq!(stored["metadata"]["labels"]["mutated"], "true");
    assert_eq!(stored["metadata"]["labels"]["app"], "web");

    // The reviews said who asked, about what.
    let reviews = seen.lock().unwrap().clone();
    let (_, mutate_review) = reviews
        .iter()
        .find(|(p, r)| p == "/mutate" && r["name"] == "allowed")
        .unwrap();
    assert_eq!(mutate_review["operation"], "CREATE");
    assert_eq!(mutate_review["namespace"], "default");
    assert_eq!(
        mutate_review["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(
        mutate_review["kind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert_eq!(mutate_review["userInfo"]["username"], "minik8s-admin");
    assert_eq!(mutate_review["dryRun"], false);
    // The validating webhook saw the mutated object.
    let (_, validate_review) = reviews
        .iter()
        .find(|(p, r)| p == "/validate" && r["name"] == "allowed")
        .unwrap();
    assert_eq!(
        validate_review["object"]["metadata"]["labels"]["mutated"],
        "true"
    );
    // Rules name CREATE only: a label update is not sent.
    let before = seen.lock().unwrap().len();
    let r = server
        .patch(
            &format!("{PODS}/allowed"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"deny": "yes"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(seen.lock().unwrap().len(), before);
}

#[tokio::test]
async fn failure_policy_and_dry_run() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    let seen: Seen = Default::default();
    let (addr, ca, _server) = start_webhook(seen.clone()).await;
    // Nothing listens on a port the test bound and let go.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("https://{}/validate", l.local_addr().unwrap())
    };
    let r = server
        .post(
            VWC,
            json!({
                "metadata": {"name": "down"},
                "webhooks": [webhook("down.example.com", &down, &ca, "Fail", "None")],
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let failed = eventually(
        Duration::from_secs(10),
        "the webhook failing closed",
        || async {
            let r = server.post(PODS, generated_pod("a-", json!({}))).await;
            (r.status == StatusCode::INTERNAL_SERVER_ERROR).then(|| r.json())
        },
    )
    .await;
    let message = failed["message"].as_str().unwrap();
    assert!(
        message.starts_with("Internal error occurred: failed calling webhook \"down.example.com\": failed to call webhook: Post \"https://127.0.0.1:"),
        "{message}"
    );
    // Ignore: the write goes on.
    let r = server
        .patch(
            &format!("{VWC}/down"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    eventually(
        Duration::from_secs(10),
        "the webhook failing open",
        || async {
            let r = server.post(PODS, generated_pod("a-", json!({}))).await;
            (r.status == StatusCode::CREATED).then_some(())
        },
    )
    .await;
    let r = server.delete(&format!("{VWC}/down")).await;
    assert_eq!(r.status, StatusCode::OK);

    // A webhook with side effects refuses dry runs; one without is called with dryRun.
    let validate = format!("https://{addr}/validate");
    let r = server
        .post(
            VWC,
            json!({
                "metadata": {"name": "effects"},
                "webhooks": [webhook("effects.example.com", &validate, &ca, "Fail", "Some")],
            }),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "sideEffects Some is not valid in v1"
    );
    let r = server
        .post(VWC, json!({
            "metadata": {"name": "effects"},
            "webhooks": [webhook("effects.example.com", &validate, &ca, "Fail", "NoneOnDryRun")],
        }))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    eventually(
        Duration::from_secs(10),
        "a dry run sent to the webhook",
        || async {
            let r = server
                .post(
                    &format!("{PODS}?dryRun=All"),
                    pod("dry", json!({"deny": "yes"})),
                )
                .await;
            (r.status == StatusCode::FORBIDDEN).then_some(())
        },
    )
    .await;
    let reviews = seen.lock().unwrap().clone();
    assert!(
        reviews
            .iter()
            .any(|(_, r)| r["name"] == "dry" && r["dryRun"] == true)
    );
}

#[tokio::test]
async fn validating_admission_policy_bounds_replicas() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    let r = server
        .post(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
            json!({
                "metadata": {"name": "replica-limit"},
                "spec": {
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": ["apps"], "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"],
                    }]},
                    "validations": [{
                        "expression": "object.spec.replicas <= 5",
                        "messageExpression": "'replicas must be at most 5, not ' + string(object.spec.replicas)",
                    }],
                },
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let r = server
        .post(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
            json!({
                "metadata": {"name": "replica-limit-binding"},
                "spec": {"policyName": "replica-limit", "validationActions": ["Deny"]},
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let refused = eventually(Duration::from_secs(10), "the policy refusing", || async {
        let r = server.post(DEPLOYMENTS, deployment(10)).await;
        (r.status == StatusCode::UNPROCESSABLE_ENTITY).then(|| r.json())
    })
    .await;
    assert_eq!(refused["reason"], "Invalid");
    assert_eq!(
        refused["message"],
        "ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: replicas must be at most 5, not 10"
    );
    let r = server.post(DEPLOYMENTS, deployment(3)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let name = r.json()["metadata"]["name"].as_str().unwrap().to_string();
    // Updates are checked too.
    let r = server
        .patch(
            &format!("{DEPLOYMENTS}/{name}"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 7}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json());
    // Warn only: the write goes on.
    let r = server
        .patch(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/replica-limit-binding",
            "application/merge-patch+json",
            json!({"spec": {"validationActions": ["Warn"]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    let r = eventually(
        Duration::from_secs(10),
        "the policy only warning",
        || async {
            let r = server.post(DEPLOYMENTS, deployment(9)).await;
            (r.status == StatusCode::CREATED).then_some(r)
        },
    )
    .await;
    let warned = warnings(&r);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].starts_with(
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding': "
        ),
        "{warned:?}"
    );
}

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn deployment(replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"generateName": format!("web-{replicas}-")},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
        },
    })
}

/// The `Warning` headers of a reply.
fn warnings(r: &testkit::Reply) -> Vec<String> {
    r.headers
        .get_all(http::header::WARNING)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn validating_admission_policy_reads_its_params() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
    const BINDINGS: &str =
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
    const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
    let r = server
        .post(
            POLICIES,
            json!({
                "metadata": {"name": "max-replicas"},
                "spec": {
                    "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": ["apps"], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["deployments"],
                    }]},
                    "validations": [{
                        "expression": "object.spec.replicas <= int(params.data.max)",
                        "messageExpression": "'at most ' + params.data.max + ' replicas'",
                    }],
                },
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    // The params are the ConfigMap `limits` of the written object's namespace.
    let binding = |action: &str| {
        json!({
            "metadata": {"name": "max-replicas"},
            "spec": {"policyName": "max-replicas", "validationActions": ["Deny"],
                     "paramRef": {"name": "limits", "parameterNotFoundAction": action}},
        })
    };
    let r = server.post(BINDINGS, binding("Deny")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let limits = json!({"metadata": {"name": "limits"}, "data": {"max": "3"}});
    let r = server.post(CONFIGMAPS, limits).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let refused = eventually(Duration::from_secs(10), "the params read", || async {
        let r = server.post(DEPLOYMENTS, deployment(4)).await;
        (r.status == StatusCode::UNPROCESSABLE_ENTITY).then(|| r.json())
    })
    .await;
    assert_eq!(
        refused["message"],
        "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: at most 3 replicas"
    );
    let r = server.post(DEPLOYMENTS, deployment(3)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    // Without its params the binding refuses (Deny), or lets the write through (Allow).
    let r = server.delete(&format!("{CONFIGMAPS}/limits")).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    let r = server.post(DEPLOYMENTS, deployment(1)).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json());
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("no params found for policy binding with `Deny` parameterNotFoundAction"),
        "{:?}",
        r.json()
    );
    let r = server
        .put(&format!("{BINDINGS}/max-replicas"), {
            let mut b = server.get(&format!("{BINDINGS}/max-replicas")).await.json();
            b["spec"]["paramRef"]["parameterNotFoundAction"] = json!("Allow");
            b
        })
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    eventually(Duration::from_secs(10), "Allow applied", || async {
        let r = server.post(DEPLOYMENTS, deployment(9)).await;
        (r.status == StatusCode::CREATED).then_some(())
    })
    .await;
}

/// Subresources whose objects are not the resource's own, and CONNECT, meet webhooks with
/// their own kinds: a Scale (update and patch), an Eviction, a CONNECT's PodExecOptions.
#[tokio::test]
async fn webhooks_see_subresources_and_connects() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    let seen: Seen = Default::default();
    let (addr, ca, _server) = start_webhook(seen.clone()).await;
    let mut hook = webhook(
        "sub.example.com",
        &format!("https://{addr}/validate-sub"),
        &ca,
        "Fail",
        "None",
    );
    hook["rules"] = json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
        "resources": ["deployments/scale", "pods/eviction", "pods/exec"]}]);
    let r = server
        .post(
            VWC,
            json!({"metadata": {"name": "subresources"}, "webhooks": [hook]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let r = server.post(DEPLOYMENTS, deployment(1)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let scale = format!(
        "{DEPLOYMENTS}/{}/scale",
        r.json()["metadata"]["name"].as_str().unwrap()
    );

    let refused = eventually(
        Duration::from_secs(10),
        "the webhook refusing a Scale",
        || async {
            let r = server
                .patch(
                    &scale,
                    "application/merge-patch+json",
                    json!({"spec": {"replicas": 9}}),
                )
                .await;
            (r.status == StatusCode::FORBIDDEN).then(|| r.json())
        },
    )
    .await;
    assert_eq!(
        refused["message"],
        "admission webhook \"sub.example.com\" denied the request: at most 5 replicas"
    );
    let mut whole = server.get(&scale).await.json();
    whole["spec"]["replicas"] = json!(7);
    assert_eq!(
        server.put(&scale, whole.clone()).await.status,
        StatusCode::FORBIDDEN
    );
    whole["spec"]["replicas"] = json!(3);
    let r = server.put(&scale, whole).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    assert_eq!(server.get(&scale).await.json()["spec"]["replicas"], 3);

    let r = server.post(PODS, pod("target", json!({}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": "target", "namespace": "default"}});
    let r = server
        .post(&format!("{PODS}/target/eviction"), eviction)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let r = server.post(PODS, pod("shell", json!({}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    // No kubelet here: the exec fails after admission saw it.
    let r = server
        .get(&format!(
            "{PODS}/shell/exec?command=sh&command=-c&stdout=true&container=c"
        ))
        .await;
    assert_ne!(r.status, StatusCode::OK);

    let reviews = seen.lock().unwrap().clone();
    let of = |sub: &str, op: &str| {
        reviews
            .iter()
            .find(|(p, r)| p == "/validate-sub" && r["subResource"] == sub && r["operation"] == op)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no {op} review of {sub} in {reviews:?}"))
    };
    let scale_review = of("scale", "UPDATE");
    assert_eq!(
        scale_review["kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(
        scale_review["resource"],
        json!({"group": "apps", "version": "v1", "resource": "deployments"})
    );
    assert_eq!(scale_review["oldObject"]["spec"]["replicas"], 1);
    let eviction_review = of("eviction", "CREATE");
    assert_eq!(eviction_review["kind"]["kind"], "Eviction");
    assert_eq!(eviction_review["object"]["metadata"]["name"], "target");
    let exec_review = of("exec", "CONNECT");
    assert_eq!(exec_review["kind"]["kind"], "PodExecOptions");
    assert_eq!(exec_review["object"]["command"], json!(["sh", "-c"]));
    assert_eq!(exec_review["name"], "shell");
    assert!(exec_review["options"].is_null());
}
