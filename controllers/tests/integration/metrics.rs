//! The scheduler's and the controller-manager's metrics move when what they count happens
//! (a pod placed or left waiting, an object reconciled), and their secure port serves them
//! only to whom the API server lets in (delegated authentication and authorization).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};

use minik8s_controllers::hollow::HollowConfig;
use minik8s_controllers::informers::Informers;
use minik8s_controllers::scheduler::ScoringStrategy;
use minik8s_controllers::serving::{self, Component};
use minik8s_controllers::{deployment, metrics};
use testkit::{Backend, InProcess, UserInfo, eventually};

use crate::scheduler::{node_of, pod, start_nodes, start_scheduler};

const WAIT: Duration = Duration::from_secs(30);

/// The value of series `name` whose labels include `labels`, summed; 0 when none.
fn value(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (series, v) = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let present: Vec<&str> = series.split(',').collect();
            labels
                .iter()
                .all(|l| present.contains(l))
                .then(|| v.trim().parse::<f64>().unwrap())
        })
        .sum()
}

fn scheduler_metrics() -> String {
    metrics::render(metrics::scheduler())
}

fn controller_manager_metrics() -> String {
    metrics::render(metrics::controller_manager())
}

const SCHEDULED: &[&str] = &["result=\"scheduled\"", "profile=\"default-scheduler\""];
const UNSCHEDULABLE: &[&str] = &["result=\"unschedulable\"", "profile=\"default-scheduler\""];

#[tokio::test]
async fn scheduling_attempts_and_waiting_pods_are_counted() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _nodes = start_nodes(&client, HollowConfig::default()).await;
    let _scheduler = start_scheduler(&client, ScoringStrategy::LeastAllocated);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let before = scheduler_metrics();
    pods.create(
        &PostParams::default(),
        &pod("metrics-placed", serde_json::json!({})),
    )
    .await?;
    eventually(WAIT, "the pod to be bound", || async {
        node_of(&pods.get("metrics-placed").await.ok()?)
    })
    .await;
    // The attempt ends with the binding, a moment after the pod is bound.
    eventually(WAIT, "a scheduled attempt to be counted", || async {
        let now = scheduler_metrics();
        (value(&now, "scheduler_schedule_attempts_total", SCHEDULED)
            > value(&before, "scheduler_schedule_attempts_total", SCHEDULED))
        .then_some(())
    })
    .await;
    let now = scheduler_metrics();
    assert!(
        value(
            &now,
            "scheduler_scheduling_attempt_duration_seconds_count",
            SCHEDULED
        ) > value(
            &before,
            "scheduler_scheduling_attempt_duration_seconds_count",
            SCHEDULED
        ),
        "{now}"
    );
    // Nowhere to go: an unschedulable attempt, and the pod waits among the unschedulable.
    pods.create(
        &PostParams::default(),
        &pod(
            "metrics-nowhere",
            serde_json::json!({"nodeSelector": {"no-such-label": "x"}}),
        ),
    )
    .await?;
    eventually(
        WAIT,
        "an unschedulable attempt and a waiting pod",
        || async {
            let now = scheduler_metrics();
            (value(&now, "scheduler_schedule_attempts_total", UNSCHEDULABLE)
                > value(&before, "scheduler_schedule_attempts_total", UNSCHEDULABLE)
                && value(&now, "scheduler_pending_pods", &["queue=\"unschedulable\""]) >= 1.0)
                .then_some(())
        },
    )
    .await;
    // A gated pod waits outside the queues.
    pods.create(
        &PostParams::default(),
        &pod(
            "metrics-gated",
            serde_json::json!({"schedulingGates": [{"name": "example.com/wait"}]}),
        ),
    )
    .await?;
    eventually(WAIT, "a gated pod to be counted", || async {
        (value(
            &scheduler_metrics(),
            "scheduler_pending_pods",
            &["queue=\"gated\""],
        ) >= 1.0)
            .then_some(())
    })
    .await;
    let text = scheduler_metrics();
    for queue in ["active", "backoff", "unschedulable", "gated"] {
        assert!(
            text.contains(&format!("scheduler_pending_pods{{queue=\"{queue}\"}}")),
            "{text}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_reconciled_object_moves_its_controllers_workqueue() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _controller = tokio::spawn(deployment::run(Informers::new(client.clone())));
    let queue = ["name=\"deployment\""];
    let before = controller_manager_metrics();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "metrics-queue"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "metrics-queue"}},
                    "template": {
                        "metadata": {"labels": {"app": "metrics-queue"}},
                        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
                    },
                },
            }))?,
        )
        .await?;
    eventually(WAIT, "the deployment to be reconciled", || async {
        let now = controller_manager_metrics();
        let moved = |name| value(&now, name, &queue) > value(&before, name, &queue);
        (moved("workqueue_adds_total")
            && moved("workqueue_queue_duration_seconds_count")
            && moved("workqueue_work_duration_seconds_count"))
        .then_some(())
    })
    .await;
    let now = controller_manager_metrics();
    for name in [
        "workqueue_depth",
        "workqueue_retries_total",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
    ] {
        assert!(
            now.contains(&format!("{name}{{name=\"deployment\"}}")),
            "{name}: {now}"
        );
    }
    // Upstream's buckets: 10 ns by tens up to 10 s.
    for le in ["0.00000001", "+Inf"] {
        let bucket =
            format!("workqueue_work_duration_seconds_bucket{{name=\"deployment\",le=\"{le}\"}}");
        assert!(now.contains(&bucket), "{bucket}: {now}");
    }
    Ok(())
}

