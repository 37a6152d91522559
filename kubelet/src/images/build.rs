//! The images a node needs, built from files on this machine with no registry:
//!
//! - `registry.k8s.io/pause:3.9`: our own `hack/images/pause.c`, compiled static with gcc.
//! - `docker.io/library/busybox:1.36`: the static busybox of Debian 13 (1.37; Debian 12's
//!   1.35 crashes on `wget -T`, which half of all tutorials run) and its applet links.
//! - `docker.io/library/python:3`: Debian 12's python3 packages and the libraries they need,
//!   fetched with `apt-get download` into a cache and unpacked with `dpkg-deb -x`.
//! - `quay.io/prometheus/prometheus:v<version>`: the Prometheus installed on this machine and
//!   the libraries it loads (see [`super::prometheus`]).

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::{Duration, Instant};

use super::apt::{self, Apt};
use super::oci::{ContainerConfig, ImageSpec, Tree, WrittenImage, write_archive};
use super::prometheus;
use super::{Error, IoContext, Result, ensure_dir, run};

pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.9";
pub const BUSYBOX_IMAGE: &str = "docker.io/library/busybox:1.36";
pub const PYTHON_IMAGE: &str = "docker.io/library/python:3";

const PAUSE_SOURCE: &str = include_str!("../../../hack/images/pause.c");
pub(super) const DEFAULT_PATH: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnogroup:x:65534:\nnobody:x:65534:\n";

/// The packages the python image starts from; everything they depend on comes along, except
/// what [`EXCLUDED_PACKAGES`] leaves out.
pub const PYTHON_PACKAGES: &[&str] = &[
    "python3",
    "python3-minimal",
    "python3.11",
    "python3.11-minimal",
    "libpython3-stdlib",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "tzdata",
];

/// Packages a container image has no use for: package management, perl, init systems. A
/// dependency on one of these is taken as satisfied.
pub const EXCLUDED_PACKAGES: &[&str] = &[
    "dpkg",
    "debconf",
    "cdebconf",
    "debconf-2.0",
    "install-info",
    "tar",
    "perl",
    "perl-base",
    "systemd",
    "systemd-sysv",
    "libsystemd0",
    "init-system-helpers",
    "debianutils",
    "sensible-utils",
    "libc-bin",
    "base-files",
    "base-passwd",
    "mailcap",
    "mime-support",
];

fn excluded(pkg: &str) -> bool {
    EXCLUDED_PACKAGES.contains(&pkg) || pkg.starts_with("perl-") || pkg.starts_with("libperl")
}

/// One of the images we know how to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ImageKind {
    Pause,
    Busybox,
    Python,
    Prometheus,
}

impl ImageKind {
    pub const ALL: [ImageKind; 4] = [
        ImageKind::Pause,
        ImageKind::Busybox,
        ImageKind::Python,
        ImageKind::Prometheus,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ImageKind::Pause => "pause",
            ImageKind::Busybox => "busybox",
            ImageKind::Python => "python",
            ImageKind::Prometheus => "prometheus",
        }
    }

    /// The full reference the image is imported under; for prometheus the repository only,
    /// as its tag is the version of the binary it carries ([`prometheus::reference`]).
    pub fn reference(self) -> &'static str {
        match self {
            ImageKind::Pause => PAUSE_IMAGE,
            ImageKind::Busybox => BUSYBOX_IMAGE,
            ImageKind::Python => PYTHON_IMAGE,
            ImageKind::Prometheus => prometheus::PROMETHEUS_REPOSITORY,
        }
    }

    /// `<name>.tar`, the archive's file name in the output directory.
    pub fn file_name(self) -> String {
        format!("{}.tar", self.name())
    }
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ImageKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ImageKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "unknown image {s:?} (pause, busybox, python, prometheus)"
                ))
            })
    }
}

/// Where images go and what they are built from.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// The archives are written here as `<name>.tar`.
    pub out_dir: PathBuf,
    /// Downloaded Debian packages are kept here between builds.
    pub cache_dir: PathBuf,
    /// A static busybox to use instead of Debian 13's busybox-static.
    pub busybox: Option<PathBuf>,
    /// Where Debian 13's packages come from.
    pub debian_mirror: String,
    /// The C compiler for the pause program.
    pub cc: PathBuf,
    /// The CA bundle put into the python image.
    pub ca_bundle: PathBuf,
    /// The Prometheus the prometheus image carries (dynamically linked ones with the
    /// libraries `ldd` names).
    pub prometheus: PathBuf,
}

