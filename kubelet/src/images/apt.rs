//! Debian packages through apt: what a set of packages depends on, which versions apt would
//! take, and the `.deb` files themselves, checked against apt's SHA-256. Images are made of
//! them. [`Apt::host`] asks the machine's own apt; [`Apt::release`] keeps a private apt
//! configuration that follows another Debian release, without touching the host's.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use super::{Error, IoContext, Result, ensure_dir, run};

/// The keyring Debian's archive keys come in (package debian-archive-keyring).
const ARCHIVE_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// An apt configuration to ask.
#[derive(Clone, Debug, Default)]
pub struct Apt {
    /// `-o` options every apt command gets.
    options: Vec<String>,
}

impl Apt {
    /// The machine's own apt (its sources, lists and cache).
    pub fn host() -> Apt {
        Apt::default()
    }

    /// A private apt for `suite` (`trixie`) of `mirror` in `dir`: its own sources list,
    /// package lists and cache, signatures checked against the host's Debian archive keyring.
    /// The host's sources, lists and installed packages are left alone.
    pub fn release(dir: &Path, mirror: &str, suite: &str) -> Result<Apt> {
        let lists = dir.join("lists");
        let cache = dir.join("cache");
        ensure_dir(&lists.join("partial"))?;
        ensure_dir(&cache.join("archives").join("partial"))?;
        let sources = dir.join("sources.list");
        let line = format!("deb [signed-by={ARCHIVE_KEYRING}] {mirror} {suite} main\n");
        if std::fs::read_to_string(&sources).ok().as_deref() != Some(line.as_str()) {
            std::fs::write(&sources, &line).ctx(|| format!("writing {}", sources.display()))?;
        }
        let path = |p: &Path| p.display().to_string();
        Ok(Apt {
            options: vec![
                format!("Dir::Etc::SourceList={}", path(&sources)),
                "Dir::Etc::SourceParts=/nonexistent".into(),
                format!("Dir::State::Lists={}", path(&lists)),
                format!("Dir::Cache={}", path(&cache)),
                "Dir::State::status=/dev/null".into(),
                "APT::Get::List-Cleanup=false".into(),
            ],
        })
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        for o in &self.options {
            cmd.arg("-o").arg(o);
        }
        cmd
    }

    /// `apt-get update` of this configuration's lists.
    pub fn update(&self) -> Result<()> {
        run(self.command("apt-get").args(["update", "-q"]))?;
        Ok(())
    }

    /// The dependency closure of `roots` (Depends and PreDepends, no Recommends), without the
    /// packages `excluded` names. One `apt-cache depends --recurse` gives the whole graph
    /// (through the excluded packages too, which are then not followed).
    pub fn resolve(
        &self,
        roots: &[&str],
        excluded: &dyn Fn(&str) -> bool,
    ) -> Result<BTreeSet<String>> {
        let out = run(self
            .command("apt-cache")
            .args([
                "depends",
                "--recurse",
                "--no-recommends",
                "--no-suggests",
                "--no-conflicts",
                "--no-breaks",
                "--no-replaces",
                "--no-enhances",
            ])
            .args(roots))?;
        let graph = parse_apt_depends(&String::from_utf8_lossy(&out));
        Ok(closure(roots, &graph, excluded))
    }

