//! `POST /workflow/<name>[.<namespace>]` runs a Workflow in one HTTP call, as Step Functions'
//! StartSyncExecution does, for callers that speak HTTP and not the Kubernetes API. The
//! call only creates an ordinary WorkflowRun and watches it: the controller drives the run
//! as any other, so a gateway that restarts, or a caller that gives up, loses the wait and
//! never the run, whose name every answer carries to look it up later.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use kube::ResourceExt;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use minik8s_proxy::forward::Body;
use serde_json::{Value, json};

use super::json;
use crate::workflow::{Workflow, WorkflowRun, phase};

/// The path the workflows are served under.
pub const PREFIX: &str = "/workflow/";
/// The header of every answer about a run: the run's name.
pub const RUN_HEADER: &str = "x-workflow-run";
/// The header giving how long to wait for the run, in seconds (the query's `timeout` wins).
pub const TIMEOUT_HEADER: &str = "x-timeout";
/// How long a call waits for its run when it does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a call may wait: past it, callers should take the 202 and watch the run.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// The largest input a call may send (the run's spec keeps it, in the API's storage).
const BODY_LIMIT: usize = 1 << 20;
/// The longest one watch request lasts before it is made again from where it stood (the
/// API refuses watches of 295 s and more).
const WATCH_SECONDS: u32 = 290;

/// The Workflow a path names.
#[derive(Debug, PartialEq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    /// The query string, without its `?`.
    pub query: String,
}

/// Reads `/workflow/<name>[.<namespace>][?query]` (`default` when no namespace is given).
pub fn parse(path_and_query: &str) -> Option<Target> {
    let rest = path_and_query.strip_prefix(PREFIX)?;
    let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
    if target.contains('/') {
        return None;
    }
    let (name, namespace) = target.split_once('.').unwrap_or((target, "default"));
    if name.is_empty() || namespace.is_empty() {
        return None;
    }
    Some(Target {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        query: query.to_owned(),
    })
}

/// How long to wait: `timeout=<seconds>` in the query, else the `X-Timeout` header, else
/// [`DEFAULT_TIMEOUT`]; at most [`MAX_TIMEOUT`].
pub fn timeout(query: &str, header: Option<&HeaderValue>) -> Result<Duration, String> {
    let from_query = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))
        .map(|v| (v.to_owned(), "the query's timeout"));
    let given = match from_query {
        Some(given) => Some(given),
        None => match header {
            None => None,
            Some(h) => Some((
                h.to_str()
                    .map_err(|_| "the X-Timeout header is not text".to_owned())?
                    .to_owned(),
                "the X-Timeout header",
            )),
        },
    };
    let Some((text, what)) = given else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let text = text.trim();
    let seconds = text
        .strip_suffix('s')
        .unwrap_or(text)
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| format!("{what} must be a number of seconds, not {text:?}"))?;
    Ok(Duration::from_secs_f64(seconds).min(MAX_TIMEOUT))
}

/// Answers a call to `target`: creates the run and waits for it.
pub async fn handle<B>(client: &kube::Client, req: Request<B>, target: Target) -> Response<Body>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if req.method() != Method::POST {
        let mut r = error(
            StatusCode::METHOD_NOT_ALLOWED,
            "a workflow is run with POST",
        );
        r.headers_mut()
            .insert(http::header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let wait = match timeout(&target.query, req.headers().get(TIMEOUT_HEADER)) {
        Ok(wait) => wait,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let body = match Limited::new(req.into_body(), BODY_LIMIT).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("the input is larger than {BODY_LIMIT} bytes"),
            );
        }
        Err(_) => return error(StatusCode::BAD_REQUEST, "reading the request body failed"),
    };
    let input = match input(&body) {
        Ok(input) => input,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let (ns, name) = (target.namespace.as_str(), target.name.as_str());

    let workflows: Api<Workflow> = Api::namespaced(client.clone(), ns);
    match workflows.get_opt(name).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return error(
                StatusCode::NOT_FOUND,
                &format!("workflow {name} not found in namespace {ns}"),
            );
        }
        Err(e) => return api_error(&e, &format!("reading workflow {name}")),
    }
    let runs: Api<WorkflowRun> = Api::namespaced(client.clone(), ns);
    let created = match runs
        .create(&PostParams::default(), &WorkflowRun::of(name, input))
        .await
    {
        Ok(run) => run,
        Err(e) => return api_error(&e, &format!("creating a run of workflow {name}")),
    };
    let run = created.name_any();
    let ended = match tokio::time::timeout(wait, finished(&runs, created)).await {
        Ok(Ok(ended)) => Some(ended),
        Ok(Err(e)) => {
            // The run goes on without us: the caller can look it up as after a timeout.
            tracing::warn!(workflow = name, namespace = ns, run, error = %e, "watching a workflow run failed");
            None
        }
        Err(_) => None,
    };
    let mut answer = match ended {
        None => json(
            StatusCode::ACCEPTED,
            &json!({"run": run, "namespace": ns, "phase": phase::RUNNING}),
        ),
        Some(ended) => outcome(&run, ended),
    };
    if let Ok(value) = HeaderValue::from_str(&run) {
        answer.headers_mut().insert(RUN_HEADER, value);
    }
    answer
}

