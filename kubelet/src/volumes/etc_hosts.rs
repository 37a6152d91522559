//! The pod's `/etc/hosts`, written by the kubelet as upstream's (pkg/kubelet/kubelet_pods.go
//! `ensureHostsFile`): localhost, the pod's own name at its IP (so `hostname -i` works), and
//! the pod's `hostAliases`. A host-network pod gets the node's file with its aliases.
//! Containers that mount something at `/etc/hosts` themselves keep theirs.

use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::HostAlias;

pub const ETC_HOSTS: &str = "/etc/hosts";
const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const MANAGED_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

/// Where the file lives in the pod's directory.
pub fn path(pod_dir: &Path) -> PathBuf {
    pod_dir.join("etc-hosts")
}

/// The managed file of a pod on the pod network.
pub fn managed(
    ips: &[&str],
    hostname: &str,
    domain: Option<&str>,
    aliases: &[HostAlias],
) -> String {
    let mut s = String::from(MANAGED_HEADER);
    s.push_str("127.0.0.1\tlocalhost\n");
    s.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    s.push_str("fe00::0\tip6-localnet\n");
    s.push_str("fe00::0\tip6-mcastprefix\n");
    s.push_str("fe00::1\tip6-allnodes\n");
    s.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        let _ = match domain {
            Some(d) => writeln!(s, "{ip}\t{hostname}.{d}\t{hostname}"),
            None => writeln!(s, "{ip}\t{hostname}"),
        };
    }
    s.push_str(&alias_entries(aliases));
    s
}

/// The file of a host-network pod: the node's own, then the aliases.
pub fn host_network(node_hosts: &str, aliases: &[HostAlias]) -> String {
    format!(
        "{MANAGED_HEADER_HOST_NETWORK}{node_hosts}{}",
        alias_entries(aliases)
    )
}

fn alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let _ = writeln!(
            s,
            "{}\t{}",
            a.ip,
            a.hostnames.clone().unwrap_or_default().join("\t")
        );
    }
    s
}

/// Writes `content` to the pod's file (0644) and returns its path.
pub fn write(pod_dir: &Path, content: &str) -> io::Result<PathBuf> {
    let file = path(pod_dir);
    std::fs::create_dir_all(pod_dir)?;
    std::fs::write(&file, content)?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_file_as_upstream_writes_it() {
        let aliases = vec![HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
        }];
        assert_eq!(
            managed(
                &["10.244.0.5"],
                "web-0",
                Some("web.default.svc.cluster.local"),
                &aliases
            ),
            "# Kubernetes-managed hosts file.\n\
             127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\n\
             fe00::0\tip6-mcastprefix\n\
             fe00::1\tip6-allnodes\n\
             fe00::2\tip6-allrouters\n\
             10.244.0.5\tweb-0.web.default.svc.cluster.local\tweb-0\n\
             \n\
             # Entries added by HostAliases.\n\
             10.1.2.3\tfoo.local\tbar.local\n"
        );
        assert!(
            managed(&["10.244.0.5"], "x", None, &[])
                .ends_with("fe00::2\tip6-allrouters\n10.244.0.5\tx\n")
        );
        assert_eq!(
            host_network("127.0.0.1 localhost\n", &[]),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
    }
}
