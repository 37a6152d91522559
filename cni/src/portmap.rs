//! hostPorts: the stock portmap plugin, run only for the pods that have some (nearly all have
//! none, and it is a Go program of ~4 ms a run).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::conf::{CniResult, NetConf};
use crate::{Error, Invocation, io};

/// The stdin of the delegated portmap plugin.
pub fn stdin(conf: &NetConf, prev: Option<&CniResult>) -> Value {
    let mut c = serde_json::Map::new();
    c.insert("cniVersion".into(), json!(conf.cni_version));
    c.insert("name".into(), json!(conf.name));
    c.insert("type".into(), json!("portmap"));
    for (k, v) in &conf.portmap {
        c.insert(k.clone(), v.clone());
    }
    c.insert("capabilities".into(), json!({"portMappings": true}));
    c.insert(
        "runtimeConfig".into(),
        json!({"portMappings": conf.runtime_config.port_mappings}),
    );
    if let Some(prev) = prev {
        c.insert("prevResult".into(), json!(prev));
    }
    Value::Object(c)
}

/// Runs the stock portmap plugin (found on CNI_PATH) for pods with hostPorts; pods without
/// any, nearly all of them, never pay for it.
pub fn run(inv: &Invocation, conf: &NetConf, prev: Option<&CniResult>) -> Result<(), Error> {
    if conf.runtime_config.port_mappings.is_empty() {
        return Ok(());
    }
    let plugin = inv
        .path
        .iter()
        .map(|d| d.join("portmap"))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Portmap(format!("no portmap plugin on CNI_PATH {:?}", inv.path)))?;
    let path = std::env::join_paths(&inv.path).unwrap_or_default();
    let mut child = Command::new(&plugin)
        .env("CNI_COMMAND", inv.verb.as_str())
        .env("CNI_CONTAINERID", &inv.container_id)
        .env("CNI_NETNS", &inv.netns)
        .env("CNI_IFNAME", &inv.ifname)
        .env("CNI_PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(format!("running {}", plugin.display())))?;
    let input = stdin(conf, prev).to_string();
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(input.as_bytes())
        .map_err(io(format!("writing to {}", plugin.display())))?;
    let out = child
        .wait_with_output()
        .map_err(io(format!("running {}", plugin.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let msg = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.get("msg").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).trim().to_string());
    Err(Error::Portmap(msg))
}
