//! Test helpers, used only as a dev-dependency: a private etcd on loopback ports of its own,
//! API servers in-process (over a socket with TLS, or as a bare router), and waiting on
//! conditions with a deadline instead of sleeping.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use minik8s_apiserver::auth::ClientCertIdentity;
/// Who a test's request is from ([`InProcess::send_as`], [`InProcess::client_as`]).
pub use minik8s_apiserver::auth::UserInfo;
use minik8s_apiserver::handlers::resource::ServeOptions;
use minik8s_apiserver::{ApiServer, Config};
use tempfile::TempDir;
use tower::ServiceExt;

/// Logs from tests when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A free TCP port on loopback (bound and released; fine for tests on one machine).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `check` until it returns `Some`, failing after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A private etcd (Debian's etcd-server) on loopback ports of its own; killed on drop.
pub struct Etcd {
    child: Child,
    _dir: TempDir,
    pub endpoint: String,
}

impl Etcd {
    pub fn start() -> anyhow::Result<Etcd> {
        let binary = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .context("etcd is not installed (apt-get install etcd-server)")?;
        let dir = tempfile::tempdir()?;
        let client = free_port();
        let peer = free_port();
        let endpoint = format!("http://127.0.0.1:{client}");
        let child = Command::new(binary)
            .args([
                "--name",
                "test",
                "--data-dir",
                &dir.path().join("data").to_string_lossy(),
                "--listen-client-urls",
                &endpoint,
                "--advertise-client-urls",
                &endpoint,
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &format!("test=http://127.0.0.1:{peer}"),
                "--log-level",
                "error",
            ])
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting etcd")?;
        let mut etcd = Etcd {
            child,
            _dir: dir,
            endpoint,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
                return Ok(etcd);
            }
            if let Some(status) = etcd.child.try_wait()? {
                bail!("etcd exited at start: {status}");
            }
            if Instant::now() > deadline {
                bail!("etcd did not start listening within 20s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Which store a test server uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Etcd,
}

/// Options of test servers that differ from production defaults. As upstream's integration
/// test servers, they run without ServiceAccount admission: nothing creates the `default`
/// accounts a pod would need (tests of that plugin turn it back on).
pub fn test_serve_options() -> ServeOptions {
    ServeOptions {
        bookmark_interval: Duration::from_millis(200),
        admission: minik8s_apiserver::admission::AdmissionOptions {
            disabled: vec!["ServiceAccount".into()],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// An API server running in this process on a loopback port, with TLS.
pub struct TestServer {
    pub server: Arc<ApiServer>,
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    pub dir: TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    _etcd: Option<Etcd>,
}

/// Authorization as a production server has it, `--authorization-mode=Node,RBAC` (test
/// servers allow everything unless told otherwise): for [`TestServer::start_with`] and
/// [`InProcess::start_with`].
pub fn with_rbac(config: &mut Config) {
    config.serve.authorization_modes = vec![
        minik8s_apiserver::authz::Mode::Node,
        minik8s_apiserver::authz::Mode::Rbac,
    ];
}

impl TestServer {
    pub async fn start(backend: Backend) -> anyhow::Result<TestServer> {
        Self::start_with(backend, |_| {}).await
    }

    /// [`TestServer::start`] with settings changed by `configure` (authorization modes, ...).
    pub async fn start_with(
        backend: Backend,
        configure: impl FnOnce(&mut Config),
    ) -> anyhow::Result<TestServer> {
        init_tracing();
        let dir = tempfile::tempdir()?;
        let etcd = match backend {
            Backend::Etcd => Some(Etcd::start()?),
            Backend::Sqlite => None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut config = Config::new(dir.path());
        config.bind_address = addr.ip();
        config.secure_port = addr.port();
        config.etcd_servers = etcd.iter().map(|e| e.endpoint.clone()).collect();
        config.serve = test_serve_options();
        configure(&mut config);
        let prepared = minik8s_apiserver::prepare(config).await?;
        let tls = minik8s_apiserver::serve::tls_config(&prepared.pki)?;
        let app = minik8s_apiserver::router(prepared.server.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(minik8s_apiserver::serve::serve_tls(
            listener,
            tls,
            app,
            async {
                let _ = rx.await;
            },
        ));
        Ok(TestServer {
            server: prepared.server,
            addr,
            kubeconfig: dir.path().join("admin.kubeconfig"),
            dir,
            shutdown: Some(tx),
            _etcd: etcd,
        })
    }

    /// A kube-rs client for the admin, over TLS, from the written kubeconfig.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        kube_client(&self.kubeconfig).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A kube-rs client from a kubeconfig file.
pub async fn kube_client(path: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

/// An API server without a socket: requests go straight to its router as the admin.
pub struct InProcess {
    pub server: Arc<ApiServer>,
    pub router: axum::Router,
    _dir: Option<TempDir>,
    _etcd: Option<Etcd>,
}

/// The admin identity, as a verified client certificate would give it.
pub fn admin() -> UserInfo {
    UserInfo {
        name: "minik8s-admin".into(),
        uid: String::new(),
        groups: vec!["system:masters".into()],
    }
}

/// A parsed response.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

impl InProcess {
    pub async fn start(backend: Backend) -> anyhow::Result<InProcess> {
        Self::start_with(backend, |_| {}).await
    }

    /// [`InProcess::start`] with settings changed by `configure` (flags such as
    /// `service_cluster_ip_range`).
    pub async fn start_with(
        backend: Backend,
        configure: impl FnOnce(&mut Config),
    ) -> anyhow::Result<InProcess> {
        init_tracing();
        let dir = tempfile::tempdir()?;
        let etcd = match backend {
            Backend::Etcd => Some(Etcd::start()?),
            Backend::Sqlite => None,
        };
        let mut config = Config::new(dir.path());
        config.etcd_servers = etcd.iter().map(|e| e.endpoint.clone()).collect();
        config.serve = test_serve_options();
        configure(&mut config);
        let prepared = minik8s_apiserver::prepare(config).await?;
        let router = minik8s_apiserver::router(prepared.server.clone());
        Ok(InProcess {
            server: prepared.server,
            router,
            _dir: Some(dir),
            _etcd: etcd,
        })
    }

    /// Serves an already built server (another server over the same store, as after a
    /// restart); the caller keeps whatever the store lives in.
    pub fn from_server(server: Arc<ApiServer>) -> InProcess {
        InProcess {
            router: minik8s_apiserver::router(server.clone()),
            server,
            _dir: None,
            _etcd: None,
        }
    }

    /// Sends a request as the admin; `body` is sent as JSON unless `content_type` says otherwise.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(ct) = content_type {
            req = req.header(http::header::CONTENT_TYPE, ct);
        }
        let req = req
            .body(axum::body::Body::from(body.into()))
            .expect("request");
        self.send(req).await
    }

    /// A GET that asks for `accept` (aggregated discovery, Table, protobuf).
    pub async fn get_accepting(&self, path: &str, accept: &str) -> Reply {
        let req = Request::get(path)
            .header(http::header::ACCEPT, accept)
            .body(axum::body::Body::empty())
            .expect("request");
        self.send(req).await
    }

    /// Sends `req` as the admin.
    pub async fn send(&self, req: Request<axum::body::Body>) -> Reply {
        self.send_as(Some(&admin()), req).await
    }

    /// Sends `req` as `user` (a verified client certificate's identity), or with no
    /// credentials at all for `None`.
    pub async fn send_as(
        &self,
        user: Option<&UserInfo>,
        mut req: Request<axum::body::Body>,
    ) -> Reply {
        if let Some(user) = user {
            req.extensions_mut()
                .insert(ClientCertIdentity(user.clone()));
        }
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("router is infallible");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None, Bytes::new()).await
    }

    /// Sends a request as `user` (see [`InProcess::send_as`]); `body` as JSON when given.
    pub async fn call_as(
        &self,
        user: Option<&UserInfo>,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(path);
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(axum::body::Body::from(
                body.map(|b| b.to_string()).unwrap_or_default(),
            ))
            .expect("request");
        self.send_as(user, req).await
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> Reply {
        self.call(
            Method::POST,
            path,
            Some("application/json"),
            body.to_string(),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: serde_json::Value) -> Reply {
        self.call(
            Method::PUT,
            path,
            Some("application/json"),
            body.to_string(),
        )
        .await
    }

    pub async fn patch(&self, path: &str, patch_type: &str, body: serde_json::Value) -> Reply {
        self.call(Method::PATCH, path, Some(patch_type), body.to_string())
            .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call(Method::DELETE, path, None, Bytes::new()).await
    }

    /// A kube-rs client that talks to the router directly, as the admin.
    pub fn client(&self) -> kube::Client {
        self.client_as(admin())
    }

    /// A kube-rs client that talks to the router directly as `user` (a verified client
    /// certificate's identity).
    pub fn client_as(&self, user: UserInfo) -> kube::Client {
        let router = self.router.clone();
        let service = tower::service_fn(move |mut req: Request<kube::client::Body>| {
            req.extensions_mut()
                .insert(ClientCertIdentity(user.clone()));
            router.clone().oneshot(req.map(axum::body::Body::new))
        });
        kube::Client::new(service, "default")
    }

    /// A kube-rs client that talks to the router directly with `Authorization: Bearer
    /// <token>` and no certificate (a ServiceAccount or bootstrap token's client).
    pub fn client_with_token(&self, token: &str) -> kube::Client {
        let router = self.router.clone();
        let value = http::HeaderValue::from_str(&format!("Bearer {token}")).expect("token");
        let service = tower::service_fn(move |mut req: Request<kube::client::Body>| {
            req.headers_mut()
                .insert(http::header::AUTHORIZATION, value.clone());
            router.clone().oneshot(req.map(axum::body::Body::new))
        });
        kube::Client::new(service, "default")
    }
}

/// The claims of a JWT (a service-account token), unverified: its middle part decoded.
pub fn jwt_claims(token: &str) -> serde_json::Value {
    use base64::Engine;
    let body = token.split('.').nth(1).expect("a JWT has three parts");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .expect("the claims are base64url");
    serde_json::from_slice(&bytes).expect("the claims are JSON")
}
