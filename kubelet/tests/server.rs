//! The kubelet's HTTPS API against the fake runtime, and the API server's proxying to it:
//! a real API server over TLS (testkit, with `--authorization-mode=Node,RBAC`), a kubelet API
//! on a loopback port with a certificate from the same CA, and a stand-in for the runtime's
//! streaming server that either switches protocols and echoes, or refuses. Who may call the
//! kubelet is the API server's answer: certificates and tokens, TokenReview and
//! SubjectAccessReview, as upstream's kubelet in webhook mode.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{LogParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use minik8s_apiserver::authz::Mode;
use minik8s_apiserver::pki::{CertPair, Pki, ServingNames};
use minik8s_kubelet::KubeletConfig;
use minik8s_kubelet::config::ServingTls;
use minik8s_kubelet::pod::worker::{Memory, Shared};
use minik8s_kubelet::runtime::fake::{FakeRuntime, Usage};
use minik8s_kubelet::server::{self, AuthOptions, KubeletServer};
use serde_json::json;
use testkit::{Backend, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[path = "server/metrics.rs"]
mod metrics;

struct Env {
    api: TestServer,
    client: kube::Client,
    fake: Arc<FakeRuntime>,
    shared: Arc<Shared>,
    pki: Pki,
    kubelet: SocketAddr,
    /// What the stand-in streaming server was asked, request heads.
    backend_seen: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

/// A stand-in for containerd's streaming server: `/exec/...` switches protocols and echoes,
/// anything else is refused with 403.
async fn streaming_backend(seen: Arc<Mutex<Vec<String>>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if sock.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                seen.lock().unwrap().push(head.clone());
                if head.starts_with("GET /exec/") || head.starts_with("POST /exec/") {
                    sock.write_all(
                        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
                    )
                    .await
                    .unwrap();
                    let mut buf = [0u8; 1024];
                    loop {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if sock.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                } else {
                    let _ = sock
                        .write_all(
                            b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nattach refused",
                        )
                        .await;
                }
            });
        }
    });
    addr
}

async fn start() -> Env {
    let api = TestServer::start_with(Backend::Sqlite, |c| {
        c.serve.authorization_modes = vec![Mode::Node, Mode::Rbac];
    })
    .await
    .unwrap();
    let client = api.client().await.unwrap();
    let pki = Pki::ensure(&api.dir.path().join("pki"), &ServingNames::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::with_images(&[
        "busybox:1.36",
        "registry.k8s.io/pause:3.9",
    ]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let backend = streaming_backend(seen.clone()).await;
    fake.set_stream_base(&format!("http://{backend}"));
    let mut config = KubeletConfig::new(
        "n1",
        "127.0.0.1".parse().unwrap(),
        dir.path(),
        dir.path().join("none.sock"),
    );
    config.cgroups_path = dir.path().join("cgroup");
    // The hierarchies the kubelet makes pod cgroups in and reads usage from.
    for controller in ["cpuacct", "memory"] {
        std::fs::create_dir_all(config.cgroups_path.join(controller)).unwrap();
    }
    let (wake, _) = tokio::sync::mpsc::unbounded_channel();
    let metrics = Arc::new(minik8s_kubelet::metrics::KubeletMetrics::new("n1"));
    let runtime = Arc::new(minik8s_kubelet::runtime::Instrumented::new(
        fake.clone(),
        metrics.runtime.clone(),
    ));
    let shared = Arc::new(Shared {
        volumes: minik8s_kubelet::volumes::VolumeManager::new(
            dir.path().join("pods"),
            client.clone(),
        ),
        prober: Default::default(),
        wake,
        config,
        client: client.clone(),
        runtime,
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "kubelet".into(),
                instance: Some("n1".into()),
            },
        ),
        node_cpu: 2.0,
        node_memory: 8e9,
        memory: Mutex::new(Memory::default()),
        metrics,
        devices: None,
    });
    let serving = pki
        .issue(
            "system:node:n1",
            &["system:nodes"],
            &ServingNames {
                dns: vec!["n1".into()],
                ips: vec!["127.0.0.1".parse().unwrap()],
            },
            true,
        )
        .unwrap();
    let tls = server::tls_config(&ServingTls {
        cert: server::serving_cert::ServingCert::new(&serving.cert_pem, &serving.key_pem).unwrap(),
        client_ca_pem: pki.ca.cert_pem.clone(),
    })
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kubelet = listener.local_addr().unwrap();
    tokio::spawn(server::serve(
        listener,
        tls,
        // As `--authorization-webhook-cache-unauthorized-ttl=0`: a binding made during a test
        // counts from the next request (the caches have unit tests of their own).
        server::router(KubeletServer::with_auth(
            shared.clone(),
            AuthOptions {
                unauthorized_ttl: Duration::ZERO,
                ..Default::default()
            },
        )),
    ));
    // The node as its kubelet registers it: address and API port.
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.port()}}
            }})),
        )
        .await
        .unwrap();
    Env {
        api,
        client,
        fake,
        shared,
        pki,
        kubelet,
        backend_seen: seen,
        _dir: dir,
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// An HTTP/1.1 connection over TLS to `addr`, trusting the cluster CA, with `cert` if given.
async fn connect(addr: SocketAddr, ca: &str, cert: Option<&CertPair>) -> anyhow::Result<Sender> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca.as_bytes()) {
        roots.add(c?)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match cert {
        Some(c) => {
            let certs =
                rustls_pemfile::certs(&mut c.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
            let key = rustls_pemfile::private_key(&mut c.key_pem.as_bytes())?.unwrap();
            builder.with_client_auth_cert(certs, key)?
        }
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::IpAddress(addr.ip().into()),
            tcp,
        )
        .await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn.with_upgrades());
    Ok(sender)
}

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

