//! The Python function runtime (`runtime/python.py`) that knative-lite's function pods run,
//! started here as a local process on a free loopback port and spoken to over raw HTTP/1.1:
//! specialisation of a generic pool process and its errors, handler calls, errors and
//! headers, a process specialised from its environment, the drain on SIGTERM, and the
//! control plane's `--check` validation.

use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

const RUNTIME: &str = include_str!("../runtime/python.py");
/// The bound on every wait: readiness, a request, an exit.
const WAIT: Duration = Duration::from_secs(10);

/// The Python interpreter itself: `python3` on the PATH may be a wrapper (pyenv's shims run
/// Python as a child), and the tests signal and kill the process they started.
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("these tests need python3 on the PATH");
        let path = String::from_utf8(out.stdout).expect("a path");
        assert!(
            out.status.success() && !path.trim().is_empty(),
            "python3 failed"
        );
        path.trim().to_owned()
    })
}

/// A free loopback port: bound by the OS, then released for the runtime.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A running runtime process; killed when dropped.
struct Runtime {
    child: Child,
    port: u16,
    /// All of the process's stderr, once it has exited.
    stderr: JoinHandle<String>,
}

impl Runtime {
    /// A generic (pool) runtime, not specialised.
    async fn generic() -> Result<Self> {
        Self::start(&[]).await
    }