impl BuildOptions {
    pub fn new(out_dir: impl Into<PathBuf>) -> BuildOptions {
        let out_dir = out_dir.into();
        BuildOptions {
            cache_dir: out_dir.join("cache"),
            out_dir,
            busybox: None,
            debian_mirror: apt::DEFAULT_MIRROR.to_string(),
            cc: PathBuf::from("gcc"),
            ca_bundle: PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
            prometheus: PathBuf::from(prometheus::PROMETHEUS_BINARY),
        }
    }
}

/// An archive that was built, and how long that took.
#[derive(Clone, Debug)]
pub struct BuiltImage {
    pub kind: ImageKind,
    pub image: WrittenImage,
    pub duration: Duration,
}

/// Builds one image into `<out_dir>/<name>.tar`.
pub fn build(kind: ImageKind, opts: &BuildOptions) -> Result<BuiltImage> {
    let start = Instant::now();
    let scratch = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(ensure_dir(&opts.out_dir)?)
        .ctx(|| format!("scratch directory in {}", opts.out_dir.display()))?;
    let mut reference = kind.reference().to_string();
    let (tree, config, created_by) = match kind {
        ImageKind::Pause => pause_tree(opts, scratch.path())?,
        ImageKind::Busybox => busybox_tree(opts, scratch.path())?,
        ImageKind::Python => python_tree(opts, scratch.path())?,
        ImageKind::Prometheus => {
            reference = prometheus::reference(&opts.prometheus)?;
            prometheus::tree(&opts.prometheus)?
        }
    };
    let spec = ImageSpec {
        reference: reference.clone(),
        config,
        layers: vec![tree],
        created_by: vec![created_by],
    };
    let image = write_archive(&spec, &opts.out_dir.join(kind.file_name()))?;
    let duration = start.elapsed();
    tracing::info!(
        image = reference,
        path = %image.path.display(),
        digest = %image.manifest.digest,
        size = image.archive_size,
        ?duration,
        "built image"
    );
    Ok(BuiltImage {
        kind,
        image,
        duration,
    })
}

/// Whether an ELF file is statically linked (has no program interpreter).
pub fn is_static_elf(path: &Path) -> Result<bool> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut data))
        .ctx(|| format!("reading {}", path.display()))?;
    let bad = || Error::Invalid(format!("{} is not a 64-bit ELF file", path.display()));
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        return Err(bad());
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(data[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let Some(p_type) = data.get(at..at + 4) else {
            return Err(bad());
        };
        if u32::from_le_bytes(p_type.try_into().expect("4 bytes")) == 3 {
            return Ok(false); // PT_INTERP
        }
    }
    Ok(true)
}

type Built = (Tree, ContainerConfig, String);

fn pause_tree(opts: &BuildOptions, scratch: &Path) -> Result<Built> {
    let src = scratch.join("pause.c");
    let bin = scratch.join("pause");
    std::fs::write(&src, PAUSE_SOURCE).ctx(|| format!("writing {}", src.display()))?;
    run(Command::new(&opts.cc)
        .args(["-static", "-Os", "-s", "-o"])
        .arg(&bin)
        .arg(&src))?;
    if !is_static_elf(&bin)? {
        return Err(Error::Invalid("gcc -static made a dynamic pause".into()));
    }
    let mut tree = Tree::new();
    let data = std::fs::read(&bin).ctx(|| format!("reading {}", bin.display()))?;
    tree.file("pause", 0o755, data)?;
    let config = ContainerConfig {
        entrypoint: vec!["/pause".to_string()],
        env: vec![DEFAULT_PATH.to_string()],
        user: Some("65535:65535".to_string()),
        ..Default::default()
    };
    Ok((tree, config, "gcc -static -Os pause.c".to_string()))
}

/// The base directories of a small Linux root filesystem.
pub(super) fn base_dirs(tree: &mut Tree) -> Result<()> {
    for dir in ["dev", "etc", "home", "proc", "sys", "usr/local/bin", "var"] {
        tree.dir(dir, 0o755)?;
    }
    tree.dir("root", 0o700)?;
    tree.dir("tmp", 0o1777)?;
    tree.dir("var/tmp", 0o1777)?;
    tree.file("etc/passwd", 0o644, PASSWD)?;
    tree.file("etc/group", 0o644, GROUP)?;
    Ok(())
}

/// The Debian release whose busybox-static the image carries, and where it puts the binary.
const BUSYBOX_SUITE: &str = "trixie";
const BUSYBOX_PACKAGE: &str = "busybox-static";
const BUSYBOX_PATH: &str = "usr/bin/busybox";