async fn call(
    sender: &mut Sender,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<Reply> {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::new()))?)
        .await?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

impl Env {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// The API server's client certificate for kubelets (the file it issued itself).
    fn apiserver_client(&self) -> CertPair {
        self.pki
            .client(
                "apiserver-kubelet-client",
                "kube-apiserver-kubelet-client",
                &[],
            )
            .unwrap()
    }

    async fn kubelet(&self, cert: Option<&CertPair>) -> anyhow::Result<Sender> {
        connect(self.kubelet, &self.pki.ca.cert_pem, cert).await
    }

    async fn apiserver(&self) -> Sender {
        let admin = self
            .pki
            .client("admin", "minik8s-admin", &["system:masters"])
            .unwrap();
        connect(self.api.addr, &self.pki.ca.cert_pem, Some(&admin))
            .await
            .unwrap()
    }

    /// A running pod `p` with containers `c` and `d`; returns its UID.
    async fn running_pod(&self) -> String {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "c", "image": "busybox:1.36"},
                {"name": "d", "image": "busybox:1.36"}
            ]}
        }))
        .unwrap();
        let pod = self
            .pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        self.shared.sync(&pod).await.unwrap();
        pod.metadata.uid.unwrap()
    }

    /// Writes the CRI log of the running container `name`.
    fn write_log(&self, uid: &str, name: &str, text: &str) {
        let dir = self
            .shared
            .config
            .logs_dir()
            .join(format!("default_p_{uid}"))
            .join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("0.log"), text).unwrap();
    }
}

const LOG: &str = "2024-05-01T10:00:00Z stdout F one\n2024-05-01T10:00:01Z stderr F two\n2024-05-01T10:00:02Z stdout F three\n";

