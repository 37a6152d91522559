//! `invoke` calls a Function the way its clients do, through a node's function gateway (the
//! OpenFaaS path, `/function/<name>.<namespace>`), not through the API server, so what it
//! shows (status, body, cold-start latency) is what a caller gets. Without `--gateway` the
//! first real node's InternalIP is the gateway: every node serves every function.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Node;
use knative_lite::function::GATEWAY_PORT;
use kube::api::{Api, ListParams};

use crate::client::ClientArgs;

/// The label of the fake nodes that run no containers, and so no gateway.
const HOLLOW_LABEL: &str = "minik8s.io/hollow";

#[derive(Args, Debug)]
pub struct InvokeArgs {
    /// The Function's name.
    pub name: String,
    /// The request body: JSON, or `@FILE` to send a file's.
    #[arg(short = 'd', long, default_value = "{}", value_name = "JSON|@FILE")]
    pub data: String,
    /// Queue the call (`/async-function/...`) instead of waiting for its result.
    #[arg(long = "async")]
    pub async_: bool,
    /// The gateway's URL, e.g. http://127.0.0.1:8080 (default: the first node's InternalIP,
    /// port 8080).
    #[arg(long, env = "MINIK8S_FN_GATEWAY", value_name = "URL")]
    pub gateway: Option<String>,
    /// How long to wait for the answer.
    #[arg(long, default_value = "60s", value_parser = crate::parse_duration)]
    pub timeout: Duration,
}

pub async fn run(cluster: &ClientArgs, args: InvokeArgs) -> anyhow::Result<()> {
    let body = request_body(&args.data)?;
    let (gateway, namespace) = match &args.gateway {
        Some(url) => (Gateway::parse(url)?, cluster.namespace().await?),
        None => {
            let cluster = cluster.connect().await?;
            let gateway = find_gateway(&cluster.client).await?;
            (gateway, cluster.namespace)
        }
    };
    let path = gateway.path(&args.name, &namespace, args.async_);
    let (status, answer) = tokio::time::timeout(args.timeout, post(&gateway, &path, body))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "no answer from {} within {}s",
                gateway.url(&path),
                args.timeout.as_secs_f64()
            )
        })?
        .with_context(|| format!("calling {}", gateway.url(&path)))?;
    if !status.is_success() {
        bail!("{status} {}", String::from_utf8_lossy(&answer).trim_end());
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&answer)?;
    if !answer.ends_with(b"\n") {
        stdout.write_all(b"\n")?;
    }
    stdout.flush()?;
    Ok(())
}

/// The bytes `--data` names: inline JSON, or a file's after `@`; either must be JSON, since
/// it is sent as `application/json`.
fn request_body(data: &str) -> anyhow::Result<Vec<u8>> {
    let (body, what) = match data.strip_prefix('@') {
        Some(file) => {
            let body = std::fs::read(Path::new(file)).with_context(|| format!("reading {file}"))?;
            (body, format!("--data @{file}"))
        }
        None => (data.as_bytes().to_vec(), "--data".to_owned()),
    };
    serde_json::from_slice::<k8s_openapi::serde::de::IgnoredAny>(&body)
        .with_context(|| format!("{what} is not valid JSON"))?;
    Ok(body)
}

/// Where the gateway listens, and the path it is mounted at.
#[derive(Debug, PartialEq)]
struct Gateway {
    host: String,
    port: u16,
    prefix: String,
}

