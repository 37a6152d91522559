//! The kubelet's HTTPS API (port 10250), as upstream's: container logs, exec, attach and
//! port-forward (streamed from the runtime's streaming server), resource stats, health and the
//! node's pods. Every request is authenticated (a client certificate of the cluster CA, else a
//! bearer token the API server vouches for) and authorized by the API server on this node's
//! `nodes` subresources, as upstream's kubelet in webhook mode: see [`auth`].

pub mod auth;
pub mod cadvisor;
pub mod exposition;
pub mod logs;
pub mod metrics;
pub mod node_exporter;
pub mod proxy;
pub mod serving_cert;
pub mod stats;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::config::ServingTls;
use crate::pod::model::State as CState;
use crate::pod::worker::Shared;
use logs::LogOptions;

pub use auth::{AuthOptions, Identity, NodeAuth};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("tls: {0}")]
    Tls(String),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

fn tls_error(e: impl std::fmt::Display) -> ServeError {
    ServeError::Tls(e.to_string())
}

/// The kubelet's TLS settings: its serving certificate, and client certificates required and
/// verified against the cluster CA.
pub fn tls_config(tls: &ServingTls) -> Result<rustls::ServerConfig, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut tls.client_ca_pem.as_bytes()) {
        roots.add(cert.map_err(tls_error)?).map_err(tls_error)?;
    }
    // A certificate is optional (bearer tokens authenticate too); one presented must chain to
    // the CA, and a request with neither is refused by the filter with 401.
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(tls_error)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(tls.cert.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// What the handlers share.
pub struct KubeletServer {
    pub shared: Arc<Shared>,
    cpu: Mutex<Option<stats::CpuSample>>,
    /// Who may call: asked of the API server through the kubelet's own client.
    auth: Arc<NodeAuth>,
}

impl KubeletServer {
    pub fn new(shared: Arc<Shared>) -> Arc<Self> {
        Self::with_auth(shared, AuthOptions::default())
    }

    /// A server whose answers from the API server are kept as `options` says.
    pub fn with_auth(shared: Arc<Shared>, options: AuthOptions) -> Arc<Self> {
        let auth = NodeAuth::new(shared.client.clone(), &shared.config.node_name, options);
        Arc::new(KubeletServer {
            shared,
            cpu: Mutex::new(None),
            auth: Arc::new(auth),
        })
    }
}

/// The kubelet's API, testable without sockets: a verified client certificate is an
/// [`Identity`] extension of the request.
pub fn router(server: Arc<KubeletServer>) -> Router {
    let auth = server.auth.clone();
    Router::new()
        .route("/healthz", get(healthz))
        .route("/pods", get(pods))
        .route("/pods/", get(pods))
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/exec/{ns}/{pod}/{container}", any(exec))
        .route("/exec/{ns}/{pod}/{uid}/{container}", any(exec_uid))
        .route("/attach/{ns}/{pod}/{container}", any(attach))
        .route("/attach/{ns}/{pod}/{uid}/{container}", any(attach_uid))
        .route("/portForward/{ns}/{pod}", any(port_forward))
        .route("/portForward/{ns}/{pod}/{uid}", any(port_forward_uid))
        .route("/stats/summary", get(summary))
        .route("/stats/summary/", get(summary))
        .route("/metrics/resource", get(metrics::resource_handler))
        .route("/metrics/cadvisor", get(metrics::cadvisor_handler))
        .route("/metrics", get(metrics::kubelet_handler))
        .route("/metrics/node", get(metrics::node_handler))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "404 page not found\n") })
        .layer(middleware::from_fn_with_state(auth, auth::filter))
        .with_state(server)
}

/// Serves the router over TLS on `listener` until the process ends.
pub async fn serve(listener: TcpListener, tls: rustls::ServerConfig, app: Router) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet API: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "kubelet API: tls handshake failed");
                    return;
                }
            };
            let identity = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| Identity::from_certificate(c.as_ref()));
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let mut req = req.map(Body::new);
                    if let Some(id) = identity.clone() {
                        req.extensions_mut().insert(id);
                    }
                    app.clone().oneshot(req)
                });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "kubelet API: connection ended with an error");
            }
        });
    }
}