#[tokio::test]
async fn kubelet_api_directly() {
    let env = start().await;
    let uid = env.running_pod().await;
    env.write_log(&uid, "c", LOG);
    let running = env.fake.running(&uid);
    let c_id = running.iter().find(|(_, n)| n == "c").unwrap().0.clone();
    env.fake.set_usage(
        &c_id,
        Usage {
            cpu_core_nanos: 1_500_000_000,
            nano_cores: 250_000_000,
            working_set_bytes: 4096,
            usage_bytes: 8192,
            writable_layer_bytes: 100,
        },
    );
    // The CPU-and-memory summary (`/metrics/resource`, metrics scrapes) reads the container's
    // cgroup, in the pod cgroup the kubelet made: the same numbers there.
    let config = &env.shared.config;
    let pod_dir = minik8s_kubelet::cgroups::pod_cgroup_candidates(&config.cgroup_root, &uid)
        .find(|cg| {
            config
                .cgroups_path
                .join("cpuacct")
                .join(cg.trim_start_matches('/'))
                .is_dir()
        })
        .expect("the pod's cgroup");
    for (controller, file, value) in [
        ("cpuacct", "cpuacct.usage", "1500000000\n"),
        ("memory", "memory.usage_in_bytes", "8192\n"),
        (
            "memory",
            "memory.stat",
            "total_rss 4096\ntotal_inactive_file 4096\n",
        ),
    ] {
        let dir = config
            .cgroups_path
            .join(controller)
            .join(pod_dir.trim_start_matches('/'))
            .join(&c_id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), value).unwrap();
    }
    let ok = env.apiserver_client();
    let mut k = env.kubelet(Some(&ok)).await.unwrap();

    let r = call(&mut k, Method::GET, "/healthz", &[]).await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "ok"));

    // Logs, with upstream's options.
    let r = call(&mut k, Method::GET, "/containerLogs/default/p/c", &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, "one\ntwo\nthree\n");
    let r = call(
        &mut k,
        Method::GET,
        "/containerLogs/default/p/c?tailLines=2&timestamps=true&limitBytes=30",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.body, "2024-05-01T10:00:01Z two\n2024-");
    let r = call(&mut k, Method::GET, "/containerLogs/default/p/nope", &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body, "container \"nope\" not found in pod \"p\"");
    let r = call(&mut k, Method::GET, "/containerLogs/default/gone/c", &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = call(
        &mut k,
        Method::GET,
        "/containerLogs/default/p/c?previous=true",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body,
        "previous terminated container \"c\" in pod \"p\" not found"
    );

    // Stats from the runtime's numbers, the pod's as the sum of its containers.
    let r = call(&mut k, Method::GET, "/stats/summary", &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    let s: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(s["node"]["nodeName"], "n1");
    assert!(s["node"]["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0);
    assert!(s["node"]["memory"]["workingSetBytes"].as_u64().unwrap() > 0);
    let pod = &s["pods"][0];
    assert_eq!(
        pod["podRef"],
        json!({"name": "p", "namespace": "default", "uid": uid})
    );
    let c = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "c")
        .unwrap();
    assert_eq!(c["cpu"]["usageCoreNanoSeconds"], 1_500_000_000u64);
    assert_eq!(c["cpu"]["usageNanoCores"], 250_000_000u64);
    assert_eq!(c["memory"]["workingSetBytes"], 4096);
    assert_eq!(c["rootfs"]["usedBytes"], 100);
    assert_eq!(c["logs"]["usedBytes"], LOG.len());
    assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 1_500_000_000u64);
    assert_eq!(pod["memory"]["workingSetBytes"], 4096);
    let r = call(&mut k, Method::GET, "/metrics/resource", &[])
        .await
        .unwrap();
    assert!(
        r.body.contains(
            "container_cpu_usage_seconds_total{container=\"c\",namespace=\"default\",pod=\"p\"} 1.5 "
        ),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains("pod_memory_working_set_bytes{namespace=\"default\",pod=\"p\"} 4096 ")
    );
    assert!(r.body.contains("resource_scrape_error 0\n"));
    let r = call(&mut k, Method::GET, "/pods", &[]).await.unwrap();
    let list: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["items"][0]["metadata"]["name"], "p");

    // Exec: the runtime's streaming server answers 101, bytes flow both ways.
    let upgrade = [("connection", "Upgrade"), ("upgrade", "SPDY/3.1")];
    let req = Request::builder()
        .method(Method::POST)
        .uri("/exec/default/p/c?command=cat&command=-n&stdin=true&stdout=true")
        .header(header::HOST, "test")
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let mut resp = k.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(
        resp.headers()["x-stream-protocol-version"],
        "v4.channel.k8s.io"
    );
    let mut io = TokioIo::new(hyper::upgrade::on(&mut resp).await.unwrap());
    io.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    io.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
    drop(io);
    assert!(
        env.fake.streams().contains(&format!(
            "exec {c_id} cat -n stdin=true stdout=true stderr=false tty=false"
        )),
        "{:?}",
        env.fake.streams()
    );
    let head = env.backend_seen.lock().unwrap().last().cloned().unwrap();
    assert!(
        head.starts_with("POST /exec/fake?command=cat&command=-n&stdin=true"),
        "{head}"
    );
    assert!(head.to_lowercase().contains("upgrade: spdy/3.1"), "{head}");

    // A refused upgrade comes back as it was, and the connection closes.
    let mut k2 = env.kubelet(Some(&ok)).await.unwrap();
    let r = call(
        &mut k2,
        Method::GET,
        "/attach/default/p/c?stdout=true",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(r.body, "attach refused");
    assert_eq!(r.headers[header::CONNECTION], "close");
    assert!(
        call(&mut k2, Method::GET, "/healthz", &[]).await.is_err(),
        "the connection stays open after a refused upgrade"
    );

    let mut k = env.kubelet(Some(&ok)).await.unwrap();
    let r = call(
        &mut k,
        Method::GET,
        "/exec/default/p/c?command=ls&stdout=1",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::BAD_REQUEST, "Upgrade request required")
    );
    let r = call(
        &mut k,
        Method::GET,
        "/exec/default/p/c?command=ls",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 of stdin, stdout, stderr"
        )
    );
    let r = call(
        &mut k,
        Method::GET,
        "/exec/default/p/nope?command=ls&stdout=1",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Port-forward asks the runtime for the sandbox's stream with the requested ports.
    let mut k = env.kubelet(Some(&ok)).await.unwrap();
    let r = call(
        &mut k,
        Method::GET,
        "/portForward/default/p?ports=8080",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN, "the stand-in refuses it");
    assert!(
        env.fake
            .streams()
            .iter()
            .any(|s| s.starts_with("portforward sandbox-") && s.ends_with(" 8080")),
        "{:?}",
        env.fake.streams()
    );

    // Another node's kubelet has no rights on this one; no credentials at all is 401.
    let node = env
        .pki
        .issue(
            "system:node:n2",
            &["system:nodes"],
            &ServingNames::default(),
            false,
        )
        .unwrap();
    let mut k = env.kubelet(Some(&node)).await.unwrap();
    let r = call(&mut k, Method::GET, "/stats/summary", &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.body,
        "Forbidden (user=system:node:n2, verb=get, resource=nodes, subresource(s)=[stats])\n"
    );
    let mut k = env.kubelet(None).await.unwrap();
    let r = call(&mut k, Method::GET, "/healthz", &[]).await.unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::UNAUTHORIZED, "Unauthorized")
    );
}