/// A client of the secure port at `address` as the user of `user_yaml` (a kubeconfig `user`).
async fn port_client(
    dir: &Path,
    address: std::net::SocketAddr,
    serving_cert: &str,
    user_yaml: String,
) -> kube::Client {
    let ca = dir.join("serving.crt");
    std::fs::write(&ca, serving_cert).unwrap();
    let path = dir.join(format!("kubeconfig-{}", rand_suffix()));
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: port\n  cluster:\n    server: https://{address}\n    certificate-authority: {}\nusers:\n- name: u\n  user: {user_yaml}\ncontexts:\n- name: c\n  context: {{cluster: port, user: u}}\ncurrent-context: c\n",
        ca.display()
    );
    std::fs::write(&path, kubeconfig).unwrap();
    testkit::kube_client(&path).await.unwrap()
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// The status code of a GET of `path`, and the body of a 200.
async fn get(client: &kube::Client, path: &str) -> (u16, String) {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    match client.request_text(req).await {
        Ok(text) => (200, text),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

/// A client CA of the tests.
struct TestCa {
    pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn test_ca() -> TestCa {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test-client-ca");
    let pem = ca.self_signed(&key).unwrap().pem();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&pem, key).unwrap();
    TestCa { pem, issuer }
}

/// A client certificate of `ca` for `cn` in `groups`, written to `dir`; the kubeconfig
/// `user` that presents it.
fn client_cert(ca: &TestCa, dir: &Path, cn: &str, groups: &[&str]) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    for g in groups {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *g);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let cert_path = dir.join(format!("{cn}.crt"));
    let key_path = dir.join(format!("{cn}.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    format!(
        "{{client-certificate: {}, client-key: {}}}",
        cert_path.display(),
        key_path.display()
    )
}

#[tokio::test]
async fn the_secure_port_lets_in_whom_the_api_server_allows() -> anyhow::Result<()> {
    let api = InProcess::start_with(Backend::Sqlite, testkit::with_rbac).await?;
    let admin = api.client();
    let dir = tempfile::tempdir()?;
    // Accounts with and without system:monitoring, and their tokens.
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    for name in ["prometheus", "nosy"] {
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?,
            )
            .await?;
    }
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "prometheus-monitoring"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:monitoring"},
                "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "default"}],
            }))?,
        )
        .await?;
    let token = |name: &'static str| {
        let accounts = accounts.clone();
        async move {
            accounts
                .create_token_request(name, &PostParams::default(), &TokenRequest::default())
                .await
                .unwrap()
                .status
                .unwrap()
                .token
        }
    };
    let (prometheus, nosy) = (token("prometheus").await, token("nosy").await);

    // The scheduler's port, judged through the scheduler's own identity.
    let ca = test_ca();
    let serving_cert = serving::self_signed("127.0.0.1".parse()?)?;
    let tls = serving::tls_config(&serving_cert, Some(&ca.pem))?;
    let scheduler = api.client_as(UserInfo {
        name: "system:kube-scheduler".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
    });
    let address = serving::start(
        Component::Scheduler,
        "127.0.0.1:0".parse()?,
        tls,
        scheduler,
        serving::AuthOptions::default(),
        std::future::pending(),
    )
    .await?;
    let as_user = |yaml: String| port_client(dir.path(), address, &serving_cert.cert_pem, yaml);

    let anonymous = as_user("{}".into()).await;
    // Health is for everyone; metrics are not for system:anonymous (upstream's delegated
    // authentication lets anonymous requests through to authorization).
    assert_eq!(get(&anonymous, "/healthz").await, (200, "ok".into()));
    let (code, message) = get(&anonymous, "/metrics").await;
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "forbidden: User \"system:anonymous\" cannot get path \"/metrics\""
    );
    // A token the API server does not take: 401.
    let bogus = as_user("{token: not-a-token}".into()).await;
    assert_eq!(get(&bogus, "/metrics").await.0, 401);
    assert_eq!(get(&bogus, "/healthz").await.0, 401);
    // A user without the permission: 403.
    let nosy = as_user(format!("{{token: {nosy}}}")).await;
    let (code, message) = get(&nosy, "/metrics").await;
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "forbidden: User \"system:serviceaccount:default:nosy\" cannot get path \"/metrics\""
    );
    // Bound to system:monitoring: the scheduler's series and the process's, nothing else.
    let allowed = as_user(format!("{{token: {prometheus}}}")).await;
    let (code, text) = get(&allowed, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("scheduler_schedule_attempts_total"), "{text}");
    assert!(text.contains("process_resident_memory_bytes"), "{text}");
    assert!(!text.contains("workqueue_"), "{text}");
    assert!(!text.contains("apiserver_request_total"), "{text}");
    // A client certificate of the client CA, in group system:monitoring; another without.
    let by_cert = as_user(client_cert(
        &ca,
        dir.path(),
        "scraper",
        &["system:monitoring"],
    ))
    .await;
    let (code, text) = get(&by_cert, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    let stranger = as_user(client_cert(&ca, dir.path(), "stranger", &[])).await;
    let (code, message) = get(&stranger, "/metrics").await;
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "forbidden: User \"stranger\" cannot get path \"/metrics\""
    );
    Ok(())
}

