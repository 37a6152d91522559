//! `/healthz`, `/livez` and `/readyz` as upstream's healthz package serves them: `ok` when
//! every check passes, each check listed with `?verbose`, checks left out with
//! `?exclude=<name>`, and one path per check (`/readyz/etcd`). A failure lists every check and
//! answers 500, naming no reason: the endpoints are public, reasons go to the log.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};

use crate::server::ApiServer;

/// A named check of the server's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Ping,
    Log,
    Etcd,
    EtcdReadiness,
    InformerSync,
    /// Start-up work done before the server answers at all; listed as upstream lists its
    /// post-start hooks, always passed once serving.
    PostStartHook(&'static str),
    Shutdown,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Log => "log",
            Check::Etcd => "etcd",
            Check::EtcdReadiness => "etcd-readiness",
            Check::InformerSync => "informer-sync",
            Check::PostStartHook(name) => name,
            Check::Shutdown => "shutdown",
        }
    }

    async fn run(self, server: &ApiServer) -> Result<(), String> {
        match self {
            Check::Ping | Check::Log | Check::PostStartHook(_) => Ok(()),
            Check::Shutdown if server.shutting_down() => Err("process is shutting down".into()),
            Check::Shutdown => Ok(()),
            Check::Etcd | Check::EtcdReadiness => server
                .store
                .current_revision()
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Check::InformerSync => match &server.options.namespaces {
                Some(cache) if !cache.synced() => Err("namespaces not synced yet".into()),
                _ => Ok(()),
            },
        }
    }
}

/// One of the three endpoints and its checks, in upstream's order.
#[derive(Clone, Copy, Debug)]
struct Endpoint {
    name: &'static str,
    checks: &'static [Check],
}

/// `prepare` creates the default namespaces and the `kubernetes` Service, restores the
/// Services' allocations and serves the stored CRDs before the server listens.
const CRD_SYNCED: Check = Check::PostStartHook("poststarthook/crd-informer-synced");
const BOOTSTRAP: Check = Check::PostStartHook("poststarthook/bootstrap-controller");
const SERVICE_REPAIR: Check =
    Check::PostStartHook("poststarthook/start-service-ip-repair-controllers");

const HEALTHZ: Endpoint = Endpoint {
    name: "healthz",
    checks: &[
        Check::Ping,
        Check::Log,
        Check::Etcd,
        CRD_SYNCED,
        SERVICE_REPAIR,
        BOOTSTRAP,
    ],
};
const LIVEZ: Endpoint = Endpoint {
    name: "livez",
    checks: HEALTHZ.checks,
};
const READYZ: Endpoint = Endpoint {
    name: "readyz",
    checks: &[
        Check::Ping,
        Check::Log,
        Check::Etcd,
        Check::EtcdReadiness,
        Check::InformerSync,
        CRD_SYNCED,
        SERVICE_REPAIR,
        BOOTSTRAP,
        Check::Shutdown,
    ],
};

/// The routes of the three endpoints and of each of their checks.
pub fn routes() -> Router<Arc<ApiServer>> {
    let mut router = Router::new();
    for endpoint in [HEALTHZ, LIVEZ, READYZ] {
        router = router
            .route(
                &format!("/{}", endpoint.name),
                get(move |state, query| root(endpoint, state, query)),
            )
            .route(
                &format!("/{}/{{*check}}", endpoint.name),
                get(move |state, check| one(endpoint, state, check)),
            );
    }
    router
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// The query's parameters in order (`exclude=a&exclude=b`; `verbose` alone has an empty value).
fn params(query: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str(query).unwrap_or_default()
}

async fn root(
    endpoint: Endpoint,
    State(server): State<Arc<ApiServer>>,
    RawQuery(query): RawQuery,
) -> Response {
    let params = params(&query.unwrap_or_default());
    let mut excluded: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.clone())
        .collect();
    let verbose = params.iter().any(|(k, _)| k == "verbose");
    let mut out = String::new();
    let mut failed = Vec::new();
    for check in endpoint.checks {
        let name = check.name();
        if excluded.iter().any(|e| e == name) {
            excluded.retain(|e| e != name);
            let _ = writeln!(out, "[+]{name} excluded: ok");
            continue;
        }
        match check.run(&server).await {
            Ok(()) => {
                let _ = writeln!(out, "[+]{name} ok");
            }
            Err(reason) => {
                let _ = writeln!(out, "[-]{name} failed: reason withheld");
                tracing::info!(check = name, %reason, endpoint = endpoint.name, "health check failed");
                failed.push(name);
            }
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        let _ = writeln!(
            out,
            "warn: some health checks cannot be excluded: no matches for {}",
            names.join(",")
        );
    }
    if !failed.is_empty() {
        let _ = writeln!(out, "{} check failed", endpoint.name);
        return text(StatusCode::INTERNAL_SERVER_ERROR, out);
    }
    if !verbose {
        return text(StatusCode::OK, "ok".into());
    }
    let _ = writeln!(out, "{} check passed", endpoint.name);
    text(StatusCode::OK, out)
}

async fn one(
    endpoint: Endpoint,
    State(server): State<Arc<ApiServer>>,
    Path(name): Path<String>,
) -> Response {
    let Some(check) = endpoint.checks.iter().find(|c| c.name() == name) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    };
    match check.run(&server).await {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
    }
}