fn text(code: StatusCode, msg: impl Into<String>) -> Response {
    let mut resp = (code, msg.into()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn json<T: serde::Serialize>(v: &T) -> Response {
    match serde_json::to_vec(v) {
        Ok(body) => {
            let mut r = Response::new(Body::from(body));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok")
}

/// This node's pods as the API has them.
async fn pods(State(k): State<Arc<KubeletServer>>) -> Response {
    let api: Api<Pod> = Api::all(k.shared.client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={}", k.shared.config.node_name));
    match api.list(&lp).await {
        Ok(list) => json(&serde_json::json!({
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {},
            "items": list.items,
        })),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The pod `ns/name` when it runs on this node (and has `uid`, if given).
async fn node_pod(
    k: &KubeletServer,
    ns: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<Pod, Response> {
    let api: Api<Pod> = Api::namespaced(k.shared.client.clone(), ns);
    let pod = match api.get_opt(name).await {
        Ok(p) => p,
        Err(e) => return Err(text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    };
    let on_node = |p: &Pod| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&k.shared.config.node_name)
    };
    match pod {
        Some(p) if on_node(&p) && uid.is_none_or(|u| p.metadata.uid.as_deref() == Some(u)) => Ok(p),
        _ => Err(text(
            StatusCode::NOT_FOUND,
            format!("pod {name:?} does not exist"),
        )),
    }
}

fn has_container(pod: &Pod, name: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers.iter().any(|c| c.name == name)
            || s.init_containers.iter().flatten().any(|c| c.name == name)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == name)
    })
}

fn strip_scheme(id: &str) -> &str {
    id.split_once("://").map(|(_, id)| id).unwrap_or(id)
}

/// Which container's log to read, from the pod's status as upstream's
/// validateContainerLogStatus decides; errors are upstream's messages.
pub fn log_container_id(pod: &Pod, container: &str, previous: bool) -> Result<String, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref().and_then(|s| {
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .chain(s.ephemeral_container_statuses.iter().flatten())
            .find(|c| c.name == container)
    });
    let Some(cs) = status else {
        // Not reported yet: the kubelet has not started it.
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: ContainerCreating"
        ));
    };
    let state = cs.state.clone().unwrap_or_default();
    let last = cs
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .and_then(|t| t.container_id.clone())
        .filter(|id| !id.is_empty());
    let terminated = || {
        Err(format!(
            "container {container:?} in pod {pod_name:?} is terminated"
        ))
    };
    if previous {
        return last.map(|id| strip_scheme(&id).to_string()).ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        });
    }
    if state.running.is_some() {
        return cs
            .container_id
            .as_deref()
            .map(|id| strip_scheme(id).to_string())
            .ok_or_else(|| {
                format!(
                    "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
                )
            });
    }
    if let Some(t) = &state.terminated {
        return match t.container_id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => Ok(strip_scheme(id).to_string()),
            None => match last {
                Some(id) => Ok(strip_scheme(&id).to_string()),
                None => terminated(),
            },
        };
    }
    if cs
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .is_some()
    {
        return match last {
            Some(id) => Ok(strip_scheme(&id).to_string()),
            None => terminated(),
        };
    }
    if let Some(w) = &state.waiting {
        let reason = w.reason.clone().unwrap_or_default();
        return Err(match reason.as_str() {
            "ErrImagePull" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
            ),
            _ => {
                format!("container {container:?} in pod {pod_name:?} is waiting to start: {reason}")
            }
        });
    }
    Err(format!(
        "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
    ))
}

async fn container_logs(
    State(k): State<Arc<KubeletServer>>,
    Path((ns, name, container)): Path<(String, String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let opts = match LogOptions::from_query(&query, jiff::Timestamp::now()) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let pod = match node_pod(&k, &ns, &name, None).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    if !has_container(&pod, &container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {name:?}"),
        );
    }
    let id = match log_container_id(&pod, &container, opts.previous) {
        Ok(id) => id,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let runtime = k.shared.runtime.clone();
    let status = match runtime.container_status(&id).await {
        Ok(s) => s,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("failed to get container status {id:?}: {}", e.message),
            );
        }
    };
    let Some(path) = logs::log_file(&status.log_path) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("container {id:?} has no log file"),
        );
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(logs::stream(path, opts, tx, move || {
        let runtime = runtime.clone();
        let id = id.clone();
        async move {
            runtime
                .container_status(&id)
                .await
                .is_ok_and(|s| s.state == cri::ContainerState::ContainerRunning as i32)
        }
    }));
    let mut resp = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

/// Query flags of exec and attach (`1`/`true`).
fn stream_flag(query: &[(String, String)], key: &str) -> bool {
    query
        .iter()
        .any(|(k, v)| k == key && matches!(v.as_str(), "1" | "true" | "True" | "TRUE" | "t"))
}

