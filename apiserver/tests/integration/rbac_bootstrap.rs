//! The RBAC bootstrap policy as a server starts: upstream's default roles and bindings exist;
//! at the next start, defaults an administrator removed come back while what they added stays,
//! an object annotated `autoupdate: "false"` is left as it is, and a binding whose roleRef was
//! changed is made again.

use std::sync::Arc;

use http::StatusCode;
use minik8s_api::rbac::{Attributes, rules_allow};
use minik8s_apiserver::ApiServer;
use minik8s_apiserver::authz::Mode;
use serde_json::{Value, json};
use testkit::{Backend, InProcess};

const ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
const NS_ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles";
const PUBLIC_BINDINGS: &str =
    "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings";

/// Another API server over the same store, started as after a restart.
async fn restarted(api: &InProcess) -> InProcess {
    let server: Arc<ApiServer> = ApiServer::new(
        api.server.store.clone(),
        Arc::new(minik8s_apiserver::metrics::Metrics::new()),
        minik8s_apiserver::auth::Authenticator::new(),
        testkit::test_serve_options(),
        "127.0.0.1:6443".into(),
    );
    server.bootstrap(&[]).await.unwrap();
    InProcess::from_server(server)
}

async fn get(api: &InProcess, path: &str) -> Value {
    let r = api.get(path).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.json());
    r.json()
}

async fn put(api: &InProcess, path: &str, body: Value) -> Value {
    let r = api.put(path, body).await;
    assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.json());
    r.json()
}

fn rules(role: &Value) -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    serde_json::from_value(role["rules"].clone()).unwrap_or_default()
}

fn subjects(binding: &Value) -> Vec<String> {
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{}/{}",
                s["kind"].as_str().unwrap(),
                s["name"].as_str().unwrap()
            )
        })
        .collect()
}

fn read_namespaces() -> Attributes {
    Attributes::resource("u", &[], "list", "", "namespaces").in_namespace("ns")
}

fn read_widgets() -> Attributes {
    Attributes::resource("u", &[], "get", "example.com", "widgets").in_namespace("ns")
}

