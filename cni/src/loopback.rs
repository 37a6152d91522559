//! The loopback network containerd adds to every pod: `lo` up, nothing else. Its DEL is a no-op,
//! since the namespace goes away with the sandbox.

use serde_json::json;

use crate::conf::{CniResult, Interface, IpConfig};
use crate::netlink::Socket;
use crate::{CNI_VERSION, Error, Invocation, in_netns};

pub fn add(inv: &Invocation) -> Result<CniResult, Error> {
    in_netns(&inv.netns, || {
        let s = Socket::open()?;
        let lo = s.link("lo")?;
        s.set_up(lo.index)?;
        Ok(())
    })?;
    Ok(result(&inv.netns))
}

pub fn check(inv: &Invocation) -> Result<(), Error> {
    in_netns(&inv.netns, || {
        Socket::open()?.link("lo")?;
        Ok(())
    })
}

pub fn result(netns: &str) -> CniResult {
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
