//! Authorization with `--authorization-mode=Node,RBAC` and anonymous requests on: users act
//! only as their roles allow, with upstream's Forbidden messages; access reviews answer as
//! the requests would be judged; roles and bindings cannot grant what their writer lacks;
//! a kubelet reads only what pods bound to its node use.

use std::time::Duration;

use http::{Method, StatusCode};
use minik8s_apiserver::auth::UserInfo;
use minik8s_apiserver::authz::Mode;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(20);

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.into(),
        uid: String::new(),
        groups: groups
            .iter()
            .map(|g| g.to_string())
            .chain(["system:authenticated".to_string()])
            .collect(),
    }
}

async fn start() -> InProcess {
    InProcess::start_with(Backend::Sqlite, |c| {
        c.serve.authorization_modes = vec![Mode::Node, Mode::Rbac];
        c.serve.anonymous_auth = Some(true);
    })
    .await
    .expect("server")
}

async fn created(api: &InProcess, path: &str, body: Value) {
    let r = api.post(path, body).await;
    assert!(
        r.status.is_success(),
        "{path}: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
}

/// Waits until `user` gets `want` for `method path`.
async fn until_status(
    api: &InProcess,
    user: Option<&UserInfo>,
    method: Method,
    path: &str,
    body: Option<Value>,
    want: StatusCode,
) -> Value {
    eventually(WAIT, &format!("{method} {path} answers {want}"), || {
        let body = body.clone();
        let method = method.clone();
        async move {
            let r = api.call_as(user, method, path, body).await;
            (r.status == want).then(|| serde_json::from_slice(&r.body).unwrap_or(Value::Null))
        }
    })
    .await
}

#[tokio::test]
async fn users_act_as_their_roles_allow() {
    let api = start().await;
    let bob = user("bob", &[]);
    let r = api
        .call_as(
            Some(&bob),
            Method::GET,
            "/api/v1/namespaces/default/pods",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let status = r.json();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let r = api
        .call_as(
            Some(&bob),
            Method::GET,
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
            None,
        )
        .await;
    assert_eq!(
        r.json()["message"],
        "deployments.apps \"web\" is forbidden: User \"bob\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"default\""
    );
    // A Role in default and its binding: bob may read pods there, and only there.
    created(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
        json!({
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
        }),
    )
    .await;
    created(&api, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", json!({
        "metadata": {"name": "bob-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"}]
    }))
    .await;
    until_status(
        &api,
        Some(&bob),
        Method::GET,
        "/api/v1/namespaces/default/pods",
        None,
        StatusCode::OK,
    )
    .await;
    let r = api
        .call_as(
            Some(&bob),
            Method::GET,
            "/api/v1/namespaces/kube-system/pods",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = api
        .call_as(
            Some(&bob),
            Method::DELETE,
            "/api/v1/namespaces/default/pods/x",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A group's ClusterRoleBinding reaches its members everywhere.
    created(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({
            "metadata": {"name": "ns-reader"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]
        }),
    )
    .await;
    created(&api, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json!({
        "metadata": {"name": "devs-read-namespaces"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ns-reader"},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"}]
    }))
    .await;
    let carol = user("carol", &["devs"]);
    until_status(
        &api,
        Some(&carol),
        Method::GET,
        "/api/v1/namespaces",
        None,
        StatusCode::OK,
    )
    .await;
    // Access reviews agree with the requests.
    let review = |verb: &str, ns: &str| {
        json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}
        })
    };
    for (verb, ns, allowed) in [
        ("list", "default", true),
        ("delete", "default", false),
        ("list", "kube-system", false),
    ] {
        let r = api
            .call_as(
                Some(&bob),
                Method::POST,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                Some(review(verb, ns)),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
        assert_eq!(
            r.json()["status"]["allowed"],
            allowed,
            "{verb} pods in {ns}"
        );
    }
    let sar = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "carol", "groups": ["devs"], "resourceAttributes": {"verb": "get", "resource": "namespaces"}}
    });
    let r = api
        .post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
        .await;
    assert_eq!(r.json()["status"]["allowed"], true);
    let rules = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": "default"}
    });
    let r = api
        .call_as(
            Some(&bob),
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            Some(rules),
        )
        .await;
    let status = &r.json()["status"];
    assert_eq!(status["incomplete"], false);
    assert!(
        status["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["pods"])),
        "{status}"
    );
}

