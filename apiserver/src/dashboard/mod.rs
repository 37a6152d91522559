//! The web dashboard at `/dashboard/`: a page that runs in the user's browser and reads the
//! cluster through this server's own API, as Kubernetes Dashboard and Headlamp do, so it
//! sees exactly what the user's credentials allow and nothing more.
//!
//! The files are static (HTML, CSS and JavaScript modules written without a build step, since
//! no package registry is reachable where minik8s is built) and compiled into the binary.
//! They are served to anyone, outside authentication and authorization: they hold no data
//! and no secrets, and a browser cannot attach a bearer token to a navigation, so the login
//! page itself must load before the user has given one. Every datum the page shows comes
//! from `/api` and `/apis` with the user's token (`Authorization: Bearer`, kept in the tab's
//! sessionStorage) or the browser's client certificate, through the same authentication,
//! RBAC and audit as kubectl's requests. The Content-Security-Policy lets the page load
//! nothing but these files and talk to nothing but this origin.

use axum::Router;
use axum::extract::Path;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use std::sync::OnceLock;

/// Where the dashboard is served.
pub const PATH: &str = "/dashboard/";

/// Only this origin's scripts, styles, images and API; no frames, no forms elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! assets {
    ($($path:literal => $type:expr),* $(,)?) => {
        &[$(Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!("assets/", $path)),
        }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = assets! {
    "index.html" => "text/html; charset=utf-8",
    "app.css" => "text/css; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
    "rbac.yaml" => "application/yaml; charset=utf-8",
    "js/api.js" => JS,
    "js/app.js" => JS,
    "js/charts.js" => JS,
    "js/dom.js" => JS,
    "js/graph.js" => JS,
    "js/metrics.js" => JS,
    "js/views/common.js" => JS,
    "js/views/events.js" => JS,
    "js/views/functions.js" => JS,
    "js/views/namespaces.js" => JS,
    "js/views/nodes.js" => JS,
    "js/views/overview.js" => JS,
    "js/views/pods.js" => JS,
    "js/views/services.js" => JS,
    "js/views/workflows.js" => JS,
    "js/views/workloads.js" => JS,
};

/// The strong validator of each file (SHA-256 of its bytes), computed on first use.
fn etags() -> &'static [HeaderValue] {
    static ETAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let digest = ring::digest::digest(&ring::digest::SHA256, a.body);
                let hex: String = digest.as_ref()[..16]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                HeaderValue::from_str(&format!("\"{hex}\"")).expect("hex is a header value")
            })
            .collect()
    })
}

/// The dashboard's routes; merged outside the authentication layers (see the module docs).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/dashboard", get(|| async { Redirect::permanent(PATH) }))
        .route(
            "/dashboard/",
            get(|h: HeaderMap| async move { serve("index.html", &h) }),
        )
        .route(
            "/dashboard/{*path}",
            get(|Path(path): Path<String>, h: HeaderMap| async move { serve(&path, &h) }),
        )
}

fn serve(path: &str, request: &HeaderMap) -> Response {
    let Some(i) = ASSETS.iter().position(|a| a.path == path) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "404 page not found\n",
        )
            .into_response();
    };
    let asset = &ASSETS[i];
    let etag = &etags()[i];
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag.clone());
    // Revalidated on every load, so a new binary's files are picked up at once.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get(path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
        let mut req = Request::get(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = routes::<()>()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.unwrap().to_bytes().to_vec();
        (parts.status, parts.headers, body)
    }

    #[tokio::test]
    async fn the_page_and_its_files_are_served_with_their_types() {
        let (status, headers, body) = get("/dashboard/", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CSP);
        assert!(String::from_utf8(body).unwrap().contains("js/app.js"));
        let (status, headers, _) = get("/dashboard/js/views/pods.js", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], JS);
        let (status, _, _) = get("/dashboard/js/nothing.js", &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _, _) = get("/dashboard/../Cargo.toml", &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_bare_path_redirects_so_relative_links_resolve() {
        let (status, headers, _) = get("/dashboard", &[]).await;
        assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
        assert_eq!(headers[header::LOCATION], PATH);
    }

    #[tokio::test]
    async fn a_cached_copy_is_revalidated_by_its_etag() {
        let (_, headers, _) = get("/dashboard/app.css", &[]).await;
        let etag = headers[header::ETAG].to_str().unwrap().to_owned();
        let (status, _, body) = get("/dashboard/app.css", &[("if-none-match", &etag)]).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED);
        assert!(body.is_empty());
        let (status, _, _) = get("/dashboard/app.css", &[("if-none-match", "\"old\"")]).await;
        assert_eq!(status, StatusCode::OK);
    }

    /// Every module the page imports is one the server has: a missing file would only show
    /// as a blank page in a browser.
    #[test]
    fn every_import_names_an_embedded_file() {
        let served: Vec<&str> = ASSETS.iter().map(|a| a.path).collect();
        let mut imports = 0;
        for asset in ASSETS.iter().filter(|a| a.path.ends_with(".js")) {
            let text = std::str::from_utf8(asset.body).unwrap();
            let dir = asset.path.rsplit_once('/').map_or("", |(d, _)| d);
            // `import ... from './x.js';`, the specifier on the statement's last line.
            let specs = text
                .lines()
                .filter_map(|l| l.split_once("} from ").or_else(|| l.split_once("* as ")))
                .filter_map(|(_, rest)| rest.split(['"', '\'']).nth(1))
                .filter(|spec| spec.ends_with(".js"));
            for spec in specs {
                imports += 1;
                let resolved = resolve(dir, spec);
                assert!(
                    served.contains(&resolved.as_str()),
                    "{} imports {spec} ({resolved}), which is not embedded",
                    asset.path
                );
            }
        }
        // Every view, from app.js, and the shared modules from each view.
        assert!(imports > 30, "only {imports} imports found");
        let index = std::str::from_utf8(ASSETS[0].body).unwrap();
        for link in index
            .split(['"'])
            .filter(|s| s.ends_with(".js") || s.ends_with(".css"))
        {
            assert!(served.contains(&link), "index.html links {link}");
        }
    }

    /// `spec` (`./x.js`, `../y.js`) relative to the directory `dir`.
    fn resolve(dir: &str, spec: &str) -> String {
        let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
        for part in spec.split('/') {
            match part {
                "." => {}
                ".." => {
                    parts.pop();
                }
                p => parts.push(p),
            }
        }
        parts.join("/")
    }
}
