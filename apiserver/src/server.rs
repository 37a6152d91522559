//! The API server as a value: its store, its served resources and its settings, and how it
//! starts (store, certificates, default namespaces, compaction) and serves HTTPS.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use minik8s_api::ResourceInfo;
use minik8s_api::strategy::{BuiltIn, Kind};

use crate::auth::Authenticator;
use crate::builtin;
use crate::handlers::openapi::OpenApi;
use crate::handlers::resource::{Endpoint, ServeOptions};
use crate::metrics::Metrics;
use crate::pki::{Pki, PkiError, ServingNames};
use crate::registry::generic::{GenericRegistry, ListQuery, Part};
use crate::registry::services::{ServiceAllocator, ServiceRanges};
use crate::registry::typed::Registries;
use crate::storage::{DynStore, EtcdStore, SqliteOptions, SqliteStore, StoreError};

/// What `/version` reports: Kubernetes 1.32, so the kubectl dispatcher picks kubectl 1.32.
pub fn version_info() -> k8s_openapi::apimachinery::pkg::version::Info {
    k8s_openapi::apimachinery::pkg::version::Info {
        major: "1".into(),
        minor: "32".into(),
        git_version: "v1.32.4+minik8s".into(),
        git_commit: env!("CARGO_PKG_VERSION").into(),
        git_tree_state: "clean".into(),
        build_date: "2026-01-01T00:00:00Z".into(),
        go_version: "rust".into(),
        compiler: "rustc".into(),
        platform: format!(
            "{}/{}",
            std::env::consts::OS,
            if std::env::consts::ARCH == "x86_64" {
                "amd64"
            } else {
                std::env::consts::ARCH
            }
        ),
        ..Default::default()
    }
}

/// Served resources by (group, version, plural).
type Endpoints = BTreeMap<(String, String, String), Arc<dyn Endpoint>>;

/// The served resources and what they need, shared by every request.
pub struct ApiServer {
    pub store: DynStore,
    pub metrics: Arc<Metrics>,
    pub auth: Arc<Authenticator>,
    pub options: ServeOptions,
    /// `host:port` clients are told to use (discovery's serverAddressByClientCIDRs).
    pub address: String,
    /// Kinds' schemas and the OpenAPI documents built from them.
    pub openapi: OpenApi,
    /// How to reach kubelets (logs, exec, port-forward, node proxy); set once certificates
    /// exist.
    pub kubelet: std::sync::OnceLock<Arc<crate::kubelet::KubeletClient>>,
    /// How `pods/proxy` and `services/proxy` reach pod IPs when not by direct TCP
    /// (upstream's egress selector for the cluster network).
    pub cluster_dialer: std::sync::OnceLock<Arc<dyn crate::proxy_transport::ClusterDialer>>,
    /// Services' cluster IPs and node ports.
    pub services: Arc<ServiceAllocator>,
    /// Where audit events go, when the flags turn auditing on.
    pub audit: std::sync::OnceLock<Arc<crate::audit::Auditor>>,
    /// Group versions served by other API servers (APIServices).
    pub aggregator: Arc<crate::aggregator::Aggregator>,
    endpoints: RwLock<Endpoints>,
    /// The registries of built-in kinds, as served; see [`ApiServer::registry`].
    pub(crate) registries: Registries,
    /// Set when the process starts shutting down: readyz fails from then on, so load
    /// balancers stop sending new work while requests in flight finish.
    shutting_down: std::sync::atomic::AtomicBool,
    /// Keeps this server in the `kubernetes` Service's endpoints; started by [`prepare`].
    pub(crate) endpoint_reconciler: std::sync::OnceLock<
        Arc<crate::registry::services::endpoint_reconciler::EndpointReconciler>,
    >,
}

