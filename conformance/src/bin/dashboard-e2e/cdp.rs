//! Just enough of the Chrome DevTools Protocol to drive one page: commands sent over the
//! browser's websocket and matched to their answers by id, events fanned out to whoever
//! waits for one, and a session attached to a tab (`flatten`), so one socket serves all.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::UnixStream;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex, broadcast, oneshot};
use tokio_tungstenite::tungstenite::Message;

use crate::netns;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;
type Sink = futures::stream::SplitSink<tokio_tungstenite::WebSocketStream<UnixStream>, Message>;

/// A headless Chromium in a network namespace of its own (see [`crate::netns`]) and the
/// socket to its DevTools endpoint. The namespace's side stops Chromium when its standard
/// input closes: at [`Browser::close`], when this is dropped, or when the test dies.
pub struct Browser {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    _dir: tempfile::TempDir,
    sink: Mutex<Sink>,
    pending: Pending,
    events: broadcast::Sender<Value>,
    next: AtomicU64,
}

impl Browser {
    /// Starts `chromium` headless, in a namespace where `127.0.0.1:<port>` is the API server
    /// at `server` (`host:port`) outside; its standard error goes to `log`.
    pub async fn launch(chromium: &str, server: &str, log: &Path) -> anyhow::Result<Arc<Browser>> {
        let dir = tempfile::tempdir()?;
        let port = server
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .context("the server has no port")?;
        netns::serve_api(dir.path(), server.to_owned())?;
        let mut child = Command::new("unshare")
            .arg("--net")
            .arg(std::env::current_exe()?)
            .arg("inside-netns")
            .arg("--dir")
            .arg(dir.path())
            .arg("--port")
            .arg(port.to_string())
            .arg("--chromium")
            .arg(chromium)
            .arg("--log")
            .arg(log)
            .stdin(Stdio::piped())
            .spawn()
            .context("starting unshare --net")?;
        let stdin = child.stdin.take();
        let ready = dir.path().join(netns::DEVTOOLS_READY);
        let deadline = Instant::now() + Duration::from_secs(60);
        let path = loop {
            if let Ok(path) = std::fs::read_to_string(&ready) {
                break path;
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "the browser's namespace ended before Chromium listened: {status} (see {})",
                    log.display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "Chromium did not listen within 60 s (see {})",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let socket = UnixStream::connect(dir.path().join(netns::DEVTOOLS_SOCKET)).await?;
        let (ws, _) = tokio_tungstenite::client_async(format!("ws://127.0.0.1{path}"), socket)
            .await
            .context("connecting to Chromium's DevTools")?;
        let (sink, mut stream) = ws.split();
        let pending: Pending = Arc::default();
        let (events, _) = broadcast::channel(4096);
        let browser = Arc::new(Browser {
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            _dir: dir,
            sink: Mutex::new(sink),
            pending: pending.clone(),
            events: events.clone(),
            next: AtomicU64::new(1),
        });
        tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                let Message::Text(text) = msg else { continue };
                let Ok(v) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                match v.get("id").and_then(Value::as_u64) {
                    Some(id) => {
                        if let Some(tx) = pending.lock().await.remove(&id) {
                            let answer = match v.get("error") {
                                Some(e) => Err(e.to_string()),
                                None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
                            };
                            let _ = tx.send(answer);
                        }
                    }
                    None => {
                        let _ = events.send(v);
                    }
                }
            }
        });
        Ok(browser)
    }

    /// Stops Chromium and waits until it is gone.
    pub async fn close(&self) {
        self.stdin.lock().await.take();
        let mut child = self.child.lock().await;
        if tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .is_err()
        {
            let _ = child.start_kill();
        }
    }

    /// Sends `method` to the browser (no session) or to a tab's session.
    pub async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> anyhow::Result<Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let (tx, rx) = oneshot::channel();
        self.pending.lock().await.insert(id, tx);
        self.sink
            .lock()
            .await
            .send(Message::Text(msg.to_string().into()))
            .await?;
        match tokio::time::timeout(Duration::from_secs(120), rx).await {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(anyhow!("{method}: {e}")),
            Ok(Err(_)) => Err(anyhow!("{method}: the browser closed the connection")),
            Err(_) => Err(anyhow!("{method}: no answer within 120 s")),
        }
    }

    pub fn events(&self) -> broadcast::Receiver<Value> {
        self.events.subscribe()
    }

    /// A new tab, attached.
    pub async fn new_page(self: &Arc<Self>) -> anyhow::Result<Page> {
        let target = self
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await?;
        let target_id = target["targetId"].as_str().context("no targetId")?;
        let attached = self
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await?;
        let session = attached["sessionId"]
            .as_str()
            .context("no sessionId")?
            .to_owned();
        let page = Page {
            browser: self.clone(),
            session,
        };
        page.call("Page.enable", json!({})).await?;
        page.call("Runtime.enable", json!({})).await?;
        page.call("Network.enable", json!({})).await?;
        Ok(page)
    }
}

