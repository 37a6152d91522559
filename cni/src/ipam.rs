//! Pod addresses from the node's range, kept in host-local's on-disk layout (a file per
//! address holding `<container ID>\r\n<interface>`, `last_reserved_ip.0`, a `lock` file for
//! flock) so that allocations made by the stock plugins before an upgrade are honoured, and
//! both can never hand out one address twice.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("locking {path}: {errno}")]
    Lock {
        path: String,
        errno: nix::errno::Errno,
    },
    #[error("no address left in {0}")]
    Exhausted(String),
    #[error("{ip} is already allocated to container {id} interface {ifname}")]
    Duplicate {
        ip: Ipv4Addr,
        id: String,
        ifname: String,
    },
}

/// An IPv4 range: the subnet, and the gateway (its first address unless told).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub network: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
}

impl Range {
    /// Parses `a.b.c.d/n`; the gateway is the subnet's first address.
    pub fn parse(cidr: &str) -> Option<Range> {
        let (ip, bits) = cidr.split_once('/')?;
        let ip: Ipv4Addr = ip.parse().ok()?;
        let prefix: u8 = bits.parse().ok()?;
        if prefix > 30 {
            return None;
        }
        let network = Ipv4Addr::from(u32::from(ip) & mask(prefix));
        Some(Range {
            network,
            prefix,
            gateway: Ipv4Addr::from(u32::from(network) + 1),
        })
    }

    /// First and last assignable address: the network and broadcast addresses excluded.
    fn bounds(&self) -> (u32, u32) {
        let net = u32::from(self.network);
        (net + 1, (net | !mask(self.prefix)) - 1)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

/// Addresses in the order host-local tries them: from the one after the last reserved,
/// round the range once, never the gateway.
pub fn candidates(range: &Range, last: Option<Ipv4Addr>) -> impl Iterator<Item = Ipv4Addr> {
    let (first, end) = range.bounds();
    let start = match last.map(u32::from) {
        Some(l) if l >= first && l < end => l + 1,
        _ => first,
    };
    let gateway = u32::from(range.gateway);
    (start..=end)
        .chain(first..start)
        .filter(move |ip| *ip != gateway)
        .map(Ipv4Addr::from)
}

/// What a reservation file holds.
pub fn owner(id: &str, ifname: &str) -> String {
    format!("{}\r\n{ifname}", id.trim())
}

/// host-local's store for one network: `<data dir>/<network name>`.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// The store, locked for as long as this lives.
#[derive(Debug)]
pub struct Locked<'a> {
    store: &'a Store,
    _lock: Flock<File>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IpamError + '_ {
    move |source| IpamError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl Store {
    pub fn new(data_dir: &Path, network: &str) -> Store {
        Store {
            dir: data_dir.join(network),
        }
    }

    pub fn lock(&self) -> Result<Locked<'_>, IpamError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let path = self.dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        let lock =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| IpamError::Lock {
                path: path.display().to_string(),
                errno,
            })?;
        let _ = lock.as_fd();
        Ok(Locked {
            store: self,
            _lock: lock,
        })
    }
}