#[tokio::test]
async fn the_controller_managers_port_serves_its_workqueues() -> anyhow::Result<()> {
    let api = InProcess::start_with(Backend::Sqlite, testkit::with_rbac).await?;
    let dir = tempfile::tempdir()?;
    let serving_cert = serving::self_signed("127.0.0.1".parse()?)?;
    let ca = test_ca();
    let tls = serving::tls_config(&serving_cert, Some(&ca.pem))?;
    let manager = api.client_as(UserInfo {
        name: "system:kube-controller-manager".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
    });
    // A queue to see.
    let _queue = minik8s_controllers::util::workqueue::QueueMetrics::new("metrics_port_test");
    let address = serving::start(
        Component::ControllerManager,
        "127.0.0.1:0".parse()?,
        tls,
        manager,
        serving::AuthOptions::default(),
        std::future::pending(),
    )
    .await?;
    let user = client_cert(&ca, dir.path(), "scraper", &["system:monitoring"]);
    let client = port_client(dir.path(), address, &serving_cert.cert_pem, user).await;
    let (code, text) = get(&client, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    assert!(
        text.contains("workqueue_depth{name=\"metrics_port_test\"} 0"),
        "{text}"
    );
    assert!(text.contains("process_cpu_seconds_total"), "{text}");
    assert!(
        !text.contains("scheduler_schedule_attempts_total"),
        "{text}"
    );
    assert_eq!(get(&client, "/healthz").await, (200, "ok".into()));
    Ok(())
}
