//! The dashboard in a real browser: headless Chromium, driven through the DevTools protocol,
//! signs in with a ServiceAccount token, opens every page against a running cluster and
//! checks that the cluster's objects appear; objects created and deleted with kubectl must
//! appear and disappear without a reload (the page's watches). Saves a screenshot of each
//! page, and prints two figures: first load (navigation to the first data shown) and update
//! latency (kubectl create or delete to the table changing).
//!
//! Usage: `dashboard-e2e --kubeconfig admin.kubeconfig --out DIR` (hack/e2e-dashboard.sh).

mod cdp;
mod fixtures;
mod netns;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};

use cdp::{Browser, Page};
use fixtures::Kubectl;

#[derive(Parser)]
#[command(about = "Drives the minik8s dashboard in headless Chromium against a running cluster")]
struct Args {
    /// Admin kubeconfig of the cluster under test.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Where screenshots, the browser's log and the figures go.
    #[arg(long, default_value = "target/dashboard-e2e")]
    out: PathBuf,
    #[arg(long, default_value = "chromium")]
    chromium: String,
    #[arg(long, default_value = "kubectl")]
    kubectl: String,
    /// How many objects the update-latency figure creates and deletes.
    #[arg(long, default_value_t = 5)]
    samples: usize,
    /// Leave the test's namespace behind.
    #[arg(long)]
    keep: bool,
    #[command(subcommand)]
    command: Option<Inner>,
}