impl ApiServer {
    /// A server over `store` serving every built-in resource.
    pub fn new(
        store: DynStore,
        metrics: Arc<Metrics>,
        mut auth: Authenticator,
        mut options: ServeOptions,
        address: String,
    ) -> Arc<Self> {
        options.namespaces = Some(crate::registry::namespaces::NamespaceCache::start(
            store.clone(),
        ));
        auth.anonymous = options.anonymous_auth;
        let authorizer = Arc::new(crate::authz::Authorizer::start(
            &store,
            &options.authorization_modes,
        ));
        auth.authorizer = Some(authorizer.clone());
        options.authorizer = Some(authorizer);
        let services = Arc::new(ServiceAllocator::new(&options.service_ranges));
        let webhooks = Arc::new(crate::admission::webhook::Webhooks::default());
        options.external_admission =
            Some(crate::registry::external::ExternalHandle(webhooks.clone()));
        let server = Arc::new(ApiServer {
            services,
            aggregator: Default::default(),
            store,
            metrics,
            auth: Arc::new(auth),
            options,
            address,
            openapi: OpenApi::new(),
            kubelet: std::sync::OnceLock::new(),
            cluster_dialer: std::sync::OnceLock::new(),
            audit: std::sync::OnceLock::new(),
            endpoints: RwLock::new(BTreeMap::new()),
            registries: Registries::default(),
            shutting_down: Default::default(),
            endpoint_reconciler: std::sync::OnceLock::new(),
        });
        builtin::register(&server);
        crate::handlers::metrics_api::register(&server);
        webhooks.bind(crate::admission::webhook::Sources {
            mutating: Arc::downgrade(&server.registry()),
            validating: Arc::downgrade(&server.registry()),
            namespaces: Arc::downgrade(&server.registry()),
            resolver: crate::admission::webhook::client::Resolver {
                services: Arc::downgrade(&server.registry()),
                slices: Arc::downgrade(&server.registry()),
            },
            policies: crate::admission::webhook::policy::PolicySources {
                policies: Arc::downgrade(&server.registry()),
                bindings: Arc::downgrade(&server.registry()),
                params: {
                    let weak = Arc::downgrade(&server);
                    let params: std::sync::Weak<
                        dyn crate::admission::webhook::policy::ParamSource,
                    > = weak;
                    params
                },
            },
        });
        server
    }