/// A ServiceAccount token for `default/reader`.
async fn reader_token(env: &Env) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client.clone(), "default");
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap();
    accounts.create(&PostParams::default(), &sa).await.unwrap();
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    accounts
        .create_token_request("reader", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

/// Who may call the kubelet: no credentials is 401; a bearer token the API server vouches for
/// is its user, who needs the `nodes` subresource the path maps to, granted through RBAC;
/// the API server's own certificate has `system:kubelet-api-admin`.
#[tokio::test]
async fn who_may_call_the_kubelet() {
    let env = start().await;
    let mut k = env.kubelet(None).await.unwrap();
    for path in ["/pods", "/stats/summary", "/nowhere"] {
        let r = call(&mut k, Method::GET, path, &[]).await.unwrap();
        assert_eq!(
            (r.status, r.body.as_str()),
            (StatusCode::UNAUTHORIZED, "Unauthorized"),
            "{path}"
        );
    }
    let r = call(
        &mut k,
        Method::GET,
        "/pods",
        &[("authorization", "Bearer not-a-token")],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // A valid token without rights.
    let token = reader_token(&env).await;
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    let user = "system:serviceaccount:default:reader";
    let r = call(&mut k, Method::GET, "/pods", &auth).await.unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.body,
        format!("Forbidden (user={user}, verb=get, resource=nodes, subresource(s)=[proxy])\n")
    );

    // `get nodes/proxy`: the node's pods, not its stats, and not exec (`create`).
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "kubelet-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(env.client.clone());
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "kubelet-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubelet-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "default"}]
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let pods = testkit::eventually(Duration::from_secs(20), "the binding to count", || {
        let env = &env;
        async move {
            let mut k = env.kubelet(None).await.ok()?;
            let r = call(&mut k, Method::GET, "/pods", &auth).await.ok()?;
            (r.status == StatusCode::OK).then_some(r.body)
        }
    })
    .await;
    let list: serde_json::Value = serde_json::from_str(&pods).unwrap();
    assert_eq!(list["kind"], "PodList");
    let mut k = env.kubelet(None).await.unwrap();
    let r = call(&mut k, Method::GET, "/healthz", &auth).await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "ok"));
    let r = call(&mut k, Method::GET, "/stats/summary", &auth)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.body,
        format!("Forbidden (user={user}, verb=get, resource=nodes, subresource(s)=[stats])\n")
    );
    let r = call(
        &mut k,
        Method::POST,
        "/exec/default/p/c?command=ls&stdout=1",
        &auth,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        r.body,
        format!("Forbidden (user={user}, verb=create, resource=nodes, subresource(s)=[proxy])\n")
    );

    // The API server's certificate: in no group, allowed by its bootstrap binding; a
    // certificate is the user even beside another's token.
    let apiserver = env.apiserver_client();
    let der = rustls_pemfile::certs(&mut apiserver.cert_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert_eq!(cert.subject().iter_organization().count(), 0);
    let mut k = env.kubelet(Some(&apiserver)).await.unwrap();
    for path in ["/stats/summary", "/metrics/resource", "/pods", "/healthz"] {
        let r = call(&mut k, Method::GET, path, &auth).await.unwrap();
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
    }
}

