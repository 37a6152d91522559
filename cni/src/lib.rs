//! The node's CNI plugin. containerd runs a CNI plugin chain for every pod sandbox it starts
//! and stops; the stock chain (loopback, then bridge, which runs host-local, then portmap) is
//! four Go programs, ~19 ms of CPU per pod start on this project's machines, a sixth of all a
//! pod's start costs. This one program does what that chain does for minik8s's network in
//! ~3 ms: the `loopback` type brings `lo` up; the bridge type attaches a veth to the
//! node's bridge with an address from host-local's store (same files, so the two agree), and
//! hands hostPort mappings to the stock `portmap` plugin only when a pod has some.
//!
//! It speaks CNI 1.0.0 (ADD, DEL, CHECK, VERSION) over environment, stdin and stdout.

pub mod ipam;
pub mod netlink;

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use ipam::{IpamError, Range, Store};
use netlink::{NetlinkError, Socket};

/// The plugin type the bridge network's configuration names.
pub const BRIDGE_TYPE: &str = "minik8s-bridge";
/// The type containerd runs for every pod's loopback network.
pub const LOOPBACK_TYPE: &str = "loopback";
pub const CNI_VERSION: &str = "1.0.0";
/// Versions whose configurations are accepted: containerd 1.6 writes the loopback network it
/// adds to every pod as 0.3.1. Results answer in the configuration's version.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["0.3.0", "0.3.1", "0.4.0", CNI_VERSION];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unsupported CNI version {0:?} (supported: {SUPPORTED_VERSIONS:?})")]
    Version(String),
    #[error("{0}")]
    Env(String),
    #[error("decoding the network configuration: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("network configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Netlink(#[from] NetlinkError),
    #[error("{0}")]
    Ipam(#[from] IpamError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("network namespace {path}: {errno}")]
    Netns {
        path: String,
        errno: nix::errno::Errno,
    },
    #[error("portmap: {0}")]
    Portmap(String),
}

impl Error {
    /// The spec's error codes (1-99 reserved for it), ours from 100.
    pub fn code(&self) -> u32 {
        match self {
            Error::Version(_) => 1,
            Error::Env(_) => 4,
            Error::Io { .. } => 5,
            Error::Decode(_) => 6,
            Error::Config(_) => 7,
            Error::Netlink(_) => 100,
            Error::Ipam(_) => 101,
            Error::Netns { .. } => 102,
            Error::Portmap(_) => 103,
        }
    }

    /// The error as the spec prints it on stdout.
    pub fn to_json(&self) -> String {
        json!({"cniVersion": CNI_VERSION, "code": self.code(), "msg": self.to_string()}).to_string()
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Add,
    Del,
    Check,
    Version,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Add => "ADD",
            Verb::Del => "DEL",
            Verb::Check => "CHECK",
            Verb::Version => "VERSION",
        }
    }
}

/// What the runtime asks, from the CNI_* environment variables.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub verb: Verb,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub path: Vec<PathBuf>,
}

impl Invocation {
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Invocation, Error> {
        let verb = match env("CNI_COMMAND").as_deref() {
            Some("ADD") => Verb::Add,
            Some("DEL") => Verb::Del,
            Some("CHECK") => Verb::Check,
            Some("VERSION") => Verb::Version,
            other => return Err(Error::Env(format!("unknown CNI_COMMAND {other:?}"))),
        };
        let required = |k: &str| {
            env(k)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| Error::Env(format!("{k} is required")))
        };
        let (container_id, ifname) = match verb {
            Verb::Version => (String::new(), String::new()),
            _ => (required("CNI_CONTAINERID")?, required("CNI_IFNAME")?),
        };
        let netns = match verb {
            Verb::Add | Verb::Check => required("CNI_NETNS")?,
            _ => env("CNI_NETNS").unwrap_or_default(),
        };
        let path = env("CNI_PATH")
            .unwrap_or_default()
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        Ok(Invocation {
            verb,
            container_id,
            netns,
            ifname,
            path,
        })
    }
}