    /// The candidate versions of `packages`, from `apt-cache show`.
    pub fn candidates(&self, packages: &BTreeSet<String>) -> Result<Vec<DebPackage>> {
        let out = run(self
            .command("apt-cache")
            .args(["show", "--no-all-versions"])
            .args(packages))?;
        let text = String::from_utf8_lossy(&out);
        let mut found = Vec::new();
        for para in text.split("\n\n") {
            let mut fields = BTreeMap::new();
            for line in para.lines() {
                if let Some((k, v)) = line.split_once(": ")
                    && !line.starts_with(' ')
                {
                    fields.insert(k, v.trim());
                }
            }
            let (Some(name), Some(version), Some(arch), Some(sha)) = (
                fields.get("Package"),
                fields.get("Version"),
                fields.get("Architecture"),
                fields.get("SHA256"),
            ) else {
                continue;
            };
            found.push(DebPackage {
                name: name.to_string(),
                version: version.to_string(),
                architecture: arch.to_string(),
                sha256: sha.to_string(),
            });
        }
        for p in packages {
            if !found.iter().any(|d| &d.name == p) {
                return Err(Error::Invalid(format!(
                    "apt knows no candidate for {p} (run apt-get update)"
                )));
            }
        }
        Ok(found)
    }

    /// Makes sure every package is in the cache directory, downloading what is missing with
    /// `apt-get download`, and checks each file's SHA-256 against apt's. Returns their paths.
    pub fn fetch(&self, packages: &[DebPackage], cache_dir: &Path) -> Result<Vec<PathBuf>> {
        ensure_dir(cache_dir)?;
        let mut missing = Vec::new();
        for p in packages {
            let path = cache_dir.join(p.file_name());
            if !path.exists() || file_sha256(&path)? != p.sha256 {
                missing.push(format!("{}={}", p.name, p.version));
            }
        }
        if !missing.is_empty() {
            tracing::info!(count = missing.len(), dir = %cache_dir.display(), "downloading Debian packages");
            run(self
                .command("apt-get")
                .args(["download", "-q"])
                .args(&missing)
                .current_dir(cache_dir))?;
        }
        let mut paths = Vec::new();
        for p in packages {
            let path = cache_dir.join(p.file_name());
            let got = file_sha256(&path)?;
            if got != p.sha256 {
                return Err(Error::Invalid(format!(
                    "{}: sha256 {got}, apt says {}",
                    path.display(),
                    p.sha256
                )));
            }
            paths.push(path);
        }
        Ok(paths)
    }
}

/// A Debian package at the version apt chose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebPackage {
    pub name: String,
    pub version: String,
    pub architecture: String,
    pub sha256: String,
}

impl DebPackage {
    /// The file name `apt-get download` gives it.
    pub fn file_name(&self) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            self.architecture
        )
    }
}

fn strip_arch(name: &str) -> &str {
    name.split(':').next().unwrap_or(name)
}

/// One alternative of a dependency, as `apt-cache depends` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Alternative {
    Package(String),
    /// A virtual package and the packages that provide it.
    Virtual(Vec<String>),
}

/// Parses `apt-cache depends` output: package → its Depends and PreDepends, each a list of
/// alternatives.
fn parse_apt_depends(text: &str) -> BTreeMap<String, Vec<Vec<Alternative>>> {
    let mut out: BTreeMap<String, Vec<Vec<Alternative>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut group: Vec<Alternative> = Vec::new();
    let mut group_open = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            current = Some(strip_arch(line.trim()).to_string());
            out.entry(strip_arch(line.trim()).to_string()).or_default();
            group.clear();
            group_open = false;
            continue;
        }
        let Some(pkg) = current.as_ref() else {
            continue;
        };
        if line.starts_with("    ") {
            // A provider of the virtual package on the line before.
            if let Some(Alternative::Virtual(providers)) = group.last_mut() {
                providers.push(strip_arch(line.trim()).to_string());
            } else if let Some(Alternative::Virtual(providers)) = out
                .get_mut(pkg)
                .and_then(|g| g.last_mut())
                .and_then(|g| g.last_mut())
            {
                providers.push(strip_arch(line.trim()).to_string());
            }
            continue;
        }
        let or_next = line.starts_with(" |");
        let body = line.trim_start_matches([' ', '|']);
        let Some((kind, dep)) = body.split_once(": ") else {
            continue;
        };
        if kind != "Depends" && kind != "PreDepends" {
            continue;
        }
        let dep = dep.trim();
        let alt = match dep.strip_prefix('<').and_then(|d| d.strip_suffix('>')) {
            Some(_) => Alternative::Virtual(Vec::new()),
            None => Alternative::Package(strip_arch(dep).to_string()),
        };
        if !group_open {
            group.clear();
        }
        group.push(alt);
        group_open = or_next;
        if !or_next {
            out.get_mut(pkg)
                .expect("entry made above")
                .push(std::mem::take(&mut group));
        }
    }
    out
}