#[tokio::test]
async fn through_the_api_server() {
    let env = start().await;
    let uid = env.running_pod().await;
    env.write_log(&uid, "c", LOG);
    let pods = env.pods();

    // pods/log through kube-rs, with options and as a stream.
    let logs = pods
        .logs(
            "p",
            &LogParams {
                container: Some("c".into()),
                tail_lines: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(logs, "two\nthree\n");
    let logs = pods
        .logs(
            "p",
            &LogParams {
                container: Some("c".into()),
                timestamps: true,
                since_time: Some("2024-05-01T10:00:01Z".parse().unwrap()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        logs,
        "2024-05-01T10:00:01Z two\n2024-05-01T10:00:02Z three\n"
    );
    {
        use futures::{AsyncBufReadExt, TryStreamExt};
        let stream = pods
            .log_stream(
                "p",
                &LogParams {
                    container: Some("c".into()),
                    follow: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let mut lines = stream.lines();
        assert_eq!(lines.try_next().await.unwrap().as_deref(), Some("one"));
        assert_eq!(lines.try_next().await.unwrap().as_deref(), Some("two"));
        assert_eq!(lines.try_next().await.unwrap().as_deref(), Some("three"));
        // Written later, while following.
        let path = env
            .shared
            .config
            .logs_dir()
            .join(format!("default_p_{uid}"))
            .join("c")
            .join("0.log");
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        std::io::Write::write_all(&mut f, b"2024-05-01T10:00:03Z stdout F four\n").unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
            .await
            .unwrap();
        assert_eq!(next.unwrap().as_deref(), Some("four"));
        // The container stops: the stream ends.
        assert!(env.fake.exit(&uid, "c", 0, "Completed"));
        let end = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
            .await
            .unwrap();
        assert_eq!(end.unwrap(), None);
    }

    // Upstream's errors.
    let err = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("{other:?}"),
    };
    let (code, msg) = err(pods.logs("p", &LogParams::default()).await.unwrap_err());
    assert_eq!(code, 400);
    assert_eq!(
        msg,
        "a container name must be specified for pod p, choose one of: [c d]"
    );
    let (code, msg) = err(pods
        .logs(
            "p",
            &LogParams {
                container: Some("x".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err());
    assert_eq!(
        (code, msg.as_str()),
        (400, "container x is not valid for pod p")
    );
    let (code, _) = err(pods.logs("nope", &LogParams::default()).await.unwrap_err());
    assert_eq!(code, 404);
    let waiting: Pod = serde_json::from_value(json!({
        "metadata": {"name": "w"},
        "spec": {"nodeName": "n1", "containers": [
            {"name": "c", "image": "nosuch:1", "imagePullPolicy": "Never"}
        ]}
    }))
    .unwrap();
    let waiting = pods.create(&PostParams::default(), &waiting).await.unwrap();
    env.shared.sync(&waiting).await.unwrap();
    let (code, msg) = err(pods.logs("w", &LogParams::default()).await.unwrap_err());
    assert_eq!(
        (code, msg.as_str()),
        (
            400,
            "container \"c\" in pod \"w\" is waiting to start: ErrImageNeverPull"
        )
    );
    let unscheduled: Pod = serde_json::from_value(json!({
        "metadata": {"name": "u"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &unscheduled)
        .await
        .unwrap();
    assert_eq!(pods.logs("u", &LogParams::default()).await.unwrap(), "");

    // nodes/proxy reaches any path of the kubelet.
    let mut a = env.apiserver().await;
    let r = call(&mut a, Method::GET, "/api/v1/nodes/n1/proxy/healthz", &[])
        .await
        .unwrap();
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "ok"));
    let r = call(
        &mut a,
        Method::GET,
        "/api/v1/nodes/n1/proxy/stats/summary?only_cpu_and_memory=true",
        &[],
    )
    .await
    .unwrap();
    let s: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(s["node"]["nodeName"], "n1");
    assert!(s["node"]["fs"].is_null(), "only cpu and memory: {s}");
    let r = call(&mut a, Method::GET, "/api/v1/nodes/n1/proxy/nowhere", &[])
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // exec through both hops: upgraded end to end.
    let req = Request::builder()
        .method(Method::POST)
        .uri(
            "/api/v1/namespaces/default/pods/p/exec?container=d&command=cat&stdin=true&stdout=true",
        )
        .header(header::HOST, "test")
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let mut resp = a.send_request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    let mut io = TokioIo::new(hyper::upgrade::on(&mut resp).await.unwrap());
    io.write_all(b"through two proxies").await.unwrap();
    let mut buf = vec![0u8; 19];
    io.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf, b"through two proxies");
    drop(io);

    // A refused upgrade (the runtime says 403) passes back and closes the connection.
    let mut a = env.apiserver().await;
    let upgrade = [("connection", "Upgrade"), ("upgrade", "websocket")];
    let r = call(
        &mut a,
        Method::GET,
        "/api/v1/namespaces/default/pods/p/attach?container=d&stdout=true",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::FORBIDDEN, "attach refused")
    );
    assert_eq!(r.headers[header::CONNECTION], "close");
    assert!(call(&mut a, Method::GET, "/healthz", &[]).await.is_err());

    // Upstream's checks before the kubelet is called.
    let mut a = env.apiserver().await;
    let r = call(
        &mut a,
        Method::GET,
        "/api/v1/namespaces/default/pods/p/exec?container=d&command=ls&stdout=1",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body.contains("Upgrade request required"), "{}", r.body);
    let r = call(
        &mut a,
        Method::GET,
        "/api/v1/namespaces/default/pods/u/exec?command=ls&stdout=1",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.body.contains("pod u does not have a host assigned"),
        "{}",
        r.body
    );
    let r = call(
        &mut a,
        Method::GET,
        "/api/v1/namespaces/default/pods/p/exec?container=zz&command=ls&stdout=1",
        &upgrade,
    )
    .await
    .unwrap();
    assert!(
        r.body.contains("container zz is not valid for pod p"),
        "{}",
        r.body
    );
    // The kubelet's own refusal (the container is not running) reaches the client.
    let r = call(
        &mut a,
        Method::GET,
        "/api/v1/namespaces/default/pods/p/exec?container=c&command=ls&stdout=1",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body, "container not found (\"c\")");

    // Discovery lists the subresources with upstream's verbs.
    let mut a = env.apiserver().await;
    let r = call(&mut a, Method::GET, "/api/v1", &[]).await.unwrap();
    let list: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let find = |name: &str| {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} missing from discovery"))
    };
    assert_eq!(find("pods/log")["verbs"], json!(["get"]));
    assert_eq!(find("pods/exec")["verbs"], json!(["create", "get"]));
    assert_eq!(find("pods/exec")["kind"], "PodExecOptions");
    assert_eq!(find("pods/attach")["verbs"], json!(["create", "get"]));
    assert_eq!(find("pods/portforward")["verbs"], json!(["create", "get"]));
    assert_eq!(
        find("nodes/proxy")["verbs"],
        json!(["create", "delete", "get", "patch", "update"])
    );
}

/// `kubectl debug -it p --image=busybox:1.36 --target=c`: the debugger added through the
/// `ephemeralcontainers` subresource runs once the kubelet syncs, and attach, exec and logs
/// find it by name.
#[tokio::test]
async fn ephemeral_containers_by_name() {
    let env = start().await;
    let uid = env.running_pod().await;
    let patch = json!({"spec": {"ephemeralContainers": [{
        "name": "debugger-xyz", "image": "busybox:1.36", "targetContainerName": "c",
        "stdin": true, "tty": true, "terminationMessagePolicy": "File"
    }]}});
    let pod = env
        .pods()
        .patch_subresource(
            "ephemeralcontainers",
            "p",
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    env.shared.sync(&pod).await.unwrap();
    let pod = env.pods().get("p").await.unwrap();
    let status = &pod.status.as_ref().unwrap().ephemeral_container_statuses;
    let dbg = &status.as_ref().unwrap()[0];
    assert!(dbg.state.as_ref().unwrap().running.is_some(), "{dbg:?}");
    let running = env.fake.running(&uid);
    let id = &running.iter().find(|(_, n)| n == "debugger-xyz").unwrap().0;
    env.write_log(&uid, "debugger-xyz", LOG);

    let ok = env.apiserver_client();
    let mut k = env.kubelet(Some(&ok)).await.unwrap();
    let r = call(
        &mut k,
        Method::GET,
        "/containerLogs/default/p/debugger-xyz",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (StatusCode::OK, "one\ntwo\nthree\n")
    );
    let upgrade = [("connection", "Upgrade"), ("upgrade", "SPDY/3.1")];
    // The stand-in streaming server refuses attach: what matters is which container was asked.
    let r = call(
        &mut k,
        Method::POST,
        "/attach/default/p/debugger-xyz?stdin=true&stdout=true&tty=true",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        env.fake.streams().contains(&format!("attach {id}")),
        "{:?}",
        env.fake.streams()
    );
    let mut k = env.kubelet(Some(&ok)).await.unwrap();
    let r = call(
        &mut k,
        Method::POST,
        "/exec/default/p/debugger-xyz?command=ps&stdout=true",
        &upgrade,
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::SWITCHING_PROTOCOLS);
    assert!(
        env.fake
            .streams()
            .iter()
            .any(|s| s.starts_with(&format!("exec {id} ps"))),
        "{:?}",
        env.fake.streams()
    );
}