/// Debian 13's busybox-static, fetched through a private apt configuration kept in the cache
/// directory and unpacked in `scratch`: the binary and the package's version.
fn debian_busybox(opts: &BuildOptions, scratch: &Path) -> Result<(PathBuf, String)> {
    let apt = Apt::release(
        &opts.cache_dir.join(format!("apt-{BUSYBOX_SUITE}")),
        &opts.debian_mirror,
        BUSYBOX_SUITE,
    )?;
    let wanted = std::collections::BTreeSet::from([BUSYBOX_PACKAGE.to_string()]);
    // Lists are fetched once and kept; when the version they name has left the mirror, they
    // are fetched again.
    let fetched = apt
        .candidates(&wanted)
        .and_then(|p| Ok((apt.fetch(&p, &opts.cache_dir)?, p)));
    let (debs, packages) = match fetched {
        Ok(done) => done,
        Err(_) => {
            apt.update()?;
            let p = apt.candidates(&wanted)?;
            (apt.fetch(&p, &opts.cache_dir)?, p)
        }
    };
    let root = scratch.join("busybox");
    ensure_dir(&root)?;
    run(Command::new("dpkg-deb").arg("-x").arg(&debs[0]).arg(&root))?;
    Ok((root.join(BUSYBOX_PATH), packages[0].version.clone()))
}

fn busybox_tree(opts: &BuildOptions, scratch: &Path) -> Result<Built> {
    let (busybox, source) = match &opts.busybox {
        Some(path) => (path.clone(), path.display().to_string()),
        None => {
            let (path, version) = debian_busybox(opts, scratch)?;
            (
                path,
                format!("debian {BUSYBOX_SUITE}: {BUSYBOX_PACKAGE}={version}"),
            )
        }
    };
    let busybox = &busybox;
    if !is_static_elf(busybox)? {
        return Err(Error::Invalid(format!(
            "{} is not static (install busybox-static)",
            busybox.display()
        )));
    }
    let list = run(Command::new(busybox).arg("--list-full"))?;
    let mut tree = Tree::new();
    base_dirs(&mut tree)?;
    for dir in ["bin", "sbin", "usr/bin", "usr/sbin"] {
        tree.dir(dir, 0o755)?;
    }
    let data = std::fs::read(busybox).ctx(|| format!("reading {}", busybox.display()))?;
    tree.file("bin/busybox", 0o755, data)?;
    let mut applets = 0;
    for line in String::from_utf8_lossy(&list).lines() {
        let path = line.trim().trim_start_matches('/');
        if path.is_empty() || path == "bin/busybox" {
            continue;
        }
        tree.symlink(path, "/bin/busybox")?;
        applets += 1;
    }
    if applets == 0 {
        return Err(Error::Invalid(format!(
            "{} --list-full listed no applets",
            busybox.display()
        )));
    }
    let config = ContainerConfig {
        env: vec![DEFAULT_PATH.to_string()],
        cmd: vec!["sh".to_string()],
        ..Default::default()
    };
    Ok((tree, config, format!("{source}, {applets} applets")))
}

/// A path of the root filesystem under a merged /usr as in Debian 12 (`lib/x` → `usr/lib/x`,
/// ...; `bin`, `sbin`, `lib`, `lib64` themselves are links into /usr).
pub(super) fn usr_merged(rel: &str) -> String {
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        if rel == top || rel.starts_with(&format!("{top}/")) {
            return format!("usr/{rel}");
        }
    }
    rel.to_string()
}

/// Where a path of a Debian package goes in the image: merged /usr (see [`usr_merged`]),
/// without manuals and documentation (copyright files stay).
fn python_path(rel: &str) -> Option<String> {
    for skip in ["usr/share/man", "usr/share/info", "usr/share/lintian"] {
        if rel == skip || rel.starts_with(&format!("{skip}/")) {
            return None;
        }
    }
    if let Some(doc) = rel.strip_prefix("usr/share/doc/") {
        // Keep usr/share/doc/<pkg> and its copyright file.
        let parts: Vec<&str> = doc.split('/').collect();
        if parts.len() > 1 && !(parts.len() == 2 && parts[1] == "copyright") {
            return None;
        }
    }
    Some(usr_merged(rel))
}

