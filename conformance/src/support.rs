//! What every suite shares: the case table, the one-line report, polling, and the per-run
//! namespaces (created before a suite, emptied and removed after it).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One case of a suite: its name and the function that runs it against the suite's context.
pub type CaseFn<C> = for<'a> fn(&'a C) -> BoxFuture<'a, anyhow::Result<()>>;

/// Builds a `&[(name, CaseFn)]` table from `"name" => async_fn` pairs.
#[macro_export]
macro_rules! cases {
    ($ctx:ty; $($name:literal => $f:path),* $(,)?) => {
        &[$(($name, |c: &$ctx| Box::pin($f(c)) as $crate::support::BoxFuture<'_, anyhow::Result<()>>)),*]
    };
}

/// How one case ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    Passed,
    Failed,
    /// Failed, and listed in the known-failures file.
    Known,
}

/// Cases expected to fail for now, each with the reason: lines of `<pattern> <why>`, where
/// `*` in a pattern matches any run of characters and `#` starts a comment.
#[derive(Default)]
pub struct KnownFailures(Vec<(String, String)>);

impl KnownFailures {
    pub fn parse(text: &str) -> Self {
        KnownFailures(
            text.lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .filter(|l| !l.is_empty())
                .map(|l| match l.split_once(char::is_whitespace) {
                    Some((p, why)) => (p.to_string(), why.trim().to_string()),
                    None => (l.to_string(), String::new()),
                })
                .collect(),
        )
    }

    pub fn why(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(p, _)| glob(p, name))
            .map(|(_, why)| why.as_str())
    }
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Prints one line per case as it finishes and keeps the verdicts for the closing line.
pub struct Report {
    verdicts: Mutex<Vec<(String, Verdict)>>,
    verbose: bool,
    known: KnownFailures,
}

impl Report {
    pub fn new(verbose: bool, known: KnownFailures) -> Self {
        Report {
            verdicts: Mutex::new(Vec::new()),
            verbose,
            known,
        }
    }

    pub fn pass(&self, name: &str, took: Duration) {
        if let Some(why) = self.known.why(name) {
            println!(
                "FAIL  {name}: passes ({} ms) but is listed as a known failure ({why}): \
                 remove it from the known-failures file",
                took.as_millis()
            );
            return self.push(name, Verdict::Failed);
        }
        println!("ok    {name} ({} ms)", took.as_millis());
        self.push(name, Verdict::Passed);
    }

    pub fn fail(&self, name: &str, reason: &str) {
        let known = self.known.why(name);
        match known {
            Some(why) => println!("XFAIL {name}: {} [known: {why}]", one_line(reason, 400)),
            None => println!("FAIL  {name}: {}", one_line(reason, 400)),
        }
        if self.verbose && (reason.contains('\n') || reason.chars().count() > 400) {
            for line in reason.lines() {
                println!("      | {line}");
            }
        }
        self.push(
            name,
            if known.is_some() {
                Verdict::Known
            } else {
                Verdict::Failed
            },
        );
    }

    pub fn error(&self, name: &str, e: &anyhow::Error) {
        self.fail(name, &error_text(e.as_ref()));
    }

    fn push(&self, name: &str, v: Verdict) {
        self.verdicts
            .lock()
            .expect("report lock")
            .push((name.to_string(), v));
    }

    pub fn verdicts(&self) -> Vec<(String, Verdict)> {
        self.verdicts.lock().expect("report lock").clone()
    }
}

/// An error and its causes on one line, with API errors as `HTTP <code> <reason>: <message>`
/// rather than kube's debug dump of the whole Status.
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        if let Some(kube::Error::Api(s)) = err.downcast_ref::<kube::Error>() {
            parts.push(format!("HTTP {} {}: {}", s.code, s.reason, s.message));
            break;
        }
        let mut text = err.to_string();
        // Wrapping errors often repeat their source's text; keep it once.
        if let Some(src) = err.source()
            && let Some(own) = text.strip_suffix(&src.to_string())
        {
            text = own.trim_end_matches([':', ' ']).to_string();
        }
        if !text.is_empty() {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

/// Squeezes a multi-line message into one line of at most `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    let joined = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    if joined.chars().count() > max {
        let cut: String = joined.chars().take(max).collect();
        format!("{cut}…")
    } else {
        joined
    }
}

/// Which cases to run: all, or those whose full name contains one of the filters.
pub struct Selection(pub Vec<String>);

impl Selection {
    pub fn wants(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|f| name.contains(f.as_str()))
    }
}

/// Runs the selected cases of one suite in order, each under `limit`.
pub async fn run_cases<C: Sync>(
    prefix: &str,
    ctx: &C,
    cases: &[(&str, CaseFn<C>)],
    selection: &Selection,
    report: &Report,
    limit: Duration,
) {
    for (case, f) in cases {
        let name = format!("{prefix}/{case}");
        if !selection.wants(&name) {
            continue;
        }
        let started = Instant::now();
        match tokio::time::timeout(limit, f(ctx)).await {
            Ok(Ok(())) => report.pass(&name, started.elapsed()),
            Ok(Err(e)) => report.error(&name, &e),
            Err(_) => report.fail(
                &name,
                &format!("did not finish within {} s", limit.as_secs()),
            ),
        }
    }
}

/// Fails unless `haystack` contains `needle`, quoting the start of what was printed.
pub fn contains(haystack: &str, needle: &str) -> anyhow::Result<()> {
    ensure!(
        haystack.contains(needle),
        "expected {needle:?} in output: {:?}",
        one_line(haystack, 300)
    );
    Ok(())
}