    /// Marks the server as shutting down (readyz's `shutdown` check fails from now on).
    pub fn begin_shutdown(&self) {
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Takes this server out of the `kubernetes` Service's endpoints and stops keeping it
    /// there (upstream's pre-shutdown hook): clients move to the other API servers now rather
    /// than when this one's lease expires.
    pub async fn stop_endpoint_reconciler(&self) {
        if let Some(reconciler) = self.endpoint_reconciler.get()
            && let Err(e) = reconciler.stop(&self.registries).await
        {
            tracing::warn!(error = %e, "removing this server from the `kubernetes` endpoints");
        }
    }

    pub fn shutting_down(&self) -> bool {
        self.shutting_down
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The served registry of the built-in kind `K`, with its hooks and admission, so writes
    /// made by the server itself allocate, admit and cache as a client's would.
    ///
    /// Panics when `K` is not a served built-in kind (a programming error).
    pub fn registry<K: Kind>(&self) -> Arc<GenericRegistry<BuiltIn<K>>> {
        self.registries.get::<K>()
    }

    pub fn register(&self, endpoint: Arc<dyn Endpoint>) {
        let info = endpoint.info();
        let key = (
            info.group.clone(),
            info.version.clone(),
            info.plural.clone(),
        );
        self.endpoints
            .write()
            .expect("endpoints lock")
            .insert(key, endpoint);
        self.openapi.invalidate();
    }

    /// Stops serving a resource (a custom resource whose CRD changed or went away).
    pub fn unregister(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<dyn Endpoint>> {
        let key = (group.to_string(), version.to_string(), plural.to_string());
        let removed = self.endpoints.write().expect("endpoints lock").remove(&key);
        self.openapi.invalidate();
        removed
    }

    pub fn endpoint(&self, group: &str, version: &str, plural: &str) -> Option<Arc<dyn Endpoint>> {
        let key = (group.to_string(), version.to_string(), plural.to_string());
        self.endpoints
            .read()
            .expect("endpoints lock")
            .get(&key)
            .cloned()
    }

    pub fn resources(&self) -> Vec<ResourceInfo> {
        self.endpoints
            .read()
            .expect("endpoints lock")
            .values()
            .map(|e| e.info().clone())
            .collect()
    }

    /// What discovery lists: this server's resources and those of aggregated servers.
    pub fn discovery_resources(&self) -> Vec<ResourceInfo> {
        let mut all = self.resources();
        all.extend(self.aggregator.resources());
        all
    }

    /// Whether this server itself serves anything at `group`/`version`.
    pub fn endpoints_of(&self, group: &str, version: &str) -> bool {
        self.endpoints
            .read()
            .expect("endpoints lock")
            .keys()
            .any(|(g, v, _)| g == group && v == version)
    }

    /// Creates what every cluster has, if missing: the namespaces and the `kubernetes` Service
    /// with its endpoints. Marks the cluster IPs and node ports stored Services hold first, so
    /// it must run before the server serves.
    /// Creates the CRDs this distribution brings (Knative Serving's kinds), or brings their
    /// spec up to date when an older server stored another; the objects stay.
    async fn install_crds(
        &self,
        crds: &[CustomResourceDefinition],
    ) -> Result<(), minik8s_api::ApiError> {
        let registry = self.registry::<CustomResourceDefinition>();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            match registry.create(None, crd.clone(), false).await {
                Ok(_) => tracing::info!(crd = %name, "installed"),
                Err(e) if e.code == 409 => {
                    let stored = registry.get(None, &name).await?;
                    if stored.spec != crd.spec {
                        let mut next = crd.clone();
                        next.metadata = stored.metadata;
                        registry
                            .update(None, &name, next, Part::Main, false)
                            .await?;
                        tracing::info!(crd = %name, "updated");
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Creates each of `objects` (cluster-scoped) unless an object of its name exists: what
    /// an administrator changed is kept.
    async fn ensure<K: Kind>(&self, objects: Vec<K>) -> Result<(), minik8s_api::ApiError> {
        let registry = self.registry::<K>();
        for object in objects {
            let name = object.metadata().name.clone().unwrap_or_default();
            match registry.create(None, object, false).await {
                Ok(_) => tracing::info!(kind = K::KIND, %name, "created"),
                Err(e) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub async fn bootstrap(
        &self,
        crds: &[CustomResourceDefinition],
    ) -> Result<(), minik8s_api::ApiError> {
        let stored = self
            .registry::<Service>()
            .list(None, &ListQuery::default())
            .await?;
        self.services.restore(&stored.items);
        let namespaces = self.registry::<Namespace>();
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let ns = Namespace {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match namespaces.create(None, ns, false).await {
                Ok(_) => tracing::info!(namespace = name, "created namespace"),
                Err(e) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        self.install_crds(crds).await?;
        // Upstream's post-start hooks: the system priority classes, and the mandatory
        // flow-control objects (exempt and catch-all).
        self.ensure(minik8s_api::kinds::priority_class::system_priority_classes())
            .await?;
        let (schemas, levels) = minik8s_api::kinds::flowcontrol::bootstrap();
        self.ensure(levels).await?;
        self.ensure(schemas).await?;
        // And the RBAC bootstrap policy (`rbac/bootstrap-roles`), which logs what it cannot
        // write instead of failing the start.
        crate::rbac_bootstrap::reconcile(self).await;
        match self.address.parse::<SocketAddr>() {
            Ok(addr) => {
                crate::registry::services::controlplane::ensure_service(
                    &self.registries,
                    &self.services,
                    addr.port(),
                )
                .await?
            }
            Err(_) => {
                tracing::warn!(address = %self.address, "no `kubernetes` service: the advertised address is not ip:port")
            }
        }
        Ok(())
    }
}

/// Compacts the store every `interval` to the revision seen one interval earlier, as the
/// upstream API server does for etcd. Failures are logged, counted and retried next time.
pub async fn run_compactor(store: DynStore, metrics: Arc<Metrics>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut previous: Option<i64> = None;
    loop {
        ticker.tick().await;
        let current = match store.current_revision().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "compaction: reading the current revision failed");
                metrics.store.compaction_failures.inc();
                continue;
            }
        };
        if let Some(target) = previous.filter(|p| *p > 0) {
            let started = std::time::Instant::now();
            match store.compact(target).await {
                Ok(()) => tracing::info!(
                    revision = target,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "compacted"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, revision = target, "compaction failed; will retry");
                    metrics.store.compaction_failures.inc();
                    // Keep the older target so the next tick retries it.
                    continue;
                }
            }
        }
        previous = Some(current);
    }
}

/// Settings of a server process, named as upstream's flags.
#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    pub bind_address: IpAddr,
    pub secure_port: u16,
    pub advertise_address: Option<IpAddr>,
    pub etcd_servers: Vec<String>,
    pub token_auth_file: Option<PathBuf>,
    /// `--enable-bootstrap-token-auth`: bearer tokens from `bootstrap.kubernetes.io/token`
    /// Secrets in kube-system (off by default, as in kube-apiserver).
    pub enable_bootstrap_token_auth: bool,
    /// Pod-bound tokens asked for 3607 s live a year (kube-apiserver's
    /// `--service-account-extend-token-expiration`).
    pub service_account_extend_token_expiration: bool,
    /// `--service-account-issuer`, `--service-account-jwks-uri` and
    /// `--service-account-max-token-expiration`.
    pub service_accounts: crate::serviceaccount::Options,
    pub service_cluster_ip_range: String,
    pub service_node_port_range: String,
    pub compaction_interval: Duration,
    pub serve: ServeOptions,
    /// CRDs of kinds the distribution brings, installed at start.
    pub crds: Vec<CustomResourceDefinition>,
    /// Create the `local-path` StorageClass, the default, at start (k3s's `local-storage`
    /// component; `--disable-local-storage` turns it off).
    pub local_storage: bool,
    /// `--audit-policy-file`, `--audit-log-path` and the log's rotation.
    pub audit: crate::audit::AuditOptions,
    /// `--encryption-provider-config`: how resources are encrypted at rest.
    pub encryption_provider_config: Option<PathBuf>,
    /// `--endpoint-reconciler-type` and `--apiserver-count`, with the lease TTL and the
    /// reconcile interval (upstream's config, not flags).
    pub endpoint_reconciler: crate::registry::services::endpoint_reconciler::ReconcilerOptions,
}

impl Config {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Config {
            data_dir: data_dir.into(),
            bind_address: "0.0.0.0".parse().expect("address"),
            secure_port: 6443,
            advertise_address: None,
            etcd_servers: Vec::new(),
            token_auth_file: None,
            enable_bootstrap_token_auth: false,
            service_account_extend_token_expiration: true,
            service_accounts: Default::default(),
            service_cluster_ip_range: "10.96.0.0/12".into(),
            service_node_port_range: "30000-32767".into(),
            compaction_interval: Duration::from_secs(300),
            serve: ServeOptions::default(),
            crds: Vec::new(),
            local_storage: true,
            audit: Default::default(),
            encryption_provider_config: None,
            endpoint_reconciler: Default::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    #[error("certificates: {0}")]
    Pki(#[from] PkiError),
    #[error("authentication: {0}")]
    Auth(#[from] crate::auth::AuthError),
    #[error("service account tokens: {0}")]
    Tokens(#[from] crate::serviceaccount::TokenError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("tls: {0}")]
    Tls(String),
    #[error("bootstrap: {0}")]
    Bootstrap(minik8s_api::ApiError),
    #[error("{0}")]
    ServiceRange(String),
    #[error("encryption provider config: {0}")]
    Encryption(#[from] crate::storage::encryption::ConfigError),
    #[error("{0}")]
    Audit(#[from] crate::audit::AuditError),
}

/// Addresses of this machine's interfaces, for the serving certificate.
pub fn local_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/proc/net/fib_trie") {
        // "|-- a.b.c.d" lines followed by "/32 host LOCAL" name the local IPv4 addresses.
        let lines: Vec<&str> = text.lines().collect();
        for w in lines.windows(2) {
            if w[1].contains("/32 host LOCAL")
                && let Some(ip) = w[0]
                    .trim()
                    .strip_prefix("|-- ")
                    .and_then(|s| s.parse::<IpAddr>().ok())
                && !out.contains(&ip)
            {
                out.push(ip);
            }
        }
    }
    out
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// A kubeconfig for the admin: this server, the cluster CA and the admin client certificate.
pub fn admin_kubeconfig(server_url: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: minik8s\n  cluster:\n    server: {server_url}\n    certificate-authority-data: {}\ncontexts:\n- name: minik8s\n  context:\n    cluster: minik8s\n    user: minik8s-admin\n    namespace: default\ncurrent-context: minik8s\nusers:\n- name: minik8s-admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\npreferences: {{}}\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem)
    )
}

/// A prepared server: store opened, certificates ready, defaults created, not yet listening.
pub struct Prepared {
    pub server: Arc<ApiServer>,
    pub pki: Pki,
    pub config: Config,
}

pub async fn prepare(config: Config) -> Result<Prepared, ServerError> {
    let io = |context: String| move |source| ServerError::Io { context, source };
    std::fs::create_dir_all(&config.data_dir)
        .map_err(io(format!("creating {}", config.data_dir.display())))?;
    let metrics = Arc::new(Metrics::new());
    let store: DynStore = if config.etcd_servers.is_empty() {
        let path = config.data_dir.join("db").join("state.db");
        Arc::new(SqliteStore::open(
            SqliteOptions::new(path),
            metrics.store.clone(),
        )?)
    } else {
        Arc::new(EtcdStore::connect(&config.etcd_servers, metrics.store.clone()).await?)
    };
    metrics.count_objects_in(store.clone());
    let store = crate::storage::MeteredStore::wrap(store, metrics.store.clone());
    let store = match &config.encryption_provider_config {
        Some(path) => {
            let transformers = crate::storage::encryption::Transformers::load(path)?;
            crate::storage::encryption::EncryptedStore::wrap(store, transformers)
        }
        None => store,
    };
    let auditor = crate::audit::Auditor::from_options(&config.audit)?;
    config
        .service_accounts
        .check(config.service_account_extend_token_expiration)?;
    let ranges = ServiceRanges::parse(
        &config.service_cluster_ip_range,
        &config.service_node_port_range,
    )
    .map_err(ServerError::ServiceRange)?;
    let service_ip = ranges.cluster_ips.first();
    let mut addresses = local_addresses();
    addresses.extend(config.advertise_address);
    if !config.bind_address.is_unspecified() {
        addresses.push(config.bind_address);
    }
    let names = ServingNames::standard(&hostname(), &addresses, Some(service_ip));
    let pki = Pki::ensure(&config.data_dir.join("pki"), &names)?;
    let admin = pki.client("admin", "minik8s-admin", &["system:masters"])?;
    let local_url = format!("https://127.0.0.1:{}", config.secure_port);
    let kubeconfig = admin_kubeconfig(
        &local_url,
        &pki.ca.cert_pem,
        &admin.cert_pem,
        &admin.key_pem,
    );
    let kubeconfig_path = config.data_dir.join("admin.kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig)
        .map_err(io(format!("writing {}", kubeconfig_path.display())))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&kubeconfig_path, std::fs::Permissions::from_mode(0o600));
    }
    let mut auth = match &config.token_auth_file {
        Some(path) => Authenticator::from_token_file(path)?,
        None => Authenticator::new(),
    };
    if config.enable_bootstrap_token_auth {
        auth.enable_bootstrap_tokens(&store);
    }
    let advertised = config
        .advertise_address
        .or(addresses.first().copied())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let address = SocketAddr::new(advertised, config.secure_port).to_string();
    let mut serve = config.serve.clone();
    serve.service_ranges = ranges;
    let server = ApiServer::new(store, metrics, auth, serve, address);
    if let Some(auditor) = auditor {
        let _ = server.audit.set(auditor);
    }
    let signer = crate::serviceaccount::TokenSigner::load_or_create(&pki.dir.join("sa.key"))?;
    let mut tokens = crate::serviceaccount::ServiceAccountTokens::new(signer, &server.registries);
    tokens.extend_expiration = config.service_account_extend_token_expiration;
    tokens.configure(&config.service_accounts, &server.address);
    server.auth.set_service_accounts(Arc::new(tokens));
    // The identity the API server presents to kubelets: in no group, its rights on the
    // kubelets' API are the `system:kubelet-api-admin` role bound to it.
    let kubelet_client = pki.client(
        "apiserver-kubelet-client",
        crate::kubelet::APISERVER_CLIENT,
        &[],
    )?;
    let _ = server
        .kubelet
        .set(Arc::new(crate::kubelet::KubeletClient::new(
            &pki.ca.cert_pem,
            &kubelet_client.cert_pem,
            &kubelet_client.key_pem,
        )?));
    // The identity the API server presents to aggregated API servers.
    let front_proxy = pki.client(
        "front-proxy-client",
        crate::aggregator::proxy::CLIENT_NAME,
        &[],
    )?;
    if let Err(e) = server
        .aggregator
        .set_identity(&front_proxy.cert_pem, &front_proxy.key_pem)
    {
        tracing::warn!(error = %e, "the front-proxy client certificate is unusable");
    }
    server
        .bootstrap(&config.crds)
        .await
        .map_err(ServerError::Bootstrap)?;
    if config.local_storage {
        server
            .ensure(vec![minik8s_api::kinds::storage::local_path_class()])
            .await
            .map_err(ServerError::Bootstrap)?;
    }
    server
        .ensure(crate::aggregator::local_api_services())
        .await
        .map_err(ServerError::Bootstrap)?;
    server
        .ensure(vec![crate::aggregator::authentication_config_map(
            &pki.ca.cert_pem,
        )])
        .await
        .map_err(ServerError::Bootstrap)?;
    crate::registry::services::endpoint_reconciler::start(&server, &config.endpoint_reconciler)
        .await;
    server.aggregator.start(&server);
    // Serves the custom resources of the stored CRDs before answering, then follows changes.
    crate::crds::start(&server).await?;
    Ok(Prepared {
        server,
        pki,
        config,
    })
}
