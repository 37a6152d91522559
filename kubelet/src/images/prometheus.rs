//! The Prometheus image (`quay.io/prometheus/prometheus:v<version>`, as the
//! prometheus-community chart runs it), made of the Prometheus installed on this machine
//! (Debian's `prometheus` package, which hack/packages.txt installs for promtool anyway): no
//! registry, and the same version promtool checks the configuration with.
//!
//! Debian builds it against glibc, so the image carries the binary and exactly what `ldd`
//! says it loads (libc and the dynamic loader), under a merged /usr as Debian's. Laid out as
//! upstream's image: `/bin/prometheus`, `/etc/prometheus/prometheus.yml` (a configuration
//! that scrapes Prometheus itself), data in `/prometheus`, running as `nobody`. Debian's web
//! templates (`/usr/share/prometheus/web`, which its binary reads instead of embedding
//! them) come along when installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::build::{DEFAULT_PATH, base_dirs, is_static_elf, usr_merged};
use super::oci::{ContainerConfig, Node, Tree};
use super::{Error, IoContext, Result, run};

/// Upstream's repository; the tag is `v` and the version of the binary the image carries.
pub const PROMETHEUS_REPOSITORY: &str = "quay.io/prometheus/prometheus";
/// Where Debian installs Prometheus.
pub const PROMETHEUS_BINARY: &str = "/usr/bin/prometheus";
/// Debian's web templates and static files.
const WEB_DIR: &str = "/usr/share/prometheus/web";

/// What a container of the image runs when nothing else is said: upstream's image's
/// configuration, scraping Prometheus itself.
const DEFAULT_CONFIG: &str = "\
# The configuration of quay.io/prometheus/prometheus when no other is given: Prometheus
# scrapes itself. Mount your own at /etc/prometheus.
global:
  scrape_interval: 15s
  evaluation_interval: 15s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: [\"localhost:9090\"]
";

/// The version `prometheus --version` reports, without Debian's `+ds` (build metadata, which
/// an image tag may not carry): `prometheus, version 2.42.0+ds (branch: ...)` → `2.42.0`.
pub fn parse_version(output: &str) -> Option<String> {
    let line = output.lines().next()?;
    let rest = line.split("version ").nth(1)?;
    let version = rest.split_whitespace().next()?;
    let version = version.split('+').next()?;
    let valid = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    valid.then(|| version.to_string())
}

/// The files `ldd` names: the libraries (`libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x..)`)
/// and the loader (`/lib64/ld-linux-x86-64.so.2 (0x..)`); the vDSO has no file. A library
/// `ldd` cannot find is an error.
pub fn parse_ldd(output: &str) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = match line.split_once(" => ") {
            Some((name, "not found")) => {
                return Err(Error::Invalid(format!(
                    "ldd: {name} not found on this machine"
                )));
            }
            Some((_, found)) => found,
            None => line,
        };
        let path = path.split(" (0x").next().unwrap_or(path).trim();
        if path.starts_with('/') {
            paths.push(PathBuf::from(path));
        }
    }
    Ok(paths)
}

/// The image's reference for the Prometheus at `binary`: its version, asked of it.
pub fn reference(binary: &Path) -> Result<String> {
    let out = run(Command::new(binary).arg("--version"))?;
    let version = parse_version(&String::from_utf8_lossy(&out)).ok_or_else(|| {
        Error::Invalid(format!(
            "{} --version did not say its version",
            binary.display()
        ))
    })?;
    Ok(format!("{PROMETHEUS_REPOSITORY}:v{version}"))
}

/// Adds the host file `host` at its usr-merged path, and a link from the path it was named by
/// when that differs (`/lib64/ld-linux-x86-64.so.2` is a link to the loader on Debian).
fn add_host_library(tree: &mut Tree, host: &Path) -> Result<()> {
    let real = std::fs::canonicalize(host).ctx(|| format!("resolving {}", host.display()))?;
    let rel = |p: &Path| p.to_string_lossy().trim_start_matches('/').to_string();
    let dest = usr_merged(&rel(&real));
    tree.host_file(&dest, 0o755, &real)?;
    let named = usr_merged(&rel(host));
    if named != dest {
        tree.symlink(&named, &format!("/{dest}"))?;
    }
    Ok(())
}

/// The image's layer and configuration for the Prometheus at `binary`, and its history line.
pub fn tree(binary: &Path) -> Result<(Tree, ContainerConfig, String)> {
    let mut tree = Tree::new();
    base_dirs(&mut tree)?;
    tree.host_file("usr/bin/prometheus", 0o755, binary)?;
    let mut libraries = Vec::new();
    if !is_static_elf(binary)? {
        let out = run(Command::new("ldd").arg(binary))?;
        libraries = parse_ldd(&String::from_utf8_lossy(&out))?;
        if libraries.is_empty() {
            return Err(Error::Invalid(format!(
                "ldd {} named no libraries",
                binary.display()
            )));
        }
        for lib in &libraries {
            add_host_library(&mut tree, lib)?;
        }
    }
    // Debian's /bin, /lib and /lib64 are links into /usr.
    for top in ["bin", "sbin", "lib", "lib64"] {
        if tree.get(&format!("usr/{top}")).is_some() {
            tree.symlink(top, &format!("usr/{top}"))?;
        }
    }
    let web = Path::new(WEB_DIR);
    if web.is_dir() {
        tree.add_host_dir(web, &|rel| Some(format!("usr/share/prometheus/web/{rel}")))?;
    }
    tree.file("etc/prometheus/prometheus.yml", 0o644, DEFAULT_CONFIG)?;
    tree.dir("prometheus", 0o777)?;
    let config = ContainerConfig {
        user: Some("nobody".to_string()),
        env: vec![DEFAULT_PATH.to_string()],
        entrypoint: vec!["/bin/prometheus".to_string()],
        cmd: vec![
            "--config.file=/etc/prometheus/prometheus.yml".to_string(),
            "--storage.tsdb.path=/prometheus".to_string(),
        ],
        working_dir: Some("/prometheus".to_string()),
        ..Default::default()
    };
    let libs: Vec<String> = libraries.iter().map(|p| p.display().to_string()).collect();
    let created_by = format!(
        "{} and {}",
        binary.display(),
        if libs.is_empty() {
            "no libraries (static)".to_string()
        } else {
            libs.join(" ")
        }
    );
    Ok((tree, config, created_by))
}