/// Picks the package that satisfies a dependency: the first alternative, or the first provider
/// of a virtual one. `None` when an excluded package satisfies it (or nothing can).
fn choose<'a>(group: &'a [Alternative], excluded: &dyn Fn(&str) -> bool) -> Option<&'a str> {
    for alt in group {
        match alt {
            Alternative::Package(p) if excluded(p) => return None,
            Alternative::Package(p) => return Some(p),
            Alternative::Virtual(providers) => {
                if providers.iter().any(|p| excluded(p)) {
                    return None;
                }
                if let Some(p) = providers.first() {
                    return Some(p);
                }
            }
        }
    }
    None
}

fn closure(
    roots: &[&str],
    graph: &BTreeMap<String, Vec<Vec<Alternative>>>,
    excluded: &dyn Fn(&str) -> bool,
) -> BTreeSet<String> {
    let mut seen: BTreeSet<String> = roots.iter().map(|s| s.to_string()).collect();
    let mut queue: Vec<String> = seen.iter().cloned().collect();
    while let Some(pkg) = queue.pop() {
        for group in graph.get(&pkg).map(Vec::as_slice).unwrap_or_default() {
            if let Some(p) = choose(group, excluded)
                && seen.insert(p.to_string())
            {
                queue.push(p.to_string());
            }
        }
    }
    seen
}

fn file_sha256(path: &Path) -> Result<String> {
    let mut f = File::open(path).ctx(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).ctx(|| format!("reading {}", path.display()))?;
    Ok(format!("{:x}", h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_apt_cache_depends() {
        let text = "\
python3.11
  Depends: python3.11-minimal
 |Depends: media-types
  Depends: mime-support
  PreDepends: libc6:any
tzdata
 |Depends: debconf
  Depends: <debconf-2.0>
    cdebconf
    debconf
libfoo
  Depends: <virt>
    provider-a
  Recommends: ignored
";
        let deps = parse_apt_depends(text);
        let py = &deps["python3.11"];
        assert_eq!(py.len(), 3);
        let excluded = |p: &str| p == "dpkg" || p.starts_with("debconf") || p == "cdebconf";
        assert_eq!(choose(&py[0], &excluded), Some("python3.11-minimal"));
        assert_eq!(choose(&py[1], &excluded), Some("media-types"));
        assert_eq!(choose(&py[2], &excluded), Some("libc6"));
        assert_eq!(
            choose(&deps["tzdata"][0], &excluded),
            None,
            "debconf is left out"
        );
        assert_eq!(choose(&deps["libfoo"][0], &excluded), Some("provider-a"));
        assert_eq!(deps["libfoo"].len(), 1);
        // The closure follows the first choices and stops at excluded packages.
        let graph = parse_apt_depends(
            "a\n  Depends: b\n |Depends: c\n  Depends: d\nb\n  Depends: dpkg\ndpkg\n  Depends: e\nd\n",
        );
        let got: Vec<String> = closure(&["a"], &graph, &excluded).into_iter().collect();
        assert_eq!(got, ["a", "b", "c"]);
    }

    #[test]
    fn deb_file_names_encode_epochs() {
        let p = DebPackage {
            name: "libfoo".into(),
            version: "1:2.3-4".into(),
            architecture: "amd64".into(),
            sha256: String::new(),
        };
        assert_eq!(p.file_name(), "libfoo_1%3a2.3-4_amd64.deb");
    }
}