#[derive(clap::Subcommand)]
enum Inner {
    /// The browser's side of its network namespace (run by the test under `unshare --net`).
    #[command(hide = true)]
    InsideNetns(netns::InsideArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Inner::InsideNetns(inside)) = args.command {
        return match netns::inside(inside).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("dashboard: the browser's namespace: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(&args).await {
        Ok(()) => {
            println!("dashboard: every page passed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dashboard: FAIL: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let kubeconfig = args
        .kubeconfig
        .as_deref()
        .context("--kubeconfig or $KUBECONFIG")?;
    let kubectl = Kubectl::new(&args.kubectl, kubeconfig);
    let server = fixtures::server_url(kubeconfig)?;
    // The browser reaches the server as 127.0.0.1:<its port>, relayed (see netns).
    let authority = server
        .split_once("://")
        .map_or(server.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let port = authority.rsplit_once(':').map_or("443", |(_, p)| p);
    let page_origin = format!("https://127.0.0.1:{port}");
    let ns = format!("dash-e2e-{}", std::process::id());
    let rbac_created = fixtures::install_rbac(&kubectl).await?;
    let result = async {
        let token = kubectl
            .run(
                &[
                    "-n",
                    "kube-system",
                    "create",
                    "token",
                    "minik8s-dashboard",
                    "--duration",
                    "1h",
                ],
                None,
            )
            .await?;
        fixtures::create(&kubectl, &ns).await?;
        let browser =
            Browser::launch(&args.chromium, &authority, &args.out.join("chromium.log")).await?;
        let page = Arc::new(browser.new_page().await?);
        let ui = Ui::new(page.clone(), &args.out);
        let outcome = drive(&ui, &kubectl, &page_origin, &ns, token.trim(), args.samples).await;
        if outcome.is_err() {
            let _ = ui.page.screenshot(&args.out.join("FAILED.png")).await;
            if let Ok(text) = ui.page.eval("document.body.innerText.slice(0, 3000)").await {
                eprintln!("dashboard: the page said:\n{}", text.as_str().unwrap_or(""));
            }
        }
        let errors = ui.errors.lock().expect("errors").clone();
        browser.close().await;
        outcome?;
        if !errors.is_empty() {
            bail!("the page threw:\n  {}", errors.join("\n  "));
        }
        anyhow::Ok(())
    }
    .await;
    if !args.keep {
        let _ = kubectl
            .run(&["delete", "namespace", &ns, "--wait=false"], None)
            .await;
    }
    if rbac_created {
        fixtures::remove_rbac(&kubectl).await;
    }
    result
}

/// The page and what it reported: uncaught exceptions and console errors.
struct Ui {
    page: Arc<Page>,
    out: PathBuf,
    errors: Arc<Mutex<Vec<String>>>,
}

/// Milliseconds since the epoch: the browser's `performance.timeOrigin + now()` is on the
/// same clock, so a time taken here and one taken in the page can be subtracted.
fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

fn js(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

/// `document.querySelector(css)` as JavaScript.
fn q(css: &str) -> String {
    format!("document.querySelector({})", js(css))
}

impl Ui {
    fn new(page: Arc<Page>, out: &Path) -> Ui {
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut events = page.events();
        let sink = errors.clone();
        // Every request the page makes, for when a page does not show what it should.
        let mut network = std::fs::File::create(out.join("network.log")).ok();
        let started = Instant::now();
        tokio::spawn(async move {
            use std::io::Write as _;
            while let Ok(ev) = events.next_forever().await {
                let p = &ev["params"];
                let line = match ev["method"].as_str() {
                    Some("Network.requestWillBeSent") => Some(format!(
                        "{} -> {} {}",
                        p["requestId"], p["request"]["method"], p["request"]["url"]
                    )),
                    Some("Network.responseReceived") => Some(format!(
                        "{} <- {} {} {}",
                        p["requestId"],
                        p["response"]["status"],
                        p["response"]["protocol"],
                        p["response"]["url"]
                    )),
                    Some("Network.loadingFailed") => Some(format!(
                        "{} x {} {}",
                        p["requestId"], p["errorText"], p["canceled"]
                    )),
                    Some("Network.loadingFinished") => Some(format!("{} done", p["requestId"])),
                    _ => None,
                };
                if let (Some(line), Some(f)) = (line, network.as_mut()) {
                    let _ = writeln!(f, "{:>8.3} {line}", started.elapsed().as_secs_f64());
                }
                let text = match ev["method"].as_str() {
                    Some("Runtime.exceptionThrown") => p
                        .pointer("/exceptionDetails/exception/description")
                        .or_else(|| p.pointer("/exceptionDetails/text"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    Some("Runtime.consoleAPICalled") if p["type"] == "error" => {
                        Some(p["args"].to_string())
                    }
                    _ => None,
                };
                if let Some(t) = text {
                    eprintln!("dashboard: page error: {t}");
                    sink.lock().expect("errors").push(t);
                }
            }
        });
        Ui {
            page,
            out: out.to_owned(),
            errors,
        }
    }

    /// Waits until the JavaScript expression `predicate` holds in the page (checked at
    /// every DOM change, not on a timer); answers when, in epoch milliseconds.
    async fn wait(&self, what: &str, predicate: &str, timeout: Duration) -> anyhow::Result<f64> {
        self.arm("__dashWait", what, predicate, timeout).await?;
        self.settle("__dashWait")
            .await
            .with_context(|| what.to_owned())
    }

    /// Starts watching for `predicate` in the page under the name `slot`, without waiting:
    /// so that what makes it true (a kubectl command) can start after the observer is in
    /// place. [`Ui::settle`] waits for it.
    async fn arm(
        &self,
        slot: &str,
        what: &str,
        predicate: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let ms = timeout.as_millis();
        let what = js(what);
        self.page
            .eval(&format!(
                r#"(() => {{
  const ok = () => {{ try {{ return !!({predicate}); }} catch (e) {{ return false; }} }};
  const now = () => performance.timeOrigin + performance.now();
  window.{slot} = new Promise((resolve, reject) => {{
    if (ok()) return resolve(now());
    const obs = new MutationObserver(() => {{
      if (ok()) {{ obs.disconnect(); clearTimeout(t); resolve(now()); }}
    }});
    obs.observe(document.documentElement, {{subtree: true, childList: true, characterData: true, attributes: true}});
    const t = setTimeout(() => {{ obs.disconnect(); reject(new Error('not within {ms} ms: ' + {what})); }}, {ms});
  }});
  return true;
}})()"#
            ))
            .await?;
        Ok(())
    }

    async fn settle(&self, slot: &str) -> anyhow::Result<f64> {
        let v = self.page.eval(&format!("window.{slot}")).await?;
        v.as_f64().context("the waiter answered no time")
    }

    /// Goes to a dashboard page (the hash route) and waits for `predicate`.
    async fn visit(&self, route: &str, predicate: &str, what: &str) -> anyhow::Result<()> {
        let started = Instant::now();
        self.page
            .eval(&format!("location.hash = {}", js(route)))
            .await?;
        self.wait(what, predicate, Duration::from_secs(60)).await?;
        println!(
            "ok   {route:<48} {what} ({} ms)",
            started.elapsed().as_millis()
        );
        Ok(())
    }

    async fn shot(&self, name: &str) -> anyhow::Result<()> {
        self.page
            .screenshot(&self.out.join(format!("{name}.png")))
            .await
    }

    async fn text(&self, css: &str) -> anyhow::Result<String> {
        let v = self
            .page
            .eval(&format!("{}?.textContent ?? ''", q(css)))
            .await?;
        Ok(v.as_str().unwrap_or("").to_owned())
    }
}

/// The median and the largest of `v`.
fn summary(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

async fn drive(
    ui: &Ui,
    kubectl: &Kubectl,
    server: &str,
    ns: &str,
    token: &str,
    samples: usize,
) -> anyhow::Result<()> {
    let page = &ui.page;
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1440, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
    )
    .await?;
    let mut figures = Vec::new();

    // Signing in.
    page.navigate(&format!("{server}/dashboard/")).await?;
    ui.wait(
        "the login form",
        &q("#login #token"),
        Duration::from_secs(30),
    )
    .await?;
    ui.shot("01-login").await?;
    page.eval(&format!(
        "document.getElementById('token').value = {}; document.getElementById('login').requestSubmit(); true",
        js(token)
    ))
    .await?;
    ui.wait(
        "signed in as the dashboard's ServiceAccount",
        &format!(
            "{}?.textContent === 'system:serviceaccount:kube-system:minik8s-dashboard'",
            q("#user")
        ),
        Duration::from_secs(30),
    )
    .await?;
    println!("ok   sign-in with a ServiceAccount token");

    // First load: a fresh document (the token is in sessionStorage) to the first data shown.
    let mut loads = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        page.reload().await?;
        ui.wait(
            "the nodes table",
            &q("#nodes tbody tr"),
            Duration::from_secs(30),
        )
        .await?;
        let wall = started.elapsed().as_secs_f64() * 1000.0;
        let mark = page
            .eval("performance.getEntriesByName('dashboard:content')[0]?.startTime ?? null")
            .await?;
        loads.push(mark.as_f64().unwrap_or(wall));
    }
    let (median, max) = summary(&mut loads);
    figures.push(format!(
        "dashboard first load (navigation start to the first data shown, 3 loads): median {median:.0} ms, max {max:.0} ms"
    ));

    let node = kubectl
        .run(
            &["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"],
            None,
        )
        .await?;
    let node = node.trim();

    // Every page, all namespaces.
    ui.visit(
        "#/nodes",
        &format!(
            "{} && [...document.querySelectorAll('#nodes .usage-text')].some((e) => e.textContent.includes('%'))",
            q(&format!("#nodes tr[data-key=\"{node}\"]"))
        ),
        "the node with its CPU and memory use",
    )
    .await?;
    ui.shot("03-nodes").await?;
    ui.visit(
        &format!("#/nodes/{node}"),
        &format!("{} && {}", q(".usage svg.chart"), q(".detail tr[data-key]")),
        "the node's charts and pods",
    )
    .await?;
    ui.shot("04-node").await?;
    ui.visit(
        "#/namespaces",
        &q(&format!("tr[data-key=\"{ns}\"]")),
        "the test's namespace",
    )
    .await?;
    ui.shot("05-namespaces").await?;
    ui.visit(
        &format!("#/namespaces/{ns}"),
        &format!(
            "{} && {}",
            q(".stat-value"),
            q(&format!("tr[data-key^=\"{ns}/web-\"]"))
        ),
        "the namespace's counts and pods",
    )
    .await?;
    ui.shot("06-namespace").await?;

    // The namespace picker narrows the lists from here on.
    page.eval(&format!(
        "(() => {{ const s = document.getElementById('namespace'); s.value = {}; s.dispatchEvent(new Event('change')); return s.value; }})()",
        js(ns)
    ))
    .await?;

    ui.visit(
        "#/workloads",
        &[
            format!("#deployments tr[data-key=\"{ns}/web\"]"),
            format!("#statefulsets tr[data-key=\"{ns}/db\"]"),
            format!("#jobs tr[data-key=\"{ns}/once\"]"),
            format!("#cronjobs tr[data-key=\"{ns}/nightly\"]"),
        ]
        .iter()
        .map(|c| q(c))
        .collect::<Vec<_>>()
        .join(" && "),
        "a Deployment, a StatefulSet, a Job and a CronJob",
    )
    .await?;
    ui.shot("07-workloads").await?;
    ui.visit(
        &format!("#/workloads/deployments/{ns}/web"),
        "[...document.querySelectorAll('.detail tr[data-key] .badge')].filter((b) => b.textContent === 'Running').length >= 2",
        "the Deployment's two pods running",
    )
    .await?;
    ui.shot("08-deployment").await?;
    ui.visit(
        "#/pods",
        &format!("document.querySelectorAll('#pods tr[data-key^=\"{ns}/web-\"]').length >= 2"),
        "the pods",
    )
    .await?;
    ui.shot("09-pods").await?;
    let pod = kubectl
        .run(
            &[
                "-n",
                ns,
                "get",
                "pods",
                "-l",
                "app=web",
                "-o",
                "jsonpath={.items[0].metadata.name}",
            ],
            None,
        )
        .await?;
    let pod = pod.trim();
    ui.visit(
        &format!("#/pods/{ns}/{pod}"),
        &format!("{}?.textContent.includes('tick')", q("#logs")),
        "the pod's logs",
    )
    .await?;
    // Followed: a line written after the page opened the stream shows up in it.
    let last = ui.text("#logs").await?;
    let seen = last.lines().filter(|l| l.starts_with("tick")).count();
    ui.wait(
        "a new log line, streamed",
        &format!(
            "{}.textContent.split('\\n').filter((l) => l.startsWith('tick')).length > {seen}",
            q("#logs")
        ),
        Duration::from_secs(20),
    )
    .await?;
    println!("ok   the log follows the container's output");
    ui.shot("10-pod").await?;

    ui.visit(
        "#/services",
        &q(&format!("#services tr[data-key=\"{ns}/web\"]")),
        "the Service",
    )
    .await?;
    ui.shot("11-services").await?;

    // Update latency: kubectl create → the row is there; kubectl delete → it is gone.
    let (mut shown, mut removed, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let name = format!("probe-{i}");
        let row = q(&format!("#services tr[data-key=\"{ns}/{name}\"]"));
        ui.arm(
            "__dashRow",
            &format!("row {name}"),
            &row,
            Duration::from_secs(30),
        )
        .await?;
        let start = epoch_ms();
        kubectl
            .run(
                &[
                    "-n",
                    ns,
                    "create",
                    "service",
                    "clusterip",
                    &name,
                    "--tcp=80:8080",
                ],
                None,
            )
            .await?;
        cli.push(epoch_ms() - start);
        shown.push(ui.settle("__dashRow").await? - start);
        ui.arm(
            "__dashRow",
            &format!("row {name} gone"),
            &format!("!{row}"),
            Duration::from_secs(30),
        )
        .await?;
        let start = epoch_ms();
        kubectl
            .run(
                &["-n", ns, "delete", "service", &name, "--wait=false"],
                None,
            )
            .await?;
        removed.push(ui.settle("__dashRow").await? - start);
    }
    println!(
        "ok   {samples} Services created and deleted with kubectl appeared and went without a reload"
    );
    let (c_med, c_max) = summary(&mut shown);
    let (d_med, d_max) = summary(&mut removed);
    let (k_med, _) = summary(&mut cli);
    figures.push(format!(
        "dashboard update latency ({samples} Services): kubectl create to row shown median {c_med:.0} ms, max {c_max:.0} ms; \
         kubectl delete to row gone median {d_med:.0} ms, max {d_max:.0} ms (kubectl itself: median {k_med:.0} ms)"
    ));

    ui.visit(
        &format!("#/services/{ns}/web"),
        "document.querySelectorAll('#endpoints tbody tr').length >= 2",
        "the Service's endpoints",
    )
    .await?;
    ui.shot("12-service").await?;

    fixtures::function_ready(kubectl, ns).await?;
    ui.visit(
        "#/functions",
        &format!(
            "{} && {}",
            q(&format!("#functions tr[data-key=\"{ns}/hello\"] .badge.ok")),
            q(&format!("#ksvcs tr[data-key=\"{ns}/hello\"]"))
        ),
        "the Function, Ready, and its Knative Service",
    )
    .await?;
    ui.shot("13-functions").await?;
    ui.visit(
        &format!("#/functions/function/{ns}/hello"),
        &format!("{}?.textContent.includes('def handle')", q("pre.source")),
        "the Function's source and revisions",
    )
    .await?;
    ui.shot("14-function").await?;

    // A run, once its Function answers; then its graph must show the way it went.
    let run = fixtures::run_workflow(kubectl, ns).await?;
    ui.visit(
        "#/workflows",
        &format!(
            "{} && {}",
            q(&format!("#workflows tr[data-key=\"{ns}/greet\"]")),
            q(&format!("#workflowruns tr[data-key=\"{ns}/{}\"]", run.name))
        ),
        "the Workflow and its run",
    )
    .await?;
    ui.shot("15-workflows").await?;
    let mut expect: Vec<String> = run
        .exited
        .iter()
        .map(|s| {
            q(&format!(
                "svg.workflow-graph g.state.exited[data-state=\"{s}\"]"
            ))
        })
        .collect();
    expect.push(q(
        "svg.workflow-graph g.state.unvisited[data-state=\"Skip\"]",
    ));
    expect.push(q(
        "svg.workflow-graph g.edge.taken[data-from=\"Decide\"][data-to=\"Call\"]",
    ));
    ui.visit(
        &format!("#/workflowruns/{ns}/{}", run.name),
        &expect.join(" && "),
        &format!(
            "the run's graph: {} exited, Skip not entered",
            run.exited.join(", ")
        ),
    )
    .await?;
    ui.shot("16-workflowrun").await?;
    // The Function after the run called it: its revision, the pod that served the call
    // while it stays (a warm pool pod taken for it), and that pod's usage.
    ui.visit(
        &format!("#/functions/function/{ns}/hello"),
        &format!("{} && {}", q(".usage svg.chart"), q(".live.on")),
        "the Function after a call",
    )
    .await?;
    ui.shot("14b-function-called").await?;
    ui.visit(
        &format!("#/workflows/{ns}/greet"),
        &format!(
            "{} && {}",
            q("svg.workflow-graph g.state[data-state=\"Oops\"]"),
            q(&format!("tr[data-key=\"{ns}/{}\"]", run.name))
        ),
        "the Workflow's graph and runs",
    )
    .await?;
    ui.shot("17-workflow").await?;
    ui.visit(
        "#/events",
        &q(&format!(
            "#events tr[data-key=\"{ns}/dashboard-e2e.warning\"]"
        )),
        "the Warning event",
    )
    .await?;
    ui.shot("18-events").await?;

    // A pod created and deleted with kubectl, on the pods page.
    ui.visit("#/pods", &q("#pods tbody tr"), "the pods again")
        .await?;
    let row = q(&format!("#pods tr[data-key=\"{ns}/probe-pod\"]"));
    ui.arm(
        "__dashRow",
        "probe-pod shown",
        &row,
        Duration::from_secs(30),
    )
    .await?;
    kubectl
        .run(
            &[
                "-n",
                ns,
                "run",
                "probe-pod",
                "--image=busybox:1.36",
                "--image-pull-policy=Never",
                "--restart=Never",
                "--",
                "sleep",
                "3600",
            ],
            None,
        )
        .await?;
    ui.settle("__dashRow").await?;
    ui.arm(
        "__dashRow",
        "probe-pod gone",
        &format!("!{row}"),
        Duration::from_secs(60),
    )
    .await?;
    kubectl
        .run(
            &[
                "-n",
                ns,
                "delete",
                "pod",
                "probe-pod",
                "--grace-period=0",
                "--force",
                "--wait=false",
            ],
            None,
        )
        .await?;
    ui.settle("__dashRow").await?;
    println!("ok   a pod created and deleted with kubectl appeared and went without a reload");

    // The overview last, across namespaces: by now the charts have samples.
    page.eval(
        "(() => { const s = document.getElementById('namespace'); s.value = ''; s.dispatchEvent(new Event('change')); return true; })()",
    )
    .await?;
    ui.visit(
        "#/",
        &format!(
            "{} && {} && {}",
            q(&format!("#nodes tr[data-key=\"{node}\"]")),
            q("#pod-phases li[data-phase=\"Running\"] strong"),
            q(&format!(
                "#warnings tr[data-key=\"{ns}/dashboard-e2e.warning\"]"
            ))
        ),
        "nodes, pods by phase and the Warning event",
    )
    .await?;
    let running = ui
        .text("#pod-phases li[data-phase=\"Running\"] strong")
        .await?;
    if running.trim() == "0" {
        bail!("the overview counts no running pod");
    }
    // The cluster's CPU over time: a line once there are two samples (or Prometheus's).
    ui.wait(
        "the cluster's CPU chart drawn as a line",
        &q(".usage svg.chart.cpu path.line"),
        Duration::from_secs(60),
    )
    .await?;
    let source = page
        .eval(&format!("{}?.dataset.source", q(".usage")))
        .await?;
    println!(
        "ok   the overview's charts, from {}",
        source.as_str().unwrap_or("?")
    );
    ui.shot("02-overview").await?;

    let text = figures.join("\n");
    println!("{text}");
    std::fs::write(ui.out.join("figures.txt"), format!("{text}\n"))?;
    Ok(())
}