/// The network configuration on stdin: the bridge network's fields, and what the runtime adds.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub bridge: String,
    #[serde(default)]
    pub subnet: String,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub hairpin_mode: bool,
    /// Extra fields for the delegated portmap plugin (e.g. `snat`).
    #[serde(default)]
    pub portmap: serde_json::Map<String, Value>,
    #[serde(default)]
    pub runtime_config: RuntimeConfig,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfig {
    #[serde(default)]
    pub port_mappings: Vec<Value>,
}

/// host-local's default data directory.
const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// The configuration list the kubelet writes for containerd: one network, this plugin, with
/// hostPort mappings passed to it.
pub fn conflist(name: &str, bridge: &str, subnet: &str, data_dir: &Path) -> Value {
    json!({
        "cniVersion": CNI_VERSION,
        "name": name,
        "plugins": [{
            "type": BRIDGE_TYPE,
            "bridge": bridge,
            "subnet": subnet,
            "dataDir": data_dir.to_string_lossy(),
            "hairpinMode": true,
            "portmap": {"snat": true},
            "capabilities": {"portMappings": true},
        }]
    })
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Interface {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mac: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct IpConfig {
    /// "4" or "6": only in results before 1.0.0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    pub interface: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Route {
    pub dst: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
}

/// A CNI 1.0.0 result.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Value,
}

/// Runs one invocation; returns what goes to stdout.
pub fn run(inv: &Invocation, stdin: &[u8]) -> Result<String, Error> {
    if inv.verb == Verb::Version {
        return Ok(
            json!({"cniVersion": CNI_VERSION, "supportedVersions": SUPPORTED_VERSIONS}).to_string(),
        );
    }
    let conf: NetConf = serde_json::from_slice(stdin)?;
    if !SUPPORTED_VERSIONS.contains(&conf.cni_version.as_str()) {
        return Err(Error::Version(conf.cni_version));
    }
    let answer = |r: CniResult| serde_json::to_string(&in_version(r, &conf.cni_version));
    match (conf.kind.as_str(), inv.verb) {
        (LOOPBACK_TYPE, Verb::Add) => {
            in_netns(&inv.netns, || {
                let s = Socket::open()?;
                let lo = s.link("lo")?;
                s.set_up(lo.index)?;
                Ok(())
            })?;
            Ok(answer(loopback_result(&inv.netns))?)
        }
        // The namespace goes away with the sandbox; nothing of ours outlives it.
        (LOOPBACK_TYPE, Verb::Del) => Ok(String::new()),
        (LOOPBACK_TYPE, Verb::Check) => in_netns(&inv.netns, || {
            Socket::open()?.link("lo")?;
            Ok(String::new())
        }),
        (BRIDGE_TYPE, Verb::Add) => {
            let result = add(inv, &conf)?;
            if let Err(e) = portmap(inv, &conf, Some(&result)) {
                // Leave nothing behind: the runtime does not DEL after a failed ADD.
                let _ = del(inv, &conf);
                return Err(e);
            }
            Ok(answer(result)?)
        }
        (BRIDGE_TYPE, Verb::Del) => {
            portmap(inv, &conf, None)?;
            del(inv, &conf)?;
            Ok(String::new())
        }
        (BRIDGE_TYPE, Verb::Check) => {
            check(inv, &conf)?;
            Ok(String::new())
        }
        (other, _) => Err(Error::Config(format!(
            "type {other:?} is not {BRIDGE_TYPE:?} or {LOOPBACK_TYPE:?}"
        ))),
    }
}

/// A result as `version` writes it: before 1.0.0 each address names its IP version.
fn in_version(mut r: CniResult, version: &str) -> CniResult {
    r.cni_version = version.to_string();
    if version != CNI_VERSION {
        for ip in &mut r.ips {
            let v6 = ip.address.contains(':');
            ip.version = Some(if v6 { "6" } else { "4" }.into());
        }
    }
    r
}

fn loopback_result(netns: &str) -> CniResult {
    CniResult {
        cni_version: CNI_VERSION.into(),
        interfaces: vec![Interface {
            name: "lo".into(),
            mac: "00:00:00:00:00:00".into(),
            sandbox: netns.into(),
        }],
        ips: vec![
            IpConfig {
                version: None,
                address: "127.0.0.1/8".into(),
                gateway: None,
                interface: 0,
            },
            IpConfig {
                version: None,
                address: "::1/128".into(),
                gateway: None,
                interface: 0,
            },
        ],
        routes: Vec::new(),
        dns: json!({}),
    }
}

/// Runs `f` with this thread in the network namespace at `path`, then moves it back.
fn in_netns<T>(path: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    use nix::sched::{CloneFlags, setns};
    let err = |errno| Error::Netns {
        path: path.to_string(),
        errno,
    };
    let host = File::open("/proc/thread-self/ns/net").map_err(io("opening this namespace"))?;
    let target = File::open(path).map_err(io(format!("opening {path}")))?;
    setns(target.as_fd(), CloneFlags::CLONE_NEWNET).map_err(err)?;
    let out = f();
    if let Err(errno) = setns(host.as_fd(), CloneFlags::CLONE_NEWNET) {
        // Going on in the pod's namespace could configure the wrong one: stop here.
        panic!("returning to the host network namespace: {errno}");
    }
    out
}

fn range_of(conf: &NetConf) -> Result<Range, Error> {
    Range::parse(&conf.subnet).ok_or_else(|| {
        Error::Config(format!(
            "subnet {:?} is not an IPv4 CIDR of /30 or larger",
            conf.subnet
        ))
    })
}

fn store_of(conf: &NetConf) -> Store {
    let dir = conf
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
    Store::new(&dir, &conf.name)
}

/// The bridge with the gateway address, up; created if missing (as the bridge plugin does).
fn ensure_bridge(s: &Socket, name: &str, range: &Range) -> Result<netlink::Link, Error> {
    use nix::errno::Errno;
    let link = match s.link(name) {
        Ok(l) => l,
        Err(e) if e.errno == Errno::ENODEV => {
            match s.add_bridge(name) {
                Ok(()) => {}
                Err(e) if e.errno == Errno::EEXIST => {}
                Err(e) => return Err(e.into()),
            }
            s.link(name)?
        }
        Err(e) => return Err(e.into()),
    };
    match s.add_addr(link.index, range.gateway, range.prefix) {
        Ok(()) => {}
        Err(e) if e.errno == Errno::EEXIST => {}
        Err(e) => return Err(e.into()),
    }
    s.set_up(link.index)?;
    Ok(link)
}

/// Pods reach beyond the node through it: the bridge plugin's `isGateway` turns on forwarding.
fn enable_forwarding() -> Result<(), Error> {
    const PATH: &str = "/proc/sys/net/ipv4/ip_forward";
    if std::fs::read_to_string(PATH).map_err(io(PATH))?.trim() != "1" {
        std::fs::write(PATH, "1").map_err(io(PATH))?;
    }
    Ok(())
}

/// A host-side name nobody holds: `veth` and 8 random hex digits, as the stock plugins.
fn veth_name() -> Result<String, Error> {
    let mut bytes = [0u8; 4];
    File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(io("reading /dev/urandom"))?;
    Ok(format!("veth{:08x}", u32::from_ne_bytes(bytes)))
}

fn add(inv: &Invocation, conf: &NetConf) -> Result<CniResult, Error> {
    if conf.bridge.is_empty() {
        return Err(Error::Config("bridge is required".into()));
    }
    let range = range_of(conf)?;
    let host = Socket::open()?;
    let bridge = ensure_bridge(&host, &conf.bridge, &range)?;
    enable_forwarding()?;
    let ip = store_of(conf)
        .lock()?
        .allocate(&range, &inv.container_id, &inv.ifname)?;
    attach(inv, conf, &host, &bridge, &range, ip).inspect_err(|_| {
        let _ = store_of(conf)
            .lock()
            .and_then(|l| l.release(&inv.container_id, &inv.ifname));
    })
}

fn attach(
    inv: &Invocation,
    conf: &NetConf,
    host: &Socket,
    bridge: &netlink::Link,
    range: &Range,
    ip: Ipv4Addr,
) -> Result<CniResult, Error> {
    let netns = File::open(&inv.netns).map_err(io(format!("opening {}", inv.netns)))?;
    let mut tries = 0;
    let host_name = loop {
        let name = veth_name()?;
        match host.add_veth(&name, bridge.index, &inv.ifname, netns.as_fd()) {
            Ok(()) => break name,
            // Either our random name or the pod's interface exists: retry only the first.
            Err(e)
                if e.errno == nix::errno::Errno::EEXIST
                    && tries < 3
                    && host.link(&name).is_ok() =>
            {
                tries += 1;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let configured = (|| {
        let host_link = host.link(&host_name)?;
        if conf.hairpin_mode {
            host.set_hairpin(host_link.index)?;
        }
        let pod_link = in_netns(&inv.netns, || {
            let s = Socket::open()?;
            let l = s.link(&inv.ifname)?;
            s.add_addr(l.index, ip, range.prefix)?;
            s.set_up(l.index)?;
            s.replace_route(l.index, Ipv4Addr::UNSPECIFIED, 0, range.gateway)?;
            Ok(l)
        })?;
        Ok::<_, Error>((host_link, pod_link))
    })();
    let (host_link, pod_link) = match configured {
        Ok(links) => links,
        Err(e) => {
            let _ = host.del_link(&host_name);
            return Err(e);
        }
    };
    Ok(CniResult {
        cni_version: CNI_VERSION.into(),
        interfaces: vec![
            Interface {
                name: conf.bridge.clone(),
                mac: bridge.mac.clone(),
                sandbox: String::new(),
            },
            Interface {
                name: host_name,
                mac: host_link.mac,
                sandbox: String::new(),
            },
            Interface {
                name: inv.ifname.clone(),
                mac: pod_link.mac,
                sandbox: inv.netns.clone(),
            },
        ],
        ips: vec![IpConfig {
            version: None,
            address: format!("{ip}/{}", range.prefix),
            gateway: Some(range.gateway.to_string()),
            interface: 2,
        }],
        routes: vec![Route {
            dst: "0.0.0.0/0".into(),
            gw: Some(range.gateway.to_string()),
        }],
        dns: json!({}),
    })
}

/// Releases the address and removes the pod's interface (with it its veth peer); whatever is
/// already gone is not an error, as the spec asks of DEL.
fn del(inv: &Invocation, conf: &NetConf) -> Result<(), Error> {
    store_of(conf)
        .lock()?
        .release(&inv.container_id, &inv.ifname)?;
    if inv.netns.is_empty() || !Path::new(&inv.netns).exists() {
        return Ok(());
    }
    let removed = in_netns(&inv.netns, || match Socket::open()?.del_link(&inv.ifname) {
        Ok(()) => Ok(()),
        Err(e) if e.errno == nix::errno::Errno::ENODEV => Ok(()),
        Err(e) => Err(e.into()),
    });
    match removed {
        // A path that is no longer a namespace: the sandbox is gone with its interfaces.
        Err(Error::Netns {
            errno: nix::errno::Errno::EINVAL,
            ..
        }) => Ok(()),
        other => other,
    }
}

fn check(inv: &Invocation, conf: &NetConf) -> Result<(), Error> {
    if store_of(conf)
        .lock()?
        .find(&inv.container_id, &inv.ifname)?
        .is_none()
    {
        return Err(Error::Config(format!(
            "no address is allocated to container {} interface {}",
            inv.container_id, inv.ifname
        )));
    }
    in_netns(&inv.netns, || {
        Socket::open()?.link(&inv.ifname)?;
        Ok(())
    })
}

/// The stdin of the delegated portmap plugin.
pub fn portmap_conf(conf: &NetConf, prev: Option<&CniResult>) -> Value {
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
fn portmap(inv: &Invocation, conf: &NetConf, prev: Option<&CniResult>) -> Result<(), Error> {
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
    let input = portmap_conf(conf, prev).to_string();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn invocations_need_what_their_verb_needs() {
        let add = Invocation::from_env(env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/a:/opt/b"),
        ]))
        .unwrap();
        assert_eq!(add.verb, Verb::Add);
        assert_eq!(
            add.path,
            vec![PathBuf::from("/opt/a"), PathBuf::from("/opt/b")]
        );
        let e = Invocation::from_env(env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
        ]))
        .unwrap_err();
        assert_eq!(e.to_string(), "CNI_NETNS is required");
        assert_eq!(e.code(), 4);
        // DEL may come without a namespace (the sandbox's is gone).
        let del = Invocation::from_env(env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
        ]))
        .unwrap();
        assert_eq!(del.netns, "");
        assert!(Invocation::from_env(env(&[("CNI_COMMAND", "GC")])).is_err());
    }

    #[test]
    fn version_and_bad_configurations() {
        let inv = Invocation::from_env(env(&[("CNI_COMMAND", "VERSION")])).unwrap();
        let v: Value = serde_json::from_str(&run(&inv, b"").unwrap()).unwrap();
        assert_eq!(
            v["supportedVersions"],
            json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0"])
        );
        let inv = Invocation::from_env(env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
        ]))
        .unwrap();
        let e = run(
            &inv,
            br#"{"cniVersion":"0.2.0","name":"n","type":"minik8s-bridge"}"#,
        )
        .unwrap_err();
        assert_eq!(e.code(), 1);
        let e = run(
            &inv,
            br#"{"cniVersion":"1.0.0","name":"n","type":"flannel"}"#,
        )
        .unwrap_err();
        assert_eq!(e.code(), 7);
        let e = run(&inv, b"{").unwrap_err();
        assert_eq!(e.code(), 6);
        let j: Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(j["code"], 6);
        assert!(j["msg"].as_str().unwrap().starts_with("decoding"));
    }

    #[test]
    fn the_conflist_reads_back_as_this_plugins_configuration() {
        let list = conflist("minik8s", "cni0", "10.244.0.0/24", Path::new("/var/lib/x"));
        let mut plugin = list["plugins"][0].clone();
        plugin["cniVersion"] = list["cniVersion"].clone();
        plugin["name"] = list["name"].clone();
        plugin["runtimeConfig"] =
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]});
        let conf: NetConf = serde_json::from_value(plugin).unwrap();
        assert_eq!(conf.kind, BRIDGE_TYPE);
        assert_eq!(
            range_of(&conf).unwrap().gateway,
            Ipv4Addr::new(10, 244, 0, 1)
        );
        assert_eq!(conf.data_dir.as_deref(), Some(Path::new("/var/lib/x")));
        assert!(conf.hairpin_mode);
        let pm = portmap_conf(&conf, None);
        assert_eq!(pm["type"], "portmap");
        assert_eq!(pm["snat"], true);
        assert_eq!(pm["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
        assert!(pm.get("prevResult").is_none());
    }

    #[test]
    fn results_have_the_shape_containerd_reads() {
        // go-cni files each IP under the interface its index names; CRI takes eth0's.
        let r = loopback_result("/run/netns/x");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["interfaces"][0]["sandbox"], "/run/netns/x");
        assert_eq!(
            v["ips"][0],
            json!({"address": "127.0.0.1/8", "interface": 0})
        );
        assert_eq!(v["dns"], json!({}));
        // containerd's loopback network is 0.3.1: addresses carry their version then.
        let v = serde_json::to_value(in_version(r, "0.3.1")).unwrap();
        assert_eq!(v["cniVersion"], "0.3.1");
        assert_eq!(v["ips"][0]["version"], "4");
        assert_eq!(v["ips"][1]["version"], "6");
    }
}