    /// `python3 -u -c <runtime>` with `env` on a free port, once `/healthz` answers.
    async fn start(env: &[(&str, &str)]) -> Result<Self> {
        let port = free_port();
        let mut cmd = Command::new(python());
        cmd.args(["-u", "-c", RUNTIME])
            .env("PORT", port.to_string())
            .env_remove("MINIK8S_FN_SOURCE")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("spawn python3")?;
        let mut pipe = child.stderr.take().context("stderr")?;
        // Read concurrently, so that a full pipe never blocks the process.
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text).await;
            text
        });
        let mut runtime = Runtime {
            child,
            port,
            stderr,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok((200, _)) = runtime.get("/healthz").await {
                return Ok(runtime);
            }
            if let Some(status) = runtime.child.try_wait()? {
                bail!("the runtime exited ({status}): {}", runtime.stderr().await);
            }
            if Instant::now() > deadline {
                bail!("the runtime is not ready after {WAIT:?}");
            }
            sleep(Duration::from_millis(20)).await;
        }
    }

    async fn get(&self, path: &str) -> Result<(u16, String)> {
        request(self.port, "GET", path, &[], None).await
    }

    async fn post(&self, path: &str, body: &str) -> Result<(u16, String)> {
        request(self.port, "POST", path, &[], Some(body)).await
    }

    /// `POST /v1/specialize` with `body`: the status and the answer's JSON.
    async fn specialize(&self, body: Value) -> Result<(u16, Value)> {
        let (status, text) = self.post("/v1/specialize", &body.to_string()).await?;
        Ok((status, serde_json::from_str(&text).context(text)?))
    }

    /// The process's stderr: it is killed first, if still running.
    async fn stderr(mut self) -> String {
        let _ = self.child.kill().await;
        (&mut self.stderr).await.unwrap_or_default()
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`): the status code and
/// the body.
async fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Result<(u16, String)> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    head.push_str(body.unwrap_or_default());
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(head.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = timeout(WAIT, exchange)
        .await
        .context("request timed out")??;
    let response = String::from_utf8(response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("no end of headers")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_owned()))
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{body:?} is not JSON: {e}"))
}

#[tokio::test]
async fn generic_process_is_specialized_once() -> Result<()> {
    let rt = Runtime::generic().await?;

    let (status, body) = rt.post("/", r#"{"a":1}"#).await?;
    assert_eq!(
        (status, parse(&body)),
        (503, json!({"error": "not specialized"}))
    );
    let (status, body) = rt.get("/v1/status").await?;
    assert_eq!(
        (status, parse(&body)),
        (200, json!({"specialized": null, "inFlight": 0}))
    );

    let source = "def handle(body):\n    return {\"echo\": body}\n";
    let (status, answer) = rt
        .specialize(json!({"source": source, "name": "echo"}))
        .await?;
    assert_eq!((status, answer), (200, json!({"specialized": "echo"})));

    let (status, body) = rt.post("/", r#"{"a":1}"#).await?;
    assert_eq!((status, parse(&body)), (200, json!({"echo": {"a": 1}})));
    // Not JSON: the text; no body: None.
    let (status, body) = rt.post("/any/path", "plain text").await?;
    assert_eq!((status, parse(&body)), (200, json!({"echo": "plain text"})));
    let (status, body) = rt.get("/").await?;
    assert_eq!((status, parse(&body)), (200, json!({"echo": null})));
    let (status, body) = rt.get("/healthz").await?;
    assert_eq!((status, body.as_str()), (200, "ok"));

    let (status, answer) = rt.specialize(json!({"source": source})).await?;
    assert_eq!(
        (status, answer),
        (409, json!({"error": "already specialized as echo"}))
    );
    let (_, body) = rt.get("/v1/status").await?;
    assert_eq!(parse(&body)["specialized"], "echo");
    Ok(())
}

#[tokio::test]
async fn specialize_errors_leave_the_process_generic() -> Result<()> {
    let rt = Runtime::generic().await?;
    let error = |answer: &Value| answer["error"].as_str().unwrap_or_default().to_owned();

    let syntax = "import json\nx = = 1\n\ndef handle(body):\n    return body\n";
    let (status, answer) = rt
        .specialize(json!({"source": syntax, "name": "handler"}))
        .await?;
    assert_eq!(status, 400, "{answer}");
    let message = error(&answer);
    assert!(
        message.contains("SyntaxError") && message.contains("line 2"),
        "{message}"
    );

    let (status, answer) = rt
        .specialize(json!({"source": "def other(body):\n    return 1\n", "name": "handler"}))
        .await?;
    assert_eq!(status, 400, "{answer}");
    assert!(
        error(&answer).contains("handler 'handle' not found"),
        "{answer}"
    );

    let raises = "import json\n\nvalue = undefined_name\n\ndef handle(body):\n    return 1\n";
    let (status, answer) = rt
        .specialize(json!({"source": raises, "name": "handler"}))
        .await?;
    assert_eq!(status, 400, "{answer}");
    let message = error(&answer);
    assert!(
        message.contains("NameError") && message.contains("line 3"),
        "{message}"
    );

    let (status, answer) = rt
        .specialize(json!({"source": "handle = 42\n", "name": "handler"}))
        .await?;
    assert_eq!(status, 400, "{answer}");
    assert!(error(&answer).contains("not callable"), "{answer}");

    // Still generic: a good function loads.
    let (status, _) = rt.post("/", "1").await?;
    assert_eq!(status, 503);
    let (status, answer) = rt
        .specialize(json!({"source": "def run(body):\n    return body + 1\n", "handler": "run"}))
        .await?;
    assert_eq!((status, answer), (200, json!({"specialized": "function"})));
    let (status, body) = rt.post("/", "41").await?;
    assert_eq!((status, parse(&body)), (200, json!(42)));
    Ok(())
}

#[tokio::test]
async fn handler_exception_is_a_500_and_the_server_goes_on() -> Result<()> {
    let rt = Runtime::generic().await?;
    let source = "def handle(body):\n    if body == {\"fail\": True}:\n        return 1 / 0\n    return \"fine\"\n";
    let (status, _) = rt.specialize(json!({"source": source})).await?;
    assert_eq!(status, 200);

    let (status, body) = rt.post("/", r#"{"fail": true}"#).await?;
    assert_eq!(status, 500, "{body}");
    let message = parse(&body)["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("ZeroDivisionError"), "{message}");

    let (status, body) = rt.post("/", r#"{"fail": false}"#).await?;
    assert_eq!((status, parse(&body)), (200, json!("fine")));

    let stderr = rt.stderr().await;
    assert!(
        stderr.contains("Traceback") && stderr.contains("ZeroDivisionError"),
        "{stderr}"
    );
    Ok(())
}

/// The error as AWS Lambda reports it: `errorType` is the exception's class name (what a
/// workflow's Retry and Catch match), `errorMessage` its message.
#[tokio::test]
async fn handler_exception_reports_its_type_as_lambda_does() -> Result<()> {
    let rt = Runtime::generic().await?;
    let source = concat!(
        "class NotReady(Exception):\n",
        "    pass\n",
        "\n",
        "def handle(body):\n",
        "    if body == \"bare\":\n",
        "        raise NotReady()\n",
        "    raise NotReady(\"try again later\")\n",
    );
    let (status, _) = rt.specialize(json!({"source": source})).await?;
    assert_eq!(status, 200);

    let (status, body) = rt.post("/", "{}").await?;
    assert_eq!(
        (status, parse(&body)),
        (
            500,
            json!({
                "error": "NotReady: try again later",
                "errorType": "NotReady",
                "errorMessage": "try again later",
            })
        )
    );
    let (status, body) = rt.post("/", r#""bare""#).await?;
    assert_eq!(status, 500, "{body}");
    assert_eq!(parse(&body)["errorType"], "NotReady");
    assert_eq!(parse(&body)["errorMessage"], "");
    Ok(())
}

#[tokio::test]
async fn handler_sees_headers_and_sets_the_status() -> Result<()> {
    let rt = Runtime::generic().await?;
    let source = concat!(
        "def handle(body, headers):\n",
        "    if body == \"create\":\n",
        "        return {\"created\": True}, 201\n",
        "    return headers.get(\"x-test\")\n",
    );
    let (status, _) = rt.specialize(json!({"source": source})).await?;
    assert_eq!(status, 200);

    let (status, body) = request(rt.port, "GET", "/", &[("X-Test", "hello")], None).await?;
    assert_eq!((status, parse(&body)), (200, json!("hello")));

    let (status, body) = request(rt.port, "PUT", "/items", &[], Some(r#""create""#)).await?;
    assert_eq!((status, parse(&body)), (201, json!({"created": true})));
    Ok(())
}

#[tokio::test]
async fn environment_specializes_at_start() -> Result<()> {
    let source = "def main(body):\n    return {\"main\": body}\n";
    let rt = Runtime::start(&[
        ("MINIK8S_FN_SOURCE", source),
        ("MINIK8S_FN_HANDLER", "main"),
        ("MINIK8S_FN_NAME", "hello"),
    ])
    .await?;
    let (status, body) = rt.post("/", "[1, 2]").await?;
    assert_eq!((status, parse(&body)), (200, json!({"main": [1, 2]})));
    let (status, answer) = rt.specialize(json!({"source": source})).await?;
    assert_eq!(
        (status, answer),
        (409, json!({"error": "already specialized as hello"}))
    );

    // A function that does not load: the process exits 1 and says why.
    let failed = Runtime::start(&[("MINIK8S_FN_SOURCE", "def main(body):\n    pass\n")]).await;
    let message = failed.err().context("a bad function served")?.to_string();
    assert!(
        message.contains("exit status: 1") && message.contains("handler 'handle' not found"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests() -> Result<()> {
    let mut rt = Runtime::generic().await?;
    let source = "import time\n\ndef handle(body):\n    time.sleep(1.5)\n    return \"slept\"\n";
    let (status, _) = rt.specialize(json!({"source": source})).await?;
    assert_eq!(status, 200);

    let port = rt.port;
    let slow = tokio::spawn(async move { request(port, "POST", "/", &[], Some("1")).await });
    // Signal only once the request is in the handler.
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, body) = rt.get("/v1/status").await?;
        if parse(&body)["inFlight"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the request never got in flight");
        sleep(Duration::from_millis(10)).await;
    }
    let pid = rt.child.id().context("no pid")?;
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    assert!(kill.success());

    let (status, body) = slow.await??;
    assert_eq!((status, parse(&body)), (200, json!("slept")));
    let exit = timeout(WAIT, rt.child.wait())
        .await
        .context("still running 10 s after SIGTERM")??;
    assert_eq!(exit.code(), Some(0), "{exit}");
    Ok(())
}

/// `python3 -I -c <runtime> --check` with `input` on stdin: its one line of JSON.
async fn check(input: Value) -> Result<Value> {
    let mut child = Command::new(python())
        .args(["-I", "-c", RUNTIME, "--check"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(input.to_string().as_bytes()).await?;
    drop(stdin);
    let out = timeout(WAIT, child.wait_with_output()).await??;
    let stdout = String::from_utf8(out.stdout)?;
    assert!(
        out.status.success(),
        "{}: {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).context(stdout)
}

#[tokio::test]
async fn check_validates_without_running() -> Result<()> {
    // Valid, and not run: running it would fail.
    let valid = "raise SystemExit(3)\n\ndef handle(body):\n    return body\n";
    assert_eq!(
        check(json!({"source": valid, "name": "handler"})).await?,
        json!({"ok": true})
    );
    assert_eq!(
        check(json!({"source": "from json import loads as main\n", "handler": "main"})).await?,
        json!({"ok": true})
    );

    let answer =
        check(json!({"source": "def handle(body):\n    return (\n", "name": "handler"})).await?;
    assert_eq!(answer["ok"], false, "{answer}");
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("SyntaxError") && error.contains("line"),
        "{error}"
    );

    let answer =
        check(json!({"source": "def other(body):\n    pass\n", "name": "handler"})).await?;
    assert_eq!(
        answer,
        json!({"ok": false, "error": "handler 'handle' not found in handler.py"})
    );
    Ok(())
}