impl Gateway {
    fn parse(url: &str) -> anyhow::Result<Gateway> {
        let full = if url.contains("://") {
            url.to_owned()
        } else {
            format!("http://{url}")
        };
        let uri: http::Uri = full
            .parse()
            .with_context(|| format!("--gateway {url} is not a URL"))?;
        if uri.scheme_str() != Some("http") {
            bail!("--gateway {url}: only http:// gateways are supported");
        }
        let host = uri
            .host()
            .with_context(|| format!("--gateway {url} names no host"))?;
        Ok(Gateway {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: uri.port_u16().unwrap_or(80),
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    fn path(&self, name: &str, namespace: &str, queued: bool) -> String {
        let kind = if queued { "async-function" } else { "function" };
        format!("{}/{kind}/{name}.{namespace}", self.prefix)
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.authority())
    }
}

/// The gateway of the first node that runs containers and has an InternalIP.
async fn find_gateway(client: &kube::Client) -> anyhow::Result<Gateway> {
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes.list(&ListParams::default()).await?.items;
    let host = node_address(&nodes).context(
        "no node has an InternalIP to reach the function gateway at; name one with --gateway",
    )?;
    Ok(Gateway {
        host,
        port: GATEWAY_PORT,
        prefix: String::new(),
    })
}

fn node_address(nodes: &[Node]) -> Option<String> {
    nodes
        .iter()
        .filter(|n| {
            !n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(HOLLOW_LABEL))
        })
        .find_map(|n| {
            n.status
                .as_ref()?
                .addresses
                .as_ref()?
                .iter()
                .find(|a| a.type_ == "InternalIP")
                .map(|a| a.address.clone())
        })
}

async fn post(
    gateway: &Gateway,
    path: &str,
    body: Vec<u8>,
) -> anyhow::Result<(http::StatusCode, Bytes)> {
    let stream = tokio::net::TcpStream::connect((gateway.host.as_str(), gateway.port))
        .await
        .context("connecting")?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let connection = tokio::spawn(connection);
    let request = http::Request::post(path)
        .header(http::header::HOST, gateway.authority())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let answer = response.into_body().collect().await?.to_bytes();
    connection.abort();
    Ok((status, answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    #[test]
    fn gateway_paths() {
        let g = Gateway::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(g.authority(), "127.0.0.1:8080");
        assert_eq!(g.path("hello", "default", false), "/function/hello.default");
        assert_eq!(g.path("hello", "team", true), "/async-function/hello.team");
        let g = Gateway::parse("10.0.0.1:9000/gw/").unwrap();
        assert_eq!(
            g.url(&g.path("f", "ns", false)),
            "http://10.0.0.1:9000/gw/function/f.ns"
        );
        let g = Gateway::parse("http://[::1]").unwrap();
        assert_eq!(
            (g.host.as_str(), g.authority()),
            ("::1", "[::1]:80".to_owned())
        );
        assert!(Gateway::parse("https://example.com").is_err());
    }

    #[test]
    fn data_inline_and_from_file() {
        assert_eq!(request_body("{}").unwrap(), b"{}");
        assert_eq!(request_body(r#"{"a": 1}"#).unwrap(), br#"{"a": 1}"#);
        let err = request_body("{a: 1}").unwrap_err();
        assert!(
            format!("{err:#}").starts_with("--data is not valid JSON: "),
            "{err:#}"
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("in.json");
        std::fs::write(&file, "[1, 2]\n").unwrap();
        let arg = format!("@{}", file.display());
        assert_eq!(request_body(&arg).unwrap(), b"[1, 2]\n");
        std::fs::write(&file, "nope").unwrap();
        let err = format!("{:#}", request_body(&arg).unwrap_err());
        assert!(
            err.starts_with(&format!("--data {arg} is not valid JSON")),
            "{err}"
        );
        let err = format!("{:#}", request_body("@/nonexistent.json").unwrap_err());
        assert!(err.starts_with("reading /nonexistent.json: "), "{err}");
    }

    fn node(hollow: bool, addresses: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        if hollow {
            n.metadata.labels = Some([(HOLLOW_LABEL.to_owned(), "hollow".to_owned())].into());
        }
        n.status = Some(NodeStatus {
            addresses: Some(
                addresses
                    .iter()
                    .map(|(t, a)| NodeAddress {
                        type_: (*t).into(),
                        address: (*a).into(),
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        });
        n
    }

    #[test]
    fn picks_first_real_node_with_internal_ip() {
        let nodes = [
            node(true, &[("InternalIP", "10.0.0.9")]),
            node(false, &[("Hostname", "a")]),
            node(false, &[("Hostname", "b"), ("InternalIP", "10.0.0.2")]),
            node(false, &[("InternalIP", "10.0.0.3")]),
        ];
        assert_eq!(node_address(&nodes).as_deref(), Some("10.0.0.2"));
        assert_eq!(node_address(&nodes[..2]), None);
    }
}