/// One tab.
pub struct Page {
    browser: Arc<Browser>,
    session: String,
}

impl Page {
    pub async fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.browser.call(Some(&self.session), method, params).await
    }

    /// Events of this tab only.
    pub fn events(&self) -> PageEvents {
        PageEvents {
            rx: self.browser.events(),
            session: self.session.clone(),
        }
    }

    /// Loads `url` and waits for its load event.
    pub async fn navigate(&self, url: &str) -> anyhow::Result<()> {
        let mut events = self.events();
        let r = self.call("Page.navigate", json!({"url": url})).await?;
        if let Some(e) = r.get("errorText").and_then(Value::as_str) {
            bail!("navigating to {url}: {e}");
        }
        events.wait_for("Page.loadEventFired").await?;
        Ok(())
    }

    pub async fn reload(&self) -> anyhow::Result<()> {
        let mut events = self.events();
        self.call("Page.reload", json!({"ignoreCache": false}))
            .await?;
        events.wait_for("Page.loadEventFired").await?;
        Ok(())
    }

    /// The value of a JavaScript expression, promises awaited; a thrown error fails.
    pub async fn eval(&self, expression: &str) -> anyhow::Result<Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
            )
            .await?;
        if let Some(e) = r.get("exceptionDetails") {
            let text = e
                .pointer("/exception/description")
                .or_else(|| e.get("text"))
                .and_then(Value::as_str)
                .unwrap_or("exception");
            bail!("{text}");
        }
        Ok(r.pointer("/result/value").cloned().unwrap_or(Value::Null))
    }

    /// A PNG of the whole page (up to 4000 px tall).
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        use base64::Engine;
        let metrics = self.call("Page.getLayoutMetrics", json!({})).await?;
        let size = &metrics["cssContentSize"];
        let width = size["width"].as_f64().unwrap_or(1440.0);
        let height = size["height"]
            .as_f64()
            .unwrap_or(900.0)
            .clamp(900.0, 4000.0);
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({
                    "format": "png",
                    "captureBeyondViewport": true,
                    "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
                }),
            )
            .await?;
        let data = shot["data"].as_str().context("no screenshot data")?;
        let png = base64::engine::general_purpose::STANDARD.decode(data)?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

pub struct PageEvents {
    rx: broadcast::Receiver<Value>,
    session: String,
}

impl PageEvents {
    /// The next event of this tab, within 60 s.
    pub async fn next(&mut self) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let ev = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .context("no event within 60 s")?;
            match ev {
                Ok(v) if v["sessionId"] == self.session.as_str() => return Ok(v),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => bail!("browser events ended: {e}"),
            }
        }
    }

    /// The next event of this tab, however long it takes; an error once the browser is gone.
    pub async fn next_forever(&mut self) -> anyhow::Result<Value> {
        loop {
            match self.rx.recv().await {
                Ok(v) if v["sessionId"] == self.session.as_str() => return Ok(v),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(e) => bail!("browser events ended: {e}"),
            }
        }
    }

    pub async fn wait_for(&mut self, method: &str) -> anyhow::Result<Value> {
        loop {
            let ev = self.next().await?;
            if ev["method"] == method {
                return Ok(ev);
            }
        }
    }
}