/// The request body as the run's input: JSON, `{}` when empty.
fn input(body: &Bytes) -> Result<Value, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| format!("the input is not JSON: {e}"))
}

/// How a run ended, or what became of it (a run deleted before it finished is Aborted).
#[derive(Debug)]
enum Ended {
    Finished(WorkflowRun),
    Deleted(WorkflowRun),
}

/// The answer to a call whose run ended: 200 with the output when it succeeded; 504 when
/// the run timed out (its `TimeoutSeconds`, or a Task's); else 500.
fn outcome(run: &str, ended: Ended) -> Response<Body> {
    let (object, deleted) = match ended {
        Ended::Finished(r) => (r, false),
        Ended::Deleted(r) => (r, true),
    };
    let status = object.status.unwrap_or_default();
    let phase = match status.phase.as_deref() {
        Some(p) if phase::finished(Some(p)) => p,
        _ if deleted => phase::ABORTED,
        _ => phase::RUNNING,
    };
    if phase == phase::SUCCEEDED {
        return json(StatusCode::OK, &status.output.unwrap_or(Value::Null));
    }
    let cause = match status.cause {
        None if deleted => Some("the run was deleted before it finished".to_owned()),
        cause => cause,
    };
    let code = if phase == phase::TIMED_OUT {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    json(
        code,
        &json!({"run": run, "phase": phase, "error": status.error, "cause": cause}),
    )
}

/// Waits until `run` (as created) finishes or is deleted, watching that one object from the
/// version created; a watch that ends is made again from the last version seen, one whose
/// version has expired (410) reads the object again.
async fn finished(api: &Api<WorkflowRun>, run: WorkflowRun) -> Result<Ended, kube::Error> {
    if phase::finished(phase_of(&run)) {
        return Ok(Ended::Finished(run));
    }
    let name = run.name_any();
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(WATCH_SECONDS);
    let mut version = run.resource_version().unwrap_or_default();
    let mut last = run;
    loop {
        let mut events = Box::pin(api.watch(&params, &version).await?);
        let mut expired = false;
        while let Some(event) = events.try_next().await? {
            match event {
                WatchEvent::Added(run) | WatchEvent::Modified(run) => {
                    if phase::finished(phase_of(&run)) {
                        return Ok(Ended::Finished(run));
                    }
                    version = run.resource_version().unwrap_or(version);
                    last = run;
                }
                WatchEvent::Deleted(run) => {
                    return Ok(if phase::finished(phase_of(&run)) {
                        Ended::Finished(run)
                    } else {
                        Ended::Deleted(run)
                    });
                }
                WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                WatchEvent::Error(status) if status.code == 410 => {
                    expired = true;
                    break;
                }
                WatchEvent::Error(status) => return Err(kube::Error::Api(status)),
            }
        }
        if expired {
            match api.get_opt(&name).await? {
                None => return Ok(Ended::Deleted(last)),
                Some(run) if phase::finished(phase_of(&run)) => return Ok(Ended::Finished(run)),
                Some(run) => {
                    version = run.resource_version().unwrap_or_default();
                    last = run;
                }
            }
        }
    }
}

fn phase_of(run: &WorkflowRun) -> Option<&str> {
    run.status.as_ref()?.phase.as_deref()
}

fn error(status: StatusCode, message: &str) -> Response<Body> {
    json(status, &json!({"error": message}))
}

/// The API's refusal passed on (403, 409, 422...: the caller's to fix); anything else a 502
/// whose details go to the log.
fn api_error(e: &kube::Error, doing: &str) -> Response<Body> {
    if let kube::Error::Api(status) = e
        && (400..500).contains(&status.code)
        && let Ok(code) = StatusCode::from_u16(status.code)
    {
        return error(code, &format!("{doing}: {}", status.message));
    }
    tracing::warn!(error = %e, "{doing}");
    error(
        StatusCode::BAD_GATEWAY,
        &format!("{doing}: the API server did not answer"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::WORKFLOW_LABEL;

    #[test]
    fn paths_name_a_workflow() {
        let t = parse("/workflow/order").unwrap();
        assert_eq!(
            (t.namespace.as_str(), t.name.as_str(), t.query.as_str()),
            ("default", "order", "")
        );
        let t = parse("/workflow/order.shop?timeout=5").unwrap();
        assert_eq!(
            (t.namespace.as_str(), t.name.as_str(), t.query.as_str()),
            ("shop", "order", "timeout=5")
        );
        assert!(parse("/workflow/").is_none());
        assert!(parse("/workflow/.shop").is_none());
        assert!(parse("/workflow/order.").is_none());
        assert!(parse("/workflow/order/more").is_none());
        assert!(parse("/workflows/order").is_none());
        assert!(parse("/function/order").is_none());
    }

    #[test]
    fn timeouts_from_query_or_header() {
        let header = HeaderValue::from_static("12");
        assert_eq!(timeout("", None), Ok(DEFAULT_TIMEOUT));
        assert_eq!(timeout("a=1", None), Ok(DEFAULT_TIMEOUT));
        assert_eq!(timeout("", Some(&header)), Ok(Duration::from_secs(12)));
        assert_eq!(
            timeout("a=1&timeout=2.5", Some(&header)),
            Ok(Duration::from_millis(2500))
        );
        assert_eq!(timeout("timeout=7s", None), Ok(Duration::from_secs(7)));
        assert_eq!(timeout("timeout=0", None), Ok(Duration::ZERO));
        assert_eq!(timeout("timeout=100000", None), Ok(MAX_TIMEOUT));
        assert!(timeout("timeout=-1", None).is_err());
        assert_eq!(
            timeout("timeout=soon", None),
            Err("the query's timeout must be a number of seconds, not \"soon\"".into())
        );
        let header = HeaderValue::from_static("later");
        assert!(
            timeout("", Some(&header))
                .unwrap_err()
                .contains("X-Timeout")
        );
    }

    #[test]
    fn bodies_as_input() {
        assert_eq!(input(&Bytes::new()), Ok(json!({})));
        assert_eq!(input(&Bytes::from_static(b" \n")), Ok(json!({})));
        assert_eq!(input(&Bytes::from_static(b"[1, 2]")), Ok(json!([1, 2])));
        assert!(
            input(&Bytes::from_static(b"{nope"))
                .unwrap_err()
                .starts_with("the input is not JSON: ")
        );
    }

    #[test]
    fn new_runs_name_their_workflow() {
        let run = WorkflowRun::of("order", json!({"a": 1}));
        assert_eq!(run.metadata.generate_name.as_deref(), Some("order-"));
        assert_eq!(run.labels()[WORKFLOW_LABEL], "order");
        assert_eq!(run.spec.workflow, "order");
        assert_eq!(run.spec.input, Some(json!({"a": 1})));
    }

    async fn answer(r: Response<Body>) -> (StatusCode, Value) {
        let status = r.status();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    fn ended(phase: &str, status: Value) -> WorkflowRun {
        let mut run = WorkflowRun::of("order", json!({}));
        let mut status = status;
        status["phase"] = json!(phase);
        run.status = Some(serde_json::from_value(status).unwrap());
        run
    }

    #[tokio::test]
    async fn answers_by_phase() {
        let run = ended(phase::SUCCEEDED, json!({"output": {"total": 3}}));
        assert_eq!(
            answer(outcome("order-x", Ended::Finished(run))).await,
            (StatusCode::OK, json!({"total": 3}))
        );
        let run = ended(
            phase::FAILED,
            json!({"error": "NotReady", "cause": "later"}),
        );
        assert_eq!(
            answer(outcome("order-x", Ended::Finished(run))).await,
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"run": "order-x", "phase": "Failed", "error": "NotReady", "cause": "later"})
            )
        );
        let run = ended(phase::TIMED_OUT, json!({"error": "States.Timeout"}));
        let (code, body) = answer(outcome("order-x", Ended::Finished(run))).await;
        assert_eq!(
            (code, &body["phase"]),
            (StatusCode::GATEWAY_TIMEOUT, &json!("TimedOut"))
        );
        let run = ended(phase::RUNNING, json!({}));
        assert_eq!(
            answer(outcome("order-x", Ended::Deleted(run))).await,
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"run": "order-x", "phase": "Aborted", "error": null,
                       "cause": "the run was deleted before it finished"})
            )
        );
    }

    /// A stand-in for the workflow controller: finishes each new run as its input says
    /// (`{"finish": "<phase>", "status": {...}}`, or `"delete"`), and leaves the others running.
    async fn finisher(client: kube::Client) {
        use futures::StreamExt;
        use kube::api::{DeleteParams, Patch, PatchParams};
        use kube::runtime::{WatchStreamExt, watcher};
        let runs: Api<WorkflowRun> = Api::namespaced(client, "default");
        let mut events =
            Box::pin(watcher::watcher(runs.clone(), watcher::Config::default()).touched_objects());
        while let Some(Ok(run)) = events.next().await {
            let input = run.spec.input.clone().unwrap_or_default();
            let Some(finish) = input["finish"].as_str().filter(|_| run.status.is_none()) else {
                continue;
            };
            let name = run.name_any();
            if finish == "delete" {
                // Gone at once: the finalizer a run is created with is the controller's to
                // lift, and no controller runs here.
                let lift = Patch::Merge(json!({"metadata": {"finalizers": null}}));
                runs.patch(&name, &PatchParams::default(), &lift)
                    .await
                    .unwrap();
                runs.delete(&name, &DeleteParams::default()).await.unwrap();
                continue;
            }
            let mut status = input["status"].clone();
            status["phase"] = json!(finish);
            let patch = Patch::Merge(json!({ "status": status }));
            runs.patch_status(&name, &PatchParams::default(), &patch)
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn a_call_runs_the_workflow_and_waits_for_its_run() -> anyhow::Result<()> {
        use http_body_util::Full;
        let api =
            testkit::InProcess::start_with(testkit::Backend::Sqlite, |c| c.crds = crate::crds())
                .await?;
        let client = api.client();
        let call = async |target: &str, body: &'static str| {
            let req = Request::post(target).body(Full::new(Bytes::from_static(body.as_bytes())))?;
            let r = handle(&client, req, parse(target).unwrap()).await;
            let run = r
                .headers()
                .get(RUN_HEADER)
                .map(|v| v.to_str().unwrap().to_owned());
            let (status, body) = answer(r).await;
            anyhow::Ok((status, body, run))
        };

        assert_eq!(
            call("/workflow/order", "{}").await?,
            (
                StatusCode::NOT_FOUND,
                json!({"error": "workflow order not found in namespace default"}),
                None
            )
        );
        let workflows: Api<Workflow> = Api::namespaced(client.clone(), "default");
        let workflow: Workflow = serde_json::from_value(json!({
            "apiVersion": "functions.minik8s.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "order"},
            "spec": {"definition": {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}}}
        }))?;
        workflows.create(&PostParams::default(), &workflow).await?;
        let finisher = tokio::spawn(finisher(client.clone()));

        let (status, body, run) = call("/workflow/order", "{nope").await?;
        assert_eq!((status, run), (StatusCode::BAD_REQUEST, None), "{body}");
        let req = Request::get("/workflow/order").body(Full::new(Bytes::new()))?;
        let r = handle(&client, req, parse("/workflow/order").unwrap()).await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);

        let (status, body, run) = call(
            "/workflow/order.default?timeout=20",
            r#"{"finish": "Succeeded", "status": {"output": {"total": 3}}}"#,
        )
        .await?;
        assert_eq!((status, body), (StatusCode::OK, json!({"total": 3})));
        let run = run.expect("the run's name");
        assert!(run.starts_with("order-"), "{run}");
        let runs: Api<WorkflowRun> = Api::namespaced(client.clone(), "default");
        let stored = runs.get(&run).await?;
        assert_eq!(stored.labels()[WORKFLOW_LABEL], "order");
        assert_eq!(stored.spec.workflow, "order");

        let (status, body, _) = call(
            "/workflow/order?timeout=20",
            r#"{"finish": "Failed", "status": {"error": "NotReady", "cause": "later"}}"#,
        )
        .await?;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert_eq!(
            (&body["phase"], &body["error"], &body["cause"]),
            (&json!("Failed"), &json!("NotReady"), &json!("later"))
        );

        let (status, body, _) =
            call("/workflow/order?timeout=20", r#"{"finish": "delete"}"#).await?;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert_eq!(body["phase"], "Aborted");

        // Not finished within the call's timeout: 202 and where to find the run.
        let (status, body, run) = call("/workflow/order?timeout=0", "").await?;
        let run = run.expect("the run's name");
        assert_eq!(
            (status, body),
            (
                StatusCode::ACCEPTED,
                json!({"run": run, "namespace": "default", "phase": "Running"})
            )
        );
        assert_eq!(runs.get(&run).await?.spec.input, Some(json!({})));
        finisher.abort();
        Ok(())
    }
}