fn python_tree(opts: &BuildOptions, scratch: &Path) -> Result<Built> {
    let apt = Apt::host();
    let names = apt.resolve(PYTHON_PACKAGES, &excluded)?;
    let packages = apt.candidates(&names)?;
    tracing::info!(packages = ?packages.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), "python image packages");
    let debs = apt.fetch(&packages, &opts.cache_dir)?;
    let root = scratch.join("rootfs");
    ensure_dir(&root)?;
    // A few dpkg-deb at a time: each is mostly waiting on xz.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get() * 2);
    std::thread::scope(|s| {
        let handles: Vec<_> = debs
            .chunks(debs.len().div_ceil(workers).max(1))
            .map(|chunk| {
                let root = &root;
                s.spawn(move || -> Result<()> {
                    for deb in chunk {
                        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(root))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("dpkg-deb thread"))
    })?;
    let mut tree = Tree::new();
    base_dirs(&mut tree)?;
    tree.add_host_dir(&root, &python_path)?;
    for top in ["bin", "sbin", "lib", "lib64"] {
        if tree.get(&format!("usr/{top}")).is_some() {
            tree.symlink(top, &format!("usr/{top}"))?;
        }
    }
    let bundle = std::fs::read(&opts.ca_bundle).ctx(|| {
        format!(
            "reading the CA bundle {} (install ca-certificates)",
            opts.ca_bundle.display()
        )
    })?;
    tree.file("etc/ssl/certs/ca-certificates.crt", 0o644, bundle)?;
    tree.symlink("usr/lib/ssl/certs", "/etc/ssl/certs")?;
    tree.symlink("usr/lib/ssl/cert.pem", "/etc/ssl/certs/ca-certificates.crt")?;
    if tree.get("usr/bin/python3").is_none() {
        return Err(Error::Invalid(
            "the python packages installed no /usr/bin/python3".into(),
        ));
    }
    let config = ContainerConfig {
        env: vec![
            DEFAULT_PATH.to_string(),
            "LANG=C.UTF-8".to_string(),
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt".to_string(),
        ],
        cmd: vec!["python3".to_string()],
        ..Default::default()
    };
    let versions: Vec<String> = packages
        .iter()
        .map(|p| format!("{}={}", p.name, p.version))
        .collect();
    Ok((tree, config, format!("debian: {}", versions.join(" "))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_paths_are_usr_merged() {
        assert_eq!(python_path("lib").as_deref(), Some("usr/lib"));
        assert_eq!(
            python_path("lib/x86_64-linux-gnu/libc.so.6").as_deref(),
            Some("usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(python_path("library"), Some("library".to_string()));
        assert_eq!(
            python_path("usr/bin/python3.11").as_deref(),
            Some("usr/bin/python3.11")
        );
        assert_eq!(python_path("usr/share/man/man1/x.1.gz"), None);
        assert_eq!(python_path("usr/share/doc/libc6/changelog.gz"), None);
        assert!(python_path("usr/share/doc/libc6/copyright").is_some());
        assert!(python_path("usr/share/doc/libc6").is_some());
    }

    #[test]
    fn image_kinds_round_trip() {
        for k in ImageKind::ALL {
            assert_eq!(k.name().parse::<ImageKind>().unwrap(), k);
        }
        assert!("nginx".parse::<ImageKind>().is_err());
        assert_eq!(ImageKind::Busybox.reference(), BUSYBOX_IMAGE);
    }

    #[test]
    fn builds_are_reproducible() {
        let have_gcc = Command::new("gcc").arg("--version").output().is_ok();
        let have_busybox = Path::new("/bin/busybox").exists();
        let mut kinds = Vec::new();
        if have_gcc {
            kinds.push(ImageKind::Pause);
        }
        if have_busybox {
            kinds.push(ImageKind::Busybox);
        }
        for kind in kinds {
            let a = tempfile::tempdir().unwrap();
            let b = tempfile::tempdir().unwrap();
            // The host's busybox: this test needs no network.
            let opts = |dir: &Path| BuildOptions {
                busybox: have_busybox.then(|| PathBuf::from("/bin/busybox")),
                ..BuildOptions::new(dir)
            };
            let x = build(kind, &opts(a.path())).unwrap();
            let y = build(kind, &opts(&b.path().join("elsewhere"))).unwrap();
            assert_eq!(x.image.manifest.digest, y.image.manifest.digest, "{kind}");
            assert_eq!(
                std::fs::read(&x.image.path).unwrap(),
                std::fs::read(&y.image.path).unwrap()
            );
            assert!(a.path().join(kind.file_name()).is_file());
            // Nothing but the archive is left in the output directory.
            let left: Vec<_> = std::fs::read_dir(a.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(left, [std::ffi::OsString::from(kind.file_name())]);
        }
    }

    #[test]
    fn static_elf_detection() {
        if Path::new("/bin/busybox").exists() {
            assert!(is_static_elf(Path::new("/bin/busybox")).unwrap());
        }
        assert!(!is_static_elf(Path::new("/bin/sh")).unwrap());
    }
}