/// Follows `path` through the tree's symbolic links, as the container's kernel would.
pub fn resolve<'t>(tree: &'t Tree, path: &str) -> Option<&'t Node> {
    let components = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .collect()
    };
    let mut rest: std::collections::VecDeque<String> = components(path).into();
    let mut at: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(part) = rest.pop_front() {
        if part == ".." {
            at.pop();
            continue;
        }
        at.push(part);
        if let Some(Node::Symlink { target }) = tree.get(&at.join("/")) {
            hops += 1;
            if hops > 40 {
                return None;
            }
            at.pop();
            if target.starts_with('/') {
                at.clear();
            }
            for c in components(target).into_iter().rev() {
                rest.push_front(c);
            }
        }
    }
    tree.get(&at.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::oci::Source;

    #[test]
    fn versions_of_debian_and_upstream() {
        assert_eq!(
            parse_version(
                "prometheus, version 2.42.0+ds (branch: debian/sid, revision: 2.42.0+ds-5+deb12u1)\n  build user: x\n"
            )
            .as_deref(),
            Some("2.42.0")
        );
        assert_eq!(
            parse_version("prometheus, version 2.53.1 (branch: HEAD, revision: 14cfec3f)")
                .as_deref(),
            Some("2.53.1")
        );
        assert_eq!(parse_version("something else"), None);
        assert_eq!(parse_version("prometheus, version ../x (b)"), None);
    }

    #[test]
    fn ldd_names_libraries_and_the_loader() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd8a1f0000)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f34a3dba000)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f34a3faf000)\n";
        assert_eq!(
            parse_ldd(out).unwrap(),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    #[test]
    fn links_are_followed() {
        let mut t = Tree::new();
        t.file("usr/lib/x86_64-linux-gnu/libc.so.6", 0o755, "c")
            .unwrap();
        t.symlink("lib", "usr/lib").unwrap();
        t.symlink("usr/lib64/ld.so", "../lib/x86_64-linux-gnu/libc.so.6")
            .unwrap();
        t.symlink("lib64", "usr/lib64").unwrap();
        assert!(matches!(
            resolve(&t, "/lib/x86_64-linux-gnu/libc.so.6"),
            Some(Node::File { .. })
        ));
        assert!(matches!(
            resolve(&t, "/lib64/ld.so"),
            Some(Node::File { .. })
        ));
        assert!(resolve(&t, "/lib/missing").is_none());
        t.symlink("loop", "/loop").unwrap();
        assert!(resolve(&t, "/loop").is_none());
    }

    /// The image holds the installed binary, its loader and its libraries where the binary
    /// looks for them.
    #[test]
    fn the_tree_holds_the_binary_and_its_loader() {
        let binary = Path::new(PROMETHEUS_BINARY);
        if !binary.exists() {
            eprintln!("skipped: no {PROMETHEUS_BINARY} (apt-get install prometheus)");
            return;
        }
        let (tree, config, created_by) = tree(binary).unwrap();
        match resolve(&tree, "/bin/prometheus") {
            Some(Node::File {
                source: Source::Path(p),
                mode,
            }) => {
                assert_eq!(p, binary);
                assert_eq!(*mode, 0o755);
            }
            other => panic!("/bin/prometheus: {other:?}"),
        }
        assert_eq!(config.entrypoint, ["/bin/prometheus"]);
        assert!(resolve(&tree, "/etc/prometheus/prometheus.yml").is_some());
        assert!(matches!(
            resolve(&tree, "/etc/passwd"),
            Some(Node::File { .. })
        ));
        if is_static_elf(binary).unwrap() {
            return;
        }
        let out = run(Command::new("ldd").arg(binary)).unwrap();
        let needed = parse_ldd(&String::from_utf8_lossy(&out)).unwrap();
        assert!(
            needed
                .iter()
                .any(|p| p.to_string_lossy().contains("ld-linux")),
            "{needed:?}"
        );
        for path in needed {
            let path = path.to_string_lossy();
            match resolve(&tree, &path) {
                Some(Node::File {
                    source: Source::Path(p),
                    ..
                }) => assert_eq!(
                    std::fs::canonicalize(p).unwrap(),
                    std::fs::canonicalize(&*path).unwrap()
                ),
                other => panic!("{path}: {other:?} ({created_by})"),
            }
        }
        assert!(
            reference(binary)
                .unwrap()
                .starts_with(PROMETHEUS_REPOSITORY)
        );
    }
}