#[tokio::test]
async fn the_defaults_exist_after_start() {
    // With RBAC on, as clusters run: the server's own writes are not held to a user's rules.
    let api = InProcess::start_with(Backend::Sqlite, |c| {
        c.serve.authorization_modes = vec![Mode::Node, Mode::Rbac];
    })
    .await
    .unwrap();
    let admin = get(&api, &format!("{ROLES}/cluster-admin")).await;
    assert_eq!(
        admin["metadata"]["labels"]["kubernetes.io/bootstrapping"],
        "rbac-defaults"
    );
    assert_eq!(
        admin["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"],
        "true"
    );
    assert_eq!(
        admin["rules"],
        json!([
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ])
    );
    let view = get(&api, &format!("{ROLES}/view")).await;
    assert_eq!(
        view["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    for name in [
        "system:node",
        "system:discovery",
        "system:public-info-viewer",
        "system:kube-scheduler",
        "system:controller:clusterrole-aggregation-controller",
    ] {
        get(&api, &format!("{ROLES}/{name}")).await;
    }
    let masters = get(&api, &format!("{BINDINGS}/cluster-admin")).await;
    assert_eq!(subjects(&masters), ["Group/system:masters"]);
    let public = get(&api, &format!("{BINDINGS}/system:public-info-viewer")).await;
    assert_eq!(
        subjects(&public),
        ["Group/system:authenticated", "Group/system:unauthenticated"]
    );
    let job = get(
        &api,
        &format!("{BINDINGS}/system:controller:job-controller"),
    )
    .await;
    assert_eq!(job["subjects"][0]["namespace"], "kube-system");
    assert_eq!(subjects(&job), ["ServiceAccount/job-controller"]);
    get(
        &api,
        &format!("{NS_ROLES}/extension-apiserver-authentication-reader"),
    )
    .await;
    let signer = get(
        &api,
        &format!("{PUBLIC_BINDINGS}/system:controller:bootstrap-signer"),
    )
    .await;
    assert_eq!(signer["roleRef"]["kind"], "Role");
}

#[tokio::test]
async fn a_restart_restores_defaults_and_keeps_additions() {
    let api = InProcess::start(Backend::Sqlite).await.unwrap();
    let untouched = get(&api, &format!("{ROLES}/cluster-admin")).await;

    // A default rule removed and one of the administrator's added, on a role `view`
    // gathers.
    let path = format!("{ROLES}/system:aggregate-to-view");
    let mut role = get(&api, &path).await;
    let kept: Vec<Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"] != json!(["namespaces"]))
        .cloned()
        .collect();
    role["rules"] = json!(kept);
    role["rules"]
        .as_array_mut()
        .unwrap()
        .push(json!({"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}));
    let edited = put(&api, &path, role).await;
    assert!(!rules_allow(&rules(&edited), &read_namespaces()));

    // `view` itself: a rule and a selector of the administrator's.
    let view_path = format!("{ROLES}/view");
    let mut view = get(&api, &view_path).await;
    view["rules"] =
        json!([{"apiGroups": ["example.com"], "resources": ["gadgets"], "verbs": ["get"]}]);
    view["aggregationRule"]["clusterRoleSelectors"]
        .as_array_mut()
        .unwrap()
        .push(json!({"matchLabels": {"example.com/aggregate-to-view": "true"}}));
    put(&api, &view_path, view).await;

    // A binding's default subject replaced by the administrator's.
    let binding_path = format!("{BINDINGS}/system:discovery");
    let mut binding = get(&api, &binding_path).await;
    binding["subjects"] =
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]);
    put(&api, &binding_path, binding).await;

    // A role opted out of reconciliation, narrowed.
    let basic_path = format!("{ROLES}/system:basic-user");
    let mut basic = get(&api, &basic_path).await;
    basic["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] =
        json!("false");
    basic["rules"] = json!([{"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews"], "verbs": ["create"]}]);
    let protected = put(&api, &basic_path, basic).await;

    // A default role deleted, and a default binding made again with another roleRef.
    assert!(
        api.delete(&format!("{ROLES}/system:kube-dns"))
            .await
            .status
            .is_success()
    );
    assert!(
        api.delete(&format!("{BINDINGS}/system:kube-dns"))
            .await
            .status
            .is_success()
    );
    let r = api
        .post(
            BINDINGS,
            json!({
                "metadata": {"name": "system:kube-dns"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "name": "kube-dns", "namespace": "kube-system"}],
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json());

    let api = restarted(&api).await;

    let restored = get(&api, &path).await;
    let restored_rules = rules(&restored);
    assert!(rules_allow(&restored_rules, &read_namespaces()));
    assert!(rules_allow(&restored_rules, &read_widgets()));

    let view = get(&api, &view_path).await;
    assert_eq!(view["rules"][0]["resources"], json!(["gadgets"]));
    let selectors = view["aggregationRule"]["clusterRoleSelectors"]
        .as_array()
        .unwrap();
    assert_eq!(selectors.len(), 2, "{selectors:?}");

    let binding = get(&api, &binding_path).await;
    assert_eq!(
        subjects(&binding),
        ["User/alice", "Group/system:authenticated"]
    );

    let basic = get(&api, &basic_path).await;
    assert_eq!(basic, protected, "an opted-out role is left alone");

    get(&api, &format!("{ROLES}/system:kube-dns")).await;
    let dns = get(&api, &format!("{BINDINGS}/system:kube-dns")).await;
    assert_eq!(dns["roleRef"]["name"], "system:kube-dns");

    // Nothing to do: nothing written.
    let admin = get(&api, &format!("{ROLES}/cluster-admin")).await;
    assert_eq!(
        admin["metadata"]["resourceVersion"],
        untouched["metadata"]["resourceVersion"]
    );
    let again = restarted(&api).await;
    let binding_again = get(&again, &binding_path).await;
    assert_eq!(
        binding_again["metadata"]["resourceVersion"],
        binding["metadata"]["resourceVersion"]
    );
}