struct StreamOpts {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

/// The streams asked for; the error is a 400's message.
fn stream_opts(query: &[(String, String)]) -> Result<StreamOpts, String> {
    let mut o = StreamOpts {
        stdin: stream_flag(query, "stdin") || stream_flag(query, "input"),
        stdout: stream_flag(query, "stdout") || stream_flag(query, "output"),
        stderr: stream_flag(query, "stderr") || stream_flag(query, "error"),
        tty: stream_flag(query, "tty"),
    };
    if !o.stdin && !o.stdout && !o.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    if o.tty && o.stderr {
        // As upstream: a terminal has no separate stderr.
        o.stderr = false;
    }
    Ok(o)
}

fn query_of(req: &Request) -> Vec<(String, String)> {
    Query::<Vec<(String, String)>>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default()
}

/// The running container `name` of the pod, from the runtime.
async fn running_container(k: &KubeletServer, pod: &Pod, name: &str) -> Result<String, Response> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let rt = k
        .shared
        .runtime_pod(uid)
        .await
        .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    rt.containers
        .iter()
        .find(|c| c.name == name && c.state == CState::Running)
        .map(|c| c.id.clone())
        .ok_or_else(|| {
            text(
                StatusCode::NOT_FOUND,
                format!("container not found ({name:?})"),
            )
        })
}

#[derive(Clone, Copy)]
enum Stream {
    Exec,
    Attach,
}

async fn stream_container(
    k: Arc<KubeletServer>,
    kind: Stream,
    ns: String,
    name: String,
    uid: Option<String>,
    container: String,
    req: Request,
) -> Response {
    let query = query_of(&req);
    let opts = match stream_opts(&query) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let pod = match node_pod(&k, &ns, &name, uid.as_deref()).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    if !has_container(&pod, &container) {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {name:?}"),
        );
    }
    let id = match running_container(&k, &pod, &container).await {
        Ok(id) => id,
        Err(r) => return r,
    };
    let url = match kind {
        Stream::Exec => {
            let cmd: Vec<String> = query
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect();
            k.shared
                .runtime
                .exec(cri::ExecRequest {
                    container_id: id,
                    cmd,
                    tty: opts.tty,
                    stdin: opts.stdin,
                    stdout: opts.stdout,
                    stderr: opts.stderr,
                })
                .await
        }
        Stream::Attach => {
            k.shared
                .runtime
                .attach(cri::AttachRequest {
                    container_id: id,
                    stdin: opts.stdin,
                    tty: opts.tty,
                    stdout: opts.stdout,
                    stderr: opts.stderr,
                })
                .await
        }
    };
    match url {
        Ok(url) => proxy::upgrade(req, &url).await,
        Err(e) => runtime_error(&e),
    }
}