/// Polls `f` every 100 ms until it returns `Ok`, or returns its last error after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("{what} (waited {} s)", limit.as_secs())));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Fails unless the API answers 404 for `name`.
pub async fn gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await? {
        None => Ok(()),
        Some(o) => bail!(
            "{name} is still there{}",
            if o.meta().deletion_timestamp.is_some() {
                format!(
                    " (terminating, finalizers {:?})",
                    o.meta().finalizers.clone().unwrap_or_default()
                )
            } else {
                String::new()
            }
        ),
    }
}

/// A short id unique to this run, for namespace and object names.
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut n = (nanos / 1000) as u64 ^ (u64::from(std::process::id()) << 40);
    let mut s = String::new();
    for _ in 0..5 {
        let d = (n % 36) as u8;
        s.push(char::from(if d < 10 { b'0' + d } else { b'a' + d - 10 }));
        n /= 36;
    }
    s
}

/// Creates a namespace for one suite.
pub async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"minik8s.io/conformance": "true"}}
    }))?;
    api.create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Removes a suite's namespace: deletes what the cases may have left, deletes the
/// namespace, and, if no namespace controller empties it within a few seconds, finalizes it
/// through `PUT /api/v1/namespaces/<n>/finalize` with empty `spec.finalizers`.
pub async fn remove_namespace(client: &kube::Client, name: &str, extra: &[kube::api::ApiResource]) {
    if let Err(e) = try_remove_namespace(client, name, extra).await {
        eprintln!("note: cleaning up namespace {name}: {e:#}");
    }
}

async fn try_remove_namespace(
    client: &kube::Client,
    name: &str,
    extra: &[kube::api::ApiResource],
) -> anyhow::Result<()> {
    use kube::api::{ApiResource, DynamicObject};
    use kube::core::GroupVersionKind;
    let mut kinds: Vec<ApiResource> = [
        ("", "v1", "ConfigMap", "configmaps"),
        ("", "v1", "Secret", "secrets"),
        ("", "v1", "Pod", "pods"),
        ("", "v1", "Service", "services"),
        ("apps", "v1", "Deployment", "deployments"),
    ]
    .iter()
    .map(|(g, v, k, p)| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), p))
    .collect();
    kinds.extend(extra.iter().cloned());
    for ar in &kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), name, ar);
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for obj in list.items {
            let Some(n) = obj.metadata.name.clone() else {
                continue;
            };
            if obj
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
            {
                let _ = api
                    .patch(
                        &n,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
            let _ = api
                .delete(&n, &DeleteParams::default().grace_period(0))
                .await;
        }
    }
    let api: Api<Namespace> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if api.get_opt(name).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    finalize_namespace(client, name).await
}

/// `PUT /api/v1/namespaces/<name>/finalize` with empty `spec.finalizers`.
pub async fn finalize_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let Some(mut ns) = api.get_opt(name).await? else {
        return Ok(());
    };
    ns.spec.get_or_insert_with(Default::default).finalizers = Some(vec![]);
    let body = serde_json::to_vec(&ns)?;
    let req = http_put(&format!("/api/v1/namespaces/{name}/finalize"), body)?;
    client
        .request::<Namespace>(req)
        .await
        .with_context(|| format!("finalizing namespace {name}"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if api.get_opt(name).await?.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(anyhow!("namespace {name} still there after finalize"))
}

fn http_put(path: &str, body: Vec<u8>) -> anyhow::Result<http::Request<Vec<u8>>> {
    Ok(http::Request::put(path)
        .header("Content-Type", "application/json")
        .body(body)?)
}

/// Deletes a CustomResourceDefinition a case may have left, taking its finalizers off if
/// nothing removes it within a few seconds.
pub async fn remove_crd(client: &kube::Client, name: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    if !matches!(api.get_opt(name).await, Ok(Some(_))) {
        return;
    }
    let _ = api.delete(name, &DeleteParams::default()).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if matches!(api.get_opt(name).await, Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

/// Fails every selected case of a suite whose set-up failed with `e`.
pub fn fail_set_up<C>(
    prefix: &str,
    cases: &[(&str, CaseFn<C>)],
    selection: &Selection,
    report: &Report,
    e: &anyhow::Error,
) {
    for (case, _) in cases {
        let name = format!("{prefix}/{case}");
        if selection.wants(&name) {
            report.fail(&name, &format!("suite set-up: {e:#}"));
        }
    }
}

/// One HTTP/1.1 request to `addr` with `Connection: close`: the status code and the body,
/// within `limit`.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    body: Option<&str>,
    limit: Duration,
) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        let body = body.unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        anyhow::Ok(String::from_utf8_lossy(&out).into_owned())
    };
    let text = tokio::time::timeout(limit, exchange).await.map_err(|_| {
        anyhow!("{method} http://{host}{path} via {addr}: no answer within {limit:?}")
    })??;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("not an HTTP response: {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((code, body.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("kubectl-*/diff", "kubectl-1.32/diff"));
        assert!(!glob("kubectl-*/diff", "kubectl-1.32/diff-x"));
        assert!(glob("kube-rs/crd-*", "kube-rs/crd-crud"));
        assert!(glob("python/crud", "python/crud"));
        assert!(!glob("python/crud", "python/crud2"));
        assert!(glob("*", "anything"));
        assert!(glob("a*b*c", "a-b-b-c"));
        assert!(!glob("a*b*c", "a-c"));
    }

    #[test]
    fn known_failures_file() {
        let k = KnownFailures::parse(
            "# comment\nkubectl-*/edit  strategic merge patch # why\n\npython/x\n",
        );
        assert_eq!(k.why("kubectl-1.27/edit"), Some("strategic merge patch"));
        assert_eq!(k.why("python/x"), Some(""));
        assert_eq!(k.why("python/y"), None);
    }

    #[test]
    fn one_line_squeezes() {
        assert_eq!(one_line("a\n\n  b  \nc", 100), "a | b | c");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }
}