#[tokio::test]
async fn anonymous_requests_are_judged_as_system_anonymous() {
    let api = start().await;
    let r = api
        .call_as(None, Method::GET, "/api/v1/namespaces", None)
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "namespaces is forbidden: User \"system:anonymous\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    let r = api.call_as(None, Method::GET, "/metrics", None).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/metrics\""
    );
    // What upstream's system:public-info-viewer grants system:unauthenticated.
    created(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({
            "metadata": {"name": "public"},
            "rules": [{"nonResourceURLs": ["/healthz", "/version"], "verbs": ["get"]}]
        }),
    )
    .await;
    created(&api, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json!({
        "metadata": {"name": "public"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "public"},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:unauthenticated"}]
    }))
    .await;
    until_status(&api, None, Method::GET, "/version", None, StatusCode::OK).await;
    // Off, they are 401s.
    let closed = InProcess::start_with(Backend::Sqlite, |c| {
        c.serve.authorization_modes = vec![Mode::Rbac];
        c.serve.anonymous_auth = Some(false);
    })
    .await
    .unwrap();
    let r = closed.call_as(None, Method::GET, "/healthz", None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn roles_and_bindings_grant_only_what_their_writer_holds() {
    let api = start().await;
    // Dana administers namespace team: she may write roles and bindings there (not with
    // `*`, which includes `escalate` and `bind`), and has everything on pods, nothing on
    // secrets.
    created(
        &api,
        "/api/v1/namespaces",
        json!({"metadata": {"name": "team"}}),
    )
    .await;
    created(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles",
        json!({
            "metadata": {"name": "rbac-admin"},
            "rules": [
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
                 "verbs": ["get", "list", "create", "update", "patch", "delete"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}
            ]
        }),
    )
    .await;
    created(&api, "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings", json!({
        "metadata": {"name": "dana"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rbac-admin"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "dana"}]
    }))
    .await;
    let dana = user("dana", &[]);
    let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles";
    let pods_role = json!({"metadata": {"name": "pods"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
    until_status(
        &api,
        Some(&dana),
        Method::POST,
        roles,
        Some(pods_role),
        StatusCode::CREATED,
    )
    .await;
    let secrets_role = json!({"metadata": {"name": "secrets"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]});
    let r = api
        .call_as(Some(&dana), Method::POST, roles, Some(secrets_role.clone()))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "roles.rbac.authorization.k8s.io \"secrets\" is forbidden: user \"dana\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}"
    );
    // Binding a role she does not hold is refused too.
    created(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({
            "metadata": {"name": "secret-reader"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
        }),
    )
    .await;
    let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings";
    let bind_secrets = json!({
        "metadata": {"name": "eve-secrets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "secret-reader"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "eve"}]
    });
    let r = api
        .call_as(
            Some(&dana),
            Method::POST,
            bindings,
            Some(bind_secrets.clone()),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // With `escalate` and `bind` granted, both go through.
    created(&api, "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles", json!({
        "metadata": {"name": "escalator"},
        "rules": [
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["secret-reader"]}
        ]
    }))
    .await;
    created(&api, bindings, json!({
        "metadata": {"name": "dana-escalates"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "escalator"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "dana"}]
    }))
    .await;
    until_status(
        &api,
        Some(&dana),
        Method::POST,
        roles,
        Some(secrets_role),
        StatusCode::CREATED,
    )
    .await;
    until_status(
        &api,
        Some(&dana),
        Method::POST,
        bindings,
        Some(bind_secrets),
        StatusCode::CREATED,
    )
    .await;
}

#[tokio::test]
async fn a_kubelet_reads_only_what_its_pods_use() {
    let api = start().await;
    for (secret, node) in [("for-n1", "n1"), ("for-n2", "n2")] {
        created(
            &api,
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": secret}, "data": {}}),
        )
        .await;
        created(&api, "/api/v1/namespaces/default/pods", json!({
            "metadata": {"name": format!("pod-{node}")},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                "env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}]}]}
        }))
        .await;
    }
    let n1 = user("system:node:n1", &["system:nodes"]);
    until_status(
        &api,
        Some(&n1),
        Method::GET,
        "/api/v1/namespaces/default/secrets/for-n1",
        None,
        StatusCode::OK,
    )
    .await;
    let r = api
        .call_as(
            Some(&n1),
            Method::GET,
            "/api/v1/namespaces/default/secrets/for-n2",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "secrets \"for-n2\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'n1' and this object"
    );
    let r = api
        .call_as(
            Some(&n1),
            Method::GET,
            "/api/v1/namespaces/default/secrets",
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

/// NodeRestriction: what the Node authorizer lets kubelets write, narrowed to their own.
#[tokio::test]
async fn a_kubelet_writes_only_its_own_node_lease_and_pods() {
    let api = start().await;
    for n in ["n1", "n2"] {
        created(&api, "/api/v1/nodes", json!({"metadata": {"name": n}})).await;
    }
    let n1 = user("system:node:n1", &["system:nodes"]);
    // The node's rules come from the bootstrap policy's system:node role.
    let own = json!({"metadata": {"labels": {"zone": "a"}}});
    let patch = |name: &str, body: Value| {
        let n1 = n1.clone();
        let api = &api;
        let path = format!("/api/v1/nodes/{name}");
        async move {
            let req = http::Request::builder()
                .method(Method::PATCH)
                .uri(&path)
                .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
                .body(axum::body::Body::from(body.to_string()))
                .unwrap();
            let r = api.send_as(Some(&n1), req).await;
            let (status, body) = (r.status, r.body);
            (
                status,
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    let (code, _) = eventually(WAIT, "n1 patches itself", || async {
        let (code, body) = patch("n1", own.clone()).await;
        (code == StatusCode::OK).then_some((code, body))
    })
    .await;
    assert_eq!(code, StatusCode::OK);
    let (code, body) = patch("n2", own.clone()).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
    );
    let (code, body) = patch(
        "n1",
        json!({"metadata": {"labels": {"node-restriction.kubernetes.io/pool": "x"}}}),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "nodes \"n1\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool"
    );
    // Only mirror pods bound to itself.
    let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}});
    let r = api
        .call_as(
            Some(&n1),
            Method::POST,
            "/api/v1/namespaces/default/pods",
            Some(pod),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "pods \"p\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
    );
    // Its own lease, not another node's.
    let lease = |n: &str| json!({"metadata": {"name": n, "namespace": "kube-node-lease"}, "spec": {"holderIdentity": n}});
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    let r = api
        .call_as(Some(&n1), Method::POST, leases, Some(lease("n1")))
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r = api
        .call_as(Some(&n1), Method::POST, leases, Some(lease("n2")))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same name as the requesting node"
    );
}

/// A merge patch of `path` as `user`: its status and body.
async fn merge_patch_as(
    api: &InProcess,
    user: &UserInfo,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let req = http::Request::builder()
        .method(Method::PATCH)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let r = api.send_as(Some(user), req).await;
    let body = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, body)
}

/// NodeRestriction beyond creates: deletes and evictions of pods, claims' resize status,
/// CSINodes and the node's taints, each only as upstream lets a kubelet.
#[tokio::test]
async fn a_kubelet_deletes_evicts_and_resizes_only_its_own() {
    let api = start().await;
    for n in ["n1", "n2"] {
        created(&api, "/api/v1/nodes", json!({"metadata": {"name": n}})).await;
    }
    let pods = "/api/v1/namespaces/default/pods";
    for (pod, node) in [("p1", "n1"), ("p2", "n2"), ("p3", "n1")] {
        created(
            &api,
            pods,
            json!({"metadata": {"name": pod},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await;
    }
    let n1 = user("system:node:n1", &["system:nodes"]);
    // Deletes: once the node's rules are in force, another node's pod is refused.
    let body = until_status(
        &api,
        Some(&n1),
        Method::DELETE,
        &format!("{pods}/p2"),
        None,
        StatusCode::FORBIDDEN,
    )
    .await;
    assert_eq!(
        body["message"],
        "pods \"p2\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
    );
    let r = api
        .call_as(Some(&n1), Method::DELETE, &format!("{pods}/p1"), None)
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // Evictions.
    let evict = |pod: &str| {
        let body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod, "namespace": "default"}});
        let path = format!("{pods}/{pod}/eviction");
        let n1 = n1.clone();
        let api = &api;
        async move {
            api.call_as(Some(&n1), Method::POST, &path, Some(body))
                .await
        }
    };
    let r = evict("p2").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "pods \"p2\" is forbidden: node n1 can only evict pods with spec.nodeName set to itself"
    );
    let r = evict("gone").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["message"], "pod \"gone\" not found");
    let r = evict("p3").await;
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // Claims: the resize status only.
    created(
        &api,
        "/api/v1/namespaces/default/persistentvolumeclaims",
        json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    let claim = "/api/v1/namespaces/default/persistentvolumeclaims/data/status";
    let (code, body) = merge_patch_as(
        &api,
        &n1,
        claim,
        json!({"status": {"capacity": {"storage": "1Gi"}}}),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, body) = merge_patch_as(&api, &n1, claim, json!({"status": {"phase": "Lost"}})).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("persistentvolumeclaims \"data\" is forbidden: node \"n1\" is not allowed to update fields other than status.quantity and status.conditions: "),
        "{message}"
    );
    assert!(message.contains("+status.phase: \"Lost\""), "{message}");
    // CSINodes: its own only.
    let csi_nodes = "/apis/storage.k8s.io/v1/csinodes";
    let csi_node = |n: &str| Some(json!({"metadata": {"name": n}, "spec": {"drivers": []}}));
    let r = api
        .call_as(Some(&n1), Method::POST, csi_nodes, csi_node("n2"))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.json()["message"],
        "csinodes.storage.k8s.io \"n2\" is forbidden: can only access CSINode with the same name as the requesting node"
    );
    let r = api
        .call_as(Some(&n1), Method::POST, csi_nodes, csi_node("n1"))
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // Its taints are the administrators' and the controllers'.
    let (code, body) = merge_patch_as(
        &api,
        &n1,
        "/api/v1/nodes/n1",
        json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"
    );
}