impl Locked<'_> {
    fn last_path(&self) -> PathBuf {
        self.store.dir.join("last_reserved_ip.0")
    }

    /// Every reservation: address and owner.
    fn reservations(&self) -> Result<Vec<(Ipv4Addr, String)>, IpamError> {
        let dir = &self.store.dir;
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let entry = entry.map_err(io(dir))?;
            let Some(ip) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<Ipv4Addr>().ok())
            else {
                continue;
            };
            let owner = std::fs::read_to_string(entry.path()).unwrap_or_default();
            out.push((ip, owner.trim().to_string()));
        }
        Ok(out)
    }

    /// The address reserved for this container's interface, if any.
    pub fn find(&self, id: &str, ifname: &str) -> Result<Option<Ipv4Addr>, IpamError> {
        let want = owner(id, ifname);
        Ok(self
            .reservations()?
            .into_iter()
            .find(|(_, o)| *o == want)
            .map(|(ip, _)| ip))
    }

    /// Reserves the next free address for this container's interface.
    pub fn allocate(&self, range: &Range, id: &str, ifname: &str) -> Result<Ipv4Addr, IpamError> {
        if let Some(ip) = self.find(id, ifname)? {
            return Err(IpamError::Duplicate {
                ip,
                id: id.into(),
                ifname: ifname.into(),
            });
        }
        let last = std::fs::read_to_string(self.last_path())
            .ok()
            .and_then(|s| s.trim().parse().ok());
        for ip in candidates(range, last) {
            let path = self.store.dir.join(ip.to_string());
            let mut file = match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(&path)(e)),
            };
            file.write_all(owner(id, ifname).as_bytes())
                .map_err(io(&path))?;
            let last = self.last_path();
            std::fs::write(&last, ip.to_string()).map_err(io(&last))?;
            return Ok(ip);
        }
        Err(IpamError::Exhausted(format!(
            "{}/{}",
            range.network, range.prefix
        )))
    }

    /// Releases what this container's interface holds; nothing held is not an error.
    pub fn release(&self, id: &str, ifname: &str) -> Result<(), IpamError> {
        let want = owner(id, ifname);
        for (ip, o) in self.reservations()? {
            // host-local before 0.9 wrote the container ID alone.
            if o == want || o == id.trim() {
                let path = self.store.dir.join(ip.to_string());
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&path)(e)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cidr: &str) -> Range {
        Range::parse(cidr).unwrap()
    }

    #[test]
    fn ranges_skip_network_gateway_and_broadcast() {
        let all: Vec<_> = candidates(&r("10.0.0.0/29"), None).collect();
        let want: Vec<Ipv4Addr> = (2..=6).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
        assert_eq!(all, want);
        assert_eq!(r("10.0.0.77/24").network, Ipv4Addr::new(10, 0, 0, 0));
        assert!(Range::parse("10.0.0.0/31").is_none());
        assert!(Range::parse("10.0.0.0").is_none());
    }

    #[test]
    fn candidates_start_after_the_last_reserved_and_wrap() {
        let got: Vec<_> = candidates(&r("10.0.0.0/29"), Some(Ipv4Addr::new(10, 0, 0, 4)))
            .map(|i| i.octets()[3])
            .collect();
        assert_eq!(got, vec![5, 6, 2, 3, 4]);
        // The last address of the range: start again from the first.
        let got: Vec<_> = candidates(&r("10.0.0.0/29"), Some(Ipv4Addr::new(10, 0, 0, 6)))
            .map(|i| i.octets()[3])
            .collect();
        assert_eq!(got, vec![2, 3, 4, 5, 6]);
        // Out of the range (the range changed): from the start.
        let got: Vec<_> = candidates(&r("10.0.0.0/29"), Some(Ipv4Addr::new(9, 0, 0, 1)))
            .map(|i| i.octets()[3])
            .collect();
        assert_eq!(got, vec![2, 3, 4, 5, 6]);
    }

    #[test]
    fn allocate_release_and_reuse_in_host_locals_layout() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), "net");
        let range = r("10.1.0.0/29");
        let l = store.lock().unwrap();
        let a = l.allocate(&range, "c1", "eth0").unwrap();
        let b = l.allocate(&range, "c2", "eth0").unwrap();
        assert_eq!(
            (a, b),
            (Ipv4Addr::new(10, 1, 0, 2), Ipv4Addr::new(10, 1, 0, 3))
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("net/10.1.0.2")).unwrap(),
            "c1\r\neth0"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("net/last_reserved_ip.0")).unwrap(),
            "10.1.0.3"
        );
        assert!(matches!(
            l.allocate(&range, "c1", "eth0"),
            Err(IpamError::Duplicate { .. })
        ));
        assert_eq!(l.find("c2", "eth0").unwrap(), Some(b));
        l.release("c1", "eth0").unwrap();
        l.release("c1", "eth0").unwrap();
        assert_eq!(l.find("c1", "eth0").unwrap(), None);
        // The next allocation goes on from the last reserved, not back to the freed one.
        for (i, want) in [4, 5, 6, 2].into_iter().enumerate() {
            let ip = l.allocate(&range, &format!("n{i}"), "eth0").unwrap();
            assert_eq!(ip, Ipv4Addr::new(10, 1, 0, want));
        }
        assert!(matches!(
            l.allocate(&range, "full", "eth0"),
            Err(IpamError::Exhausted(_))
        ));
    }

    #[test]
    fn release_honours_the_old_id_only_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path(), "net");
        std::fs::create_dir_all(dir.path().join("net")).unwrap();
        std::fs::write(dir.path().join("net/10.1.0.9"), "old\n").unwrap();
        let l = store.lock().unwrap();
        l.release("old", "eth0").unwrap();
        assert!(!dir.path().join("net/10.1.0.9").exists());
    }
}
