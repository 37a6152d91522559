//! The pod's network: a veth from the node's bridge into the pod's namespace, an address from
//! host-local's store, a default route through the bridge's gateway address.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::conf::{CniResult, DEFAULT_DATA_DIR, Interface, IpConfig, NetConf, Route};
use crate::ipam::{Range, Store};
use crate::netlink::{self, Socket};
use crate::{CNI_VERSION, Error, Invocation, in_netns, io};

pub fn range_of(conf: &NetConf) -> Result<Range, Error> {
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

pub fn add(inv: &Invocation, conf: &NetConf) -> Result<CniResult, Error> {
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
        if let Some(mtu) = conf.mtu {
            host.set_mtu(host_link.index, mtu)?;
        }
        if conf.hairpin_mode {
            host.set_hairpin(host_link.index)?;
        }
        let pod_link = in_netns(&inv.netns, || {
            let s = Socket::open()?;
            let l = s.link(&inv.ifname)?;
            if let Some(mtu) = conf.mtu {
                s.set_mtu(l.index, mtu)?;
            }
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
pub fn del(inv: &Invocation, conf: &NetConf) -> Result<(), Error> {
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

pub fn check(inv: &Invocation, conf: &NetConf) -> Result<(), Error> {
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