/// A runtime error as upstream's streaming.WriteError maps gRPC codes.
fn runtime_error(e: &crate::runtime::RuntimeError) -> Response {
    let code = match e.code {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    text(code, e.to_string())
}

async fn exec(
    State(k): State<Arc<KubeletServer>>,
    Path((ns, name, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    stream_container(k, Stream::Exec, ns, name, None, container, req).await
}

async fn exec_uid(
    State(k): State<Arc<KubeletServer>>,
    Path((ns, name, uid, container)): Path<(String, String, String, String)>,
    req: Request,
) -> Response {
    stream_container(k, Stream::Exec, ns, name, Some(uid), container, req).await
}

async fn attach(
    State(k): State<Arc<KubeletServer>>,
    Path((ns, name, container)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    stream_container(k, Stream::Attach, ns, name, None, container, req).await
}

async fn attach_uid(
    State(k): State<Arc<KubeletServer>>,
    Path((ns, name, uid, container)): Path<(String, String, String, String)>,
    req: Request,
) -> Response {
    stream_container(k, Stream::Attach, ns, name, Some(uid), container, req).await
}

/// Ports of a port-forward request (`?ports=80,8080` or repeated `port`/`ports`).
/// The error is a 400's message.
fn forward_ports(query: &[(String, String)]) -> Result<Vec<i32>, String> {
    let mut ports = Vec::new();
    for (_, v) in query.iter().filter(|(k, _)| k == "ports" || k == "port") {
        for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => ports.push(i32::from(n)),
                _ => {
                    return Err(format!("unable to parse {p:?} as a port"));
                }
            }
        }
    }
    Ok(ports)
}

async fn forward(
    k: Arc<KubeletServer>,
    ns: String,
    name: String,
    uid: Option<String>,
    req: Request,
) -> Response {
    let ports = match forward_ports(&query_of(&req)) {
        Ok(p) => p,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let pod = match node_pod(&k, &ns, &name, uid.as_deref()).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let rt = match k.shared.runtime_pod(pod_uid).await {
        Ok(rt) => rt,
        Err(e) => return runtime_error(&e),
    };
    let Some(sandbox) = rt.ready_sandbox() else {
        return text(
            StatusCode::NOT_FOUND,
            format!("pod not found ({:?})", format!("{name}_{ns}")),
        );
    };
    let url = k
        .shared
        .runtime
        .port_forward(cri::PortForwardRequest {
            pod_sandbox_id: sandbox.id.clone(),
            port: ports,
        })
        .await;
    match url {
        Ok(url) => proxy::upgrade(req, &url).await,
        Err(e) => runtime_error(&e),
    }
}

async fn port_forward(
    State(k): State<Arc<KubeletServer>>,
    Path((ns, name)): Path<(String, String)>,
    req: Request,
) -> Response {
    forward(k, ns, name, None, req).await
}

async fn port_forward_uid(
    State(k): State<Arc<KubeletServer>>,
    Path((ns, name, uid)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    forward(k, ns, name, Some(uid), req).await
}

/// What a summary holds: `CpuAndMemory` is upstream's `only_cpu_and_memory=true`
/// (`GetCPUAndMemoryStats`), which metrics scrapes ask for every resolution: no filesystem
/// or log sizes, and containers' usage read from their cgroups rather than the runtime (see
/// [`stats::cgroup_container_stats`]) on a node whose host the kubelet manages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SummaryScope {
    Full,
    CpuAndMemory,
}

/// The summary now, read from the runtime and the host.
pub async fn collect_summary(
    k: &KubeletServer,
    scope: SummaryScope,
) -> Result<stats::Summary, crate::runtime::RuntimeError> {
    let rt = &k.shared.runtime;
    let config = &k.shared.config;
    let full = scope == SummaryScope::Full;
    let (sandboxes, containers) = tokio::join!(rt.list_pod_sandboxes(), rt.list_containers());
    let (sandboxes, containers) = (sandboxes?, containers?);
    let now = jiff::Timestamp::now().as_nanosecond() as i64;
    let (container_stats, sandbox_stats) = if !full && config.manage_host {
        // Pods are then the sum of their containers.
        let stats = stats::cgroup_container_stats(
            &config.cgroups_path,
            &config.cgroup_root,
            &sandboxes,
            &containers,
            now,
        );
        (stats, Vec::new())
    } else {
        let (container_stats, sandbox_stats) = tokio::join!(
            listed_again(|| rt.list_container_stats()),
            listed_again(|| rt.list_pod_sandbox_stats()),
        );
        // Older runtimes lack sandbox stats: pods are then the sum of their containers.
        (container_stats?, sandbox_stats.unwrap_or_default())
    };
    let image_fs = if full {
        rt.image_fs_info().await.ok()
    } else {
        None
    };
    let image_fs = image_fs.and_then(|info| {
        let usage = info.image_filesystems.into_iter().next()?;
        let mount = usage.fs_id.as_ref().map(|f| f.mountpoint.clone())?;
        let mut fs = stats::fs_stats(std::path::Path::new(&mount), now).unwrap_or_default();
        fs.time = stats::time(usage.timestamp);
        fs.used_bytes = usage.used_bytes.map(|v| v.value);
        fs.inodes_used = usage.inodes_used.map(|v| v.value);
        Some(fs)
    });
    let mut log_bytes = std::collections::BTreeMap::new();
    for c in containers
        .iter()
        .filter(|c| full && c.state == cri::ContainerState::ContainerRunning as i32)
    {
        if let Some(size) = log_size(rt, &c.id).await {
            log_bytes.insert(c.id.clone(), size);
        }
    }
    let previous = *k.cpu.lock().expect("cpu sample");
    let root = k.shared.config.root_dir.clone();
    let (mut node, mut sample) = stats::sample_host(&root, previous);
    if previous.is_none() {
        // A rate needs two readings.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        (node, sample) = stats::sample_host(&root, sample);
    }
    if sample.is_some() {
        *k.cpu.lock().expect("cpu sample") = sample;
    }
    Ok(stats::summarize(&stats::Inputs {
        node_name: k.shared.config.node_name.clone(),
        node,
        sandboxes,
        sandbox_stats,
        containers,
        container_stats,
        image_fs,
        log_bytes,
        now_ns: now,
    }))
}

/// How many times a stats list is asked for before its error is the answer.
const STATS_ATTEMPTS: u32 = 3;

/// A stats list, asked for again when it failed: containerd fails the whole list when a
/// container is removed while it reads them ("failed to get container ID: ... not found"),
/// which a node with pods coming and going hits on many scrapes; the next list no longer has
/// that container.
async fn listed_again<T, F, Fut>(mut list: F) -> Result<T, crate::runtime::RuntimeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, crate::runtime::RuntimeError>>,
{
    let mut attempt = 1;
    loop {
        match list().await {
            Err(e) if attempt < STATS_ATTEMPTS => {
                tracing::debug!(error = %e, attempt, "listing stats failed; listing again");
                attempt += 1;
            }
            answer => return answer,
        }
    }
}

/// The size of a running container's log file.
async fn log_size(rt: &Arc<dyn crate::runtime::Runtime>, id: &str) -> Option<u64> {
    let status = rt.container_status(id).await.ok()?;
    Some(
        std::fs::metadata(logs::log_file(&status.log_path)?)
            .ok()?
            .len(),
    )
}

async fn summary(
    State(k): State<Arc<KubeletServer>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let scope = match stream_flag(&query, "only_cpu_and_memory") {
        true => SummaryScope::CpuAndMemory,
        false => SummaryScope::Full,
    };
    match collect_summary(&k, scope).await {
        Ok(s) if scope == SummaryScope::CpuAndMemory => json(&stats::cpu_and_memory_only(&s)),
        Ok(s) => json(&s),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to get summary stats: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stats_lists_are_asked_for_again_when_they_fail() {
        let gone = || crate::runtime::RuntimeError {
            operation: "ListContainerStats",
            code: tonic::Code::Unknown,
            message: "failed to get container ID: abc: not found".into(),
        };
        // Fails once (a container went away during the list), then answers.
        let calls = std::cell::Cell::new(0);
        let list = || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move { if n == 1 { Err(gone()) } else { Ok(n) } }
        };
        assert_eq!(listed_again(list).await.unwrap(), 2);
        // Keeps failing: the error, after STATS_ATTEMPTS lists.
        calls.set(0);
        let list = || {
            calls.set(calls.get() + 1);
            async { Err::<u32, _>(gone()) }
        };
        assert!(listed_again(list).await.is_err());
        assert_eq!(calls.get(), STATS_ATTEMPTS);
    }

    #[test]
    fn ports() {
        let q = |s: &str| {
            Query::<Vec<(String, String)>>::try_from_uri(&format!("/x?{s}").parse().unwrap())
                .unwrap()
                .0
        };
        assert_eq!(
            forward_ports(&q("ports=80,8080")).ok(),
            Some(vec![80, 8080])
        );
        assert_eq!(
            forward_ports(&q("port=80&port=81")).ok(),
            Some(vec![80, 81])
        );
        assert!(forward_ports(&q("ports=x")).is_err());
        assert!(forward_ports(&q("ports=0")).is_err());
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn log_container_choice() {
        let p = pod(serde_json::json!({}));
        assert_eq!(
            log_container_id(&p, "c", false).unwrap_err(),
            "container \"c\" in pod \"p\" is waiting to start: ContainerCreating"
        );
        let p = pod(serde_json::json!({"containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}));
        assert_eq!(
            log_container_id(&p, "c", false).unwrap_err(),
            "container \"c\" in pod \"p\" is waiting to start: trying and failing to pull image"
        );
        let p = pod(serde_json::json!({"containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 1,
            "containerID": "containerd://new",
            "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}}}]}));
        assert_eq!(log_container_id(&p, "c", false).unwrap(), "new");
        assert_eq!(log_container_id(&p, "c", true).unwrap(), "old");
        // Crash looping: the current is waiting, logs come from the last run.
        let p = pod(serde_json::json!({"containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false, "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}}}]}));
        assert_eq!(log_container_id(&p, "c", false).unwrap(), "old");
        let p = pod(serde_json::json!({"containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0,
            "containerID": "containerd://only", "state": {"running": {}}}]}));
        assert_eq!(
            log_container_id(&p, "c", true).unwrap_err(),
            "previous terminated container \"c\" in pod \"p\" not found"
        );
        let p = pod(serde_json::json!({"containerStatuses": [{
            "name": "c", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "containerID": "containerd://done",
            "state": {"terminated": {"exitCode": 0, "containerID": "containerd://done"}}}]}));
        assert_eq!(log_container_id(&p, "c", false).unwrap(), "done");
    }
}
