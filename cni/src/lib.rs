//! The node's CNI plugin. containerd runs a CNI plugin chain for every pod sandbox it starts
//! and stops; the stock chain (loopback, then bridge, which runs host-local, then portmap) is
//! four Go programs, ~19 ms of CPU per pod start on this project's machines, a sixth of all a
//! pod's start costs. This one program does what that chain does for minik8s's network in
//! ~3 ms: the `loopback` type brings `lo` up; the bridge type attaches a veth to the
//! node's bridge with an address from host-local's store (same files, so the two agree), and
//! hands hostPort mappings to the stock `portmap` plugin only when a pod has some.
//!
//! It speaks CNI 1.0.0 (ADD, DEL, CHECK, VERSION) over environment, stdin and stdout, and
//! reads 0.3.x and 0.4.0 configurations too.

pub mod bridge;
pub mod conf;
pub mod ipam;
pub mod loopback;
pub mod netlink;
pub mod portmap;

use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;

use serde_json::json;

pub use conf::{CniResult, NetConf, conflist};
use ipam::IpamError;
use netlink::NetlinkError;

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

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
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
    let answer = |r: CniResult| serde_json::to_string(&conf::in_version(r, &conf.cni_version));
    match (conf.kind.as_str(), inv.verb) {
        (LOOPBACK_TYPE, Verb::Add) => Ok(answer(loopback::add(inv)?)?),
        // The namespace goes away with the sandbox; nothing of ours outlives it.
        (LOOPBACK_TYPE, Verb::Del) => Ok(String::new()),
        (LOOPBACK_TYPE, Verb::Check) => {
            loopback::check(inv)?;
            Ok(String::new())
        }
        (BRIDGE_TYPE, Verb::Add) => {
            let result = bridge::add(inv, &conf)?;
            if let Err(e) = portmap::run(inv, &conf, Some(&result)) {
                // Leave nothing behind: the runtime does not DEL after a failed ADD.
                let _ = bridge::del(inv, &conf);
                return Err(e);
            }
            Ok(answer(result)?)
        }
        (BRIDGE_TYPE, Verb::Del) => {
            portmap::run(inv, &conf, None)?;
            bridge::del(inv, &conf)?;
            Ok(String::new())
        }
        (BRIDGE_TYPE, Verb::Check) => {
            bridge::check(inv, &conf)?;
            Ok(String::new())
        }
        (other, _) => Err(Error::Config(format!(
            "type {other:?} is not {BRIDGE_TYPE:?} or {LOOPBACK_TYPE:?}"
        ))),
    }
}

/// Runs `f` with this thread in the network namespace at `path`, then moves it back.
pub(crate) fn in_netns<T>(path: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::path::Path;

    use serde_json::Value;

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
            bridge::range_of(&conf).unwrap().gateway,
            Ipv4Addr::new(10, 244, 0, 1)
        );
        assert_eq!(conf.data_dir.as_deref(), Some(Path::new("/var/lib/x")));
        assert!(conf.hairpin_mode);
        let pm = portmap::stdin(&conf, None);
        assert_eq!(pm["type"], "portmap");
        assert_eq!(pm["snat"], true);
        assert_eq!(pm["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
        assert!(pm.get("prevResult").is_none());
    }

    #[test]
    fn results_have_the_shape_containerd_reads() {
        // go-cni files each IP under the interface its index names; CRI takes eth0's.
        let r = loopback::result("/run/netns/x");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["interfaces"][0]["sandbox"], "/run/netns/x");
        assert_eq!(
            v["ips"][0],
            json!({"address": "127.0.0.1/8", "interface": 0})
        );
        assert_eq!(v["dns"], json!({}));
        // containerd's loopback network is 0.3.1: addresses carry their version then.
        let v = serde_json::to_value(conf::in_version(r, "0.3.1")).unwrap();
        assert_eq!(v["cniVersion"], "0.3.1");
        assert_eq!(v["ips"][0]["version"], "4");
        assert_eq!(v["ips"][1]["version"], "6");
    }
}
